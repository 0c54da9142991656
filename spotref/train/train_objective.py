"""The block-diffusion objective of SDAR / BD3-LM (Arriola et al., 2025), as training uses it.

One training sequence ``x`` of ``L`` tokens (``L`` a multiple of the block size ``B``) becomes the
input ``concat(x_t, x)`` of length ``2L``: ``x_t`` the noised copy (``noise_blocks``: exactly
``k ~ U{1..B}`` masks per block), attending as ``bd3_mask`` says. The loss is the cross-entropy
of the noised copy's logits at its masked positions against the clean tokens (no shift):
``bd3_loss`` (per token, or the ELBO's per-block ``1 / t``), or ``weighted_loss`` with a weight
per position (the rows of the gsm recipe, ``spotref.train.train_data.rows_batch``). The logits
are the model's own: ``SDARModel.bd3_logits`` runs ``concat(x_t, x)`` through the decoder's layers
under ``bd3_mask``.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F


def bd3_mask(L: int, B: int, device=None, dtype=torch.float32) -> torch.Tensor:
    """Additive attention mask (2L, 2L) over ``concat(x_t, x)``; 0 = visible. Noised block i sees
    noised block i (bidirectionally) and the clean blocks < i; clean block i sees the clean blocks
    <= i (the block-causal mask of decoding)."""
    assert L % B == 0, f"sequence length {L} is not a multiple of the block size {B}"
    blk = torch.arange(2 * L, device=device) % L // B  # block index of each position
    noisy = torch.arange(2 * L, device=device) < L
    q_noisy, k_noisy = noisy[:, None], noisy[None, :]
    same, before = blk[:, None] == blk[None, :], blk[None, :] < blk[:, None]
    visible = (q_noisy & k_noisy & same) | (q_noisy & ~k_noisy & before) | (~q_noisy & ~k_noisy & (same | before))
    return torch.zeros((), dtype=dtype).masked_fill(~visible, torch.finfo(dtype).min)


def noise_blocks(x: np.ndarray, B: int, mask_id: int, rng: np.random.Generator):
    """x: (N, L) -> (x_t, masked), both (N, L): exactly k ~ U{1..B} masks per block."""
    N, L = x.shape
    k = rng.integers(1, B + 1, size=(N, L // B, 1))  # (N, L/B, 1)
    rank = rng.random((N, L // B, B)).argsort(-1).argsort(-1)  # a random order per block
    masked = (rank < k).reshape(N, L)
    return np.where(masked, mask_id, x), masked


def bd3_loss(logits, x, masked, B: int, weighting: str = "tokens"):
    """Masked cross-entropy; logits (N, L, V), x and masked (N, L)."""
    ce = F.cross_entropy(logits.float().flatten(0, 1), x.flatten(), reduction="none").view(x.shape)
    ce = ce * masked
    if weighting == "tokens":
        return ce.sum() / masked.sum()
    per_block = ce.view(x.shape[0], -1, B).sum(-1) / masked.view(x.shape[0], -1, B).sum(-1)
    return per_block.mean()  # weighting == "elbo"


def weighted_loss(logits, x, weight):
    """Cross-entropy weighted per position (``rows_batch``'s weight), over the total weight."""
    ce = F.cross_entropy(logits.float().flatten(0, 1), x.flatten(), reduction="none").view(x.shape)
    return (ce * weight).sum() / weight.sum().clamp_min(1e-9)
