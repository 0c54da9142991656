"""SPOT-Sets proposals: the most probable commit sets of the threshold rule.

Under the threshold rule the decision is the exceed set ``E = {j : c_j > tau}`` when it is not
empty, else the single most confident position. SPOT-Sets models both parts: the order model's
set head gives, per masked position, the logit ``z_j`` of ``j in E`` (independent Bernoullis),
and its next-commit head gives ``p_next``, the distribution of the most confident position (the
one-position rule's next commit). So

    P(S) = P(E = S)                          for |S| >= 2,
    P({j}) = P(E = {j}) + P(E = {}) p_next(j).

The most probable exceed set is ``{z_j > 0}``; every other one flips some positions, each flip
costing ``|z_j|`` of log-probability, so ``exceed_sets`` enumerates them best-first (the k
smallest subset sums of the sorted costs, each set once). ``top_sets`` adds the fallback
singletons and keeps the k best (exact: a set outside the k best exceed sets that is not a
singleton cannot beat them). Everything is computed from the logits in log space, so positions
far below 1/2 keep their order. Without ``p_next`` the empty set is simply left out and the rest
renormalised.

>>> z = np.log([0.9 / 0.1, 0.2 / 0.8, 0.6 / 0.4])            # P(in E) 0.9, 0.2, 0.6
>>> [(round(p, 3), s) for p, s in top_sets(z, np.array([4, 7, 9]), 4)]
[(0.446, (4, 9)), (0.298, (4,)), (0.112, (4, 7, 9)), (0.074, (4, 7))]
>>> [(round(p, 3), s) for p, s in top_sets(z, np.array([4, 7, 9]), 3, p_next=np.array([0.1, 0.1, 0.8]))]
[(0.432, (4, 9)), (0.291, (4,)), (0.108, (4, 7, 9))]
"""

from __future__ import annotations

import heapq
import math

import numpy as np

LOGIT_CAP = 700.0  # |z| beyond this is capped (exp(-700) is still a float64)


def exceed_sets(z: np.ndarray, k: int) -> list[tuple[float, np.ndarray]]:
    """The ``k`` most probable non-empty sets when index i is a member independently with logit
    ``z[i]``, best first: [(log P(E = set), member mask (n,) bool), ...]."""
    z = np.clip(np.asarray(z, dtype=np.float64), -LOGIT_CAP, LOGIT_CAP)
    base, cost = z > 0, np.abs(z)  # the most probable set; cost of a flip
    order = np.argsort(cost, kind="stable")
    log_top = -np.logaddexp(0.0, -cost).sum()  # log P(E = base)
    out, heap = [], [(0.0, -1, ())]
    while heap and len(out) < k:
        c, last, flips = heapq.heappop(heap)
        member = base.copy()
        member[list(flips)] ^= True
        if member.any():
            out.append((log_top - c, member))
        nxt = last + 1
        if nxt < len(z):
            i = order[nxt]
            heapq.heappush(heap, (c + cost[i], nxt, flips + (i,)))  # flip one more
            if flips:  # or move the last
                heapq.heappush(heap, (c - cost[order[last]] + cost[i], nxt, flips[:-1] + (i,)))
    return out


def top_sets(
    z: np.ndarray, positions: np.ndarray, k: int, p_next: np.ndarray | None = None
) -> list[tuple[float, tuple]]:
    """The ``k`` most probable decisions over ``positions`` (n,): [(P(set), positions ascending), ...].

    z: (n,) logits of membership of the exceed set; p_next: (n,) the fallback's distribution
    (None: the empty exceed set left out, the rest renormalised)."""
    z = np.clip(np.asarray(z, dtype=np.float64), -LOGIT_CAP, LOGIT_CAP)
    if len(z) == 0 or k < 1:
        return []
    log_empty = -np.logaddexp(0.0, z).sum()  # log P(E = {})
    sets = {tuple(np.flatnonzero(m)): lp for lp, m in exceed_sets(z, k)}
    if p_next is None:
        shift = -np.log(-np.expm1(log_empty))  # / P(E not empty)
        probs = {s: math.exp(lp + shift) for s, lp in sets.items()}
    else:
        log_in, log_out = -np.logaddexp(0.0, -z), -np.logaddexp(0.0, z)  # log q_i, log (1 - q_i)
        probs = {s: math.exp(lp) for s, lp in sets.items()}
        for i in range(len(z)):  # the singletons, fallback included
            probs[(i,)] = math.exp(log_empty - log_out[i] + log_in[i]) + math.exp(log_empty) * float(p_next[i])
    best = sorted(probs.items(), key=lambda kv: (-kv[1], kv[0]))[:k]
    return [(p, tuple(int(positions[i]) for i in s)) for s, p in best]


def set_options(z: np.ndarray, p_next: np.ndarray, ok: np.ndarray, masked: np.ndarray, tokens: np.ndarray, limit: int):
    """[(prob, ((j, x_j), ...)), ...]: the ``limit`` most probable decisions over ``masked`` with
    their coupled tokens; prob = P(set) x prod over members of P(coupled token right).

    z: (B,) exceed-set logits; p_next: (B,) next-commit probabilities; ok: (B,) token-right
    probabilities; tokens: (B,) coupled tokens."""
    return [
        (p * float(np.prod(ok[list(s)])), tuple((j, int(tokens[j])) for j in s))
        for p, s in top_sets(z[masked], masked, limit, p_next[masked])
    ]


def runner_up_sets(
    options: list, ok: np.ndarray, second: float, p1: np.ndarray, x2: np.ndarray, p2: np.ndarray
) -> list:
    """For each proposed set whose least certain member j has P(coupled token right) < ``second``:
    the same set with j's runner-up token x2_j, prob = prob / ok_j x (1 - ok_j) x p2_j / (1 - p1_j)
    (p1, p2: the stale probabilities of the coupled and runner-up tokens)."""
    out = []
    for prob, commits in options:
        j = min((pos for pos, _ in commits), key=lambda pos: ok[pos])
        if ok[j] < second and p2[j] > 0 and ok[j] > 0:
            alt = prob / ok[j] * (1 - ok[j]) * p2[j] / max(1 - p1[j], 1e-6)
            out.append((float(min(alt, 1.0)), tuple((pos, int(x2[j]) if pos == j else tok) for pos, tok in commits)))
    return out
