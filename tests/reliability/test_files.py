"""Nothing lost, nothing overwritten: atomic writes (``spotref.files``), a corrupt trajectory
cache treated as a cache miss, and the conformance suite's Hypothesis extra and database."""

import os
import stat
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import tiny_model

from spotref import files
from spotref.drafters import order
from spotref.load.drafters import load_order_model, save_order_model
from spotref.record import prompts
from spotref.record import trajectories as tj


class Crash(Exception):
    """A writer dying half-way (a kill, a full disk)."""


def half_then_crash(exc=Crash):
    def write(f):
        f.write(b"half of the new cont")
        raise exc()

    return write


def leftovers(d: Path) -> list:
    return sorted(p.name for p in d.iterdir() if p.name.endswith(".tmp"))


@pytest.mark.parametrize("exc", [Crash, KeyboardInterrupt, OSError])
def test_a_crash_mid_write_leaves_the_old_file_and_no_temp_file(tmp_path, exc):
    path = tmp_path / "report.md"
    path.write_bytes(b"the old contents")
    with pytest.raises(exc):
        files.atomic_write(path, half_then_crash(exc))
    assert path.read_bytes() == b"the old contents" and leftovers(tmp_path) == []


def test_a_crash_mid_write_of_a_new_file_leaves_nothing(tmp_path):
    with pytest.raises(Crash):
        files.atomic_write(tmp_path / "new.bin", half_then_crash())
    assert list(tmp_path.iterdir()) == []


def test_atomic_save_crash_keeps_the_old_checkpoint(tmp_path, monkeypatch):
    path = tmp_path / "ckpt.pt"
    files.atomic_save({"step": 1}, path)

    def dying_save(obj, f, *a, **k):
        f.write(b"PK\x03\x04 truncated")
        raise Crash()

    monkeypatch.setattr(torch, "save", dying_save)
    with pytest.raises(Crash):
        files.atomic_save({"step": 2}, path)
    monkeypatch.undo()
    assert torch.load(path)["step"] == 1 and leftovers(tmp_path) == []


def test_atomic_writes_create_directories_and_keep_permissions(tmp_path):
    path = files.atomic_write_text(tmp_path / "a" / "b" / "x.txt", "one")
    assert path.read_text() == "one"
    mask = os.umask(0)
    os.umask(mask)
    assert stat.S_IMODE(path.stat().st_mode) == 0o666 & ~mask  # as a plain open() would
    os.chmod(path, 0o640)
    files.atomic_write_text(path, "two")
    assert path.read_text() == "two" and stat.S_IMODE(path.stat().st_mode) == 0o640


def test_atomic_path_for_writers_that_want_a_name(tmp_path):
    from safetensors.torch import load_file, save_file

    path = tmp_path / "w.safetensors"
    with files.atomic_path(path) as tmp:
        save_file({"x": torch.ones(3)}, str(tmp))
        assert not path.exists() and tmp.parent == tmp_path
    assert torch.equal(load_file(path)["x"], torch.ones(3)) and leftovers(tmp_path) == []
    with pytest.raises(Crash):
        with files.atomic_path(path) as tmp:
            tmp.write_bytes(b"junk")
            raise Crash()
    assert torch.equal(load_file(path)["x"], torch.ones(3)) and leftovers(tmp_path) == []


def test_run_dirs_are_new_each_time(tmp_path):
    a, b = files.run_dir("bench", tmp_path), files.run_dir("bench", tmp_path)
    assert a != b and a.is_dir() and b.is_dir() and a.name.startswith("bench-")


def test_run_dirs_left_empty_are_removed_and_the_rest_kept(tmp_path):
    """``tidy_run_dirs``: a run directory (and a ``runs/`` made for it) left empty when the block
    ends, normally or not, is removed; one holding a file is kept, as is a root that was there."""
    root = tmp_path / "runs"
    with pytest.raises(KeyboardInterrupt), files.tidy_run_dirs():
        files.run_dir("tool", root)
        raise KeyboardInterrupt
    assert not root.exists()
    with files.tidy_run_dirs():
        kept = files.run_dir("tool", root)
        (kept / "report.md").write_text("x")
        files.run_dir("tool", root)  # a second one, left empty
    assert list(root.iterdir()) == [kept]
    with files.tidy_run_dirs():
        files.run_dir("tool", root)
    assert list(root.iterdir()) == [kept]
    assert files.run_dir("tool", root).is_dir()  # outside the block: made and kept


def test_drafter_and_checkpoint_writers_are_atomic(tmp_path, monkeypatch):
    """order.save and save_pretrained die half-way: the files already there survive."""
    from workbench.checkpoint_writer import save_pretrained

    path = tmp_path / "d.pt"
    save_order_model(path, order.OrderModel(8), {"note": "old"})
    root = save_pretrained(tiny_model(), tmp_path / "ckpt")
    before = {p.name: p.read_bytes() for p in root.iterdir()}
    monkeypatch.setattr(torch, "save", lambda *a, **k: (_ for _ in ()).throw(Crash()))
    with pytest.raises(Crash):
        save_order_model(path, order.OrderModel(8), {"note": "new"})
    import safetensors.torch

    monkeypatch.setattr(safetensors.torch, "save", lambda *a, **k: (_ for _ in ()).throw(Crash()))
    with pytest.raises(Crash):
        save_pretrained(tiny_model(seed=1), root)
    monkeypatch.undo()
    assert load_order_model(path)[1]["note"] == "old" and leftovers(tmp_path) == []
    assert {p.name: p.read_bytes() for p in root.iterdir()} == before


# ---- the trajectory cache ---------------------------------------------------------------------


def small_trajectories():
    m = tiny_model(V=20, B=4)
    return tj.record(m, [[1, 2, 3]], 8, 0.0)


def test_a_truncated_trajectory_file_is_a_named_value_error(tmp_path):
    path = tmp_path / "t.pt"
    small_trajectories().save(path)
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    with pytest.raises(ValueError, match="t.pt is corrupt or truncated"):
        tj.Trajectories.load(path)
    torch.save({"arrays": {}}, path)
    with pytest.raises(ValueError, match="corrupt or truncated"):
        tj.Trajectories.load(path)


@pytest.mark.parametrize("damage", ["truncate", "empty", "garbage"])
def test_a_corrupt_cache_is_a_cache_miss(tmp_path, monkeypatch, damage):
    """recorded() warns, records again and replaces the broken file; the next call reads it."""
    from types import SimpleNamespace

    ds, calls = small_trajectories(), []

    def record(*a, **k):
        calls.append(1)
        return ds

    monkeypatch.setattr(tj, "record", record)
    monkeypatch.setattr(prompts, "prompts_for", lambda *a: [[1, 2, 3]])
    target = SimpleNamespace(name="tiny", model=tiny_model(V=20, B=4), stop_ids=None)
    spec = prompts.TrajectorySpec(
        data_dir=str(tmp_path), prompts=1, test_prompts=1, set_prompts=1, prompt_tokens=3, new_tokens=8, seeds=1
    )
    prompts.recorded(target, spec, "test", 0.0)
    (cache,) = tmp_path.glob("tiny-*.pt")
    data = cache.read_bytes()
    cache.write_bytes({"truncate": data[: len(data) // 3], "empty": b"", "garbage": b"\x00" * 64}[damage])
    with pytest.warns(UserWarning, match="corrupt or truncated.*recording it again"):
        got = prompts.recorded(target, spec, "test", 0.0)
    assert len(calls) == 2 and len(got) == len(ds)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        again = prompts.recorded(target, spec, "test", 0.0)  # repaired: a plain hit
    assert len(calls) == 2 and np.array_equal(again.arrays["tokens"], ds.arrays["tokens"])


# ---- run_conformance ----------------------------------------------------------------------------


def test_conformance_without_hypothesis_says_how_to_install_it(monkeypatch):
    from spotref import conformance

    monkeypatch.setitem(sys.modules, "hypothesis", None)
    with pytest.raises(ModuleNotFoundError, match=r'pip install "spotref\[conformance\]"'):
        conformance.run_conformance(lambda *a, **k: None, max_examples=1)


def test_conformance_extra_is_declared():
    import tomllib

    meta = tomllib.loads((Path(__file__).parents[2] / "pyproject.toml").read_text())
    assert any(d.startswith("hypothesis") for d in meta["project"]["optional-dependencies"]["conformance"])


def test_conformance_writes_nothing_into_the_working_directory(tmp_path, monkeypatch):
    import spotref
    from spotref.conformance import run_conformance

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("HYPOTHESIS_STORAGE_DIRECTORY", raising=False)
    assert run_conformance(spotref.generate, max_examples=2)["cases"] >= 1
    assert list(tmp_path.iterdir()) == []
    run_conformance(spotref.generate, max_examples=1, database=tmp_path / "db")  # opted in: allowed
