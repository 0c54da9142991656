import numpy as np
import pytest
import torch
from hypothesis import given, strategies as st

from spotref.rules import DecisionRule, filter_top_k_top_p


def rule(V=6, B=4, **kw):
    return DecisionRule(mask_id=V - 1, vocab_size=V, block_size=B, **kw)


def test_one_position_rule_commits_the_most_confident_masked_position():
    L = torch.zeros(4, 6)
    L[0, 2], L[1, 3], L[2, 1], L[3, 4] = 5.0, 9.0, 7.0, 20.0
    state = np.array([5, 5, 5, 0])                          # position 3 already committed
    assert rule().decide(L, state, block=0, step=0) == ((1, 3),)


def test_mask_token_is_never_sampled():
    L = torch.zeros(4, 6)
    L[:, 5] = 100.0                                         # MASK has by far the largest logit
    for T in (0.0, 1.0):
        d = rule(temperature=T, threshold=0.01).decide(L, np.full(4, 5), 0, 0)
        assert d and all(tok != 5 for _, tok in d)


def test_ties_go_to_the_lowest_index():
    L = torch.zeros(4, 6)                                   # every position equally confident
    assert rule().decide(L, np.full(4, 5), 0, 0) == ((0, 0),)


def test_threshold_rule_commits_every_position_over_tau_else_the_best():
    L = torch.zeros(4, 6)
    L[0, 1], L[1, 2], L[2, 3] = 10.0, 10.0, 0.5             # positions 0, 1 certain; 2: c = 0.29
    r = rule(threshold=0.9)
    assert r.decide(L, np.full(4, 5), 0, 0) == ((0, 1), (1, 2))
    assert r.decide(L, np.array([1, 2, 5, 5]), 0, 1) == ((2, 3),)    # none over tau: the best


def test_confidence_comes_from_the_unfiltered_distribution():
    L = torch.tensor([[2.0, 2.0, 2.0, 2.0, 2.0, 0.0]] * 4)  # top-1 keeps one token of five
    d = rule(temperature=1.0, top_k=1, threshold=0.5).decide(L, np.full(4, 5), 0, 0)
    assert len(d) == 1                                      # c = 0.2 everywhere: not over 0.5


@given(st.integers(0, 2**32), st.sampled_from([0.5, 1.0, 2.0]))
def test_gumbel_max_follows_softmax(seed, T):
    V, n = 5, 4000
    r = DecisionRule(mask_id=V - 1, vocab_size=V, block_size=n, temperature=T, seed=seed)
    logits = torch.tensor([1.0, 0.0, -1.0, 0.5, 0.0]).expand(n, V)
    x = r.tokens(logits, range(n), block=0, step=0)
    freq = torch.bincount(x, minlength=V).double() / n
    z = logits[0].double() / T
    z[V - 1] = -torch.inf
    p = torch.softmax(z, -1)
    assert (freq - p).abs().max() < 0.04, (freq, p)


@given(st.data())
def test_top_k_top_p_filter(data):
    V = data.draw(st.integers(2, 30))
    z = torch.tensor(data.draw(st.lists(st.sampled_from([-1.0, 0.0, 0.5, 2.0]), min_size=V, max_size=V)),
                     dtype=torch.float64)[None]
    k = data.draw(st.none() | st.integers(1, V))
    p = data.draw(st.none() | st.floats(0.01, 1.0))
    kept = torch.isfinite(filter_top_k_top_p(z, k, p))[0]
    order = sorted(range(V), key=lambda v: (-z[0, v].item(), v))
    n = V if k is None else k
    if p is not None:
        probs = torch.softmax(z[0, order[:n]], -1).tolist()
        n = next(i + 1 for i in range(n) if i == n - 1 or sum(probs[: i + 1]) >= p)
    assert kept.tolist() == [v in order[:n] for v in range(V)]


def test_noise_cache_keeps_only_the_current_block():
    r = rule(temperature=1.0)
    r.noise(0, 0, "cpu"), r.noise(0, 1, "cpu"), r.noise(1, 0, "cpu")
    assert set(r._noise) == {(1, 0)}
