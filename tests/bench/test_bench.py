"""``python -m workbench bench --quick``: the CI smoke test of the benchmark (random model, tiny grid)."""

import math
from types import SimpleNamespace as NS

import pytest
from helpers import tiny_model

import spotref
from spotref.drafters.order import OrderModel
from spotref.drafters.spot import SpotDrafter
from workbench.bench import bench, bench_report, bench_run, bench_sets


@pytest.mark.slow
def test_quick_bench_writes_the_report(tmp_path):
    out = tmp_path / "results.md"
    assert bench.main(["--quick", "--targets", "random", "--out", str(out), "--plot", str(tmp_path / "r.png")]) == 0
    text = out.read_text()
    assert "python -m workbench.bench.bench --quick" in text and "## Goals" in text
    for name in ("exact", "confidence", "calibrated", "spot", "oracle-order", "oracle", "auto="):
        assert f" {name}" in text
    assert "asserted identical to exact decoding" in text
    assert "answer fewer passes" in text and "SPOT fewer passes, answer blocks" in text
    stab = bench.stability_from_report(text)  # the gain figure's x, per T
    assert set(stab) == {("random (untrained)", "0"), ("random (untrained)", "1")}
    assert all(0 <= x <= 1 for x in stab.values())
    if "![gain against stability](r-stability.png)" in text:  # matplotlib installed
        assert (tmp_path / "r-stability.png").stat().st_size > 0
    sets = bench_sets.rows_from_report(text)  # the SPOT-Sets rows, tau 0.9 under --quick
    assert "## SPOT-Sets: the threshold rule" in text and "asserted identical to threshold decoding" in text
    assert {(r.T, r.tau, r.drafter) for r in sets} == {
        (T, "0.9", d) for T in ("0", "1") for d in ("threshold", *bench_sets.SET_DRAFTERS)
    }
    assert all(r.fewer_passes >= 1 for r in sets) and any(str(r.N).startswith("auto") for r in sets)
    oracle = [r for r in sets if r.drafter == "oracle-sets" and r.N == 4]
    assert oracle and all(r.fewer_passes > 1 for r in oracle)  # the true sets are accepted


@pytest.mark.slow
def test_threshold_rows_alone(tmp_path, capsys):
    out = tmp_path / "results.md"
    assert (
        bench.main(
            [
                "--quick",
                "--targets",
                "random",
                "--rules",
                "threshold",
                "--thresholds",
                "0.5,0.7",
                "--no-auto",
                "--out",
                str(out),
                "--plot",
                str(tmp_path / "r.png"),
            ]
        )
        == 0
    )
    text = out.read_text()
    assert {r.tau for r in bench_sets.rows_from_report(text)} == {"0.5", "0.7"}
    assert bench_report.parse_table(text, bench_report.COLUMNS[:4]) == []  # no one-position rows asked for
    with pytest.raises(SystemExit) as e:  # refused by its parser, before any target loads
        bench.main(["--quick", "--targets", "random", "--thresholds", "1.5", "--out", str(tmp_path / "x.md")])
    assert e.value.code == 2
    assert "argument --thresholds: must be in (0.0, 1.0), got 1.5" in capsys.readouterr().err  # at parse time


@pytest.mark.slow
def test_bench_stops_on_a_divergence(tmp_path, monkeypatch):
    """A decoder whose output differs from exact decoding stops the benchmark loudly."""
    real = bench_run.gen

    def lossy(setup, prompt, T, options, **kw):
        res = real(setup, prompt, T, options, **kw)
        if kw.get("drafter") is not None and res.tokens:
            res.tokens[-1] = (res.tokens[-1] + 1) % 90
        return res

    monkeypatch.setattr(bench_run, "gen", lossy)
    for rule in ("one-position", "threshold"):
        with pytest.raises(SystemExit, match="OUTPUT DIFFERS"):
            bench.main(
                [
                    "--quick",
                    "--targets",
                    "random",
                    "--no-auto",
                    "--rules",
                    rule,
                    "--out",
                    str(tmp_path / "r.md"),
                    "--plot",
                    str(tmp_path / "r.png"),
                ]
            )


def fake_row(tgt, T, name, N, fewer, speed=1.0, answer=None):
    answer = fewer if answer is None else answer
    return bench.Row(
        tgt,
        T,
        name,
        N,
        passes_per_token=1 / fewer,
        fewer_passes=fewer,
        fewer_denoise=fewer,
        answer_passes_per_token=1 / answer,
        answer_fewer_passes=answer,
        commits_per_round=fewer,
        tokens_per_s=100.0,
        speed_up=speed,
        bookkeeping="0%",
    )


def fake_result(tokens, blocks, stopped, prefill=1):
    stats = dict(blocks=blocks, stopped=stopped, starts=[(0, 0)], accepted=[1], wall_s=1.0, draft_s=0.0, book_s=0.0)
    return NS(tokens=[0] * tokens, passes=prefill + sum(p for _, p in blocks), stats=stats)


def test_answer_blocks_leave_out_the_block_holding_end_of_text():
    stopped = fake_result(9, [(2, 3), (4, 5), (4, 5)], True)  # the stop in the third block
    assert bench.answer_blocks(stopped) == (6, 1 + 3 + 5)
    assert bench.answer_blocks(fake_result(5, [(2, 3), (4, 5)], False)) == (5, 9)  # cut, no stop: all
    assert bench.answer_blocks(fake_result(1, [(2, 3)], True)) == (0, 1)  # only the prefill
    m = bench.metrics([stopped, fake_result(5, [(2, 3), (4, 5)], False)])
    assert (m["tokens"], m["passes"], m["answer_tokens"], m["answer_passes"]) == (14, 23, 11, 18)
    ex = dict(m, passes=46, answer_passes=27, denoise=2, wall=1.0)
    r = bench.row(NS(name="t"), 0.0, "spot", 4, m, ex)
    assert (r.fewer_passes, r.answer_fewer_passes, r.answer_passes_per_token) == (2.0, 1.5, 18 / 11)


def test_goal_rows_on_answer_blocks_read_the_answer_column():
    rows = [
        fake_row("t", "0", d, 8, f, answer=a)
        for d, f, a in (
            ("spot", 4.0, 2.0),
            ("calibrated", 2.0, 2.0),
            ("confidence", 2.0, 1.0),
            ("oracle-order", 5.0, 3.0),
        )
    ]
    assert bench_report.goal_rows(rows) == [["t", "0", 8, 4.0, 2.0, "yes", 2.0, "yes", 0.75, "yes"]]
    assert bench_report.goal_rows(rows, "answer_fewer_passes") == [["t", "0", 8, 2.0, 1.0, "no", 2.0, "yes", 0.5, "no"]]


def test_rows_have_a_field_per_column():
    assert len(bench.Row._fields) == len(bench_report.COLUMNS)


def test_headline_judges_each_goal_on_its_own_target():
    from types import SimpleNamespace as NS

    from spotref.load.targets import DEFAULT_TARGET

    setups = [NS(name=DEFAULT_TARGET, model=NS(block_size=32)), NS(name="b16", model=NS(block_size=16))]
    rows = [
        fake_row(DEFAULT_TARGET, "0", "spot", 64, 7.0),
        fake_row("b16", "0", "spot", 64, 9.0),
        fake_row(DEFAULT_TARGET, "0", "spot", "auto=4", 2.0, speed=1.6),
        fake_row("b16", "0", "spot", "auto=1", 1.0, speed=0.5),
    ]
    lines = bench_report.headline(rows, setups)
    assert (
        len([l for l in lines if "6.8x" in l]) == 1 and "7.00x fewer passes than exact (goal >= 6.8x: met)" in lines[0]
    )
    assert "1.60x exact (goal >= 1.5x: met)" in lines[1] and lines[2].endswith("0.50x exact")


def test_ceiling_rows_take_the_best_budget():
    rows = [
        fake_row("t", "0", "oracle-order", 4, 2.0, speed=0.9),
        fake_row("t", "0", "oracle-order", 64, 2.2, speed=0.3),
        fake_row("t", "0", "calibrated", 4, 1.9),
        fake_row("t", "0", "calibrated", 64, 1.1),
        fake_row("t", "0", "confidence", 4, 1.0),
        fake_row("t", "0", "confidence", 64, 2.2),
    ]
    assert bench_report.ceiling_rows(rows) == [["t", "0", "2.00 (N=64)", "2.00 (N=4)", "2.20 (N=64)", "0.90 (N=4)"]]


def test_report_table_parses_back(tmp_path):
    """``--replot`` redraws from the written table: the parsed rows are the rows written."""
    rows = [
        fake_row("t", "0", "exact", "-", 1.0),
        fake_row("t", "0", "spot", 4, 1.75),
        fake_row("t", "0", "spot", "auto=2", 1.5),
    ]
    text = "intro\n\n" + bench_report.table(bench_report.COLUMNS, rows) + "\n\n## Goals\n| x | y |\n"
    back = bench.rows_from_report(text)
    assert [r[:4] for r in back] == [r[:4] for r in rows]
    assert [r.fewer_passes for r in back] == pytest.approx([r.fewer_passes for r in rows], rel=1e-3)
    assert [r.answer_fewer_passes for r in back] == pytest.approx([r.answer_fewer_passes for r in rows], rel=1e-3)


def test_an_older_report_without_answer_columns_still_parses():
    old = [c for c in bench_report.COLUMNS if not c.startswith("answer")]
    text = bench_report.table(old, [["t", "0", "spot", 4, 0.5, 2.0, 2.1, 2.2, 100.0, 0.5, "10%"]])
    (r,) = bench.rows_from_report(text)
    assert (r.N, r.fewer_passes, r.commits_per_round, r.bookkeeping) == (4, 2.0, 2.2, "10%")
    assert math.isnan(r.answer_fewer_passes) and bench.stability_from_report(text) == {}


@pytest.mark.slow
def test_gain_figure_is_redrawn_from_the_report(tmp_path):
    pytest.importorskip("matplotlib")
    rows = [
        fake_row(t, "0", d, n, f)
        for t, f in (("a", 2.0), ("b", 3.0))
        for d in bench_report.GAIN_DRAFTERS
        for n in (4, 64)
    ]
    stab = [["a", "0", 10, 0.6, 0.8, 0.6], ["b", "0", 10, 0.9, 0.95, 0.92]]
    text = (
        bench_report.table(bench_report.COLUMNS, rows)
        + "\n\n"
        + bench_report.table(bench_report.STABILITY_COLUMNS, stab)
        + "\n"
    )
    assert bench.stability_from_report(text) == {("a", "0"): 0.6, ("b", "0"): 0.9}
    out = tmp_path / "r.md"
    out.write_text(text)
    assert bench.main(["--replot", "--out", str(out)]) == 0
    assert (tmp_path / "r.png").stat().st_size > 0 and (tmp_path / "r-stability.png").stat().st_size > 0


def test_replot_with_other_reports_spans_their_targets(tmp_path, monkeypatch):
    """``--replot --with``: the gain figure gets every report's rows and stability points."""
    seen = {}
    monkeypatch.setattr(bench, "gain_plot", lambda rows, stab, path: seen.update(rows=rows, stab=stab))
    for t, f, x in (("a", 2.0, 0.6), ("b", 3.0, 0.9)):
        rows = [fake_row(t, "0", d, 64, f) for d in bench_report.GAIN_DRAFTERS]
        (tmp_path / f"{t}.md").write_text(
            bench_report.table(bench_report.COLUMNS, rows)
            + "\n\n"
            + bench_report.table(bench_report.STABILITY_COLUMNS, [[t, "0", 10, x, 0.9, x]])
            + "\n"
        )
    assert bench.main(["--replot", "--out", str(tmp_path / "a.md"), "--with", str(tmp_path / "b.md")]) == 0
    assert {r.target for r in seen["rows"]} == {"a", "b"} and seen["stab"] == {("a", "0"): 0.6, ("b", "0"): 0.9}
    assert bench.main(["--out", str(tmp_path / "a.md"), "--with", str(tmp_path / "b.md")]) == 2  # not without --replot
    assert bench.main(["--replot", "--out", str(tmp_path / "a.md"), "--with", str(tmp_path / "nope.md")]) == 2


def test_replot_reads_every_sets_table_and_names_a_report_without_one(tmp_path, capsys):
    """A report holds one SPOT-Sets table per target: all are read back; a file with no
    benchmark table is named in the one-line error."""
    sets = lambda t: bench_report.table(bench_sets.SET_COLUMNS, [[t, "0", "0.9", "spot", 64] + [1.0] * 7 + [""]])
    text = sets("a") + "\n\nprose between the targets\n\n" + sets("b") + "\n"
    assert [r.target for r in bench_sets.rows_from_report(text)] == ["a", "b"]
    (tmp_path / "a.md").write_text(text)
    (tmp_path / "empty.md").write_text("# no tables here\n")
    capsys.readouterr()
    assert bench.main(["--replot", "--out", str(tmp_path / "a.md"), "--with", str(tmp_path / "empty.md")]) == 2
    err = capsys.readouterr().err
    assert "empty.md" in err and "no benchmark table" in err and "Traceback" not in err


@pytest.mark.slow
def test_costmodel_table(capsys):
    from workbench.bench import costmodel

    assert costmodel.main(["stdlib-b32", "--drafter", "calibrated", "--temperature", "1"]) == 0
    out = capsys.readouterr().out
    assert out.count("\n|") == len(costmodel.BUDGETS) + 1 and "budget='auto' picks N = " in out


@pytest.mark.slow
@pytest.mark.parametrize("calls,budgets", [("level", "2,16"), ("root", "4")])
def test_costmodel_profile(capsys, calls, budgets):
    """Where a round's time goes: one row per N, each part measured."""
    from workbench.bench import costmodel

    argv = ["stdlib-b32", "--profile", "--prompts", "1", "--new-tokens", "8", "--calls", calls, "--budgets", budgets]
    assert costmodel.main(argv) == 0
    out = capsys.readouterr().out
    rows = bench_report.parse_table(out, costmodel.PROFILE_COLUMNS[:2])
    assert [int(r["N"]) for r in rows] == [int(n) for n in budgets.split(",")]
    assert all(float(r["target ms"]) > 0 and float(r["order-model calls ms"]) > 0 for r in rows)
    assert f"({calls} calls)" in out


@pytest.mark.parametrize("budgets", ["0", "2,x", ""])
def test_costmodel_bad_budgets_name_the_option(capsys, budgets):
    from workbench.bench import costmodel

    with pytest.raises(SystemExit):
        costmodel.main(["stdlib-b32", "--profile", "--budgets", budgets])
    assert "argument --budgets: " in capsys.readouterr().err


@pytest.mark.slow
def test_gpu_projection_roofline(capsys):
    """SDAR-8B on one H200: memory-bound (flat) up to about 165 tokens per forward, then linear."""
    from workbench.bench import costmodel

    t = {N: costmodel.roofline_ms(N) for N in (1, 2, 4, 5, 8, 64)}
    assert 3.0 < t[1] < 3.4 and t[1] == t[2] == t[4] == t[5] and t[8] > t[5]
    assert t[64] / t[8] == pytest.approx(8.0)
    assert costmodel.main(["stdlib-b32", "--gpu-projection"]) == 0
    out = capsys.readouterr().out
    rows = bench_report.parse_table(out, ["N", "t(N)/t(1)"])
    assert [int(r["N"]) for r in rows] == list(costmodel.PROJECT_BUDGETS) and "a projection" in out
    assert float(rows[0]["speed-up spot T=0"]) == 1.0


def test_fused_store_rows():
    from workbench.bench import costmodel

    model = tiny_model(V=61, B=4, init=1.0, seed=3)
    rows = costmodel.fused_store_rows(model, [[1, 2, 3, 4, 5]], 12, None, 1, repeats=1)
    (off, p_off, _), (on, p_on, _) = rows
    assert (off, on) == ("off", "on") and p_on < p_off  # one pass fewer per block


def test_drafter_split_adds_up():
    from workbench.bench import costmodel

    model = tiny_model(V=61, B=8, init=1.0, seed=3)
    d = SpotDrafter(OrderModel(8))
    split = costmodel.drafter_split(lambda: spotref.generate(model, [1, 2, 3], 16, drafter=d, budget=8, depth=4))
    assert set(split) == {"order-model calls", "drafter inputs", "tree growth"}
    assert sum(split.values()) == pytest.approx(1.0) and split["order-model calls"] > 0.05


def test_prompts_for_counts_the_prompts_it_leaves_out():
    """Texts shorter than --prompt-tokens are left out with a warning; the rest are today's prompts."""
    import warnings

    import spotref
    from spotref.record.prompts import prompts_for
    from workbench.bench.corpus import heldout_code

    t = spotref.load_target("stdlib-b32")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the test split drops nothing
        test = prompts_for(t, 8, "test", 64)
    assert test == [t.encode(x)[:64] for x in heldout_code(8, seed=1, split="test")]
    with pytest.warns(UserWarning, match="stdlib-b32: 10 of 120 train prompts are shorter than 64 tokens"):
        train = prompts_for(t, 120, "train", 64)
    assert len(train) == 110 and {len(p) for p in train} == {64}


def test_prompts_for_takes_questions_and_chat_prompts_whole():
    from spotref.load.tokenizer import ASSISTANT
    from spotref.record.prompts import prompts_for

    chat = "<|im_start|>user\nWhat is 2 + 3?<|im_end|>\n" + ASSISTANT
    pairs = [("Tom has 3 apples and buys 4 more. How many?", 7), (chat, None), ("x" * 10, None), ("y" * 3, None)]
    t = NS(name="t", heldout=lambda n, seed, split: pairs[:n], encode=lambda s: [ord(c) for c in s])
    with pytest.warns(UserWarning, match="t: 1 of 4 test prompts are shorter than 5 tokens"):
        got = prompts_for(t, 4, "test", 5)
    assert got == [t.encode(pairs[0][0]), t.encode(chat), t.encode("x" * 5)]
