"""Training a whole-canvas family (``--family llada`` / ``dream``): the model, its batches, its loss.

A row is one document (``--rows-per-doc``: a gsm problem, its prompt up to the assistant header
with ``--answer-only``) end-of-text padded to ``--seq-len``: the canvas, as decoding fills a
prompt and then masks to their end. The prompt is never masked; every other position (the
end-of-text padding included, as LLaDA's SFT pads its answers) is masked with the row's rate
``t ~ U(eps, 1)`` (``canvas_noise``), and the model (``model.logits``, bidirectional over the
whole row) is trained with ``canvas_loss`` (1 / t weights; Dream's logits shifted by
``model.logit_shift``). Every batch is a function of (``--seed``, step), so a resume is exact.
"""

from __future__ import annotations

import numpy as np
import torch

from spotref.dream import DreamConfig, DreamModel
from spotref.llada import LLaDAConfig, LLaDAModel
from spotref.train.train_curriculum import step_rows
from spotref.train.train_objective import canvas_loss, canvas_noise
from spotref.train.train_options import TrainOptions

EPS = 1e-3  # the least mask rate t, LLaDA's


def canvas_model(options: TrainOptions, tok):
    """A new ``LLaDAModel`` or ``DreamModel`` of the options' shape (``--hidden``, ``--layers``,
    ``--heads``, ``--kv-heads``, ``--intermediate``, ``--rope-theta``, ``--untied``), the
    tokenizer's vocabulary, EOS and MASK, ``--served-dtype``; its weights drawn from torch's RNG."""
    o = options
    theta = {} if o.rope_theta is None else {"rope_theta": o.rope_theta}
    if o.family == "llada":
        cfg = LLaDAConfig(
            vocab_size=tok.vocab_size,
            d_model=o.hidden,
            n_heads=o.heads,
            n_kv_heads=o.kv_heads,
            n_layers=o.layers,
            mlp_hidden_size=o.intermediate,
            max_sequence_length=4096,
            weight_tying=not o.untied,
            mask_token_id=tok.mask_id,
            extra={**o.served_extra(), "eos_token_id": tok.eos_id},
            **theta,
        )
        return LLaDAModel(cfg)
    cfg = DreamConfig(
        vocab_size=tok.vocab_size,
        hidden_size=o.hidden,
        intermediate_size=o.intermediate,
        num_hidden_layers=o.layers,
        num_attention_heads=o.heads,
        num_key_value_heads=o.kv_heads,
        max_position_embeddings=4096,
        tie_word_embeddings=not o.untied,
        mask_token_id=tok.mask_id,
        pad_token_id=tok.eos_id,
        eos_token_id=tok.eos_id,
        extra=o.served_extra(),
        **theta,
    )
    return DreamModel(cfg)


def canvas_batch(rows: list, L: int, mask_id: int, eos_id: int, rng: np.random.Generator):
    """Rows ``(ids, start, end)`` -> ``x_t, x, masked, t, answer``: x_t, x, masked and answer
    (N, L), t (N,). Each row end-of-text padded to L; its answer is from ``start`` on."""
    N = len(rows)
    x = np.full((N, L), eos_id, dtype=np.int64)  # (N, L)
    for i, (ids, _, _) in enumerate(rows):
        x[i, : len(ids)] = ids[:L]
    prompt = np.array([start for _, start, _ in rows])  # (N,)
    x_t, masked, t = canvas_noise(x, prompt, mask_id, rng, EPS)
    answer = np.arange(L)[None, :] >= prompt[:, None]  # (N, L)
    return tuple(torch.from_numpy(a) for a in (x_t, x, masked, t.astype(np.float32), answer))


def batch_loss(model, batch, bf16: bool) -> torch.Tensor:
    """``canvas_loss`` of one ``canvas_batch`` through ``model.logits`` (bf16 autocast with ``--bf16``)."""
    x_t, x, masked, t, answer = batch
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
        logits = model.logits(x_t)  # (N, L, V)
    return canvas_loss(logits, x, masked, t, model.logit_shift, answer)


def canvas_step_loss(run, step: int) -> torch.Tensor:
    """The loss of ``step``'s batch: ``--batch`` rows drawn as the gsm recipe draws them (``step_rows``)."""
    o, tok = run.options, run.tok
    rng = np.random.default_rng([o.seed, step, o.seq_len])
    rows = step_rows(run.data, tok, o, step, rng, run.state.get("level"))
    return batch_loss(run.model, canvas_batch(rows, o.seq_len, tok.mask_id, tok.eos_id, rng), o.bf16)


@torch.no_grad()
def canvas_heldout_loss(model, held, options: TrainOptions, mask_id: int, batches: int = 4, N: int = 8) -> float:
    """The mean ``canvas_loss`` over the first ``batches`` x ``N`` held-out rows, masked with fixed
    draws (seed 12345): comparable across steps and runs."""
    total = 0.0
    for i in range(batches):
        rows = [held.rows[(i * N + j) % len(held)] for j in range(N)]
        batch = canvas_batch(rows, options.seq_len, mask_id, held.eos_id, np.random.default_rng([12345, i]))
        total += float(batch_loss(model, batch, options.bf16))
    return total / batches
