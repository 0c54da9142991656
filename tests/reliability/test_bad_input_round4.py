"""Bad input on the surfaces added since the last reliability round: trace files (``spotref.trace``,
``spotref show``, ``--trace`` of ``generate`` / ``demo``), ``spotref conform`` and LLaDA's rule
options. Each case names its error type and its culprit; each refusal that must come before any
model loads is run with a model that does not exist, or checked to write nothing."""

import json
import os
import textwrap
import zipfile

import pytest
import torch
from helpers import set_in, tiny_model

import spotref
from spotref.cli.main import main
from spotref.load.targets import TARGETS_DIR
from spotref.trace.fmt import Trace

NO_MODEL = "no-such-checkpoint-dir"  # were the model loaded first, this is what would be refused


@pytest.fixture(scope="module")
def trace_file(tmp_path_factory):
    """A real trace (a tiny SDAR model, exact decoding), as a dict and its file."""
    trace = spotref.generate(tiny_model(V=61, B=4, init=1.0), [3, 1, 4], 4, trace=True).trace
    return trace.save(tmp_path_factory.mktemp("trace") / "t.json")


def edited(trace_file, tmp_path, edit) -> str:
    """A copy of the trace with ``edit(data)`` applied."""
    data = json.loads(trace_file.read_text())
    edit(data)
    path = tmp_path / "edited.json"
    path.write_text(json.dumps(data))
    return str(path)


def one_line(capsys, argv, status: int = 2) -> str:
    assert main([str(a) for a in argv]) == status
    err = capsys.readouterr().err
    assert "Traceback" not in err and err.count("\n") == 1, err
    return err


# ---- Trace.load: ValueError naming the file and the problem ---------------------------------------

FIRST = ("decodes", 0)


@pytest.mark.parametrize(
    "text, culprit",
    [
        ("[" * 100_000 + "]" * 100_000, "RecursionError"),  # was a RecursionError traceback
        ('{"format": "spotref-trace", "version": ' + "9" * 5000 + "}", "digits"),  # named no file
    ],
)
def test_a_trace_json_python_cannot_hold_is_refused_naming_the_file(tmp_path, text, culprit):
    path = tmp_path / "bad.json"
    path.write_text(text)
    with pytest.raises(ValueError, match=culprit) as e:
        Trace.load(path)
    assert str(path) in str(e.value) and "not a trace spotref writes" in str(e.value)


@pytest.mark.parametrize(
    "path, edit, culprit",
    [
        (("version",), True, "trace version True"),  # True == 1 was read as version 1
        (("version",), 1.0, "trace version 1.0"),
        ((*FIRST, "passes"), -1, "'passes' must be an int >= 0, got -1"),
        ((*FIRST, "vocab_size"), -1, "'vocab_size' must be an int >= 1"),
        ((*FIRST, "blocks", 0, "index"), -3, "'index' must be an int >= 0"),
        ((*FIRST, "blocks", 0, "rounds", 0, "step"), -7, "'step' must be an int >= 0"),
        ((*FIRST, "blocks", 0, "rounds", 0, "wall_s"), -1, "'wall_s' must be a number >= 0"),
    ],
)
def test_a_trace_field_out_of_range_is_refused_by_name(trace_file, tmp_path, path, edit, culprit):
    with pytest.raises(ValueError, match=culprit.replace("(", r"\(")):
        Trace.load(edited(trace_file, tmp_path, set_in(path, edit)))


TREE = (*FIRST, "blocks", 0, "rounds", 0, "tree")


@pytest.mark.parametrize(
    "path, edit, culprit",
    [  # each was read; show drew it, replay took the rule's defaults, or drawing raised deep inside
        ((*FIRST, "rule", "temperature"), "hot", "rule: 'temperature' must be a number >= 0, got 'hot'"),
        ((*FIRST, "rule", "seed"), "x", "rule: 'seed' must be an int >= 0, got 'x'"),
        ((*FIRST, "rule"), {}, "rule: no field 'temperature'"),
        ((*FIRST, "family"), "bogus", "'family' must be one of sdar, llada, llada2, dream, got 'bogus'"),
        ((*TREE, "commits"), [5], "tree: 'commits' of node 0 must be a list of [position, token] pairs"),
        ((*TREE, "commits"), [[[0, "a"]]], "tree: 'commits' of node 0"),
        ((*TREE, "probs"), ["x"], "tree: 'probs' must hold numbers >= 0 (or be null), node 0 has 'x'"),
        ((*TREE, "probs"), [None], "tree: 'probs' must hold numbers >= 0 (or be null), node 0 has None"),
    ],
)
def test_a_trace_rule_or_tree_of_the_wrong_type_is_refused_by_name(trace_file, tmp_path, path, edit, culprit):
    with pytest.raises(ValueError) as e:
        Trace.load(edited(trace_file, tmp_path, set_in(path, edit)))
    assert culprit in str(e.value)


def test_show_refuses_a_tree_it_cannot_draw_in_one_line(trace_file, tmp_path, capsys):
    path = edited(trace_file, tmp_path, set_in((*TREE, "probs"), [None]))  # was a TypeError traceback
    err = one_line(capsys, ["show", path, "--out", tmp_path / "o", "--pictures", "round", "--round", "0:0"])
    assert "'probs' must hold numbers" in err and not (tmp_path / "o").exists()


def test_the_trace_families_are_the_decoders():
    from spotref.spec.decode import FAMILIES
    from spotref.trace.fmt import TRACE_FAMILIES

    assert TRACE_FAMILIES == FAMILIES


@pytest.mark.parametrize("path, culprit", [(None, "got None"), ("", "got ''"), (b"t.json", "got b't.json'")])
def test_a_trace_path_that_is_not_a_path_is_a_value_error(path, culprit):
    with pytest.raises(ValueError, match=f"a trace path must be a non-empty str or path, {culprit}"):
        Trace.load(path)  # None and bytes were pathlib's TypeError; '' read the working directory


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no named pipes")
def test_a_pipe_or_a_device_is_refused_not_read(tmp_path):
    os.mkfifo(tmp_path / "fifo.json")  # reading it waited forever; /dev/zero grew without bound
    for path, what in [(tmp_path / "fifo.json", "not a regular file"), (tmp_path, "a directory")]:
        with pytest.raises(ValueError, match=what):
            Trace.load(path)


def test_adding_a_trace_and_something_else_is_a_type_error(trace_file):
    with pytest.raises(TypeError, match="unsupported operand"):
        Trace.load(trace_file) + 5  # was an AttributeError from inside __add__


# ---- spotref show: every refusal before anything is written ---------------------------------------


def test_show_refuses_a_missing_round_before_writing_any_picture(trace_file, tmp_path, capsys):
    out = tmp_path / "o"
    err = one_line(capsys, ["show", trace_file, "--out", out, "--round", "99:0"])
    assert "--round 99:0" in err and not out.exists()  # page.html and order.png were written first


def test_show_refuses_a_decode_with_no_round_naming_the_picture(trace_file, tmp_path, capsys):
    path = edited(trace_file, tmp_path, lambda d: d["decodes"][0].update(blocks=[], tokens=[]))
    out = tmp_path / "o"
    err = one_line(capsys, ["show", path, "--out", out, "--pictures", "round,html"])
    assert "the round picture" in err and "no round to draw" in err and not out.exists()


def test_show_refuses_a_grid_larger_than_a_picture_holds(trace_file, tmp_path, capsys):
    def widen(data):
        d = data["decodes"][0]
        d["block_length"] = 100_000  # drew for minutes, memory growing
        pad = 1 if d["mask_id"] == 0 else 0  # fixed positions: the committed tokens stay the same
        for block in d["blocks"]:
            block["start"] += [pad] * (100_000 - len(block["start"]))

    path = edited(trace_file, tmp_path, widen)
    out = tmp_path / "o"
    err = one_line(capsys, ["show", path, "--out", out, "--pictures", "order"])
    assert "100000 positions across" in err and "--pictures html,round" in err and not out.exists()


@pytest.mark.parametrize("where", ["file", "read-only"])
def test_show_refuses_an_out_it_cannot_write_before_making_it(trace_file, tmp_path, capsys, where):
    base = tmp_path / where
    base.write_text("x") if where == "file" else base.mkdir(mode=0o555)
    out = base if where == "file" else base / "sub"  # a superuser made ro/sub inside ro/
    err = one_line(capsys, ["show", trace_file, "--out", out, "--pictures", "html"])
    assert "cannot be written" in err and str(base) in err
    assert where == "file" or not out.exists()


# ---- --trace of generate and demo: checked before the model loads ---------------------------------


@pytest.mark.parametrize("kind", ["directory", "under a file"])
def test_generate_refuses_an_unwritable_trace_before_the_model_loads(tmp_path, capsys, kind):
    (tmp_path / "f").write_text("x")
    trace = tmp_path if kind == "directory" else tmp_path / "f" / "t.json"
    err = one_line(capsys, ["generate", "--model", NO_MODEL, "--prompt-ids", "1,2", "--trace", trace])
    assert str(trace) in err and NO_MODEL not in err  # was refused after the decode


@pytest.mark.parametrize(
    "trace, culprit",
    [
        ("", "--trace must name a directory"),  # wrote prompt-K.json into the working directory
        ("FILE", "not a directory"),
        ("DIR_WITH_DIR", "prompt-3.json is a directory"),
    ],
)
def test_demo_refuses_a_bad_trace_directory_before_the_model_loads(tmp_path, capsys, monkeypatch, trace, culprit):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "FILE").write_text("x")
    (tmp_path / "DIR_WITH_DIR" / "prompt-3.json").mkdir(parents=True)
    (tmp_path / "DIR_WITH_DIR" / "prompt-0.json").mkdir()  # never written (K counts from 1): not refused
    err = one_line(capsys, ["demo", "--model", "no-such-target", "--trace", trace, "--prompts", "1"])
    assert culprit in err
    assert not list(tmp_path.glob("prompt-*.json"))


def test_demo_refuses_a_budget_over_the_width_before_the_model_loads(capsys):
    err = one_line(capsys, ["demo", "--model", "no-such-target", "--budgets", "8", "--width", "4"])
    assert "budget 8 exceeds the verify width 4" in err


@pytest.mark.parametrize(
    "argv, culprit",
    [
        (["demo", "--model", "gsm-llada", "--temperature", "25"], "--temperature 25 (--model gsm-llada): temperature"),
        (["generate", "--model", "gsm-llada", "--prompt-ids", "1", "--top-k", "3", "--temperature", "1"], "--top-k"),
        (["audit", "--model", "gsm-llada", "--prompt-ids", "1", "--top-p", "0.5", "--temperature", "1"], "--top-p"),
    ],
)
def test_llada_rule_options_are_refused_before_the_model_loads(capsys, monkeypatch, argv, culprit):
    def no_load(*a, **k):
        raise AssertionError("the model was loaded before the refusal")

    monkeypatch.setattr("spotref.cli.generate.load_model_and_tokenizer", no_load)
    monkeypatch.setattr("spotref.cli.demo.setup", no_load)
    err = one_line(capsys, argv)
    assert culprit in err and "LLaDA" in err


# ---- spotref conform: a decoder that raises, exits or misreports is a failure, one line -----------

DECODERS = """
import sys
import spotref

def correct(model, prompt, n, **kw):
    return spotref.generate(model, prompt, n, **kw)

def raises(*a, **k):
    raise RuntimeError("boom in the decoder")

def exits(*a, **k):
    sys.exit(0)

def negative_passes(model, prompt, n, **kw):
    got = spotref.generate(model, prompt, n, **kw)
    got.passes = -1
    return got
"""


@pytest.fixture
def decoders(tmp_path, monkeypatch):
    (tmp_path / "round4_decoders.py").write_text(textwrap.dedent(DECODERS))
    (tmp_path / "round4_syntax.py").write_text("def f(:\n")
    (tmp_path / "round4_raises.py").write_text("raise RuntimeError('at import')\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))


@pytest.mark.parametrize(
    "target, culprit",
    [
        ("round4_syntax:f", "importing round4_syntax failed: SyntaxError"),  # were tracebacks
        ("round4_raises:f", "importing round4_raises failed: RuntimeError: at import (round4_raises.py:1)"),
    ],
)
def test_conform_a_module_that_fails_to_import_is_one_line(decoders, capsys, target, culprit):
    assert culprit in one_line(capsys, ["conform", target])


@pytest.mark.parametrize(
    "function, culprit",
    [
        ("raises", "the decoder raised RuntimeError: boom in the decoder (round4_decoders.py:"),  # a traceback
        ("exits", "the decoder raised SystemExit: 0"),  # exited 0: a pass
        ("negative_passes", "generate_fn's result.passes must be an int >= 0"),  # passed
    ],
)
def test_conform_a_decoder_that_raises_exits_or_misreports_fails_in_one_line(decoders, capsys, function, culprit):
    assert main(["conform", f"round4_decoders:{function}", "--max-examples", "1"]) == 1
    out, err = capsys.readouterr()
    assert (
        "Traceback" not in err + out
        and f"conform: FAILED in cases 1 to 1 (rerun them alone: --max-examples 1): {culprit}" in out
    )


def test_conform_runs_a_chunk_before_the_time_is_up(decoders, capsys):
    """``--minutes 1e-9`` reported "passed, 0 cases" with exit status 0."""
    assert main(["conform", "round4_decoders:correct", "--max-examples", "1", "--minutes", "1e-9"]) == 0
    assert "conform: passed, 1 cases" in capsys.readouterr().out


@pytest.mark.parametrize(
    "T, culprit", [("1e-9", "1e-09 is below 1e-06"), ("1e300", "above 3.4e+38"), ("nan", "finite")]
)
def test_calibrate_sets_checks_its_temperatures_by_its_parser(capsys, T, culprit):
    """Refused by the argument parser (status 2), before any target loads (it was after)."""
    with pytest.raises(SystemExit) as e:
        main(["calibrate-sets", "no-such-drafter", "no-such-target", "--temperatures", f"0,{T}"])
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert e.value.code == 2 and "argument --temperatures" in err and culprit in err


# ---- --block-length and --max-new-tokens against the positions, before the model loads ------------


def refuse_loading(*a, **k):
    raise AssertionError("the model was loaded before the refusal")


def llada_directory(tmp_path) -> str:
    """A LLaDA checkpoint directory with a config.json and no weights."""
    config = json.loads((TARGETS_DIR / "gsm-llada.json").read_text())["config"]
    (tmp_path / "config.json").write_text(json.dumps({**config, "model_type": "llada"}))
    return str(tmp_path)


@pytest.mark.parametrize(
    "argv, culprit",
    [
        (["generate", "--model", "gsm-llada", "--prompt-ids", "5,6", "--block-length", "100000"], "[1, 4096]"),
        (["audit", "--model", "gsm-dream", "--prompt", "hi", "--block-length", "4097"], "got 4097"),
        (["generate", "--model", "gsm-llada", "--prompt-ids", "5,6", "--block-length", "4096"], "the canvas"),
        (["generate", "--model", "gsm-dream", "--prompt", "hi", "--max-new-tokens", "5000"], "max_new_tokens (5000)"),
        (["generate", "--model", "stdlib-b32", "--prompt-ids", "5", "--block-length", "100000"], "[1, 4096]"),
        (["generate", "--model", "DIR", "--prompt-ids", "5", "--block-length", "100000"], "[1, 4096]"),
    ],
)
def test_a_block_length_past_the_positions_is_refused_before_the_model_loads(
    tmp_path, capsys, monkeypatch, argv, culprit
):
    """It was refused after the model had loaded (minutes for an 8B checkpoint)."""
    monkeypatch.setattr("spotref.cli.generate.load_model_and_tokenizer", refuse_loading)
    argv = [llada_directory(tmp_path) if a == "DIR" else a for a in argv]
    err = one_line(capsys, argv)
    flag = "--block-length" if "--block-length" in argv else "--max-new-tokens"
    assert culprit in err and f"{flag} {argv[argv.index(flag) + 1]} (--model {argv[2]})" in err


def test_the_api_checks_a_block_length_from_a_targets_metadata_before_loading_it(monkeypatch):
    monkeypatch.setattr("spotref.names.target", refuse_loading)
    with pytest.raises(ValueError, match=r"block_length must be an int in \[1, 4096\], got 100000"):
        spotref.generate("gsm-llada", [5, 6], 4, block_length=100_000)
    with pytest.raises(ValueError, match="the canvas"):
        spotref.generate("gsm-dream", [5, 6], 8, block_length=4096)
    with pytest.raises(ValueError, match=r"block_length must be an int in \[1, 4096\], got 5000"):
        spotref.Speculator.for_model("gsm-dream", block_length=5000)


# ---- a file that is no drafter checkpoint: said plainly (torch's weights_only advice was the message)


def objects_pickle(path):
    torch.save({"header": slice(1, 2)}, path)  # a torch file holding an object torch's allow-list refuses


@pytest.mark.parametrize(
    "name, write, culprit",
    [
        ("trace.json", lambda p: p.write_text('{"format": "spotref-trace"}'), "not a file torch.save writes"),
        ("notes.pt", lambda p: p.write_text("hello"), "not a file torch.save writes"),  # was "KeyError: 104"
        ("archive.zip", lambda p: zipfile.ZipFile(p, "w").writestr("a.txt", "hi"), "a zip archive, not one torch"),
        ("objects.pt", objects_pickle, "refused, not loaded: it holds objects other than tensors and plain data"),
    ],
)
def test_a_file_that_is_no_drafter_checkpoint_is_named_plainly(tmp_path, capsys, name, write, culprit):
    path = tmp_path / name
    write(path)
    with pytest.raises(ValueError) as e:
        spotref.load_drafter(path)
    msg = str(e.value)
    assert f"{path} is not a drafter checkpoint: " in msg and culprit in msg and "weights_only" not in msg
    err = one_line(capsys, ["generate", "--model", NO_MODEL, "--prompt-ids", "1", "--drafter", path])
    assert culprit in err and "weights_only" not in err


def test_a_file_that_is_no_run_checkpoint_is_named_plainly(tmp_path):
    from workbench.train.train_export import read_checkpoint

    (tmp_path / "notes.pt").write_text("hello")  # was "refused ... could run code as they load"
    with pytest.raises(ValueError, match="notes.pt is not a spotref run checkpoint: it is not a file torch.save"):
        read_checkpoint(tmp_path / "notes.pt")


def test_a_warning_is_one_line_naming_the_command(capsys):
    """Python's form printed the warning's file:line and the source line that warned."""
    argv = ["calibrate-sets", "stdlib-b32", "stdlib-b32", "--prompts", "4", "--prompt-tokens", "100000"]
    assert main(argv) == 2  # every prompt left out: then refused
    err = capsys.readouterr().err.splitlines()
    assert err[0] == (
        "spotref calibrate-sets: warning: stdlib-b32: 4 of 4 train prompts are shorter than 100000 tokens "
        "and were left out (0 used)"
    )
    assert err[1].startswith("spotref calibrate-sets: error: stdlib-b32: no training prompt") and len(err) == 2


# ---- python -m spotref.cli.generate / .conform: usage and errors name what was run -----------------


@pytest.mark.parametrize("module", ["generate", "conform"])
def test_a_module_entry_point_names_itself_in_its_usage_and_errors(capsys, module):
    """They said ``spotref generate`` / ``spotref conform``; every other ``python -m`` tool names its module."""
    import importlib

    main_of = importlib.import_module(f"spotref.cli.{module}").main
    with pytest.raises(SystemExit) as e:
        main_of(["--bogus"])
    err = capsys.readouterr().err
    assert e.value.code == 2 and err.startswith(f"usage: python -m spotref.cli.{module} ")
    assert f"python -m spotref.cli.{module}: error: " in err


def test_conform_bounds_its_seed_by_its_parser(capsys):
    """``--seed 10**29`` was taken (and ran); a seed is in [0, 2**64 - 1], as generate's."""
    with pytest.raises(SystemExit) as e:
        main(["conform", "no_such_module:f", "--seed", str(10**29)])
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert e.value.code == 2 and "argument --seed: must be an int in [0, 2**64 - 1]" in err
