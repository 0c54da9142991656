"""``budget="auto"``: the node budget N that maximises expected commits per second on this machine.

A round with budget N costs ``t(N) = verify(N) + draft(N)``: one target forward over N block
states (measured here, on the running machine, against a cache of ``context`` tokens) plus the
drafter's own time on N nodes (measured on a real view). It commits ``E(N)`` decisions on
average: the drafter's offline acceptance curve, measured on held-out trajectories when the
drafter was trained (``SpotDrafter.header["curves"]``; ``CalibratedDrafter.curves``), else a
conservative prior. The choice is ``argmax_N E(N) / t(N)`` over ``BUDGETS``. On a CPU, t(N) grows
almost linearly past a few rows, so the answer is a small tree; on a GPU with an 8B target,
t(N) is nearly flat and the answer is large. ``spotref.generate`` calls ``resolve_budget`` for
``budget="auto"``; ``python -m spotref.tools.costmodel`` prints the table behind the choice.
"""
from __future__ import annotations

import math
import time
import weakref

import numpy as np
import torch

from spotref.draft import View
from spotref.drafters import order
from spotref.rules import DecisionRule

BUDGETS = (1, 2, 4, 8, 16, 32, 64)
PRIOR = {1: 1.0, 64: 2.5}          # E(N) for a drafter without a measured curve (log-interpolated)
_TIMES = weakref.WeakKeyDictionary()     # model -> {(budgets, context): {N: seconds}}


def verify_times(model, budgets=BUDGETS, context: int = 128, repeats: int = 3) -> dict:
    """{N: seconds} of one target forward over N states of a block after ``context`` tokens."""
    known, key = _TIMES.setdefault(model, {}), (tuple(budgets), context)
    if key not in known:
        B, V, mask_id = model.block_size, model.config.vocab_size, model.mask_id
        g = torch.Generator().manual_seed(0)
        cache = model.prefill(_tokens((context // B * B,), V, mask_id, g))
        out = {}
        for N in budgets:
            states = torch.full((N, B), mask_id, dtype=torch.long)
            states[:, : B // 2] = _tokens((N, B // 2), V, mask_id, g)       # half committed
            out[N] = _median_time(lambda: model.denoise(cache, states), repeats)
        known[key] = out
    return known[key]


def _tokens(shape, V: int, mask_id: int, g) -> torch.Tensor:
    """Random non-MASK token ids."""
    t = torch.randint(0, V - 1, shape, generator=g)
    return t + (t >= mask_id).long()


def draft_times(drafter, model, budgets=BUDGETS, depth: int = 8, temperature: float = 0.0,
                repeats: int = 2) -> dict:
    """{N: seconds} of one drafter call at a realistic state (stale logits from the model)."""
    B, V, mask_id = model.block_size, model.config.vocab_size, model.mask_id
    cache = model.prefill(torch.zeros(0, dtype=torch.long))
    state = np.full(B, mask_id, dtype=np.int64)
    stale = model.denoise(cache, torch.from_numpy(state)[None])[0].float()          # (B, V)
    state[0] = 0 if mask_id != 0 else 1
    rule = DecisionRule(mask_id, V, B, float(temperature), 0)
    return {N: _median_time(lambda: drafter(View.of(state, 1, 0, stale, rule, N, depth)), repeats)
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
