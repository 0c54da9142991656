"""``python -m workbench train-target --family llada / dream``: a whole-canvas model trained on gsm rows."""

import numpy as np
import pytest
import torch

from spotref.configs import CONFIGS
from spotref.spec.dream import DreamModel
from spotref.spec.llada import LLaDAModel
from workbench.train.train_canvas import canvas_batch
from workbench.train.train_export import read_checkpoint
from workbench.train.train_loop import train
from workbench.train.train_options import TrainOptions

pytest.importorskip("tokenizers")
pytest.importorskip("tqdm")

MODELS = {"llada": LLaDAModel, "dream": DreamModel}


def canvas_argv(tmp_path, family, *extra) -> list:
    """A tiny canvas run on gsm rows (prompt up to the assistant header never masked)."""
    return [
        "--name", "canvas", "--runs", str(tmp_path / "runs"), "--family", family,
        "--corpus", "gsm", "--corpus-size", "40", "--corpus-level", "0", "--tokenizer", "bpe300",
        "--rows-per-doc", "--answer-only", "--seq-len", "192", "--block-size", "32",
        "--hidden", "32", "--intermediate", "64", "--layers", "1", "--heads", "2", "--kv-heads", "1",
        "--head-dim", "16", "--batch", "4", "--lr", "3e-3", "--warmup", "2", "--no-progress",
        *extra,
    ]  # fmt: skip


def canvas_run(tmp_path, family, *extra):
    return train(TrainOptions.from_argv(canvas_argv(tmp_path, family, *extra)))


@pytest.mark.slow
@pytest.mark.parametrize("family", ["llada", "dream"])
def test_canvas_training_decreases_the_held_out_canvas_loss(tmp_path, family):
    state = canvas_run(tmp_path, family, "--steps", "12", "--eval-every", "1", "--ckpt-every", "12")
    losses = [h["heldout_loss"] for h in state["history"]]
    assert state["step"] == 12 and len(losses) == 12
    assert losses[-1] < losses[0] - 0.5, losses
    ck = read_checkpoint(tmp_path / "runs" / "canvas" / "ckpt.pt")
    model = MODELS[family](CONFIGS[family].from_dict(ck["state"]["config"]))
    model.load_state_dict(ck["model"])  # the checkpoint is the family's model


@pytest.mark.slow
@pytest.mark.parametrize("family", ["llada", "dream"])
def test_a_resumed_canvas_run_equals_one_run_straight(tmp_path, family):
    """4 steps, stop, 2 more (same command) == 6 steps straight."""
    argv = ("--steps", "6", "--eval-every", "3", "--ckpt-every", "2")
    straight = canvas_run(tmp_path / "a", family, *argv)
    canvas_run(tmp_path / "b", family, *argv, "--until", "4")
    resumed = canvas_run(tmp_path / "b", family, *argv)
    a = read_checkpoint(tmp_path / "a" / "runs" / "canvas" / "ckpt.pt")["model"]
    b = read_checkpoint(tmp_path / "b" / "runs" / "canvas" / "ckpt.pt")["model"]
    untimed = lambda h: [{k: v for k, v in e.items() if k != "train_s"} for e in h]  # wall clock differs
    assert straight["step"] == resumed["step"] == 6
    assert untimed(straight["history"]) == untimed(resumed["history"])
    assert all(torch.equal(a[k], b[k]) for k in a), "resumed weights differ"
    with pytest.raises(ValueError, match="--family: the run canvas was trained with"):
        canvas_run(tmp_path / "b", "dream" if family == "llada" else "llada", *argv)


def test_a_canvas_batch_pads_rows_to_the_canvas_and_never_masks_a_prompt():
    rows = [([5, 6, 7, 8], 2, 4), ([9, 10, 11, 12, 13, 14], 1, 6)]
    x_t, x, masked, t, answer = canvas_batch(rows, 8, 99, 0, np.random.default_rng(0))
    assert x.tolist() == [[5, 6, 7, 8, 0, 0, 0, 0], [9, 10, 11, 12, 13, 14, 0, 0]]
    assert answer.tolist() == [[False] * 2 + [True] * 6, [False] + [True] * 7]
    assert not (masked & ~answer).any() and masked.any(-1).all() and (x_t[masked] == 99).all()
    assert t.shape == (2,) and ((t > 0) & (t < 1)).all()


@pytest.mark.parametrize(
    "extra, message",
    [
        ((), "needs --rows-per-doc"),
        (("--rows-per-doc", "--mix-blocks", "16,32"), "--mix-blocks applies to --family sdar only"),
        (("--rows-per-doc", "--mask-results", "0.5"), "--mask-results applies to --family sdar only"),
        (("--rows-per-doc", "--head-dim", "32"), "--head-dim must be 32 / 2"),
        (("--rows-per-doc", "--suffix-results", "0.5"), "--suffix-results cuts the --decode-states rows"),
    ],
)
def test_options_a_canvas_family_cannot_train_with_are_named(tmp_path, extra, message):
    argv = [
        "--name", "c", "--runs", str(tmp_path), "--family", "llada", "--corpus", "gsm", "--corpus-size", "20",
        "--tokenizer", "bytes", "--hidden", "32", "--heads", "2", "--head-dim", "16", "--steps", "1", *extra,
    ]  # fmt: skip
    with pytest.raises(ValueError, match=message):
        train(TrainOptions.from_argv(argv))


def test_decode_states_apply_to_canvas_families_only(tmp_path):
    argv = ["--name", "c", "--runs", str(tmp_path), "--corpus", "gsm", "--corpus-size", "20", "--steps", "1"]
    with pytest.raises(ValueError, match="--decode-states applies to --family llada / dream only"):
        train(TrainOptions.from_argv([*argv, "--tokenizer", "bytes", "--decode-states", "0.5"]))


def test_a_canvas_batch_with_decode_states_changes_only_the_chosen_rows():
    rows = [(list(range(10, 50)), 4, 30), (list(range(60, 100)), 6, 36), (list(range(1, 41)), 2, 20)]
    plain = canvas_batch(rows, 48, 99, 0, np.random.default_rng(3))
    chosen = np.array([False, True, False])
    drawn = canvas_batch(
        rows, 48, 99, 0, np.random.default_rng(3), (chosen, [None, 3, None], 8, np.random.default_rng(4))
    )
    for a, b in zip(plain, drawn):
        assert torch.equal(a[~torch.from_numpy(chosen)], b[~torch.from_numpy(chosen)])
    x_t, _, masked, t, answer = (a[1] for a in drawn)
    assert (x_t[:9] != 99).all() and (x_t[9:] == 99).all()  # cut at answer offset 3: position 9
    assert masked.nonzero().flatten().tolist() == list(range(9, 14)) and t == 5 / 8


@pytest.mark.slow
@pytest.mark.parametrize("family", ["llada", "dream"])
def test_a_canvas_run_with_decode_states_trains_and_resumes_exactly(tmp_path, family):
    argv = (
        "--steps",
        "4",
        "--eval-every",
        "2",
        "--ckpt-every",
        "2",
        "--decode-states",
        "0.7",
        "--suffix-results",
        "0.5",
    )
    straight = canvas_run(tmp_path / "a", family, *argv)
    canvas_run(tmp_path / "b", family, *argv, "--until", "2")
    resumed = canvas_run(tmp_path / "b", family, *argv)
    a = read_checkpoint(tmp_path / "a" / "runs" / "canvas" / "ckpt.pt")["model"]
    b = read_checkpoint(tmp_path / "b" / "runs" / "canvas" / "ckpt.pt")["model"]
    assert straight["step"] == resumed["step"] == 4 and all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.parametrize("family", ["llada", "dream"])
def test_init_from_an_sdar_target_starts_a_canvas_run_from_its_converted_weights(family):
    """--init gsm-b32 on a LLaDA or Dream run loads canvas_from_sdar(gsm-b32) (its lineage recorded)."""
    from spotref.load.targets import load_target
    from workbench.train.canvas_start import canvas_from_sdar
    from workbench.train.train_export import start_from

    target = load_target("gsm-b32")
    want = canvas_from_sdar(target.model, family).state_dict()
    model = canvas_from_sdar(target.model, family)
    with torch.no_grad():
        for p in model.parameters():
            p.zero_()
    record = start_from(model, "gsm-b32", target.tokenizer)
    assert record and all(torch.equal(v, want[k]) for k, v in model.state_dict().items())


@pytest.mark.slow
@pytest.mark.parametrize("family", ["llada", "dream"])
def test_a_canvas_run_exports_from_its_checkpoint_with_its_serving_precision(tmp_path, family):
    """``export_run`` rebuilds the family's model (not an SDAR one) and measures the canvas
    loss; ``--served-dtype`` is the exported config's torch_dtype, which decides by default."""
    from spotref.load.targets import load_target
    from workbench.train.train_export import export_run

    canvas_run(tmp_path, family, "--steps", "3", "--ckpt-every", "3", "--served-dtype", "bfloat16")
    run = tmp_path / "runs" / "canvas"
    export_run(run, tmp_path / "out", "canvas-x")
    export_run(run, tmp_path / "out", "canvas-y", served_dtype="float16")
    x, y = (load_target(str(tmp_path / "out" / f"canvas-{n}.json")) for n in "xy")
    assert isinstance(x.model, MODELS[family]) and x.meta["family"] == family
    assert x.meta["config"]["torch_dtype"] == "bfloat16" and y.meta["config"]["torch_dtype"] == "float16"
    ck = read_checkpoint(run / "ckpt.pt")
    assert x.meta["heldout_loss"] == pytest.approx(ck["state"]["history"][-1]["heldout_loss"], abs=1e-3)


@pytest.mark.slow
def test_export_run_writes_a_shipped_directory_only_when_allowed(tmp_path, monkeypatch):
    """``export_run(update_shipped=True)`` may write into the package (its up-front check too);
    without it the check refuses before any work."""
    from spotref import files
    from workbench.train.train_export import export_run

    canvas_run(tmp_path, "llada", "--steps", "1", "--ckpt-every", "1")
    package = tmp_path / "package"
    monkeypatch.setattr(files, "PACKAGE", package)  # a stand-in package: nothing real changes
    with pytest.raises(ValueError, match="shipped file"):
        export_run(tmp_path / "runs" / "canvas", package / "targets", "c")
    assert not (package / "targets").exists()
    export_run(tmp_path / "runs" / "canvas", package / "targets", "c", update_shipped=True)
    assert (package / "targets" / "c.json").is_file()


@pytest.mark.slow
@pytest.mark.parametrize("family", ["llada", "dream"])
def test_fold_norms_starts_a_canvas_run_from_the_folded_weights(tmp_path, monkeypatch, family):
    """--fold-norms: the run starts from canvas_from_sdar(gsm-b32, calibration = its first 64
    training documents), its lineage says so; a run checkpoint or a same-family target is refused."""
    import workbench.train.train_loop as train_loop
    from spotref.load.targets import load_target
    from workbench.train.canvas_start import FOLD_DOCUMENTS, canvas_from_sdar
    from workbench.train.train_data import make_corpus
    from workbench.train.train_export import start_from

    target, started = load_target("gsm-b32"), {}

    def recorded(model, spec, tok, deepen=False, calibration=None):
        record = start_from(model, spec, tok, deepen, calibration)
        started.update(calibration=calibration, weights={k: v.clone() for k, v in model.state_dict().items()})
        return record

    monkeypatch.setattr(train_loop, "start_from", recorded)
    argv = [
        "--name", "f", "--runs", str(tmp_path), "--family", family, "--corpus", "gsm", "--corpus-size", "80",
        "--corpus-level", "3", "--tokenizer", "spotref/load/targets/gsm-b32.tokenizer.json", "--rows-per-doc",
        "--answer-only", "--hidden", "192", "--layers", "4", "--heads", "6", "--kv-heads", "2", "--head-dim", "32",
        "--intermediate", "512", "--rope-theta", "10000", "--batch", "2", "--steps", "1", "--no-progress",
        "--init", "gsm-b32", "--fold-norms",
    ]  # fmt: skip
    state = train(TrainOptions.from_argv(argv))
    assert state["init"]["folded_norms_over_documents"] == FOLD_DOCUMENTS
    docs = make_corpus(TrainOptions.from_argv(argv)).documents("train")[:FOLD_DOCUMENTS]
    assert started["calibration"] == [target.tokenizer.encode(d) for d in docs]
    want = canvas_from_sdar(target.model, family, started["calibration"]).state_dict()
    dropped = canvas_from_sdar(target.model, family).state_dict()
    assert all(torch.equal(started["weights"][k], want[k]) for k in want)
    assert any(not torch.equal(want[k], dropped[k]) for k in want)
    model = MODELS[family](CONFIGS[family].from_dict(state["config"]))
    with pytest.raises(ValueError, match="--init .* is a run checkpoint"):
        start_from(model, str(tmp_path / "f" / "ckpt.pt"), target.tokenizer, calibration=[[1, 2]])
    with pytest.raises(ValueError, match=f"--init is a {family} target"):
        start_from(model, f"gsm-{family}", target.tokenizer, calibration=[[1, 2]])


@pytest.mark.parametrize(
    "extra, message",
    [
        (("--family", "llada", "--rows-per-doc", "--fold-norms"), "--fold-norms folds the q/k norms of an SDAR --init"),
        (("--init", "gsm-b32", "--fold-norms"), "--fold-norms folds the q/k norms of an SDAR --init"),
    ],
)
def test_fold_norms_needs_a_canvas_run_started_from_an_sdar_target(tmp_path, extra, message):
    argv = ["--name", "c", "--runs", str(tmp_path), "--corpus", "gsm", "--corpus-size", "20", "--tokenizer", "bytes",
            "--hidden", "32", "--heads", "2", "--head-dim", "16", "--steps", "1", *extra]  # fmt: skip
    with pytest.raises(ValueError, match=message):
        train(TrainOptions.from_argv(argv))
