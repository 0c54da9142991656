"""What training reads: token streams and windows, one-document rows and their masks, the corpus,
and the held-out loss on fixed windows or rows.

Two ways to cut documents into training sequences: windows of one token stream (``token_stream``,
``batch_at``; ``--pad-eot`` starts every document at a block boundary), or one document per row
at position 0 (``--rows-per-doc``: ``encode_row``, ``rows_batch``, which also masks the gsm
recipe's written results: ``forced_results``, ``suffix_cuts``, ``boosted_results``). Every batch
is a pure function of (seed, step), so a resumed run draws what it would have drawn.
"""

from __future__ import annotations

import functools

import numpy as np
import torch

from workbench.data import gsm
from workbench.data.corpora import FileCorpus, GsmCorpus, StdlibCorpus
from workbench.train.train_objective import bd3_logits, bd3_loss, bd3_mask, noise_blocks, weighted_loss
from workbench.train.train_options import GSM_DEFAULTS, TrainOptions, row_align, stream_align

ANSWER_HEADER = gsm.IM_START + "assistant\n"  # --answer-only: masked from here on


# --- the corpus and one token stream ----------------------------------------------------------


def make_corpus(options: TrainOptions):
    """The run's corpus (``--corpus`` and its options); ``ValueError`` naming an option that
    does not apply to it."""
    given = {k: getattr(options, k) for k in GSM_DEFAULTS if getattr(options, k) is not None}
    if options.corpus != "gsm" and given:
        raise ValueError(f"--{next(iter(given)).replace('_', '-')} applies to --corpus gsm only")
    if options.corpus != "stdlib" and not options.english:
        raise ValueError("--no-english applies to --corpus stdlib only")
    if options.corpus == "stdlib":
        return StdlibCorpus(english=options.english)
    if options.corpus == "gsm":
        o = {**GSM_DEFAULTS, **given}
        return GsmCorpus(gsm, o["corpus_seed"], o["corpus_size"], o["corpus_level"])
    return FileCorpus(options.corpus)


def token_stream(texts, tokenizer, block: int = 1) -> np.ndarray:
    """Documents (str) -> one uint16 stream, each document followed by EOS. ``block`` > 1
    (``--pad-eot``): the EOS run goes on to the end of the document's last block, so every
    document starts at a multiple of ``block``, as SDAR pads its chat data."""
    texts = list(texts)
    ids = tokenizer.encode_batch(texts) if hasattr(tokenizer, "encode_batch") else [tokenizer.encode(t) for t in texts]
    out = []
    for seq in ids:
        out += seq + [tokenizer.eos_id] * (1 + (-len(seq) - 1) % block)
    return np.asarray(out, dtype=np.uint16)


def batch_at(stream: np.ndarray, step: int, seed: int, N: int, L: int, B: int, mask_id: int, align: int = 1):
    """The training batch of ``step``: a pure function of (seed, step), so resuming is exact.
    ``align`` > 1: windows start at multiples of ``align`` (the blocks of a padded stream)."""
    rng = np.random.default_rng([seed, step, B])
    if align == 1:
        starts = rng.integers(0, len(stream) - L, size=N)
    else:
        starts = rng.integers(0, (len(stream) - L) // align + 1, size=N) * align
    x = np.stack([stream[s : s + L] for s in starts]).astype(np.int64)  # (N, L)
    x_t, masked = noise_blocks(x, B, mask_id, rng)
    return torch.from_numpy(x_t), torch.from_numpy(x), torch.from_numpy(masked)


def streams(corpus, train_docs, tok, options: TrainOptions) -> tuple[np.ndarray, np.ndarray]:
    """The training and held-out token streams; ``ValueError`` if either is shorter than a window."""
    block = stream_align(options)
    stream = token_stream(train_docs, tok, block)
    held = token_stream(corpus.documents("heldout"), tok, block)
    for what, s in (("training", stream), ("held-out", held)):
        if len(s) <= options.seq_len:
            raise ValueError(
                f"--corpus {options.corpus}: the {what} documents make {len(s)} tokens, "
                f"fewer than a window (--seq-len {options.seq_len}) needs"
            )
    return stream, held


# --- one document per row (--rows-per-doc, --answer-only, --mask-results, --suffix-results) -------


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
        prompt, answer = tok.encode(doc[:cut]), tok.encode(doc[cut:])  # the prompt as decoding sees it
    else:
        prompt, answer = [], tok.encode(doc)
    ids = prompt + answer + [tok.eos_id]
    end = len(ids)
    ids = (ids + [tok.eos_id] * (-len(ids) % align))[:max_len]
    return ids, min(len(prompt), len(ids)), min(end, len(ids))


def encode_rows(docs, tok, options: TrainOptions) -> Rows:
    """Documents as ``Rows``, each ``encode_row``'d at the run's alignment and ``--seq-len``."""
    return Rows(
        [encode_row(d, tok, row_align(options), options.answer_only, options.seq_len) for d in docs], tok.eos_id
    )


def rows_batch(
    rows: list,
    B: int,
    mask_id: int,
    eos_id: int,
    rng: np.random.Generator,
    eot_weight: float = 1.0,
    forced=None,
    boost=None,
    boost_weight: float = 1.0,
    cuts=None,
):
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
        x[i, : len(ids)] = ids
        cand[i, start : len(ids)] = True
        w[i, : len(ids)] = 1.0
        w[i, end : len(ids)] = eot_weight
    for i, pos in enumerate(boost or []):
        if pos is not None:
            w[i, pos] *= boost_weight
    c = cand.reshape(N, L // B, B)
    n = c.sum(-1, keepdims=True)  # candidates per block
    k = np.floor(rng.random(n.shape) * n).astype(np.int64) + 1  # U{1..n}
    rank = np.where(c, rng.random(c.shape), 2.0).argsort(-1).argsort(-1)  # candidates first, random order
    masked = (c & (rank < k)).reshape(N, L)
    for i, pos in enumerate(forced or []):
        if pos is not None:
            masked[i, pos] |= cand[i, pos]
    for i, pos in enumerate(cuts or []):
        for c in [] if pos is None else pos:
            b0 = c - c % B
            masked[i, b0 : b0 + B] = cand[i, b0 : b0 + B] & (np.arange(b0, b0 + B) >= c)
    return (
        torch.from_numpy(np.where(masked, mask_id, x)),
        torch.from_numpy(x),
        torch.from_numpy(masked),
        torch.from_numpy(w * masked),
    )


def result_positions(ids, tok, follow: int = 0) -> np.ndarray:
    """The positions of every written result in ``ids``: the digits after ``= `` (an equation's
    result) and after ``#### `` (the final answer); with ``follow``, also the ``follow`` tokens
    after each result (whose places fix how many digits it has)."""
    text = [tok.decode([i]) for i in ids]
    out, after = [], 0  # after: 2 behind a marker, 1 behind its space
    for j, t in enumerate(text):
        if after and t.isdigit():
            out.append(j)
            continue
        if out and out[-1] == j - 1 and text[j - 1].isdigit() and after:  # a result just ended
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


def training_rows(corpus, train_docs, tok, options: TrainOptions) -> tuple[Rows | None, Rows]:
    """``--rows-per-doc``: the training rows (None with ``--fresh-problems``, which draws them
    afresh) and the held-out rows; ``ValueError`` if ``--seq-len`` cuts every held-out row before
    the first position that may be masked."""
    rows = None if options.fresh_problems else encode_rows(train_docs, tok, options)
    held = encode_rows(corpus.documents("heldout"), tok, options)
    if not any(start < len(ids) for ids, start, _ in held.rows):
        raise ValueError(
            f"--seq-len {options.seq_len} cuts the held-out rows before any position that is "
            f"masked (--answer-only: before the answer); give a longer --seq-len"
        )
    return rows, held


# --- the held-out loss ---------------------------------------------------------------------------


@torch.no_grad()
def heldout_loss(model, held, options: TrainOptions, mask_id, batches: int = 4, N: int = 8) -> float:
    """Token-mean masked CE (nats/token) on fixed held-out windows and masks (seed 12345):
    ``batches`` x ``N`` windows of ``--seq-len`` tokens, whatever ``--batch``. With
    ``--rows-per-doc`` (``held`` a ``Rows``): the first ``batches`` x ``N`` held-out documents as
    rows, masked as in training (``--answer-only``), the loss weighted as in training."""
    if isinstance(held, Rows):
        return heldout_rows_loss(model, held, options, mask_id, batches, N)
    L, B = options.seq_len, options.block_size
    mask, total, count = bd3_mask(L, B), 0.0, 0
    for i in range(batches):
        x_t, x, masked = batch_at(held, i, 12345, N, L, B, mask_id, stream_align(options))
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=options.bf16):
            logits = bd3_logits(model, x_t, x, mask)
        total += float(bd3_loss(logits, x, masked, B)) * int(masked.sum())
        count += int(masked.sum())
    return total / count


@torch.no_grad()
def heldout_rows_loss(model, held: Rows, options: TrainOptions, mask_id, batches: int = 4, N: int = 8) -> float:
    """``heldout_loss`` with ``--rows-per-doc``: weighted masked CE over fixed rows and masks."""
    total, count = 0.0, 0.0
    for i in range(batches):
        rows = [held.rows[(i * N + j) % len(held)] for j in range(N)]
        x_t, x, masked, w = rows_batch(
            rows, options.block_size, mask_id, held.eos_id, np.random.default_rng([12345, i]), options.eot_weight
        )
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=options.bf16):
            logits = bd3_logits(model, x_t, x, bd3_mask(x.shape[1], options.block_size))
        total += float(weighted_loss(logits, x, w)) * float(w.sum())
        count += float(w.sum())
    if not count:
        raise ValueError(
            f"--seq-len {options.seq_len} cuts the held-out rows before any position that is masked "
            f"(--answer-only: before the answer); give a longer --seq-len"
        )
    return total / count
