"""What the verifier refuses of a draft: the contract of the tree core (``spotref.spec.core`` and
its compiled twin ``_ext/core.pyx``) as checks. A hostile drafter can hand anything to
``build_tree``; each check raises ``ValueError`` naming what it refuses, before any pass, so a
malformed draft is an error and never a wrong output. Nothing here decides a token."""

from __future__ import annotations

import math
import numbers
import reprlib

import numpy as np


def is_index(x) -> bool:
    """An integer (int or numpy integer), not a bool: ``True`` is not position 1."""
    return isinstance(x, numbers.Integral) and not isinstance(x, bool)


def check_int(name, value, lo=None, hi=None) -> int:
    """``value`` as an int in [lo, hi] (a bound of None: no bound on that side)."""
    if not is_index(value) or (lo is not None and value < lo) or (hi is not None and value > hi):
        raise ValueError(f"{name} must be an int in [{_bound(lo, '-inf')}, {_bound(hi, 'inf')}], got {value!r}")
    return int(value)


def _bound(b, none: str) -> str:
    """A bound as a message writes it: 2**31 - 1 rather than 2147483647."""
    if b is None:
        return none
    powers = [k for k in (31, 63, 64) if b == 2**k - 1]
    return f"2**{powers[0]} - 1" if powers else str(b)


LIMIT = 2**31  # bound on every int the tree core holds: the compiled twin's rows are int32


BUILD_INTS = (("root_step", 0), ("mask_id", 0), ("vocab_size", 1), ("max_set", 1), ("budget", 1), ("depth", 0))


def check_build_args(root_step, mask_id, vocab_size, max_set, budget, depth) -> None:
    """``build_tree``'s ints: each in [lower bound, LIMIT) (``BUILD_INTS``), and steps stay below LIMIT."""
    for (name, lo), x in zip(BUILD_INTS, (root_step, mask_id, vocab_size, max_set, budget, depth)):
        check_int(f"build_tree: {name}", x, lo, LIMIT - 1)
    if int(root_step) + int(depth) >= LIMIT:
        raise ValueError(
            f"build_tree: root_step + depth must be below 2**{LIMIT.bit_length() - 1}, got {root_step} + {depth}"
        )


def check_state(what, state, mask_id, vocab_size, B=None):
    """A block state: a 1-D numpy integer array or a tuple or list of ints, B of them (at least
    one when B is None), each a vocabulary token or MASK. Returns it as a list of ints."""
    if isinstance(state, np.ndarray) and state.ndim == 1 and state.dtype.kind in "iu":
        tokens = state.tolist()
    elif isinstance(state, (tuple, list)) and all(is_index(t) for t in state):
        tokens = [int(t) for t in state]
    else:
        raise ValueError(f"{what}: want a 1-D integer array or a tuple or list of ints, got {reprlib.repr(state)}")
    if len(tokens) != B if B is not None else not tokens:
        raise ValueError(f"{what}: {len(tokens)} tokens, want {'at least 1' if B is None else B}")
    for j, t in enumerate(tokens):
        if not (0 <= t < vocab_size or t == mask_id):
            raise ValueError(
                f"{what}: token {t} at position {j} is neither a vocabulary token "
                f"(0 .. {vocab_size - 1}) nor MASK {mask_id}"
            )
    return tokens


def check_shape(parents, commits, budget) -> None:
    """A draft's parent array and commits: tuples or lists of one length, 1 .. budget nodes, and
    node 0 the root (parent -1, no commits)."""
    if not isinstance(parents, (tuple, list)) or not isinstance(commits, (tuple, list)):
        raise ValueError(
            f"draft: parents and commits must be tuples or lists, got "
            f"{type(parents).__name__} and {type(commits).__name__}"
        )
    n = len(parents)
    if n == 0 or n != len(commits):
        raise ValueError(f"draft: parents ({n}) and commits ({len(commits)}) must be equal, non-empty")
    if n > budget:
        raise ValueError(f"draft: {n} nodes, over the node budget {budget}")
    root_parent, root_commits = parents[0], commits[0]
    if not (
        is_index(root_parent)
        and root_parent == -1
        and isinstance(root_commits, (tuple, list))
        and len(root_commits) == 0
    ):
        raise ValueError("draft node 0: the root must have parent -1 and no commits")


def check_node(i, parent, commits, states, depths, mask_id, vocab_size, max_set, depth) -> None:
    """Draft node ``i`` >= 1: ``parent`` an earlier node, the node at most ``depth`` below the root,
    ``commits`` 1 .. max_set pairs onto the parent's state (``states``, ``depths``: the earlier nodes')."""
    if not is_index(parent):
        raise ValueError(f"draft node {i}: parent {parent!r} is not an integer node index")
    if not 0 <= parent < i:
        raise ValueError(f"draft node {i}: parent {parent} must be a smaller index (0 .. {i - 1})")
    if depths[parent] + 1 > depth:
        raise ValueError(f"draft node {i}: depth {depths[parent] + 1} exceeds the depth cap {depth}")
    check_commits(f"draft node {i}", commits, states[parent], mask_id, vocab_size, 1, max_set)


def check_decision(row, commits, state, mask_id, vocab_size, max_set) -> None:
    """The target's decision at ``state`` (row ``row`` of a tree): () exactly when no MASK is
    left, else 1 .. max_set pairs."""
    n = max_set if mask_id in state else 0
    check_commits(f"decision at row {row}", commits, state, mask_id, vocab_size, min(n, 1), n)


def check_commits(where, commits, state, mask_id, vocab_size, least, most) -> None:
    """``least`` .. ``most`` (position, token) pairs onto ``state``: a tuple or list of pairs, each a
    tuple or list of two ints, distinct positions masked in ``state``, tokens of the vocabulary
    other than MASK."""
    if not isinstance(commits, (tuple, list)):
        raise ValueError(f"{where}: commits must be (position, token) pairs, got {reprlib.repr(commits)}")
    if not least <= len(commits) <= most:
        raise ValueError(f"{where}: {len(commits)} commits, want {least} .. {most}")
    seen = set()
    for c in commits:
        if not isinstance(c, (tuple, list)) or len(c) != 2:
            raise ValueError(f"{where}: commits must be (position, token) pairs, got {reprlib.repr(commits)}")
        pos, tok = c
        if not is_index(pos) or not is_index(tok):
            raise ValueError(f"{where}: commit ({pos!r}, {tok!r}) is not a pair of ints")
        if not 0 <= pos < len(state):
            raise ValueError(f"{where}: position {pos} is outside the block [0, {len(state)})")
        if state[pos] != mask_id or pos in seen:
            raise ValueError(f"{where}: position {pos} is already committed")
        if not 0 <= tok < vocab_size or tok == mask_id:
            raise ValueError(
                f"{where}: token {tok} at position {pos} is not a vocabulary token "
                f"(0 .. {vocab_size - 1}, MASK {mask_id} excluded)"
            )
        seen.add(pos)


def check_tree(tree, cls) -> None:
    """``walk``'s tree: a ``cls`` (the walking core's own Tree)."""
    if not isinstance(tree, cls):
        kind = type(tree)
        raise ValueError(
            f"walk: tree must be a Tree from this core's build_tree, got {kind.__module__}.{kind.__qualname__}"
        )


def check_probs(probs, parents) -> tuple:
    """One number in [0, 1] per node of ``parents``, as a tuple of floats (not counted when
    ``parents`` is no tuple: then it is no draft, and ``build_tree`` refuses it)."""
    try:
        out = tuple(float(p) for p in probs)
    except (TypeError, ValueError):
        raise ValueError(f"draft: probs must be a sequence of numbers, got {probs!r}") from None
    if isinstance(parents, tuple) and len(out) != len(parents):
        raise ValueError(f"draft: {len(out)} probs for {len(parents)} nodes")
    for i, p in enumerate(out):
        if not (math.isfinite(p) and 0.0 <= p <= 1.0):
            raise ValueError(f"draft node {i}: prob {p!r} is not in [0, 1]")
    return out
