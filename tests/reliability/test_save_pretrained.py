"""``save_pretrained`` into a directory the user named: only the checkpoint's files are written, each
whole; everything else in the directory (and the directory itself) is left as it was; what the
reader would refuse is refused before a byte is written; a saved and reloaded target keeps its drafter."""

import json
import os
import stat
import warnings
from pathlib import Path

import pytest
import torch

from spotref.checkpoint import from_pretrained
from spotref.configs import SDARConfig
from spotref.spec.sdar import SDARModel
from workbench.checkpoint_writer import save_pretrained

pytest.importorskip("safetensors")
INDEX = "model.safetensors.index.json"


def tiny(seed=0, vocab=40) -> SDARModel:
    torch.manual_seed(seed)
    return SDARModel(SDARConfig(vocab_size=vocab, mask_token_id=vocab - 1, block_size=4))


def three_shards(name: str) -> int:
    return 0 if name.startswith("model.embed") else 1 if ".layers.0." in name else 2


def snapshot(d: Path) -> dict:
    """{name: (kind, inode, mode, link target or bytes)} of every entry under ``d``, links unfollowed."""
    out = {}
    for p in sorted(d.rglob("*")):
        st = p.lstat()
        if p.is_symlink():
            what = ("link", os.readlink(p))
        elif stat.S_ISFIFO(st.st_mode):
            what = ("fifo", None)
        elif p.is_dir():
            what = ("dir", None)
        else:
            what = ("file", p.read_bytes())
        out[str(p.relative_to(d))] = (st.st_ino, stat.S_IMODE(st.st_mode), *what)
    return out


def temporaries(*dirs: Path) -> list:
    return [p.name for d in dirs for p in d.iterdir() if p.name.endswith(".tmp")]


def equal_weights(a, b) -> bool:
    return all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values()))


# ---- only the checkpoint's files ------------------------------------------------------------------


def test_other_files_links_and_the_directory_itself_are_left_as_they_were(tmp_path):
    ck = save_pretrained(tiny(0), tmp_path / "ck")
    (ck / "notes.txt").write_text("mine")
    (ck / "tok").mkdir()
    (ck / "tok" / "tokenizer.json").write_text("{}")
    (ck / "alias.json").symlink_to("config.json")  # a link inside: stays a link
    os.link(ck / "config.json", ck / "hard.json")  # a hard link to the old config: keeps it
    os.link(ck / "config.json", tmp_path / "outside.json")
    os.chmod(ck, 0o750)
    dir_before = ck.stat()
    others = {k: v for k, v in snapshot(ck).items() if k not in ("config.json", "model.safetensors")}
    old_config = (ck / "config.json").read_bytes()

    b = tiny(1)
    assert save_pretrained(b, ck) == ck
    after = snapshot(ck)
    assert {k: after[k] for k in others} == others  # same inodes, modes, bytes, links
    assert sorted(after) == sorted([*others, "config.json", "model.safetensors"])
    assert ck.stat().st_ino == dir_before.st_ino and stat.S_IMODE(ck.stat().st_mode) == 0o750
    assert (tmp_path / "outside.json").read_bytes() == old_config  # not written through
    assert equal_weights(from_pretrained(ck), b)
    assert temporaries(ck, tmp_path) == []


def test_a_read_only_directory_is_refused_not_changed(tmp_path):
    ck = save_pretrained(tiny(0), tmp_path / "ck")
    before = snapshot(ck)
    os.chmod(ck, 0o555)
    try:
        with pytest.raises(ValueError, match="read-only"):
            save_pretrained(tiny(1), ck)
        assert stat.S_IMODE(ck.stat().st_mode) == 0o555
    finally:
        os.chmod(ck, 0o755)
    assert snapshot(ck) == before and temporaries(tmp_path) == []


def test_a_linked_checkpoint_directory_stays_a_link(tmp_path):
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to("real")
    save_pretrained(tiny(0), tmp_path / "link")
    b = tiny(1)
    save_pretrained(b, tmp_path / "link")
    assert (tmp_path / "link").is_symlink() and os.readlink(tmp_path / "link") == "real"
    assert sorted(p.name for p in (tmp_path / "real").iterdir()) == ["config.json", "model.safetensors"]
    assert equal_weights(from_pretrained(tmp_path / "link"), b)
    assert temporaries(tmp_path, tmp_path / "real") == []


@pytest.mark.parametrize("where", [".", ".."])
def test_saving_into_the_working_directory_writes_only_the_checkpoint(tmp_path, monkeypatch, where):
    work = tmp_path / "work"
    (work / "sub").mkdir(parents=True)
    (work / "a.txt").write_text("a")
    (work / "sub" / "b.txt").write_text("b")
    monkeypatch.chdir(work / "sub")
    home = Path(where).resolve()
    before = snapshot(tmp_path)
    m = tiny(0)
    save_pretrained(m, where)
    after = snapshot(tmp_path)
    new = sorted(set(after) - set(before))
    assert new == sorted(str((home / f).relative_to(tmp_path)) for f in ("config.json", "model.safetensors"))
    assert {k: after[k] for k in before} == before
    assert equal_weights(from_pretrained(where), m)


# ---- the files of an earlier save -----------------------------------------------------------------


def test_stale_shards_go_by_name_and_nothing_else(tmp_path):
    ck = save_pretrained(tiny(0), tmp_path / "ck", shard_of=three_shards)
    assert len(list(ck.glob("model-*-of-00003.safetensors"))) == 3
    (ck / "model-extra.safetensors").write_bytes(b"not a shard of this checkpoint")
    (ck / "model-00009-of-00009.safetensors").mkdir()  # a directory is never removed
    (ck / "notes.txt").write_text("mine")
    b = tiny(1)
    save_pretrained(b, ck)
    assert sorted(p.name for p in ck.iterdir()) == [
        "config.json",
        "model-00009-of-00009.safetensors",
        "model-extra.safetensors",
        "model.safetensors",
        "notes.txt",
    ]
    assert equal_weights(from_pretrained(ck), b)


def test_shards_the_old_index_lists_under_other_names_are_removed(tmp_path):
    ck = save_pretrained(tiny(0), tmp_path / "ck", shard_of=three_shards)
    index = json.loads((ck / INDEX).read_text())
    for old in sorted(set(index["weight_map"].values())):  # another exporter's names
        (ck / old).rename(ck / f"part-{old[6:11]}.safetensors")
    index["weight_map"] = {n: f"part-{f[6:11]}.safetensors" for n, f in index["weight_map"].items()}
    (ck / INDEX).write_text(json.dumps(index))
    from_pretrained(ck)  # a valid checkpoint
    save_pretrained(tiny(1), ck)
    assert sorted(p.name for p in ck.iterdir()) == ["config.json", "model.safetensors"]


def test_fewer_shards_than_before(tmp_path):
    ck = save_pretrained(tiny(0), tmp_path / "ck", shard_of=three_shards)
    b = tiny(1)
    save_pretrained(b, ck, shard_of=lambda n: int(three_shards(n) > 0))
    assert sorted(p.name for p in ck.iterdir()) == [
        "config.json",
        "model-00001-of-00002.safetensors",
        "model-00002-of-00002.safetensors",
        INDEX,
    ]
    assert equal_weights(from_pretrained(ck), b)


def test_a_crash_mid_save_leaves_the_old_files_and_no_temporary_file(tmp_path, monkeypatch):
    import safetensors.torch

    ck = save_pretrained(tiny(0), tmp_path / "ck", shard_of=three_shards)
    before = snapshot(ck)
    real, calls = safetensors.torch.save, []  # the writer hands safetensors' bytes to its own files

    def second_fails(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(safetensors.torch, "save", second_fails)
    with pytest.raises(KeyboardInterrupt):
        save_pretrained(tiny(1), ck, shard_of=three_shards)
    assert snapshot(ck) == before and temporaries(ck, tmp_path) == []


# ---- odd entries ------------------------------------------------------------------------------------


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no named pipes here")
def test_a_dangling_link_and_a_fifo_in_the_directory_are_left_alone(tmp_path):
    ck = tmp_path / "ck"
    ck.mkdir()
    (ck / "gone.json").symlink_to("nowhere.json")
    os.mkfifo(ck / "pipe")
    before = snapshot(ck)
    m = tiny(0)
    save_pretrained(m, ck)
    save_pretrained(m, ck, shard_of=three_shards)
    after = snapshot(ck)
    assert {k: after[k] for k in before} == before
    assert equal_weights(from_pretrained(ck), m)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no named pipes here")
def test_odd_save_paths_are_named(tmp_path):
    (tmp_path / "dangling").symlink_to("nowhere")
    with pytest.raises(ValueError, match="symbolic link to 'nowhere', which does not exist"):
        save_pretrained(tiny(), tmp_path / "dangling")
    os.mkfifo(tmp_path / "pipe")
    with pytest.raises(ValueError, match="exists and is not a directory"):
        save_pretrained(tiny(), tmp_path / "pipe")
    (tmp_path / "ck" / "config.json").mkdir(parents=True)  # a name the checkpoint writes
    with pytest.raises(ValueError, match="config.json is a directory"):
        save_pretrained(tiny(), tmp_path / "ck")
    assert sorted(p.name for p in (tmp_path / "ck").iterdir()) == ["config.json"]


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no named pipes here")
def test_the_reader_names_a_fifo_in_place_of_a_weight_file(tmp_path):
    ck = save_pretrained(tiny(), tmp_path / "ck")
    (ck / "model.safetensors").unlink()
    os.mkfifo(ck / "model.safetensors")
    with pytest.raises(ValueError, match="has neither model.safetensors"):
        from_pretrained(ck)


# ---- what the reader would refuse, refused before writing ------------------------------------------


@pytest.mark.parametrize(
    "value, dtype, stored",
    [(1e5, "float16", "float16"), (float("nan"), None, "float32"), (float("inf"), "bfloat16", "bfloat16")],
)
def test_non_finite_weights_in_the_stored_dtype_are_refused_by_name(tmp_path, value, dtype, stored):
    m = tiny()
    with torch.no_grad():
        m.model.layers[1].mlp.down_proj.weight[0, 0] = value
    with pytest.raises(ValueError, match=rf"stored as {stored}: model.layers.1.mlp.down_proj.weight"):
        save_pretrained(m, tmp_path / "ck", dtype=dtype)
    assert not (tmp_path / "ck").exists()


def test_a_refused_save_leaves_an_existing_checkpoint_as_it_was(tmp_path):
    ck = save_pretrained(tiny(0), tmp_path / "ck", shard_of=three_shards)
    before = snapshot(ck)
    m = tiny(1)
    with torch.no_grad():
        m.lm_head.weight[3, 3] = 7e4
    with pytest.raises(ValueError, match="lm_head.weight"):
        save_pretrained(m, ck, dtype="fp16")
    assert snapshot(ck) == before


@pytest.mark.parametrize(
    "change, dtype, match",
    [
        (lambda m: None, "int8", "dtype='int8' is not a precision"),
        (lambda m: m.double(), None, "the model's weights are float64"),
        (lambda m: m.config.extra.update(decision_precision="fp8"), None, "decision_precision='fp8'"),
        (lambda m: m.config.extra.update(rope_scaling={"type": "yarn"}), None, "rope_scaling"),
        (lambda m: m.config.extra.update(note=object()), None, "not JSON serializable"),
    ],
)
def test_what_the_reader_refuses_is_refused_before_writing(tmp_path, change, dtype, match):
    m = tiny()
    change(m)
    with pytest.raises(ValueError, match=match):
        save_pretrained(m, tmp_path / "ck", dtype=dtype)
    assert not (tmp_path / "ck").exists()


def test_a_precision_spelled_as_torch_names_it_reads_back(tmp_path):
    m = tiny()
    m.config.extra["torch_dtype"] = "torch.bfloat16"  # the old writer copied it into decision_precision
    ck = save_pretrained(m, tmp_path / "ck")
    config = json.loads((ck / "config.json").read_text())
    assert config["torch_dtype"] == "float32" and config["decision_precision"] == "bfloat16"
    assert from_pretrained(ck).config.extra["decision_precision"] == "bfloat16"


# ---- a saved and reloaded target keeps its drafter ------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("name, dtype", [("gsm-b32", None), ("gsm-b32", "float16"), ("stdlib-b32", None)])
def test_a_saved_and_reloaded_target_keeps_its_drafter(tmp_path, name, dtype):
    from spotref.load.drafters import ORDER_DIR, find_checkpoint
    from spotref.load.targets import load_target

    save_pretrained(load_target(name).model, tmp_path / "ck", dtype=dtype)
    reloaded = from_pretrained(tmp_path / "ck")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the exact drafter, not the same-config fallback
        assert find_checkpoint(reloaded) == ORDER_DIR / f"{name}.pt"


def test_the_shipped_drafters_match_the_shipped_targets():
    import spotref
    from spotref.load.drafters import ORDER_DIR, header, model_fingerprint
    from spotref.load.targets import load_target

    for name in spotref.list_targets():
        model, target = load_target(name).model, header(ORDER_DIR / f"{name}.pt")["target"]
        assert target["fingerprint"] == model_fingerprint(model), name
        assert target["config_fingerprint"] == model_fingerprint(model, weights=False), name
