"""``python -m workbench.bench.costmodel``: the table behind ``budget="auto"`` on this machine.

``--profile`` measures first where a SPOT round's time goes, per node budget N: the target pass,
the drafter's order-model calls, its inputs (stale distributions, coupled tokens, features), tree
growth (the rest of the drafter), building the verify batch and the walk (decisions and
acceptance). The totals (target, drafter, build + walk) are the decoder's own timers on a plain
run; the splits inside the drafter and inside build + walk are the shares ``cProfile`` measures on
a second run of the same generations (its per-call overhead inflates Python-heavy parts, so the
split is a guide, the totals are not).
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
from dataclasses import dataclass
from types import SimpleNamespace

import numpy as np
import torch

import spotref
from spotref.cli.argtypes import guarded, int_list, nonneg_int, positive_int, temperature_arg
from spotref.cli.options import Options
from spotref.cli.report import table
from spotref.drafters import order
from spotref.drafters.budget import BUDGETS, RoundBudget, choose_budget, draft_times, expected_commits, verify_times
from spotref.load.targets import DEFAULT_TARGET, load_target
from spotref.names import drafter_for, resolve_drafter
from spotref.record.prompts import prompts_for
from spotref.spec import decode

# --- the GPU projection: SDAR-8B on one H200, from the roofline ------------------------------
H200 = dict(flops=790e12, bandwidth=4.8e12)  # dense bf16 FLOP/s, HBM bytes/s
SDAR_8B = dict(weights=7.57e9, layers=36, kv_heads=8, head_dim=128)  # params read per forward:
# 36 layers x (attention 41.9M + MLP 151M) + lm_head 622M (../shared/sdar-8b-chat/config.json;
# the embedding table is gathered, not read whole)
PROJECT_BUDGETS = (1, 2, 4, 8, 16, 32, 64)


def roofline_ms(N: int, block: int = 32, context: int = 512, gpu=H200, model=SDAR_8B) -> float:
    """Milliseconds of one verify forward over N block states: bf16 weights and the KV cache read
    once, 2 FLOPs per weight per token; the larger of the memory and compute times."""
    kv_bytes = 2 * model["layers"] * model["kv_heads"] * model["head_dim"] * 2 * context
    memory = (2 * model["weights"] + kv_bytes) / gpu["bandwidth"]
    compute = 2 * model["weights"] * N * block / gpu["flops"]
    return 1e3 * max(memory, compute)


def projection_rows(curves: dict, budgets=PROJECT_BUDGETS) -> list:
    """[N, t(N)/t(1), then per (drafter, T) in ``curves``: E(N) and E(N) t(1) / t(N)] (a free drafter)."""
    t1 = roofline_ms(1)
    rows = []
    for N in budgets:
        r = roofline_ms(N) / t1
        row = [N, r]
        for name, T in curves:
            e = expected_commits(SimpleNamespace(curves={order.temperature_key(T): curves[(name, T)]}), N, T)
            row += [e, e / r]
        rows.append(row)
    return rows


def fused_store_rows(model, prompts: list, new_tokens: int, drafter, budget: int, repeats: int = 3) -> list:
    """[fused store, passes/token, tokens/s (median of ``repeats``, the two settings alternated)]."""
    walls, passes, tokens = {False: [], True: []}, {}, {}
    for _ in range(repeats):
        for fused in (False, True):
            res = [
                spotref.generate(model, p, new_tokens, drafter=drafter, budget=budget, fused_store=fused)
                for p in prompts
            ]
            walls[fused].append(sum(r.stats["wall_s"] for r in res))
            passes[fused], tokens[fused] = sum(r.passes for r in res), sum(len(r.tokens) for r in res)
    return [
        ["on" if f else "off", passes[f] / tokens[f], tokens[f] / float(np.median(walls[f]))] for f in (False, True)
    ]


def generate_rule(model, temperature: float):
    """The decision rule ``spotref.generate(model, ..., temperature=temperature)`` decides by."""
    return spotref.Speculator.for_model(model, drafter=None, temperature=temperature).rule


def round_budget_rows(
    model, drafter, prompts: list, new_tokens: int, budget: int, depth: int, temperature: float, repeats: int = 3
) -> list:
    """[tree, passes/token, mean nodes drafted, tokens/s (median of ``repeats``, alternated)] for
    exact decoding, ``drafter`` at ``budget`` as is and cut per round (``RoundBudget`` at the cost model's rate
    E(N) / t(N) for this N on this machine); every output checked identical to exact decoding."""
    tv = verify_times(model)
    t = tv[budget] + draft_times(drafter, model, generate_rule(model, temperature), (budget,), depth)[budget]
    cut = RoundBudget.at(drafter, tv, expected_commits(drafter, budget, temperature) / t, temperature)
    kw = dict(budget=budget, depth=depth, temperature=temperature)
    walls, stats = {"exact": [], "whole": [], "cut per round": []}, {}
    for _ in range(repeats):
        for name, d in (("exact", None), ("whole", drafter), ("cut per round", cut)):
            res = [spotref.generate(model, p, new_tokens, drafter=d, **kw) for p in prompts]
            if name == "exact":
                exact = [r.tokens for r in res]
            elif [r.tokens for r in res] != exact:
                raise SystemExit(f"costmodel: OUTPUT DIFFERS from exact decoding ({name})")
            walls[name].append(sum(r.stats["wall_s"] for r in res))
            nodes = [n for r in res for n in r.stats["draft_nodes"]] or [1]
            stats[name] = (sum(r.passes for r in res), sum(len(r.tokens) for r in res), float(np.mean(nodes)))
    return [
        [name, stats[name][0] / stats[name][1], stats[name][2], stats[name][1] / float(np.median(walls[name]))]
        for name in walls
    ]


PROFILE_BUDGETS = (2, 4, 8, 16, 64)
DRAFTER_PARTS = {  # (file suffix, function): its cumulative time is the part
    "order-model calls": [("drafters/order.py", "forward"), ("drafters/order.py", "sets")],
    "drafter inputs": [
        ("drafters/spot.py", "inputs"),
        ("drafters/inputs.py", "__init__"),
        ("drafters/inputs.py", "top"),
        ("draft.py", "of"),
    ],
}
PROFILE_COLUMNS = [
    "N",
    "rounds",
    "target ms",
    "order-model calls ms",
    "drafter inputs ms",
    "tree growth ms",
    "build + walk ms",
    "commits/round",
    "drafting + bookkeeping",
]


def cumulative(stats: pstats.Stats, funcs) -> float:
    """Cumulative seconds of the functions ``funcs`` [(file suffix, name[, first line])] in a cProfile run."""
    return sum(
        ct
        for (file, line, name), (_, _, _, ct, _) in stats.stats.items()
        if any(name == f[1] and file.replace("\\", "/").endswith(f[0]) and f[2:] in ((), (line,)) for f in funcs)
    )


def drafter_split(run) -> dict:
    """Shares of the drafter's time ("order-model calls", "drafter inputs", "tree growth") in a
    cProfile run of ``run()``."""
    prof = cProfile.Profile()
    prof.runcall(run)
    st = pstats.Stats(prof)
    call = ("decode.py", "propose", decode.propose.__code__.co_firstlineno)  # the drafter's call
    total = max(cumulative(st, [call, ("draft.py", "of")]), 1e-12)
    parts = {k: cumulative(st, f) / total for k, f in DRAFTER_PARTS.items()}
    return {**parts, "tree growth": max(0.0, 1.0 - sum(parts.values()))}


def profile_rows(model, drafter, prompts: list, new_tokens: int, T: float, depth: int, budgets=PROFILE_BUDGETS):
    """One row per N (``PROFILE_COLUMNS``): per verify round, the target pass, the drafter's parts,
    build + walk; commits per round; the drafting + bookkeeping share of the wall time."""
    rows = []
    for N in budgets:
        run = lambda: [
            spotref.generate(model, p, new_tokens, temperature=T, seed=0, drafter=drafter, budget=N, depth=depth)
            for p in prompts
        ]
        st = [r.stats for r in run()]
        rounds = sum(1 for s in st for _, k in s["starts"] if k > 0)
        tot = {k: sum(s[k] for s in st) for k in ("model_s", "draft_s", "book_s", "wall_s")}
        split = drafter_split(run)
        ms = lambda x: 1e3 * x / max(rounds, 1)
        commits = sum(a for s in st for (_, k), a in zip(s["starts"], s["accepted"]) if k > 0) / max(rounds, 1)
        rows.append(
            [
                N,
                rounds,
                ms(tot["model_s"]),
                ms(tot["draft_s"] * split["order-model calls"]),
                ms(tot["draft_s"] * split["drafter inputs"]),
                ms(tot["draft_s"] * split["tree growth"]),
                ms(tot["book_s"]),
                commits,
                f"{100 * (tot['draft_s'] + tot['book_s']) / max(tot['wall_s'], 1e-12):.0f}%",
            ]
        )
    return rows


DESCRIPTION = (
    "The cost model's table on this machine, one torch thread: verify and draft times per node "
    "budget N, the expected commits E(N), commits per second and the N budget='auto' picks; "
    "or, with --profile, --fused-store, --round-budget or --gpu-projection, that report instead."
)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m workbench.bench.costmodel", description=DESCRIPTION)
    add_arguments(p)
    return p


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("target", nargs="?", default=DEFAULT_TARGET, help=f"a bundled target (default {DEFAULT_TARGET})")
    p.add_argument("--drafter", default="spot", help="spot, calibrated or confidence (default spot)")
    p.add_argument("--temperature", type=temperature_arg, default=0.0, help="sampling temperature T (default 0)")
    p.add_argument(
        "--depth", type=nonneg_int, default=32, help="tree depth cap D (default 32, as the bench; generate's is 8)"
    )
    p.add_argument(
        "--profile",
        action="store_true",
        help="where a round's time goes, per N (target, order-model calls, drafter inputs, tree growth, build + walk)",
    )
    p.add_argument("--prompts", type=positive_int, default=4, help="--profile: held-out prompts")
    p.add_argument("--new-tokens", type=positive_int, default=64, help="--profile: new tokens per prompt")
    p.add_argument(
        "--budgets",
        type=int_list(1),
        default=PROFILE_BUDGETS,
        metavar="N,...",
        help=f"--profile: one row per budget N (default {','.join(map(str, PROFILE_BUDGETS))})",
    )
    p.add_argument(
        "--calls",
        choices=("level", "root"),
        default="level",
        help="the SPOT drafter's order-model calls: one per tree level, or one per round",
    )
    p.add_argument(
        "--fused-store",
        action="store_true",
        help="exact decoding and SPOT at N = 4 with and without the fused store: passes/token and tokens/s",
    )
    p.add_argument(
        "--round-budget",
        type=positive_int,
        default=None,
        metavar="N",
        help="the drafter at N as is and cut per round (RoundBudget): passes/token, nodes, tokens/s",
    )
    p.add_argument("--targets-dir", default=None, help="load the target from here (default: bundled)")
    p.add_argument(
        "--gpu-projection",
        action="store_true",
        help="project SDAR-8B on one H200 from the roofline and this target's offline acceptance curves",
    )


@dataclass(frozen=True)
class CostOptions(Options):
    """The options of ``python -m workbench.bench.costmodel`` (``add_arguments``), built once by ``run``."""

    target: str  # a bundled target's name
    drafter: str
    temperature: float
    depth: int  # tree depth cap D
    profile: bool
    prompts: int  # --profile, --fused-store, --round-budget: held-out prompts
    new_tokens: int
    budgets: list[int]  # --profile's rows
    calls: str  # "level" or "root"
    fused_store: bool
    round_budget: int | None
    targets_dir: str | None  # None: the bundled targets
    gpu_projection: bool


def main(argv=None) -> int:
    """``python -m workbench.bench.costmodel [TARGET] [--drafter spot|calibrated|confidence] [--temperature T]``:
    the cost model's table on this machine (verify and draft times, E(N), commits per second)."""
    p = parser()
    args = p.parse_args(argv)
    return guarded(p.prog, lambda: run(args))


def run(args: argparse.Namespace) -> int:
    """The options built once, then the table (or the report) they ask for."""
    o = CostOptions.from_namespace(args)
    torch.set_num_threads(1)
    if o.gpu_projection:
        return project(o.target)
    target = load_target(o.target, *([o.targets_dir] if o.targets_dir else []))
    drafter = resolve_drafter(o.drafter, target.model)
    if o.drafter == "spot":
        drafter.calls = o.calls
    mode = fused_store if o.fused_store else round_budget if o.round_budget else profile if o.profile else cost_table
    mode(o, target, drafter)
    return 0


def fused_store(o: CostOptions, target, drafter) -> None:
    prompts = prompts_for(target, o.prompts, "test", 64)
    for name, d, N in (("exact", None, 1), (f"{o.drafter} N=4", drafter, 4)):
        print(f"{o.target}, {name}, {len(prompts)} prompts x {o.new_tokens} new tokens, T = 0:")
        print(
            table(
                ["fused store", "passes/token", "tokens/s"],
                fused_store_rows(target.model, prompts, o.new_tokens, d, N),
            )
        )


def round_budget(o: CostOptions, target, drafter) -> None:
    prompts = prompts_for(target, o.prompts, "test", 64)
    print(
        f"{o.target}, {o.drafter} drafter, N = {o.round_budget}, T = {o.temperature:g}, "
        f"D = {o.depth}, {len(prompts)} prompts x {o.new_tokens} new tokens:"
    )
    print(
        table(
            ["tree", "passes/token", "nodes drafted", "tokens/s"],
            round_budget_rows(target.model, drafter, prompts, o.new_tokens, o.round_budget, o.depth, o.temperature),
        )
    )


def profile(o: CostOptions, target, drafter) -> None:
    prompts = prompts_for(target, o.prompts, "test", 64)
    print(
        f"{o.target}, {o.drafter} drafter ({o.calls} calls), T = {o.temperature:g}, D = {o.depth}, "
        f"{len(prompts)} prompts x {o.new_tokens} new tokens, per verify round:"
    )
    print(
        table(
            PROFILE_COLUMNS,
            profile_rows(target.model, drafter, prompts, o.new_tokens, o.temperature, o.depth, o.budgets),
        )
    )


def cost_table(o: CostOptions, target, drafter) -> None:
    """Verify and draft times per N on this machine, E(N), and the N budget="auto" picks."""
    model = target.model
    tv = verify_times(model, repeats=5)
    td = draft_times(drafter, model, generate_rule(model, o.temperature), depth=o.depth)
    e = {N: expected_commits(drafter, N, o.temperature) for N in BUDGETS}
    rows = [[N, 1e3 * tv[N], 1e3 * td[N], e[N], e[N] / (tv[N] + td[N]), e[N] / tv[N]] for N in BUDGETS]
    print(table(["N", "verify ms", "draft ms", "E(N) commits/round", "commits/s", "commits/s, free drafter"], rows))
    print(
        f"budget='auto' picks N = {choose_budget({N: tv[N] + td[N] for N in BUDGETS}, e)}; "
        f"exact decoding: {1 / tv[1]:.0f} commits/s (one verify of N = 1 per commit)"
    )


def project(name: str) -> int:
    """Print the GPU projection table for a bundled target's drafter curves."""
    model = load_target(name).model
    spot, cal = drafter_for(model, "spot"), drafter_for(model, "calibrated")
    curves = {
        (d, T): c.curves.get(order.temperature_key(T))
        for d, c in (("spot", spot), ("calibrated", cal))
        for T in (0.0, 1.0)
        if c.curves.get(order.temperature_key(T))
    }
    head = ["N", "t(N)/t(1)"] + [f"{h} {d} T={T:g}" for d, T in curves for h in ("E(N)", "speed-up")]
    flat = roofline_ms(1) * 1e-3 * H200["flops"] / (2 * SDAR_8B["weights"])  # tokens before compute-bound
    print(
        f"SDAR-8B on one H200 (roofline: {roofline_ms(1):.2f} ms per forward, flat up to {flat:.0f} tokens "
        f"= {flat / 32:.1f} block states), acceptance E(N) from {name}'s drafters "
        f"(offline curves, commits per round), drafter cost left out: a projection:"
    )
    print(table(head, projection_rows(curves)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
