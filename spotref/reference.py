"""A deliberately naive exact decoder: the test oracle for ``spotref.generate``.

It follows the structure of JetAstra/SDAR ``generate.py`` (``block_diffusion_generate`` with
``denoising_steps == block_length``: ``low_confidence_static`` commits one position per step,
``low_confidence_dynamic`` every position over the threshold) but recomputes the whole sequence
at every step with the block-causal mask and no cache, and takes its decisions with its own
numpy code, written from SPEC section 2 rather than shared with ``spotref.rules``. Only the
noise function is shared: it is the definition of the noise, not an implementation detail.

It needs nothing from a model but ``logits_fn(x: LongTensor (1, L)) -> (1, L, V)``, computed
with block-causal attention over x, so it can drive any implementation (transformers' Qwen3
with a 4D mask included).
"""
from __future__ import annotations

import numpy as np
import torch

from spotref.noise import gumbel


def generate(logits_fn, prompt_ids, max_new_tokens, *, block_size, mask_id, vocab_size,
             temperature=0.0, seed=0, threshold=None, top_k=None, top_p=None, stop_ids=None,
             confidence="filtered"):
    """Exact decoding by full recomputation; returns the generated tokens (a list)."""
    B, P = block_size, len(prompt_ids)
    if max_new_tokens == 0:
        return []
    num_blocks = (P + max_new_tokens + B - 1) // B
    x = torch.full((1, num_blocks * B), mask_id, dtype=torch.long)
    x[0, :P] = torch.tensor(list(prompt_ids), dtype=torch.long)
    for b in range(P // B, num_blocks):
        for step in range(B):
            cur = x[0, b * B:(b + 1) * B].numpy()
            if not (cur == mask_id).any():
                break
            logits = logits_fn(x[:, :(b + 1) * B])[0, b * B:].double().cpu().numpy()   # (B, V)
            noise = None if temperature == 0 else gumbel(seed, b, step, B, vocab_size).numpy()
            for j, tok in naive_decision(logits, cur, mask_id, temperature, noise, threshold, top_k, top_p,
                                         confidence):
                x[0, b * B + j] = tok
        if stop_ids and set(stop_ids) & set(x[0, P:(b + 1) * B].tolist()):
            break
    out = x[0, P:P + max_new_tokens].tolist()
    for i, t in enumerate(out):
        if stop_ids and t in stop_ids:
            return out[: i + 1]
    return [t for t in out if t != mask_id]


def naive_decision(logits, cur, mask_id, T, noise, threshold, top_k, top_p, confidence="filtered"):
    """[(position, token)] committed at one step; logits: (B, V) float64 numpy.

    As SDAR's ``sample_with_temperature_topk_topp``: the token is drawn from the filtered,
    renormalised distribution and its confidence ``x0_p`` is its probability there
    (``confidence="unfiltered"``: its probability under softmax(L / T))."""
    x0, conf = {}, {}
    for j in np.flatnonzero(cur == mask_id):
        z = logits[j].copy()
        z[mask_id] = -np.inf
        if T > 0:
            z = z / T
        zf = naive_filter(z, top_k, top_p)
        tok = int(np.argmax(zf)) if T == 0 else int(np.argmax(zf + noise[j]))
        scored = zf if confidence == "filtered" else z
        p = np.exp(scored - scored.max())
        x0[j], conf[j] = tok, p[tok] / p.sum()
    best = max(conf, key=lambda j: (conf[j], -j))        # most confident, lowest position on ties
    chosen = [j for j in conf if threshold is not None and conf[j] > threshold] or [best]
    return [(int(j), x0[j]) for j in sorted(chosen)]


def naive_filter(z, top_k, top_p):
    """Top-k then top-p on one row of scaled logits; order ties go to the lower index."""
    order = sorted(range(len(z)), key=lambda v: (-z[v], v))
    keep = len(order) if top_k is None else top_k
    if top_p is not None:
        p = np.zeros_like(z)
        p[order[:keep]] = np.exp(z[order[:keep]] - z.max())
        p /= p.sum()                                     # renormalised over the top-k
        mass, n = 0.0, 0
        for v in order[:keep]:
            if n > 0 and mass > top_p:                       # kept while the mass before is <= p
                break
            mass, n = mass + p[v], n + 1
        keep = n
    out = np.full_like(z, -np.inf)
    out[order[:keep]] = z[order[:keep]]
    return out
