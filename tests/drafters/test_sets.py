"""SPOT-Sets: set enumeration, the set head, threshold trajectories, set training, exactness."""

import dataclasses
import itertools
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from helpers import examples, tiny_model
from hypothesis import given, settings
from hypothesis import strategies as st

import spotref
from spotref.conformance import cases, check_case, spot_drafter
from spotref.drafters import order
from spotref.drafters.sets import top_sets
from spotref.load import drafters as loaded
from spotref.record.trajectories import Trajectories, accepted, record, record_one
from spotref.train import train_drafter
from spotref.train import train_sets as ts


@given(st.lists(st.floats(-30.0, 30.0), min_size=1, max_size=7), st.integers(1, 130), st.booleans(), st.data())
def test_top_sets_are_the_most_probable_decisions(z, k, fallback, data):
    """Against brute force: the k best decisions, best first, no set twice. With a fallback
    distribution P({j}) also gets P(E = {}) p_next(j); without one the empty set is renormalised away."""
    z = np.array(z)
    n, pos = len(z), np.arange(len(z)) * 3 + 1
    q = 1 / (1 + np.exp(-z))
    p_next = None
    if fallback:
        w = np.array(data.draw(st.lists(st.floats(0.01, 1.0), min_size=n, max_size=n)))
        p_next = w / w.sum()
    prob, empty = {}, float(np.prod(1 - q))
    for m in itertools.product([False, True], repeat=n):
        m = np.array(m)
        if m.any():
            prob[tuple(pos[m].tolist())] = float(np.prod(np.where(m, q, 1 - q)))
    if p_next is None:
        nonempty = -np.expm1(np.log1p(-q).sum())  # 1 - P(E = {}), without cancellation
        prob = {s: p / nonempty for s, p in prob.items()}
    else:
        for i in range(n):
            prob[(int(pos[i]),)] += empty * p_next[i]
        assert sum(prob.values()) == pytest.approx(1.0)
    got = top_sets(z, pos, k, p_next)
    assert len(got) == min(k, len(prob)) and len({s for _, s in got}) == len(got)
    for p, s in got:
        assert p == pytest.approx(prob[s], rel=1e-9, abs=1e-15)
    best = sorted(prob.values(), reverse=True)
    assert [p for p, _ in got] == pytest.approx(best[: len(got)], rel=1e-9, abs=1e-15)


@pytest.mark.slow
@settings(max_examples=examples(0.25))
@given(case=cases(), seed=st.integers(0, 3), tau=st.floats(0.01, 0.99))
def test_spot_sets_drafter_is_exact(case, seed, tau):
    """SPOT-Sets with any set-head weights: tokens identical to threshold decoding."""
    case = dataclasses.replace(case, drafter="confidence", kwargs={**case.kwargs, "threshold": tau})

    def generate_fn(model, prompt, n, drafter=None, **kw):
        return spotref.generate(model, prompt, n, drafter=spot_drafter(seed)(case.block_size), **kw)

    check_case(case, generate_fn)


def test_an_untrained_set_head_reads_the_stale_confidences():
    """Zero-initialised, the set head's most probable exceed set is the stale set {c > tau} and
    its fallback is the most confident stale position: SPOT-Sets starts from the training-free
    sets and learns corrections."""
    model = tiny_model(V=61, B=8, init=1.0, seed=3)
    om = order.OrderModel(8).eval()
    for T, tau in [(0.0, 0.5), (1.0, 0.3), (0.0, 0.9)]:
        ds = record(model, [[1, 2, 3, 4, 5, 6, 7, 8], [9, 10, 11]], 24, T, seeds=(0,), threshold=tau)
        rows = np.arange(len(ds))
        x, masked, taus, _ = ts.set_batch(ds, rows, np.zeros(len(ds), np.int64))
        with torch.no_grad():
            z, s, _ = om.sets(x, masked, taus)
        pc = torch.from_numpy(ds.arrays["pc"][:, 0].astype(np.float32))
        stale = masked & (pc > tau)
        assert torch.equal(z > 0, stale)
        conf = torch.where(masked, pc, -1.0)
        assert torch.equal(s.argmax(-1), conf.argmax(-1))


@pytest.mark.parametrize("T,tau", [(0.0, 0.5), (1.0, 0.3), (1.0, 0.9)])
def test_threshold_trajectories_hold_the_true_sets(T, tau):
    """fut_sets replays the exact run's decisions; a chain of them is accepted in full offline."""
    model = tiny_model(V=61, B=8, init=1.0, seed=3)
    prompt = [1, 2, 3, 4, 5]
    exact = spotref.generate(model, prompt, 24, temperature=T, seed=1, threshold=tau)
    ds = record(model, [prompt], 24, T, seeds=(1,), threshold=tau)
    blocks = [r["block"] for r in record_one(model, prompt, 24, T, 1, threshold=tau)]  # the rows' blocks
    truth = {(b, k): frozenset(d) for b, k, d in exact.stats["trajectory"]}
    B = 8
    assert len(ds) == len(blocks) > 0 and np.isclose(ds.arrays["tau"], tau).all()
    for i, b in enumerate(blocks):
        row = ds.row(i)
        want = [truth[(b, k)] for k in range(row.step, B) if (b, k) in truth]
        assert row.fut_sets() == want
        chain = spotref.Draft.chain([tuple(sorted(s)) for s in want])
        assert accepted(chain, row) == len(want)
        if len(want) > 1:  # a true set one step early: not accepted
            assert accepted(spotref.Draft.chain([tuple(sorted(want[1]))]), row) == 0
        first = sorted(want[0])
        if len(first) > 1:  # the right tokens, but in two steps
            assert accepted(spotref.Draft.chain([tuple(first[:1]), tuple(first[1:])]), row) == 0


@pytest.mark.slow
def test_set_training_improves_on_its_training_data_and_keeps_the_order_model():
    model = tiny_model(V=61, B=8, init=1.0, seed=3)
    prompts = [[1, 2, 3, 4, 5, 6, 7, 8], [9, 10, 11], [12] * 8, [20, 21]]
    ds = Trajectories.concat(
        [record(model, prompts, 24, T, seeds=(0,), threshold=tau) for T in (0.0, 1.0) for tau in (0.9, 0.5)]
    )
    om = order.OrderModel(8)
    before = {k: v.clone() for k, v in om.state_dict().items()}
    rows = np.arange(len(ds))
    loss0 = ts.set_loss(om, *ts.set_batch(ds, rows, np.zeros(len(ds), np.int64))).item()
    ts.train_sets(om, ds, steps=60, batch=32, lr=3e-3, tf_depth=3)
    loss1 = ts.set_loss(om, *ts.set_batch(ds, rows, np.zeros(len(ds), np.int64))).item()
    assert loss1 < loss0
    changed = {k for k, v in om.state_dict().items() if not torch.equal(v, before[k])}
    assert changed and all(k.startswith("set_") for k in changed)


def test_concat_leaves_out_an_empty_recording():
    """A recording with no state (its arrays lack the trailing dimensions) joins others unharmed."""
    model = tiny_model(V=61, B=8, init=1.0, seed=3)
    ds = record(model, [[1, 2, 3, 4, 5, 6, 7, 8]], 24, 0.0, seeds=(0,), threshold=0.5)
    empty = record(model, [], 24, 0.0, seeds=(0,), threshold=0.5)
    assert len(empty) == 0 and len(ds) > 0
    both = Trajectories.concat([empty, ds, empty])
    assert len(both) == len(ds) and all(np.array_equal(both.arrays[k], v) for k, v in ds.arrays.items())
    assert len(Trajectories.concat([empty])) == 0


def test_checkpoints_without_a_set_head_draft_confidence_sets(tmp_path):
    """A pre-SPOT-Sets checkpoint loads; under the threshold rule it drafts the confidence sets."""
    model = tiny_model(V=61, B=8, init=1.0, seed=3)
    loaded.save_order_model(tmp_path / "old.pt", order.OrderModel(8, set_hidden=None), {})
    old = loaded.load_drafter(str(tmp_path / "old.pt"))
    assert not old.model.has_sets and "set_hidden" not in old.model.config
    kw = dict(temperature=1.0, seed=2, threshold=0.5, budget=8, depth=4)
    a = spotref.generate(model, [1, 2, 3], 24, drafter=old, **kw)
    b = spotref.generate(model, [1, 2, 3], 24, drafter="confidence", **kw)
    assert a.tokens == b.tokens and a.passes == b.passes
    new = order.with_set_head(old.model)
    assert new.has_sets and all(torch.equal(new.state_dict()[k], v) for k, v in old.model.state_dict().items())


@pytest.mark.slow
def test_sets_only_adds_a_trained_set_head_and_keeps_the_rest(tmp_path):
    model = tiny_model(V=61, B=8, init=1.0, seed=3)
    ck = tmp_path / "d.pt"
    loaded.save_order_model(ck, order.OrderModel(8, set_hidden=None), {"note": "kept", "curves": {"spot": {}}})
    target = SimpleNamespace(
        name="tiny",
        model=model,
        stop_ids=None,
        heldout=lambda n, seed, split: [(f"{seed}{i}" * 9, None) for i in range(n)],
        encode=lambda text: [1 + (ord(c) % 50) for c in text],
    )
    options = train_drafter.DrafterOptions.parse(
        train_drafter.add_arguments,
        ["tiny", "--sets-only", "--out", str(ck), "--data-dir", str(tmp_path / "data")]
        + ["--set-prompts", "2", "--test-prompts", "2", "--prompt-tokens", "8", "--new-tokens", "16", "--seeds", "1"]
        + ["--set-steps", "20", "--batch", "16", "--lr", "3e-3", "--tf-depth", "3", "--seed", "0"],
    )
    assert train_drafter.sets_only(target, options) == 0
    om, header = loaded.load_order_model(ck)
    assert om.has_sets and header["note"] == "kept" and header["curves"] == {"spot": {}}
    acc = header["sets"]["heldout_accuracy"]
    assert set(acc) == {"0", "1"} and set(acc["0"]) == {"0.9", "0.7", "0.5"}
    assert all(0.0 <= a <= 1.0 for t in acc.values() for a in t.values())


@pytest.mark.parametrize("kind", ["duplicate", "committed"])
def test_invalid_sets_are_refused_by_name(kind):
    """Sets with a position twice or a committed member raise ValueError naming the position,
    and the invalid state never reaches the model."""
    model = tiny_model(V=61, B=8, init=1.0, seed=3)
    bad, seen = {}, []
    real = model.denoise
    model.denoise = lambda cache, states: seen.append(states.clone()) or real(cache, states)

    def drafter(view):
        masked = view.masked.tolist()
        done = [p for p in range(len(view.tokens)) if p not in masked]
        if not masked or not done:
            return spotref.Draft.root()
        j, k = masked[0], done[0]
        bad["pos"] = j if kind == "duplicate" else k
        pairs = ((j, 5), (j, 6)) if kind == "duplicate" else ((j, 5), (k, 7))
        return spotref.Draft((-1, 0), ((), pairs))

    with pytest.raises(ValueError) as e:
        spotref.generate(model, [1, 2, 3], 16, threshold=0.5, drafter=drafter, budget=4, depth=2)
    assert f"node 1: position {bad['pos']} is already committed" in str(e.value)
    assert all(len(s) == 1 for s in seen)  # only root rows ever ran: the bad node never did


def test_without_set_head_keeps_the_order_model_and_sets_need_a_head():
    """--init and --sets-only start from the order model alone; a headless model says what is missing."""
    om = order.OrderModel(8)
    bare = order.without_set_head(om)
    assert not bare.has_sets and order.without_set_head(bare) is bare
    kept = {k: v for k, v in om.state_dict().items() if not k.startswith("set_")}
    assert kept.keys() == bare.state_dict().keys()
    assert all(torch.equal(bare.state_dict()[k], v) for k, v in kept.items())
    fresh = order.OrderModel(8, set_hidden=None)
    fresh.load_state_dict(bare.state_dict())  # what train-drafter --init does
    x = torch.zeros(2, 8, order.N_FEATURES)
    with pytest.raises(ValueError, match="no set head"):
        bare.sets(x, torch.ones(2, 8, dtype=torch.bool), torch.full((2,), 0.5))


def test_runner_up_sets_swap_the_least_certain_member():
    from spotref.drafters.sets import runner_up_sets

    ok = np.array([0.9, 0.3, 0.95, 0.2])
    p1, p2 = np.array([0.8, 0.5, 0.9, 0.6]), np.array([0.1, 0.4, 0.05, 0.0])
    x2 = np.array([10, 11, 12, 13])
    opts = [(0.5, ((0, 1), (1, 2))), (0.2, ((2, 3),)), (0.1, ((3, 4),))]
    out = runner_up_sets(opts, ok, 0.5, p1, x2, p2)
    assert out == [(pytest.approx(0.5 / 0.3 * 0.7 * 0.4 / 0.5), ((0, 1), (1, 11)))]  # {2}: certain; {3}: no runner-up
    assert runner_up_sets(opts, ok, 0.0, p1, x2, p2) == []
