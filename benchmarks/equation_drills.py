"""Can a math target do the arithmetic its problems need, asked on its own?

Every equation ``a op b = c`` the reference solutions of the target's first held-out problems
write (``quality_math.problems_of``, the bar's problems) is asked as a drill, "What is a op b?"
(``gsm.chat_prompt``), and decoded exactly at T = 0; so are as many drills with operands drawn in
the level's limits (``gsm.drill``, what ``--drill-from range`` trains on, seeded). The table gives
the share answered right (``#### N``), by source and by kind (``quality_math.equation_kind``).
A gap between the two sources on a kind is arithmetic the range drills do not teach.

    python benchmarks/equation_drills.py [gsm-b32 | DIR/NAME.json] [--problems 100]

Prints a table; docs/targets.md records a run. A diagnostic, not a project tool: nothing is written.
"""

from __future__ import annotations

import argparse
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout
import spotref  # noqa: E402
from spotref.cli.argtypes import guarded, positive_int  # noqa: E402
from spotref.cli.report import table  # noqa: E402
from spotref.load.targets import load_target  # noqa: E402
from workbench.bench import quality_math  # noqa: E402
from workbench.data import gsm  # noqa: E402

SOURCES = ("problems", "range")


def drills(target, n_problems: int, seed: int = 0) -> dict[str, list[tuple[int, str, int, int]]]:
    """source -> the equations ``(a, op, b, c)`` to ask: those of the first ``n_problems``
    held-out reference solutions, and as many range drills at the target's level."""
    problems = quality_math.problems_of(target, n_problems)
    written = [(a, op, b, c) for p in problems for a, op, b, c, _ in gsm.equations(p.solution)]
    level = gsm.Difficulty(**target.meta["corpus"]["difficulty"])
    ranged = [
        gsm.equations(gsm.drill(np.random.default_rng([seed, i]), level).solution)[0][:4] for i in range(len(written))
    ]
    return {"problems": written, "range": ranged}


def answer(target, a: int, op: str, b: int, new_tokens: int = 32) -> int | None:
    """The target's final answer to "What is a op b?" at T = 0 (None if it writes none)."""
    ids = target.encode(gsm.chat_prompt(f"What is {a} {op} {b}?"))
    return gsm.final_answer(
        target.tokenizer.decode(spotref.generate(target, ids, new_tokens, stop_ids=target.stop_ids).tokens)
    )


def scores(target, asked: dict) -> dict[tuple[str, str], list[bool]]:
    """(source, kind) -> whether each drill was answered right; kind "all" as well."""
    out = defaultdict(list)
    for source, eqs in asked.items():
        for a, op, b, c in eqs:
            ok = answer(target, a, op, b) == c
            out[source, quality_math.equation_kind(a, op, b, c)].append(ok)
            out[source, "all"].append(ok)
    return out


def rows(scored: dict) -> list[list]:
    """One row per kind: for each source, the share right and how many were asked."""
    kinds = sorted({k for _, k in scored} - {"all"}) + ["all"]
    cell = lambda v: f"{100 * np.mean(v):.1f}% ({len(v)})" if v else "-"
    return [[kind, *(cell(scored.get((s, kind), [])) for s in SOURCES)] for kind in kinds]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python benchmarks/equation_drills.py", description=__doc__.splitlines()[0])
    p.add_argument("target", nargs="?", default="gsm-b32", help="a bundled math target or a NAME.json")
    p.add_argument("--problems", type=positive_int, default=100, help="held-out problems whose equations are asked")
    args = p.parse_args(argv)
    return guarded("python benchmarks/equation_drills.py", lambda: report(args))


def report(args) -> int:
    """The table of ``args.target``'s first ``args.problems`` held-out problems (refused by name:
    a target that is not bundled, or not a math target)."""
    torch.set_num_threads(1)
    target = load_target(args.target)
    print(
        f"{args.target}: drills at T = 0 from the equations of {args.problems} held-out solutions, "
        f"and as many range drills"
    )
    print(table(["kind", *(f"{s} drills right" for s in SOURCES)], rows(scores(target, drills(target, args.problems)))))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
