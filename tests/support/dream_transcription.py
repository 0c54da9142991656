"""Dream's sampling (``dream/model/generation_utils.py`` as NVlabs/Fast-dLLM carries it from
HKUNLP/Dream, read, not vendored), transcribed for the family-rule tests: what
``spotref.spec.rules.DreamRule`` and a whole Dream decode must reproduce token for token.

Kept as Dream writes it, statement by statement (each comment names the line it transcribes):
``top_p_logits``, ``top_k_logits`` (filtered entries at ``finfo.min``), ``sample_tokens`` (``logits
/ T``, top-p then top-k, ``probs = softmax`` in the logits' dtype, the confidence ``maskgit_plus``
/ ``topk_margin`` / ``entropy``) and ``_sample``'s loop body: the whole canvas run, the logits
shifted by one (``cat([logits[:, :1], logits[:, :-1]])``), the masked positions' logits sampled,
the most confident committed. The loop runs in semi-autoregressive blocks as
``generation_utils_block.py`` and LLaDA place them (canvas = prompt + ``gen_length`` masks, block
k at ``[P + k * bl, P + (k + 1) * bl)``, the positions after the block never sampled nor chosen),
with one position per step (spotref's exact one-position decoding; Dream's own schedule
``int(num_mask * (1 - s / t))`` commits a varying number). Not transcribed: Fast-dLLM's block
variant commits each block's first position from a cache-prefill pass before its loop; that is
its cache's artifact, not Dream's decision. Four changes make it a pure function of the logits
and the noise, each named where it is made:

1. ``dists.Categorical(probs).sample()`` becomes the Gumbel-max draw ``argmax(log p + g)`` (the
   log in float64) with ``g = spotref.spec.noise.gumbel(seed, k, i, block_length, V)`` at block k's
   positions at its step i;
2. MASK's logit is -inf before anything (spotref never commits MASK);
3. ``torch.sort`` in ``top_p_logits`` is stable (the lower id first among equal logits);
4. ``torch.topk`` over the confidences becomes the first maximum (the lowest position on ties).
"""

import torch
import torch.nn.functional as F

from spotref.spec.noise import gumbel

ALGS = ("maskgit_plus", "topk_margin", "entropy")


def top_p_logits(logits, top_p=None):
    """Dream's ``top_p_logits``."""
    sorted_logits, sorted_indices = torch.sort(logits, descending=True, stable=True)  # change 3: stable
    cumulative_probs = torch.cumsum(F.softmax(sorted_logits, dim=-1), dim=-1)
    sorted_indices_to_remove = cumulative_probs > top_p
    sorted_indices_to_remove[..., 1:] = sorted_indices_to_remove[..., :-1].clone()  # shift right: keep the first
    sorted_indices_to_remove[..., 0] = 0
    mask = torch.zeros_like(logits, dtype=torch.bool)
    mask = mask.scatter_(-1, sorted_indices, sorted_indices_to_remove)
    return logits.masked_fill(mask, torch.finfo(logits.dtype).min)


def top_k_logits(logits, top_k=None):
    """Dream's ``top_k_logits``."""
    top_k = min(top_k, logits.size(-1))  # safety check
    indices_to_remove = logits < torch.topk(logits, top_k)[0][..., -1, None]  # below the k-th
    return logits.masked_fill(indices_to_remove, torch.finfo(logits.dtype).min)


def sample_tokens(logits, temperature=0.0, top_p=None, top_k=None, margin_confidence=False, neg_entropy=False, g=None):
    """Dream's ``sample_tokens`` on rows ``logits`` (M, V), ``g`` (M, V) float64 their noise."""
    if temperature > 0:  # if temperature > 0: logits = logits / temperature
        logits = logits / temperature
    if top_p is not None and top_p < 1:  # if top_p is not None and top_p < 1: top_p_logits
        logits = top_p_logits(logits, top_p)
    if top_k is not None:  # if top_k is not None: top_k_logits
        logits = top_k_logits(logits, top_k)
    probs = torch.softmax(logits, dim=-1)  # probs = torch.softmax(logits, dim=-1)
    if temperature > 0:
        x0 = (probs.double().log() + g).argmax(-1)  # change 1: x0 = dists.Categorical(probs=probs).sample()
        confidence = torch.gather(probs, -1, x0.unsqueeze(-1)).squeeze(-1)  # confidence = gather(probs, x0)
    else:
        confidence, x0 = probs.max(dim=-1)  # confidence, x0 = probs.max(dim=-1)
    if margin_confidence:
        sorted_probs, _ = torch.sort(probs, dim=-1, descending=True)
        top1_probs = sorted_probs[:, 0]
        top2_probs = sorted_probs[:, 1]
        confidence = top1_probs - top2_probs  # confidence = top1_probs - top2_probs
    if neg_entropy:
        epsilon = 1e-10
        log_probs = torch.log(probs + epsilon)
        confidence = torch.sum(probs * log_probs, dim=-1)  # confidence = torch.sum(probs * log_probs, dim=-1)
    return confidence, x0


def block_gumbel(L, start, k, i, block_length, V, seed):
    """(1, L, V) float64: block k's Gumbel noise at step i on its positions, 0 elsewhere (change 1)."""
    g = torch.zeros((1, L, V), dtype=torch.float64)
    g[0, start : start + block_length] = gumbel(seed, k, i, block_length, V)
    return g


def step(x, logits, prompt_len, num_block, block_length, i, *, alg, temperature, top_p, top_k, mask_id, seed=0):
    """One pass of ``_sample``'s loop (``while i < steps``) on the canvas ``x`` (1, L) with the
    model's (unshifted) ``logits`` (1, L, V) for block ``num_block`` at its step ``i``: one
    position committed, ``x`` updated in place."""
    if alg not in ALGS:
        raise RuntimeError(f"Unknown alg: {alg}")  # else: raise RuntimeError(f"Unknown alg: {alg}")
    mask_index = x == mask_id  # mask_index = (x == mask_token_id)
    logits = torch.cat([logits[:, :1], logits[:, :-1]], dim=1)  # logits = torch.cat([logits[:,:1], logits[:, :-1]], 1)
    logits = logits.clone()
    logits[:, :, mask_id] = -torch.inf  # change 2: MASK is never committed
    start = prompt_len + num_block * block_length
    mask_index[:, start + block_length :] = False  # generation_utils_block.py: mask_index[:, block_length:] = False
    g = block_gumbel(x.shape[1], start, num_block, i, block_length, logits.shape[-1], seed)
    mask_logits = logits[mask_index]  # mask_logits = logits[mask_index]
    confidence, x0 = sample_tokens(  # confidence, x0 = sample_tokens(mask_logits, temperature, top_p=..., top_k=...)
        mask_logits,
        temperature,
        top_p=top_p,
        top_k=top_k,
        margin_confidence=alg == "topk_margin",
        neg_entropy=alg == "entropy",
        g=g[mask_index],
    )
    number_transfer_tokens = 1  # one position per step (Dream: int(num_mask_token * (1 - s / t)))
    full_confidence = torch.full_like(x, -torch.inf, dtype=logits.dtype)  # full_confidence = torch.full_like(...)
    full_confidence[mask_index] = confidence  # full_confidence[mask_index] = confidence
    # change 4: _, transfer_index = torch.topk(full_confidence, number_transfer_tokens), made stable
    transfer_index = torch.sort(full_confidence, descending=True, stable=True).indices[:, :number_transfer_tokens]
    x_ = torch.zeros_like(x, dtype=torch.long) + mask_id  # x_ = torch.zeros_like(x, ...) + mask_token_id
    x_[mask_index] = x0.clone()  # x_[mask_index] = x0.clone()
    row_indices = torch.arange(x.size(0)).unsqueeze(1).expand_as(transfer_index)
    x[row_indices, transfer_index] = x_[row_indices, transfer_index]  # x[row_indices, transfer_index] = x_[...]
    return x


def generate(
    model,
    prompt,
    *,
    gen_length,
    block_length,
    mask_id,
    alg="maskgit_plus",
    temperature=0.0,
    top_p=None,
    top_k=None,
    seed=0,
):
    """``_sample`` in blocks of ``block_length``, one position per step: ``model(ids (1, L)) ->
    logits (1, L, V)`` unshifted, as Dream's modeling code returns them; ``prompt`` (1, P).
    Returns the canvas (1, P + gen_length)."""
    x = F.pad(prompt, (0, gen_length), value=mask_id)  # x = F.pad(input_ids, (0, ...), value=mask_token_id)
    assert gen_length % block_length == 0
    for num_block in range(gen_length // block_length):  # generation_utils_block.py: for num_block in range(num_blocks)
        for i in range(block_length):  # while i < steps, steps_per_block = block_length
            logits = model(x)  # logits = self(x, attention_mask, tok_idx).logits
            step(x, logits, prompt.shape[1], num_block, block_length, i, alg=alg, temperature=temperature,
                 top_p=top_p, top_k=top_k, mask_id=mask_id, seed=seed)  # fmt: skip
    return x
