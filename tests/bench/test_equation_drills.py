"""benchmarks/equation_drills.py: the arithmetic a math target's problems need, asked alone."""

import importlib.util
from pathlib import Path

from workbench.data import gsm

spec = importlib.util.spec_from_file_location(
    "equation_drills", Path(__file__).resolve().parents[2] / "benchmarks" / "equation_drills.py"
)
ed = importlib.util.module_from_spec(spec)
spec.loader.exec_module(ed)


def test_the_drills_are_the_solutions_equations_and_as_many_range_ones():
    from spotref.load.targets import load_target

    target = load_target("gsm-b16")
    asked = ed.drills(target, 3)
    written = [e[:4] for p in gsm.problems(3, 0, "heldout") for e in gsm.equations(p.solution)]
    assert asked["problems"] == written and len(asked["range"]) == len(written) > 0
    assert all(gsm.apply_op(a, op, b) == c for a, op, b, c in asked["range"])
    assert asked == ed.drills(target, 3)  # seeded


def test_rows_split_by_source_and_kind():
    scored = {
        ("problems", "+ 3+ digits"): [True, False],
        ("problems", "all"): [True, False],
        ("range", "+ 3+ digits"): [True],
        ("range", "all"): [True],
    }
    assert ed.rows(scored) == [["+ 3+ digits", "50.0% (2)", "100.0% (1)"], ["all", "50.0% (2)", "100.0% (1)"]]


def test_the_table_runs_on_a_bundled_math_target(capsys):
    assert ed.main(["gsm-b16", "--problems", "1"]) == 0
    out = capsys.readouterr().out
    assert "problems drills right" in out and out.strip().splitlines()[-1].split("|")[1].strip() == "all"
