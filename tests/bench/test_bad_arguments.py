"""Every ``benchmarks/*.py`` script refuses a bad argument with one line and a nonzero exit
status, never a traceback (and never by starting its work: argument errors only here, fast).

Each case ran into a traceback (or ran the whole benchmark, ignoring the argument) before."""

import contextlib
import importlib.util
import io
import subprocess
import sys
from pathlib import Path

import pytest
import torch

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
    ("lookahead.py", ["nope"], "unknown targets ['nope']"),
    ("lookahead.py", ["gsm-b32", "--budgets", "4,0"], "argument --budgets: must be"),
    ("llada_draw_readings.py", ["--seeds", "0"], "argument --seeds: must be an int in [1, inf], got 0"),
    ("length_commits.py", ["--new-tokens", "0"], "argument --new-tokens: must be an int in [1, inf], got 0"),
    ("moe_routing.py", ["nope"], "unknown target 'nope'"),
    ("moe_routing.py", ["gsm-moe", "--targets-dir", "{file}"], "unknown target 'gsm-moe' in"),
    ("moe_routing.py", ["gsm-b32", "--problems", "0"], "argument --problems: must be an int in [1, inf], got 0"),
    ("drafter_cost.py", ["nope"], "unknown target 'nope'"),
    ("drafter_cost.py", ["gsm-b32", "--rounds", "0"], "argument --rounds: must be an int in [1, inf], got 0"),
    ("order_gap.py", ["nope"], "unknown targets ['nope']"),
    ("order_gap.py", ["gsm-b32", "--depth", "0"], "argument --depth: must be an int in [1, inf], got 0"),
    ("mutant_gallery.py", ["--shard", "3/2"], "argument --shard: must be I/N with 1 <= I <= N, got '3/2'"),
    ("mutant_gallery.py", ["--only", "nope"], "--only: no mutant named 'nope'"),
    ("real_shape_cost.py", ["--shapes", "sdar-70b"], "--shapes: unknown ['sdar-70b']; known: sdar-0.6b"),
    ("real_shape_cost.py", ["--states", "1,x"], "argument --states: must be an integer, got 'x'"),
    ("real_shape_cost.py", ["--out", "{file}/x.json"], "is not a writable directory"),
    ("replay.py", ["--runs", "fast"], "--runs: 'fast' is not exact[@W]"),
    ("replay.py", ["--shape", "llada-8b"], "--shape: 'llada-8b' is not an SDAR shape"),
    ("rule_cost.py", ["--bogus"], "unrecognized arguments: --bogus"),
    ("sets_adaptation.py", ["--target", "nope", "--sources", "stdlib-b16"], "unknown target 'nope'"),
    ("sets_adaptation.py", ["--target", "stdlib-b32", "--sources", "nope"], "no SPOT drafter named 'nope'"),
    ("sets_adaptation.py", ["--target", "x", "--sources", "y", "--adaptations", "full,all"], "unknown adaptations"),
    ("universal_drafter.py", ["--targets", "nope"], "--targets: unknown target 'nope'"),
    ("universal_drafter.py", ["--prompts", "0"], "argument --prompts: must be an int in [1, inf], got 0"),
]


def test_every_script_has_a_case():
    assert {p.name for p in BENCHMARKS.glob("*.py")} == {script for script, _, _ in CASES}


def run_script(script: str, args: list) -> tuple[int, str]:
    """(exit status, stderr) of ``python benchmarks/SCRIPT ARGS``, run in this process: each script's
    ``main(argv)`` is what its ``__main__`` calls (a subprocess per case cost a torch import each;
    ``test_a_script_run_as_a_program_refuses_the_same_way`` keeps one real process)."""
    path, threads = list(sys.path), torch.get_num_threads()  # scripts add the checkout to sys.path and pin one thread
    spec = importlib.util.spec_from_file_location(f"bench_{Path(script).stem}", BENCHMARKS / script)
    module = importlib.util.module_from_spec(spec)
    err = io.StringIO()
    try:
        spec.loader.exec_module(module)
        with contextlib.redirect_stderr(err):
            status = module.main(args)
    except SystemExit as e:
        status = e.code
    finally:
        sys.path[:] = path
        torch.set_num_threads(threads)
    return status, err.getvalue()


@pytest.mark.parametrize("script, args, message", CASES, ids=[f"{s} {' '.join(a)}" for s, a, _ in CASES])
def test_a_bad_argument_is_one_line_and_a_nonzero_status(tmp_path, monkeypatch, script, args, message):
    subs = {"{file}": str(tmp_path / "a-file"), "{missing}": str(tmp_path / "missing.json")}
    (tmp_path / "a-file").write_text("")
    for key, value in subs.items():
        args, message = [a.replace(key, value) for a in args], message.replace(key, value)
    monkeypatch.chdir(tmp_path)
    status, stderr = run_script(script, args)  # a traceback would be an exception raised here
    assert status in (1, 2), stderr[-2000:]
    last = stderr.strip().splitlines()[-1]
    assert last.startswith(f"python benchmarks/{script}: error: ") and message in last, stderr
    assert list(tmp_path.iterdir()) == [tmp_path / "a-file"]  # nothing written


@pytest.mark.slow
def test_a_script_run_as_a_program_refuses_the_same_way(tmp_path):
    r = subprocess.run(
        [sys.executable, str(BENCHMARKS / "rule_cost.py"), "--bogus"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr[-2000:]
    assert r.stderr.strip().splitlines()[-1] == "python benchmarks/rule_cost.py: error: unrecognized arguments: --bogus"
    assert list(tmp_path.iterdir()) == []
