"""Training a whole-canvas family (``--family llada`` / ``dream``): the model, its batches, its loss.

A row is one document (``--rows-per-doc``: a gsm problem, its prompt up to the assistant header
with ``--answer-only``) end-of-text padded to ``--seq-len``: the canvas, as decoding fills a
prompt and then masks to their end. The prompt is never masked; every other position (the
end-of-text padding included, as LLaDA's SFT pads its answers) is masked with the row's rate
``t ~ U(eps, 1)`` (``canvas_noise``), and the model (``model.logits``, bidirectional over the
whole row) is trained with ``canvas_loss`` (1 / t weights; Dream's logits shifted by
``model.logit_shift``). With ``--decode-states`` a share of the rows is drawn instead as
semi-autoregressive decoding sees the canvas (``decode_rows``, ``decode_noise``): a clean prefix,
one block partly masked (from a written result on, ``--suffix-results`` of them) and masks after
it, the loss on that block. With ``--distill TEACHER`` a block-causal teacher's decoding-time
distributions on those blocks' masked positions are distilled into them too (``distill_term``:
``--distill-weight`` x KL(teacher || student)). Every batch is a function of (``--seed``, step), so a resume is exact.
"""

from __future__ import annotations

import numpy as np
import torch

from spotref.configs import DreamConfig, LLaDAConfig
from spotref.spec.dream import DreamModel
from spotref.spec.llada import LLaDAModel
from workbench.train.train_curriculum import step_rows
from workbench.train.train_data import result_starts
from workbench.train.train_objective import (
    canvas_loss,
    canvas_noise,
    decode_noise,
    distill_kl,
    teacher_end,
    teacher_logits,
)
from workbench.train.train_options import TrainOptions

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


def canvas_batch(rows: list, L: int, mask_id: int, eos_id: int, rng: np.random.Generator, decode=None):
    """Rows ``(ids, start, end)`` -> ``x_t, x, masked, t, answer``: x_t, x, masked and answer
    (N, L), t (N,). Each row end-of-text padded to L; its answer is from ``start`` on.
    ``decode``: ``(chosen, cuts, B, rng)`` (``decode_rows``), the rows drawn in a decoding state
    instead (``decode_noise``); None: none (the draws of the other rows are the same either way)."""
    N = len(rows)
    x = np.full((N, L), eos_id, dtype=np.int64)  # (N, L)
    for i, (ids, _, _) in enumerate(rows):
        x[i, : len(ids)] = ids[:L]
    prompt = np.array([start for _, start, _ in rows])  # (N,)
    x_t, masked, t = canvas_noise(x, prompt, mask_id, rng, EPS)
    answer = np.arange(L)[None, :] >= prompt[:, None]  # (N, L)
    if decode is not None and decode[0].any():
        chosen, cuts, B, drng = decode
        n_text = np.array([end - start for _, start, end in rows])  # (N,)
        sub = decode_noise(
            x[chosen], prompt[chosen], n_text[chosen], B, mask_id, drng, [cuts[i] for i in np.flatnonzero(chosen)]
        )
        x_t[chosen], masked[chosen], t[chosen], answer[chosen] = sub[0], sub[1], sub[2], sub[3]
    return tuple(torch.from_numpy(a) for a in (x_t, x, masked, t.astype(np.float32), answer))


def decode_rows(rows: list, tok, options: TrainOptions, rng: np.random.Generator):
    """``--decode-states``: which rows (N,) bool are drawn in a decoding state, and per row the answer
    offset of a result's first digit to cut at (``--suffix-results`` of them, where the row writes
    a result) or None."""
    chosen = rng.random(len(rows)) < options.decode_states
    cuts = [None] * len(rows)
    for i in np.flatnonzero(chosen):
        ids, start, _ = rows[i]
        if rng.random() < options.suffix_results:
            starts = result_starts(ids, tok)
            starts = starts[(starts >= start) & (starts < options.seq_len)]
            cuts[i] = int(rng.choice(starts)) - start if len(starts) else None
    return chosen, cuts


def batch_loss(model, batch, bf16: bool, distill=None) -> torch.Tensor:
    """``canvas_loss`` of one ``canvas_batch`` through ``model.logits`` (bf16 autocast with ``--bf16``);
    ``distill``: ``(teacher, W, rows)`` (``--distill``), plus W x ``distill_term`` on those rows."""
    x_t, x, masked, t, answer = batch
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
        logits = model.logits(x_t)  # (N, L, V)
    loss = canvas_loss(logits, x, masked, t, model.logit_shift, answer)
    if distill is None:
        return loss
    teacher, weight, rows = distill
    return loss + weight * distill_term(logits, teacher, batch, rows, model.logit_shift)


def distill_term(logits, teacher, batch, rows, shift: int) -> torch.Tensor:
    """The ``--distill`` term of one batch: logits (N, L, V) the student's, ``rows`` (N,) bool the
    decoding-state rows -> the sum over those rows of their mean KL(teacher || student) over the
    block's masked positions (``distill_kl``; the teacher's logits: ``teacher_logits``, run on
    those rows only, up to the end of the teacher's block holding their last masked position),
    over N, as ``canvas_loss`` averages its rows."""
    x_t, x, masked = batch[0], batch[1], batch[2]
    rows = torch.as_tensor(rows, dtype=torch.bool)  # (N,)
    if not rows.any():
        return logits.new_zeros(())
    end = teacher_end(masked[rows], teacher.block_size)
    target = teacher_logits(teacher, x_t[rows], x[rows], end)  # (n, end, V)
    return distill_kl(logits[rows], target, masked[rows], shift).sum() / len(rows)


def canvas_step_loss(run, step: int) -> torch.Tensor:
    """The loss of ``step``'s batch: ``--batch`` rows drawn as the gsm recipe draws them (``step_rows``)."""
    o, tok = run.options, run.tok
    rng = np.random.default_rng([o.seed, step, o.seq_len])
    rows = step_rows(run.data, tok, o, step, rng, run.state.get("level"))
    decode = distill = None
    if o.decode_states:
        drng = np.random.default_rng([o.seed, 29, step])
        decode = (*decode_rows(rows, tok, o, drng), o.block_size, drng)
    if run.teacher is not None and o.distill_weight > 0:
        distill = (run.teacher, o.distill_weight, decode[0])
    batch = canvas_batch(rows, o.seq_len, tok.mask_id, tok.eos_id, rng, decode)
    return batch_loss(run.model, batch, o.bf16, distill)


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
