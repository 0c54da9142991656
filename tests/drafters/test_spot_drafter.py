"""The SPOT and calibrated drafters: exact output whatever their weights, training pipeline,
checkpoints by name / path / target fingerprint, offline acceptance, the cost model."""

import dataclasses

import numpy as np
import pytest
import torch
from helpers import examples, tiny_model
from hypothesis import given, settings
from hypothesis import strategies as st

import spotref
from spotref.conformance import assert_identical, cases, check_case
from spotref.drafters.budget import BUDGETS, choose_budget, expected_commits
from spotref.drafters.calibrated import CalibratedDrafter
from spotref.drafters.inputs import ViewInputs
from spotref.drafters.order import OrderModel
from spotref.drafters.spot import CALLS, SpotDrafter
from spotref.load import drafters as loaded
from spotref.record import trajectories as tj
from spotref.record.trajectories import TrajectoryRecorder, accepted, record
from spotref.train import train_drafter


def spot_for(model, seed=0, second=0.5, calls="level", B=None):
    """An untrained SPOT drafter for blocks of ``B`` (the model's own block size by default)."""
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        return SpotDrafter(OrderModel(B or model.block_size), second=second, calls=calls)


def random_calibrated(seed=0):
    rng = np.random.default_rng(seed)
    table = {(): 0}
    for _ in range(30):
        r = tuple(int(x) for x in rng.integers(0, 3, rng.integers(1, 5)))
        for d in range(1, len(r) + 1):
            table[r[:d]] = table.get(r[:d], 0) + 1
    table.pop(())
    return CalibratedDrafter({"0": table, "1": dict(list(table.items())[:5])})


def with_drafter(make):
    """A generate_fn for ``check_case`` that swaps the suite's drafter for ours."""

    def generate_fn(model, prompt, n, drafter=None, **kw):
        return spotref.generate(model, prompt, n, drafter=make(model), **kw)

    return generate_fn


@pytest.mark.slow
@settings(max_examples=examples(0.25))
@given(case=cases(), seed=st.integers(0, 3), second=st.sampled_from([0.0, 0.5, 1.0]), calls=st.sampled_from(CALLS))
def test_spot_drafter_is_exact(case, seed, second, calls):
    """Untrained order models of any weights, one call per level or per round: tokens identical
    to exact decoding, every rule."""
    check_case(
        dataclasses.replace(case, drafter="confidence"),
        with_drafter(lambda m: spot_for(m, seed, second, calls, B=case.block_size)),
    )


def test_one_call_per_round_calls_the_order_model_once():
    model = tiny_model(V=61, B=8, init=1.0, seed=3)
    for calls, want in (("root", 1), ("level", 5)):
        d = spot_for(model, calls=calls)
        n = []
        d.model.register_forward_hook(lambda *a: n.append(1))
        exact = spotref.generate(model, [1, 2, 3], 16)
        got = spotref.generate(model, [1, 2, 3], 16, drafter=d, budget=16, depth=5)
        assert got.tokens == exact.tokens
        rounds = sum(1 for _, k in got.stats["starts"] if k > 0)
        assert (len(n) == rounds) if want == 1 else (len(n) > rounds)
    with pytest.raises(ValueError, match="calls must be one of level, root"):
        SpotDrafter(OrderModel(8), calls="leaf")


@pytest.mark.slow
@settings(max_examples=examples(0.25))
@given(case=cases(), seed=st.integers(0, 3))
def test_calibrated_drafter_is_exact(case, seed):
    check_case(dataclasses.replace(case, drafter="confidence"), with_drafter(lambda m: random_calibrated(seed)))


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A tiny target, its recorded trajectories, and a briefly trained drafter checkpoint."""
    model = tiny_model(V=61, B=8, init=1.0, seed=3)
    prompts = [[1, 2, 3, 4, 5, 6, 7, 8], [9, 10, 11], [12] * 8]
    data = {T: record(model, prompts, 24, T, seeds=(0, 1)) for T in (0.0, 1.0)}
    options = train_drafter.DrafterOptions.parse(
        train_drafter.add_arguments,
        ["tiny", "--lr", "3e-3", "--steps", "30", "--batch", "16", "--tf-depth", "4", "--seed", "0"],
    )
    om = train_drafter.train(
        OrderModel(8), train_drafter.tj.Trajectories.concat(list(data.values())), options, log=lambda *a: None
    )
    cal = CalibratedDrafter(train_drafter.calibrated_tables(data, 2))
    sd = SpotDrafter(om)
    curves = train_drafter.curves(
        {"spot": lambda r, N, D, T: sd.draft(r, N, D), "calibrated": lambda r, N, D, T: cal.draft(r, N, D, T)},
        data,
        budgets=(1, 4),
        depth=4,
        limit=20,
    )
    path = tmp_path_factory.mktemp("order") / "tiny.pt"
    loaded.save_order_model(
        path,
        om,
        {
            "target": {"name": "tiny", "fingerprint": loaded.model_fingerprint(model)},
            "calibrated": cal.to_header(),
            "curves": curves,
        },
    )
    return model, prompts, data, path


@pytest.mark.slow
@pytest.mark.parametrize("T,threshold", [(0.0, None), (1.0, None), (0.5, 0.3), (2.0, None)])
def test_trained_drafters_are_exact(trained, T, threshold):
    model, prompts, _, path = trained
    for d in (loaded.load_drafter(str(path)), CalibratedDrafter.from_header(torch.load(path)["header"])):
        for p in prompts:
            kw = dict(temperature=T, seed=5, threshold=threshold)
            exact = spotref.generate(model, p, 24, **kw)
            got = spotref.generate(model, p, 24, drafter=d, budget=16, depth=6, **kw)
            assert_identical(exact, got.tokens, 8, len(p))
            assert got.passes <= exact.passes


def test_accuracy_and_offline_acceptance(trained):
    _, _, data, path = trained
    model, header = loaded.load_order_model(path)
    acc = train_drafter.accuracy(model, data[0.0])
    assert 0.0 <= acc <= 1.0
    assert set(header["curves"]) == {"spot", "calibrated"}
    assert all(c >= 1.0 for k in header["curves"].values() for t in k.values() for c in t.values())


def test_recorded_inputs_match_the_live_view():
    """A recorded row reads like the view it came from: same coupled and runner-up tokens."""
    model = tiny_model(V=61, B=8, init=1.0, seed=4)
    live = []

    class Both(TrajectoryRecorder):
        def __call__(self, view):
            inp = ViewInputs(view)
            live.append([(inp.coupled(view.step + d)[0], inp.second(view.step + d)[0]) for d in range(3)])
            return super().__call__(view)

    rec = Both()
    spotref.generate(model, [1, 2, 3], 16, temperature=1.0, seed=2, drafter=rec, budget=1, depth=0)
    for row, want in zip(rec.rows, live):
        n = int((row["tokens"] == model.mask_id).sum())
        for d in range(min(3, n)):
            assert (row["ctok"][d] == want[d][0]).all() and (row["ctok2"][d] == want[d][1]).all()


def test_offline_acceptance_matches_the_decoder(trained):
    """The oracle's offline acceptance is the whole truth; a root-only draft accepts nothing."""
    _, _, data, _ = trained
    row = data[1.0].row(0)
    chain = Draft_chain(row, 3)
    assert accepted(chain, row) == min(3, row.accepted_prefix(3))
    assert accepted(spotref.Draft.root(), row) == 0


def Draft_chain(row, n):
    return spotref.Draft.chain(
        [
            ((int(row.fut_pos[d]), int(row.coupled(row.step + d)[0][row.fut_pos[d]])),)
            for d in range(min(n, len(row.fut_pos)))
        ]
    )


def test_resolve_by_name_and_fingerprint(trained, tmp_path, monkeypatch):
    model, prompts, _, path = trained
    (tmp_path / "tiny.pt").write_bytes(path.read_bytes())
    monkeypatch.setattr(loaded, "ORDER_DIR", tmp_path)
    assert loaded.list_checkpoints() == ["tiny"]
    assert isinstance(loaded.load_drafter("tiny"), SpotDrafter)
    exact = spotref.generate(model, prompts[0], 16)
    for name in ("spot", "calibrated"):
        got = spotref.generate(model, prompts[0], 16, drafter=name, budget=8)
        assert got.tokens == exact.tokens
    other = tiny_model(V=61, B=8, init=1.0, seed=9)
    with pytest.raises(ValueError, match="no shipped drafter checkpoint matches"):
        spotref.generate(other, prompts[0], 16, drafter="spot")
    with pytest.raises(ValueError, match="no SPOT drafter named 'nope'"):
        loaded.load_drafter("nope")


def test_a_drafter_of_another_block_size_transfers_unless_strict():
    """Not strict by default: a block-8 order model drafts for a block-4 target, exactly (it was
    refused); ``strict=True`` asks for the refusal, a clear error before any pass."""
    model = tiny_model(V=61, B=4)
    exact = spotref.generate(model, [1, 2, 3], 8).tokens
    assert spotref.generate(model, [1, 2, 3], 8, drafter=SpotDrafter(OrderModel(8)), budget=4).tokens == exact
    with pytest.raises(ValueError, match="trained for block size 8, the target's block size is 4, and it is strict"):
        spotref.generate(model, [1, 2, 3], 8, drafter=SpotDrafter(OrderModel(8), strict=True))


@pytest.mark.slow
def test_cost_model_choice():
    assert choose_budget({1: 1.0, 4: 2.0, 16: 8.0}, {1: 1.0, 4: 3.0, 16: 5.0}) == 4
    assert expected_commits(None, 8, 0.0) > 1.0
    model = tiny_model(V=61, B=8)
    assert spotref.Speculator.for_model(model, drafter=spot_for(model), budget="auto", depth=4).budget in BUDGETS


def test_spot_drafter_is_a_module_and_a_callable(trained):
    _, _, _, path = trained
    d = loaded.load_drafter(str(path))
    assert isinstance(d, torch.nn.Module) and callable(d)
    assert 0.60e6 <= sum(p.numel() for p in d.parameters()) <= 0.64e6  # no block-size-bound table


def test_same_config_other_weights_falls_back_with_a_warning(trained, tmp_path, monkeypatch):
    model, prompts, _, path = trained
    blob = torch.load(path, weights_only=True)
    blob["header"]["target"] = {
        "fingerprint": "0" * 16,
        "config_fingerprint": loaded.model_fingerprint(model, weights=False),
    }
    torch.save(blob, tmp_path / "old.pt")
    monkeypatch.setattr(loaded, "ORDER_DIR", tmp_path)
    with pytest.warns(UserWarning, match="another version of this target"):
        got = spotref.generate(model, prompts[0], 16, drafter="spot", budget=8)
    assert got.tokens == spotref.generate(model, prompts[0], 16).tokens


def left_to_right(inp, N, D):
    """A chain over the masked positions, leftmost first, coupled tokens: reads a live
    ``ViewInputs`` and a recorded ``Row`` alike (no float16-rounded features)."""
    masked = np.flatnonzero(inp.tokens == inp.mask_id)[: min(N - 1, D)]
    return spotref.Draft.chain([((int(j), int(inp.coupled(inp.step + d)[0][j])),) for d, j in enumerate(masked)])


def beside_unseen(inp, N, D):
    """A chain over the masked positions nearest the unseen commit first (reads ``unseen``)."""
    masked, unseen = np.flatnonzero(inp.tokens == inp.mask_id), np.flatnonzero(inp.unseen)
    assert len(unseen) >= 1
    near = sorted(masked, key=lambda j: (np.abs(unseen - j).min(), j))[: min(N - 1, D)]
    return spotref.Draft.chain([((int(j), int(inp.coupled(inp.step + d)[0][j])),) for d, j in enumerate(near)])


@pytest.mark.slow
@pytest.mark.parametrize("T", [0.0, 1.0])
@pytest.mark.parametrize("chain", [left_to_right, beside_unseen])
def test_offline_curve_equals_online_commits_per_round(T, chain):
    """Rounds simulated on recorded trajectories commit exactly what the decoder commits per
    round (a mean over round starts: averaging over every recorded state would overcount); a
    recorded row reads what the live view reads, the unseen commit included."""
    model = tiny_model(V=61, B=8, init=1.0, seed=3)
    prompts, N, D = [[1, 2, 3, 4, 5, 6, 7, 8], [9, 10, 11], [12] * 8], 6, 4
    online = []
    for p in prompts:
        res = spotref.generate(
            model,
            p,
            24,
            temperature=T,
            seed=0,
            budget=N,
            depth=D,
            drafter=lambda view: chain(ViewInputs(view), view.budget, view.depth),
        )
        online += [a for (_, k), a in zip(res.stats["starts"], res.stats["accepted"]) if k > 0]
    data = {T: record(model, prompts, 24, T, seeds=(0,))}
    offline = train_drafter.curves(
        {"chain": lambda r, n, d, t: chain(r, n, d)}, data, budgets=(N,), depth=D, limit=10**6
    )
    assert offline["chain"]["0" if T == 0 else "1"][str(N)] == pytest.approx(np.mean(online), abs=1e-12)
    assert max(online) > 1 and min(online) == 1  # rounds of both kinds were seen


@pytest.mark.slow
def test_curves_only_remeasures_and_keeps_the_weights(trained, tmp_path, monkeypatch):
    from functools import partial
    from types import SimpleNamespace

    monkeypatch.setattr(train_drafter, "curves", partial(train_drafter.curves, limit=40))  # 400 rounds: 20 s

    model, _, data, path = trained
    ck = tmp_path / "d.pt"
    stale = torch.load(path, weights_only=True)  # accuracies from other trajectories, to be replaced
    stale["header"] = {
        **stale["header"],
        "heldout_accuracy": {"0": -1.0, "1": -1.0},
        "confidence_accuracy": {"0": -1.0, "1": -1.0},
    }
    torch.save(stale, ck)
    for T, ds in data.items():  # the trajectory caches remeasure reads
        for split in ("test", "train"):
            ds.save(
                tmp_path / f"tiny-{loaded.model_fingerprint(model)}-{split}-T{T:g}-n3-p64-g128-auto-v{tj.FORMAT}.pt"
            )
    options = train_drafter.DrafterOptions.parse(
        train_drafter.add_arguments,
        ["tiny", "--curves-only", "--out", str(ck), "--data-dir", str(tmp_path)]
        + ["--test-prompts", "3", "--prompts", "3", "--prompt-tokens", "64", "--new-tokens", "128", "--seeds", "1"],
    )
    assert train_drafter.remeasure(SimpleNamespace(name="tiny", model=model, stop_ids=None), options) == 0
    before, after = torch.load(path, weights_only=True), torch.load(ck, weights_only=True)
    assert before["state_dict"].keys() == after["state_dict"].keys()
    assert all(torch.equal(before["state_dict"][k], after["state_dict"][k]) for k in before["state_dict"])
    sd, cal = loaded.load_drafter(str(path)), CalibratedDrafter.from_header(before["header"])
    want = train_drafter.curves(
        {
            "spot": lambda r, N, D, T: sd.draft(r, N, D),
            "spot-root": lambda r, N, D, T: sd.with_calls("root").draft(r, N, D),
            "calibrated": lambda r, N, D, T: cal.draft(r, N, D, T),
        },
        data,
    )
    assert after["header"]["curves"] == want and "curves_command" in after["header"]
    log = train_drafter.NodeLog(sd, 64)  # the node calibration, from the rounds simulated at N = 64 alone
    train_drafter.curves({"spot": log}, data, budgets=(64,))
    assert after["header"]["node_calibration"] == log.tables()
    fit = after["header"]["train_accuracy"]  # the model and the stale order on training states
    assert fit["0"]["model"] == train_drafter.accuracy(sd.model, data[0.0])
    assert fit["0"]["stale"] == train_drafter.confidence_accuracy(data[0.0])
    for T in (0.0, 1.0):  # held-out accuracies re-measured on these trajectories
        key = "0" if T == 0 else "1"
        assert after["header"]["heldout_accuracy"][key] == train_drafter.accuracy(sd.model, data[T])
        assert after["header"]["confidence_accuracy"][key] == train_drafter.confidence_accuracy(data[T])
    remeasured = (
        "curves",
        "curves_command",
        "node_calibration",
        "train_accuracy",
        "heldout_accuracy",
        "confidence_accuracy",
    )
    assert {k: v for k, v in after["header"].items() if k not in remeasured} == {
        k: v for k, v in before["header"].items() if k not in remeasured
    }
