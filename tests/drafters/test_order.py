"""The order model, its features and checkpoints, and level-batched tree growth."""

import hashlib
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from spotref.drafters import order
from spotref.drafters.grow import grow, grow_levels
from spotref.load.drafters import ORDER_DIR, header, load_order_model, read_header, save_order_model
from spotref.spec.draft import Draft, DraftBuilder


def test_parameter_count_is_the_papers():
    m = order.OrderModel(32)
    assert 0.60e6 <= order.n_params(m) <= 0.64e6, order.n_params(m)  # paper: 0.62M
    assert m.config == dict(
        block_size=32,
        d_model=128,
        layers=3,
        heads=8,
        ff=512,
        feature_width=order.N_FEATURES,  # the header's key for n_features
        top_k=32,
        set_hidden=64,
    )
    assert 0.60e6 <= order.n_params(order.OrderModel(32, set_hidden=None)) < order.n_params(m)  # the set head is small


def random_inputs(N=3, B=8, V=50, seed=0):
    g = torch.Generator().manual_seed(seed)
    probs = torch.softmax(torch.randn(B, V, generator=g) * 3, -1)
    masked = torch.rand(N, B, generator=g) < 0.6
    masked[:, 0] = True
    marks = torch.where(masked, 0, torch.randint(0, 3, (N, B), generator=g))
    unseen = ~masked[0] & (marks[0] == 0) & (torch.rand(B, generator=g) < 0.3)
    x = order.features(
        order.top_probs(probs), torch.rand(N, B, generator=g), masked, marks, torch.arange(N), 1.0, unseen
    )
    return x, masked


def test_features_are_vocabulary_agnostic_and_scores_cover_masked_positions():
    for V in (20, 5000):  # also V < 32: zero-padded
        x, masked = random_inputs(V=V)
        assert x.shape == (3, 8, order.N_FEATURES)
        s, t = order.OrderModel(8).eval()(x, masked)
        assert s.shape == t.shape == (3, 8)
        assert torch.isinf(s[~masked]).all() and torch.isfinite(s[masked]).all()
        assert torch.allclose(torch.softmax(s, -1).sum(-1), torch.ones(3))
    top = order.top_probs(torch.softmax(torch.randn(4, 100), -1))
    assert (top[:, :-1] >= top[:, 1:]).all()  # sorted, descending


def test_the_certainty_feature_resolves_confidences_near_one():
    pc = torch.tensor([[0.99999, 0.9999, 0.999999, 0.5]])  # (1, 4)
    masked = torch.ones(1, 4, dtype=torch.bool)
    x = order.features(
        torch.zeros(4, 32),
        pc,
        masked,
        torch.zeros(1, 4, dtype=torch.long),
        torch.zeros(1),
        0.0,
        torch.zeros(4, dtype=torch.bool),
    )
    assert x.shape == (1, 4, order.N_FEATURES) and order.CERTAIN == 48
    assert torch.allclose(x[0, :, order.CERTAIN], -(1 - pc[0]).log() / order.LOG_SCALE)
    s, _ = order.OrderModel(4).eval()(x, masked)  # untrained: the stale-confidence order
    assert s[0].argsort(descending=True).tolist() == [2, 0, 1, 3]
    old = order.OrderModel(4, n_features=48).eval()  # before the feature: log(p) alone, a near tie
    s48, _ = old(x, masked)
    assert (s48[0, :3] - s48[0, :3].max()).abs().max() < 1e-3


@pytest.mark.parametrize("n_features", order.FEATURE_COUNTS[:-1])
def test_features_are_append_only_and_a_narrower_checkpoint_reads_its_own(n_features):
    x, masked = random_inputs()
    m = order.OrderModel(8, n_features=n_features).eval()
    with torch.no_grad():
        assert torch.equal(m(x, masked)[0], m(x[..., :n_features].contiguous(), masked)[0])
    with pytest.raises(AssertionError, match="want"):
        order.OrderModel(8)(x[..., :n_features], masked)  # a model of every feature needs them all
    assert order.FEATURE_COUNTS == (48, 49, 52, 54) and order.N_FEATURES == 54


def test_an_untrained_model_ignores_freshness():
    """The skip starts at the stale log-odds alone: freshness only enters through training."""
    x, masked = random_inputs()
    y = x.clone()
    fresh = slice(order.CERTAIN + 1, order.FIRST_TIED - 1)
    y[..., fresh] = torch.rand_like(y[..., fresh])
    m = order.OrderModel(8).eval()
    with torch.no_grad():
        assert torch.equal(m(x, masked)[0], m(y, masked)[0])


@pytest.mark.parametrize("n_features", order.FEATURE_COUNTS[:-1])
def test_a_narrower_model_widened_scores_as_before(n_features):
    """``--init`` from an older checkpoint: the appended features start with zero weight."""
    x, masked = random_inputs()
    m = order.OrderModel(8, n_features=n_features).eval()
    with torch.no_grad():
        for p in m.parameters():
            p.add_(torch.randn_like(p) * 0.1)  # not the untrained identity
        wide = order.widened(m)
        assert wide.n_features == wide.config["feature_width"] == order.N_FEATURES
        assert order.widened(wide) is wide
        assert torch.allclose(m(x, masked)[0], wide(x, masked)[0], atol=1e-6, equal_nan=True)
        assert torch.allclose(m(x, masked)[1], wide(x, masked)[1], atol=1e-6)
    with pytest.raises(ValueError, match="cannot be narrowed"):
        order.widened(wide, n_features)


def brute_fresh(fresh):
    """1 / the distance to the nearest fresh position strictly left and strictly right (0: none)."""
    B = len(fresh)
    left = [next((1 / (j - i) for i in range(j - 1, -1, -1) if fresh[i]), 0.0) for j in range(B)]
    right = [next((1 / (i - j) for i in range(j + 1, B) if fresh[i]), 0.0) for j in range(B)]
    return left, right


@given(st.lists(st.lists(st.booleans(), min_size=6, max_size=6), min_size=1, max_size=4))
def test_fresh_distances_match_a_brute_force(rows):
    near = order.fresh_distances(torch.tensor(rows))  # (N, B, 2)
    for r, row in enumerate(rows):
        left, right = brute_fresh(row)
        assert torch.allclose(near[r, :, 0], torch.tensor(left)) and torch.allclose(near[r, :, 1], torch.tensor(right))


def test_freshness_marks_the_unseen_commit_and_the_drafts():
    """unseen at the root, drafted commits at a node: both count as fresh."""
    B = 8
    masked = torch.ones(2, B, dtype=torch.bool)
    masked[:, 2] = False  # the unseen bonus commit
    masked[1, 5] = False  # node 1 drafted position 5
    marks = torch.zeros(2, B, dtype=torch.long)
    marks[1, 5] = 1
    unseen = torch.zeros(B, dtype=torch.bool)
    unseen[2] = True
    x = order.features(torch.zeros(B, 32), torch.full((2, B), 0.5), masked, marks, torch.zeros(2), 0.0, unseen)
    U = order.CERTAIN + 1
    assert x[:, :, U].tolist() == [[0, 0, 1, 0, 0, 0, 0, 0]] * 2
    assert x[0, 3, U + 1] == 1.0 and x[0, 4, U + 1] == 0.5 and x[0, 1, U + 2] == 1.0 and x[0, 6, U + 2] == 0.0
    assert x[1, 6, U + 1] == 1.0 and x[1, 4, U + 2] == 1.0 and x[1, 3, U + 1] == 1.0


@pytest.mark.slow
def test_the_shipped_checkpoints_keep_their_feature_count():
    """Their headers name it ``feature_width``, as stored; the model reads that many features."""
    from spotref.load.drafters import list_checkpoints, load_drafter

    for name in list_checkpoints():
        model = load_drafter(name).model
        assert model.n_features == model.config["feature_width"] in order.FEATURE_COUNTS, name
        assert model.embed[0].in_features == model.n_features, name


def test_checkpoint_round_trip(tmp_path):
    m = order.OrderModel(8).eval()
    save_order_model(tmp_path / "d.pt", m, {"target": {"name": "t", "fingerprint": "f"}})
    m2, header = load_order_model(tmp_path / "d.pt", block_size=8)
    x, masked = random_inputs()
    with torch.no_grad():  # float16 weights on disk
        assert torch.allclose(m(x, masked)[0], m2(x, masked)[0], atol=5e-2, equal_nan=True)
    assert header["config"]["block_size"] == 8 and header["target"]["name"] == "t"


def test_bad_checkpoints_fail_clearly(tmp_path):
    save_order_model(tmp_path / "d.pt", order.OrderModel(8), {})
    with pytest.raises(ValueError, match="block size 8, the target's block size is 32"):
        load_order_model(tmp_path / "d.pt", block_size=32)
    (tmp_path / "junk.pt").write_bytes(b"not a checkpoint" * 10)
    with pytest.raises(ValueError, match="is not a drafter checkpoint: it is not a file torch.save writes"):
        load_order_model(tmp_path / "junk.pt")
    raw = (tmp_path / "d.pt").read_bytes()
    (tmp_path / "cut.pt").write_bytes(raw[: len(raw) // 2])
    with pytest.raises(ValueError, match="corrupt"):
        load_order_model(tmp_path / "cut.pt")
    with pytest.raises(ValueError, match="no drafter checkpoint"):
        load_order_model(tmp_path / "missing.pt")
    torch.save({"weights": torch.zeros(2)}, tmp_path / "other.pt")
    with pytest.raises(ValueError, match="not a spotref drafter checkpoint"):
        load_order_model(tmp_path / "other.pt")


def test_wrong_feature_count_or_weights_fail_clearly(tmp_path):
    m = order.OrderModel(8, n_features=40)
    save_order_model(tmp_path / "w.pt", m, {})
    with pytest.raises(ValueError, match="reads 40 features"):
        load_order_model(tmp_path / "w.pt")
    blob = torch.load(tmp_path / "w.pt", weights_only=True)
    blob["header"]["config"]["feature_width"] = order.N_FEATURES
    torch.save(blob, tmp_path / "w2.pt")
    with pytest.raises(ValueError, match="does not match its config"):
        load_order_model(tmp_path / "w2.pt")


# --- growth ------------------------------------------------------------------------------------


def hashed_options(B, max_opts=4):
    """Deterministic pseudo-random options per state: distinct probabilities, no ties."""

    def options(state, step):
        masked = np.flatnonzero(state < 0)
        h = int(hashlib.sha256(state.tobytes()).hexdigest()[:8], 16)
        rng = np.random.default_rng(h)
        js = rng.permutation(masked)[:max_opts]
        p = rng.dirichlet(np.ones(len(js))) * 0.999 if len(js) else []
        return [(float(pj), ((int(j), int(rng.integers(2))),)) for pj, j in zip(p, js)]

    return options


def node_states(draft, root):
    return DraftBuilder.replay(draft, root).states


@given(B=st.integers(1, 6), budget=st.integers(1, 40), depth=st.integers(0, 6), n=st.integers(0, 6))
def test_grow_levels_is_best_first_when_the_beam_is_unbounded(B, budget, depth, n):
    """With an unbounded beam, level growth picks the same states as sequential best-first."""
    root = np.full(B, -1, dtype=np.int64)
    root[: min(n, B)] = 1
    view = SimpleNamespace(tokens=root, step=0, budget=budget, depth=depth)
    opts = hashed_options(B)
    batched = lambda states, steps, marks: [opts(s, k) for s, k in zip(states, steps)]
    a, b = grow(view, opts), grow_levels(view, batched, beam=10**6)
    key = lambda d: sorted(s.tobytes() for s in node_states(d, root))
    assert key(a) == key(b)
    assert len(b) <= budget and isinstance(b, Draft)
    states = node_states(b, root)
    assert len({s.tobytes() for s in states}) == len(states)  # equal states merged


def test_grow_levels_calls_once_per_level():
    B, calls = 8, []
    root = np.full(B, -1, dtype=np.int64)
    opts = hashed_options(B, max_opts=8)

    def batched(states, steps, marks):
        calls.append(len(states))
        for s, m in zip(states, marks):  # marks: depth of each draft commit
            assert ((m > 0) == (s >= 0)).all()
        return [opts(s, k) for s, k in zip(states, steps)]

    d = grow_levels(SimpleNamespace(tokens=root, step=0, budget=30, depth=5), batched, beam=4)
    assert len(calls) <= 5 and max(calls) <= 4 and len(d) == 30


@given(
    st.lists(
        st.tuples(
            st.lists(st.sampled_from([0.25, 0.5, 1.0]), min_size=5, max_size=5),
            st.lists(st.booleans(), min_size=5, max_size=5),
        ),
        min_size=1,
        max_size=3,
    )
)
def test_tie_features_match_a_brute_force(rows):
    pc = torch.tensor([p for p, _ in rows])
    masked = torch.tensor([m for _, m in rows])
    got = order.tie_features(pc, masked)  # (N, B, 2)
    for n, (p, m) in enumerate(rows):
        top = max((p[j] for j in range(5) if m[j]), default=None)
        tied = [bool(m[j] and p[j] == top) for j in range(5)]
        first = [t and not any(tied[:j]) for j, t in enumerate(tied)]
        assert got[n, :, 0].bool().tolist() == tied and got[n, :, 1].bool().tolist() == first


def test_an_untrained_model_breaks_ties_to_the_lowest_position():
    """In bf16 the stale confidences tie at 1: the untrained model ranks as the rule breaks ties."""
    B = 6
    pc = torch.tensor([[0.5, 1.0, 1.0, 0.99609375, 1.0, 1.0]])
    masked = torch.tensor([[True, False, True, True, True, True]])
    x = order.features(
        torch.zeros(B, 32),
        pc,
        masked,
        torch.zeros(1, B, dtype=torch.long),
        torch.tensor([1]),
        0.0,
        torch.zeros(B, dtype=torch.bool),
    )
    s, _ = order.OrderModel(B).eval()(x, masked)
    assert s[0].argmax().item() == 2 and s[0, 2] > s[0, 4] == s[0, 5] > s[0, 3] > s[0, 0]


class _Runs:
    """Pickles as a call of ``os.system``: what a hostile checkpoint could hold."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        import os

        return os.system, (f"touch {self.marker}",)


def test_a_header_is_read_without_its_weights_and_nothing_a_file_names_runs(tmp_path):
    """``find_checkpoint`` reads every shipped header through ``read_header``: the same header as
    ``torch.load``; a file naming any other global runs nothing and reads as no header."""
    for path in sorted(ORDER_DIR.glob("*.pt"))[:3]:
        assert read_header(path) == torch.load(path, map_location="cpu", weights_only=True)["header"]
    marker, hostile = tmp_path / "ran", tmp_path / "hostile.pt"
    torch.save({"header": {"format": "spotref-order-model", "x": _Runs(marker)}, "state_dict": {}}, hostile)
    with pytest.raises(ValueError, match="refused, not loaded"):
        read_header(hostile)
    assert header(hostile) == {} and not marker.exists()
