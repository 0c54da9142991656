"""Reliability round 5 (issue 63), the re-probe: what about 3,900 new hostile probes found (one
file-changing write through a link, one silently defaulted config key, one late refusal, lenient
number parsing). Each case failed on the code before its fix."""

import json

import pytest
import torch

import spotref
from spotref.api import OptionError
from spotref.cli import main as spotref_cli
from spotref.conformance import MODELS, tiny_config
from spotref.files import atomic_write_text, check_writable, make_folder


def test_a_link_whose_folder_does_not_exist_is_refused_and_no_folder_is_made(tmp_path):
    """--trace through a link to /nowhere/x.json made /nowhere (as root) and wrote there."""
    link = tmp_path / "link.json"
    link.symlink_to(tmp_path / "nowhere" / "deeper" / "x.json")
    with pytest.raises(ValueError, match="creates no folders where a link leads"):
        atomic_write_text(link, "{}")
    assert not (tmp_path / "nowhere").exists() and link.is_symlink()


def test_a_link_to_a_missing_file_in_a_folder_that_exists_is_written_through(tmp_path):
    link = tmp_path / "link.json"
    link.symlink_to(tmp_path / "x.json")
    atomic_write_text(link, "{}")
    assert link.is_symlink() and (tmp_path / "x.json").read_text() == "{}"


@pytest.mark.parametrize("path", ["x.json/", "out/x.json/"])
def test_a_path_ending_in_a_separator_names_a_folder_and_is_refused(tmp_path, path):
    """--trace x.json/ wrote the file x.json."""
    with pytest.raises(ValueError, match="ends with a separator"):
        check_writable(str(tmp_path) + "/" + path)
    assert list(tmp_path.iterdir()) == []


def test_a_folder_that_is_a_link_to_nothing_is_named_not_an_errno(tmp_path):
    """spotref show --out LINK (a link to nothing) said "[Errno 17] File exists"."""
    out = tmp_path / "outlink"
    out.symlink_to(tmp_path / "gone" / "deep")
    for call in (lambda: make_folder(out), lambda: check_writable(out / "page.html")):
        with pytest.raises(ValueError, match="is a link to .*which does not exist"):
            call()
    assert not (tmp_path / "gone").exists()


@pytest.mark.parametrize("value", ["float8", 5, "fp8"])
def test_a_llada_config_with_a_decision_precision_that_is_no_precision_is_refused(tmp_path, value):
    """LLaDA read it as "auto" without a word; SDAR and Dream refused it."""
    from workbench.checkpoint_writer import save_pretrained

    torch.manual_seed(0)
    model = MODELS["llada"](tiny_config("llada", 40, 39, 4, hidden=16, layers=1, heads=2, kv=1, tied=False, init=0.3))
    save_pretrained(model.eval(), tmp_path / "ck")
    cfg = json.loads((tmp_path / "ck" / "config.json").read_text())
    (tmp_path / "ck" / "config.json").write_text(json.dumps({**cfg, "decision_precision": value}))
    with pytest.raises(ValueError, match="decision_precision must be one of"):
        spotref.from_pretrained(tmp_path / "ck")


@pytest.mark.parametrize("half_model", [False, True])
def test_dreams_entropy_in_float16_is_refused_before_any_forward(half_model):
    """It was refused (NaN) after the first forward pass, at every decision."""
    model = MODELS["dream"](tiny_config("dream", 40, 39, 4, hidden=16, layers=1, heads=2, kv=1, tied=False, init=0.3))
    model = model.eval().half() if half_model else model.eval()
    calls = []
    model.register_forward_hook(lambda *a: calls.append(1))
    precision = "auto" if half_model else "float16"
    with pytest.raises(OptionError, match="entropy confidence is NaN in float16"):
        spotref.generate(model, [1, 2], 8, confidence="entropy", block_length=4, precision=precision)
    assert calls == []
    assert len(spotref.generate(model.float(), [1, 2], 8, confidence="entropy", block_length=4).tokens) == 8


@pytest.mark.parametrize(
    "args, message",
    [
        (["--prompt-ids", "5,,6"], "an empty item between commas"),
        (["--prompt-ids", ","], "an empty item between commas"),
        (["--prompt-ids", "1_0"], "must be an integer, got '1_0'"),
        (["--prompt-ids", "\uff15,\uff16"], "must be an integer"),
        (["--prompt-ids", "5", "--max-new-tokens", "1_0"], "must be an integer, got '1_0'"),
        (["--prompt-ids", "5", "--model", ""], "give a checkpoint directory or a bundled target name"),
    ],
)
def test_typed_numbers_and_names_are_read_strictly(capsys, args, message):
    """Each was accepted: an empty item dropped ("5,,6" was 5,6; "," an empty prompt), "1_0" read
    as 10, full-width digits as ASCII, --model "" as the working directory."""
    argv = ["generate", "--model", "gsm-b32", *args]
    with pytest.raises(SystemExit) as e:
        spotref_cli.main(argv)
    assert e.value.code == 2 and message in capsys.readouterr().err


def test_blank_prompt_ids_are_still_an_empty_prompt():
    from spotref.cli.argtypes import token_ids

    assert token_ids("") == [] and token_ids("  ") == [] and token_ids(" 5 , 6 ") == [5, 6] == token_ids("5 6")
