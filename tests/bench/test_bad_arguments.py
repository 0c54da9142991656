"""Every ``benchmarks/*.py`` script refuses a bad argument with one line and a nonzero exit
status, never a traceback (and never by starting its work: argument errors only here, fast).

Each case ran into a traceback (or ran the whole benchmark, ignoring the argument) before."""

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BENCHMARKS = ROOT / "benchmarks"
CASES = [  # (script, arguments, what the error line says)
    ("bench_core.py", ["--seed", "-1"], "argument --seed: must be an int in [0, inf], got -1"),
    ("bench_core.py", ["--samples", "0"], "argument --samples: must be an int in [1, inf], got 0"),
    ("canvas_cost.py", ["--budgets", "1,x"], "argument --budgets: must be an integer, got 'x'"),
    ("canvas_cost.py", ["--out", "{file}/x.json"], "is not a writable directory"),
    ("context_equations.py", ["nope"], "unknown target 'nope'"),
    ("context_equations.py", ["--problems", "-1"], "argument --problems: must be an int in [1, inf], got -1"),
    ("cpu_width.py", ["--out", "{file}/x.json"], "is not a writable directory"),
    ("equation_drills.py", ["no-such-target"], "unknown target 'no-such-target'"),
    ("generations.py", ["--out", "x.json", "--max-new-tokens", "-1"], "argument --max-new-tokens: must be an int"),
    ("generations.py", ["--out", "x.json", "--against", "{missing}"], "--against '{missing}': cannot read"),
    ("gpu_check.py", ["--device", "bogus"], "argument --device: bad device 'bogus'"),
    ("gpu_check.py", ["--reps", "nan"], "argument --reps: must be an integer, got 'nan'"),
    ("length_commits.py", ["nope"], "unknown target 'nope'"),
    ("length_commits.py", ["--new-tokens", "0"], "argument --new-tokens: must be an int in [1, inf], got 0"),
    ("mutant_gallery.py", ["--shard", "3/2"], "argument --shard: must be I/N with 1 <= I <= N, got '3/2'"),
    ("mutant_gallery.py", ["--only", "nope"], "--only: no mutant named 'nope'"),
    ("rule_cost.py", ["--bogus"], "unrecognized arguments: --bogus"),
    ("universal_drafter.py", ["--targets", "nope"], "--targets: unknown target 'nope'"),
    ("universal_drafter.py", ["--prompts", "0"], "argument --prompts: must be an int in [1, inf], got 0"),
]


def test_every_script_has_a_case():
    assert {p.name for p in BENCHMARKS.glob("*.py")} == {script for script, _, _ in CASES}


@pytest.mark.parametrize("script, args, message", CASES, ids=[f"{s} {' '.join(a)}" for s, a, _ in CASES])
def test_a_bad_argument_is_one_line_and_a_nonzero_status(tmp_path, script, args, message):
    subs = {"{file}": str(tmp_path / "a-file"), "{missing}": str(tmp_path / "missing.json")}
    (tmp_path / "a-file").write_text("")
    for key, value in subs.items():
        args, message = [a.replace(key, value) for a in args], message.replace(key, value)
    r = subprocess.run(
        [sys.executable, str(BENCHMARKS / script), *args], capture_output=True, text=True, timeout=120, cwd=tmp_path
    )
    assert r.returncode in (1, 2) and "Traceback" not in r.stderr, r.stderr[-2000:]
    last = r.stderr.strip().splitlines()[-1]
    assert last.startswith(f"python benchmarks/{script}: error: ") and message in last, r.stderr
    assert list(tmp_path.iterdir()) == [tmp_path / "a-file"]  # nothing written
