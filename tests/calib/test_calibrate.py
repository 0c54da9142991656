"""spotref calibrate-sets: a set drafter refit on a new target changes only the named parameters,
decodes exactly, and bad requests are refused before any work (tiny models: seconds)."""

from dataclasses import dataclass

import numpy as np
import pytest
import torch
from helpers import tiny_model

import spotref
from spotref.calib import calibrate as cal
from spotref.calib.fit import CALIBRATED, SET_HEAD_ONLY
from spotref.cli.main import main
from spotref.drafters import order
from spotref.drafters.spot import SpotDrafter
from spotref.load.drafters import load_order_model, save_order_model

B = 8  # the tiny target's block size


@dataclass
class TinyTarget:
    """Stands in for a bundled ``Target``: a tiny SDAR model and numeric prompts."""

    model: object
    name: str = "tiny"
    stop_ids: object = None

    def heldout(self, n, seed, split):
        rng = np.random.default_rng(seed)
        return [(" ".join(map(str, rng.integers(0, 60, 12))), None) for _ in range(n)]

    def encode(self, text):
        return [int(t) for t in text.split()]


@pytest.fixture(scope="module")
def target():
    return TinyTarget(tiny_model(V=61, B=B, init=1.0, layers=1))


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    """A set drafter of block size 16 (another target's): random set-head output weights."""
    torch.manual_seed(0)
    model = order.OrderModel(16, d_model=32, layers=1, heads=2, ff=64).eval()
    with torch.no_grad():
        model.set_head[2].weight.normal_(0, 0.5)
    path = tmp_path_factory.mktemp("src") / "source.pt"
    save_order_model(path, model, {"target": {"name": "other"}})
    return path


SMALL = dict(prompts=3, new_tokens=8, prompt_tokens=8, taus=[0.9, 0.7], temperatures=[0.0, 1.0], steps=30)


@pytest.fixture(scope="module")
def recording(source, target):
    """``record_calibration``'s trajectories of the tiny target under ``SMALL``."""
    o = cal.CalibOptions.parse(cal.add_arguments, [str(source), "tiny"])
    return cal.record_calibration(target, cal.CalibOptions(**{**{k: getattr(o, k) for k in o.names()}, **SMALL}))[0]


@pytest.fixture(scope="module")
def calibrated(source, target):
    return cal.calibrate_sets(source, target, **SMALL)


TENSORS = ("set_scale", "set_head.2.weight", "set_head.2.bias", "head.weight", "skip.weight")  # CALIBRATED's


@pytest.mark.slow
def test_only_the_named_parameters_change(calibrated, source, tmp_path):
    model, header = calibrated
    out = tmp_path / "cal.pt"
    save_order_model(out, model, header)
    got, h = load_order_model(out)
    before, _ = load_order_model(source)
    a, b = got.state_dict(), before.state_dict()
    assert a.keys() == b.keys()
    same = [k for k in a if torch.equal(a[k], b[k])]
    assert sorted(set(a) - set(same)) == sorted(TENSORS)  # each named one moved, nothing else: the
    # encoder, the set head's hidden layer and head.bias are bit for bit the source's
    assert [n.split("[")[0] for n in CALIBRATED] == list(TENSORS)
    for k in ("head.weight", "skip.weight"):  # only the next-commit row (0); the token row is kept
        assert not torch.equal(a[k][0], b[k][0]) and torch.equal(a[k][1], b[k][1])
    c = h["calibration"]
    d_model, features = 32, order.N_FEATURES
    assert c["parameters"] == list(CALIBRATED) and c["n_parameters"] == 1 + 64 + 1 + d_model + features
    assert c["loss_after"] <= c["loss_before"] and c["prompts"] == 3 and c["states"] > 0
    assert h["target"]["name"] == "tiny" and got.block_size == B  # the new target's drafter


def test_set_head_only_keeps_the_next_commit_rows(source, target):
    model, header = cal.calibrate_sets(source, target, **SMALL, set_head_only=True)
    before, _ = load_order_model(source)
    a, b = model.state_dict(), before.state_dict()
    assert sorted(k for k in a if not torch.equal(a[k], b[k])) == sorted(SET_HEAD_ONLY)
    c = header["calibration"]
    assert c["parameters"] == list(SET_HEAD_ONLY) and c["n_parameters"] == 64 + 1 + 1


def test_the_fit_moves_the_next_commit_ranking_towards_the_truth(source, recording):
    """A single commit's fallback term is the next-commit head's: refitting its row raises the
    true decisions' probability where the set head alone could not (the 66-number fit's case)."""
    from spotref.calib import fit

    model, _ = load_order_model(source)
    model = cal.for_block_size(model, B)
    data = fit.frozen(model, recording)
    start = fit.Theta.of(model)
    sets_only = fit.Theta(*[t.clone() for t in start.fitted()], start.head_bias)
    fit.fit(model, data, steps=60)
    after = fit.Theta.of(model)
    sets_only.scale, sets_only.w, sets_only.b = after.scale, after.w, after.b  # the old calibration's numbers
    assert fit.nll(data, *fit.logits(data, after)) < fit.nll(data, *fit.logits(data, sets_only))


@pytest.fixture(scope="module")
def full(source, target):
    return cal.calibrate_sets(source, target, **{**SMALL, "steps": 40}, full=True)


@pytest.mark.slow
def test_full_fine_tunes_every_weight_and_lowers_the_loss(full, source):
    """``--full``: the encoder moves too (every tensor but ``head.bias``' unused token row may
    change); the header says so and counts every number; the loss is not worse than the source's."""
    model, header = full
    before, _ = load_order_model(source)
    a, b = model.state_dict(), before.state_dict()
    moved = [k for k in a if not torch.equal(a[k], b[k])]
    assert any(k.startswith("encoder.") for k in moved) and any(k.startswith("embed.") for k in moved)
    c = header["calibration"]
    assert c["parameters"] == ["every weight"] and c["n_parameters"] == sum(v.numel() for v in model.parameters())
    assert c["loss_after"] < c["loss_before"] and c["steps"] == 40 and c["examples"] > 0


def test_a_full_fine_tune_no_better_than_the_source_keeps_the_source(source, recording):
    """The guard: a fine-tune that ends worse on its examples (lr so large it diverges) is dropped."""
    from spotref.calib import fit

    model, _ = load_order_model(source)
    model = cal.for_block_size(model, B)
    start = {k: v.clone() for k, v in model.state_dict().items()}
    got = fit.fit_full(model, recording, steps=5, lr=50.0)
    assert got["loss_after"] == got["loss_before"]
    assert all(torch.equal(v, start[k]) for k, v in model.state_dict().items())


def test_a_fine_tune_of_some_weights_moves_only_those(source, recording):
    """``fit_full(which=...)`` (benchmarks/sets_adaptation.py's parameter groups): the rest stays."""
    from spotref.calib import fit

    model, _ = load_order_model(source)
    model = cal.for_block_size(model, B)
    start = {k: v.clone() for k, v in model.state_dict().items()}
    got = fit.fit_full(model, recording, steps=20, which=lambda n: n.startswith("embed."))
    assert got["loss_after"] < got["loss_before"]
    moved = sorted(k for k, v in model.state_dict().items() if not torch.equal(v, start[k]))
    assert moved and all(k.startswith("embed.") for k in moved)


@pytest.mark.slow
@pytest.mark.parametrize("fit", ["calibrated", "full"])
@pytest.mark.parametrize("T", [0.0, 1.0])
@pytest.mark.parametrize("tau", [0.9, 0.7])
def test_the_calibrated_drafter_decodes_exactly(calibrated, full, target, T, tau, fit):
    drafter = SpotDrafter((calibrated if fit == "calibrated" else full)[0])  # strict: the target's block size
    prompt, kw = [11, 2, 9, 4, int(10 * tau)], dict(temperature=T, seed=3, threshold=tau)
    exact = spotref.generate(target.model, prompt, 2 * B, **kw)
    res = spotref.generate(target.model, prompt, 2 * B, drafter=drafter, budget=8, depth=4, **kw)
    assert res.tokens == exact.tokens


def test_requests_are_refused_before_any_work(source, target, tmp_path):
    with pytest.raises(ValueError, match=r"--prompts 33: a light calibration reads at most 32 prompts"):
        cal.calibrate_sets(source, target, prompts=33)
    with pytest.raises(ValueError, match=r"--taus must be thresholds in \(0, 1\), got 1.5"):
        cal.calibrate_sets(source, target, taus=[0.9, 1.5])
    with pytest.raises(ValueError, match=r"--full and --set-head-only: choose one"):
        cal.calibrate_sets(source, target, full=True, set_head_only=True)
    bare = tmp_path / "bare.pt"
    model, _ = load_order_model(source)
    save_order_model(bare, order.without_set_head(model), {})
    with pytest.raises(ValueError, match=r"has no set head .*--sets-only adds one"):
        cal.calibrate_sets(bare, target)
    with pytest.raises(ValueError, match="no SPOT drafter named 'nope'"):
        cal.calibrate_sets("nope", target)
    assert (
        cal.calibrate_sets(
            source, target, **{**SMALL, "prompts": 32, "steps": 1, "taus": [0.9], "temperatures": [0.0]}
        )[1]["calibration"]["prompts"]
        == 32
    )


def test_the_command_refuses_before_making_a_run_directory(source, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    cases = [
        (["stdlib-b16", "--prompts", "40"], "at most 32 prompts"),
        (["stdlib-b16", "--out", str(cal.__file__).replace("calibrate.py", "x.pt")], "is a shipped file"),
        (["no-such-target", "--out", "x.pt"], "no-such-target"),
    ]
    for extra, message in cases:
        assert main(["calibrate-sets", str(source), *extra]) == 2
        assert message in capsys.readouterr().err
    assert not (tmp_path / "runs").exists() and not (tmp_path / "x.pt").exists()


@pytest.mark.slow
def test_auto_chooses_the_bundled_set_drafter_with_the_lowest_loss(target, recording, monkeypatch):
    """``auto`` scores every bundled set drafter on the recording and takes the lowest loss; the
    target's own (by name, or by the fingerprint in its header) is never a candidate."""
    from spotref.load.drafters import list_checkpoints, load_drafter

    with_sets = {n for n in list_checkpoints() if load_drafter(n).model.has_sets}
    name, losses = cal.chosen_source(target, recording)
    assert set(losses) == with_sets and name == min(losses, key=losses.get)
    assert all(np.isfinite(v) and v > 0 for v in losses.values())
    named = cal.chosen_source(TinyTarget(target.model, name="stdlib-b32"), recording)[1]
    assert set(named) == with_sets - {"stdlib-b32"}
    own = load_drafter("gsm-b16").header["target"]["fingerprint"]
    monkeypatch.setattr(cal, "model_fingerprint", lambda model: own)
    assert set(cal.chosen_source(target, recording)[1]) == with_sets - {"gsm-b16"}
    monkeypatch.setattr(cal, "list_checkpoints", lambda: ["gsm-llada"])  # no set head
    with pytest.raises(ValueError, match="auto: no bundled set drafter other than tiny's own"):
        cal.chosen_source(target, recording)


@pytest.mark.slow
def test_auto_calibrates_the_chosen_drafter_and_records_the_choice(target, recording):
    model, header = cal.calibrate_sets("auto", target, recorded=(recording, 3), **SMALL)
    info = header["calibration"]
    assert info["source"] == min(info["source_losses"], key=info["source_losses"].get)
    assert header["target"]["name"] == "tiny" and model.has_sets and model.block_size == B


@pytest.mark.slow
def test_the_command_calibrates_from_auto_and_says_what_it_chose(target, recording, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(cal.names, "target", lambda name, directory=None: target)
    monkeypatch.setattr(cal, "record_calibration", lambda t, o: (recording, 3))
    out = tmp_path / "auto.pt"
    assert main(["calibrate-sets", "auto", "tiny", "--out", str(out), "--steps", "5"]) == 0
    info = load_order_model(out)[1]["calibration"]
    assert info["source"] == min(info["source_losses"], key=info["source_losses"].get)
    assert f"auto: {info['source']} (set-head loss on the recording:" in capsys.readouterr().out
