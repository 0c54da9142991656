"""``spotref bench --quick``: the CI smoke test of the benchmark (random model, tiny grid)."""
import pytest

from spotref.tools import bench


def test_quick_bench_writes_the_report(tmp_path):
    out = tmp_path / "results.md"
    assert bench.main(["--quick", "--targets", "random", "--out", str(out), "--plot", str(tmp_path / "r.png")]) == 0
    text = out.read_text()
    assert "python -m spotref.tools.bench --quick" in text and "## Goals" in text
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


def fake_row(tgt, T, name, N, fewer, speed=1.0):
    return bench.Row(tgt, T, name, N, passes_per_token=1 / fewer, fewer_passes=fewer, fewer_denoise=fewer,
                     commits_per_round=fewer, tokens_per_s=100.0, speed_up=speed, bookkeeping="0%")


def test_rows_have_a_field_per_column():
    assert len(bench.Row._fields) == len(bench.COLUMNS)


def test_headline_judges_each_goal_on_its_own_target():
    from types import SimpleNamespace as NS

    from spotref.load.targets import DEFAULT_TARGET
    setups = [NS(name=DEFAULT_TARGET, model=NS(block_size=32)), NS(name="b16", model=NS(block_size=16))]
    rows = [fake_row(DEFAULT_TARGET, "0", "spot", 64, 7.0), fake_row("b16", "0", "spot", 64, 9.0),
            fake_row(DEFAULT_TARGET, "0", "spot", "auto=4", 2.0, speed=1.6),
            fake_row("b16", "0", "spot", "auto=1", 1.0, speed=0.5)]
    lines = bench.headline(rows, setups)
    assert len([l for l in lines if "6.8x" in l]) == 1 and "7.00x fewer passes than exact (goal >= 6.8x: met)" in lines[0]
    assert "1.60x exact (goal >= 1.5x: met)" in lines[1] and lines[2].endswith("0.50x exact")


def test_ceiling_rows_take_the_best_budget():
    rows = [fake_row("t", "0", "oracle-order", 4, 2.0, speed=0.9), fake_row("t", "0", "oracle-order", 64, 2.2, speed=0.3),
            fake_row("t", "0", "calibrated", 4, 1.9), fake_row("t", "0", "calibrated", 64, 1.1),
            fake_row("t", "0", "confidence", 4, 1.0), fake_row("t", "0", "confidence", 64, 2.2)]
    assert bench.ceiling_rows(rows) == [["t", "0", "2.00 (N=64)", "2.00 (N=4)", "2.20 (N=64)", "0.90 (N=4)"]]


def test_report_table_parses_back(tmp_path):
    """``--replot`` redraws from the written table: the parsed rows are the rows written."""
    rows = [fake_row("t", "0", "exact", "-", 1.0), fake_row("t", "0", "spot", 4, 1.75),
            fake_row("t", "0", "spot", "auto=2", 1.5)]
    text = "intro\n\n" + bench.table(bench.COLUMNS, rows) + "\n\n## Goals\n| x | y |\n"
    back = bench.rows_from_report(text)
    assert [r[:4] for r in back] == [r[:4] for r in rows]
    assert [r.fewer_passes for r in back] == pytest.approx([r.fewer_passes for r in rows], rel=1e-3)


def test_costmodel_table(capsys):
    from spotref.tools import costmodel
    assert costmodel.main(["stdlib-b32", "--drafter", "calibrated", "--temperature", "1"]) == 0
    out = capsys.readouterr().out
    assert out.count("\n|") == len(costmodel.BUDGETS) + 1 and "budget='auto' picks N = " in out
