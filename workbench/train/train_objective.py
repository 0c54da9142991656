"""The block-diffusion objective of SDAR / BD3-LM (Arriola et al., 2025), as training uses it.

One training sequence ``x`` of ``L`` tokens (``L`` a multiple of the block size ``B``) becomes the
input ``concat(x_t, x)`` of length ``2L``: ``x_t`` the noised copy (``noise_blocks``: exactly
``k ~ U{1..B}`` masks per block), attending as ``bd3_mask`` says. The loss is the cross-entropy
of the noised copy's logits at its masked positions against the clean tokens (no shift):
``bd3_loss`` (per token, or the ELBO's per-block ``1 / t``), or ``weighted_loss`` with a weight
per position (the rows of the gsm recipe, ``workbench.train.train_data.rows_batch``). The logits
are the model's own: ``bd3_logits`` runs ``concat(x_t, x)`` through the decoder's layers
under ``bd3_mask``.

The whole-canvas families (LLaDA, Dream) train as LLaDA's SFT does: each row draws a mask rate
``t ~ U(eps, 1)`` and masks each answer position with probability ``t`` (``canvas_noise``; the
prompt never), and the loss is the masked cross-entropy weighted by ``1 / t``, summed over each
row, divided by the row's answer length and averaged over the rows (``canvas_loss``). The model
sees the whole canvas bidirectionally (``model.logits(ids)``); Dream's logits are shifted.
Their decoding-state rows (``decode_noise``) may also learn a block-causal teacher's distributions
(``--distill``): ``teacher_logits`` are the teacher's own decoding-time logits on each row's state
(BD3-LM's pass: each teacher block as the row shows it, the blocks before it clean), and
``distill_kl`` the KL(teacher || student) at the masked positions.
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


def canvas_noise(x: np.ndarray, prompt, mask_id: int, rng: np.random.Generator, eps: float = 1e-3):
    """x: (N, L); ``prompt``: the prompt lengths (N,) or a prompt mask (N, L) (True: never masked)
    -> ``(x_t, masked, t)``: x_t and masked (N, L), t (N,). Each row draws t ~ U(eps, 1) and masks
    each answer position with probability t; a row left with none masked gets one answer position,
    drawn uniformly, masked (so every row has a loss). A row without answer positions: ValueError."""
    N, L = x.shape
    answer = canvas_answer(prompt, N, L)  # (N, L)
    if not answer.any(-1).all():
        raise ValueError("canvas_noise: a row has no answer position to mask (its prompt fills it)")
    t = eps + (1 - eps) * rng.random(N)  # (N,)
    masked = answer & (rng.random((N, L)) < t[:, None])  # (N, L)
    fallback = np.where(answer, rng.random((N, L)), -1.0).argmax(-1)  # (N,): a uniform answer position
    none = ~masked.any(-1)
    masked[none, fallback[none]] = True
    return np.where(masked, mask_id, x), masked, t


def canvas_answer(prompt, N: int, L: int) -> np.ndarray:
    """The answer positions (N, L): those after each row's prompt length, or outside a prompt mask."""
    prompt = np.asarray(prompt)
    if prompt.shape == (N, L):
        return ~prompt.astype(bool)
    if prompt.shape != (N,):
        raise ValueError(f"canvas_noise: prompt must be lengths ({N},) or a mask ({N}, {L}), got {prompt.shape}")
    return np.arange(L)[None, :] >= prompt[:, None]


def shifted(logits: torch.Tensor, shift: int) -> torch.Tensor:
    """The logits that predict each position (N, L, V): as given (shift 0), or Dream's shift (1):
    the prediction of position i is ``logits[:, i - 1]`` (position 0 keeps its own, as decoding reads it)."""
    if shift == 0:
        return logits
    if shift != 1:
        raise ValueError(f"the logit shift must be 0 or 1, got {shift!r}")
    return torch.cat([logits[:, :1], logits[:, :-1]], 1)


def canvas_loss(logits, x, masked, t, shift: int = 0, answer=None):
    """LLaDA's SFT loss; logits (N, L, V) as the model returns them, x and masked (N, L), t (N,).
    Per row: sum over its masked positions of CE / t, over its answer length (``answer`` (N, L),
    the positions that may be masked; None: every position, L); then the mean over rows."""
    ce = F.cross_entropy(shifted(logits, shift).float().flatten(0, 1), x.flatten(), reduction="none").view(x.shape)
    per_row = (ce * masked).sum(-1) / t  # (N,)
    length = torch.full_like(per_row, x.shape[1]) if answer is None else answer.sum(-1).to(per_row.dtype)  # (N,)
    return (per_row / length).mean()


def decode_state(n_answer: int, n_text: int, B: int, rng: np.random.Generator, cut=None):
    """One row's decoding state over its ``n_answer`` answer positions (``n_text`` of them text and
    its end-of-text) -> ``(block, first, k)``: the block decoding is in (blocks of ``B`` from the
    answer's start, drawn among those that start within the text), the first of its positions
    that may be masked, and how many are (k ~ U{1..n} of its n, or, with ``cut``, a result's
    first digit as an answer offset: every one from there to the block's end)."""
    if cut is not None:
        block = cut // B
        return block, cut, min(B * (block + 1), n_answer) - cut
    block = int(rng.integers(0, -(-min(n_text, n_answer) // B)))
    n = min(B, n_answer - B * block)
    return block, B * block, int(rng.integers(1, n + 1))


def decode_noise(x, prompt, n_text, B: int, mask_id: int, rng: np.random.Generator, cuts):
    """x: (N, L) rows as decoding sees them (``--decode-states``); ``prompt`` (N,) lengths,
    ``n_text`` (N,) answer text lengths with the end-of-text, ``cuts`` one answer offset of a
    result's first digit per row or None -> ``(x_t, masked, t, answer)``, each (N, L) but t (N,).
    Every position before the row's block is clean and every one after it masked (the blocks
    decoding has not reached); inside it ``decode_state``'s k positions are masked (a random k,
    or the cut's suffix); ``masked`` (the loss's) and ``answer`` (its length) are the block's,
    t = k / n, so the row's loss is the mean cross-entropy of its masked block positions."""
    N, L = x.shape
    x_t, masked = x.copy(), np.zeros((N, L), dtype=bool)
    answer, t = np.zeros((N, L), dtype=bool), np.ones(N)
    for i in range(N):
        P = int(prompt[i])
        block, first, k = decode_state(L - P, int(n_text[i]), B, rng, cuts[i])
        lo, hi = P + B * block, min(P + B * (block + 1), L)
        if cuts[i] is None:
            pick = P + first + rng.permutation(hi - lo)[:k]
        else:
            pick = np.arange(P + first, hi)
        masked[i, pick] = True
        answer[i, lo:hi] = True
        x_t[i, pick] = mask_id
        x_t[i, hi:] = mask_id
        t[i] = k / (hi - lo)
    return x_t, masked, t, answer


def teacher_end(masked: torch.Tensor, block: int) -> int:
    """masked (N, L) bool -> the least multiple of the teacher's ``block`` size past every masked
    position: a block-causal teacher's logits there depend on no position from it on."""
    last = int(masked.any(0).nonzero().max()) + 1 if masked.any() else 0
    return -(-last // block) * block


@torch.no_grad()
def teacher_logits(teacher, x_t: torch.Tensor, x: torch.Tensor, end: int) -> torch.Tensor:
    """A block-causal teacher's decoding-time logits; ``teacher`` an ``SDARModel`` in eval mode
    (block size Bt, its blocks of Bt from position 0), x_t and x (N, L) the noised and clean rows,
    ``end`` a multiple of Bt (``teacher_end``) -> logits (N, end, V) float32 without a shift: at
    each position, the teacher's prediction when it decodes that position's block in the state
    x_t shows for the block, every earlier block clean (x): the state of a decoding pass with
    those blocks committed. BD3-LM's pass (``bd3_logits`` of ``concat(x_t, x)`` under ``bd3_mask``)."""
    Bt = teacher.block_size
    if end % Bt or end > x.shape[1]:
        raise ValueError(
            f"teacher_logits: end {end} must be a multiple of the teacher's block size {Bt} within {x.shape[1]}"
        )
    mask = bd3_mask(end, Bt, x.device)  # (2 end, 2 end)
    return bd3_logits(teacher, x_t[:, :end], x[:, :end], mask).float()  # (N, end, V)


def distill_kl(student: torch.Tensor, teacher: torch.Tensor, masked: torch.Tensor, shift: int = 0) -> torch.Tensor:
    """KL(teacher || student) per row: student logits (N, L, V) as the model returns them (Dream's
    ``shift`` applied here), teacher logits (N, E, V) with E <= L already aligned (position i
    predicted at i), masked (N, L) with none at E or after -> (N,): each row's mean over its masked
    positions of sum_v p_T (log p_T - log p_S), 0 for a row with none."""
    E = teacher.shape[1]
    if masked[:, E:].any():
        raise ValueError(f"distill_kl: a masked position lies past the teacher's {E} positions")
    log_s = shifted(student, shift)[:, :E].float().log_softmax(-1)  # (N, E, V)
    log_t = teacher.float().log_softmax(-1)  # (N, E, V)
    kl = F.kl_div(log_s, log_t, reduction="none", log_target=True).sum(-1)  # (N, E)
    m = masked[:, :E].to(kl.dtype)  # (N, E)
    return (kl * m).sum(-1) / m.sum(-1).clamp_min(1.0)


def bd3_logits(model, x_t: torch.Tensor, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """BD3-LM's training pass of an ``SDARModel`` (gradients kept): x_t, x (N, L) -> logits
    (N, L, V) of the noised copy x_t, from one forward of ``concat(x_t, x)`` (N, 2L) through the decoder's own layers,
    both copies at positions 0 .. L-1, under ``mask`` (2L, 2L) additive: noised block i sees
    itself and the clean blocks < i, clean block i the clean blocks <= i, so each block of x_t
    is denoised over its clean prefix as a decoding pass denoises it."""
    L = x.shape[1]
    cos, sin = (torch.cat((t, t)) for t in model._rope(0, L, x.device))  # (2L, d): positions twice
    h = model.model.embed_tokens(torch.cat((x_t, x), 1))  # (N, 2L, H)
    for layer in model.model.layers:
        h, _ = layer(h, cos, sin, mask, None)
    return model.lm_head(model.model.norm(h[:, :L]))  # (N, L, V)
