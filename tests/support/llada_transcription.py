"""LLaDA's ``generate.py`` (ML-GSAI/LLaDA, read, not vendored), transcribed for the family-rule
tests: what ``spotref.spec.rules.LLaDARule`` and a whole LLaDA decode must reproduce token for token.

Kept as generate.py writes it, statement by statement (each comment names the line it
transcribes): the canvas ``x`` (prompt, then ``gen_length`` masks), the semi-autoregressive
blocks after the prompt, ``add_gumbel_noise`` (``exp(logits) / (-log u) ** T`` in float64, the
logits themselves at T = 0), ``x0 = argmax``, ``remasking="low_confidence"`` (``x0_p`` the softmax
of the raw logits at ``x0``, in the logits' dtype), the positions after the current block at -inf,
``get_num_transfer_tokens``. Run with ``steps == gen_length`` (one position per step: exact
one-position decoding), ``cfg_scale = 0``, no attention mask, ``logits_eos_inf`` and
``confidence_eos_eot_inf`` off. Three changes make it a pure function of the logits and the
noise, each named where it is made:

1. ``torch.rand_like`` becomes spotref's uniforms: ``u = spotref.spec.noise.uniform(seed, k, i,
   block_length, V)`` at block k's positions at its step i (0.5 elsewhere: those positions are
   never chosen);
2. MASK's logit is -inf before anything (generate.py never meets a trained model predicting it);
3. ``torch.topk`` becomes the first maxima (the lowest position on ties; topk's order among ties
   is implementation-defined).
"""

import torch
import torch.nn.functional as F

from spotref.spec.noise import uniform


def add_gumbel_noise(logits, temperature, noise):
    """generate.py's ``add_gumbel_noise`` with ``noise`` (1, L, V) float64 for ``torch.rand_like``."""
    if temperature == 0:  # if temperature == 0: return logits
        return logits
    logits = logits.to(torch.float64)  # logits = logits.to(torch.float64)
    gumbel_noise = (-torch.log(noise)) ** temperature  # change 1: noise is spotref's u
    return logits.exp() / gumbel_noise  # return logits.exp() / gumbel_noise


def get_num_transfer_tokens(mask_index, steps):
    """generate.py's ``get_num_transfer_tokens``: (b, steps), the positions committed per step."""
    mask_num = mask_index.sum(dim=1, keepdim=True)
    base = mask_num // steps
    remainder = mask_num % steps
    num_transfer_tokens = torch.zeros(mask_num.size(0), steps, dtype=torch.int64) + base
    for i in range(mask_num.size(0)):
        num_transfer_tokens[i, : remainder[i]] += 1
    return num_transfer_tokens


def block_uniforms(L, start, k, i, block_length, V, seed):
    """(1, L, V) float64: block k's uniforms at step i on its positions, 0.5 elsewhere (change 1)."""
    noise = torch.full((1, L, V), 0.5, dtype=torch.float64)
    noise[0, start : start + block_length] = uniform(seed, k, i, block_length, V)
    return noise


def step(x, logits, prompt_len, num_block, block_length, i, k, *, temperature, mask_id, seed=0):
    """One pass of generate.py's inner loop (``for i in range(steps)``) on the canvas ``x`` (1, L)
    with the pass's ``logits`` (1, L, V) for block ``num_block`` at its step ``i``, committing ``k``
    positions: ``x`` updated in place."""
    mask_index = x == mask_id  # mask_index = (x == mask_id)
    logits = logits.clone()
    logits[:, :, mask_id] = -torch.inf  # change 2: MASK is never committed
    start = prompt_len + num_block * block_length
    noise = block_uniforms(x.shape[1], start, num_block, i, block_length, logits.shape[-1], seed)
    logits_with_noise = add_gumbel_noise(logits, temperature, noise)  # logits_with_noise = add_gumbel_noise(...)
    x0 = torch.argmax(logits_with_noise, dim=-1)  # x0 = torch.argmax(logits_with_noise, dim=-1)
    p = F.softmax(logits, dim=-1)  # remasking == 'low_confidence': p = F.softmax(logits, dim=-1)
    x0_p = torch.squeeze(torch.gather(p, dim=-1, index=torch.unsqueeze(x0, -1)), -1)  # x0_p = ...gather(p, x0)
    x0_p[:, prompt_len + (num_block + 1) * block_length :] = -torch.inf  # x0_p[:, after the block] = -np.inf
    x0 = torch.where(mask_index, x0, x)  # x0 = torch.where(mask_index, x0, x)
    confidence = torch.where(mask_index, x0_p, -torch.inf)  # confidence = torch.where(mask_index, x0_p, -np.inf)
    transfer_index = torch.zeros_like(x0, dtype=torch.bool)  # transfer_index = torch.zeros_like(x0, ...)
    for j in range(confidence.shape[0]):  # for j in range(confidence.shape[0]):
        select_index = torch.sort(confidence[j], descending=True, stable=True).indices[:k]  # change 3: topk
        transfer_index[j, select_index] = True  # transfer_index[j, select_index] = True
    x[transfer_index] = x0[transfer_index]  # x[transfer_index] = x0[transfer_index]
    return x


def generate(model, prompt, *, gen_length, block_length, mask_id, temperature=0.0, seed=0):
    """generate.py's ``generate`` with ``steps = gen_length``, ``cfg_scale = 0``,
    ``remasking="low_confidence"``: ``model(ids (1, L)) -> logits (1, L, V)``; ``prompt`` (1, P).
    Returns the canvas (1, P + gen_length)."""
    x = torch.full((prompt.shape[0], prompt.shape[1] + gen_length), mask_id, dtype=torch.long)  # x = torch.full(...)
    x[:, : prompt.shape[1]] = prompt.clone()  # x[:, :prompt.shape[1]] = prompt.clone()
    assert gen_length % block_length == 0  # assert gen_length % block_length == 0
    num_blocks = gen_length // block_length  # num_blocks = gen_length // block_length
    steps = gen_length // num_blocks  # steps = steps // num_blocks, with steps = gen_length
    for num_block in range(num_blocks):  # for num_block in range(num_blocks):
        start = prompt.shape[1] + num_block * block_length
        block_mask_index = x[:, start : start + block_length] == mask_id  # block_mask_index = (x[block] == mask_id)
        num_transfer_tokens = get_num_transfer_tokens(block_mask_index, steps)
        for i in range(steps):  # for i in range(steps):
            logits = model(x)  # logits = model(x, attention_mask=attention_mask).logits
            k = int(num_transfer_tokens[0, i])
            step(x, logits, prompt.shape[1], num_block, block_length, i, k, temperature=temperature,
                 mask_id=mask_id, seed=seed)  # fmt: skip
    return x
