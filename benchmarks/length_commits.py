"""When does exact decoding fix the length of a written result, and how sure is the target then?

A math target's wrong equations are often of the wrong length (`33 + 46 = 179`): the result's
length is fixed once the token after it (` buttons`, `\\n`, `<|im_end|>`) is committed, since the
digits must then fill the gap. This replays exact decoding at T = 0 on the target's first held-out
problems (``quality_math.problems_of``, the bar's problems) and, for every equation ``a op b = c``
it writes, reads from the trajectory when the token after ``c`` was committed (before any digit of
``c``, before its last digit) and the target's probability of that token when it was committed
(at T = 0 the committed token is the argmax, so this is its confidence). Equations are split by
outcome: right, wrong length, right length but wrong digits.

    python benchmarks/length_commits.py [gsm-b32] [--problems 150]

Prints a table; docs/targets.md records a run. A diagnostic, not a project tool: nothing is written.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout
from spotref.cli.argtypes import guarded, positive_int  # noqa: E402
from spotref.cli.report import table  # noqa: E402
from spotref.load.targets import load_target  # noqa: E402
from spotref.record.trajectories import record_run  # noqa: E402
from workbench.bench import quality_math  # noqa: E402
from workbench.data import gsm  # noqa: E402

OUTCOMES = ("right", "wrong length", "wrong digits")
BUCKETS = ((0.99, 1.01), (0.9, 0.99), (0.5, 0.9), (0.0, 0.5))


def commits(target, problem, new_tokens: int):
    """Exact decoding of one problem at T = 0 -> (text pieces per new token, the absolute
    position of new token 0, {(block, pos): commit step}, {(block, step): confidences (B,) of
    the pass that decided that step})."""
    ids = target.encode(problem.prompt)
    rows, res = record_run(target.model, ids, new_tokens, 0.0, 0, list(target.stop_ids or ()))
    step = {(b, pos): k for b, k, d in res.stats["trajectory"] for pos, _ in d}
    # a state's stale distribution is the previous pass's: the one that decided step k - 1
    conf = {(r["block"], r["step"] - 1): r["pc"][0] for r in rows}
    return [target.tokenizer.decode([t]) for t in res.tokens], len(ids), step, conf


def equation_commits(pieces, start: int, B: int, step: dict, conf: dict) -> list[dict]:
    """One record per equation whose result and next token lie in one block: its outcome, whether
    the next token was committed before every digit / before the last digit, its confidence."""
    ends = np.cumsum([0] + [len(p) for p in pieces])
    where = lambda j: divmod(start + j, B)  # new token j -> (block, pos)
    out = []
    for m in gsm.EQUATION.finditer("".join(pieces)):
        a, op, b, c = int(m[1]), m[2], int(m[3]), int(m[4])
        true = gsm.apply_op(a, op, b)
        j0, j1 = (int(np.searchsorted(ends, x, "right")) - 1 for x in (m.start(4), m.end(4)))
        if true is None or j1 >= len(pieces) or where(j0)[0] != where(j1)[0]:
            continue  # j1: the token after c
        digits = [step[where(j)] for j in range(j0, j1)]
        block, pos = where(j1)
        k = step[block, pos]
        p = conf.get((block, k))  # None: the block's first step
        out.append(
            {
                "outcome": quality_math.outcome(a, op, b, c),
                "first": k < min(digits),
                "before_last": k < max(digits),
                "conf": None if p is None else float(p[pos]),
            }
        )
    return out


def summary(records: list[dict]) -> list[list]:
    """One row per outcome: equations, next token before every digit / before the last digit,
    and the confidence buckets of the next token where it came before every digit."""
    rows = []
    for outcome in OUTCOMES:
        rs = [r for r in records if r["outcome"] == outcome]
        first = [r["conf"] for r in rs if r["first"] and r["conf"] is not None]
        share = lambda n: f"{100 * n / max(len(rs), 1):.0f}%"
        buckets = [f"{100 * np.mean([lo <= c < hi for c in first]):.0f}%" if first else "-" for lo, hi in BUCKETS]
        rows.append(
            [
                outcome,
                len(rs),
                share(sum(r["first"] for r in rs)),
                share(sum(r["before_last"] for r in rs)),
                f"{np.mean(first):.3f}" if first else "-",
                *buckets,
            ]
        )
    return rows


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python benchmarks/length_commits.py", description=__doc__.splitlines()[0])
    p.add_argument("target", nargs="?", default="gsm-b32", help="a bundled math target or a NAME.json")
    p.add_argument("--problems", type=positive_int, default=150, help="held-out problems (default 150)")
    p.add_argument("--new-tokens", type=positive_int, default=256, help="new tokens per problem (default 256)")
    args = p.parse_args(argv)
    return guarded("python benchmarks/length_commits.py", lambda: measure(args))


def measure(args) -> int:
    """The table of ``args.target``'s first ``args.problems`` held-out problems."""
    torch.set_num_threads(1)
    target = load_target(args.target)
    records = []
    for problem in quality_math.problems_of(target, args.problems):
        pieces, start, step, conf = commits(target, problem, args.new_tokens)
        records += equation_commits(pieces, start, target.model.block_size, step, conf)
    print(f"{args.target}, {args.problems} held-out problems, T = 0: the token after each result")
    print(
        table(
            [
                "outcome",
                "equations",
                "before every digit",
                "before the last digit",
                "confidence (first)",
                ">= 0.99",
                "0.9-0.99",
                "0.5-0.9",
                "< 0.5",
            ],
            summary(records),
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
