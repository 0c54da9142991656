"""``spotref bench --quick``: the CI smoke test of the benchmark (random model, tiny grid)."""
import pytest

from spotref import bench


def test_quick_bench_writes_the_report(tmp_path):
    out = tmp_path / "results.md"
    assert bench.main(["--quick", "--targets", "random", "--out", str(out), "--plot", str(tmp_path / "r.png")]) == 0
    text = out.read_text()
    assert "python -m spotref.bench --quick" in text and "## Goals" in text
    for name in ("exact", "confidence", "calibrated", "spot", "oracle-order", "oracle", "auto="):
        assert f" {name}" in text
    assert "asserted identical to exact decoding" in text


def test_bench_stops_on_a_divergence(tmp_path, monkeypatch):
    """A decoder whose output differs from exact decoding stops the benchmark loudly."""
    real = bench.gen

    def lossy(setup, prompt, T, args, **kw):
        res = real(setup, prompt, T, args, **kw)
        if kw.get("drafter") is not None and res.tokens:
            res.tokens[-1] = (res.tokens[-1] + 1) % 90
        return res
    monkeypatch.setattr(bench, "gen", lossy)
    with pytest.raises(SystemExit, match="OUTPUT DIFFERS"):
        bench.main(["--quick", "--targets", "random", "--no-auto", "--out", str(tmp_path / "r.md"),
                    "--plot", str(tmp_path / "r.png")])
