"""A deliberately naive exact decoder: the test oracle for ``spotref.generate``.

It follows the structure of JetAstra/SDAR ``generate.py`` (``block_diffusion_generate`` with
``denoising_steps == block_length``: ``low_confidence_static`` commits one position per step,
``low_confidence_dynamic`` every position over the threshold) but recomputes the whole sequence
at every step with the block-causal mask and no cache, and takes its decisions one position at a
time with the operations of SDAR's ``sample_with_temperature_topk_topp``, written from
docs/spec.md section 2 rather than shared with ``spotref.spec.rules``. Only the noise function is
shared: it is the definition of the noise, not an implementation detail.

It needs nothing from a model but ``logits_fn(x: LongTensor (1, L)) -> (1, L, V)``, computed
with block-causal attention over x, so it can drive any implementation (transformers' Qwen3
with a 4D mask included).

``precision`` as ``spotref.generate``'s (docs/spec.md section 2): the dtype the decisions are
taken in, by default the logits' own; float64 is one such dtype, decided by the same steps.
"""

from __future__ import annotations

import numbers

import numpy as np
import torch

from spotref.spec.noise import gumbel


def generate(
    logits_fn,
    prompt_ids,
    max_new_tokens,
    *,
    block_size,
    mask_id,
    vocab_size,
    temperature=0.0,
    seed=0,
    threshold=None,
    top_k=None,
    top_p=None,
    stop_ids=None,
    confidence="filtered",
    precision="auto",
):
    """Exact decoding by full recomputation; returns the generated tokens (a list)."""
    B, P = block_size, len(prompt_ids)
    stop_ids = stop_list(stop_ids)
    if max_new_tokens == 0:
        return []
    num_blocks = (P + max_new_tokens + B - 1) // B
    x = torch.full((1, num_blocks * B), mask_id, dtype=torch.long)
    x[0, :P] = torch.tensor(list(prompt_ids), dtype=torch.long)
    for b in range(P // B, num_blocks):
        for step in range(B):
            cur = x[0, b * B : (b + 1) * B].numpy()
            if not (cur == mask_id).any():
                break
            out = logits_fn(x[:, : (b + 1) * B])[0, b * B :]  # (B, V)
            dtype = out.dtype if precision == "auto" else getattr(torch, precision)
            logits = out.double().cpu().numpy()  # lossless for every narrower dtype
            noise = None if temperature == 0 else gumbel(seed, b, step, B, vocab_size).numpy()
            args = (logits, cur, mask_id, temperature, noise, threshold, top_k, top_p, confidence, dtype)
            for j, tok in naive_decision(*args):
                x[0, b * B + j] = tok
        if stop_ids and set(stop_ids) & set(x[0, P : (b + 1) * B].tolist()):
            break
    out = x[0, P : P + max_new_tokens].tolist()
    for i, t in enumerate(out):
        if stop_ids and t in stop_ids:
            return out[: i + 1]
    return [t for t in out if t != mask_id]


def stop_list(stop_ids) -> list:
    """``stop_ids`` as ``spotref.generate`` takes them (None, one id, or a 1-D sequence, array or
    tensor of ids) as a list of ints."""
    if stop_ids is None:
        return []
    if isinstance(stop_ids, numbers.Integral):
        return [int(stop_ids)]
    return [int(t) for t in stop_ids]


def naive_decision(logits, cur, mask_id, T, noise, threshold, top_k, top_p, confidence="filtered", dtype=torch.float64):
    """[(position, token)] committed at one step, decided in ``dtype`` as SDAR's
    ``sample_with_temperature_topk_topp`` does: ``L / T``, top-k (ties with the k-th kept),
    top-p and the softmax all in ``dtype``; the token is the Gumbel-max draw over the log of
    those probabilities (their first maximum at T = 0), its confidence ``x0_p`` its probability
    there (``confidence="unfiltered"``: under softmax(L / T)); the most confident position wins,
    the lowest on ties. logits: (B, V) float64 numpy; noise: (B, V) float64 numpy (None at T = 0)."""
    x0, conf = {}, {}
    for j in np.flatnonzero(cur == mask_id):
        z = torch.from_numpy(logits[j]).to(dtype)
        z[mask_id] = -torch.inf
        if T > 0:
            z = z / T
        p = torch.softmax(naive_filter(z, top_k, top_p), -1)
        y = p.double() if T == 0 else p.double().log() + torch.from_numpy(noise[j])
        tok = int(np.argmax(y.numpy()))  # numpy's argmax: the first maximum
        scored = p if confidence == "filtered" else torch.softmax(z, -1)
        x0[j], conf[j] = tok, float(scored[tok])
    best = max(conf, key=lambda j: (conf[j], -j))  # most confident, lowest position on ties
    chosen = [j for j in conf if threshold is not None and conf[j] > threshold] or [best]
    return [(int(j), x0[j]) for j in sorted(chosen)]


def naive_filter(z, top_k, top_p):
    """Top-k (every entry tied with the k-th kept) then top-p on one row ``z`` (V,) of a torch
    dtype, the mass summed in that dtype over the entries in descending order (ties: lower
    index first), kept while the mass strictly before an entry is at most p, p rounded to that
    dtype first (``in_dtype``)."""
    order = sorted(range(len(z)), key=lambda v: (-float(z[v]), v))
    keep = len(order)
    if top_k is not None and top_k < len(order):
        kth = float(z[order[top_k - 1]])
        keep = sum(1 for v in order if float(z[v]) >= kth)
    if top_p is not None:
        ranked = torch.full_like(z, -torch.inf)
        ranked[:keep] = z[order[:keep]]
        before = torch.cumsum(torch.softmax(ranked, -1), -1)  # in z's dtype
        bound = in_dtype(top_p, z.dtype)
        keep = 1 + sum(1 for i in range(1, keep) if float(before[i - 1]) <= bound)
    out = torch.full_like(z, -torch.inf)
    out[order[:keep]] = z[order[:keep]]
    return out


def in_dtype(p: float, dtype: torch.dtype) -> float:
    """``p`` rounded to ``dtype`` as docs/spec.md section 2 compares top-p's mass with it: to
    float32, then to ``dtype`` (bf16, fp16), each to the nearest (ties to even); float64: ``p``."""
    if dtype == torch.float64:
        return float(p)
    return float(torch.tensor(float(p), dtype=torch.float64).to(torch.float32).to(dtype))
