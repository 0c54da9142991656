"""The target's decision at a state (SPEC section 2): which masked positions to commit, with which tokens.

A decision is a pure function of the logits ``L[B, V]`` at the state and of the noise of the
state's step, so any decoder that reaches the same state reaches the same decision:

* tokens: ``T == 0``: ``argmax_v L[j, v]``; ``T > 0``: ``argmax_v (L[j, v] / T + g_k[j, v])``
  (Gumbel-max: a draw from ``softmax(L[j] / T)``), top-k / top-p applied to ``L / T`` first;
* MASK is never sampled (its logit is -inf before anything else); ties go to the lowest index;
* confidence ``c_j = softmax(L[j] / T)[x_j]`` from the unfiltered distribution
  (``softmax(L[j])`` at T = 0);
* one-position rule: the single most confident masked position;
  threshold rule: every masked position with ``c_j > tau``, else the single most confident.

All maths is float64 on the logits' device. A decision is a tuple of ``(position, token)`` pairs
sorted by position: the form of ``Draft.commits`` and of the state-equality check.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import numpy as np
import torch

from spotref.noise import gumbel

Commits = tuple  # tuple[tuple[int, int], ...], sorted by position


@dataclass
class DecisionRule:
    """Decision parameters of one generation, and the noise cache of its current block."""

    mask_id: int
    vocab_size: int
    block_size: int
    temperature: float = 0.0
    seed: int = 0
    top_k: int | None = None
    top_p: float | None = None
    threshold: float | None = None
    _noise: dict = field(default_factory=dict, repr=False)

    def copy(self) -> "DecisionRule":
        """The same parameters with a noise cache of its own."""
        return dataclasses.replace(self, _noise={})

    def noise(self, block: int, step: int, device) -> torch.Tensor:
        """g_k: (B, V) float64, cached for the current block only."""
        key = (block, step)
        if key not in self._noise:
            if any(b != block for b, _ in self._noise):
                self._noise.clear()
            self._noise[key] = gumbel(self.seed, block, step, self.block_size, self.vocab_size, device)
        return self._noise[key]

    def scaled(self, logits: torch.Tensor) -> torch.Tensor:
        """logits: (M, V) -> float64 L / T (L at T = 0) with MASK at -inf."""
        z = logits.double().clone()
        z[:, self.mask_id] = -torch.inf
        return z / self.temperature if self.temperature > 0 else z

    def tokens(self, logits: torch.Tensor, positions, block: int, step: int) -> torch.Tensor:
        """Sampled tokens (M,) of rows ``logits: (M, V)`` at block ``positions`` under step's noise."""
        z = self.scaled(logits)
        if self.temperature == 0:
            return z.argmax(-1)
        g = self.noise(block, step, z.device)[torch.as_tensor(positions, device=z.device)]
        return (filter_top_k_top_p(z, self.top_k, self.top_p) + g).argmax(-1)

    def decide(self, logits: torch.Tensor, state: np.ndarray, block: int, step: int) -> Commits:
        """logits: (B, V) at ``state`` (B,), MASK where uncommitted -> the decision's commits."""
        masked = np.flatnonzero(state == self.mask_id)
        if len(masked) == 0:
            return ()
        rows = logits[torch.as_tensor(masked, device=logits.device)]              # (M, V)
        x = self.tokens(rows, masked, block, step)                                 # (M,)
        z = self.scaled(rows)
        c = torch.exp(z.gather(1, x[:, None])[:, 0] - torch.logsumexp(z, -1))      # (M,) confidence
        if self.threshold is not None and bool((c > self.threshold).any()):
            chosen = torch.nonzero(c > self.threshold)[:, 0]
        else:
            chosen = c.argmax()[None]                         # first maximum: the lowest position
        x, chosen = x.tolist(), chosen.tolist()
        return tuple((int(masked[i]), x[i]) for i in chosen)


def filter_top_k_top_p(z: torch.Tensor, top_k: int | None, top_p: float | None) -> torch.Tensor:
    """z: (M, V) scaled logits -> the same with filtered-out entries at -inf.

    top-k keeps the k largest entries; top-p then keeps the smallest prefix of the survivors in
    descending order whose renormalised probability reaches p (at least one), as SDAR's
    generate.py applies them; ties in the order go to the lower index."""
    if top_k is None and top_p is None:
        return z
    order = torch.sort(z, dim=-1, descending=True, stable=True).indices       # (M, V)
    keep = torch.ones_like(z, dtype=torch.bool)                                # in sorted order
    if top_k is not None:
        keep[:, top_k:] = False
    if top_p is not None:                                     # over the top-k survivors
        p = torch.softmax(z.gather(1, order).masked_fill(~keep, -torch.inf), -1)
        before = torch.cumsum(p, -1)[:, :-1]                   # mass strictly before each entry
        keep[:, 1:] &= before < top_p
    kept = torch.zeros_like(keep).scatter(1, order, keep)
    return z.masked_fill(~kept, -torch.inf)
