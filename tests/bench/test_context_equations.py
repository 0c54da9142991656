"""benchmarks/context_equations.py: a math target's equations in its solutions, with a clean prefix, alone."""

import importlib.util
import sys
from pathlib import Path

from workbench.bench import quality_math
from workbench.data import gsm

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))
spec = importlib.util.spec_from_file_location("context_equations", BENCHMARKS / "context_equations.py")
ce = importlib.util.module_from_spec(spec)
spec.loader.exec_module(ce)


def test_each_written_equation_cuts_the_tokens_just_before_its_result():
    from spotref.load.targets import load_target

    target = load_target("gsm-b16")
    text = "Tom has 3 * 12 = 36 eggs.\n36 + 105 = 141\n#### 141"
    tokens = target.encode(text)
    found = ce.written(target, tokens)
    assert [e[:4] for e in found] == [(3, "*", 12, 36), (36, "+", 105, 141)]
    for a, op, b, c, k in found:
        assert target.tokenizer.decode(tokens[:k]).endswith(f"{a} {op} {b} = ")
        assert target.tokenizer.decode(tokens[k:]).startswith(str(c))


def test_outcomes_and_the_summary():
    assert [quality_math.outcome(*e) for e in [(3, "*", 12, 36), (33, "+", 46, 179), (90, "-", 72, 28)]] == [
        "right",
        "wrong length",
        "wrong digits",
    ]
    recs = [
        {"outcome": "right", "prefix": True, "alone": False},
        {"outcome": "wrong length", "prefix": True, "alone": True},
        {"outcome": "wrong length", "prefix": False, "alone": True},
    ]
    assert ce.summary(recs) == [
        ["right", 1, "100.0% (1)", "0.0% (0)"],
        ["wrong length", 2, "50.0% (1)", "100.0% (2)"],
        ["wrong digits", 0, "-", "-"],
        ["all", 3, "66.7% (2)", "66.7% (2)"],
    ]


def test_a_clean_prefix_continues_the_targets_own_solution():
    from spotref.load.targets import load_target

    target = load_target("gsm-b16")
    p = gsm.problems(1, 0, "heldout", gsm.Difficulty(**target.meta["corpus"]["difficulty"]))[0]
    ids, tokens = ce.solve(target, p)
    a, op, b, c, k = ce.written(target, tokens)[0]
    assert isinstance(ce.with_prefix(target, ids + tokens[:k]), int)  # it writes a result there


def test_the_table_runs_on_a_bundled_math_target(capsys):
    assert ce.main(["gsm-b16", "--problems", "1"]) == 0
    out = capsys.readouterr().out
    assert "right with a clean prefix" in out and out.strip().splitlines()[-1].split("|")[1].strip() == "all"
