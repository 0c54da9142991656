"""Running one benchmark configuration: a target's setup (model, held-out prompts, its own
drafters), exact decoding, a drafter over every prompt (asserted identical to exact decoding),
and the totals a table row is made of. ``workbench.bench.bench`` (one-position rule) and
``workbench.bench.bench_sets`` (the threshold rule, SPOT-Sets) build their tables from these."""

from __future__ import annotations

import copy
import dataclasses
import sys
from dataclasses import dataclass, field

import numpy as np
import torch

import spotref
from spotref import names
from spotref.cli.report import answer_blocks
from spotref.configs import SDARConfig
from spotref.conformance import first_divergence, oracle_drafter
from spotref.drafters.calibrated import CalibratedDrafter, calibrate
from spotref.drafters.order import OrderModel, temperature_key
from spotref.drafters.spot import SpotDrafter
from spotref.names import drafter_for, resolve_drafter
from spotref.record.prompts import prompts_for
from spotref.record.trajectories import record
from spotref.spec.sdar import SDARModel
from workbench.bench.bench_options import BenchOptions


@dataclass
class Setup:
    """A target to benchmark: its model, prompts and its own drafters (None when not shipped)."""

    name: str
    model: object
    prompts: list
    stops: list | None
    spot: object = None
    calibrated: object = None
    exact: dict = field(default_factory=dict)  # T -> [exact Result per prompt]


def target_setup(name: str, options: BenchOptions) -> Setup:
    o = options
    t = names.target(name, o.targets_dir)
    s = Setup(name, t.model, prompts_for(t, o.grid.prompts, "test", o.prompt_tokens), t.stop_ids)
    try:
        s.spot = drafter_for(t.model, "spot", o.drafters_dir)
        s.calibrated = drafter_for(t.model, "calibrated", o.drafters_dir)
    except ValueError as e:
        print(f"bench: {name}: {e}", file=sys.stderr)
    if o.precision:
        s.model = served_in(t.model, o.precision)
    return s


def served_in(model, precision: str):
    """``model`` (its weights shared) with the serving precision ``precision``: every run of the
    bench, recordings and ``budget="auto"`` included, then decides in it."""
    out = copy.copy(model)
    out.config = dataclasses.replace(model.config, extra={**model.config.extra, "torch_dtype": precision})
    return out


def random_setup(options: BenchOptions) -> Setup:
    """No bundled target: a random tiny SDAR, an untrained order model, calibration on 3 prompts."""
    g = options.grid
    torch.manual_seed(options.seed)
    cfg = SDARConfig(
        vocab_size=97,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=16,
        mask_token_id=96,
        block_size=8,
        initializer_range=0.5,
    )
    model = SDARModel(cfg).eval()
    rng = np.random.default_rng(options.seed)
    prompts = [rng.integers(0, 96, 16).tolist() for _ in range(g.prompts)]
    tables = {}
    for T in (0.0, 1.0):
        ds = record(model, prompts[:3], g.new_tokens, T, desc="calibrate")
        tables[temperature_key(T)] = calibrate([ds.row(i) for i in range(len(ds))])
    return Setup("random (untrained)", model, prompts, None, SpotDrafter(OrderModel(8)), CalibratedDrafter(tables))


def make_drafter(name: str, setup: Setup, exact):
    """A drafter by its bench name: the training-free ``confidence`` (confidence sets under the
    threshold rule), the target's own ``spot`` / ``calibrated`` (None when not shipped), or a
    ceiling reading ``exact``'s trajectory: ``oracle`` (the true decisions), ``oracle-order`` /
    ``oracle-sets`` (the true positions or sets with the stale coupled tokens); ``spot-root``: the
    target's SPOT drafter with one order-model call per round."""
    if name == "confidence":
        return "confidence"
    if name == "oracle":
        return oracle_drafter(exact)
    if name in ("oracle-order", "oracle-sets"):
        return oracle_drafter(exact, stale_tokens=True)
    if name == "spot-root":  # the same order model, one call per round
        return (
            None
            if setup.spot is None
            else SpotDrafter(setup.spot.model, setup.spot.header, strict=setup.spot.strict, calls="root")
        )
    return getattr(setup, name)  # "spot" / "calibrated": the target's own, or None


# --- running ----------------------------------------------------------------------------------


def gen(setup: Setup, prompt, T: float, options: BenchOptions, **kw):
    return spotref.generate(
        setup.model, prompt, options.grid.new_tokens, temperature=T, seed=options.seed, stop_ids=setup.stops, **kw
    )


def key(T: float, threshold: float | None):
    """Where ``Setup.exact`` keeps a rule's exact runs: T (one-position rule) or (T, tau)."""
    return T if threshold is None else (T, threshold)


def run_exact(setup: Setup, T: float, options: BenchOptions, threshold: float | None = None) -> list:
    setup.exact[key(T, threshold)] = [gen(setup, p, T, options, threshold=threshold) for p in setup.prompts]
    return setup.exact[key(T, threshold)]


def run_drafter(
    setup: Setup, T: float, name: str, N: int, options: BenchOptions, drafter=None, threshold: float | None = None
) -> list:
    """One configuration over all prompts; exits if any output differs from exact decoding."""
    out, depth = [], options.grid.depth
    for prompt, ex in zip(setup.prompts, setup.exact[key(T, threshold)]):
        d = drafter if drafter is not None else make_drafter(name, setup, ex)
        res = gen(setup, prompt, T, options, drafter=d, budget=N, depth=depth, threshold=threshold)
        where = first_divergence(ex, res.tokens, setup.model.block_size, len(prompt))
        if where is not None:
            rule = "" if threshold is None else f", tau={threshold:g}"
            raise SystemExit(
                f"python -m workbench bench: {setup.name}, T={T:g}{rule}, {name}, N={N}: OUTPUT DIFFERS "
                f"from exact decoding at {where}"
            )
        out.append(res)
    return out


def run_auto(setup: Setup, T: float, name: str, options: BenchOptions, threshold: float | None = None) -> tuple:
    """budget="auto" for drafter ``name``: (the N the cost model picks, its metrics, exact
    decoding's wall time re-measured right before it: the machine is shared and drifts)."""
    drafter = resolve_drafter(make_drafter(name, setup, None), setup.model)
    spec = spotref.Speculator.for_model(  # the route generate takes: measured under the run's own rule
        setup.model,
        temperature=T,
        seed=options.seed,
        threshold=threshold,
        drafter=drafter,
        budget="auto",
        depth=options.grid.depth,
    )
    d, N = spec.round_drafter, spec.budget  # the drafter its measurement chose and cut, at its N
    fresh = metrics([gen(setup, p, T, options, threshold=threshold) for p in setup.prompts])
    return N, metrics(run_drafter(setup, T, name, N, options, drafter=d, threshold=threshold)), fresh["wall"]


def metrics(results: list) -> dict:
    """Totals over one configuration's results (``answer_*``: on answer blocks alone)."""
    tokens = sum(len(r.tokens) for r in results)
    rounds = [(k, a) for r in results for (_, k), a in zip(r.stats["starts"], r.stats["accepted"])]
    verify = [a for k, a in rounds if k > 0] or [a for _, a in rounds]
    wall = sum(r.stats["wall_s"] for r in results)
    answer = [answer_blocks(r) for r in results]  # (tokens, passes) each
    return dict(
        tokens=tokens,
        passes=sum(r.passes for r in results),
        denoise=len(rounds),
        answer_tokens=sum(t for t, _ in answer),
        answer_passes=sum(p for _, p in answer),
        commits=float(np.mean(verify)) if verify else 0.0,
        wall=wall,
        book=sum(r.stats["draft_s"] + r.stats["book_s"] for r in results) / max(wall, 1e-9),
    )


def table_row(cls, m: dict, ex: dict, **keys):
    """One table line of ``cls`` (``bench_report.Row``, ``bench_sets.SetRow``): the ``keys`` that
    name it (target, T, drafter, N, ...) and a configuration's totals ``m`` (``metrics``) against
    its reference run's ``ex`` (exact decoding, or threshold decoding alone), each field by name."""
    per = lambda a, b: a / max(b, 1)
    wall = max(m["wall"], 1e-9)
    measured = dict(
        passes_per_token=per(m["passes"], m["tokens"]),
        tokens_per_pass=per(m["tokens"], m["passes"]),
        fewer_passes=per(ex["passes"], m["passes"]),
        fewer_denoise=per(ex["denoise"], m["denoise"]),
        answer_passes_per_token=per(m["answer_passes"], m["answer_tokens"]),
        answer_fewer_passes=per(ex["answer_passes"], m["answer_passes"]),
        commits_per_round=m["commits"],
        tokens_per_s=m["tokens"] / wall,
        speed_up=ex["wall"] / wall,
        bookkeeping=f"{100 * m['book']:.0f}%",
    )
    values = {**measured, **keys}
    return cls(**{f: values[f] for f in cls._fields})
