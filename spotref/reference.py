"""A deliberately naive exact decoder: the test oracle for ``spotref.generate``.

It follows the structure of JetAstra/SDAR ``generate.py`` (``block_diffusion_generate`` with
``denoising_steps == block_length``: ``low_confidence_static`` commits one position per step,
``low_confidence_dynamic`` every position over the threshold) but recomputes the whole sequence
at every step with the block-causal mask and no cache, and takes its decisions with its own
numpy code, written from docs/spec.md section 2 rather than shared with ``spotref.rules``. Only the
noise function is shared: it is the definition of the noise, not an implementation detail.

It needs nothing from a model but ``logits_fn(x: LongTensor (1, L)) -> (1, L, V)``, computed
with block-causal attention over x, so it can drive any implementation (transformers' Qwen3
with a 4D mask included).

``precision`` as ``spotref.generate``'s (docs/spec.md section 2.1): "float64" decides with the
original float64 rule in numpy; any other dtype (by default the logits' own) with SDAR's
operations in that dtype, one position at a time (``naive_decision_in``).
"""

from __future__ import annotations

from functools import partial

import numpy as np
import torch

from spotref.noise import gumbel


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
            decision = naive_decision if dtype == torch.float64 else partial(naive_decision_in, dtype)
            for j, tok in decision(logits, cur, mask_id, temperature, noise, threshold, top_k, top_p, confidence):
                x[0, b * B + j] = tok
        if stop_ids and set(stop_ids) & set(x[0, P : (b + 1) * B].tolist()):
            break
    out = x[0, P : P + max_new_tokens].tolist()
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
    best = max(conf, key=lambda j: (conf[j], -j))  # most confident, lowest position on ties
    chosen = [j for j in conf if threshold is not None and conf[j] > threshold] or [best]
    return [(int(j), x0[j]) for j in sorted(chosen)]


def naive_filter(z, top_k, top_p):
    """Top-k then top-p on one row of scaled logits; order ties go to the lower index."""
    order = sorted(range(len(z)), key=lambda v: (-z[v], v))
    keep = len(order) if top_k is None else top_k
    if top_p is not None:
        p = np.zeros_like(z)
        p[order[:keep]] = np.exp(z[order[:keep]] - z.max())
        p /= p.sum()  # renormalised over the top-k
        mass, n = 0.0, 0
        for v in order[:keep]:
            if n > 0 and mass > top_p:  # kept while the mass before is <= p
                break
            mass, n = mass + p[v], n + 1
        keep = n
    out = np.full_like(z, -np.inf)
    out[order[:keep]] = z[order[:keep]]
    return out


def naive_decision_in(dtype, logits, cur, mask_id, T, noise, threshold, top_k, top_p, confidence="filtered"):
    """[(position, token)] committed at one step, decided in ``dtype`` as SDAR's
    ``sample_with_temperature_topk_topp`` does: ``L / T``, top-k (ties with the k-th kept),
    top-p and the softmax all in ``dtype``; the token is the Gumbel-max draw over the log of
    those probabilities (their first maximum at T = 0), its confidence its probability there;
    the most confident position wins, the lowest on ties. logits: (B, V) float64 numpy."""
    x0, conf = {}, {}
    for j in np.flatnonzero(cur == mask_id):
        z = torch.from_numpy(logits[j]).to(dtype)
        z[mask_id] = -torch.inf
        if T > 0:
            z = z / T
        p = torch.softmax(naive_filter_in(z, top_k, top_p), -1)
        y = p.double() if T == 0 else p.double().log() + torch.from_numpy(noise[j])
        tok = int(np.argmax(y.numpy()))  # numpy's argmax: the first maximum
        scored = p if confidence == "filtered" else torch.softmax(z, -1)
        x0[j], conf[j] = tok, float(scored[tok])
    best = max(conf, key=lambda j: (conf[j], -j))  # most confident, lowest position on ties
    chosen = [j for j in conf if threshold is not None and conf[j] > threshold] or [best]
    return [(int(j), x0[j]) for j in sorted(chosen)]


def naive_filter_in(z, top_k, top_p):
    """Top-k (every entry tied with the k-th kept) then top-p on one row ``z`` (V,) of a torch
    dtype, the mass summed in that dtype over the entries in descending order (ties: lower
    index first), kept while the mass strictly before an entry is at most p."""
    order = sorted(range(len(z)), key=lambda v: (-float(z[v]), v))
    keep = len(order)
    if top_k is not None and top_k < len(order):
        kth = float(z[order[top_k - 1]])
        keep = sum(1 for v in order if float(z[v]) >= kth)
    if top_p is not None:
        ranked = torch.full_like(z, -torch.inf)
        ranked[:keep] = z[order[:keep]]
        before = torch.cumsum(torch.softmax(ranked, -1), -1)  # in z's dtype
        keep = 1 + sum(1 for i in range(1, keep) if float(before[i - 1]) <= top_p)
    out = torch.full_like(z, -torch.inf)
    out[order[:keep]] = z[order[:keep]]
    return out
