"""The drafter protocol (SPEC section 7): ``drafter(view) -> Draft``.

A drafter sees only what the decoder already holds after a pass: the current block state, the
step, the stale logits of the previous pass, and the coupled-noise sampler. It proposes a tree
of candidate states; the decoder verifies them all in one forward and keeps what the target
itself would have decided, so a drafter can cost passes but never change the output.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from spotref.core import is_index
from spotref.rules import DecisionRule


@dataclass(frozen=True)
class Draft:
    """A draft tree in topological order.

    parents: parents[0] == -1 (node 0 is the root, the current state); every other node's
             parent has a smaller index.
    commits: commits[i] is a tuple of (position, token) pairs: one under the one-position rule,
             a set under the threshold rule, () for the root.
    """

    parents: tuple
    commits: tuple

    def __post_init__(self):
        if isinstance(self.parents, (str, bytes)) or not hasattr(self.parents, "__iter__"):
            raise ValueError(f"draft: parents must be a sequence of node indices, got {self.parents!r}")
        if isinstance(self.commits, (str, bytes)) or not hasattr(self.commits, "__iter__"):
            raise ValueError(f"draft: commits must be a sequence of commit tuples, got {self.commits!r}")
        object.__setattr__(self, "parents", tuple(self.parents))
        for i, p in enumerate(self.parents):
            if not is_index(p):
                raise ValueError(f"draft node {i}: parent {p!r} is not an integer node index")
        object.__setattr__(self, "commits", tuple(_pairs(i, c) for i, c in enumerate(self.commits)))

    @classmethod
    def root(cls) -> "Draft":
        return cls((-1,), ((),))

    @classmethod
    def chain(cls, commits) -> "Draft":
        """A chain: node i + 1 is node i plus commits[i]."""
        return cls(tuple(range(-1, len(commits))), ((),) + tuple(commits))

    def __len__(self) -> int:
        return len(self.parents)


def apply(state: np.ndarray, commits) -> np.ndarray:
    """The state with ``commits`` applied (a copy)."""
    state = state.copy()
    for pos, tok in commits:
        state[pos] = tok
    return state


def _pairs(i, c):
    try:
        pairs = tuple((p, t) for p, t in c)
    except (TypeError, ValueError):
        raise ValueError(f"draft node {i}: commits must be (position, token) pairs, got {c!r}") from None
    for p, t in pairs:
        if not is_index(p) or not is_index(t):      # True is not position 1
            raise ValueError(f"draft node {i}: commit ({p!r}, {t!r}) is not a pair of ints")
    return pairs


@dataclass
class View:
    """What a drafter may read at the current state (one per round).

    A drafter cannot change the output through its view: ``View.of`` hands it copies (the state
    read-only) and the decoder gives it its own copy of the rule, with its own noise cache."""

    tokens: np.ndarray             # (B,) int64, MASK where uncommitted
    step: int                      # decisions already taken in this block
    block: int                     # block index (absolute, from position 0)
    stale_logits: torch.Tensor     # (B, V) float32: the previous pass's logits
    rule: DecisionRule
    budget: int                    # node budget N (root included)
    depth: int                     # depth cap D

    @classmethod
    def of(cls, state, step, block, stale_logits, rule, budget, depth) -> "View":
        """A view over copies of the decoder's state (read-only) and stale logits."""
        tokens = state.copy()
        tokens.flags.writeable = False
        return cls(tokens, int(step), int(block), stale_logits.clone(), rule, int(budget), int(depth))

    @property
    def temperature(self) -> float:
        return self.rule.temperature

    @property
    def mask_id(self) -> int:
        return self.rule.mask_id

    @property
    def threshold(self) -> float | None:
        return self.rule.threshold

    @property
    def masked(self) -> np.ndarray:
        """Positions still masked, ascending."""
        return np.flatnonzero(self.tokens == self.rule.mask_id)

    def coupled_token(self, position: int, step: int) -> int:
        """The stale token at ``position`` under the noise of ``step``: what the target samples
        there at that step if its logits have not changed."""
        return int(self.coupled_tokens(step)[position])

    def coupled_tokens(self, step: int) -> np.ndarray:
        """(B,) the stale tokens of every position under the noise of ``step``."""
        cache = self.__dict__.setdefault("_coupled", {})
        if step not in cache:
            B = len(self.tokens)
            cache[step] = self.rule.tokens(self.stale_logits, range(B), self.block, step).cpu().numpy()
        return cache[step]

    def stale_confidence(self) -> np.ndarray:
        """(B,) float64: the rule's confidence of the stale tokens at the current step."""
        x = torch.as_tensor(self.coupled_tokens(self.step), device=self.stale_logits.device)
        return self.rule.confidences(self.stale_logits, x).cpu().numpy()
