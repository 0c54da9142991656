"""Is a math target's arithmetic wrong in its solutions, alone, or with a clean prefix?

Exact decoding at T = 0 of the target's first held-out problems (``quality_math.problems_of``,
the bar's problems) writes equations ``a op b = c``. Each one is asked twice more, at T = 0:

* alone: "What is a op b?" (``equation_drills.answer``, the form drills train on);
* with a clean prefix: the prompt and the target's own solution up to the result (``... a op
  b = ``), its tokens exactly as decoded, given as the prompt, so every token before the result
  is fixed and nothing after it is; the result is the digits it then writes first.

In its solution the digits of a result are often decided after the words that follow it (and
those fix its length; ``benchmarks/length_commits.py``), inside a block whose other positions
are partly decided. The table splits the equations by their outcome in the solution (right,
wrong length, wrong digits; ``quality_math.outcome``) and gives how many of each come out right
with a clean prefix and alone: wrong equations that a clean prefix puts right are made wrong by
the block's state, those it leaves wrong by what the solution says before them.

    python benchmarks/context_equations.py [gsm-b32 | DIR/NAME.json] [--problems 100]

Prints a table; docs/targets.md records a run. A diagnostic, not a project tool: nothing is written.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout
sys.path.insert(0, str(Path(__file__).resolve().parent))
from equation_drills import answer  # noqa: E402

import spotref  # noqa: E402
from spotref.cli.argtypes import guarded, positive_int  # noqa: E402
from spotref.cli.report import progress, table  # noqa: E402
from spotref.load.targets import load_target  # noqa: E402
from workbench.bench import quality_math  # noqa: E402
from workbench.data import gsm  # noqa: E402

OUTCOMES = ("right", "wrong length", "wrong digits")
DIGITS = re.compile(r"\d+")


def solve(target, problem, new_tokens: int = 256) -> tuple[list[int], list[int]]:
    """Exact decoding of one problem at T = 0 -> (prompt ids, new token ids)."""
    ids = target.encode(problem.prompt)
    return ids, list(spotref.generate(target, ids, new_tokens, stop_ids=target.stop_ids).tokens)


def written(target, tokens: list[int]) -> list[tuple[int, str, int, int, int]]:
    """Every equation the new tokens write, as ``(a, op, b, c, k)``: ``tokens[:k]`` ends just
    before the first digit of ``c`` (equations whose ``c`` does not start a token are left out)."""
    pieces = [target.tokenizer.decode([t]) for t in tokens]
    ends = np.cumsum([0] + [len(p) for p in pieces])  # (n + 1,) text offset of token k
    out = []
    for m in gsm.EQUATION.finditer("".join(pieces)):
        k = int(np.searchsorted(ends, m.start(4)))
        if k < len(ends) and ends[k] == m.start(4):
            out.append((int(m[1]), m[2], int(m[3]), int(m[4]), k))
    return out


def with_prefix(target, prefix: list[int], new_tokens: int = 8) -> int | None:
    """The number the target writes first at T = 0 after the prompt ``prefix`` (None if none)."""
    text = target.tokenizer.decode(spotref.generate(target, prefix, new_tokens, stop_ids=target.stop_ids).tokens)
    m = DIGITS.match(text)
    return int(m[0]) if m else None


def records(target, n_problems: int) -> list[dict]:
    """One record per written equation: its outcome in the solution, and whether the target
    gets it right with a clean prefix and alone."""
    out = []
    for p in progress(quality_math.problems_of(target, n_problems), "problems"):
        ids, tokens = solve(target, p)
        for a, op, b, c, k in written(target, tokens):
            true = gsm.apply_op(a, op, b)
            out.append(
                {
                    "outcome": quality_math.outcome(a, op, b, c),
                    "prefix": with_prefix(target, ids + tokens[:k]) == true,
                    "alone": answer(target, a, op, b) == true,
                }
            )
    return out


def summary(recs: list[dict]) -> list[list]:
    """One row per outcome in the solution, and all: equations, right with a clean prefix, right alone."""
    share = lambda rs, key: f"{100 * np.mean([r[key] for r in rs]):.1f}% ({sum(r[key] for r in rs)})" if rs else "-"
    groups = [(o, [r for r in recs if r["outcome"] == o]) for o in OUTCOMES] + [("all", recs)]
    return [[name, len(rs), share(rs, "prefix"), share(rs, "alone")] for name, rs in groups]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python benchmarks/context_equations.py", description=__doc__.splitlines()[0])
    p.add_argument("target", nargs="?", default="gsm-b32", help="a bundled math target or a NAME.json")
    p.add_argument("--problems", type=positive_int, default=100, help="held-out problems whose solutions are read")
    args = p.parse_args(argv)
    return guarded("python benchmarks/context_equations.py", lambda: report(args))


def report(args) -> int:
    """The table of ``args.target``'s first ``args.problems`` held-out problems (refused by name:
    a target that is not bundled, or not a math target)."""
    torch.set_num_threads(1)
    target = load_target(args.target)
    recs = records(target, args.problems)
    print(
        f"{args.target}: the equations of its T = 0 solutions of {args.problems} held-out problems, "
        f"right in the solution: {100 * np.mean([r['outcome'] == 'right' for r in recs]):.1f}%"
    )
    print(table(["in the solution", "equations", "right with a clean prefix", "right alone"], summary(recs)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
