"""The drafter protocol (docs/spec.md section 7): ``drafter(view) -> Draft``.

A drafter sees only what the decoder already holds after a pass: the current block state, the
step, the stale logits of the previous pass, and the coupled-noise sampler. It proposes a tree
of candidate states; the decoder verifies them all in one forward and keeps what the target
itself would have decided, so a drafter can cost passes but never change the output.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

import numpy as np
import torch

from spotref.spec.checks import check_probs
from spotref.spec.noise import BlockNoise
from spotref.spec.rules import DecisionRule


@dataclass(frozen=True)
class Draft:
    """A draft tree in topological order.

    parents: parents[0] == -1 (node 0 is the root, the current state); every other node's
             parent has a smaller index.
    commits: commits[i] is a tuple of (position, token) pairs: one under the one-position rule,
             a set under the threshold rule, () for the root.
    probs:   optional, the drafter's estimate that each node's state is reached (root 1.0), for a
             per-round budget (``spotref.drafters.budget.trim``); never read by verification.

    A Draft holds the tree as tuples (never a caller's lists) and checks only ``probs``: the tree
    is checked once, by ``build_tree`` (``spotref/spec/core.py``), which alone knows the block, the
    vocabulary, the budget and the depth, and refuses a bad draft naming the node.
    """

    parents: tuple
    commits: tuple
    probs: tuple | None = field(default=None, repr=False, compare=False)

    def __post_init__(self):
        object.__setattr__(self, "parents", _frozen(self.parents, levels=1))
        object.__setattr__(self, "commits", _frozen(self.commits, levels=3))  # nodes, pairs, (position, token)
        if self.probs is not None:
            object.__setattr__(self, "probs", check_probs(self.probs, self.parents))

    @classmethod
    def root(cls) -> "Draft":
        return cls((-1,), ((),))

    @classmethod
    def chain(cls, commits) -> "Draft":
        """A chain: node i + 1 is node i plus commits[i]."""
        return cls(tuple(range(-1, len(commits))), ((),) + tuple(commits))

    def __len__(self) -> int:
        return len(self.parents)

    def prefix(self, n: int) -> "Draft":
        """The first ``n`` nodes (a tree: every parent comes before its children)."""
        n = max(1, min(int(n), len(self)))
        return Draft(self.parents[:n], self.commits[:n], None if self.probs is None else self.probs[:n])


def apply(state: np.ndarray, commits) -> np.ndarray:
    """The state with ``commits`` applied (a copy)."""
    state = state.copy()
    for pos, tok in commits:
        state[pos] = tok
    return state


def _frozen(x, levels: int):
    """``x`` with its sequences made tuples, ``levels`` deep; anything that is no sequence (a
    number, a string) is kept as it is, for ``build_tree`` to refuse."""
    if levels == 0 or isinstance(x, (str, bytes)) or not hasattr(x, "__iter__"):
        return x
    return tuple(_frozen(y, levels - 1) for y in x)


class Drafter(Protocol):
    """The drafter contract (docs/spec.md section 7): any callable from a view to a draft tree."""

    def __call__(self, view: "View") -> Draft: ...


@dataclass
class View:
    """What a drafter may read at the current state (one per round).

    A drafter cannot change the output through its view: ``View.of`` hands it copies (the state
    read-only) and the decoder gives it its own copy of the rule and its own noise of the block.
    ``coupled_tokens`` keeps what it computed for a step in ``_coupled`` (a field the constructor
    sets empty), so a drafter asking again costs nothing."""

    tokens: np.ndarray  # (B,) int64, MASK where uncommitted
    step: int  # decisions already taken in this block
    block: int  # the block index the noise is keyed by (SDAR: absolute; LLaDA, Dream: k from 0)
    stale_logits: torch.Tensor  # (B, V): the previous pass's logits, in their dtype
    rule: DecisionRule
    budget: int  # node budget N (root included)
    depth: int  # depth cap D
    unseen: np.ndarray  # (B,) bool: committed since the stale pass (its bonus decision)
    noise: BlockNoise  # g_k of the block, what coupled tokens are drawn with
    _coupled: dict = field(default_factory=dict, init=False, repr=False, compare=False)  # step -> (B,) tokens

    @classmethod
    def of(cls, state, step, block, stale_logits, rule, budget, depth, unseen=(), noise=None) -> "View":
        """A view over copies of the decoder's state (read-only) and stale logits; ``unseen``:
        the positions committed after the stale pass (the last round's bonus decision);
        ``noise``: the block's ``BlockNoise`` (by default a fresh one of the rule's seed)."""
        tokens = state.copy()
        tokens.flags.writeable = False
        mask = np.zeros(len(tokens), dtype=bool)
        mask[list(unseen)] = True
        mask.flags.writeable = False
        noise = rule.block_noise(int(block)) if noise is None else noise
        return cls(tokens, int(step), int(block), stale_logits.clone(), rule, int(budget), int(depth), mask, noise)

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
        if step not in self._coupled:
            B = len(self.tokens)
            self._coupled[step] = self.rule.tokens(self.stale_logits, range(B), self.noise, step).cpu().numpy()
        return self._coupled[step]

    def stale_confidence(self) -> np.ndarray:
        """(B,) float64: the rule's confidence of the stale tokens at the current step."""
        x = torch.as_tensor(self.coupled_tokens(self.step), device=self.stale_logits.device)
        return self.rule.confidences(self.stale_logits, x).cpu().numpy()


class DraftBuilder:
    """A draft tree grown node by node from a root state, in topological order (a node is
    added after its parent): each node's parent, commits, state, step and depth below the root.
    ``draft()`` is the ``Draft``; the states, steps and depths are there for the drafter to read
    while it grows. ``add`` keeps equal states apart (the core merges them); ``merge`` adds a
    node only when no node holds its state at its step yet.

    >>> b = DraftBuilder(np.array([-1, -1, 7]), step=2)
    >>> b.add(0, ((0, 5),)), b.add(1, ((1, 6),)), b.merge(0, ((0, 5),))
    (1, 2, (1, False))
    >>> b.states[2].tolist(), b.steps, b.depths
    ([5, 6, 7], [2, 3, 4], [0, 1, 2])
    >>> b.draft()
    Draft(parents=(-1, 0, 1), commits=((), ((0, 5),), ((1, 6),)))
    """

    def __init__(self, root: np.ndarray, step: int = 0):
        self.parents, self.commits = [-1], [()]
        self.states, self.steps, self.depths = [root], [step], [0]
        self.nodes = {(root.tobytes(), step): 0}  # (state, step) -> the first node holding it

    @classmethod
    def replay(cls, draft: Draft, root: np.ndarray, step: int = 0) -> "DraftBuilder":
        """``draft`` grown again from ``root``: its nodes' states, steps and depths."""
        b = cls(root, step)
        for p, cs in zip(draft.parents[1:], draft.commits[1:]):
            b.add(p, cs)
        return b

    def __len__(self) -> int:
        return len(self.parents)

    def add(self, parent: int, commits) -> int:
        """Add the node ``parent`` + ``commits`` (one step below ``parent``); returns its index."""
        return self._append(parent, commits, apply(self.states[parent], commits))

    def merge(self, parent: int, commits) -> tuple[int, bool]:
        """(node, added): ``add``, unless a node already holds that state at that step; then
        that node, and nothing is added."""
        state = apply(self.states[parent], commits)
        node = self.nodes.get((state.tobytes(), self.steps[parent] + 1))
        return (node, False) if node is not None else (self._append(parent, commits, state), True)

    def reparent(self, node: int, parent: int, commits) -> None:
        """Reach ``node`` from ``parent`` + ``commits`` instead (the same state, one step below)."""
        self.parents[node], self.commits[node] = parent, commits

    def draft(self) -> Draft:
        return Draft(self.parents, self.commits)

    def _append(self, parent: int, commits, state: np.ndarray) -> int:
        i, step = len(self.parents), self.steps[parent] + 1
        self.parents.append(parent)
        self.commits.append(commits)
        self.states.append(state)
        self.steps.append(step)
        self.depths.append(self.depths[parent] + 1)
        self.nodes.setdefault((state.tobytes(), step), i)
        return i
