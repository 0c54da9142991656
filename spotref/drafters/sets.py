"""SPOT-Sets proposals: the most probable commit sets under independent membership probabilities.

Under the threshold rule a decision is a set: every masked position whose confidence exceeds
``tau`` (else the single most confident). The order model's set head gives, per masked position,
the logit ``z_j`` of P(j is in the next set). Read as a product of Bernoullis, the most probable
set is ``{z_j > 0}``; every other set flips some positions, each flip costing ``|z_j|`` of
log-probability. ``top_sets`` enumerates the sets best-first by total flip cost (the k smallest
subset sums of the sorted costs, no set twice), leaving out the empty set (the rule always commits
at least one position) and renormalising by it. Everything is computed from the logits, in log
space: positions far below 1/2 keep their order (the most confident one is the best singleton).

>>> z = np.log([0.9 / 0.1, 0.2 / 0.8, 0.6 / 0.4])            # P(member) 0.9, 0.2, 0.6
>>> [(round(p, 3), s) for p, s in top_sets(z, np.array([4, 7, 9]), 4)]
[(0.446, (4, 9)), (0.298, (4,)), (0.112, (4, 7, 9)), (0.074, (4, 7))]
"""
from __future__ import annotations

import heapq
import math

import numpy as np

LOGIT_CAP = 700.0   # |z| beyond this is capped (exp(-700) is still a float64)


def top_sets(z: np.ndarray, positions: np.ndarray, k: int) -> list[tuple[float, tuple]]:
    """The ``k`` most probable non-empty subsets of ``positions`` (n,) when each is a member
    independently with logit ``z`` (n,): [(P(set | not empty), positions ascending), ...]."""
    z = np.clip(np.asarray(z, dtype=np.float64), -LOGIT_CAP, LOGIT_CAP)
    if len(z) == 0 or k < 1:
        return []
    base, cost = z > 0, np.abs(z)                           # the most probable set; cost of a flip
    order = np.argsort(cost, kind="stable")
    log_top = -np.logaddexp(0.0, -cost).sum()               # log P(base)
    log_nonempty = np.log(-np.expm1(-np.logaddexp(0.0, z).sum()))    # log (1 - P(empty))
    out, heap = [], [(0.0, -1, ())]
    while heap and len(out) < k:
        c, last, flips = heapq.heappop(heap)
        member = base.copy()
        member[list(flips)] ^= True
        if member.any():
            p = math.exp(log_top - c - log_nonempty)
            out.append((p, tuple(int(j) for j in np.sort(positions[member]))))
        nxt = last + 1
        if nxt < len(z):
            i = order[nxt]
            heapq.heappush(heap, (c + cost[i], nxt, flips + (i,)))                  # flip one more
            if flips:                                                               # or move the last
                heapq.heappush(heap, (c - cost[order[last]] + cost[i], nxt, flips[:-1] + (i,)))
    return out


def set_options(z: np.ndarray, ok: np.ndarray, masked: np.ndarray, tokens: np.ndarray, limit: int):
    """[(prob, ((j, x_j), ...)), ...]: the ``limit`` most probable sets over ``masked`` with
    their coupled tokens; prob = P(set) x prod over members of P(coupled token right).

    z: (B,) membership logits; ok: (B,) token-right probabilities; tokens: (B,) coupled tokens."""
    return [(p * float(np.prod(ok[list(s)])), tuple((j, int(tokens[j])) for j in s))
            for p, s in top_sets(z[masked], masked, limit)]
