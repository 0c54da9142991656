"""Each family decided as its own decoder decides (docs/spec.md sections 2.2 and 2.3): ``rules.for_family``.

At the rule level, on Hypothesis-drawn logits in bf16, float32 and float64 (ties included) and
T in {0, 0.7, 1, 1.5}: the LLaDA rule's decision at a block state is the commit of one pass of
the transcription of LLaDA's generate.py (``llada_transcription``), and the Dream rule's, with
each confidence algorithm, top-k and top-p, the commit of one pass of the transcription of
Dream's ``_sample`` (``dream_transcription``), on the same logits and the same noise. Then each
confidence by hand, every path to a token agreeing (``drawn``, ``tokens``, ``runner_up``, the
drafter's view), the threshold rule on every family, and the parameters each family refuses.

End to end (``assert_generate_is_transcription``, callable on any whole-canvas model):
``spotref.generate`` on a whole-canvas model gives the transcription's tokens, exact and SPOT.
"""

import math

import dream_transcription as dream
import llada_transcription as llada
import numpy as np
import pytest
import torch
from family_oracle import assert_generate_is_transcription
from helpers import examples
from hypothesis import given, note, settings
from hypothesis import strategies as st

from spotref.drafters.inputs import ViewInputs
from spotref.spec.draft import View
from spotref.spec.noise import uniform
from spotref.spec.rules import DecisionRule, divisor, for_family

DTYPES = (torch.bfloat16, torch.float32, torch.float64)
TEMPERATURES = (0.0, 0.7, 1.0, 1.5)
MANY = settings(max_examples=examples(1.5))  # each case is a few small tensor ops


# ---- drawing a block state, its canvas and its logits ------------------------------------------


@st.composite
def block_cases(draw, family):
    """A case: the canvas (prompt, k filled blocks, the block at ``state``, masks after it),
    the block's logits (bl, V) and the rule's parameters."""
    V, bl = draw(st.integers(3, 40)), draw(st.integers(1, 8))
    P, k, after = draw(st.integers(1, 5)), draw(st.integers(0, 2)), draw(st.integers(0, 2)) * bl
    mask_id = draw(st.integers(0, V - 1))
    masked = draw(st.lists(st.booleans(), min_size=bl, max_size=bl).filter(any))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    word = lambda n: (mask_id + 1 + rng.integers(0, V - 1, n)) % V  # n ids, never MASK
    state = np.where(masked, mask_id, word(bl))
    canvas = np.concatenate([word(P + k * bl), state, np.full(after, mask_id)])
    dtype = draw(st.sampled_from(DTYPES))
    scale, grid = draw(st.sampled_from([1.0, 4.0, 16.0])), draw(st.sampled_from([None, 0.5, 2.0]))
    logits = rng.normal(0, scale, (len(canvas), V))
    peak = draw(st.sampled_from([0.0, 8.0, 24.0]))  # one token per position on top: p near or at 1
    logits[np.arange(len(canvas)), rng.integers(0, V, len(canvas))] += peak
    if grid is not None:  # coarse values: ties in the logits and in the confidences
        logits = np.round(logits / grid) * grid
    params = dict(mask_id=mask_id, vocab_size=V, block_size=bl)
    params.update(temperature=draw(st.sampled_from(TEMPERATURES)), seed=draw(st.integers(0, 2**64 - 1)))
    if family == "dream":
        params.update(confidence=draw(st.sampled_from(dream.ALGS)))
        params.update(top_k=draw(st.none() | st.integers(1, V + 2)))
        params.update(top_p=draw(st.none() | st.sampled_from([0.3, 0.8, 0.95, 1.0])))
    case = dict(
        canvas=torch.from_numpy(canvas)[None],  # (1, L)
        logits=torch.from_numpy(logits).to(dtype)[None],  # (1, L, V): the logits at each canvas position
        start=P + k * bl,
        P=P,
        k=k,
        state=state,
        step=draw(st.integers(0, bl - 1)),
        params=params,
    )
    note(f"V={V} bl={bl} P={P} k={k} dtype={dtype} params={params}")
    return case


def rule_commit(family, case):
    """The family rule's decision at the case's block state (one-position rule)."""
    rule, c = for_family(family, **case["params"]), case
    block = c["logits"][0, c["start"] : c["start"] + rule.block_size]  # (bl, V)
    return rule.decide(block, c["state"], rule.block_noise(c["k"]), c["step"])


def changed(before, after, start):
    """The transcription's commits, as a decision: ((position in the block, token), ...)."""
    at = torch.nonzero(after[0] != before[0])[:, 0].tolist()
    return tuple((j - start, int(after[0, j])) for j in at)


# ---- the rule is one pass of the family's own code ----------------------------------------------


@MANY
@given(block_cases("llada"))
def test_llada_rule_is_one_pass_of_generate_py(case):
    p, x = case["params"], case["canvas"].clone()
    llada.step(
        x, case["logits"], case["P"], case["k"], p["block_size"], case["step"], 1,
        temperature=p["temperature"], mask_id=p["mask_id"], seed=p["seed"],
    )  # fmt: skip
    want = changed(case["canvas"], x, case["start"])
    assert len(want) == 1
    assert rule_commit("llada", case) == want


@MANY
@given(block_cases("dream"))
def test_dream_rule_is_one_pass_of_dreams_sample(case):
    p, x, s = case["params"], case["canvas"].clone(), case["start"]
    unshifted = case["logits"].roll(-1, 1)  # (1, L, V): Dream reads position i's logits at i - 1
    dream.step(
        x, unshifted, case["P"], case["k"], p["block_size"], case["step"], alg=p["confidence"],
        temperature=p["temperature"], top_p=p["top_p"], top_k=p["top_k"], mask_id=p["mask_id"], seed=p["seed"],
    )  # fmt: skip
    want = changed(case["canvas"], x, s)
    assert len(want) == 1
    assert rule_commit("dream", case) == want


# ---- each confidence, by hand --------------------------------------------------------------------


def test_llada_confidence_is_the_softmax_of_the_raw_logits_not_divided_by_t():
    L = torch.tensor([[2.0, 1.0, 0.0, 5.0]], dtype=torch.float64)  # id 3 is MASK
    x = torch.tensor([0])
    raw = math.exp(2) / (math.exp(2) + math.exp(1) + 1)
    for T in (0.0, 0.5, 2.0):
        rule = for_family("llada", mask_id=3, vocab_size=4, block_size=1, temperature=T)
        assert rule.confidences(L, x).item() == pytest.approx(raw, rel=1e-15)
    assert torch.equal(rule.probs(L), torch.softmax(torch.tensor([[2.0, 1.0, 0.0, -math.inf]]).double(), -1))


@pytest.mark.parametrize("T", [0.0, 1.0])
def test_dream_confidences(T):
    L = torch.tensor([[3.0, 2.0, 1.0, 0.0, 9.0], [0.0, 0.0, 0.0, 0.0, 0.0]], dtype=torch.float64)  # id 4: MASK
    q = torch.softmax(torch.tensor([[3.0, 2.0, 1.0, 0.0], [0.0] * 4], dtype=torch.float64), -1)  # T = 1
    x = torch.tensor([1, 2])
    want = {
        "maskgit_plus": [q[0, 1], q[1, 2]],
        "topk_margin": [q[0, 0] - q[0, 1], 0.0],
        "entropy": [(q[i] * torch.log(q[i] + 1e-10)).sum() for i in range(2)],
    }
    for alg, c in want.items():
        rule = for_family("dream", mask_id=4, vocab_size=5, block_size=2, temperature=T, confidence=alg)
        got = rule.confidences(L, x).tolist()
        assert got == pytest.approx([float(v) for v in c], rel=1e-12, abs=1e-15), alg
    assert for_family("dream", mask_id=4, vocab_size=5, block_size=2).confidence == "maskgit_plus"


def test_dream_filters_top_p_before_top_k():
    # top-p 0.5 keeps {0} (mass 0.63 > 0.5 after it); top-k 2 alone would keep {0, 1}
    L = torch.tensor([[2.0, 1.0, 0.0, 0.0]], dtype=torch.float64)  # id 3: MASK
    rule = for_family("dream", mask_id=3, vocab_size=4, block_size=1, top_k=2, top_p=0.5)
    assert rule.probs(L).tolist() == [[1.0, 0.0, 0.0, 0.0]]
    assert for_family("dream", mask_id=3, vocab_size=4, block_size=1, top_p=1.0).probs(L)[0, 2] > 0  # p = 1: no filter


@pytest.mark.slow
def test_llada_draws_from_softmax_of_l_over_t():
    # exp(L) / (-log u) ** T is the Gumbel-max draw from softmax(L / T): 4000 steps' draws
    L = torch.tensor([[1.0, 0.0, -1.0, 0.0]], dtype=torch.float64)  # id 3: MASK
    for T in (0.5, 1.5):
        rule = for_family("llada", mask_id=3, vocab_size=4, block_size=1, temperature=T, seed=5)
        noise = rule.block_noise(0)
        draws = np.bincount([int(rule.tokens(L, [0], noise, k)) for k in range(4000)], minlength=4)
        want = torch.softmax(L[0, :3] / T, -1).numpy()
        assert draws[3] == 0 and np.abs(draws[:3] / 4000 - want).max() < 0.025


def test_llada_divisor_is_generate_pys_and_the_same_bits_on_any_thread_count():
    u = uniform(9, 2, 5, 4, 50_000)  # 200,000 entries: ATen splits one pow call between threads
    want = (-torch.log(u)) ** 0.7  # generate.py's statement, on one thread (conftest)
    threads = torch.get_num_threads()
    try:
        for n in (1, 3, 5):
            torch.set_num_threads(n)
            assert torch.equal(divisor(u, 0.7), want)
    finally:
        torch.set_num_threads(threads)
    assert torch.equal(
        for_family("llada", mask_id=0, vocab_size=50_000, block_size=4, temperature=0.7, seed=9).block_noise(2)(5), want
    )


# ---- every path to a token agrees; drafters read any family's rule --------------------------------


@st.composite
def any_family_cases(draw):
    family = draw(st.sampled_from(["sdar", "llada", "dream"]))
    return family, draw(block_cases(family))


@settings(max_examples=examples(0.6))
@given(any_family_cases())
def test_tokens_runner_up_and_confidences_agree(fc):
    family, case = fc
    rule = for_family(family, **case["params"])
    s, bl = case["start"], rule.block_size
    L, noise, k = case["logits"][0, s : s + bl], rule.block_noise(case["k"]), case["step"]
    x, c = rule.drawn(L, range(bl), noise, k)  # (bl,), (bl,)
    assert torch.equal(rule.tokens(L, range(bl), noise, k), x)
    best, second = rule.runner_up(rule.scores(L), range(bl), noise, k)
    assert torch.equal(best, x)
    assert torch.equal(rule.confidences(L, x), c)
    assert not bool((x == rule.mask_id).any())
    view = View.of(case["state"], k, case["k"], L, rule, budget=4, depth=2)
    inputs = ViewInputs(view)
    assert inputs.coupled(k)[0].tolist() == x.tolist() and inputs.second(k)[0].tolist() == second.tolist()
    assert np.array_equal(view.stale_confidence(), c.numpy())


@pytest.mark.parametrize("family", ["sdar", "llada", "dream"])
def test_threshold_rule_commits_every_confidence_over_tau_on_every_family(family):
    L = torch.zeros(4, 6)
    L[0, 1], L[1, 2], L[2, 3] = 10.0, 10.0, 0.5  # positions 0, 1 certain
    rule = for_family(family, mask_id=5, vocab_size=6, block_size=4, threshold=0.9)
    noise, state = rule.block_noise(0), np.full(4, 5)
    c = rule.confidences(L, rule.tokens(L, range(4), noise, 0))
    over = tuple(int(j) for j in torch.nonzero(c > 0.9)[:, 0])
    assert over == (0, 1) and tuple(j for j, _ in rule.decide(L, state, noise, 0)) == over


# ---- the parameters each family refuses ---------------------------------------------------------------

BASE = dict(mask_id=3, vocab_size=4, block_size=2)


@pytest.mark.parametrize(
    "family, params, match",
    [
        ("llada", dict(top_k=2), "top_k and top_p must be None"),
        ("llada", dict(top_p=0.9), "top_k and top_p must be None"),
        ("llada", dict(confidence="filtered"), r"confidence must be one of \('low_confidence',\)"),
        ("dream", dict(confidence="filtered"), "maskgit_plus"),
        ("dream", dict(confidence="low_confidence"), "topk_margin"),
        ("sdar", dict(confidence="entropy"), "filtered"),
        ("gpt", dict(), "family must be one of"),
        ("llada", dict(temprature=1.0), "unknown"),
    ],
)
def test_bad_parameters_are_refused(family, params, match):
    with pytest.raises(ValueError, match=match):
        for_family(family, **BASE, **params)


def test_family_defaults_and_missing_parameters():
    assert type(for_family("sdar", **BASE)) is DecisionRule and for_family("sdar", **BASE).confidence == "filtered"
    assert for_family("llada", **BASE, confidence=None).confidence == "low_confidence"
    assert for_family("dream", **BASE, confidence="entropy").confidence == "entropy"
    with pytest.raises(ValueError, match="missing.*vocab_size"):
        for_family("dream", mask_id=3, block_size=2)


def test_numbers_a_family_cannot_decide_are_refused():
    L = torch.tensor([[800.0, 0.0, 0.0, 0.0]], dtype=torch.float64)  # exp(800) overflows float64
    rule = for_family("llada", **BASE, temperature=1.0)
    with pytest.raises(ValueError, match="exp.logits. overflow torch.float64"):
        rule.decide(L.repeat(2, 1), np.full(2, 3), rule.block_noise(0), 0)
    with pytest.raises(ValueError, match="entropy confidence is NaN in float16"):  # p + 1e-10 is p: log 0
        for_family("dream", **BASE, confidence="entropy", precision="float16")  # refused as the rule is made
    auto = for_family("dream", **BASE, confidence="entropy")  # "auto" on float16 logits: refused at the decision
    with pytest.raises(ValueError, match="entropy confidence is NaN in torch.float16"):
        auto.decide(torch.zeros(2, 4, dtype=torch.float16), np.full(2, 3), auto.block_noise(0), 0)


# ---- end to end: spotref.generate is the transcription on a whole canvas ---------------------------


E2E = [
    ("llada", dict()),
    ("llada", dict(temperature=0.7, seed=3)),
    ("llada", dict(temperature=1.5, seed=4)),
    ("dream", dict(confidence="maskgit_plus")),
    ("dream", dict(confidence="topk_margin", temperature=1.0, seed=5)),
    ("dream", dict(confidence="entropy", temperature=0.7, seed=6, top_k=8)),
    ("dream", dict(confidence="maskgit_plus", temperature=1.5, seed=7, top_p=0.9)),
]


@pytest.mark.parametrize("family, rule", E2E)
@pytest.mark.parametrize("dtype", [None, torch.bfloat16], ids=["float32", "bf16"])
@pytest.mark.parametrize("drafter", [None, "confidence"], ids=["exact", "spot"])
def test_generate_is_the_transcription_on_a_whole_canvas(family, rule, dtype, drafter):
    from canvas_model import CanvasModel  # tests/support/canvas_model.py: the family seam's tiny model

    model = CanvasModel(family)
    assert_generate_is_transcription(
        model, [3, 1, 4, 1, 5, 9], 20, block_length=8, dtype=dtype, drafter=drafter, **rule
    )
