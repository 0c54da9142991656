"""One drafter trained on several targets (``python -m workbench train-universal NAME --targets A,B
--held-out C``, workbench/train/train_universal.py):
batches alternate between the targets' trajectories, each target is measured on its own
held-out prompts, and the checkpoint runs on a target of any block size, exactly."""

import argparse
import time
from types import SimpleNamespace

import pytest
import torch
from helpers import tiny_model

import spotref
from spotref.cli.main import parser_for
from spotref.drafters import order
from spotref.drafters.spot import SpotDrafter
from spotref.load import drafters as loaded
from spotref.record.trajectories import record
from spotref.train import train_drafter
from spotref.train import train_sets as ts
from workbench.train import train_universal as tu

PROMPTS = [[1, 2, 3, 4, 5, 6, 7, 8], [9, 10, 11]]


@pytest.fixture(scope="module")
def targets():
    """Three tiny targets (block sizes 4, 8, 8) and their recorded trajectories, by name."""
    models = {
        "tiny-b4": tiny_model(V=61, B=4, init=1.0, seed=3),
        "tiny-b8": tiny_model(V=61, B=8, init=1.0, seed=5),
        "tiny-out": tiny_model(V=61, B=8, init=1.0, seed=7),
    }
    data = {name: {T: record(m, PROMPTS, 16, T) for T in (0.0, 1.0)} for name, m in models.items()}
    return models, data


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser()
    tu.add_arguments(p)
    return p


def options(*argv):
    return tu.UniversalOptions.parse(tu.add_arguments, list(argv))


def fake_targets(monkeypatch, targets, asked):
    """``load_target`` and ``recorded`` of the tiny targets; ``asked`` collects (name, split, prompts)."""
    models, data = targets
    monkeypatch.setattr(
        train_drafter, "load_target", lambda name, _dir: SimpleNamespace(name=name, model=models[name], stop_ids=None)
    )

    def recorded(target, spec, split, T):
        asked.append((target.name, split, spec.prompts))
        return data[target.name][T]

    monkeypatch.setattr(train_drafter, "recorded", recorded)


@pytest.mark.slow
def test_trains_on_several_targets_and_measures_each(targets, monkeypatch, tmp_path):
    asked, drawn = [], []
    fake_targets(monkeypatch, targets, asked)
    real_batch = train_drafter.batch
    monkeypatch.setattr(train_drafter, "batch", lambda ds, r, d: drawn.append(ds.block_size) or real_batch(ds, r, d))
    out = tmp_path / "universal.pt"
    o = options("universal", "--targets", "tiny-b4:5,tiny-b8", "--held-out", "tiny-out", "--prompts", "3")
    o = tu.UniversalOptions(**{**o.__dict__, "out": str(out), "steps": 6, "batch": 8, "tf_depth": 2})
    assert tu.train_universal(o, time.time()) == 0
    assert drawn[:6] == [4, 8] * 3  # one batch per step, the targets in turn (then the measurements)
    assert ("tiny-b4", "train", 5) in asked and ("tiny-b8", "train", 3) in asked  # NAME:PROMPTS
    assert ("tiny-out", "test", 3) in asked and ("tiny-out", "train", 3) not in asked  # held out: measured only
    model, header = loaded.load_order_model(out)
    assert header["any_block_size"] is True and "fingerprint" not in header["target"]
    assert header["target"] == {"name": "universal", "trained_on": ["tiny-b4", "tiny-b8"], "held_out": ["tiny-out"]}
    per = header["per_target"]
    assert [per[n]["trained_on"] for n in ("tiny-b4", "tiny-b8", "tiny-out")] == [True, True, False]
    assert per["tiny-b4"]["block_size"] == 4 and set(per["tiny-out"]["heldout_accuracy"]) == {"0", "1"}


@pytest.mark.slow
def test_a_held_out_target_is_not_trained_on(targets, monkeypatch, tmp_path):
    fake_targets(monkeypatch, targets, [])
    o = options("u", "--targets", "tiny-b4,tiny-b8", "--held-out", "tiny-b8", "--out", str(tmp_path / "u.pt"))
    with pytest.raises(ValueError, match="share tiny-b8"):
        tu.train_universal(o, time.time())
    with pytest.raises(ValueError, match="share tiny-b8"):
        tu.universal_sets(o, time.time())


@pytest.mark.slow
def test_turns_give_a_target_more_batches_per_cycle(targets, monkeypatch, tmp_path):
    """Before --turns every target had one batch per cycle; tiny-b8=2 draws it twice per cycle."""
    drawn = []
    fake_targets(monkeypatch, targets, [])
    real_batch = train_drafter.batch
    monkeypatch.setattr(train_drafter, "batch", lambda ds, r, d: drawn.append(ds.block_size) or real_batch(ds, r, d))
    o = options("u", "--targets", "tiny-b8,tiny-b4", "--turns", "tiny-b8=2", "--prompts", "3")
    o = tu.UniversalOptions(**{**o.__dict__, "out": str(tmp_path / "u.pt"), "steps": 6, "batch": 8})
    assert tu.train_universal(o, time.time()) == 0
    assert drawn[:6] == [8, 4, 8] * 2


def test_cycle_orders_the_turns_and_refuses_an_unknown_name():
    assert tu.cycle(["a", "b", "c"], None) == [0, 1, 2]
    assert tu.cycle(["a", "b", "c"], (("c", 2),)) == [0, 1, 2, 2]
    assert tu.cycle(["a", "b", "c"], (("a", 3), ("c", 2))) == [0, 1, 2, 0, 2, 0]
    with pytest.raises(ValueError, match="--turns names d, not in --targets"):
        tu.cycle(["a", "b"], (("d", 2),))


def test_turn_list_and_turns_without_targets_are_refused(tmp_path):
    assert tu.turn_list("a=2,b=1") == (("a", 2), ("b", 1))
    for bad in ("a", "a=0", "a=x", "=2"):
        with pytest.raises(ValueError, match="NAME=K"):
            tu.turn_list(bad)
    with pytest.raises(SystemExit):  # --targets is required
        parser().parse_args(["gsm-b32", "--turns", "gsm-b32=2", "--out", str(tmp_path / "x.pt")])


def test_the_installed_train_drafter_trains_one_target(capsys):
    """Several targets' drafter is the workbench's command; spotref train-drafter has no --targets."""
    p = parser_for("train-drafter")  # the command line's, abbreviations refused: --targets is not --targets-dir
    for flag in ("--targets", "--held-out", "--turns"):
        with pytest.raises(SystemExit):
            p.parse_args(["train-drafter", "gsm-b32", flag, "a"])
        assert f"unrecognized arguments: {flag}" in capsys.readouterr().err


def test_target_list_refuses_a_malformed_entry():
    assert tu.target_list("a:3,b") == (("a", 3), ("b", None))
    assert tu.target_list("a:") == (("a", None),)
    for bad in ("a:x", "a:0", ",b"):
        with pytest.raises(ValueError, match="NAME\\[:PROMPTS\\]"):
            tu.target_list(bad)


def tiny_target(name, model):
    """A tiny target that ``prompts.recorded`` can record (held-out texts, an encoder)."""
    return SimpleNamespace(
        name=name,
        model=model,
        stop_ids=None,
        heldout=lambda n, seed, split: [(f"{seed}{i}" * 9, None) for i in range(n)],
        encode=lambda text: [1 + (ord(c) % 50) for c in text],
    )


SETS_ARGS = ["--set-prompts", "2", "--test-prompts", "2", "--prompt-tokens", "8", "--new-tokens", "16"]
SETS_ARGS += ["--seeds", "1", "--set-steps", "6", "--batch", "8", "--tf-depth", "2", "--lr", "3e-3"]


@pytest.mark.slow
def test_sets_only_with_targets_trains_one_set_head_on_several_targets(targets, monkeypatch, tmp_path):
    """``--targets A,B --held-out C --sets-only``: a set head trained on A's and B's threshold
    trajectories in turn (block sizes 4 and 8), C measured only; the order model is kept bit for
    bit, and the checkpoint drafts SPOT-Sets exactly on a target of another block size."""
    models, _ = targets
    monkeypatch.setattr(train_drafter, "load_target", lambda name, _dir: tiny_target(name, models[name]))
    drawn, real = [], ts.set_batch
    monkeypatch.setattr(ts, "set_batch", lambda ds, r, d: drawn.append(ds.block_size) or real(ds, r, d))
    src, ck = tmp_path / "src.pt", tmp_path / "u.pt"
    loaded.save_order_model(src, order.OrderModel(8, set_hidden=None), {"any_block_size": True, "note": "kept"})
    before, kept = loaded.load_order_model(src)[0].state_dict(), src.read_bytes()
    argv = ["u", "--targets", "tiny-b4,tiny-b8", "--held-out", "tiny-out", "--sets-only", "--init", str(src)]
    argv += ["--out", str(ck)]
    assert tu.run(parser().parse_args(argv + ["--data-dir", str(tmp_path / "data"), *SETS_ARGS])) == 0
    assert drawn[:6] == [4, 8] * 3  # one batch per step, the trained targets in turn
    assert src.read_bytes() == kept  # --init is read, --out written
    model, header = loaded.load_order_model(ck)
    assert model.has_sets and header["any_block_size"] is True and header["note"] == "kept"
    assert all(torch.equal(model.state_dict()[k], v) for k, v in before.items())  # the order model kept
    per = header["sets"]["per_target"]
    assert [per[n]["trained_on"] for n in ("tiny-b4", "tiny-b8", "tiny-out")] == [True, True, False]
    assert set(per["tiny-out"]["heldout_accuracy"]["1"]) == {"0.9", "0.7", "0.5"}
    assert set(header["sets"]["train_states"]) == {"tiny-b4", "tiny-b8"}
    drafter = loaded.load_drafter(str(ck))
    for T in (0.0, 1.0):
        kw = dict(temperature=T, seed=2, threshold=0.5)
        want = spotref.generate(models["tiny-b4"], PROMPTS[0], 16, **kw)
        got = spotref.generate(models["tiny-b4"], PROMPTS[0], 16, drafter=drafter, budget=8, depth=4, **kw)
        assert got.tokens == want.tokens, T


def test_curves_only_with_targets_is_refused(tmp_path):
    """--curves-only measures one target's drafter; with --targets it was silently ignored."""
    with pytest.raises(ValueError, match="--curves-only re-measures one target's drafter"):
        tu.run(parser().parse_args(["u", "--targets", "a,b", "--curves-only", "--out", str(tmp_path / "x")]))


@pytest.mark.slow
def test_any_block_size_header_loads_unstrict_and_stays_exact(targets, tmp_path):
    """Loaded strict, a B = 8 drafter without the header flag is refused on a B = 4 target; with
    the flag it runs, exactly, even when asked for strict."""
    models, _ = targets
    m4 = models["tiny-b4"]
    om = train_drafter.order.OrderModel(8, set_hidden=None)
    loaded.save_order_model(tmp_path / "plain.pt", om, {})
    loaded.save_order_model(tmp_path / "any.pt", om, {"any_block_size": True})
    plain = loaded.load_drafter(str(tmp_path / "plain.pt"), strict=True)
    assert plain.block_size == 8
    with pytest.raises(ValueError, match="block size"):
        spotref.generate(m4, PROMPTS[0], 8, drafter=plain)
    anyb = loaded.load_drafter(str(tmp_path / "any.pt"), strict=True)
    assert isinstance(anyb, SpotDrafter) and anyb.block_size is None
    for T in (0.0, 1.0):
        want = spotref.generate(m4, PROMPTS[0], 12, temperature=T, seed=1)
        got = spotref.generate(m4, PROMPTS[0], 12, temperature=T, seed=1, drafter=anyb, budget=8)
        assert got.tokens == want.tokens


@pytest.mark.slow
@pytest.mark.parametrize("name", ["gsm-b32", "stdlib-b16", "gsm-llada"])
def test_the_shipped_universal_drafter_is_exact_on_any_target(name):
    """``load_drafter("universal")`` runs unrefused on targets of block size 32 and 16 and on a
    whole-canvas target, with exact decoding's tokens at T = 0 and 1."""
    from spotref.record.prompts import prompts_for

    drafter = spotref.load_drafter("universal")
    assert drafter.block_size is None and "gsm-dream" in drafter.header["target"]["held_out"]
    target = spotref.load_target(name)
    prompt = prompts_for(target, 1, "test", 64)[0]
    for T in (0.0, 1.0):
        kw = dict(temperature=T, seed=2, stop_ids=target.stop_ids)
        want = spotref.generate(target.model, prompt, 16, **kw)
        got = spotref.generate(target.model, prompt, 16, drafter=drafter, budget=16, depth=8, **kw)
        assert got.tokens == want.tokens, (name, T)
        assert got.passes < want.passes or T > 0, (name, T)  # it drafts: fewer passes at T = 0
