"""Draft trees and their verification, in pure Python: the specification of ``_ext/core.pyx``.

A draft (``spotref.Draft``) is a parent array in topological order: node 0 is the root (the
current block state), every other node is its parent plus one commit set ``((position, token),
...)``. ``build_tree`` validates it, derives every node's block state and step, merges nodes
that reach the same state (same tokens, same step: the tree is really a DAG) and flattens the
distinct states into the verify batch. ``walk`` then accepts by state equality: from the root,
while the state that the target's own decision leads to was verified, move there.

The Cython twin mirrors every public name here; ``tests/test_core.py`` runs both against a
brute-force oracle and ``spotref.EXTENSION`` says which one the decoders use.
"""
from __future__ import annotations

import numpy as np


class Tree:
    """A validated draft, its distinct states flattened for one verify forward.

    states: (U, B) int64, the distinct block states (row 0 is the root);
    steps:  (U,) int64, the step (decisions taken in the block) of each state;
    depths: (U,) int64, each state's depth below the root (steps - root step);
    node_of: (N,) int64, the row of ``states`` that each draft node maps to.
    """

    def __init__(self, states, steps, node_of, index):
        self.states = np.array(states, dtype=np.int64)
        self.steps = np.array(steps, dtype=np.int64)
        self.depths = self.steps - self.steps[0]
        self.node_of = np.array(node_of, dtype=np.int64)
        self._index = index            # (tuple(state), step) -> row

    def __len__(self) -> int:
        return len(self.states)

    def lookup(self, state, step: int) -> int:
        """Row of the verified state equal to (state, step), or -1."""
        return self._index.get((tuple(int(t) for t in state), int(step)), -1)

    def child(self, row: int, commits) -> int:
        """Row of the state ``states[row]`` plus ``commits`` at the next step, or -1."""
        state = list(self.states[row])
        for pos, tok in commits:
            state[pos] = tok
        return self.lookup(state, self.steps[row] + 1)


def build_tree(root, root_step, parents, commits, mask_id, vocab_size, max_set, budget, depth):
    """Validate a draft and flatten it; a bad node raises ``ValueError`` naming it.

    root: (B,) the current state; ``max_set``: commits per edge allowed (1 under the
    one-position rule, B under the threshold rule); ``budget``: node cap (root included);
    ``depth``: depth cap.
    """
    root = [int(t) for t in root]
    check_shape(parents, commits, budget)
    states, steps, node_of, index = [], [], [], {}
    node_state, node_depth = [], []
    for i, (p, cs) in enumerate(zip(parents, commits)):
        known = i > 0 and is_index(p) and 0 <= p < i       # a bad parent: check_node reports it
        state, d = (list(node_state[p]), node_depth[p] + 1) if known else (list(root), 0)
        if i > 0:
            check_node(i, p, cs, state, d, mask_id, vocab_size, max_set, depth)
            for pos, tok in cs:
                state[pos] = tok
        node_state.append(state)
        node_depth.append(d)
        key = (tuple(state), root_step + d)
        if key not in index:
            index[key] = len(states)
            states.append(state)
            steps.append(root_step + d)
        node_of.append(index[key])
    return Tree(states, steps, node_of, index)


def check_shape(parents, commits, budget):
    n = len(parents)
    if n == 0 or n != len(commits):
        raise ValueError(f"draft: parents ({n}) and commits ({len(commits)}) must be equal, non-empty")
    if n > budget:
        raise ValueError(f"draft: {n} nodes, over the node budget {budget}")
    if not is_index(parents[0]) or parents[0] != -1 or len(commits[0]) != 0:
        raise ValueError("draft node 0: the root must have parent -1 and no commits")


def check_node(i, p, cs, state, d, mask_id, vocab_size, max_set, depth):
    """Node i with parent p commits ``cs`` onto the parent's ``state`` at depth d."""
    if not is_index(p):
        raise ValueError(f"draft node {i}: parent {p!r} is not an integer node index")
    if not 0 <= p < i:
        raise ValueError(f"draft node {i}: parent {p} must be a smaller index (0 .. {i - 1})")
    if d > depth:
        raise ValueError(f"draft node {i}: depth {d} exceeds the depth cap {depth}")
    if not 1 <= len(cs) <= max_set:
        raise ValueError(f"draft node {i}: {len(cs)} commits, want 1 .. {max_set}")
    seen = set()
    for pos, tok in cs:
        if not is_index(pos) or not is_index(tok):
            raise ValueError(f"draft node {i}: commit ({pos!r}, {tok!r}) is not a pair of ints")
        if not 0 <= pos < len(state):
            raise ValueError(f"draft node {i}: position {pos} is outside the block [0, {len(state)})")
        if state[pos] != mask_id or pos in seen:
            raise ValueError(f"draft node {i}: position {pos} is already committed")
        if not 0 <= tok < vocab_size or tok == mask_id:
            raise ValueError(f"draft node {i}: token {tok} at position {pos} is not a vocabulary "
                             f"token (0 .. {vocab_size - 1}, MASK {mask_id} excluded)")
        seen.add(pos)


def is_index(x) -> bool:
    """An int or numpy integer, not a bool (``True`` is not position 1)."""
    return isinstance(x, (int, np.integer)) and not isinstance(x, bool)


def walk(tree, decide):
    """Accept by state equality. ``decide(row)`` gives the target's decision at a row.

    Returns (path, bonus): the accepted rows from the root, and the decision at the last one
    (the bonus commit, empty when that state is complete).
    """
    path = [0]
    while True:
        d = decide(path[-1])
        nxt = tree.child(path[-1], d) if d else -1
        if nxt < 0:
            return path, d
        path.append(nxt)
