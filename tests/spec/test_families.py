"""The family seam (docs/spec.md section 1.1): a whole-canvas model (LLaDA, Dream) decoded through
``CanvasBinding``: exact decoding is LLaDA's generate.py loop with the family's decision per pass,
SPOT is identical to it at every width and both shifts, and every bad block length is refused
before any forward."""

import numpy as np
import pytest
import torch
from canvas_model import CanvasModel
from helpers import tiny_model

import spotref
from spotref.api import Speculator, serving_precision
from spotref.names import resolve_model
from spotref.spec import decode
from spotref.spec.rules import for_family

PROMPT = [3, 1, 4, 1, 5, 9]
BL, N = 8, 20  # blocks of 8; 20 new tokens: a canvas of 24, the output cut to 20
FAMILIES = ("llada", "dream")  # shift 0, shift 1


def plain_loop(model, prompt, max_new_tokens, block_length, **rule):
    """LLaDA's generate.py, written plainly: the canvas is the prompt then G masks (G rounded up to
    whole blocks); block k covers [P + k * bl, P + (k + 1) * bl); each pass runs the whole
    canvas, shifts Dream's logits (position i read at i - 1, position 0 at its own) and commits
    the family rule's decision with block k's noise at the block's step."""
    P, bl = len(prompt), block_length
    G = -(-max_new_tokens // bl) * bl
    x = torch.full((P + G,), model.mask_id, dtype=torch.long)
    x[:P] = torch.tensor(prompt, dtype=torch.long)
    decide = for_family(model.family, mask_id=model.mask_id, vocab_size=model.config.vocab_size, block_size=bl, **rule)
    for k in range(G // bl):
        start, noise, step = P + k * bl, decide.block_noise(k), 0
        while (x[start : start + bl] == model.mask_id).any():
            logits = model(x[None])[0]  # (L, V)
            if model.logit_shift:
                logits = torch.cat([logits[:1], logits[:-1]])  # Dream's shift
            block = x[start : start + bl].numpy().copy()
            for pos, tok in decide.decide(logits[start : start + bl], block, noise, step):
                x[start + pos] = tok
            step += 1
    return x[P : P + max_new_tokens].tolist()


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize(
    "rule", [dict(), dict(temperature=1.0, seed=7), dict(threshold=0.5), dict(temperature=0.7, seed=2, threshold=0.4)]
)
@pytest.mark.parametrize("prompt", [PROMPT, []], ids=["prompt", "empty"])
def test_exact_decoding_is_the_plain_canvas_loop(family, rule, prompt):
    model = CanvasModel(family)
    want = plain_loop(model, prompt, N, BL, **rule)
    got = spotref.generate(model, prompt, N, block_length=BL, **rule)
    assert got.tokens == want and len(want) == N


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("T", [0.0, 1.0])
@pytest.mark.parametrize("threshold", [None, 0.5])
@pytest.mark.parametrize("width", [None, 16], ids=["rows-alone", "W16"])
def test_spot_is_exact_decoding_on_both_shifts(family, T, threshold, width):
    model = CanvasModel(family, seed=1)
    kw = dict(block_length=BL, temperature=T, seed=5, threshold=threshold, width=width)
    exact = spotref.generate(model, PROMPT, N, **kw)
    for budget in (4, 16):
        spot = spotref.generate(model, PROMPT, N, drafter="confidence", budget=budget, depth=4, **kw)
        assert spot.tokens == exact.tokens, budget
        assert spot.passes <= exact.passes
    assert spot.passes < exact.passes  # the drafts were accepted: the walk was tested


@pytest.mark.parametrize("width", [None, 16], ids=["rows-alone", "W16"])
def test_passes_count_one_per_verify(width):
    """No prefill, no store pass: exact decoding is one pass per position of the canvas's blocks;
    SPOT's rows alone are one call per row, at a width one call of W rows, each one pass."""
    model = CanvasModel("dream")
    exact = spotref.generate(model, PROMPT, N, block_length=BL, width=width)
    assert exact.passes == 24 == model.calls and model.lengths == [len(PROMPT) + 24] * 24
    model.calls = model.rows = 0
    spot = spotref.generate(model, PROMPT, N, block_length=BL, width=width, drafter="confidence", budget=8)
    assert spot.passes == len(spot.stats["accepted"]) == sum(p for _, p in spot.stats["blocks"])
    if width is None:
        assert model.calls == model.rows == sum(spot.stats["draft_nodes"])
    else:
        assert model.calls == spot.passes and model.rows == 16 * spot.passes


def test_a_length_not_a_multiple_of_the_block_length_rounds_the_canvas_up():
    model = CanvasModel("llada")
    cut = spotref.generate(model, PROMPT, 13, block_length=BL)  # a canvas of 16
    assert set(model.lengths) == {len(PROMPT) + 16} and len(cut.tokens) == 13
    assert cut.tokens == spotref.generate(model, PROMPT, 16, block_length=BL).tokens[:13]


@pytest.mark.parametrize("family", FAMILIES)
def test_stop_ids_finish_the_block_holding_them(family):
    model = CanvasModel(family)
    full = spotref.generate(model, PROMPT, 24, block_length=BL).tokens
    stop = full[10]  # in block 1
    first = full.index(stop)
    got = spotref.generate(model, PROMPT, 24, block_length=BL, stop_ids=[stop], drafter="confidence", budget=4)
    assert got.tokens == full[: first + 1] and got.stats["stopped"]
    assert len(got.stats["blocks"]) == first // BL + 1  # no block after the one holding it


def test_the_default_block_length_is_the_models_own():
    model = CanvasModel("llada", max_positions=128)
    got = spotref.generate(model, PROMPT, 40)
    assert set(model.lengths) == {len(PROMPT) + 64}  # two blocks of 32
    assert got.tokens == plain_loop(model, PROMPT, 40, 32)


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("kw", [dict(), dict(temperature=1.0, seed=3, threshold=0.5)], ids=str)
def test_a_callers_own_canvas_loop_gives_generates_tokens(family, kw):
    """The step API on a canvas model: the caller owns the canvas and applies the shift."""
    model = CanvasModel(family)
    spec = Speculator.for_model(model, block_length=BL, drafter="confidence", budget=6, depth=3, **kw)
    P, G = len(PROMPT), 24
    canvas = torch.tensor(PROMPT + [model.mask_id] * G)
    for k in range(G // BL):
        start = P + k * BL
        blk = spec.block(k, np.full(BL, model.mask_id))
        while not blk.done:
            rows = torch.from_numpy(blk.propose())  # (R, bl)
            canvases = canvas.repeat(len(rows), 1)  # (R, L)
            canvases[:, start : start + BL] = rows
            logits = model(canvases)  # (R, L, V)
            if model.logit_shift:
                logits = torch.cat([logits[:, :1], logits[:, :-1]], 1)
            blk.accept(logits[:, start : start + BL])
        canvas[start : start + BL] = torch.from_numpy(blk.tokens)
    assert canvas[P : P + N].tolist() == spotref.generate(model, PROMPT, N, block_length=BL, **kw).tokens


# ---- block_length and the other checks: refused before any forward --------------------------------


@pytest.mark.parametrize(
    "kw, match",
    [
        (dict(block_length=0), "block_length must be an int in"),
        (dict(block_length=-8), "block_length must be an int in"),
        (dict(block_length=2.0), "block_length must be an int in"),
        (dict(block_length=True), "block_length must be an int in"),
        (dict(block_length="8"), "block_length must be an int in"),
        (dict(block_length=97), "block_length must be an int in"),  # past max_position_embeddings
        (dict(block_length=32, max_new_tokens=80), "the canvas"),  # 6 + 96 > 96; blocks of 8 fit
        (dict(block_length=8, max_new_tokens=91), "max_position_embeddings"),
        (dict(fused_store=True), "fused_store"),
    ],
    ids=str,
)
def test_bad_canvas_arguments_are_refused_before_any_forward(kw, match):
    model = CanvasModel("llada", max_positions=96)
    kw = {"max_new_tokens": 8, "block_length": BL, **kw}
    with pytest.raises(ValueError, match=match):
        spotref.generate(model, PROMPT, **kw)
    assert model.calls == 0
    assert spotref.generate(model, PROMPT, 80, block_length=8).passes == 80  # the canvas that fits


@pytest.mark.parametrize("family", ["llada", "dream"])
@pytest.mark.parametrize("T", [0.0, 1.0])
def test_budget_auto_measures_a_canvas_model_and_decodes_exactly(family, T):
    """budget="auto" times the canvas target's passes (a canvas within the model's positions) and
    the drafter's, and its rounds are exact decoding's commits."""
    model = CanvasModel(family, max_positions=96)
    kw = dict(temperature=T, seed=3, block_length=BL)
    exact = spotref.generate(model, PROMPT, 24, **kw)
    auto = spotref.generate(model, PROMPT, 24, drafter="confidence", budget="auto", **kw)
    assert auto.tokens == exact.tokens
    assert max(model.lengths) <= 96


def test_sdar_decodes_in_its_own_block_size_only():
    model = tiny_model(V=40, B=4)
    with pytest.raises(ValueError, match=r"block_length 8: a sdar model decodes in the block size .* \(4\)"):
        spotref.generate(model, PROMPT, 8, block_length=8)
    with pytest.raises(ValueError, match="block_length 2"):
        Speculator.for_model(model, block_length=2)
    assert spotref.generate(model, PROMPT, 8, block_length=4).tokens == spotref.generate(model, PROMPT, 8).tokens


def test_a_model_is_bound_by_its_family():
    sdar, canvas = tiny_model(V=40, B=4), CanvasModel("dream", extra={"torch_dtype": "bfloat16"})
    assert decode.family(sdar) == "sdar" and decode.family(canvas) == "dream"  # no family: SDAR
    assert resolve_model(canvas) is canvas and serving_precision(canvas) == "bfloat16"
    stats = decode.Stats()
    assert isinstance(decode.bind(sdar, PROMPT, 4, stats), decode.PrefixBinding)
    assert (
        isinstance(decode.bind(canvas, PROMPT, 4, stats), decode.CanvasBinding) and stats.passes == 1
    )  # SDAR's prefill
    canvas.family = "gpt"
    with pytest.raises(ValueError, match="model must be an SDARModel, a whole-canvas model"):
        resolve_model(canvas)
    with pytest.raises(ValueError, match="model.family must be one of sdar, llada, llada2, dream, got 'gpt'"):
        decode.bind(canvas, PROMPT, 4, stats)


def test_a_canvas_speculator_takes_its_familys_rule_and_block_length():
    spec = Speculator.for_model(CanvasModel("llada"), block_length=BL, drafter=None)
    assert spec.rule.block_size == BL and spec.block(0, np.full(BL, 39)).noise.block == 0
    with pytest.raises(ValueError, match="family must be one of sdar, llada, llada2, dream"):
        Speculator(vocab_size=40, block_size=8, mask_id=39, family="gpt")
