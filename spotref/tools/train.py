"""Train a bundled target: an ``SDARModel`` with the block-diffusion objective of SDAR / BD3-LM.

One training sequence ``x`` of ``L`` tokens (``L`` a multiple of the block size ``B``) becomes
the input ``concat(x_t, x)`` of length ``2L`` (Arriola et al., BD3-LM, 2025):

* ``x_t``: the noised copy; in every block exactly ``k ~ U{1..B}`` positions, chosen uniformly,
  are replaced by MASK (mask rate ``t = k / B``);
* attention (``bd3_mask``): noised block i sees noised block i (bidirectionally) and the *clean*
  blocks < i; clean block i sees clean blocks <= i (the block-causal mask of decoding); both
  copies carry the same RoPE positions 0..L-1;
* loss: cross-entropy of the logits at the masked positions of ``x_t`` against the clean token
  at the same position (no shift). ``--weighting tokens`` (default) averages over all masked
  tokens; ``--weighting elbo`` weights each block by ``1 / t`` as the MDLM / BD3-LM ELBO does,
  which with exactly ``k`` masks per block is the mean over blocks of each block's masked mean.

So one training forward teaches every block, at a random mask rate, what a decoding pass sees:
a partially masked current block over a clean prefix.

Usage (background, resumable; checkpoints in ``runs/NAME/``)::

    nice -n 19 python -m spotref.tools.train --name stdlib-b32 --block-size 32 --minutes 40

A run stops after ``--steps`` or ``--minutes`` of training time, whichever comes first; the same
command resumes it from ``runs/NAME/ckpt.pt``. ``--export DIR`` then writes the target
(``NAME.safetensors``, ``NAME.json``, ``NAME.tokenizer.json``) for ``spotref.load_target``.

Data (``spotref.data.corpora``): ``--corpus`` names what is trained on: ``stdlib`` (Python's own
text, the default), ``gsm`` (grade-school math word problems from ``spotref.data.gsm``, drawn
with ``--corpus-seed`` at ``--corpus-level``, ``--corpus-size`` of them) or a text file of
documents. The exported metadata records the corpus (name, seed, options), so
``Target.heldout`` draws held-out prompts of the same domain. ``--pad-eot`` packs documents as
SDAR's chat data: each followed by end-of-text up to the end of its block, every window
starting at a block boundary. ``--split-digits`` trains the BPE with every digit its own token.
``--keep-snapshots MIN`` keeps the weights every MIN minutes of training under
``runs/NAME/snapshots/`` (``export_run(..., checkpoint=)`` exports one), for a learning curve.

The gsm recipe (options, all off by default; the exported metadata records them under
``training.recipe``): ``--rows-per-doc`` makes every training row one document at position 0,
end-of-text padded to the end of its block (cut at ``--seq-len``), as decoding sees a prompt;
``--answer-only`` masks only what follows the assistant header ``<|im_start|>assistant\\n`` of a
chat document (k ~ U{1..n} of the n such positions of each block; a document without the header
is all answer), the end-of-text padding weighted ``--eot-weight`` in the loss;
``--fresh-problems`` (``--corpus gsm``) draws each step's problems afresh from
(``--corpus-seed``, step), never a held-out one, instead of from ``--corpus-size`` fixed ones;
``--curriculum LEVEL@STEP,...`` (e.g. ``0@0,1@4000,2@12000``) sets the level of those problems
by step, a share ``--curriculum-lower`` of the rows from the schedule's lower levels once it has
moved on; ``--adaptive LEVEL,...`` (e.g. ``0,1,2,3``) moves instead to the next level when, every
``--adapt-every`` steps, exact decoding (T = 0) of ``--adapt-n`` held-out problems of the current
level gets ``--adapt-answers`` of the answers and ``--adapt-equations`` of the equations right
(the level and the evaluations are in the checkpoint, so a resume is exact); ``--drill-share P``
makes a share P of those rows arithmetic drills (``gsm.drill``: "What is a op b?", addition and
subtraction twice as often, or as ``--drill-ops sub,sub,div,div,add,mul`` weights them) at the
row's level, their operands drawn in the level's limits or, with ``--drill-from problems``, an
equation the problems themselves write (``gsm.equation_drill``); ``--mask-results P`` masks, in a share P of the
rows, every written result (the digits after ``= `` and after ``#### ``) on top of the
k ~ U{1..n} draw, so those rows train the arithmetic rather than copying a result written
elsewhere in the block; ``--result-weight W`` weights the loss of the results and of the 2 tokens
after each by W (at T = 0 the decoder mostly commits the word after a result before the result's
last digit, so where the model puts it fixes how many digits the result gets); ``--suffix-results
P`` masks, in a share P of the rows, each block that holds a result from one result's first digit
to the block end and nothing before it (the state in which the decoder places that length). The held-out loss
then uses rows of held-out documents, masked the same way (without ``--mask-results``).
"""
from __future__ import annotations

import argparse
import functools
import hashlib
import json
import math
import re
import shlex
import sys
import time
from dataclasses import asdict
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from spotref.api import generate
from spotref.data import gsm
from spotref.load.bpe import BPETokenizer, ByteTokenizer, tokenizer_from_json
from spotref.data.corpora import (
    CORPORA,
    FileCorpus,
    GsmCorpus,
    StdlibCorpus,
    open_corpus,
)
from spotref.load.files import atomic_path, atomic_save, atomic_write_text, check_writable, shipped_writes
from spotref.load.targets import TARGETS_DIR, load_target
from spotref.models import SDARConfig, SDARModel, rope
from spotref.tools.argtypes import (
    add_threads,
    guarded,
    run_allowed,
    int_list,
    nonneg_int,
    nonneg_real,
    plain,
    positive_int,
    positive_real,
    real_range,
    seed_int,
)

GSM_DEFAULTS = {"corpus_seed": 0, "corpus_size": 40000, "corpus_level": 3}
ANSWER_HEADER = gsm.IM_START + "assistant\n"               # --answer-only: masked from here on

# --- the objective ------------------------------------------------------------------------

def bd3_mask(L: int, B: int, device=None, dtype=torch.float32) -> torch.Tensor:
    """Additive attention mask (2L, 2L) over ``concat(x_t, x)``; 0 = visible."""
    assert L % B == 0, f"sequence length {L} is not a multiple of the block size {B}"
    blk = torch.arange(2 * L, device=device) % L // B             # block index of each position
    noisy = torch.arange(2 * L, device=device) < L
    q_noisy, k_noisy = noisy[:, None], noisy[None, :]
    same, before = blk[:, None] == blk[None, :], blk[None, :] < blk[:, None]
    visible = (q_noisy & k_noisy & same) | (q_noisy & ~k_noisy & before) \
        | (~q_noisy & ~k_noisy & (same | before))
    return torch.zeros((), dtype=dtype).masked_fill(~visible, torch.finfo(dtype).min)


def noise_blocks(x: np.ndarray, B: int, mask_id: int, rng: np.random.Generator):
    """x: (N, L) -> (x_t, masked), both (N, L): exactly k ~ U{1..B} masks per block."""
    N, L = x.shape
    k = rng.integers(1, B + 1, size=(N, L // B, 1))                       # (N, L/B, 1)
    rank = rng.random((N, L // B, B)).argsort(-1).argsort(-1)             # a random order per block
    masked = (rank < k).reshape(N, L)
    return np.where(masked, mask_id, x), masked


def bd3_logits(model: SDARModel, x_t: torch.Tensor, x: torch.Tensor, mask: torch.Tensor):
    """x_t, x: (N, L) -> logits (N, L, V) of the noised copy (its own positions, no shift)."""
    N, L = x.shape
    cos, sin = model._rope(0, L, x.device)                                 # (L, d)
    cos, sin = torch.cat((cos, cos)), torch.cat((sin, sin))               # (2L, d): same positions
    h = model.model.embed_tokens(torch.cat((x_t, x), 1))                   # (N, 2L, H)
    for layer in model.model.layers:
        h = layer_forward(layer, h, cos, sin, mask)
    return F.linear(model.model.norm(h[:, :L]), model.lm_head.weight)     # (N, L, V)


def layer_forward(layer, x, cos, sin, mask):
    """One ``DecoderLayer`` with its own weights, via ``F.linear`` and fused attention.

    The same maths as ``DecoderLayer.forward``, which uses one ``bmm`` per row for batch
    invariance at decoding time; training needs no invariance and this is several times faster
    on CPU. ``tests/test_train.py`` checks both give the same logits."""
    a, m = layer.self_attn, layer.mlp
    N, S, _ = x.shape
    h = layer.input_layernorm(x)
    q = a.q_norm(F.linear(h, a.q_proj.weight).view(N, S, a.h, a.d)).transpose(1, 2)    # (N, h, S, d)
    k = a.k_norm(F.linear(h, a.k_proj.weight).view(N, S, a.kvh, a.d)).transpose(1, 2)  # (N, kvh, S, d)
    v = F.linear(h, a.v_proj.weight).view(N, S, a.kvh, a.d).transpose(1, 2)
    q, k = rope(q, cos, sin), rope(k, cos, sin)
    g = a.h // a.kvh
    k, v = k.repeat_interleave(g, dim=1), v.repeat_interleave(g, dim=1)               # (N, h, S, d)
    y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask.to(q.dtype))            # (N, h, S, d)
    x = x + F.linear(y.transpose(1, 2).reshape(N, S, a.h * a.d), a.o_proj.weight)
    h = layer.post_attention_layernorm(x)
    return x + F.linear(F.silu(F.linear(h, m.gate_proj.weight)) * F.linear(h, m.up_proj.weight),
                        m.down_proj.weight)


def bd3_loss(logits, x, masked, B: int, weighting: str = "tokens"):
    """Masked cross-entropy; logits (N, L, V), x and masked (N, L)."""
    ce = F.cross_entropy(logits.float().flatten(0, 1), x.flatten(), reduction="none").view(x.shape)
    ce = ce * masked
    if weighting == "tokens":
        return ce.sum() / masked.sum()
    per_block = ce.view(x.shape[0], -1, B).sum(-1) / masked.view(x.shape[0], -1, B).sum(-1)
    return per_block.mean()                                                # weighting == "elbo"


# --- data ---------------------------------------------------------------------------------

def token_stream(texts, tokenizer, block: int = 1) -> np.ndarray:
    """Documents (str) -> one uint16 stream, each document followed by EOS. ``block`` > 1
    (``--pad-eot``): the EOS run goes on to the end of the document's last block, so every
    document starts at a multiple of ``block``, as SDAR pads its chat data."""
    texts = list(texts)
    ids = tokenizer.encode_batch(texts) if hasattr(tokenizer, "encode_batch") \
        else [tokenizer.encode(t) for t in texts]
    out = []
    for seq in ids:
        out += seq + [tokenizer.eos_id] * (1 + (-len(seq) - 1) % block)
    return np.asarray(out, dtype=np.uint16)


def batch_at(stream: np.ndarray, step: int, seed: int, N: int, L: int, B: int, mask_id: int,
             align: int = 1):
    """The training batch of ``step``: a pure function of (seed, step), so resuming is exact.
    ``align`` > 1: windows start at multiples of ``align`` (the blocks of a padded stream)."""
    rng = np.random.default_rng([seed, step, B])
    if align == 1:
        starts = rng.integers(0, len(stream) - L, size=N)
    else:
        starts = rng.integers(0, (len(stream) - L) // align + 1, size=N) * align
    x = np.stack([stream[s:s + L] for s in starts]).astype(np.int64)     # (N, L)
    x_t, masked = noise_blocks(x, B, mask_id, rng)
    return torch.from_numpy(x_t), torch.from_numpy(x), torch.from_numpy(masked)


@torch.no_grad()
def heldout_loss(model, stream, args, mask_id, batches: int = 4, N: int = 8) -> float:
    """Token-mean masked CE (nats/token) on fixed held-out windows and masks (seed 12345):
    ``batches`` x ``N`` windows of ``--seq-len`` tokens, whatever ``--batch``. With
    ``--rows-per-doc`` (``held`` a ``Rows``): the first ``batches`` x ``N`` held-out documents as
    rows, masked as in training (``--answer-only``), the loss weighted as in training."""
    if isinstance(stream, Rows):
        return heldout_rows_loss(model, stream, args, mask_id, batches, N)
    mask, total, count = bd3_mask(args.seq_len, args.block_size), 0.0, 0
    for i in range(batches):
        x_t, x, masked = batch_at(stream, i, 12345, N, args.seq_len, args.block_size, mask_id,
                                  stream_align(args))
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.bf16):
            logits = bd3_logits(model, x_t, x, mask)
        total += float(bd3_loss(logits, x, masked, args.block_size)) * int(masked.sum())
        count += int(masked.sum())
    return total / count


# --- one document per row (--rows-per-doc, --answer-only, --fresh-problems, --curriculum) --------

class Rows:
    """Encoded documents, one training row each: ``(ids, start, end)`` as ``encode_row`` gives."""

    def __init__(self, rows: list, eos_id: int):
        self.rows, self.eos_id = rows, eos_id

    def __len__(self):
        return len(self.rows)


def encode_row(doc: str, tok, align: int, answer_only: bool, max_len: int):
    """One document as a row: ``(ids, start, end)``. ``ids``: the document, end-of-text up to a
    multiple of ``align`` (at least one), cut at ``max_len``; ``start``: the first position that
    may be masked (after the assistant header with ``answer_only``, else 0); ``end``: the
    position after the first end-of-text (the padding is ``ids[end:]``)."""
    cut = doc.find(ANSWER_HEADER) if answer_only else -1
    if cut >= 0:
        cut += len(ANSWER_HEADER)
        prompt, answer = tok.encode(doc[:cut]), tok.encode(doc[cut:])   # the prompt as decoding sees it
    else:
        prompt, answer = [], tok.encode(doc)
    ids = prompt + answer + [tok.eos_id]
    end = len(ids)
    ids = (ids + [tok.eos_id] * (-len(ids) % align))[:max_len]
    return ids, min(len(prompt), len(ids)), min(end, len(ids))


def rows_batch(rows: list, B: int, mask_id: int, eos_id: int, rng: np.random.Generator, eot_weight: float = 1.0,
               forced=None, boost=None, boost_weight: float = 1.0, cuts=None):
    """Rows ``(ids, start, end)`` -> ``x_t, x, masked, weight``, each (N, L), L the longest row
    (rows of multiples of B; shorter ones end-of-text padded, never masked). In each block,
    k ~ U{1..n} of its n candidate positions (``start`` to the row's length) are masked;
    ``weight`` is 1 on masked tokens, ``eot_weight`` on masked padding (from ``end``), 0 elsewhere.
    ``forced``: one array of positions per row (or None) masked as well, if candidates
    (``--mask-results``); None draws exactly what it drew before the option. ``boost``: one array
    of positions per row (or None) whose weight is multiplied by ``boost_weight``
    (``--result-weight``); the draws are the same with or without it. ``cuts``: one array of
    positions per row (or None), at most one per block (``suffix_cuts``): that block is masked
    from the cut to its end and nothing before it, whatever was drawn (``--suffix-results``)."""
    N, L = len(rows), max(len(r[0]) for r in rows)
    assert L % B == 0, f"row length {L} is not a multiple of the block size {B}"
    x = np.full((N, L), eos_id, dtype=np.int64)
    cand = np.zeros((N, L), dtype=bool)
    w = np.zeros((N, L), dtype=np.float32)
    for i, (ids, start, end) in enumerate(rows):
        x[i, :len(ids)] = ids
        cand[i, start:len(ids)] = True
        w[i, :len(ids)] = 1.0
        w[i, end:len(ids)] = eot_weight
    for i, pos in enumerate(boost or []):
        if pos is not None:
            w[i, pos] *= boost_weight
    c = cand.reshape(N, L // B, B)
    n = c.sum(-1, keepdims=True)                                           # candidates per block
    k = np.floor(rng.random(n.shape) * n).astype(np.int64) + 1             # U{1..n}
    rank = np.where(c, rng.random(c.shape), 2.0).argsort(-1).argsort(-1)  # candidates first, random order
    masked = (c & (rank < k)).reshape(N, L)
    for i, pos in enumerate(forced or []):
        if pos is not None:
            masked[i, pos] |= cand[i, pos]
    for i, pos in enumerate(cuts or []):
        for c in [] if pos is None else pos:
            b0 = c - c % B
            masked[i, b0:b0 + B] = cand[i, b0:b0 + B] & (np.arange(b0, b0 + B) >= c)
    return (torch.from_numpy(np.where(masked, mask_id, x)), torch.from_numpy(x), torch.from_numpy(masked),
            torch.from_numpy(w * masked))


def result_positions(ids, tok, follow: int = 0) -> np.ndarray:
    """The positions of every written result in ``ids``: the digits after ``= `` (an equation's
    result) and after ``#### `` (the final answer); with ``follow``, also the ``follow`` tokens
    after each result (whose places fix how many digits it has)."""
    text = [tok.decode([i]) for i in ids]
    out, after = [], 0                       # after: 2 behind a marker, 1 behind its space
    for j, t in enumerate(text):
        if after and t.isdigit():
            out.append(j)
            continue
        if out and out[-1] == j - 1 and text[j - 1].isdigit() and after:      # a result just ended
            out += range(j, min(j + follow, len(text)))
        after = 2 if t.strip() in ("=", "####") else 1 if after == 2 and t == " " else 0
    return np.array(sorted(set(out)), dtype=np.int64)


def result_starts(ids, tok, pos=None) -> np.ndarray:
    """The first digit of each written result in ``ids`` (``pos``: its ``result_positions``, if
    already computed)."""
    pos = result_positions(ids, tok) if pos is None else pos
    return pos[np.r_[True, np.diff(pos) > 1]] if len(pos) else pos


def row_results(rows, tok):
    """Row index -> ``result_positions`` of that row, each computed once, when first asked for
    (``--mask-results`` and ``--suffix-results`` may pick the same row)."""
    return functools.lru_cache(maxsize=None)(lambda i: result_positions(rows[i][0], tok))


def boosted_results(rows, tok, weight: float) -> list | None:
    """``--result-weight``: each row's results and the 2 tokens after each, or None (weight 1)."""
    if weight == 1.0:
        return None
    return [result_positions(ids, tok, follow=2) for ids, _, _ in rows]


def forced_results(rows, tok, share: float, rng: np.random.Generator, positions=None) -> list | None:
    """``--mask-results``: each row's result positions with probability ``share``, else None.
    ``positions``: a ``row_results`` of these rows, to share with ``suffix_cuts``."""
    if not share:
        return None
    positions = positions or row_results(rows, tok)
    return [positions(i) if rng.random() < share else None for i in range(len(rows))]


def suffix_cuts(rows, tok, share: float, B: int, rng: np.random.Generator, positions=None) -> list | None:
    """``--suffix-results``: with probability ``share`` a row gets, in each block that holds a
    written result's first digit, one such digit drawn at random: ``rows_batch`` masks the block
    from there to its end and nothing before. That is the state in which the decoder places a
    result's length at T = 0 (the question and the solution so far given, nothing after the
    result decided), which the k ~ U{1..n} draw almost never makes: when it leaves nothing after
    a result decided, it has masked most of the block before it too. None: no row (share 0).
    ``positions``: a ``row_results`` of these rows, to share with ``forced_results``."""
    if not share:
        return None
    positions = positions or row_results(rows, tok)
    out = []
    for i, (ids, _, _) in enumerate(rows):
        if rng.random() >= share:
            out.append(None)
            continue
        by_block = {}
        for c in result_starts(ids, tok, positions(i)).tolist():
            by_block.setdefault(c // B, []).append(c)
        out.append(np.array(sorted(int(rng.choice(cs)) for cs in by_block.values()), dtype=np.int64))
    return out


def weighted_loss(logits, x, weight):
    """Cross-entropy weighted per position (``rows_batch``'s weight), over the total weight."""
    ce = F.cross_entropy(logits.float().flatten(0, 1), x.flatten(), reduction="none").view(x.shape)
    return (ce * weight).sum() / weight.sum().clamp_min(1e-9)


DRILL_OP_NAMES = {"add": "+", "sub": "-", "mul": "*", "div": "/"}


def drill_ops_arg(text: str) -> str:
    """``--drill-ops add,sub,sub,...``: the drills' operators by name, as a string of + - * /."""
    names = [t.strip() for t in text.split(",")]
    if not text.strip() or any(n not in DRILL_OP_NAMES for n in names):
        raise argparse.ArgumentTypeError(f"must be a comma-separated list of add, sub, mul, div "
                                         f"(e.g. sub,sub,div,div,add,mul), got {text!r}")
    return "".join(DRILL_OP_NAMES[n] for n in names)


def curriculum_arg(text: str) -> str:
    """``--curriculum LEVEL@STEP,...``: gsm levels from steps, the first at step 0."""
    try:
        sched = parse_curriculum(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be LEVEL@STEP,... (e.g. 0@0,1@4000), got {text!r}") from None
    if sched[0][0] != 0 or len({s for s, _ in sched}) < len(sched):
        raise argparse.ArgumentTypeError(f"must start at step 0 and name each step once, got {text!r}")
    bad = [lvl for _, lvl in sched if lvl not in gsm.LEVELS]
    if bad:
        raise argparse.ArgumentTypeError(f"must name levels in {sorted(gsm.LEVELS)}, got {bad[0]} in {text!r}")
    return text


def parse_curriculum(text: str) -> list[tuple[int, int]]:
    """``"0@0,1@4000"`` -> ``[(0, 0), (4000, 1)]``: (first step, level), by step."""
    out = []
    for part in text.split(","):
        level, step = part.split("@")
        out.append((int(step), int(level)))
        if out[-1][0] < 0:
            raise ValueError(text)
    return sorted(out)


def row_level(args, step: int, j: int, level: int | None = None) -> int:
    """The gsm level of row ``j`` at ``step``: ``--corpus-level``, or the curriculum's level
    at ``step`` (``--adaptive``: ``level``), a share ``--curriculum-lower`` of rows drawn
    uniformly from its lower levels."""
    if getattr(args, "adaptive", None):
        order = adaptive_levels(args)
        top = order[0] if level is None else level
        lower = sorted({lvl for lvl in order if lvl < top})
    elif args.curriculum:
        sched = parse_curriculum(args.curriculum)
        top = [lvl for start, lvl in sched if start <= step][-1]
        lower = sorted({lvl for _, lvl in sched if lvl < top})
    else:
        return corpus_level(args)
    rng = np.random.default_rng([corpus_seed(args), 7, step, j])
    if lower and rng.random() < args.curriculum_lower:
        return lower[int(rng.integers(len(lower)))]
    return top


def adaptive_levels(args) -> list[int]:
    return [int(v) for v in str(args.adaptive).split(",")]


def adaptive_arg(text: str) -> str:
    """``--adaptive LEVEL,...``: distinct gsm levels, in the order to train them."""
    try:
        levels = [int(v) for v in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a comma list of levels (e.g. 0,1,2,3), got {text!r}") from None
    if len(set(levels)) < len(levels) or any(v not in gsm.LEVELS for v in levels):
        raise argparse.ArgumentTypeError(f"must name distinct levels in {sorted(gsm.LEVELS)}, got {text!r}")
    return text


@torch.no_grad()
def answer_accuracy(model, tok, level: int, n: int, max_len: int) -> dict:
    """Exact decoding (T = 0, stop at end-of-text) of the first ``n`` held-out problems (seed 0)
    at ``level``: the share of right final answers and of right equations."""
    right = eq_right = eq_all = 0
    for p in gsm.problems(n, 0, "heldout", gsm.LEVELS[level]):
        ids = tok.encode(p.prompt)
        out = tok.decode(generate(model, ids, max(model.block_size, max_len - len(ids)),
                                  stop_ids=[tok.eos_id]).tokens)
        right += gsm.final_answer(out) == p.answer
        eqs = gsm.equations(out)
        eq_right, eq_all = eq_right + sum(e[-1] for e in eqs), eq_all + len(eqs)
    return {"level": level, "answers": round(right / n, 4), "equations": round(eq_right / max(1, eq_all), 4),
            "n": n, "equations_written": eq_all}


def adapt(model, tok, args, state) -> None:
    """``--adaptive``: evaluate the current level; move to the next when both thresholds are met."""
    order = adaptive_levels(args)
    level = state.get("level", order[0])
    model.eval()
    r = answer_accuracy(model, tok, level, args.adapt_n, args.seq_len)
    model.train()
    r["step"] = state["step"]
    moved = r["answers"] >= args.adapt_answers and r["equations"] >= args.adapt_equations \
        and order.index(level) + 1 < len(order)
    if moved:
        state["level"] = order[order.index(level) + 1]
        r["moved_to"] = state["level"]
    state["level"] = state.get("level", level)
    state["adaptive_evals"] = state.get("adaptive_evals", []) + [r]


def corpus_seed(args) -> int:
    return GSM_DEFAULTS["corpus_seed"] if args.corpus_seed is None else args.corpus_seed


def corpus_level(args) -> int:
    return GSM_DEFAULTS["corpus_level"] if args.corpus_level is None else args.corpus_level


DRILLS = {"range": gsm.drill, "problems": gsm.equation_drill}      # --drill-from


def fresh_problem(seed: int, step: int, j: int, difficulty, drill_share: float = 0.0,
                  drill_ops: str = gsm.DRILL_OPS, drill_from: str = "range") -> gsm.Problem:
    """Problem ``j`` of ``step``: a pure function of (seed, step, j), never a held-out one; a
    drill (``DRILLS[drill_from]`` over the operators ``drill_ops``) with probability
    ``drill_share`` (0: the draws are unchanged)."""
    drill = drill_share > 0 and np.random.Generator(np.random.PCG64([seed, 13, step, j])).random() < drill_share
    for i in range(100):
        rng = np.random.Generator(np.random.PCG64([seed, 11, step, j, i]))
        p = DRILLS[drill_from](rng, difficulty, drill_ops) if drill else gsm.draw(rng, difficulty)
        if not gsm.is_heldout(p.question):
            return p
    raise RuntimeError(f"no training problem in 100 draws at step {step}, row {j}")


def drill_ops(args) -> str:
    """``--drill-ops``, or the default mix (runs from before the option)."""
    return getattr(args, "drill_ops", None) or gsm.DRILL_OPS


def step_rows(rows, tok, args, step: int, rng: np.random.Generator, level: int | None = None) -> list:
    """The rows of ``step``: ``--batch`` fresh problems (``level``: ``--adaptive``'s current
    one), or documents of ``rows`` drawn with ``rng``."""
    align, max_len = row_align(args), args.seq_len
    if args.fresh_problems:
        docs = [fresh_problem(corpus_seed(args), step, j, gsm.LEVELS[row_level(args, step, j, level)],
                              getattr(args, "drill_share", 0.0), drill_ops(args),
                              getattr(args, "drill_from", None) or "range").document
                for j in range(args.batch)]
        return [encode_row(d, tok, align, args.answer_only, max_len) for d in docs]
    return [rows.rows[i] for i in rng.integers(0, len(rows), size=args.batch)]


def encode_rows(docs, tok, args) -> Rows:
    return Rows([encode_row(d, tok, row_align(args), args.answer_only, args.seq_len) for d in docs], tok.eos_id)


def row_align(args) -> int:
    """Rows end at a multiple of every block size trained on (their least common multiple)."""
    return math.lcm(*block_sizes(args), args.block_size)


@torch.no_grad()
def heldout_rows_loss(model, held: Rows, args, mask_id, batches: int = 4, N: int = 8) -> float:
    """``heldout_loss`` with ``--rows-per-doc``: weighted masked CE over fixed rows and masks."""
    total, count = 0.0, 0.0
    for i in range(batches):
        rows = [held.rows[(i * N + j) % len(held)] for j in range(N)]
        x_t, x, masked, w = rows_batch(rows, args.block_size, mask_id, held.eos_id,
                                       np.random.default_rng([12345, i]), args.eot_weight)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.bf16):
            logits = bd3_logits(model, x_t, x, bd3_mask(x.shape[1], args.block_size))
        total += float(weighted_loss(logits, x, w)) * float(w.sum())
        count += float(w.sum())
    if not count:
        raise ValueError(f"--seq-len {args.seq_len} cuts the held-out rows before any position that is masked "
                         f"(--answer-only: before the answer); give a longer --seq-len")
    return total / count


def check_recipe(args) -> None:
    """``ValueError`` naming an option of the gsm recipe that does not apply."""
    rows = getattr(args, "rows_per_doc", False)
    needs_rows = [("--answer-only", args.answer_only), ("--eot-weight", args.eot_weight != 1.0),
                  ("--fresh-problems", args.fresh_problems)]
    for name, given in needs_rows:
        if given and not rows:
            raise ValueError(f"{name} applies to --rows-per-doc only")
    if rows and args.weighting != "tokens":
        raise ValueError("--rows-per-doc weights the loss per token: it needs --weighting tokens")
    if args.fresh_problems and args.corpus != "gsm":
        raise ValueError("--fresh-problems applies to --corpus gsm only")
    if getattr(args, "drill_share", 0.0) and not args.fresh_problems:
        raise ValueError("--drill-share mixes drills into fresh problems: it needs --fresh-problems")
    if getattr(args, "drill_ops", None) and not getattr(args, "drill_share", 0.0):
        raise ValueError("--drill-ops sets the operators of the drills: it needs --drill-share")
    if getattr(args, "drill_from", None) and not getattr(args, "drill_share", 0.0):
        raise ValueError("--drill-from sets where the drills' numbers come from: it needs --drill-share")
    if getattr(args, "result_weight", 1.0) != 1.0 and not rows:
        raise ValueError("--result-weight weights the results of one-document rows: it needs --rows-per-doc")
    if getattr(args, "mask_results", 0.0) and not rows:
        raise ValueError("--mask-results masks the results of one-document rows: it needs --rows-per-doc")
    if getattr(args, "suffix_results", 0.0) and not rows:
        raise ValueError("--suffix-results masks the blocks of one-document rows: it needs --rows-per-doc")
    if getattr(args, "init_deepen", False) and not args.init:
        raise ValueError("--init-deepen deepens the --init weights: it needs --init")
    if args.curriculum and not args.fresh_problems:
        raise ValueError("--curriculum draws its problems afresh: it needs --fresh-problems")
    if args.adaptive and not args.fresh_problems:
        raise ValueError("--adaptive draws its problems afresh: it needs --fresh-problems")
    if args.adaptive and args.curriculum:
        raise ValueError("--adaptive replaces --curriculum's fixed schedule: give one of them")
    if args.curriculum_lower != 0.4 and not (args.curriculum or args.adaptive):
        raise ValueError("--curriculum-lower applies to --curriculum or --adaptive only")


def recipe(args: dict) -> dict:
    """The data recipe of a run's arguments (defaults for options older runs lack), for the metadata."""
    sched = parse_curriculum(args["curriculum"]) if args.get("curriculum") else None
    fresh = args.get("fresh_problems", False)
    level = GSM_DEFAULTS["corpus_level"] if args.get("corpus_level") is None else args["corpus_level"]
    adaptive = [int(v) for v in str(args["adaptive"]).split(",")] if args.get("adaptive") else None
    levels = sorted({lvl for _, lvl in sched}) if sched else adaptive or ([level] if fresh else [])
    return {"rows_per_doc": args.get("rows_per_doc", False), "answer_only": args.get("answer_only", False),
            "answer_header": ANSWER_HEADER if args.get("answer_only") else None,
            "eot_weight": args.get("eot_weight", 1.0), "fresh_problems": fresh,
            "curriculum": [[step, lvl] for step, lvl in sched] if sched else None,
            "curriculum_lower": args.get("curriculum_lower", 0.4) if sched or adaptive else None,
            "adaptive": {"levels": adaptive, "every": args.get("adapt_every"), "n": args.get("adapt_n"),
                         "answers": args.get("adapt_answers"), "equations": args.get("adapt_equations"),
                         "heldout": "the first n held-out problems of spotref.data.gsm (seed 0), T = 0"}
            if adaptive else None,
            "levels": {str(lvl): asdict(gsm.LEVELS[lvl]) for lvl in levels},
            "rope_theta": args.get("rope_theta"), "drill_share": args.get("drill_share", 0.0),
            "drill_ops": args.get("drill_ops") or gsm.DRILL_OPS, "drill_from": args.get("drill_from") or "range",
            "mask_results": args.get("mask_results", 0.0), "result_weight": args.get("result_weight", 1.0),
            "suffix_results": args.get("suffix_results", 0.0)}


# --- setup ----------------------------------------------------------------------------------

def add_arguments(p: argparse.ArgumentParser) -> None:
    """The options of ``spotref train-target`` / ``python -m spotref.tools.train``."""
    p.add_argument("--name", required=True, help="run and target name, e.g. stdlib-b32")
    p.add_argument("--runs", default="runs", help="directory of run checkpoints")
    p.add_argument("--tokenizer", default="bpe2048",
                   help="'bytes', 'bpeN' (train an N-token BPE on the train split) or a tokenizer JSON")
    p.add_argument("--split-digits", action="store_true",
                   help="train the BPE (--tokenizer bpeN) with every digit its own token")
    p.add_argument("--corpus", type=corpus_arg, default="stdlib",
                   help="stdlib (Python's own text, the default), gsm (grade-school math word problems, "
                        "spotref.data.gsm) or the path of a text file of documents (one per line, or "
                        "JSON lines with a \"text\" field)")
    p.add_argument("--corpus-seed", type=seed_int, default=None, help="gsm: the seed of the problems (default 0)")
    p.add_argument("--corpus-size", type=positive_int, default=None,
                   help="gsm: how many training problems (default 40000)")
    p.add_argument("--corpus-level", type=int, choices=sorted(gsm.LEVELS), default=None,
                   help="gsm: the difficulty level (default 3; spotref.data.gsm.LEVELS)")
    p.add_argument("--pad-eot", action="store_true",
                   help="follow every document with end-of-text up to the end of its block and start "
                        "windows at block boundaries (SDAR's chat data)")
    p.add_argument("--rows-per-doc", action="store_true",
                   help="one document per training row at position 0, end-of-text padded to the end of its "
                        "block and cut at --seq-len (for gsm: one problem per row)")
    p.add_argument("--answer-only", action="store_true",
                   help="--rows-per-doc: mask only the answer, after the assistant header "
                        "'<|im_start|>assistant\\n' (k ~ U{1..n} of the n answer positions of each block)")
    p.add_argument("--eot-weight", type=nonneg_real, default=1.0,
                   help="--rows-per-doc: loss weight of the end-of-text padding after a document (recipe: 0.3)")
    p.add_argument("--fresh-problems", action="store_true",
                   help="--rows-per-doc --corpus gsm: draw each step's problems afresh from (--corpus-seed, step), "
                        "deterministically, instead of from --corpus-size fixed ones")
    p.add_argument("--drill-share", type=real_range(0.0, 1.0), default=0.0,
                   help="--fresh-problems: share of rows that are arithmetic drills (gsm.drill), default 0")
    p.add_argument("--drill-ops", type=drill_ops_arg, default=None, metavar="OP,...",
                   help="--drill-share: the drills' operators (add, sub, mul, div), drawn uniformly from the "
                        "list (repeat one to draw it more often), e.g. sub,sub,div,div,add,mul; "
                        "default add,sub,add,sub,mul,div")
    p.add_argument("--drill-from", choices=sorted(DRILLS), default=None,
                   help="--drill-share: the drills' operands drawn uniformly in the level's limits (range, "
                        "the default) or an equation of a fresh training problem (problems: the sizes "
                        "the solutions write)")
    p.add_argument("--mask-results", type=real_range(0.0, 1.0), default=0.0,
                   help="--rows-per-doc: share of rows whose written results (after '= ' and '#### ') "
                        "are all masked, on top of the k ~ U{1..n} masks, default 0")
    p.add_argument("--suffix-results", type=real_range(0.0, 1.0), default=0.0,
                   help="--rows-per-doc: share of rows in which each block holding a written result is masked "
                        "from one of its results' first digit to the block end, and nothing before (the state "
                        "in which the decoder places a result's length), default 0")
    p.add_argument("--result-weight", type=positive_real, default=1.0,
                   help="--rows-per-doc: loss weight of the written results and of the 2 tokens after each "
                        "(their places fix the result's length; the decoder mostly commits them first), default 1")
    p.add_argument("--curriculum", type=curriculum_arg, default=None, metavar="LEVEL@STEP,...",
                   help="--fresh-problems: the gsm level from each step, e.g. 0@0,1@4000,2@12000 "
                        "(spotref.data.gsm.LEVELS)")
    p.add_argument("--adaptive", type=adaptive_arg, default=None, metavar="LEVEL,...",
                   help="--fresh-problems: train the gsm levels in this order (e.g. 0,1,2,3), moving on when "
                        "held-out decoding meets --adapt-answers and --adapt-equations")
    p.add_argument("--adapt-every", type=positive_int, default=500, help="--adaptive: evaluate every this many steps")
    p.add_argument("--adapt-n", type=positive_int, default=40, help="--adaptive: held-out problems per evaluation")
    p.add_argument("--adapt-answers", type=real_range(0.0, 1.0), default=0.6,
                   help="--adaptive: share of right answers to move on")
    p.add_argument("--adapt-equations", type=real_range(0.0, 1.0), default=0.9,
                   help="--adaptive: share of right equations to move on")
    p.add_argument("--curriculum-lower", type=real_range(0.0, 1.0), default=0.4,
                   help="--curriculum / --adaptive: share of rows from lower levels once it has moved on")
    p.add_argument("--rope-theta", type=positive_real, default=None,
                   help="RoPE base (default: SDARConfig's, 1e6; the gsm recipe: 1e4)")
    p.add_argument("--block-size", type=positive_int, default=32, help="block size B")
    p.add_argument("--mix-blocks", type=int_list(1), default=None,
                   help="comma list of block sizes, one drawn per step (e.g. 16,32): one model for all")
    p.add_argument("--init", default=None,
                   help="start from these weights (fine-tuning): a run checkpoint (runs/NAME/ckpt.pt), or a "
                        "target (a bundled name such as gsm-b32, or a NAME.json); its tokenizer must be the run's")
    p.add_argument("--init-deepen", action="store_true",
                   help="--init weights with fewer layers than --layers: they fill the first layers, the "
                        "added ones start as the identity (output projections zero), so the model starts "
                        "where the weights were")
    p.add_argument("--seq-len", type=positive_int, default=256, help="training window L (tokens)")
    p.add_argument("--hidden", type=positive_int, default=256, help="hidden size")
    p.add_argument("--layers", type=positive_int, default=4, help="decoder layers")
    p.add_argument("--heads", type=positive_int, default=4, help="attention heads")
    p.add_argument("--kv-heads", type=positive_int, default=2, help="key/value heads (GQA)")
    p.add_argument("--head-dim", type=positive_int, default=64, help="dimension per head")
    p.add_argument("--intermediate", type=positive_int, default=704, help="SwiGLU intermediate size")
    p.add_argument("--untied", action="store_true", help="separate lm_head (default: tied to embeddings)")
    p.add_argument("--batch", type=positive_int, default=8, help="sequences per step")
    p.add_argument("--steps", type=positive_int, default=4000, help="total steps (the cosine schedule's length)")
    p.add_argument("--minutes", type=positive_real, default=None, help="stop (resumably) after this much training time")
    p.add_argument("--until", type=positive_int, default=None, help="stop (resumably) at this step")
    p.add_argument("--lr", type=positive_real, default=2e-3, help="peak learning rate")
    p.add_argument("--warmup", type=nonneg_int, default=100, help="linear warm-up steps")
    p.add_argument("--weight-decay", type=nonneg_real, default=0.1, help="AdamW weight decay")
    p.add_argument("--weighting", choices=("tokens", "elbo"), default="tokens",
                   help="loss weighting: tokens (mean over masked tokens) or elbo (1 / t per block)")
    p.add_argument("--seed", type=seed_int, default=0, help="data and init seed")
    add_threads(p)
    p.add_argument("--bf16", action="store_true",
                   help="bf16 autocast (faster only on CPUs with native bf16; 10x slower on this one)")
    p.add_argument("--eval-every", type=positive_int, default=250, help="held-out loss every this many steps")
    p.add_argument("--ckpt-every", type=positive_int, default=250, help="checkpoint every this many steps")
    p.add_argument("--keep-snapshots", type=positive_real, default=None, metavar="MIN",
                   help="keep the weights every MIN minutes of training in runs/NAME/snapshots/")
    p.add_argument("--corpus-limit", type=positive_int, default=None,
                   help="use only the first N train documents (tests)")
    p.add_argument("--no-english", dest="english", action="store_false", help="leave out the pydoc topics")
    p.add_argument("--export", default=None,
                   help="after training, write the target into this directory (the bundled targets "
                        "directory only with --update-shipped)")
    p.add_argument("--update-shipped", action="store_true",
                   help="allow --export to replace a target shipped in spotref/load/targets/")
    p.add_argument("--no-progress", dest="progress", action="store_false", help="no progress bar")


def corpus_arg(text: str) -> str:
    """``--corpus``: a registered corpus name or an existing file."""
    if text in ("stdlib", "gsm") or Path(text).is_file():
        return text
    raise argparse.ArgumentTypeError(f"must be stdlib, gsm or a text file of documents, got {text!r}")


def make_corpus(args):
    """The run's corpus (``--corpus`` and its options); ``ValueError`` naming an option that
    does not apply to it."""
    given = {k: getattr(args, k, None) for k in GSM_DEFAULTS if getattr(args, k, None) is not None}
    if args.corpus != "gsm" and given:
        raise ValueError(f"--{next(iter(given)).replace('_', '-')} applies to --corpus gsm only")
    if args.corpus != "stdlib" and not args.english:
        raise ValueError("--no-english applies to --corpus stdlib only")
    if args.corpus == "stdlib":
        return StdlibCorpus(english=args.english)
    if args.corpus == "gsm":
        o = {**GSM_DEFAULTS, **given}
        return GsmCorpus(gsm, o["corpus_seed"], o["corpus_size"], o["corpus_level"])
    return FileCorpus(args.corpus)


def data_options(record: dict, args: dict) -> dict:
    """What a resumed run must keep, by what sets it: the corpus (name, seed, options, a file's
    SHA-256), the end-of-text padding and the digit splitting. A record without a name (runs
    from before the field) is stdlib's, with the run's --no-english."""
    file_digest = record.get("sha256") if record.get("name") == "file" else None
    return {"--corpus": record.get("name", "stdlib"), "--corpus-seed": record.get("seed"),
            "the corpus options": record.get("options", {"english": args.get("english", True)}),
            "--corpus (the file's SHA-256)": file_digest, "--pad-eot": args.get("pad_eot", False),
            "--split-digits": args.get("split_digits", False),
            "--rows-per-doc": args.get("rows_per_doc", False), "--answer-only": args.get("answer_only", False),
            "--eot-weight": args.get("eot_weight", 1.0), "--fresh-problems": args.get("fresh_problems", False),
            "--curriculum": args.get("curriculum"), "--curriculum-lower": args.get("curriculum_lower", 0.4),
            "--adaptive": args.get("adaptive"), "--drill-share": args.get("drill_share", 0.0),
            "--drill-ops": args.get("drill_ops") or gsm.DRILL_OPS, "--drill-from": args.get("drill_from") or "range",
            "--mask-results": args.get("mask_results", 0.0), "--result-weight": args.get("result_weight", 1.0),
            "--suffix-results": args.get("suffix_results", 0.0),
            "the --adapt-* options": [args.get(k) for k in ("adapt_every", "adapt_n", "adapt_answers", "adapt_equations")]
            if args.get("adaptive") else None}


def check_resume(state: dict, corpus_record: dict, args) -> None:
    """``ValueError`` naming the option when a resumed run would change its data."""
    old, new = data_options(state["corpus"], state["args"]), data_options(corpus_record, vars(args))
    for name in old:
        if old[name] != new[name]:
            raise ValueError(f"{name}: the run {args.name} was trained with {old[name]!r}, not {new[name]!r}; "
                             f"resume with the same data options or train under a new --name")


def make_tokenizer(spec: str, train_texts, run_dir: Path, split_digits: bool = False):
    """The run's tokenizer; a trained BPE is saved in the run so that a resume reuses it."""
    saved = run_dir / "tokenizer.json"
    is_bpe = spec.startswith("bpe") and spec[3:].isdigit()
    if split_digits and not is_bpe:
        raise ValueError(f"--split-digits trains the BPE: it needs --tokenizer bpeN, got {spec!r} "
                         f"(bytes already write digits singly; a tokenizer file keeps its own rules)")
    if saved.exists():
        return tokenizer_from_json(saved.read_text())
    if spec == "bytes":
        tok = ByteTokenizer()
    elif is_bpe:
        tok = BPETokenizer.train(train_texts, int(spec[3:]), split_digits)
    elif Path(spec).is_file():
        tok = tokenizer_from_json(Path(spec).read_text())
    else:
        raise ValueError(f"--tokenizer must be 'bytes', 'bpeN' or a tokenizer JSON file, got {spec!r}")
    atomic_write_text(saved, tok.to_json())
    return tok


def stream_align(args) -> int:
    """Where windows may start: anywhere (1), or with ``--pad-eot`` at multiples of every
    block size trained on (their least common multiple)."""
    return math.lcm(*block_sizes(args), args.block_size) if getattr(args, "pad_eot", False) else 1


def block_sizes(args) -> list[int]:
    """The block sizes trained on, in turn (``--mix-blocks``, else ``--block-size`` alone)."""
    mix = args.mix_blocks
    sizes = ([int(b) for b in mix.split(",")] if isinstance(mix, str) else list(mix)) if mix else [args.block_size]
    for B in sizes + [args.block_size]:
        if B < 1 or args.seq_len % B:
            raise ValueError(f"--seq-len {args.seq_len} must be a multiple of every block size, got {B}")
    return sizes


def make_config(args, tok) -> SDARConfig:
    block_sizes(args)
    return SDARConfig(vocab_size=tok.vocab_size, hidden_size=args.hidden,
                      intermediate_size=args.intermediate, num_hidden_layers=args.layers,
                      num_attention_heads=args.heads, num_key_value_heads=args.kv_heads,
                      head_dim=args.head_dim, mask_token_id=tok.mask_id, block_size=args.block_size,
                      tie_word_embeddings=not args.untied, eos_token_id=tok.eos_id,
                      max_position_embeddings=4096,
                      **({} if getattr(args, "rope_theta", None) is None else {"rope_theta": args.rope_theta}))


def lr_at(step: int, args) -> float:
    """Linear warm-up, then cosine decay to 10% of ``--lr`` at ``--steps``."""
    if step < args.warmup:
        return args.lr * (step + 1) / args.warmup
    frac = min(1.0, (step - args.warmup) / max(1, args.steps - args.warmup))
    return args.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * frac)))


def save_checkpoint(path: Path, state: dict) -> None:
    atomic_save(state, path)                             # a kill never leaves half a file


# --- the loop -------------------------------------------------------------------------------

def train(args) -> dict:
    """Train (or resume) the run ``args.name``; returns its final state dict."""
    torch.set_num_threads(args.threads)
    run_dir = Path(args.runs, args.name)
    corpus = make_corpus(args)
    check_recipe(args)
    record = corpus.record()
    ckpt_path = run_dir / "ckpt.pt"
    ck = torch.load(ckpt_path, weights_only=False) if ckpt_path.exists() else None
    if ck is not None:
        check_resume(ck["state"], record, args)
    run_dir.mkdir(parents=True, exist_ok=True)
    train_docs = corpus.documents("train")[: args.corpus_limit]
    tok = make_tokenizer(args.tokenizer, train_docs, run_dir, args.split_digits)
    stream, held = streams(corpus, train_docs, tok, args)
    cfg = make_config(args, tok)
    torch.manual_seed(args.seed)
    model = SDARModel(cfg)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, betas=(0.9, 0.95),
                            weight_decay=args.weight_decay)
    state = {"step": 0, "train_s": 0.0, "history": []}
    if args.init and ck is None:
        state["init"] = start_from(model, args.init, tok, getattr(args, "init_deepen", False))
        print(f"initialised from {args.init}", file=sys.stderr)
    if ck is not None:
        model.load_state_dict(ck["model"])
        opt.load_state_dict(ck["opt"])
        state = ck["state"]
        print(f"resumed {ckpt_path} at step {state['step']}", file=sys.stderr)
    command = shlex.join(sys.argv)                                      # as invoked (module or CLI)
    state.update(corpus=record, corpus_limit=args.corpus_limit, config=cfg.to_dict(),
                 args=vars(args), train_tokens=len(stream), heldout_tokens=len(held),
                 commands=state.get("commands", []) + [{"from_step": state["step"], "command": command}])
    if args.rows_per_doc:
        rows = None if args.fresh_problems else encode_rows(train_docs, tok, args)
        held_rows = encode_rows(corpus.documents("heldout"), tok, args)
        if not any(start < len(ids) for ids, start, _ in held_rows.rows):
            raise ValueError(f"--seq-len {args.seq_len} cuts the held-out rows before any position that is "
                             f"masked (--answer-only: before the answer); give a longer --seq-len")
        _loop(model, opt, (rows, tok), held_rows, tok.mask_id, args, state, ckpt_path)
    else:
        _loop(model, opt, stream, held, tok.mask_id, args, state, ckpt_path)
    if args.export:
        export(model, tok, state, Path(args.export), args.name)
    return state


def streams(corpus, train_docs, tok, args) -> tuple[np.ndarray, np.ndarray]:
    """The training and held-out token streams; ``ValueError`` if either is shorter than a window."""
    block = stream_align(args)
    stream = token_stream(train_docs, tok, block)
    held = token_stream(corpus.documents("heldout"), tok, block)
    for what, s in (("training", stream), ("held-out", held)):
        if len(s) <= args.seq_len:
            raise ValueError(f"--corpus {args.corpus}: the {what} documents make {len(s)} tokens, "
                             f"fewer than a window (--seq-len {args.seq_len}) needs")
    return stream, held


def _loop(model, opt, stream, held, mask_id, args, state, ckpt_path):
    """``stream``: the token stream, or with ``--rows-per-doc`` (train rows or None, tokenizer)."""
    sizes, align = block_sizes(args), stream_align(args)
    masks = {B: bd3_mask(args.seq_len, B) for B in sizes}                  # (2L, 2L) each
    row_masks = {}                                                          # --rows-per-doc: by (L, B)
    bar = _progress(args, state["step"])
    t0, start_s = time.perf_counter(), state["train_s"]
    while state["step"] < args.steps:
        step = state["step"]
        if (args.minutes is not None and state["train_s"] >= args.minutes * 60) \
                or (args.until is not None and step >= args.until):
            break
        for g in opt.param_groups:
            g["lr"] = lr_at(step, args)
        B = sizes[step % len(sizes)]
        if args.rows_per_doc:
            rows, tok = stream
            rng = np.random.default_rng([args.seed, step, B])
            batch = step_rows(rows, tok, args, step, rng, state.get("level"))
            positions = row_results(batch, tok)
            forced = forced_results(batch, tok, getattr(args, "mask_results", 0.0),
                                    np.random.default_rng([args.seed, 17, step]), positions)
            weight = getattr(args, "result_weight", 1.0)
            cuts = suffix_cuts(batch, tok, getattr(args, "suffix_results", 0.0), B,
                               np.random.default_rng([args.seed, 23, step]), positions)
            x_t, x, masked, w = rows_batch(batch, B, mask_id, tok.eos_id, rng, args.eot_weight, forced,
                                           boosted_results(batch, tok, weight), weight, cuts)
            L = x.shape[1]
            if (L, B) not in row_masks:
                row_masks[L, B] = bd3_mask(L, B)
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.bf16):
                loss = weighted_loss(bd3_logits(model, x_t, x, row_masks[L, B]), x, w)
        else:
            x_t, x, masked = batch_at(stream, step, args.seed, args.batch, args.seq_len, B, mask_id, align)
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.bf16):
                loss = bd3_loss(bd3_logits(model, x_t, x, masks[B]), x, masked, B, args.weighting)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        state["step"], state["train_s"] = step + 1, start_s + time.perf_counter() - t0
        bar.update(1)
        bar.set_postfix(loss=f"{loss.item():.3f}", refresh=False)
        last = state["step"] == args.steps
        if getattr(args, "adaptive", None) and state["step"] % args.adapt_every == 0:
            adapt(model, stream[1], args, state)
            bar.write(f"step {state['step']}  adaptive curriculum: {json.dumps(state['adaptive_evals'][-1])}")
        if state["step"] % args.eval_every == 0 or last:
            _evaluate(model, held, args, state, mask_id, bar)
        if args.keep_snapshots and snapshot_due(state, args.keep_snapshots):
            keep_snapshot(model, state, ckpt_path.parent)
        if state["step"] % args.ckpt_every == 0:
            save_checkpoint(ckpt_path, {"model": model.state_dict(), "opt": opt.state_dict(), "state": state})
    if state["step"] % args.ckpt_every:                      # the end, unless just saved above
        save_checkpoint(ckpt_path, {"model": model.state_dict(), "opt": opt.state_dict(), "state": state})
    bar.close()


def snapshot_due(state: dict, minutes: float) -> bool:
    """Whether training time has crossed a multiple of ``minutes`` since the last snapshot."""
    period = minutes * 60
    return state["train_s"] // period > state.get("snapshot_s", 0.0) // period


def keep_snapshot(model, state: dict, run_dir: Path) -> Path:
    """``snapshots/step-NNNNNNN.pt`` in the run: the weights and the state (no optimizer),
    written atomically; ``export_run(..., checkpoint=)`` exports it."""
    path = run_dir / "snapshots" / f"step-{state['step']:07d}.pt"
    state["snapshot_s"] = state["train_s"]
    state["snapshots"] = state.get("snapshots", []) + [
        {"step": state["step"], "train_s": round(state["train_s"], 1), "file": f"snapshots/{path.name}"}]
    atomic_save({"model": model.state_dict(), "state": state}, path)
    return path


def _evaluate(model, held, args, state, mask_id, bar):
    model.eval()
    loss = heldout_loss(model, held, args, mask_id)
    model.train()
    state["history"].append({"step": state["step"], "train_s": round(state["train_s"], 1),
                             "heldout_loss": round(loss, 4)})
    bar.write(f"step {state['step']}  {state['train_s'] / 60:.1f} min  held-out masked CE {loss:.4f}")


def _progress(args, initial: int):
    try:
        from tqdm import tqdm
    except ImportError:
        raise ImportError("training needs the 'tqdm' package: pip install 'spotref[cli]'") from None
    return tqdm(total=args.steps, initial=initial, disable=not args.progress, mininterval=20,
                desc=args.name, file=sys.stderr)


# --- export ---------------------------------------------------------------------------------

def start_from(model: SDARModel, spec: str, tok, deepen: bool = False) -> dict:
    """``--init``: load the weights ``spec`` names into ``model``; returns their lineage.

    ``spec``: a run checkpoint (``runs/NAME/ckpt.pt``), or a target, bundled by name or the path
    of its ``NAME.json`` (its float16 weights, as the target loads them). The tokenizer the weights
    were trained with (the run's ``tokenizer.json`` beside the checkpoint, or the target's) must be
    this run's, and the weights must fit this run's model: else ``ValueError`` naming the option.
    ``deepen`` (``--init-deepen``): weights with fewer layers fill the model's first layers
    (``deepened``)."""
    if spec.endswith(".pt"):
        init = torch.load(spec, weights_only=False)
        weights, record = init["model"], lineage(spec, init["state"])
        run = Path(spec).parent.parent if Path(spec).parent.name == "snapshots" else Path(spec).parent
        saved = run / "tokenizer.json"                   # a snapshot's tokenizer is its run's
        theirs = saved.read_text() if saved.exists() else None
    else:
        target = load_target(spec)
        weights, record = target.model.state_dict(), target_lineage(spec, target.meta)
        theirs = target.tokenizer.to_json()
    if theirs is not None and tokenizer_from_json(theirs).to_json() != tok.to_json():
        raise ValueError(f"--init {spec} was trained with another tokenizer than this run's "
                         f"(--tokenizer): pass the tokenizer it was trained with")
    if deepen:
        weights, record["deepened_from_layers"] = deepened(model, weights, spec), layer_count(weights)
    try:
        model.load_state_dict(weights)
    except RuntimeError as e:
        raise ValueError(f"--init {spec}: its weights do not fit this run's model (--hidden, --layers, "
                         f"--heads, --kv-heads, --head-dim, --intermediate): {str(e).splitlines()[-1].strip()}") from None
    return record


def layer_count(weights: dict) -> int:
    """Decoder layers in a state dict (``model.layers.i.*``)."""
    return len({k.split(".")[2] for k in weights if k.startswith("model.layers.")})


ZEROED = ("self_attn.o_proj.weight", "mlp.down_proj.weight")      # what writes a layer's output


def deepened(model: SDARModel, weights: dict, spec: str) -> dict:
    """``weights`` with ``model``'s extra layers on top, each the identity: its own fresh weights
    with the output projections (``ZEROED``) zero, so both residual branches add nothing and the
    deeper model computes what ``weights`` did."""
    have, want = layer_count(weights), model.config.num_hidden_layers
    if have >= want:
        raise ValueError(f"--init-deepen: --init {spec} has {have} layers, --layers asks {want}: "
                         f"deepening needs more layers than the weights have")
    out = dict(weights)
    for k, v in model.state_dict().items():
        if k.startswith("model.layers.") and int(k.split(".")[2]) >= have:
            out[k] = torch.zeros_like(v) if k.endswith(ZEROED) else v.clone()
    return out


def provenance(record: dict) -> dict:
    """What weights came from, as a lineage, a run's state or a target's training record carries
    it: ``init`` (what training started from) and ``average`` (what was averaged), where present."""
    return {k: record[k] for k in ("init", "average") if record.get(k)}


def run_tokenizer(run_dir) -> object:
    """The tokenizer a run trained with (its ``tokenizer.json``)."""
    return tokenizer_from_json((Path(run_dir) / "tokenizer.json").read_text())


def target_lineage(spec: str, meta: dict) -> dict:
    """The lineage of a target's weights (its metadata's training record, and their SHA-256)."""
    t = meta.get("training", {})
    return {"checkpoint": str(spec), "sha256": meta["weights"]["sha256"], "step": t.get("steps"),
            "train_minutes": t.get("train_minutes"), "commands": t.get("commands", []),
            **provenance(t)}


def lineage(path, init_state: dict) -> dict:
    """What ``--init`` started from: the checkpoint, its step and training time, the commands
    that trained it and, in turn, what it started from (so an export names its whole history)."""
    return {"checkpoint": str(path), "step": init_state["step"],
            "train_minutes": round(init_state.get("train_s", 0.0) / 60, 1),
            "commands": init_state.get("commands", []),
            **provenance(init_state)}


def export(model: SDARModel, tok, state: dict, out_dir: Path, name: str) -> Path:
    """Write ``NAME.safetensors`` (float16), ``NAME.tokenizer.json`` and ``NAME.json`` (metadata),
    each atomically; the metadata (which load_target reads first) last."""
    try:
        from safetensors.torch import save_file
    except ImportError:
        raise ImportError("exporting needs the 'safetensors' package: pip install 'spotref[cli]'") from None
    out_dir.mkdir(parents=True, exist_ok=True)
    sd = {k: v.detach().to(torch.float16).contiguous() for k, v in model.state_dict().items()
          if not (model.config.tie_word_embeddings and k == "lm_head.weight")}
    weights = out_dir / f"{name}.safetensors"
    with atomic_path(weights) as tmp:
        save_file(sd, str(tmp))
    atomic_write_text(out_dir / f"{name}.tokenizer.json", tok.to_json())
    hist = state["history"]
    meta = {
        "name": name,
        "config": model.config.to_dict(),
        "parameters": sum(p.numel() for p in model.parameters()),
        "weights": {"file": weights.name, "dtype": "float16", "bytes": weights.stat().st_size,
                    "sha256": hashlib.sha256(weights.read_bytes()).hexdigest()},
        "tokenizer": {"kind": tok.kind, "file": f"{name}.tokenizer.json", "vocab_size": tok.vocab_size,
                      "eos_id": tok.eos_id, "mask_id": tok.mask_id, "split_digits": tok.split_digits},
        "corpus": state["corpus"],
        "training": {"commands": state.get("commands", []), "steps": state["step"],
                     "train_minutes": round(state["train_s"] / 60, 1),
                     "train_tokens": state["train_tokens"], "torch": torch.__version__,
                     "objective": "BD3-LM: concat(x_t, x), k ~ U{1..B} masks per block, masked CE",
                     "pad_eot": bool(state["args"].get("pad_eot", False)),
                     "recipe": recipe(state["args"]),
                     **({"adaptive_evals": state["adaptive_evals"]} if state.get("adaptive_evals") else {}),
                     **provenance(state),
                     "args": {k: v for k, v in state["args"].items() if k not in ("export", "progress")}},
        "heldout_loss": hist[-1]["heldout_loss"] if hist else None,
        "heldout_loss_note": "token-mean masked CE in nats/token, k ~ U{1..B} per block, fixed windows and masks",
        "history": hist,
    }
    atomic_write_text(out_dir / f"{name}.json", json.dumps(meta, indent=1) + "\n")
    return weights


def average_run(run_dir: Path, others: list[str], out_dir: Path) -> Path:
    """Weight averaging: the mean of a run's last checkpoint and ``others`` (run checkpoints or
    targets, as ``--init`` takes them: the run's tokenizer and model shape, else ``ValueError``),
    written as ``out_dir/ckpt.pt`` beside the run's tokenizer. It keeps the run's state (its data
    and lineage) and records each input's lineage under ``average``, which an export and a later
    ``--init`` carry; ``export_run`` and ``--init`` take it as any run. Not the run's own
    directory nor one holding another run's checkpoint, and without the run's optimizer state (a
    resume would start it afresh)."""
    run_dir, out_dir = Path(run_dir), Path(out_dir)
    if out_dir.resolve() == run_dir.resolve():
        raise ValueError(f"average_run: out_dir {out_dir} is the run's own directory; write the average elsewhere")
    if (out_dir / "ckpt.pt").exists():
        raise ValueError(f"average_run: out_dir {out_dir} already holds a run checkpoint (ckpt.pt); "
                         f"write the average to a new directory")
    check_writable(out_dir / "ckpt.pt")
    ck = torch.load(run_dir / "ckpt.pt", weights_only=False)
    tok = run_tokenizer(run_dir)
    model = SDARModel(SDARConfig.from_dict(ck["state"]["config"]))
    total = {k: v.float().clone() for k, v in ck["model"].items()}      # the running sum
    records = [lineage(run_dir / "ckpt.pt", ck["state"])]
    for spec in others:
        records.append(start_from(model, str(spec), tok))
        for k, v in model.state_dict().items():
            total[k] += v.float()
    ck["model"] = {k: (total[k] / len(records)).to(v.dtype) for k, v in ck["model"].items()}
    ck["state"] = {**ck["state"], "average": records}
    ck.pop("opt", None)                                                  # the run's moments, not the mean's
    out_dir.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out_dir / "tokenizer.json", tok.to_json())
    atomic_save(ck, out_dir / "ckpt.pt")
    return out_dir / "ckpt.pt"


def export_run(run_dir: Path, out_dir: Path, name: str, block_size: int | None = None,
               checkpoint: Path | None = None, update_shipped: bool = False) -> Path:
    """Export a run's last checkpoint (or ``checkpoint``, e.g. one of its snapshots) without
    training further, at ``block_size`` (default: the run's ``--block-size``; a ``--mix-blocks``
    run may be exported at any of its sizes). The held-out loss is measured afresh at the
    exported block size, on the run's own corpus. A bundled target is replaced only with
    ``update_shipped=True``; the outputs are checked before the work."""
    check_export(argparse.Namespace(name=name, export=str(out_dir)))
    ck = torch.load(checkpoint or Path(run_dir) / "ckpt.pt", weights_only=False)
    state, args = ck["state"], run_args(ck["state"]["args"])
    if args.init and "init" not in state and args.init.endswith(".pt") and Path(args.init).is_file():  # a run from before the record
        state = {**state, "init": lineage(args.init, torch.load(args.init, weights_only=False)["state"])}
    args.block_size = block_size or args.block_size
    if args.block_size not in block_sizes(args):
        raise ValueError(f"the run was trained on block sizes {block_sizes(args)}, not {args.block_size}")
    cfg = SDARConfig.from_dict({**state["config"], "block_size": args.block_size})
    model = SDARModel(cfg)
    model.load_state_dict(ck["model"])
    model.eval()
    tok = run_tokenizer(run_dir)
    corpus = open_corpus(state["corpus"], CORPORA) if "name" in state["corpus"] else make_corpus(args)
    held = encode_rows(corpus.documents("heldout"), tok, args) if getattr(args, "rows_per_doc", False) \
        else token_stream(corpus.documents("heldout"), tok, stream_align(args))
    loss = round(heldout_loss(model, held, args, tok.mask_id), 4)
    state = {**state, "history": state["history"] + [{"step": state["step"], "train_s": round(state["train_s"], 1),
                                                       "heldout_loss": loss, "block_size": args.block_size}]}
    with shipped_writes(update_shipped):
        return export(model, tok, state, Path(out_dir), name)


def run_args(saved: dict) -> argparse.Namespace:
    """A run's saved arguments, with the defaults of options added since it was trained."""
    p = argparse.ArgumentParser()
    add_arguments(p)
    return argparse.Namespace(**{**vars(p.parse_args(["--name", saved.get("name", "run")])), **saved})


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m spotref.tools.train", description=plain(__doc__))
    add_arguments(p)
    args = p.parse_args(argv)
    return guarded(p.prog, lambda: run_allowed(run, args))


def check_export(args) -> None:
    """--name is a plain name; --export's three files are writable (a shipped target only with
    --update-shipped: ``spotref.load.files.check_writable``), checked before any training."""
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", args.name or ""):
        raise ValueError(f"--name {args.name!r} must be a plain name (letters, digits, '.', '_', '-'; "
                         f"no path): it names runs/NAME and the exported files")
    if args.export:
        for suffix in (".safetensors", ".json", ".tokenizer.json"):
            check_writable(Path(args.export) / f"{args.name}{suffix}")


def run(args) -> int:
    """Entry point of ``spotref train-target``."""
    check_export(args)
    train(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
