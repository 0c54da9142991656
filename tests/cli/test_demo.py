import pytest

from spotref.cli.main import main


@pytest.mark.slow
def test_demo_prints_exact_and_spot_side_by_side(capsys):
    assert (
        main(
            [
                "demo",
                "--model",
                "random",
                "--prompts",
                "2",
                "--gen-length",
                "40",
                "--fused-store",
                "--no-auto",
                "--budgets",
                "8",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "every output identical to exact decoding: yes" in out
    flat = " ".join(out.split())  # the legend is wrapped at 100 columns
    assert "fewer passes: exact decoding's passes over this row's" in flat and "A verify pass of N states costs" in out
    rows = [line for line in out.splitlines() if line.startswith("|") and "decoder" not in line and "---" not in line]
    assert [r.split("|")[1].strip() for r in rows] == ["exact", "confidence N=8"]
    exact_passes, spot_passes = (int(r.split("|")[3]) for r in rows)
    assert spot_passes <= exact_passes


@pytest.mark.parametrize("model", ["random", "gsm-b32"])  # gsm-b32: its SPOT drafter runs for budget="auto"
def test_demo_bad_argument_is_one_clear_line(capsys, model):
    with pytest.raises(SystemExit) as e:  # refused as parsed, before the model is set up
        main(["demo", "--model", model, "--prompts", "1", "--temperature", "-1"])
    err = capsys.readouterr().err
    assert e.value.code == 2 and "spotref demo: error: argument --temperature: must be in" in err
    assert "Traceback" not in err


def test_demo_table_counts_answer_blocks_apart():
    """The answer columns leave out the block holding end-of-text (and its passes)."""
    from types import SimpleNamespace as NS

    from spotref.cli import demo

    def result(passes, blocks, stopped):
        stats = dict(wall_s=1.0, committed=[1] * 4, blocks=blocks, stopped=stopped)
        return NS(tokens=[0] * sum(n for n, _ in blocks), passes=passes, stats=stats)

    runs = {
        "exact": [result(1 + 33 + 33, [(32, 33), (32, 33)], True)],
        "spot N=8": [result(1 + 9 + 5, [(32, 9), (32, 5)], True)],
    }
    rows = demo.summary_rows(runs)
    assert [dict(zip(demo.COLUMNS, r))["answer tokens"] for r in rows] == [32, 32]
    spot = dict(zip(demo.COLUMNS, rows[1]))
    assert spot["fewer passes"] == 67 / 15 and spot["answer fewer passes"] == 34 / 10
    assert spot["answer passes/token"] == 10 / 32


@pytest.mark.slow
def test_demo_shows_a_held_out_prompt_and_its_output(capsys):
    assert (
        main(
            [
                "demo",
                "--model",
                "stdlib-b32",
                "--prompts",
                "1",
                "--gen-length",
                "16",
                "--no-auto",
                "--budgets",
                "4",
                "--show",
                "1",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "--- held-out prompt 1 ---" in out and "--- output (exact decoding, " in out
    assert "--- spot N=4: identical, " in out and "expected answer" not in out  # code: no answer


def test_demo_show_grades_a_math_answer(capsys):
    from dataclasses import replace
    from types import SimpleNamespace as NS

    from spotref.cli import demo

    decode = lambda ids: "2 + 3 = 5\n#### " + "".join(map(str, ids))
    env = demo.Setup("math", None, [[1]], stops=[0], texts=["Q: 2 + 3?"], answers=[5], decode=decode)
    runs = {
        "exact": [NS(tokens=[5, 0], passes=9)],
        "spot N=4": [NS(tokens=[5, 0], passes=4)],
        "bad": [NS(tokens=[6, 0], passes=4)],
    }
    demo.show(env, 0, runs)
    out = capsys.readouterr().out
    assert "expected answer: 5; the model's: 5 (right)" in out and "exact decoding, 9 passes" in out
    assert "spot N=4: identical, 4 passes" in out and "bad: DIFFERENT" in out
    demo.show(replace(env, answers=[7]), 0, runs)
    assert "the model's: 5 (wrong)" in capsys.readouterr().out


def test_demo_gen_length_default_leaves_a_math_solution_room():
    """Without --gen-length a math target (held-out answers) gets 256 new tokens, room for a
    whole solution and its '#### N' line; other targets and the random model get 64."""
    from dataclasses import replace

    from spotref.cli import demo

    def length(argv, answers):
        env = replace(demo.random_setup(1, 0), answers=answers)
        return demo.gen_length(demo.DemoOptions.parse(demo.add_arguments, argv), env)

    assert length([], [12, 7]) == demo.MATH_LENGTH == 256
    assert length([], [None]) == demo.TEXT_LENGTH == 64
    assert length([], None) == 64
    assert length(["--gen-length", "40"], [12]) == 40
    canvas = lambda argv: demo.gen_length(
        demo.DemoOptions.parse(demo.add_arguments, argv), replace(demo.random_setup(1, 0), answers=[12], model=llada)
    )
    llada = type("Canvas", (), {"family": "llada"})()  # a whole-canvas model: room within its trained canvas
    assert canvas([]) == 160 and canvas(["--gen-length", "40"]) == 40


@pytest.mark.slow
def test_demo_on_a_math_target_finishes_its_answer(capsys):
    """The default length on gsm-b16: the shown solution reaches its '#### N' line."""
    assert main(["demo", "--model", "gsm-b16", "--prompts", "1", "--no-auto", "--budgets", "8"]) == 0
    out = capsys.readouterr().out
    assert "at most 256 new tokens" in out and "the model's: -" not in out
    assert "--- spot N=8: identical, " in out


@pytest.mark.slow
@pytest.mark.parametrize("name, extra", [("gsm-llada", []), ("gsm-dream", ["--no-auto"])])
def test_demo_runs_on_a_bundled_whole_canvas_target_with_its_own_drafter(capsys, name, extra):
    """``spotref demo --model gsm-llada``: its default length fits its trained canvas (160), its
    shipped SPOT drafter is found, and SPOT's output is exact decoding's (32 tokens decoded)."""
    from spotref.cli import demo

    options = demo.DemoOptions.parse(demo.add_arguments, ["--model", name])
    assert demo.gen_length(options, demo.target_setup(name, 1)) == 160
    argv = ["demo", "--model", name, "--prompts", "1", "--budgets", "8", "--width", "8", "--gen-length", "32"]
    assert main([*argv, *extra]) == 0
    out = capsys.readouterr().out
    assert "--- spot N=8: identical, " in out and "every output identical to exact decoding: yes" in out
    assert "at most 32 new tokens" in out and (extra or "--- spot auto (N=" in out)


@pytest.mark.slow
def test_demo_runs_every_pass_at_a_fixed_width_and_says_what_a_pass_costs(capsys):
    assert (
        main(["demo", "--model", "random", "--prompts", "1", "--gen-length", "24", "--width", "8", "--budgets", "4,8"])
        == 0
    )
    out = capsys.readouterr().out
    assert "every output identical to exact decoding: yes" in out
    assert "A verify pass of N states costs t(N) / t(1) = 1.00 at N = 8 on this machine (width 8" in out
    assert main(["demo", "--model", "random", "--prompts", "1", "--width", "4", "--budgets", "8"]) == 2
    assert "budget 8 exceeds the verify width 4" in capsys.readouterr().err  # api.check_width, before any forward
