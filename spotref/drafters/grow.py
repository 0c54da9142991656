"""Best-first draft-tree growth under a node budget N and a depth cap D (EAGLE-2 style).

A drafter supplies ``options(state, step) -> [(prob, commits), ...]``: its guesses for the
target's next decision at a hypothetical state, with probabilities. The tree keeps expanding
the candidate with the highest cumulative path probability until it holds N nodes (root
included); candidates that reach a state already in the tree are skipped, so no budget is spent
on a state twice. ``options`` is called once per expanded node; a drafter that batches its model
calls per tree level can use ``grow_levels`` instead. Both put the nodes in order of falling
path probability (``Draft.probs``), so a prefix of the draft keeps its most probable nodes.
"""

from __future__ import annotations

import heapq

import numpy as np

from spotref.spec.draft import Draft, DraftBuilder


def grow(view, options) -> Draft:
    """The best-first tree over ``options`` within ``view.budget`` and ``view.depth``."""
    t = DraftBuilder(view.tokens, view.step)
    heap, tick, cums = [], 0, [1.0]

    def expand(node, cum):
        nonlocal tick
        if t.depths[node] >= view.depth:
            return
        for prob, cs in options(t.states[node], t.steps[node]):
            heapq.heappush(heap, (-cum * prob, tick, node, cs))
            tick += 1

    expand(0, 1.0)
    while heap and len(t) < view.budget:
        neg, _, node, cs = heapq.heappop(heap)
        i, added = t.merge(node, cs)  # a state already in the tree costs no budget
        if added:
            cums.append(-neg)
            expand(i, -neg)
    return Draft(t.parents, t.commits, _clip(cums))


def _clip(cums) -> list:
    """Path probabilities as node probs (float products can overshoot 1 by an ulp)."""
    return [min(max(float(c), 0.0), 1.0) for c in cums]


def grow_levels(view, options_batch, beam: int) -> Draft:
    """Best-first growth with one batched drafter call per tree level (EAGLE-2's dynamic tree).

    ``options_batch(states, steps, marks) -> [[(prob, commits), ...] per node]`` scores several
    hypothetical states in one call; ``marks[i]`` (B,) int: the draft depth at which each
    position was committed in node i (0: not by the draft). Expansion: at each depth the
    ``beam`` best new nodes by cumulative path probability are expanded together (nodes that
    cannot enter the final top N are pruned). Reranking: the tree is the N - 1 best candidates
    by cumulative probability, parents first (a child never beats its parent), equal states
    merged (the first, most probable, is kept).
    """
    t = _Levels(view)
    layer = [0] if view.depth > 0 and view.budget > 1 else []
    for level in range(view.depth):
        if level and view.budget <= 2:
            break  # the one slot below the root is taken: no child can enter
        floor = t.floor(view.budget - (2 if level else 1))  # room for the node and a child
        layer = [i for i in layer if t.cums[i] >= floor][:beam]
        if not layer:
            break
        opts = options_batch([t.states[i] for i in layer], [t.steps[i] for i in layer], [t.marks[i] for i in layer])
        layer = sorted((c for i, o in zip(layer, opts) for c in t.add_children(i, o)), key=lambda c: -t.cums[c])
    return t.select(view.budget)


class _Levels(DraftBuilder):
    """Candidate nodes for ``grow_levels``: a tree with each node's cumulative probability and
    draft marks."""

    def __init__(self, view):
        super().__init__(view.tokens, view.step)
        self.cums = [1.0]
        self.marks = [np.zeros(len(view.tokens), dtype=np.int64)]

    def add_children(self, node, opts) -> list:
        """Add ``node``'s children; an equal state already reached at this level keeps the more
        probable parent (neither has been expanded yet)."""
        new = []
        for prob, cs in opts:
            cum = self.cums[node] * prob
            i, added = self.merge(node, cs)
            if not added and self.cums[i] >= cum:  # reached already, at least as probably
                continue
            mark = self.marks[node].copy()
            mark[[p for p, _ in cs]] = self.depths[i]
            if added:
                self.cums.append(cum), self.marks.append(mark), new.append(i)
            else:
                self.reparent(i, node, cs)
                self.cums[i], self.marks[i] = cum, mark
        return new

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
        return Draft(
            [-1] + [index[self.parents[i]] for i in keep],
            [()] + [self.commits[i] for i in keep],
            _clip([1.0] + [self.cums[i] for i in keep]),
        )
