"""SPOT's tokens/s at a real model's cost, by replay (issue 62, item 2).

A replay target (``Replay``) is an SDAR model (docs/spec.md 1.1) made of two: a trained bundled
target that decides every token, and a model of a real shape (``real_shape_cost.SHAPES``, random
bf16 weights) that runs every pass the decode runs, on the same rows and the same way (rows alone
or one forward at the width), then the decision's softmax over the real vocabulary; with a drafter,
each pass also reads a stale row at the real vocabulary (a softmax and a top-32). A decode's wall
time is the trained target's schedule (its passes, the rows of each, the drafter's rounds) at the
real model's cost: measured, not multiplied. The trained target's own forward (1.77M parameters)
is inside the time too. The tokens are the trained target's: each run is checked against its exact
decoding at the same width.

A run is ``DRAFTER[:N][@W]``: ``exact``, ``exact@4``, ``spot:4@4`` (the target's SPOT drafter,
budget 4, width 4), ``spot:2`` (rows alone), ``calibrated:4@4``, ``oracle:4@4`` and
``oracle-order:4@4`` (the ceilings: a chain of the exact decode's true decisions, or of its true
positions with the stale tokens, as the benchmark's oracle rows), ``spot:auto`` (budget="auto"
picks N and the width, measured once on the replay target before the problems, its time reported
apart as a server would pay it once). Results go to ``--out`` as each run ends, so a run cut short
keeps them.

    python benchmarks/replay.py --shape sdar-1.7b --target gsm-b32 --out runs/replay.json
"""

import argparse
import copy
import dataclasses
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout
sys.path.insert(0, str(Path(__file__).resolve().parent))

import real_shape_cost as shapes  # noqa: E402
import torch  # noqa: E402

import spotref  # noqa: E402
from spotref.cli.argtypes import guarded, positive_int  # noqa: E402
from spotref.conformance import oracle_drafter  # noqa: E402
from spotref.files import atomic_write_text, check_writable  # noqa: E402
from spotref.names import resolve_drafter  # noqa: E402

PROG = "python benchmarks/replay.py"
ORACLES = ("oracle", "oracle-order")  # the ceilings: the true decisions; the true order with stale tokens
DRAFTERS = ", ".join(("spot", "calibrated", *ORACLES))
RUNS = "exact,exact@2,exact@4,exact@8,spot:2,spot:2@2,spot:4@4,spot:8@8,calibrated:4@4,spot:auto,oracle-order:2@2,oracle-order:4@4,oracle:2@2,oracle:4@4"  # noqa: E501


class Replay:
    """An SDAR model whose logits are ``target``'s and whose cost is also ``real``'s: every call
    runs both on the same ids (``real`` must have ``target``'s block size and at least its
    vocabulary). ``drafted``: a drafter reads a stale row each round (charged per verify pass)."""

    def __init__(self, target, real, drafted: bool):
        assert real.block_size == target.block_size and real.config.vocab_size >= target.config.vocab_size
        self.target, self.real, self.drafted = target, real, drafted
        self.config, self.block_size, self.mask_id = target.config, target.block_size, target.mask_id

    def prefill(self, ids):
        return self.target.prefill(ids), self.real.prefill(ids)

    def denoise(self, cache, states, one_forward=False):  # states: (N, B) -> the target's logits (N, B, V)
        logits = self.target.denoise(cache[0], states, one_forward)
        self.decide(self.real.denoise(cache[1], states, one_forward), states)
        return logits

    def store(self, cache, block):
        self.target.store(cache[0], block)
        self.real.store(cache[1], block)

    def store_and_denoise(self, cache, block, states, one_forward=False):
        self.store(cache, block)
        return self.denoise(cache, states, one_forward)

    def decide(self, real: torch.Tensor, states: torch.Tensor) -> None:
        """What deciding costs at the real vocabulary: a float32 softmax and its maximum over each
        distinct row's logits (real: (N, B, V)); with a drafter, a stale row's top 32 too."""
        R = len(torch.unique(states, dim=0))
        probs = real[:R].softmax(-1, dtype=torch.float32)  # (R, B, V)
        probs.amax(-1)
        if self.drafted:
            probs[0].topk(32, dim=-1)


def parse_run(text: str) -> dict:
    """``DRAFTER[:N][@W]`` -> generate's drafter, budget and width keywords."""
    head, _, width = text.partition("@")
    drafter, _, budget = head.partition(":")
    number = lambda v: v.isdigit() and int(v) > 0  # noqa: E731
    if (
        drafter not in ("exact", "spot", "calibrated", *ORACLES)
        or (drafter == "exact" and budget)
        or not (number(budget) or budget in ("", "auto"))
        or not (number(width) or width == "")
    ):
        raise ValueError(f"--runs: {text!r} is not exact[@W], spot:auto or DRAFTER:N[@W], DRAFTER one of {DRAFTERS}")
    kw = {"width": int(width) if width else None}
    if drafter != "exact":
        kw.update(drafter=drafter, budget=budget if budget == "auto" else int(budget or 16))
    return kw


def parse(argv):
    p = argparse.ArgumentParser(prog=PROG, description=__doc__.splitlines()[0])
    p.add_argument("--shape", default="sdar-1.7b", help=f"the real shape: {sdar_shapes()}")
    p.add_argument("--target", default="gsm-b32", help="the bundled SDAR target whose schedule is replayed")
    p.add_argument(
        "--block",
        type=positive_int,
        default=None,
        help="decode the target's weights in blocks of this size (gsm-b16 is gsm-b32's in 16)",
    )
    p.add_argument("--runs", default=RUNS, help="comma-separated DRAFTER[:N][@W] (see the module docstring)")
    p.add_argument("--problems", type=positive_int, default=2, help="held-out problems (seed 0)")
    p.add_argument("--tokens", type=positive_int, default=128, help="new tokens per problem")
    p.add_argument("--threads", type=positive_int, default=None, help="torch threads (default: torch's)")
    p.add_argument("--out", default="runs/replay.json", help="JSON results path")
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = parse(argv)
    return guarded(PROG, lambda: run(args))


def run(args) -> int:
    out = check_writable(args.out)
    runs = {r: parse_run(r) for r in args.runs.split(",")}
    if shapes.SHAPES.get(args.shape, ("",))[0] != "sdar":
        raise ValueError(f"--shape: {args.shape!r} is not an SDAR shape; SDAR shapes: {sdar_shapes()}")
    if args.threads:
        torch.set_num_threads(args.threads)
    target = spotref.load_target(args.target)
    decider = target.model
    if args.block:  # the same weights in blocks of another size (the target's drafters stay its own)
        decider = copy.copy(target.model)
        decider.config = dataclasses.replace(target.model.config, block_size=args.block)
    real = shapes.build(args.shape, decider.block_size)
    problems = [target.encode(p) for p, _ in target.heldout(args.problems, seed=0)]
    record = {"command": " ".join([PROG, *sys.argv[1:]]), "shape": args.shape, "target": args.target,
              "block": decider.block_size,
              "tokens": args.tokens, "threads": torch.get_num_threads(), "runs": {}}  # fmt: skip
    exact = {}  # width -> the target's exact tokens per problem (its own decode, no replay)
    for name, kw in runs.items():
        res = replay_run(target, decider, real, problems, args.tokens, kw, exact)
        record["runs"][name] = res
        atomic_write_text(out, json.dumps(record, indent=1))
        print(f"{name}: {res['tokens_per_s']:.3f} tok/s, {res['passes']} passes, width {res['width']}, "
              f"identical {res['identical']}", flush=True)  # fmt: skip
    print(table(record))
    return 0


def sdar_shapes() -> str:
    return ", ".join(n for n, (f, _) in shapes.SHAPES.items() if f == "sdar")


def replay_run(target, decider, real, problems: list, tokens: int, kw: dict, exact: dict) -> dict:
    """One run over ``problems``: its tokens, passes, rows, wall time and width, and whether its
    tokens are ``decider``'s (the target's model, or it in other blocks) exact decoding at the
    width it ran (``exact``: a cache by width)."""
    model = Replay(decider, real, drafted="drafter" in kw)
    kw = dict(kw)
    oracle = kw.get("drafter") if kw.get("drafter") in ORACLES else None
    if "drafter" in kw and not oracle:  # the target's own drafter, looked up by the target (not by the replay)
        kw = {**kw, "drafter": resolve_drafter(kw["drafter"], target.model)}
    measure_s = 0.0
    if kw.get("budget") == "auto":  # measured once, as a server would, then every problem decoded with it
        t = time.perf_counter()
        auto = spotref.Speculator.for_model(model, drafter=kw["drafter"], budget="auto", width=kw["width"])
        measure_s = time.perf_counter() - t
        kw = {**kw, "drafter": auto.round_drafter, "budget": auto.budget, "width": auto.width}
    stops, passes, rows, wall, generated, same, width = target.stop_ids, 0, 0, 0.0, 0, True, kw["width"]
    draft_s = 0.0
    for i, prompt in enumerate(problems):
        if oracle:  # the exact decode's own trajectory, proposed as a chain
            truth = exact_decode(decider, prompt, i, tokens, stops, width, exact)
            kw["drafter"] = oracle_drafter(truth, stale_tokens=oracle != "oracle")
        t = time.perf_counter()
        out = spotref.generate(model, prompt, tokens, stop_ids=stops, **kw)
        wall += time.perf_counter() - t
        width = out.stats["width"]
        same &= out.tokens == exact_decode(decider, prompt, i, tokens, stops, width, exact).tokens
        passes, generated = passes + out.passes, generated + len(out.tokens)
        rows, draft_s = rows + sum(out.stats["draft_nodes"]), draft_s + out.stats["draft_s"]
    return {"passes": passes, "rows": rows, "generated": generated, "wall_s": round(wall, 3), "width": width,
            "budget": out.stats["budget"] if "drafter" in kw else None, "draft_s": round(draft_s, 3),
            "auto_measure_s": round(measure_s, 3),
            "tokens_per_s": generated / wall, "identical": bool(same)}  # fmt: skip


def exact_decode(decider, prompt, i: int, tokens: int, stops, width, exact: dict):
    """``decider``'s exact decoding of problem ``i`` at ``width``, decoded once (``exact``: by (width, i))."""
    if (width, i) not in exact:
        exact[(width, i)] = spotref.generate(decider, prompt, tokens, stop_ids=stops, width=width)
    return exact[(width, i)]


def table(record: dict) -> str:
    """Markdown: each run's passes, tokens/s, and its ratio to exact decoding rows alone and at its width."""
    runs = record["runs"]
    base = runs.get("exact")
    lines = ["| run | width | passes | tokens/s | x exact (rows alone) | x exact at its width | identical |",
             "|---|---|---|---|---|---|---|"]  # fmt: skip
    for name, r in runs.items():
        at = next((x for x in runs.values() if x["budget"] is None and x["width"] == r["width"]), None)
        ratio = lambda b: f"{r['tokens_per_s'] / b['tokens_per_s']:.2f}" if b else "-"  # noqa: E731
        lines.append(f"| {name} | {r['width'] or 'rows alone'} | {r['passes']} | {r['tokens_per_s']:.3f} | "
                     f"{ratio(base)} | {ratio(at)} | {'yes' if r['identical'] else 'NO'} |")  # fmt: skip
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
