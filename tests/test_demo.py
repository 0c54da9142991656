from spotref.tools.cli import main


def test_demo_prints_exact_and_spot_side_by_side(capsys):
    assert main(["demo", "--model", "random", "--prompts", "2", "--gen-length", "40", "--fused-store",
                 "--no-auto", "--budgets", "8"]) == 0
    out = capsys.readouterr().out
    assert "every output identical to exact decoding: yes" in out
    rows = [line for line in out.splitlines() if line.startswith("|") and "decoder" not in line and "---" not in line]
    assert [r.split("|")[1].strip() for r in rows] == ["exact", "confidence N=8"]
    exact_passes, spot_passes = (int(r.split("|")[3]) for r in rows)
    assert spot_passes <= exact_passes


def test_demo_bad_argument_is_one_clear_line(capsys):
    assert main(["demo", "--model", "random", "--prompts", "1", "--temperature", "-1"]) == 2
    err = capsys.readouterr().err
    assert "spotref demo: error: temperature must be" in err and "Traceback" not in err
