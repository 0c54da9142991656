"""benchmarks/real_shape_cost.py: a pass timed at real shapes, run here at toy sizes of each family."""

import importlib.util
import json
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
spec = importlib.util.spec_from_file_location("real_shape_cost", BENCHMARKS / "real_shape_cost.py")
rsc = importlib.util.module_from_spec(spec)
spec.loader.exec_module(rsc)

TOY = {
    "sdar-toy": ("sdar", dict(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1,
                              head_dim=16, intermediate_size=48, vocab_size=64)),
    "llada-toy": ("llada", dict(d_model=32, n_layers=1, n_heads=2, n_kv_heads=2, mlp_hidden_size=48, vocab_size=64,
                                embedding_size=64)),
    "dream-toy": ("dream", dict(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1,
                                intermediate_size=48, vocab_size=64)),
}  # fmt: skip


def test_the_real_shapes_are_the_models_sizes():
    billions = {name: rsc.parameters(name) / 1e9 for name in rsc.SHAPES}
    assert 0.7 < billions["sdar-0.6b"] < 0.8 and 2.0 < billions["sdar-1.7b"] < 2.1  # untied embeddings
    assert 8.1 < billions["sdar-8b"] < 8.3 and 7.9 < billions["llada-8b"] < 8.1 and 7.5 < billions["dream-7b"] < 7.7


def test_every_cell_is_measured_and_written(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(rsc, "SHAPES", TOY)
    out = tmp_path / "cost.json"
    argv = ["--shapes", ",".join(TOY), "--blocks", "4,8", "--states", "1,2", "--reps", "1", "--prefix", "8"]
    assert rsc.main([*argv, "--canvas", "16", "--out", str(out)]) == 0
    shapes = json.loads(out.read_text())["shapes"]
    sdar = shapes["sdar-toy"]["cells"]
    assert {(c["block"], c["states"], c["way"]) for c in sdar} == {
        (B, N, way) for B in (4, 8) for N in (1, 2) for way in ("rows alone", "one forward")
    }
    assert len(shapes["llada-toy"]["cells"]) == len(shapes["dream-toy"]["cells"]) == 4  # 2 N x 2 ways
    assert all(c["ms"] > 0 for s in shapes.values() for c in s["cells"])
    assert "| sdar-toy | 4 | one forward |" in capsys.readouterr().out


def test_a_shape_that_does_not_fit_is_skipped_and_said(tmp_path, monkeypatch):
    monkeypatch.setattr(rsc, "SHAPES", TOY)
    monkeypatch.setattr(rsc, "available_bytes", lambda: 1000)
    out = tmp_path / "cost.json"
    assert rsc.main(["--shapes", "sdar-toy", "--out", str(out)]) == 0
    assert "GiB available" in json.loads(out.read_text())["shapes"]["sdar-toy"]["skipped"]


def test_an_unknown_shape_is_named(tmp_path, capsys):
    assert rsc.main(["--shapes", "sdar-70b", "--out", str(tmp_path / "x.json")]) == 2
    assert "unknown ['sdar-70b']" in capsys.readouterr().err


@pytest.mark.parametrize("name", list(TOY))
def test_a_toy_shape_builds_in_bf16(name, monkeypatch):
    monkeypatch.setattr(rsc, "SHAPES", TOY)
    assert {p.dtype for p in rsc.build(name, 4).parameters()} == {rsc.torch.bfloat16}


def test_each_blocks_model_is_freed_before_the_next_is_built(tmp_path, monkeypatch):
    """Two SDAR-8B models do not fit in 24 GiB: the run was killed building the block-32 model
    while the passes' closures still held the block-4 one."""
    import weakref

    monkeypatch.setattr(rsc, "SHAPES", TOY)
    built, alive, real = [], [], rsc.build

    def build(name, block):
        alive.append(sum(r() is not None for r in built))  # models still held when this one is built
        model = real(name, block)
        built.append(weakref.ref(model))
        return model

    monkeypatch.setattr(rsc, "build", build)
    argv = ["--shapes", "sdar-toy", "--blocks", "4,8,16", "--states", "1,2", "--reps", "1", "--prefix", "8"]
    assert rsc.main([*argv, "--out", str(tmp_path / "c.json")]) == 0
    assert alive == [0, 0, 0, 0]  # the parameter count's (on the meta device), then one per block
