"""What a drafter reads: the ``DrafterInputs`` contract, and ``ViewInputs``, its form over a live view.

The order model and the calibrated graph read the same few things about a round: the current
state, its step, what was committed since the stale pass, the stale top-32 probabilities, and
the coupled tokens (and runner-ups) with their stale probabilities at any step. ``ViewInputs``
computes them from a ``View`` through the
decision rule (``spotref.spec.rules``: the one home of sampling and confidence); recorded trajectories
(``spotref.record.trajectories.Row``) hand the same names to offline training and evaluation.

Device: the (B, V) work (the rule's probabilities, the coupled tokens) runs on the stale logits'
device; what the order model reads ((B, 32) probabilities, (B,) tokens and probabilities) is
brought to the CPU, where the 0.62M-parameter order model runs.
"""

from __future__ import annotations

import functools
from typing import Protocol

import numpy as np
import torch

from spotref.drafters import order


class DrafterInputs(Protocol):
    """What ``SpotDrafter.draft`` and ``CalibratedDrafter.draft`` read."""

    tokens: np.ndarray  # (B,) int64 state, MASK where uncommitted
    step: int  # decisions taken in the block
    unseen: np.ndarray  # (B,) bool: committed since the stale pass
    mask_id: int
    temperature: float
    top: torch.Tensor  # (B, 32) sorted stale probabilities

    def coupled(self, m: int) -> tuple:
        """(tokens (B,) int64 numpy, their stale probabilities (B,) tensor) under step m's noise."""

    def second(self, m: int) -> tuple:
        """The runner-up tokens at step m and their stale probabilities."""


class ViewInputs:
    """What the order model reads, computed from a live ``View``."""

    def __init__(self, view):
        self.view, self.tokens, self.step, self.mask_id = view, view.tokens, view.step, view.mask_id
        self.unseen = view.unseen
        self.temperature = view.temperature
        self.probs = view.rule.probs(view.stale_logits).float()  # (B, V) what c is taken from
        self._coupled, self._second = {}, {}

    @functools.cached_property
    def top(self) -> torch.Tensor:
        """(B, 32) sorted stale probabilities (only the order model reads them)."""
        return order.top_probs(self.probs).cpu()

    @functools.cached_property
    def filtered(self) -> torch.Tensor:
        """(B, V) float64: the rule's scores of the stale logits, what every step's noise is added to."""
        return self.view.rule.scores(self.view.stale_logits)

    def pair(self, m: int):
        """(coupled tokens, runner-up tokens), each (B,) int64, under the noise of step m."""
        return self.view.rule.runner_up(self.filtered, range(len(self.tokens)), self.view.noise, m)

    def coupled(self, m: int):
        """(tokens (B,) int64, their stale probabilities (B,)) under the noise of step m."""
        if m not in self._coupled:
            x = self.view.coupled_tokens(m)  # (B,) numpy
            idx = torch.as_tensor(x, device=self.probs.device)[:, None]
            self._coupled[m] = (x, self.probs.gather(1, idx)[:, 0].cpu())
        return self._coupled[m]

    def second(self, m: int):
        """The runner-up coupled tokens at step m and their stale probabilities."""
        if m not in self._second:
            x2 = self.pair(m)[1]  # (B,) on the device
            self._second[m] = (x2.cpu().numpy(), self.probs.gather(1, x2[:, None])[:, 0].cpu())
        return self._second[m]
