"""``spotref conform MODULE:FUNCTION``: the conformance suite on a decoder named on the command line."""

import textwrap

import pytest

from spotref.cli.main import main

DECODERS = """
import spotref

def correct(model, prompt, n, **kw):
    return spotref.generate(model, prompt, n, **kw)

def lossy(model, prompt, n, **kw):  # one token short whenever it decodes two or more
    got = spotref.generate(model, prompt, n, **kw)
    got.tokens = got.tokens[:-1] if len(got.tokens) > 1 else got.tokens
    return got
"""


@pytest.fixture
def decoders(tmp_path, monkeypatch):
    (tmp_path / "my_decoders.py").write_text(textwrap.dedent(DECODERS))
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))


def test_a_correct_decoder_passes_with_a_summary_of_what_was_covered(decoders, capsys):
    assert main(["conform", "my_decoders:correct", "--max-examples", "12", "--seed", "3"]) == 0
    out = capsys.readouterr().out
    assert "conform: 10 / 12 cases" in out and "conform: passed, 12 cases" in out
    assert "  family: " in out and "  happened: " in out and "decoded" in out


def test_a_lossy_decoder_fails_with_the_first_difference(decoders, capsys):
    assert main(["conform", "my_decoders:lossy", "--max-examples", "20", "--seed", "0"]) == 1
    assert "conform: FAILED (seed 0): " in capsys.readouterr().out


def test_a_time_budget_stops_the_run(decoders, capsys):
    assert main(["conform", "my_decoders:correct", "--minutes", "1e-9"]) == 0
    assert "time is up" in capsys.readouterr().out


@pytest.mark.parametrize(
    "target, message",
    [
        ("my_decoders", "target must be MODULE:FUNCTION"),
        ("no_such_module:f", "no module 'no_such_module'"),
        ("my_decoders:missing", "has no function 'missing'"),
    ],
)
def test_a_bad_target_is_one_line_and_status_2(decoders, capsys, target, message):
    assert main(["conform", target]) == 2
    assert message in capsys.readouterr().err
