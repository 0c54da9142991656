"""Best-first draft-tree growth under a node budget N and a depth cap D (EAGLE-2 style).

A drafter supplies ``options(state, step) -> [(prob, commits), ...]``: its guesses for the
target's next decision at a hypothetical state, with probabilities. The tree keeps expanding
the candidate with the highest cumulative path probability until it holds N nodes (root
included); candidates that reach a state already in the tree are skipped, so no budget is spent
on a state twice. ``options`` is called once per expanded node; a drafter that batches its model
calls per tree level can use ``grow_levels`` instead.
"""
from __future__ import annotations

import heapq

from spotref.decode import apply
from spotref.draft import Draft


def grow(view, options) -> Draft:
    """The best-first tree over ``options`` within ``view.budget`` and ``view.depth``."""
    parents, commits = [-1], [()]
    states, steps, depths = [view.tokens], [view.step], [0]
    seen = {(view.tokens.tobytes(), view.step)}
    heap, tick = [], 0

    def expand(node, cum):
        nonlocal tick
        if depths[node] >= view.depth:
            return
        for prob, cs in options(states[node], steps[node]):
            heapq.heappush(heap, (-cum * prob, tick, node, cs))
            tick += 1

    expand(0, 1.0)
    while heap and len(parents) < view.budget:
        neg, _, node, cs = heapq.heappop(heap)
        state = apply(states[node], cs)
        key = (state.tobytes(), steps[node] + 1)
        if key in seen:
            continue
        seen.add(key)
        parents.append(node)
        commits.append(cs)
        states.append(state)
        steps.append(steps[node] + 1)
        depths.append(depths[node] + 1)
        expand(len(parents) - 1, -neg)
    return Draft(parents, commits)
