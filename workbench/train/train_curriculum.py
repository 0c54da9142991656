"""Fresh gsm problems, drills and the curriculum of the gsm recipe: what each step's rows hold.

``--fresh-problems`` draws each step's problems afresh (``fresh_problem``: a pure function of the
seed, the step and the row, never a held-out problem), a share of them arithmetic drills
(``--drill-share``); their level is ``--corpus-level``, the level of a fixed schedule by step
(``--curriculum``) or the level an adaptive curriculum has reached (``--adaptive``: ``adapt``
decodes held-out problems every ``--adapt-every`` steps and moves on when they are right often
enough). Once the schedule has moved on, a share ``--curriculum-lower`` of the rows is drawn
from the lower levels (``row_level``).
"""

from __future__ import annotations

import numpy as np
import torch

from spotref.api import generate
from workbench.data import gsm
from workbench.train.train_data import boosted_results, encode_row, forced_results, row_results, rows_batch, suffix_cuts
from workbench.train.train_options import (
    DRILLS,
    TrainOptions,
    adaptive_levels,
    corpus_level,
    corpus_seed,
    drill_from,
    drill_ops,
    parse_curriculum,
    row_align,
)


def row_level(options: TrainOptions, step: int, j: int, level: int | None = None) -> int:
    """The gsm level of row ``j`` at ``step``: ``--corpus-level``, or the curriculum's level
    at ``step`` (``--adaptive``: ``level``), a share ``--curriculum-lower`` of rows drawn
    uniformly from its lower levels."""
    if options.adaptive:
        order = adaptive_levels(options)
        top = order[0] if level is None else level
        lower = sorted({lvl for lvl in order if lvl < top})
    elif options.curriculum:
        sched = parse_curriculum(options.curriculum)
        top = [lvl for start, lvl in sched if start <= step][-1]
        lower = sorted({lvl for _, lvl in sched if lvl < top})
    else:
        return corpus_level(options)
    rng = np.random.default_rng([corpus_seed(options), 7, step, j])
    if lower and rng.random() < options.curriculum_lower:
        return lower[int(rng.integers(len(lower)))]
    return top


def fresh_problem(
    seed: int,
    step: int,
    j: int,
    difficulty,
    drill_share: float = 0.0,
    drill_ops: str = gsm.DRILL_OPS,
    drill_from: str = "range",
) -> gsm.Problem:
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


def step_rows(rows, tok, options: TrainOptions, step: int, rng: np.random.Generator, level: int | None = None) -> list:
    """The rows of ``step``: ``--batch`` fresh problems (``level``: ``--adaptive``'s current
    one), or documents of ``rows`` drawn with ``rng``."""
    o = options
    if not o.fresh_problems:
        return [rows.rows[i] for i in rng.integers(0, len(rows), size=o.batch)]
    docs = [
        fresh_problem(
            corpus_seed(o),
            step,
            j,
            gsm.LEVELS[row_level(o, step, j, level)],
            o.drill_share,
            drill_ops(o),
            drill_from(o),
        ).document
        for j in range(o.batch)
    ]
    align = row_align(o)
    return [encode_row(d, tok, align, o.answer_only, o.seq_len) for d in docs]


# --- the adaptive curriculum ------------------------------------------------------------------


@torch.no_grad()
def answer_accuracy(model, tok, level: int, n: int, max_len: int) -> dict:
    """Exact decoding (T = 0, stop at end-of-text) of the first ``n`` held-out problems (seed 0)
    at ``level``: the share of right final answers and of right equations."""
    right = eq_right = eq_all = 0
    for p in gsm.problems(n, 0, "heldout", gsm.LEVELS[level]):
        ids = tok.encode(p.prompt)
        out = tok.decode(generate(model, ids, max(model.block_size, max_len - len(ids)), stop_ids=[tok.eos_id]).tokens)
        right += gsm.final_answer(out) == p.answer
        eqs = gsm.equations(out)
        eq_right, eq_all = eq_right + sum(e[-1] for e in eqs), eq_all + len(eqs)
    return {
        "level": level,
        "answers": round(right / n, 4),
        "equations": round(eq_right / max(1, eq_all), 4),
        "n": n,
        "equations_written": eq_all,
    }


def adapt(model, tok, options: TrainOptions, state: dict) -> None:
    """``--adaptive``: evaluate the current level; move to the next when both thresholds are met.
    The level and every evaluation go into ``state`` (the checkpoint), so a resume is exact."""
    order = adaptive_levels(options)
    level = state.get("level", order[0])
    model.eval()
    r = answer_accuracy(model, tok, level, options.adapt_n, options.seq_len)
    model.train()
    r["step"] = state["step"]
    moved = (
        r["answers"] >= options.adapt_answers
        and r["equations"] >= options.adapt_equations
        and order.index(level) + 1 < len(order)
    )
    if moved:
        state["level"] = order[order.index(level) + 1]
        r["moved_to"] = state["level"]
    state["level"] = state.get("level", level)
    state["adaptive_evals"] = state.get("adaptive_evals", []) + [r]


def recipe_batch(rows, tok, options: TrainOptions, step: int, B: int, level: int | None = None):
    """``--rows-per-doc``: the batch of ``step`` at block size ``B`` -> ``x_t, x, weight``, each
    (N, L): its rows (``step_rows``) masked k ~ U{1..n} per block, with the results of a share of
    them masked (``--mask-results``, ``--suffix-results``) and weighted (``--result-weight``).
    Each draw has its own generator of (``--seed``, step), so a resume draws the same batch."""
    o, rng = options, np.random.default_rng([options.seed, step, B])
    batch = step_rows(rows, tok, o, step, rng, level)
    positions = row_results(batch, tok)  # shared: each row parsed once
    forced = forced_results(batch, tok, o.mask_results, np.random.default_rng([o.seed, 17, step]), positions)
    cuts = suffix_cuts(batch, tok, o.suffix_results, B, np.random.default_rng([o.seed, 23, step]), positions)
    boost = boosted_results(batch, tok, o.result_weight)
    x_t, x, _, w = rows_batch(
        batch, B, tok.mask_id, tok.eos_id, rng, o.eot_weight, forced, boost, o.result_weight, cuts
    )
    return x_t, x, w
