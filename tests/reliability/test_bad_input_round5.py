"""Bad input, round 5: the surfaces changed since round 4 began (``spotref show``, ``--trace``,
``spotref conform``, ``spotref calibrate-sets``, ``train-target --decode-states`` /
``--suffix-results``, ``load_drafter(..., strict=...)``, the universal drafter, ``python -m
spotref``). Each case names its error type and its culprit and failed on the code before it."""

import os
import textwrap

import pytest

import spotref
from spotref.calib.calibrate import calibrate_sets
from spotref.cli import main as spotref_cli
from spotref.files import check_writable
from workbench import cli as workbench_cli

NO_MODEL = "no-such-checkpoint-dir"  # were the model loaded first, this is what would be refused


def main(argv) -> int:
    """The command line ``argv[0]`` belongs to: python -m workbench's, else spotref's."""
    return (workbench_cli.main if argv and argv[0] in workbench_cli.COMMANDS else spotref_cli.main)(argv)


def one_line(capsys, argv, status: int = 2) -> str:
    assert main([str(a) for a in argv]) == status
    err = capsys.readouterr().err
    assert "Traceback" not in err and err.count("\n") == 1, err
    return err


# ---- writes: a pipe or a device is no file to replace -------------------------------------------


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no named pipes")
def test_an_output_that_is_a_pipe_or_a_device_is_refused(tmp_path, capsys, monkeypatch):
    """``--trace /dev/null`` passed the check, and the atomic write's rename would have replaced
    the device with a regular file (as a superuser); a named pipe likewise."""
    monkeypatch.chdir(tmp_path)
    os.mkfifo("pipe.json")
    for path in ("/dev/null", "pipe.json"):
        with pytest.raises(ValueError, match="is not a regular file \\(a pipe, a device or a socket\\)"):
            check_writable(path)
        err = one_line(capsys, ["generate", "--model", NO_MODEL, "--prompt-ids", "1", "--trace", path])
        assert f"{path} is not a regular file" in err and NO_MODEL not in err
    assert os.path.exists("/dev/null") and not os.path.isfile("/dev/null")


# ---- load_drafter's strict and directory ----------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs, culprit",
    [
        (dict(strict="no"), "strict must be True or False, got 'no'"),  # "no" loaded it strict
        (dict(strict=None), "strict must be True or False, got None"),  # taken as not strict
        (dict(directory=123), "directory must be None or a path"),  # pathlib's TypeError
    ],
)
def test_load_drafter_checks_strict_and_directory(kwargs, culprit):
    with pytest.raises(ValueError, match=culprit):
        spotref.load_drafter("gsm-b16", **kwargs)


# ---- calibrate-sets: the Python API's changes checked as the parser checks them ------------------


@pytest.mark.parametrize(
    "target, changes, culprit",
    [
        (123, {}, "target must be a bundled target's name or a spotref Target, got int"),  # AttributeError
        ("stdlib-b32", dict(prompts=0), "prompts must be an int in [1, 32], got 0"),  # "heldout: n must be"
        ("stdlib-b32", dict(steps=0), "steps must be an int in [1, inf], got 0"),  # returned unfitted
        ("stdlib-b32", dict(new_tokens=0), "new_tokens must be an int in [1, inf], got 0"),
        ("stdlib-b32", dict(temperatures=[float("nan")]), "temperatures: a temperature must be a finite number"),
    ],
)
def test_calibrate_sets_checks_its_arguments_before_any_recording(monkeypatch, target, changes, culprit):
    monkeypatch.setattr("spotref.calib.calibrate.record_calibration", lambda *a: pytest.fail("recorded"))
    with pytest.raises(ValueError) as e:
        calibrate_sets("stdlib-b32", target, **changes)
    assert culprit in str(e.value)


def test_calibrate_sets_names_a_drafter_trained_without_a_set_head(capsys):
    """The universal drafter was called "a checkpoint from before SPOT-Sets"."""
    err = one_line(capsys, ["calibrate-sets", "universal", "stdlib-b32"])
    assert "the drafter universal has no set head (it was trained without one" in err


# ---- spotref conform ------------------------------------------------------------------------------

DECODERS = """
def opens(model, prompt, n, **kw):
    open("/nonexistent/spotref-round5")
"""


@pytest.fixture
def decoders(tmp_path, monkeypatch):
    (tmp_path / "round5_decoders.py").write_text(textwrap.dedent(DECODERS))
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))


@pytest.mark.parametrize(
    "target, culprit",
    [
        # an OSError has a filename and no lineno: describing it was an AttributeError traceback
        ("round5_decoders:opens", "the decoder raised FileNotFoundError: [Errno 2] No such file or directory"),
        # a builtin raises in no Python line: conform.py's own call was named as the place
        ("os:getcwd", "the decoder raised TypeError: posix.getcwd() takes no keyword arguments\n"),
    ],
)
def test_conform_describes_what_the_decoder_raised_in_one_line(decoders, capsys, target, culprit):
    assert main(["conform", target, "--max-examples", "1"]) == 1
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err and culprit in out and "conform.py" not in out


def test_conform_refuses_a_path_for_a_module(capsys):
    """``../x:g`` was importlib's TypeError about a relative import without a package."""
    err = one_line(capsys, ["conform", "../x:g"])
    assert "'../x' is not a module name" in err


# ---- train-target: the block sizes before the run directory is written ----------------------------


@pytest.mark.parametrize(
    "extra, culprit",
    [
        (["--block-size", "100000"], "got 100000"),
        (["--family", "llada", "--rows-per-doc", "--decode-states", "1", "--block-size", "100000"], "got 100000"),
        (["--mix-blocks", "4,7"], "got 7"),
    ],
)
def test_train_target_checks_block_sizes_before_writing_the_run(tmp_path, monkeypatch, capsys, extra, culprit):
    """Refused after the corpus and the tokenizer were built, leaving runs/NAME/tokenizer.json."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("workbench.train.train_loop.make_tokenizer", lambda *a: pytest.fail("tokenizer built"))
    err = one_line(capsys, ["train-target", "--name", "x", "--steps", "1", *extra])
    assert "--seq-len 256 must be a multiple of every block size" in err and culprit in err
    assert not (tmp_path / "runs").exists()


# ---- spotref show's page: a token's text cannot end or reopen the page's script ---------------------


def test_the_page_holds_no_angle_bracket_inside_its_data(tmp_path):
    """Only "</" was escaped: a token whose text is "<!--<script>" put the parser in HTML's escaped
    script states, where the data element's own "</script>" no longer ends it."""
    import json

    from helpers import tiny_model

    from spotref.cli.show_html import page

    trace = spotref.generate(tiny_model(V=61, B=4, init=1.0), [3, 1, 4], 4, trace=True).trace
    text = {t: "<!--<script>" if t % 2 else "</script><b>" for t in range(61)}
    html = page(trace.with_pieces(lambda ids: text[ids[0]]))
    blob = html.split('<script id="data" type="application/json">')[1].split("</script>")[0]
    assert "<" not in blob
    words = {c["w"] for d in json.loads(blob)["decodes"] for c in d["cells"]}
    assert words and words <= set(text.values())
