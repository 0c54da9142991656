"""Nothing shipped is overwritten without --update-shipped, whatever the spelling of the path,
and every output is checked before any work (issue 38). Each overwrite path that once replaced a
shipped file is run here and the shipped file's bytes are compared before and after."""

import hashlib
import os
import threading
from pathlib import Path

import pytest

import spotref
from spotref import files
from spotref.checkpoint import from_pretrained
from spotref.cli import main as spotref_cli
from spotref.files import atomic_write_text, check_writable, shipped_writes
from workbench import cli as workbench_cli
from workbench.checkpoint_writer import save_pretrained

ROOT = Path(__file__).resolve().parents[2]
PKG = Path(spotref.__file__).resolve().parent
SHIPPED = [
    PKG / "load/targets/gsm-b32.json",
    PKG / "load/targets/gsm-b32.safetensors",
    PKG / "load/order_models/stdlib-b16.pt",
    ROOT / "docs/results.md",
    ROOT / "docs/stability.md",
]


def digest() -> dict:
    return {p: hashlib.sha256(p.read_bytes()).hexdigest() for p in SHIPPED if p.exists()}


@pytest.fixture
def unchanged():
    before = digest()
    yield
    assert digest() == before, "a shipped file changed"


@pytest.mark.parametrize(
    "argv, culprit",
    [
        (["bench", "--quick", "--out", "docs/results.md"], "docs/results.md is a shipped file"),
        (["bench", "--replot", "--out", "docs/results.md"], "is a shipped file"),
        (
            ["quality", "gsm-b32", "--prompts", "1", "--new-tokens", "8", "--write-meta"],
            "gsm-b32.json is a shipped file",
        ),
        (
            ["train-drafter", "stdlib-b16", "--out", "spotref/load/order_models/stdlib-b16.pt"],
            "stdlib-b16.pt is a shipped file",
        ),
        (
            [
                "train-drafter",
                "stdlib-b16",
                "--curves-only",
                "--out",
                "spotref/load/order_models/../order_models/stdlib-b16.pt",
            ],
            "is a shipped file",
        ),
        (["train-drafter", "stdlib-b16", "--curves-only"], "stdlib-b16.pt is a shipped file"),
        (
            ["train-target", "--name", "../targets/gsm-b32", "--steps", "1"],
            "--name '../targets/gsm-b32' must be a plain name",
        ),
        (["train-target", "--name", "", "--steps", "1"], "must be a plain name"),
        (
            ["train-target", "--name", "gsm-b32", "--steps", "1", "--export", "spotref/load/targets"],
            "gsm-b32.safetensors is a shipped file",
        ),
    ],
)
def test_a_tool_refuses_a_shipped_output_before_any_work(capsys, unchanged, argv, culprit, monkeypatch):
    monkeypatch.chdir(ROOT)
    main = workbench_cli.main if argv[0] in workbench_cli.COMMANDS else spotref_cli.main  # python -m workbench's
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert culprit in err and "Traceback" not in err


def test_stability_refuses_docs_before_any_work(capsys, unchanged, monkeypatch):
    from workbench.bench import stability

    monkeypatch.chdir(ROOT)
    assert stability.main(["--out", "docs/stability.md"]) == 2
    assert "docs/stability.md is a shipped file" in capsys.readouterr().err


def test_export_run_into_the_bundled_targets_is_refused_before_loading_the_run(unchanged, tmp_path):
    from spotref.load.targets import TARGETS_DIR
    from workbench.train.train_export import export_run

    with pytest.raises(ValueError, match="gsm-b16.safetensors is a shipped file"):
        export_run(tmp_path / "no-such-run", TARGETS_DIR, "gsm-b16")


def test_every_spelling_of_a_shipped_path_is_refused(unchanged, tmp_path, monkeypatch):
    link = tmp_path / "link"
    link.symlink_to(PKG / "load" / "targets")
    monkeypatch.chdir(PKG / "load")
    for path in [
        link / "gsm-b32.json",
        "targets/gsm-b32.json",
        "../load/targets/./gsm-b32.json",
        PKG / "load" / "targets" / "new-file.json",
    ]:
        with pytest.raises(ValueError, match="is a shipped file"):
            atomic_write_text(path, "{}")


def test_inside_shipped_writes_the_guard_lets_a_write_through(tmp_path, monkeypatch):
    monkeypatch.setattr(files, "PACKAGE", tmp_path)  # a stand-in package: nothing real changes
    target = tmp_path / "x.json"
    with pytest.raises(ValueError, match="shipped"):
        atomic_write_text(target, "a")
    with shipped_writes():
        atomic_write_text(target, "b")
    assert target.read_text() == "b"
    with shipped_writes(False):
        with pytest.raises(ValueError):
            atomic_write_text(target, "c")


def test_the_permission_ends_with_its_block_and_stays_in_its_thread(tmp_path, monkeypatch):
    """``shipped_writes`` nests (an inner ``shipped_writes(False)`` keeps the outer permission),
    ends with its block even on an error, and does not reach another thread."""
    monkeypatch.setattr(files, "PACKAGE", tmp_path)
    target = tmp_path / "x.json"
    with shipped_writes():
        with shipped_writes(False):
            atomic_write_text(target, "nested")
        errors = []
        worker = threading.Thread(target=lambda: errors.append(write_error(target)))
        worker.start()
        worker.join()
        assert errors and "is a shipped file" in errors[0], "the permission reached another thread"
    with pytest.raises(RuntimeError), shipped_writes():
        raise RuntimeError("inside the block")
    assert "is a shipped file" in write_error(target), "the permission outlived its block"


def write_error(path) -> str:
    try:
        atomic_write_text(path, "refused")
    except ValueError as e:
        return str(e)
    return ""


@pytest.mark.parametrize(
    "bad, message",
    [(123, "must be a non-empty str or path"), (None, "str or path"), (b"out.md", "str or path"), ("", "non-empty")],
)
def test_a_path_that_is_no_path_is_named(bad, message):
    with pytest.raises(ValueError, match=message):
        check_writable(bad)


def test_an_output_under_a_file_or_onto_a_directory_is_refused(tmp_path):
    (tmp_path / "file.txt").write_text("x")
    with pytest.raises(ValueError, match="not a writable directory"):
        check_writable(tmp_path / "file.txt" / "out.md")
    with pytest.raises(ValueError, match="is a directory"):
        check_writable(tmp_path)


def test_temporary_files_a_kill_left_are_removed_by_the_next_write(tmp_path):
    dest = tmp_path / "out.json"
    dead = tmp_path / ".out.json.999999999.abc123.tmp"  # no such process
    live = tmp_path / f".out.json.{os.getpid()}.def456.tmp"  # a writer still running
    other = tmp_path / ".other.json.999999999.abc123.tmp"  # another destination's
    for f in (dead, live, other):
        f.write_text("half")
    atomic_write_text(dest, "whole")
    assert dest.read_text() == "whole" and not dead.exists() and live.exists() and other.exists()


def tiny(seed: int, vocab: int = 40):
    import torch

    from spotref.configs import SDARConfig
    from spotref.spec.sdar import SDARModel

    torch.manual_seed(seed)
    return SDARModel(SDARConfig(vocab_size=vocab, mask_token_id=vocab - 1, block_size=4))


def test_a_save_over_a_sharded_save_leaves_none_of_its_files(tmp_path):
    pytest.importorskip("safetensors")
    import torch

    a, b = tiny(0), tiny(1)
    save_pretrained(a, tmp_path / "ck", max_shard_bytes=20_000)
    (tmp_path / "ck" / "tokenizer.json").write_text("{}")  # not the checkpoint's: kept
    assert (tmp_path / "ck" / "model.safetensors.index.json").exists()
    save_pretrained(b, tmp_path / "ck")
    names = sorted(p.name for p in (tmp_path / "ck").iterdir())
    assert names == ["config.json", "model.safetensors", "tokenizer.json"]
    loaded = from_pretrained(tmp_path / "ck")
    assert torch.equal(loaded.lm_head.weight, b.lm_head.weight)
    assert not list(tmp_path.glob(".ck.*"))  # nothing left beside it


def test_an_interrupted_save_leaves_the_old_checkpoint_whole(tmp_path, monkeypatch):
    pytest.importorskip("safetensors")
    import torch

    from workbench import checkpoint_writer

    a = tiny(0)
    checkpoint_writer.save_pretrained(a, tmp_path / "ck")
    real = checkpoint_writer.write_files

    def interrupted(*args):
        real(*args)
        raise KeyboardInterrupt  # Ctrl-C after every file's bytes, before the renames

    monkeypatch.setattr(checkpoint_writer, "write_files", interrupted)
    with pytest.raises(KeyboardInterrupt):
        checkpoint_writer.save_pretrained(tiny(1, vocab=48), tmp_path / "ck")
    loaded = from_pretrained(tmp_path / "ck")
    assert loaded.config.vocab_size == 40 and torch.equal(loaded.lm_head.weight, a.lm_head.weight)
    assert not list(tmp_path.glob(".ck.*")) and not list((tmp_path / "ck").glob("*.tmp"))
