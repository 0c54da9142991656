"""A tiny whole-canvas model for the family tests: the contract of LLaDA and Dream (docs/spec.md
section 1.1) with no architecture behind it.

``model(ids)``: ids (N, L) -> logits (N, L, V), every position's logits a function of every
position's token: its own token's row of ``own``, its place's row of ``place``, and the sum over
every position j of ``mix[i, j]`` times token j's row of ``reach``. All of it is integer
arithmetic, exact whatever the row count, the row's place in the batch or the CPU, so rows alone
and one forward of many rows give the same bits; the sum is then scaled by a power of two to
float32 (exact too). One commit moves every position's logits a little, so a stale pass is a
fair guess of the next one and drafts are accepted now and then.
"""

from dataclasses import dataclass, field

import torch

SHIFTS = {"llada": 0, "dream": 1}  # the family's logit shift: Dream's logits[:, i] predict i + 1


@dataclass
class CanvasConfig:
    vocab_size: int
    mask_token_id: int
    max_position_embeddings: int
    extra: dict = field(default_factory=dict)  # config.json keys spotref does not model (torch_dtype)


class CanvasModel:
    """A whole-canvas model of family "llada" (shift 0) or "dream" (shift 1); MASK is the last id.
    ``calls``, ``rows`` and ``lengths`` record every call: its row count and canvas length."""

    block_size = 32  # the canvas families' default block length

    def __init__(self, family: str = "llada", V: int = 40, max_positions: int = 96, seed: int = 0, extra=None):
        g = torch.Generator().manual_seed(seed)
        ints = lambda *shape: torch.randint(-8, 9, shape, generator=g)  # int64 in [-8, 8]
        self.family, self.logit_shift = family, SHIFTS[family]
        self.config = CanvasConfig(V, V - 1, max_positions, dict(extra or {}))
        self.mask_id = V - 1
        self.own, self.reach = ints(V, V), ints(V, V)  # (V, V): a token's row of logits, of reach
        self.place, self.mix = ints(max_positions, V), ints(max_positions, max_positions)  # (Lmax, V), (Lmax, Lmax)
        self.calls, self.rows, self.lengths = 0, 0, []

    def __call__(self, ids: torch.Tensor) -> torch.Tensor:
        """ids (N, L) int64 -> logits (N, L, V) float32."""
        N, L = ids.shape
        assert L <= self.config.max_position_embeddings, f"canvas of {L} positions"
        self.calls, self.rows, self.lengths = self.calls + 1, self.rows + N, self.lengths + [L]
        own = 16 * (self.own[ids] + self.place[:L])  # (N, L, V)
        reached = self.mix[:L, :L] @ self.reach[ids]  # (L, L) @ (N, L, V) -> (N, L, V)
        return (own + reached).float() * 2.0**-6  # integers below 2**24: exact in float32
