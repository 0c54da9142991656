"""Draft trees and their verification, in pure Python: the specification of ``_ext/core.pyx``.

A draft (``spotref.Draft``) is a parent array in topological order: node 0 is the root (the
current block state), every other node is its parent plus one commit set ``((position, token),
...)``. ``build_tree`` derives every node's block state and step, merges nodes that reach the
same state (same tokens, same step: the tree is really a DAG) and flattens the distinct states
into the verify batch. ``walk`` then accepts by state equality: from the root, while the state
that the target's own decision leads to was verified, move there.

The docstrings of ``build_tree``, ``Tree.child`` and ``walk`` state what they accept; anything
else raises ``ValueError`` naming the argument (and the node or row), from the checks of
``spotref/checks.py`` that each calls first. A draft is checked here, once: ``build_tree`` is
the one gate between every drafter and the model, and the only place that knows the block,
the vocabulary, the budget and the depth (``spotref.Draft`` only holds the tree). An int is a
Python or numpy integer, never a bool (``True`` is not position 1), and every int the core holds
(tokens, MASK, steps, node and row counts) is below ``LIMIT``.

The Cython twin mirrors every public name here and checks the same contract on its fast path;
whatever it refuses it hands to the same checks, so both raise the same message.
``tests/spec/test_core.py`` runs both against a brute-force oracle and ``spotref.EXTENSION`` says
which one the decoders use.
"""

from __future__ import annotations

import numpy as np

from spotref.spec.checks import (
    LIMIT,
    check_build_args,
    check_decision,
    check_int,
    check_node,
    check_shape,
    check_state,
    check_tree,
)

__all__ = ["LIMIT", "Tree", "build_tree", "walk"]  # the names _ext/core.pyx mirrors


class Tree:
    """A validated draft, its distinct states flattened for one verify forward (``build_tree``).

    states:  (U, B) int64, the distinct block states (row 0 is the root);
    steps:   (U,) int64, the step (decisions taken in the block) of each state;
    mask_id, vocab_size, max_set: build_tree's, against which ``child`` checks a decision.
    """

    def __init__(self, node_states, node_steps, mask_id, vocab_size, max_set):
        """Merge the nodes' (state, step) pairs into distinct rows, in order of first appearance."""
        self._index = {}  # (tuple(state), step) -> row
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
        check_decision(row, commits, state, self.mask_id, self.vocab_size, self.max_set)
        if not commits:  # a complete state: nothing follows
            return -1
        return self._index.get((tuple(_applied(state, commits)), int(self.steps[row]) + 1), -1)


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
    check_build_args(root_step, mask_id, vocab_size, max_set, budget, depth)
    root = check_state("draft root", root, mask_id, vocab_size)
    check_shape(parents, commits, budget)
    states, depths = [root], [0]  # every node's state and depth below the root
    for i in range(1, len(parents)):
        p, cs = parents[i], commits[i]
        check_node(i, p, cs, states, depths, mask_id, vocab_size, max_set, depth)
        states.append(_applied(states[p], cs))
        depths.append(depths[p] + 1)
    steps = [int(root_step) + d for d in depths]
    return Tree(states, steps, int(mask_id), int(vocab_size), int(max_set))


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


def _applied(state, commits) -> list:
    """A copy of ``state`` (a list of tokens) with the (position, token) pairs ``commits`` set."""
    state = list(state)
    for pos, tok in commits:
        state[pos] = tok
    return state
