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

import numpy as np

from spotref.draft import Draft, apply


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


def grow_levels(view, options_batch, width: int) -> Draft:
    """Best-first growth with one batched drafter call per tree level (EAGLE-2's dynamic tree).

    ``options_batch(states, steps, marks) -> [[(prob, commits), ...] per node]`` scores several
    hypothetical states in one call; ``marks[i]`` (B,) int: the draft depth at which each
    position was committed in node i (0: not by the draft). Expansion: at each depth the
    ``width`` best new nodes by cumulative path probability are expanded together (nodes that
    cannot enter the final top N are pruned). Reranking: the tree is the N - 1 best candidates
    by cumulative probability, parents first (a child never beats its parent), equal states
    merged (the first, most probable, is kept).
    """
    t = _Levels(view)
    layer = [0] if view.depth > 0 and view.budget > 1 else []
    for _ in range(view.depth):
        floor = t.floor(view.budget - 1)
        layer = [i for i in layer if t.cums[i] >= floor][:width]
        if not layer:
            break
        opts = options_batch([t.states[i] for i in layer], [t.steps[i] for i in layer],
                             [t.marks[i] for i in layer])
        layer = sorted((c for i, o in zip(layer, opts) for c in t.add_children(i, o)), key=lambda c: -t.cums[c])
    return t.select(view.budget)


class _Levels:
    """Candidate nodes for ``grow_levels``: states, cumulative probabilities, draft marks."""

    def __init__(self, view):
        self.parents, self.commits, self.cums = [-1], [()], [1.0]
        self.states, self.steps = [view.tokens], [view.step]             # depth = step - root step
        self.marks = [np.zeros(len(view.tokens), dtype=np.int64)]
        self.seen = {(view.tokens.tobytes(), view.step): 0}

    def add_children(self, node, opts) -> list:
        """Add ``node``'s children; an equal state already reached at this level keeps the more
        probable parent (neither has been expanded yet)."""
        new = []
        for prob, cs in opts:
            state = apply(self.states[node], cs)
            key, cum = (state.tobytes(), self.steps[node] + 1), self.cums[node] * prob
            i = self.seen.get(key)
            if i is not None and self.cums[i] >= cum:                     # same key: same step, same depth
                continue
            mark = self.marks[node].copy()
            mark[[p for p, _ in cs]] = self.steps[node] + 1 - self.steps[0]
            fields = (node, cs, cum, state, self.steps[node] + 1, mark)
            if i is None:
                i = self.seen[key] = len(self.parents)
                for lst, v in zip(self._lists(), fields):
                    lst.append(v)
                new.append(i)
            else:
                for lst, v in zip(self._lists(), fields):
                    lst[i] = v
        return new

    def _lists(self):
        return self.parents, self.commits, self.cums, self.states, self.steps, self.marks

    def floor(self, k: int) -> float:
        """The k-th best cumulative probability among non-root candidates (0 if fewer)."""
        c = sorted(self.cums[1:], reverse=True)
        return c[k - 1] if 0 < k <= len(c) else 0.0

    def select(self, budget: int) -> Draft:
        """The budget - 1 best candidates (parents first) as a Draft in topological order."""
        order = sorted(range(1, len(self.cums)), key=lambda i: (-self.cums[i], self.steps[i], i))
        keep, index = [], {0: 0}
        for i in order:
            if len(keep) >= budget - 1:
                break
            if self.parents[i] in index:
                index[i] = len(keep) + 1
                keep.append(i)
        return Draft([-1] + [index[self.parents[i]] for i in keep], [()] + [self.commits[i] for i in keep])
