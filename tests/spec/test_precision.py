"""The rule's precision (docs/spec.md section 9): spotref decides as SDAR's own decoder does.

The property: on Hypothesis-drawn *confident* models (lm_head scaled, so most probabilities
round to 1 in bf16 / fp16 and the decision is a tie) in float64, float32, bfloat16 and float16,
under the one-position and the threshold rule, with and without top-k / top-p, exact decoding
(``spotref.generate``), SPOT (a drafter) and the naive reference decoder give the tokens of the
in-project transcription of SDAR's ``block_diffusion_generate`` (``sdar_transcription``). All four
read the logits of one recomputing target, so they see the same bits.
"""

import json
from pathlib import Path

import numpy as np
import pytest
import sdar_transcription as sdar
import torch
from helpers import examples, tiny_model
from hypothesis import given, note, settings
from hypothesis import strategies as st

import spotref
from spotref import reference
from spotref.spec.rules import DecisionRule

DTYPES = (torch.float32, torch.bfloat16, torch.float16)


class Recompute:
    """A model behind ``generate``'s contract whose every row is recomputed from the sequence's
    start (no cache, row by row): the logits SDAR's loop and the reference decoder read."""

    def __init__(self, model):
        self.model, self.config = model, model.config
        self.block_size, self.mask_id = model.block_size, model.mask_id

    def logits(self, x):  # x: (1, L) -> (1, L, V)
        return self.model(x)

    def prefill(self, ids):
        return ids.tolist()

    def denoise(self, cache, states):  # states: (N, B) -> (N, B, V)
        B = self.block_size
        return torch.cat([self.model(torch.tensor(cache + s.tolist())[None])[:, -B:] for s in states])

    def store(self, cache, block):
        cache.extend(block.tolist())


def confident_model(dtype, seed, scale, V=48, B=4):
    m = tiny_model(V=V, B=B, seed=seed)
    with torch.no_grad():
        m.lm_head.weight.mul_(scale)
    return m.to(dtype)


@st.composite
def cases(draw):
    B = draw(st.sampled_from([4, 8]))
    return dict(
        dtype=draw(st.sampled_from(DTYPES + (torch.float64,))),  # one rule: float64 is SDAR's too
        seed=draw(st.integers(0, 2**16)),
        scale=draw(st.sampled_from([4.0, 6.0, 8.0])),
        B=B,
        prompt=draw(st.lists(st.integers(0, 46), min_size=1, max_size=2 * B)),
        n=draw(st.integers(1, 2 * B + 1)),
        kw=dict(
            temperature=draw(st.sampled_from([0.0, 0.5, 1.0, 1.5])),
            seed=draw(st.integers(0, 2**64 - 1)),
            top_k=draw(st.sampled_from([None, 1, 3, 8])),
            top_p=draw(st.sampled_from([None, 0.5, 0.9])),
            threshold=draw(st.sampled_from([None, 0.5, 0.9])),
        ),
    )


@settings(max_examples=examples(0.4))
@given(cases(), st.sampled_from(["confidence", None]))
def test_spotref_decides_as_sdars_own_decoder(case, drafter):
    model = Recompute(confident_model(case["dtype"], case["seed"], case["scale"], B=case["B"]))
    cfg, kw = model.config, case["kw"]
    note(f"{case}")
    want = sdar.block_diffusion_generate(
        model.logits,
        case["prompt"],
        case["n"],
        block_size=cfg.block_size,
        mask_id=cfg.mask_token_id,
        vocab_size=cfg.vocab_size,
        **kw,
    )
    naive = reference.generate(
        model.logits,
        case["prompt"],
        case["n"],
        block_size=cfg.block_size,
        mask_id=cfg.mask_token_id,
        vocab_size=cfg.vocab_size,
        **kw,
    )
    d = "confidence" if drafter else None
    got = spotref.generate(model, case["prompt"], case["n"], drafter=d, budget=8, depth=4, **kw)
    assert naive == want
    assert got.tokens == want


def test_the_models_are_confident_enough_to_tie():
    # the property above is about ties: in bf16 most top confidences tie, in float32 few do
    ties = {}
    for dtype in DTYPES:
        m = confident_model(dtype, 0, 8.0, B=8)
        rule = DecisionRule(m.mask_id, m.config.vocab_size, 8)
        x = torch.randint(0, 46, (32, 16), generator=torch.Generator().manual_seed(0))
        logits = m(x)[:, 8:]  # (32, 8, V)
        c = torch.stack([rule.confidences(l, rule.tokens(l, range(8), rule.block_noise(0), 0)) for l in logits])
        ties[dtype] = float(((c == c.max(-1, keepdim=True).values).sum(-1) > 1).float().mean())
    assert ties[torch.bfloat16] >= 0.5 and ties[torch.float32] <= 0.25, ties


@pytest.mark.parametrize("precision", ["bfloat16", "float16"])
def test_a_float32_model_decided_in_a_narrower_precision_is_sdar_on_its_rounded_logits(precision):
    m = Recompute(confident_model(torch.float32, 3, 6.0, B=8))
    cfg, dtype = m.config, getattr(torch, precision)
    for T in (0.0, 1.0):
        want = sdar.block_diffusion_generate(
            lambda x: m.logits(x).to(dtype),
            [5, 6, 7],
            12,
            block_size=8,
            mask_id=cfg.mask_token_id,
            vocab_size=cfg.vocab_size,
            temperature=T,
            seed=7,
        )
        assert spotref.generate(m, [5, 6, 7], 12, temperature=T, seed=7, precision=precision).tokens == want


def test_auto_is_the_logits_dtype():
    rule = DecisionRule(4, 5, 2)
    for dtype in DTYPES + (torch.float64,):
        assert rule.dtype(torch.zeros(2, 5, dtype=dtype)) == dtype
    assert DecisionRule(4, 5, 2, precision="bfloat16").dtype(torch.zeros(2, 5)) == torch.bfloat16
    with pytest.raises(ValueError, match="precision"):
        DecisionRule(4, 5, 2, precision="int8")


def test_a_model_carries_its_serving_precision():
    m = confident_model(torch.float32, 1, 8.0)
    assert spotref.api.serving_precision(m) == "auto"
    m.config.extra["torch_dtype"] = "bfloat16"
    assert spotref.api.serving_precision(m) == "bfloat16"
    spec = spotref.Speculator.for_model(m, drafter=None)
    assert spec.rule.precision == "bfloat16"
    assert spotref.generate(m, [3, 4], 8).tokens == spotref.generate(m, [3, 4], 8, precision="bfloat16").tokens


def test_ties_go_to_the_lowest_position_and_the_lowest_token():
    V, B = 6, 4
    L = torch.full((B, V), -30.0, dtype=torch.bfloat16)
    L[:, 2] = L[:, 4] = 30.0  # two tokens tie at every position
    rule = DecisionRule(5, V, B)
    assert rule.decide(L, np.array([5, 5, 0, 5]), rule.block_noise(0), 0) == ((0, 2),)
    assert rule.decide(L, np.array([1, 5, 5, 5]), rule.block_noise(0), 0) == ((1, 2),)


@pytest.mark.parametrize("precision", ["bfloat16", "float16"])
def test_logits_that_overflow_the_precision_are_refused(precision):
    L = torch.zeros(2, 5)
    L[:, 0] = 1e5 if precision == "float16" else 3e38
    rule = DecisionRule(4, 5, 2, temperature=0.5, precision=precision)
    with pytest.raises(ValueError, match=f"overflow {precision}|overflow torch.{precision}"):
        rule.decide(L, np.array([4, 4]), rule.block_noise(0), 0)


PINS = json.loads((Path(__file__).resolve().parents[1] / "support" / "float64_pins.json").read_text())


@pytest.mark.slow
@pytest.mark.parametrize("key", sorted(PINS["tokens"]))
def test_float64_gives_the_tokens_spotref_gave_before_the_precision_option(key):
    name, T = key.split(" T=")
    target = spotref.load_target(name)
    prompt = target.encode(target.heldout(1, seed=0)[0][0])
    for drafter in (None, "confidence"):
        got = spotref.generate(target, prompt, 48, temperature=float(T), seed=11, precision="float64", drafter=drafter)
        assert got.tokens == PINS["tokens"][key], (key, drafter)
