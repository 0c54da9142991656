"""``budget="auto"``: the node budget N that maximises expected commits per second on this machine.

A round with budget N costs ``t(N) = verify(N) + draft(N)``: one target forward over N block
states (measured here, on the running machine, after ``context`` tokens: SDAR's cache, or a whole
canvas) plus the drafter's own time on N nodes (measured on a real view). It commits ``E(N)`` decisions on
average: the drafter's offline acceptance curve, measured on held-out trajectories when the
drafter was trained (``SpotDrafter.header["curves"]``; ``CalibratedDrafter.curves``), else a
conservative prior. The choice is ``argmax_N E(N) / t(N)`` over ``BUDGETS``. On a CPU, t(N) grows
almost linearly past a few rows, so the answer is a small tree; on a GPU with an 8B target,
t(N) is nearly flat and the answer is large. Unless the caller fixes a width, the way to verify
is chosen with N (``auto_way``): rows alone, or one forward at a fixed width W, where a pass of W
states may cost what one costs (a real model's shape, even on a CPU: docs/results-cpu-shapes.md);
the decode is then identical to exact decoding at that width, which ``generate`` reports
(``stats["width"]``). ``python -m workbench.bench.costmodel`` prints the table behind the choice.

Per round (``RoundBudget``): the drafter drafts at that N, and each round's tree is then cut to
the nodes worth their verify time. Node n (in order of falling path probability, ``Draft.probs``)
adds ``reach(p_n)`` expected commits, where ``reach`` maps the drafter's path probability to the
rate at which such nodes were reached on held-out trajectories (``calibration_table``, stored in
the drafter's checkpoint), and costs the curve's mean seconds per state up to the tree's size; it is kept while it
commits at least at the run's expected rate ``E(N) / t(N)`` (commits per second). A draft
without probs is kept whole. ``spotref.generate`` calls ``auto_drafter`` for ``budget="auto"``,
through ``spotref.names.auto_budget``, which measures for each ``Speculator`` and keeps nothing:
this module holds no state either.
"""

from __future__ import annotations

import math
import time

import numpy as np
import torch

from spotref.drafters import order
from spotref.spec.decode import Stats, bind
from spotref.spec.draft import Draft, View
from spotref.spec.rules import DecisionRule

BUDGETS = (1, 2, 4, 8, 16, 32, 64)
BINS = (0.0, 0.02, 0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 1.0)  # calibration bins
MIN_COUNT = 20  # nodes a calibration bin needs to count
PRIOR = {1: 1.0, 64: 2.5}  # E(N) for a drafter without a measured curve (log-interpolated)


def verify_times(
    model,
    budgets=BUDGETS,
    context: int = 128,
    repeats: int = 3,
    width=None,
    block_length: int | None = None,
    limit: float = math.inf,
) -> dict:
    """{N: seconds} of one target pass over N states of a block after ``context`` tokens, through
    the model's target (``decode.bind``: SDAR's prefix cache of the context, or a whole canvas of
    the context and ``context`` more positions; ``context`` at most half the model's positions),
    rows alone; ``width``: the pass at that fixed width, W rows as one forward, measured once: the
    cost of every N <= width. Blocks of ``block_length`` (None: ``model.block_size``; SDAR decodes
    in its own). ``limit``: rows alone, no N is measured after one whose pass took longer."""
    B, V, mask_id = block_length or model.block_size, model.config.vocab_size, model.mask_id
    g = torch.Generator().manual_seed(0)
    context = min(context, model.config.max_position_embeddings // 2 // B * B)  # a canvas that fits
    prompt = _tokens((context // B * B,), V, mask_id, g).tolist()
    target = bind(model, prompt, max(context, B), Stats(), block_length=B)
    out = {}
    for N in budgets if width is None else [width]:  # at a width every pass is one shape
        states = np.full((N, B), mask_id, dtype=np.int64)
        states[:, : B // 2] = _tokens((N, B // 2), V, mask_id, g).numpy()  # half committed
        out[N] = _median_time(lambda: target.verify(states, width is not None), repeats)
        if out[N] > limit:
            break
    if width is None:
        return out
    return dict.fromkeys((n for n in budgets if n <= width), out[width])


def _tokens(shape, V: int, mask_id: int, g) -> torch.Tensor:
    """Random non-MASK token ids."""
    t = torch.randint(0, V - 1, shape, generator=g)
    return t + (t >= mask_id).long()


def draft_times(drafter, model, rule: DecisionRule, budgets=BUDGETS, depth: int = 8, repeats: int = 2) -> dict:
    """{N: seconds} of one drafter call at a realistic state (stale logits from the model) under
    ``rule``, the decoding's own (its threshold, precision and filters change the drafter's work)."""
    B, mask_id = rule.block_size, model.mask_id  # the rule's blocks: a canvas model's block length
    state = np.full(B, mask_id, dtype=np.int64)
    stale = bind(model, [], B, Stats(), block_length=B).verify(state[None])[0].float()  # (B, V)
    state[0] = 0 if mask_id != 0 else 1
    return {N: _median_time(lambda: drafter(View.of(state, 1, 0, stale, rule, N, depth)), repeats) for N in budgets}


def _median_time(fn, repeats: int) -> float:
    fn()  # warm-up
    ts = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t)
    return float(np.median(ts))


def expected_commits(drafter, N: int, temperature: float, block_size: int | None = None) -> float:
    """E(N): the drafter's measured curve, log2-interpolated, else ``PRIOR``; ``PRIOR`` too in blocks
    of ``block_size`` other than those the curve was measured in (``curve_block``): a curve measured
    in blocks of 32 promises commits a block of 4 cannot hold."""
    curves = getattr(drafter, "curves", None) or {}
    measured = curve_block(drafter)
    same = block_size is None or measured is None or measured == block_size
    curve = (curves.get(order.temperature_key(temperature)) if same else None) or PRIOR
    pts = sorted((int(n), float(c)) for n, c in curve.items())
    x = math.log2(N)
    xs, ys = [math.log2(n) for n, _ in pts], [c for _, c in pts]
    return float(np.interp(x, xs, ys))


def curve_block(drafter) -> int | None:
    """The block length a drafter's curves were measured in: its order model's (a SPOT drafter), or
    its checkpoint's (``measured_block``: a calibrated drafter); None where it is not known."""
    return getattr(getattr(drafter, "model", None), "block_size", None) or getattr(drafter, "measured_block", None)


def choose_budget(times: dict, commits: dict) -> int:
    """argmax_N commits[N] / times[N] (ties: the smaller N)."""
    return max(sorted(times), key=lambda N: (commits[N] / times[N], -N))


def auto_drafter(model, drafter, depth: int, rule: DecisionRule, verify: dict) -> tuple:
    """``budget="auto"`` at one way of verifying: (the drafter, cut per round by ``RoundBudget``
    when N > 1; N) under the decoding's ``rule``, with ``verify`` the measured pass costs ({N:
    seconds}, ``verify_times``: at a width, the N <= width). A drafter with ``variants()`` (the SPOT
    drafter: order-model calls per level or per round) is replaced by the variant whose best N
    commits the most per second."""
    if drafter is None:
        return None, 1
    drafts = [(d, draft_times(d, model, rule, sorted(verify), depth=depth)) for d in variants(drafter)]
    return cut(best_round(drafts, verify, rule), verify, rule.temperature)


def variants(drafter) -> list:
    return getattr(drafter, "variants", lambda: [drafter])()


def best_round(drafts: list, verify: dict, rule: DecisionRule) -> tuple:
    """(commits per second, drafter, N): the best of ``drafts`` ([(drafter, {N: draft seconds})]) at
    the pass costs ``verify``, by each drafter's expected commits ``E(N)`` under ``rule``."""
    best = None
    for d, td in drafts:
        t = {N: verify[N] + td[N] for N in verify}
        e = {N: expected_commits(d, N, rule.temperature, rule.block_size) for N in verify}
        N = choose_budget(t, e)
        if best is None or e[N] / t[N] > best[0]:
            best = (e[N] / t[N], d, N)
    return best


def cut(best: tuple, verify: dict, temperature: float) -> tuple:
    """(round drafter, N) of ``best_round``'s choice: cut per round (``RoundBudget``) when N > 1."""
    rate, drafter, N = best
    return (drafter, 1) if N == 1 else (RoundBudget.at(drafter, verify, rate, temperature), N)


def auto_way(model, drafter, depth: int, rule: DecisionRule, width: int | None = None) -> tuple:
    """``budget="auto"``: (round drafter, N, width). With a width: ``auto_drafter`` at it. Without:
    the way to verify too, rows alone or one forward at a width W in ``BUDGETS`` (exact decoding at
    that width being then the decode SPOT is identical to), whichever commits the most per second
    (ties: rows alone, then the smaller W). A pass costing more than ``max E / min E`` times the
    first state's pass and draft cannot pay, so no larger one is measured."""
    B, T = rule.block_size, rule.temperature
    if drafter is None or width is not None:
        return (*auto_drafter(model, drafter, depth, rule, verify_times(model, width=width, block_length=B)), width)
    drafts = [(d, draft_times(d, model, rule, BUDGETS, depth=depth)) for d in variants(drafter)]
    e = [expected_commits(d, N, T, B) for d, _ in drafts for N in BUDGETS]
    alone = verify_times(model, budgets=(1,), block_length=B)
    limit = (alone[1] + min(td[1] for _, td in drafts)) * max(e) / max(min(e), 1e-9)
    ways = {None: {**alone, **verify_times(model, budgets=BUDGETS[1:], block_length=B, limit=limit)}}
    for W in BUDGETS[1:]:
        ways[W] = verify_times(model, width=W, block_length=B)
        if ways[W][W] > limit:
            break
    best = {w: best_round(drafts, verify, rule) for w, verify in ways.items()}
    w = max(best, key=lambda w: (best[w][0], w is None, -(w or 0)))
    return (*cut(best[w], ways[w], T), w)


def calibration_table(probs, reached, bins=BINS) -> list:
    """[[mean path probability, rate reached, nodes], ...] per bin of ``probs`` with at least
    ``MIN_COUNT`` nodes: how often a drafted node of that probability was reached (held out)."""
    probs, reached = np.asarray(probs, dtype=np.float64), np.asarray(reached, dtype=np.float64)
    which = np.clip(np.searchsorted(bins, probs, side="right") - 1, 0, len(bins) - 2)
    out = []
    for b in range(len(bins) - 1):
        sel = which == b
        if sel.sum() >= MIN_COUNT:
            out.append([float(probs[sel].mean()), float(reached[sel].mean()), int(sel.sum())])
    return out


def reach(table, p):
    """The calibrated chance that a node of path probability ``p`` (a float or an array) is
    reached: ``table`` interpolated, non-decreasing in p (``p`` itself without a table)."""
    if not table:
        return p if isinstance(p, np.ndarray) else float(p)
    xs = [0.0] + [r[0] for r in table] + [1.0]
    ys = np.maximum.accumulate([0.0] + [r[1] for r in table] + [table[-1][1]])
    out = np.interp(p, xs, ys)
    return out if isinstance(p, np.ndarray) else float(out)


def trim(draft: Draft, verify: dict, rate: float, table=None) -> Draft:
    """The prefix of ``draft`` whose nodes are each worth their verify time: node n stays while
    reach(p_n) >= rate * slope, slope = (verify(len) - verify(1)) / (len - 1), the measured
    curve's mean cost of a state up to the draft's size (verify: {states: seconds},
    interpolated). The mean, not each local difference: timings taken on a busy machine are
    noisy, and one inflated difference would cut every tree to its root."""
    if draft.probs is None or len(draft) < 2:
        return draft
    ns = sorted(verify)
    t = np.interp(np.arange(1, len(draft) + 1), ns, [verify[k] for k in ns])  # t(1) .. t(len)
    slope = max(t[-1] - t[0], 0.0) / (len(t) - 1)
    worth = reach(table, np.asarray(draft.probs[1:])) >= rate * slope
    return draft.prefix(1 + (len(worth) if worth.all() else int(np.argmin(worth))))


class RoundBudget:
    """A drafter whose every tree is cut by ``trim``: ``RoundBudget(drafter, verify, rate,
    table)(view) -> Draft``."""

    def __init__(self, drafter, verify: dict, rate: float, table=None):
        self.drafter, self.verify, self.rate, self.table = drafter, dict(verify), float(rate), table

    @classmethod
    def at(cls, drafter, verify: dict, rate: float, temperature: float) -> "RoundBudget":
        """With the drafter's own node calibration at ``temperature`` (none: raw probabilities)."""
        tables = getattr(drafter, "node_calibration", None) or {}
        return cls(drafter, verify, rate, tables.get(order.temperature_key(temperature)))

    def __call__(self, view) -> Draft:
        return trim(self.drafter(view), self.verify, self.rate, self.table)
