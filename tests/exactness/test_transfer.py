"""Any drafter on any target: every shipped SPOT drafter, loaded by name with no option, drafts
for every shipped target (another block size, task or family: the whole-canvas gsm-llada and
gsm-dream decode in blocks of 32 over their canvas) and the output is exact decoding's, at T = 0
and T = 1. Small on purpose: one held-out prompt, two blocks (``case``), N = 3 verified in one
pass of width 3, depth 2 (each pair at one temperature, T = 0 and T = 1 in a checkerboard)."""

import functools

import pytest

import spotref
from spotref.load.drafters import list_checkpoints, load_drafter
from spotref.load.targets import list_targets
from spotref.record.prompts import prompts_for
from spotref.spec.decode import family

TARGETS = list_targets()
DRAFTERS = list_checkpoints()


@functools.cache
def case(target: str):
    """(model, prompt ids, new tokens) for two blocks: an SDAR target's prompt fills its first
    block but 4 positions, then one more block; a whole-canvas target's 4-token prompt is
    followed by a canvas of two blocks (each of its passes reads the whole canvas)."""
    t = spotref.load_target(target)
    B = t.model.block_size
    if family(t.model) == "sdar":
        return t.model, prompts_for(t, 1, "test", B)[0][: B - 4], B + 4
    return t.model, prompts_for(t, 1, "test", 16)[0][:4], B + 1


@functools.cache
def exact(target: str, T: float) -> list:
    model, ids, new = case(target)
    return spotref.generate(model, ids, new, temperature=T, seed=3).tokens


@functools.cache
def drafter(name: str):
    return load_drafter(name)


def test_the_grid_spans_block_sizes_and_families():
    """Guard: the parametrization below covers both block sizes, every family and both MoE bodies."""
    assert {"gsm-b32", "gsm-b16", "gsm-llada", "gsm-dream", "gsm-moe", "gsm-llada2"} <= set(TARGETS)
    assert len(DRAFTERS) >= 9 and {case(t)[0].block_size for t in TARGETS} == {16, 32}
    assert {family(case(t)[0]) for t in TARGETS} == {"sdar", "llada", "llada2", "dream"}


# Half the pairs, one temperature each: drafter i runs on the targets j with i + j even (every other
# target, so block-causal, whole-canvas and mixture-of-experts ones each), at T = 0 and T = 1 in turn
# (a quarter of the decodes of the full product at both temperatures; the guard below checks it).
PAIRS = [
    (d, t, float((i + j) // 2 % 2)) for i, d in enumerate(DRAFTERS) for j, t in enumerate(TARGETS) if (i + j) % 2 == 0
]


def test_the_pairs_give_every_drafter_and_target_both_temperatures_and_every_drafter_each_kind():
    for k in (0, 1):  # drafters, then targets
        for x in {pair[k] for pair in PAIRS}:
            assert {T for *pair, T in PAIRS if pair[k] == x} == {0.0, 1.0}, x
    for d in DRAFTERS:
        kinds = {(family(case(t)[0]), "num_experts" in case(t)[0].config.to_dict()) for dd, t, _ in PAIRS if dd == d}
        moe = {("sdar", True), ("llada2", True)} & kinds
        assert ("sdar", False) in kinds and moe and ({"llada", "dream"} & {f for f, _ in kinds}), (d, kinds)


@pytest.mark.slow
@pytest.mark.parametrize("name, target, T", PAIRS)
def test_every_drafter_on_every_target_is_exact(name, target, T):
    model, ids, new = case(target)
    got = spotref.generate(model, ids, new, temperature=T, seed=3, drafter=name, budget=3, depth=2, width=3)
    assert got.tokens == exact(target, T)
    d = drafter(name)  # the same drafter as an object, as loaded by name: not strict
    assert d.block_size is None and not d.strict


def test_a_strict_drafter_is_refused_for_another_block_size_only():
    """Opt-in strict mode: ``load_drafter(name, strict=True)`` serves its own block size and is
    refused, before any pass, for another."""
    model, ids, new = case("gsm-b32")
    strict = load_drafter("gsm-b16", strict=True)
    with pytest.raises(ValueError, match="trained for block size 16, the target's block size is 32, and it is strict"):
        spotref.generate(model, ids, new, drafter=strict, budget=4)
    own = case("gsm-b16")
    got = spotref.generate(own[0], own[1], own[2], drafter=strict, budget=4, depth=2, width=4)
    assert got.tokens == exact("gsm-b16", 0.0)
