"""benchmarks/replay.py: a trained target's schedule replayed at a real shape's cost, run here with
a toy "real" shape."""

import importlib.util
import json
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))
spec = importlib.util.spec_from_file_location("replay", BENCHMARKS / "replay.py")
replay = importlib.util.module_from_spec(spec)
spec.loader.exec_module(replay)

TOY = {"sdar-toy": ("sdar", dict(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1,
                                 head_dim=16, intermediate_size=48, vocab_size=1100))}  # fmt: skip


def test_the_replay_decides_as_the_target_and_runs_the_real_model_on_the_same_rows(monkeypatch):
    import spotref

    target = spotref.load_target("gsm-b32").model
    monkeypatch.setattr(replay.shapes, "SHAPES", TOY)
    real = replay.shapes.build("sdar-toy", 32)
    seen = []
    denoise = real.denoise
    real.denoise = lambda cache, states, one_forward=False: (
        seen.append((states.clone(), one_forward)) or denoise(cache, states, one_forward)
    )
    model = replay.Replay(target, real, drafted=True)
    prompt = [5, 6, 7] * 12
    for width in (None, 4):
        out = spotref.generate(model, prompt, 40, drafter="confidence", budget=4, width=width)
        assert out.tokens == spotref.generate(target, prompt, 40, width=width).tokens
    assert seen and all(s.shape[1] == 32 for s, _ in seen)
    assert {f for _, f in seen} == {False, True} and all(len(s) == 4 for s, f in seen if f)


def test_every_run_is_written_checked_and_tabled(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(replay.shapes, "SHAPES", TOY)
    out = tmp_path / "replay.json"
    runs = "exact,exact@2,spot:2@2,calibrated:2,spot:auto"
    argv = ["--shape", "sdar-toy", "--runs", runs, "--problems", "1", "--tokens", "24"]
    assert replay.main([*argv, "--out", str(out)]) == 0
    record = json.loads(out.read_text())
    assert list(record["runs"]) == runs.split(",")
    assert all(r["identical"] and r["generated"] > 0 and r["passes"] > 0 for r in record["runs"].values())
    assert record["runs"]["exact@2"]["width"] == 2 and record["runs"]["spot:2@2"]["budget"] == 2
    assert 0 < record["runs"]["exact"]["rows"] < record["runs"]["exact"]["passes"]  # one row a verify; prefill, stores
    text = capsys.readouterr().out
    assert "| spot:2@2 | 2 |" in text and "| exact | rows alone |" in text


@pytest.mark.parametrize("bad", ["fast", "exact:4", "spot:x", "spot:4@y"])
def test_a_bad_run_is_refused_by_name(bad, tmp_path, capsys):
    assert replay.main(["--runs", bad, "--out", str(tmp_path / "r.json")]) != 0
    assert bad in capsys.readouterr().err


def test_a_shape_of_another_family_is_refused(tmp_path, capsys):
    assert replay.main(["--shape", "llada-8b", "--out", str(tmp_path / "r.json")]) != 0
    assert "not an SDAR shape" in capsys.readouterr().err


def test_a_target_replayed_in_other_blocks_keeps_its_own_drafter(tmp_path, monkeypatch):
    monkeypatch.setattr(replay.shapes, "SHAPES", TOY)
    out = tmp_path / "replay.json"
    argv = ["--shape", "sdar-toy", "--block", "4", "--runs", "exact,spot:4@4", "--problems", "1", "--tokens", "16"]
    assert replay.main([*argv, "--out", str(out)]) == 0
    record = json.loads(out.read_text())
    assert record["block"] == 4 and all(r["identical"] for r in record["runs"].values())
    assert record["runs"]["spot:4@4"]["passes"] < record["runs"]["exact"]["passes"]
