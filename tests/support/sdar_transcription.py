"""SDAR's decision step, transcribed from JetAstra/SDAR ``generate.py`` (read, not vendored), for
the precision tests: what spotref's default rule must reproduce token for token.

Kept as SDAR writes it: ``logits / T``, ``top_k_logits`` (every entry tied with the k-th kept),
``top_p_logits`` (cumulative softmax mass, shifted right by one), ``probs = softmax(logits)``, all
in the logits' dtype; ``x0_p`` the drawn token's probability; ``low_confidence_static`` with one
transfer per step (steps == block length) or ``low_confidence_dynamic`` (``x0_p > threshold``,
else the top one). Three changes make it a pure function of the logits and the noise, each named
where it is made: MASK is never drawn (SDAR does not guard it); ``torch.multinomial`` becomes the
Gumbel-max draw over ``log(probs)`` with spotref's counter-based noise (T == 0, which SDAR does
not support, takes the probabilities' first maximum); ``torch.topk`` and ``torch.sort`` are made
stable (the lowest position or token id first among equal values).
"""

import torch
from torch.nn import functional as F

from spotref.spec.noise import gumbel


def top_k_logits(logits, k):
    values = torch.sort(logits, descending=True, stable=True).values[..., :k]  # topk, stable
    return torch.where(logits < values[..., -1, None], torch.full_like(logits, float("-inf")), logits)


def top_p_logits(logits, p):
    sorted_logits, sorted_indices = torch.sort(logits, descending=True, stable=True)
    cumulative = torch.cumsum(F.softmax(sorted_logits, dim=-1), dim=-1)
    sorted_mask = cumulative > p
    sorted_mask[..., 1:] = sorted_mask[..., :-1].clone()
    sorted_mask[..., 0] = False
    mask = torch.zeros_like(logits, dtype=torch.bool).scatter_(-1, sorted_indices, sorted_mask)
    return logits.masked_fill(mask, float("-inf"))


def sample(logits, temperature, top_k, top_p, noise):
    """SDAR's ``sample_with_temperature_topk_topp`` with the draw made by ``noise`` (B, V)."""
    if temperature > 0:
        logits = logits / temperature
    if top_k:
        logits = top_k_logits(logits, top_k)
    if top_p is not None and top_p < 1.0:
        logits = top_p_logits(logits, top_p)
    probs = F.softmax(logits, dim=-1)
    y = probs if temperature == 0 else probs.double().log() + noise  # change 2: Gumbel-max
    token = y.argmax(-1)  # first maximum
    return token, torch.gather(probs, -1, token[:, None])[:, 0]


def step(logits, block, mask_id, temperature, top_k, top_p, threshold, noise):
    """One denoising step on ``block`` (B,) with the block's logits (B, V): the new block."""
    logits = logits.clone()
    logits[:, mask_id] = float("-inf")  # change 1: no MASK
    mask_index = block == mask_id
    x0, x0_p = sample(logits, temperature, top_k, top_p, noise)
    confidence = torch.where(mask_index, x0_p, torch.full_like(x0_p, float("-inf")))
    transfer = torch.zeros_like(mask_index)
    high = confidence > threshold if threshold is not None else transfer
    if threshold is not None and high.sum() >= 1:
        transfer = high
    else:
        idx = torch.sort(confidence, descending=True, stable=True).indices[:1]  # change 3
        transfer[idx] = True
    return torch.where(transfer, x0, block)


def block_diffusion_generate(
    logits_fn,
    prompt,
    max_new_tokens,
    *,
    block_size,
    mask_id,
    vocab_size,
    temperature=0.0,
    seed=0,
    top_k=None,
    top_p=None,
    threshold=None,
):
    """SDAR's block loop (steps == block length), every block recomputed from the start."""
    B, P = block_size, len(prompt)
    n_blocks = (P + max_new_tokens + B - 1) // B
    x = torch.full((n_blocks * B,), mask_id, dtype=torch.long)
    x[:P] = torch.tensor(prompt, dtype=torch.long)
    for b in range(P // B, n_blocks):
        for k in range(B):
            block = x[b * B : (b + 1) * B]
            if not (block == mask_id).any():
                break
            logits = logits_fn(x[None, : (b + 1) * B])[0, b * B :]
            noise = gumbel(seed, b, k, B, vocab_size) if temperature > 0 else None
            x[b * B : (b + 1) * B] = step(logits, block, mask_id, temperature, top_k, top_p, threshold, noise)
    return x[P : P + max_new_tokens].tolist()
