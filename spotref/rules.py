"""The target's decision at a state (SPEC section 2): which masked positions to commit, with which tokens.

A decision is a pure function of the logits ``L[B, V]`` at the state and of the noise of the
state's step, so any decoder that reaches the same state reaches the same decision:

* the scores ``z = filter(L / T)`` (``filter(L)`` at T = 0): MASK's logit at -inf before anything
  else, then top-k / top-p (``filter_top_k_top_p``, as SDAR's generate.py applies them);
* tokens: ``T == 0``: ``argmax_v z[j, v]``; ``T > 0``: ``argmax_v (z[j, v] + g_k[j, v])``
  (Gumbel-max: a draw from ``softmax(z[j])``); ties go to the lowest index;
* confidence ``c_j = softmax(z[j])[x_j]``: the probability of the token under the filtered,
  renormalised distribution it was drawn from, as SDAR's ``x0_p``; ``confidence="unfiltered"``
  takes ``softmax(L[j] / T)[x_j]`` instead, as lmdeploy's and SGLang's unmasking steps do (the
  two agree without top-k / top-p; docs/spec.md section 2 compares the decoders);
* one-position rule: the single most confident masked position;
  threshold rule: every masked position with ``c_j > tau``, else the single most confident.

Every other place that samples a coupled token, its runner-up or a confidence (the view, the
drafters, the recorders) calls ``scores``, ``sample``, ``runner_up`` and ``confidences`` here.

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
CONFIDENCES = ("filtered", "unfiltered")


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
    confidence: str = "filtered"     # or "unfiltered": see the module docstring
    _noise: dict = field(default_factory=dict, repr=False)

    def __post_init__(self):
        if self.confidence not in CONFIDENCES:
            raise ValueError(f"confidence must be one of {CONFIDENCES}, got {self.confidence!r}")

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

    def scores(self, logits: torch.Tensor) -> torch.Tensor:
        """logits: (M, V) -> z (M, V) float64: ``scaled`` with top-k / top-p applied."""
        return filter_top_k_top_p(self.scaled(logits), self.top_k, self.top_p)

    def sample(self, z: torch.Tensor, positions, block: int, step: int) -> torch.Tensor:
        """Tokens (M,) of scores ``z: (M, V)`` at block ``positions`` under step's noise."""
        return self.perturbed(z, positions, block, step).argmax(-1)

    def runner_up(self, z: torch.Tensor, positions, block: int, step: int):
        """(tokens, runner-up tokens) (M,): the best and second best of z + g_k."""
        y = self.perturbed(z, positions, block, step)
        x = y.argmax(-1)
        y[torch.arange(len(x)), x] = -torch.inf
        return x, y.argmax(-1)

    def perturbed(self, z: torch.Tensor, positions, block: int, step: int) -> torch.Tensor:
        """z + g_k at ``positions`` (a copy of z at T = 0)."""
        if self.temperature == 0:
            return z.clone()
        return z + self.noise(block, step, z.device)[torch.as_tensor(positions, device=z.device)]

    def probs(self, logits: torch.Tensor) -> torch.Tensor:
        """(M, V) float64: the distribution confidences are taken from (filtered or not)."""
        z = self.scores(logits) if self.confidence == "filtered" else self.scaled(logits)
        return torch.softmax(z, -1)

    def confidences(self, logits: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """c (M,) float64: the probability of tokens ``x`` (M,) under ``probs(logits)``."""
        z = self.scores(logits) if self.confidence == "filtered" else self.scaled(logits)
        return torch.exp(z.gather(1, x[:, None])[:, 0] - torch.logsumexp(z, -1))

    def tokens(self, logits: torch.Tensor, positions, block: int, step: int) -> torch.Tensor:
        """Sampled tokens (M,) of rows ``logits: (M, V)`` at block ``positions`` under step's noise."""
        return self.sample(self.scores(logits), positions, block, step)

    def decide(self, logits: torch.Tensor, state: np.ndarray, block: int, step: int) -> Commits:
        """logits: (B, V) at ``state`` (B,), MASK where uncommitted -> the decision's commits."""
        masked = np.flatnonzero(state == self.mask_id)
        if len(masked) == 0:
            return ()
        rows = logits[torch.as_tensor(masked, device=logits.device)]              # (M, V)
        x = self.tokens(rows, masked, block, step)                                 # (M,)
        c = self.confidences(rows, x)                                              # (M,)
        if self.threshold is not None and bool((c > self.threshold).any()):
            chosen = torch.nonzero(c > self.threshold)[:, 0]
        else:
            chosen = c.argmax()[None]                         # first maximum: the lowest position
        x, chosen = x.tolist(), chosen.tolist()
        return tuple((int(masked[i]), x[i]) for i in chosen)


def filter_top_k_top_p(z: torch.Tensor, top_k: int | None, top_p: float | None) -> torch.Tensor:
    """z: (M, V) scaled logits -> the same with filtered-out entries at -inf.

    top-k keeps the k largest entries; top-p then keeps, of the survivors in descending order,
    every entry whose renormalised mass strictly before it is at most p (so at least one), as
    SDAR's generate.py applies them; ties in the order go to the lower index (SDAR's top-k keeps
    every entry tied with the k-th: see docs/spec.md section 2)."""
    if top_k is None and top_p is None:
        return z
    order = torch.sort(z, dim=-1, descending=True, stable=True).indices       # (M, V)
    keep = torch.ones_like(z, dtype=torch.bool)                                # in sorted order
    if top_k is not None:
        keep[:, top_k:] = False
    if top_p is not None:                                     # over the top-k survivors
        p = torch.softmax(z.gather(1, order).masked_fill(~keep, -torch.inf), -1)
        before = torch.cumsum(p, -1)[:, :-1]                   # mass strictly before each entry
        keep[:, 1:] &= before <= top_p
    kept = torch.zeros_like(keep).scatter(1, order, keep)
    return z.masked_fill(~kept, -torch.inf)
