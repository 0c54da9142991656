import dataclasses

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from spotref.reference import naive_decision
from spotref.spec.noise import gumbel
from spotref.spec.rules import DecisionRule, filter_top_k_top_p


def rule(V=6, B=4, **kw):
    return DecisionRule(mask_id=V - 1, vocab_size=V, block_size=B, **kw)


def decide(r, L, state, block=0, step=0):
    """``r``'s decision on ``L`` at ``state``, step ``step`` of ``block``."""
    return r.decide(L, state, r.block_noise(block), step)


def test_one_position_rule_commits_the_most_confident_masked_position():
    L = torch.zeros(4, 6)
    L[0, 2], L[1, 3], L[2, 1], L[3, 4] = 5.0, 9.0, 7.0, 20.0
    state = np.array([5, 5, 5, 0])  # position 3 already committed
    assert decide(rule(), L, state) == ((1, 3),)


def test_mask_token_is_never_sampled():
    L = torch.zeros(4, 6)
    L[:, 5] = 100.0  # MASK has by far the largest logit
    for T in (0.0, 1.0):
        d = decide(rule(temperature=T, threshold=0.01), L, np.full(4, 5))
        assert d and all(tok != 5 for _, tok in d)


def test_ties_go_to_the_lowest_index():
    L = torch.zeros(4, 6)  # every position equally confident
    assert decide(rule(), L, np.full(4, 5)) == ((0, 0),)


def test_threshold_rule_commits_every_position_over_tau_else_the_best():
    L = torch.zeros(4, 6)
    L[0, 1], L[1, 2], L[2, 3] = 10.0, 10.0, 0.5  # positions 0, 1 certain; 2: c = 0.29
    r = rule(threshold=0.9)
    assert decide(r, L, np.full(4, 5)) == ((0, 1), (1, 2))
    assert decide(r, L, np.array([1, 2, 5, 5]), step=1) == ((2, 3),)  # none over tau: the best


@pytest.mark.parametrize("precision", ["float64", "auto", "bfloat16"])
def test_confidence_comes_from_the_filtered_distribution_by_default(precision):
    # one token on top: top-1 keeps it alone, so c = 1 filtered (every position over tau) and
    # e^3 / (e^3 + 4 e^2) = 0.41 unfiltered (none over tau: the best alone)
    L = torch.tensor([[3.0, 2.0, 2.0, 2.0, 2.0, 0.0]] * 4)
    for T in (0.0, 1.0):
        kw = dict(temperature=T, top_k=1, threshold=0.5, precision=precision)
        assert decide(rule(**kw), L, np.full(4, 5)) == ((0, 0), (1, 0), (2, 0), (3, 0))
        assert len(decide(rule(confidence="unfiltered", **kw), L, np.full(4, 5))) == 1


@pytest.mark.parametrize("precision", ["float64", "float32", "bfloat16"])
def test_top_k_keeps_every_entry_tied_with_the_kth_in_every_precision(precision):
    # five tokens tie: top-1 keeps all five, as SDAR's top_k_logits, so c = 0.2: the best alone
    L = torch.tensor([[2.0, 2.0, 2.0, 2.0, 2.0, 0.0]] * 4)
    for T in (0.0, 1.0):
        r = rule(temperature=T, top_k=1, threshold=0.5, precision=precision)
        assert torch.isfinite(r.filtered(L)).sum(-1).tolist() == [5] * 4
        assert len(decide(r, L, np.full(4, 5))) == 1
    assert decide(rule(top_k=1, precision=precision), L, np.full(4, 5)) == ((0, 0),)  # T = 0: lowest id


def test_the_two_confidence_sources_commit_different_positions():
    """Position 0: one sure token among a long flat tail; position 1: two tokens 0.6 / 0.4. Under
    softmax(L) position 1 is more confident; with top-k = 2 position 0's token keeps (nearly) all
    the filtered mass, so the filtered rule commits position 0 (SDAR's generate.py would too)."""
    V = 40
    L = -1e-3 * torch.arange(V, dtype=torch.float32).expand(2, V).clone()  # a near-flat tail, no ties
    L[0, 0] = 3.0  # p = e^3 / (e^3 + 38) ~ 0.35 unfiltered
    L[1, 1], L[1, 2] = 10.0, 10.0 + np.log(0.4 / 0.6)  # p ~ 0.6 unfiltered, 0.6 filtered
    state = np.full(2, V - 1)
    r = lambda c: DecisionRule(mask_id=V - 1, vocab_size=V, block_size=2, top_k=2, confidence=c)
    assert decide(r("unfiltered"), L, state) == ((1, 1),)
    assert decide(r("filtered"), L, state) == ((0, 0),)


def test_an_unknown_confidence_source_is_refused():
    with pytest.raises(ValueError, match="confidence"):
        rule(confidence="raw")


def test_top_p_keeps_an_entry_whose_mass_before_is_exactly_p():
    """SDAR's top_p_logits removes an entry only when the mass before it exceeds p."""
    z = torch.log(torch.tensor([[0.5, 0.25, 0.25]], dtype=torch.float64))
    kept = torch.isfinite(filter_top_k_top_p(z, None, 0.5))[0].tolist()
    assert kept == [True, True, False]


@given(st.integers(0, 2**32), st.sampled_from([0.5, 1.0, 2.0]))
def test_gumbel_max_follows_softmax(seed, T):
    V, n = 5, 4000
    r = DecisionRule(mask_id=V - 1, vocab_size=V, block_size=n, temperature=T, seed=seed)
    logits = torch.tensor([1.0, 0.0, -1.0, 0.5, 0.0]).expand(n, V)
    x = r.tokens(logits, range(n), r.block_noise(0), step=0)
    freq = torch.bincount(x, minlength=V).double() / n
    z = logits[0].double() / T
    z[V - 1] = -torch.inf
    p = torch.softmax(z, -1)
    assert (freq - p).abs().max() < 0.04, (freq, p)


@given(st.data())
def test_top_k_top_p_filter(data):
    V = data.draw(st.integers(2, 30))
    z = torch.tensor(
        data.draw(st.lists(st.sampled_from([-1.0, 0.0, 0.5, 2.0]), min_size=V, max_size=V)), dtype=torch.float64
    )[None]
    k = data.draw(st.none() | st.integers(1, V))
    p = data.draw(st.none() | st.floats(0.01, 1.0))
    kept = torch.isfinite(filter_top_k_top_p(z, k, p))[0]
    order = sorted(range(V), key=lambda v: (-z[0, v].item(), v))
    n = V if k is None else sum(1 for v in range(V) if z[0, v] >= z[0, order[k - 1]])  # ties with the k-th kept
    if p is not None:
        probs = torch.softmax(z[0, order[:n]], -1).tolist()  # keep while the mass before <= p
        n = next(i + 1 for i in range(n) if i == n - 1 or sum(probs[: i + 1]) > p)
    assert kept.tolist() == [v in order[:n] for v in range(V)]


def test_the_rule_holds_parameters_only():
    r = rule(temperature=1.0, seed=3)
    assert [f.name for f in dataclasses.fields(r)] == [
        "mask_id", "vocab_size", "block_size", "temperature", "seed", "top_k", "top_p", "threshold", "confidence",
        "precision", "family",
    ]  # fmt: skip
    noise = r.block_noise(2)
    assert torch.equal(noise(5), gumbel(3, 2, 5, 4, 6)) and noise(5) is noise(5)  # computed once per step


@pytest.mark.parametrize("confidence", ["filtered", "unfiltered"])
@pytest.mark.parametrize("T", [0.0, 0.5, 1.0, 2.0])
def test_the_naive_oracle_follows_the_same_confidence_source(confidence, T):
    V = 40
    L = torch.zeros(2, V, dtype=torch.float64)
    L[0, 0], L[1, 1], L[1, 2] = 3.0, 10.0, 10.0 + np.log(0.4 / 0.6)
    state = np.full(2, V - 1)
    noise = gumbel(3, 0, 0, 2, V).numpy() if T > 0 else None
    r = DecisionRule(mask_id=V - 1, vocab_size=V, block_size=2, temperature=T, seed=3, top_k=2, confidence=confidence)
    naive = naive_decision(L.numpy() * 1.0, state, V - 1, T, noise, None, 2, None, confidence)
    assert tuple(naive) == decide(r, L, state)


@pytest.mark.parametrize("precision", ["float64", "float32", "bfloat16"])
@pytest.mark.parametrize(
    "T, top_k, top_p", [(0.0, None, None), (1.0, None, None), (0.7, 5, None), (1.3, None, 0.8), (1.0, 3, 0.5)]
)
@pytest.mark.parametrize("confidence", ["filtered", "unfiltered"])
def test_drawn_is_tokens_and_confidences_from_one_pass(precision, T, top_k, top_p, confidence):
    """decide's fused path gives exactly the tokens and confidences of the two definitions."""
    r = DecisionRule(19, 20, 6, T, 3, top_k, top_p, None, confidence, precision)
    logits = (torch.randn(6, 20, generator=torch.Generator().manual_seed(1)) * 3).to(torch.bfloat16)
    logits[:, 4] = logits[:, 7]  # a tie
    x, c = r.drawn(logits, range(6), r.block_noise(2), 5)
    assert torch.equal(x, r.tokens(logits, range(6), r.block_noise(2), 5)) and torch.equal(c, r.confidences(logits, x))


@pytest.mark.parametrize(
    "dtype, p, kept",
    [
        (torch.bfloat16, 0.4995, 3),  # p rounds up to 0.5 in bf16: the mass 0.5 before the third entry is within it
        (torch.bfloat16, 0.499, 2),  # p rounds down to 0.498: 0.5 is not
        (torch.float16, 0.49995, 3),  # fp16: 0.49995 rounds to 0.5
        (torch.float64, 0.4995, 2),  # float64: p as given
    ],
)
def test_top_p_compares_the_mass_with_p_rounded_to_the_rules_dtype(dtype, p, kept):
    """Four equal logits: the masses before the entries are 0.25, 0.5, 0.75 exactly, and p is
    compared in D (docs/spec.md section 2), as torch's ``mass <= p`` and SDAR's ``cumulative > p``
    do. The rule and the naive reference keep the same entries (the reference compared with p as
    given and kept 2 in bf16 where the rule kept 3: a correct decoder built on it was flagged)."""
    from spotref.reference import naive_filter

    z = torch.zeros(1, 4, dtype=dtype)
    assert int(torch.isfinite(filter_top_k_top_p(z, None, p)).sum()) == kept
    assert int(torch.isfinite(naive_filter(z[0].clone(), None, p)).sum()) == kept
