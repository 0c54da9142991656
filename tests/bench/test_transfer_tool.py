"""``python -m workbench.bench.transfer`` on tiny settings: one prompt, a few tokens, two targets
of two block sizes, two drafters and the baselines; its files, its tables, its refusals, and
that a decode differing from exact decoding stops it."""

import json

import pytest

from workbench.bench import bench_run, transfer

TINY = "--targets gsm-b16,stdlib-b32 --drafters gsm-b32,stdlib-b16,confidence,calibrated --prompts 1"
TINY += " --new-tokens 8 --budgets 4 --temperatures 0,1 --depth 2"


@pytest.mark.slow
def test_a_tiny_transfer_run_writes_its_table_and_figure(tmp_path, capsys):
    assert transfer.main([*TINY.split(), "--out", str(tmp_path)]) == 0
    text = (tmp_path / "results-transfer.md").read_text()
    assert "Share of the own drafter's gain kept, N = 4, T = 1" in text and "Partial" not in text
    assert "Own drafters: gsm-b16: gsm-b16, stdlib-b32: stdlib-b32" in text
    cells = json.loads((tmp_path / "results-transfer.json").read_text())
    rows = {(c["row"], c["target"], c["T"]) for c in cells}
    for row in ("gsm-b32", "stdlib-b16", "confidence", "calibrated", "own"):
        for target in ("gsm-b16", "stdlib-b32"):
            assert {(row, target, 0.0), (row, target, 1.0)} <= rows
    assert all(c["passes"] >= 1 and c["exact"] >= c["passes"] // 4 for c in cells)
    own = [c for c in cells if c["row"] == "own" and c["target"] == "gsm-b16"]
    assert own and all(c["exact"] / c["passes"] > 1 for c in own)  # the own drafter saves passes
    if transfer.pyplot() is not None:
        assert (tmp_path / "results-transfer.png").stat().st_size > 0


@pytest.mark.slow
def test_a_decode_differing_from_exact_decoding_stops_the_run(tmp_path, monkeypatch):
    monkeypatch.setattr(bench_run, "first_divergence", lambda *a: "token 3")
    with pytest.raises(SystemExit, match="OUTPUT DIFFERS from exact decoding at token 3"):
        transfer.run(transfer_namespace(tmp_path))


def transfer_namespace(tmp_path):
    import argparse

    p = argparse.ArgumentParser()
    transfer.add_arguments(p)
    args = p.parse_args([*TINY.replace("gsm-b16,stdlib-b32", "stdlib-b32").split(), "--out", str(tmp_path)])
    args.argv = []
    return args


def test_update_docs_with_out_is_refused_before_any_decode(capsys):
    assert transfer.main(["--update-docs", "--out", "x"]) == 2
    assert "--update-docs writes the shipped report" in capsys.readouterr().err


@pytest.mark.parametrize("option", ["--targets", "--drafters"])
def test_an_unknown_target_or_drafter_is_refused_by_name(option, capsys):
    with pytest.raises(SystemExit):
        transfer.main([option, "nope"])
    assert "'nope': choose from" in capsys.readouterr().err
