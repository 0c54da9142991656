"""benchmarks/length_commits.py: when exact decoding fixes a result's length (docs/targets.md)."""

import importlib.util
from pathlib import Path

spec = importlib.util.spec_from_file_location(
    "length_commits", Path(__file__).resolve().parents[2] / "benchmarks" / "length_commits.py"
)
lc = importlib.util.module_from_spec(spec)
spec.loader.exec_module(lc)


def test_the_token_after_a_result_is_timed_against_its_digits():
    pieces = ["x", " ", "4", "5", " ", "+", " ", "7", " ", "=", " ", "5", "2", " left", "."]  # 45 + 7 = 52
    B, start = 16, 16  # new token j at block 1, position j
    step = {(1, j): j for j in range(len(pieces))}  # left to right...
    step[1, 13], step[1, 0] = 0, 13  # ...but " left" first: the length is fixed
    conf = {(1, 0): [0.5] * 13 + [0.97, 0.1, 0.1]}
    assert lc.equation_commits(pieces, start, B, step, conf) == [
        {"outcome": "right", "first": True, "before_last": True, "conf": 0.97}
    ]


def test_a_wrong_length_written_digits_first():
    pieces = ["4", "5", " ", "+", " ", "7", " ", "=", " ", "5", "2", "3", " left"]  # 45 + 7 = 523
    step = {(0, j): j for j in range(len(pieces))}
    assert lc.equation_commits(pieces, 0, 16, step, {}) == [
        {"outcome": "wrong length", "first": False, "before_last": False, "conf": None}
    ]
    assert lc.equation_commits(pieces, 0, 12, {**step, (1, 0): 0}, {}) == []  # " left" in the next block


def test_the_table_runs_on_a_bundled_math_target(capsys):
    assert lc.main(["gsm-b16", "--problems", "2", "--new-tokens", "64"]) == 0
    out = capsys.readouterr().out
    assert [line.split("|")[1].strip() for line in out.splitlines()[3:6]] == list(lc.OUTCOMES)
