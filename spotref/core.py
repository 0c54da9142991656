"""Draft trees and their verification, in pure Python: the specification of ``_ext/core.pyx``.

A draft (``spotref.Draft``) is a parent array in topological order: node 0 is the root (the
current block state), every other node is its parent plus one commit set ``((position, token),
...)``. ``build_tree`` validates it, derives every node's block state and step, merges nodes
that reach the same state (same tokens, same step: the tree is really a DAG) and flattens the
distinct states into the verify batch. ``walk`` then accepts by state equality: from the root,
while the state that the target's own decision leads to was verified, move there.

The docstrings of ``build_tree``, ``Tree.child`` and ``walk`` state what they accept; anything
else raises ``ValueError`` naming the argument (and the node or row). An int is a Python or
numpy integer, never a bool (``True`` is not position 1), and every int the core holds (tokens,
MASK, steps, node and row counts) is below ``LIMIT``.

The Cython twin mirrors every public name here and checks the same contract on its fast path;
whatever it refuses it hands to the checks here, so both raise the same message.
``tests/test_core.py`` runs both against a brute-force oracle and ``spotref.EXTENSION`` says
which one the decoders use.
"""
from __future__ import annotations

import reprlib

import numpy as np

from spotref.checks import check_int, check_state, is_index

LIMIT = 2 ** 31      # bound on every int the core holds: the compiled twin's rows are int32
_LIMIT = f"2**{LIMIT.bit_length() - 1}"                 # as messages write it
SCALARS = (("root_step", 0), ("mask_id", 0), ("vocab_size", 1), ("max_set", 1), ("budget", 1),
           ("depth", 0))                               # build_tree's ints and their lower bounds


class Tree:
    """A validated draft, its distinct states flattened for one verify forward (``build_tree``).

    states:  (U, B) int64, the distinct block states (row 0 is the root);
    steps:   (U,) int64, the step (decisions taken in the block) of each state;
    mask_id, vocab_size, max_set: build_tree's, against which ``child`` checks a decision.
    """

    def __init__(self, node_states, node_steps, mask_id, vocab_size, max_set):
        """Merge the nodes' (state, step) pairs into distinct rows, in order of first appearance."""
        self._index = {}                                # (tuple(state), step) -> row
        states, steps = [], []
        for state, step in zip(node_states, node_steps):
            key = (tuple(state), step)
            if key not in self._index:
                self._index[key] = len(states)
                states.append(state)
                steps.append(step)
        self.states = np.array(states, dtype=np.int64)
        self.steps = np.array(steps, dtype=np.int64)
        self.mask_id, self.vocab_size, self.max_set = mask_id, vocab_size, max_set

    def __len__(self) -> int:
        return len(self.states)

    def child(self, row, commits) -> int:
        """Row of ``states[row]`` plus the decision ``commits``, at the next step; or -1.

        row: an int in [0, len(tree)). commits: the target's decision at that state, in the
        form ``DecisionRule.decide`` gives it: () when the state has no MASK left (then -1:
        nothing follows), else a tuple or list of 1 .. max_set (position, token) pairs, each a
        tuple or list of two ints: distinct positions masked in the state, tokens of the
        vocabulary (0 .. vocab_size - 1) other than MASK, in any order.
        """
        check_int("child: row", row, 0, len(self) - 1)
        state = self.states[row].tolist()
        pairs = check_decision(row, commits, state, self.mask_id, self.vocab_size, self.max_set)
        if not pairs:
            return -1
        for pos, tok in pairs:
            state[pos] = tok
        return self._index.get((tuple(state), int(self.steps[row]) + 1), -1)


def build_tree(root, root_step, parents, commits, mask_id, vocab_size, max_set, budget, depth):
    """Validate a draft and flatten it into a ``Tree``; anything outside this raises ``ValueError``.

    root_step, mask_id, vocab_size, max_set, budget, depth: ints in [0, LIMIT) (vocab_size,
        max_set and budget at least 1), root_step + depth < LIMIT. ``max_set``: commits per node
        (1 under the one-position rule, B under the threshold rule); ``budget``: node cap (root
        included); ``depth``: depth cap. MASK may lie outside the vocabulary.
    root: (B,) the current state, B >= 1: a 1-D numpy integer array (the decoder's int64) or a
        tuple or list of ints, each a vocabulary token (0 .. vocab_size - 1) or MASK.
    parents, commits: tuples or lists of one length N, 1 <= N <= budget. Node 0 is the root
        (parent -1, commits ()); node i >= 1 has an int parent in [0, i), lies at most
        ``depth`` below the root and commits onto its parent's state what ``Tree.child``
        takes as a decision there (1 .. max_set pairs).
    """
    check_args(root_step, mask_id, vocab_size, max_set, budget, depth)
    root = check_state("draft root", root, mask_id, vocab_size)
    check_shape(parents, commits, budget)
    node_states, node_depths = [root], [0]
    for i in range(1, len(parents)):
        state, d = check_node(i, parents[i], commits[i], node_states, node_depths,
                              mask_id, vocab_size, max_set, depth)
        node_states.append(state)
        node_depths.append(d)
    steps = [int(root_step) + d for d in node_depths]
    return Tree(node_states, steps, int(mask_id), int(vocab_size), int(max_set))


def walk(tree, decide):
    """Accept by state equality. ``decide(row)`` gives the target's decision at ``states[row]``
    (as ``Tree.child`` takes it: a decision it refuses raises ``ValueError``).

    tree: a ``Tree`` from this module's ``build_tree``. Returns (path, bonus): the accepted rows
    from the root, and the decision at the last one (the bonus commit, empty when that state
    is complete).
    """
    check_tree(tree, Tree)
    path = [0]
    while True:
        d = decide(path[-1])
        nxt = tree.child(path[-1], d)
        if nxt < 0:
            return path, d
        path.append(nxt)


# ---- the checks: one ValueError message per broken clause, shared by the compiled twin -------

def check_args(root_step, mask_id, vocab_size, max_set, budget, depth):
    """build_tree's ints: in [lo, LIMIT) (``SCALARS``), and steps stay below LIMIT."""
    for (name, lo), x in zip(SCALARS, (root_step, mask_id, vocab_size, max_set, budget, depth)):
        check_int(f"build_tree: {name}", x, lo, LIMIT - 1)
    if int(root_step) + int(depth) >= LIMIT:
        raise ValueError(f"build_tree: root_step + depth must be below {_LIMIT}, got {root_step} + {depth}")


def check_shape(parents, commits, budget):
    if not isinstance(parents, (tuple, list)) or not isinstance(commits, (tuple, list)):
        raise ValueError(f"draft: parents and commits must be tuples or lists, got "
                         f"{type(parents).__name__} and {type(commits).__name__}")
    n = len(parents)
    if n == 0 or n != len(commits):
        raise ValueError(f"draft: parents ({n}) and commits ({len(commits)}) must be equal, non-empty")
    if n > budget:
        raise ValueError(f"draft: {n} nodes, over the node budget {budget}")
    if not is_index(parents[0]) or parents[0] != -1 or not isinstance(commits[0], (tuple, list)) \
            or len(commits[0]) != 0:
        raise ValueError("draft node 0: the root must have parent -1 and no commits")


def check_node(i, p, cs, node_states, node_depths, mask_id, vocab_size, max_set, depth):
    """Node i: parent p (an earlier node) plus the commits ``cs``; returns its (state, depth)."""
    if not is_index(p):
        raise ValueError(f"draft node {i}: parent {p!r} is not an integer node index")
    if not 0 <= p < i:
        raise ValueError(f"draft node {i}: parent {p} must be a smaller index (0 .. {i - 1})")
    d = node_depths[p] + 1
    if d > depth:
        raise ValueError(f"draft node {i}: depth {d} exceeds the depth cap {depth}")
    state = list(node_states[p])
    for pos, tok in check_commits(f"draft node {i}", cs, state, mask_id, vocab_size, 1, max_set):
        state[pos] = tok
    return state, d


def check_decision(row, cs, state, mask_id, vocab_size, max_set):
    """The decision at ``state`` (row ``row``): () exactly when no MASK is left, else 1 ..
    max_set commits. Returns its pairs."""
    n = max_set if mask_id in state else 0
    return check_commits(f"decision at row {row}", cs, state, mask_id, vocab_size, min(n, 1), n)


def check_commits(where, cs, state, mask_id, vocab_size, least, most):
    """``least .. most`` (position, token) pairs onto ``state``; returns ``cs``."""
    if not isinstance(cs, (tuple, list)):
        raise ValueError(f"{where}: commits must be (position, token) pairs, got {reprlib.repr(cs)}")
    if not least <= len(cs) <= most:
        raise ValueError(f"{where}: {len(cs)} commits, want {least} .. {most}")
    seen = set()
    for c in cs:
        if not isinstance(c, (tuple, list)) or len(c) != 2:
            raise ValueError(f"{where}: commits must be (position, token) pairs, got {reprlib.repr(cs)}")
        pos, tok = c
        if not is_index(pos) or not is_index(tok):
            raise ValueError(f"{where}: commit ({pos!r}, {tok!r}) is not a pair of ints")
        if not 0 <= pos < len(state):
            raise ValueError(f"{where}: position {pos} is outside the block [0, {len(state)})")
        if state[pos] != mask_id or pos in seen:
            raise ValueError(f"{where}: position {pos} is already committed")
        if not 0 <= tok < vocab_size or tok == mask_id:
            raise ValueError(f"{where}: token {tok} at position {pos} is not a vocabulary token "
                             f"(0 .. {vocab_size - 1}, MASK {mask_id} excluded)")
        seen.add(pos)
    return cs


def check_tree(tree, cls):
    if not isinstance(tree, cls):
        kind = type(tree)
        raise ValueError(f"walk: tree must be a Tree from this core's build_tree, "
                         f"got {kind.__module__}.{kind.__qualname__}")
