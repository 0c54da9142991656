"""``budget="auto"``: the node budget N that maximises expected commits per second on this machine.

A round with budget N costs ``t(N) = verify(N) + draft(N)``: one target forward over N block
states (measured here, on the running machine, against a cache of ``context`` tokens) plus the
drafter's own time on N nodes (measured on a real view). It commits ``E(N)`` decisions on
average: the drafter's offline acceptance curve, measured on held-out trajectories when the
drafter was trained (``SpotDrafter.header["curves"]``; ``CalibratedDrafter.curves``), else a
conservative prior. The choice is ``argmax_N E(N) / t(N)`` over ``BUDGETS``. On a CPU, t(N) grows
almost linearly past a few rows (see docs/prototype notes), so the answer is a small tree; on a
GPU with an 8B target, t(N) is nearly flat and the answer is large.

Where to call it: ``spotref.generate`` resolves ``budget == "auto"`` with ``resolve_budget``
before checking ``budget`` as an int.
"""
from __future__ import annotations

import math
import time

import numpy as np
import torch

from spotref import order

BUDGETS = (1, 2, 4, 8, 16, 32, 64)
PRIOR = {1: 1.0, 64: 2.5}          # E(N) for a drafter without a measured curve (log-interpolated)
_TIMES: dict = {}


def verify_times(model, budgets=BUDGETS, context: int = 128, repeats: int = 3) -> dict:
    """{N: seconds} of one target forward over N states of a block after ``context`` tokens."""
    key = (id(model), tuple(budgets), context)
    if key not in _TIMES:
        B, V, mask_id = model.block_size, model.config.vocab_size, model.mask_id
        g = torch.Generator().manual_seed(0)
        cache = model.prefill(_tokens((context // B * B,), V, mask_id, g))
        out = {}
        for N in budgets:
            states = torch.full((N, B), mask_id, dtype=torch.long)
            states[:, : B // 2] = _tokens((N, B // 2), V, mask_id, g)       # half committed
            out[N] = _median_time(lambda: model.denoise(cache, states), repeats)
        _TIMES[key] = out
    return _TIMES[key]


def _tokens(shape, V: int, mask_id: int, g) -> torch.Tensor:
    """Random non-MASK token ids."""
    t = torch.randint(0, V - 1, shape, generator=g)
    return t + (t >= mask_id).long()


def draft_times(drafter, model, budgets=BUDGETS, depth: int = 8, temperature: float = 0.0,
                repeats: int = 2) -> dict:
    """{N: seconds} of one drafter call at a realistic state (stale logits from the model)."""
    from spotref.draft import View
    from spotref.rules import DecisionRule
    B, V, mask_id = model.block_size, model.config.vocab_size, model.mask_id
    cache = model.prefill(torch.zeros(0, dtype=torch.long))
    state = np.full(B, mask_id, dtype=np.int64)
    stale = model.denoise(cache, torch.from_numpy(state)[None])[0].float()          # (B, V)
    state[0] = 0 if mask_id != 0 else 1
    rule = DecisionRule(mask_id, V, B, float(temperature), 0)
    return {N: _median_time(lambda: drafter(View(state, 1, 0, stale, rule, N, depth)), repeats)
            for N in budgets}


def _median_time(fn, repeats: int) -> float:
    fn()                                                   # warm-up
    ts = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t)
    return float(np.median(ts))


def expected_commits(drafter, N: int, temperature: float) -> float:
    """E(N): the drafter's measured curve, log2-interpolated, else ``PRIOR``."""
    curves = getattr(drafter, "curves", None) or {}
    curve = curves.get(order.temperature_key(temperature)) or PRIOR
    pts = sorted((int(n), float(c)) for n, c in curve.items())
    x = math.log2(N)
    xs, ys = [math.log2(n) for n, _ in pts], [c for _, c in pts]
    return float(np.interp(x, xs, ys))


def choose_budget(times: dict, commits: dict) -> int:
    """argmax_N commits[N] / times[N] (ties: the smaller N)."""
    return max(sorted(times), key=lambda N: (commits[N] / times[N], -N))


def resolve_budget(budget, model, drafter, depth: int, temperature: float) -> int:
    """``budget`` itself when an int; for ``"auto"`` the cost model's choice on this machine."""
    if budget != "auto":
        return budget
    if drafter is None:
        return 1
    tv = verify_times(model)
    td = draft_times(drafter, model, depth=depth, temperature=temperature)
    t = {N: tv[N] + td[N] for N in BUDGETS}
    return choose_budget(t, {N: expected_commits(drafter, N, temperature) for N in BUDGETS})


def main(argv=None) -> int:
    """``python -m spotref.costmodel [TARGET] [--drafter spot|calibrated|confidence] [--temperature T]``:
    the cost model's table on this machine (verify and draft times, E(N), commits per second)."""
    import argparse
    from spotref.api import resolve_drafter
    from spotref.demo import table
    from spotref.targets import DEFAULT_TARGET, load_target
    p = argparse.ArgumentParser(prog="python -m spotref.costmodel", description=main.__doc__.splitlines()[0])
    p.add_argument("target", nargs="?", default=DEFAULT_TARGET)
    p.add_argument("--drafter", default="spot")
    p.add_argument("--temperature", type=float, default=0.0)
    p.add_argument("--depth", type=int, default=32)
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    model = load_target(args.target).model
    drafter = resolve_drafter(args.drafter, model)
    tv = verify_times(model, repeats=5)
    td = draft_times(drafter, model, depth=args.depth, temperature=args.temperature)
    e = {N: expected_commits(drafter, N, args.temperature) for N in BUDGETS}
    rows = [[N, 1e3 * tv[N], 1e3 * td[N], e[N], e[N] / (tv[N] + td[N]), e[N] / tv[N]] for N in BUDGETS]
    print(table(["N", "verify ms", "draft ms", "E(N) commits/round", "commits/s", "commits/s, free drafter"], rows))
    print(f"budget='auto' picks N = {choose_budget({N: tv[N] + td[N] for N in BUDGETS}, e)}; "
          f"exact decoding: {1 / tv[1]:.0f} commits/s (one verify of N = 1 per commit)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
