"""The decode parameters as one object (docs/spec.md section 7): ``DecodeOptions`` holds each
default once, and its one ``check`` refuses a bad option by name against a model or a bundled
target's metadata-only ``Shape``, before any weight loads."""

import dataclasses
import inspect

import pytest
from helpers import tiny_model

import spotref
from spotref.api import DEFAULTS, DecodeOptions, OptionError, Sizes, Speculator
from spotref.load.targets import target_shape
from spotref.spec.rules import DecisionRule


def keyword_defaults(fn, skip: int) -> dict:
    """``fn``'s parameters after the first ``skip``, with their defaults."""
    return {p.name: p.default for p in list(inspect.signature(fn).parameters.values())[skip:]}


def test_generate_takes_the_options_in_their_order_with_their_defaults():
    assert keyword_defaults(spotref.generate, 3) == DEFAULTS.kwargs()
    assert list(keyword_defaults(spotref.generate, 3)) == [f.name for f in dataclasses.fields(DecodeOptions)]


def test_the_speculator_takes_the_same_defaults_but_its_drafter():
    """The step API drafts with "confidence" by default; every other option's default is generate's."""
    own = keyword_defaults(Speculator.__init__, 4)
    assert own.pop("drafter") == "confidence" and own.pop("model") is None and own.pop("family") == "sdar"
    assert own == DEFAULTS.kwargs(
        leave_out=("drafter", "stop_ids", "fused_store", "lookahead", "trace", "block_length")
    )


def test_the_rule_s_own_defaults_agree():
    """``DecisionRule`` (the spec, written for a porter) keeps its defaults; they are the options'."""
    rule = {f.name: f.default for f in dataclasses.fields(DecisionRule)}
    shared = ("temperature", "seed", "threshold", "top_k", "top_p")
    assert {k: rule[k] for k in shared} == {k: getattr(DEFAULTS, k) for k in shared}


@pytest.mark.parametrize(
    "target, options, option, message",
    [
        ("gsm-llada", dict(temperature=25.0), "temperature", "is above 20, the most LLaDA's draw takes"),
        ("gsm-llada", dict(top_p=0.5), "top_p", "LLaDA's rule draws from the whole vocabulary"),
        ("gsm-llada", dict(top_k=3), "top_k", "LLaDA's rule draws from the whole vocabulary"),
        ("gsm-llada", dict(confidence="filtered"), "confidence", "confidence must be one of"),
        ("gsm-llada", dict(block_length=100_000), "block_length", r"block_length must be an int in \[1, 4096\]"),
        ("gsm-llada", dict(fused_store=True), "fused_store", "has no cache to store a block into"),
        ("gsm-b32", dict(block_length=16), "block_length", "decodes in the block size it was trained with"),
        ("gsm-b32", dict(stop_ids=[10**6]), "stop_ids", "stop_ids must be an int in"),
        ("gsm-b32", dict(drafter="confidence", budget=16, width=4), "width", "budget 16 exceeds the verify width 4"),
        ("gsm-b32", dict(drafter="nonsense"), "drafter", "drafter 'nonsense' is unknown"),
        ("gsm-b32", dict(precision="half"), "precision", "precision must be None or one of"),
        ("gsm-b32", dict(seed=-1), "seed", r"seed must be an int in \[0, 2\*\*64 - 1\]"),
        ("gsm-b32", dict(trace="yes"), "trace", "trace must be True or False"),
    ],
)
def test_check_names_the_bad_option_from_a_target_s_metadata(monkeypatch, target, options, option, message):
    monkeypatch.setattr("spotref.names.target", lambda *a, **k: pytest.fail("the target loaded"))
    with pytest.raises(OptionError, match=message) as e:
        DecodeOptions(**options).check(target_shape(target))
    assert e.value.option == option and isinstance(e.value, ValueError)


def test_check_without_a_model_checks_what_needs_none():
    DecodeOptions(temperature=25.0, top_p=0.5, block_length=10**6, stop_ids=[10**9]).check()  # all need a model
    with pytest.raises(OptionError, match="budget 16 exceeds the verify width 4"):
        DecodeOptions(drafter="confidence", width=4).check()
    assert DecodeOptions(width=4).check().width == 4  # exact decoding: N = 1 fits any width


def test_check_gives_the_options_as_decoded():
    shape = target_shape("gsm-llada")
    got = DecodeOptions(stop_ids=5, budget="auto").check(shape)
    assert got.block_length == shape.block_size and got.stop_ids == [5] and got.budget == "auto"
    assert got.precision == "bfloat16"  # None: the target's serving precision
    assert DecodeOptions(block_length=8, precision="float32").check(shape).block_length == 8
    assert got.rule(shape) == spotref.Speculator.for_model("gsm-llada", drafter=None).rule


def test_a_speculator_checks_through_the_options_and_keeps_them():
    spec = Speculator(vocab_size=40, block_size=4, mask_id=39, temperature=1, seed=3, budget=8, width=8)
    assert spec.options.temperature == 1 and spec.options.precision == "auto" and spec.options.drafter == "confidence"
    assert spec.rule.temperature == 1.0 and isinstance(spec.rule.temperature, float)
    with pytest.raises(OptionError) as e:
        Speculator(vocab_size=40, block_size=4, mask_id=39, top_k=0)
    assert e.value.option == "top_k"
    with pytest.raises(ValueError, match="mask_id"):
        Sizes(40, 4, 40)


def test_generate_from_an_options_object_is_generate_from_its_keywords():
    m = tiny_model(V=40, B=4)
    options = DecodeOptions(temperature=1.0, seed=7, drafter="confidence", budget=4, depth=2, stop_ids=[3])
    got = spotref.generate(m, [1, 2, 3], 12, **options.kwargs())
    assert got.tokens == spotref.generate(m, [1, 2, 3], 12, temperature=1.0, seed=7, stop_ids=3).tokens
