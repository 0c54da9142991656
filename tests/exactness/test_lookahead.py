"""Lookahead (docs/spec.md section 3): a block that ends on a state its last verify pass held as a
drafted row carries the next block's first pass in that row. Its tokens are exact decoding's on
every case the conformance kit draws (each family, drafter, rule, temperature, width, a
batch-sensitive model), on both cores; the passes it saves are exactly the carried ones, one per
block that ended on a drafted row (not the last decoded); exact decoding under lookahead is
exact decoding with the fused store."""

from functools import partial
from unittest import mock

import pytest
import torch
from helpers import examples, tiny_model
from hypothesis import Phase, given, settings

import spotref
import spotref.api
from spotref.conformance import cases, first_divergence, make_drafter, run_conformance
from spotref.conformance_cases import model_class, tiny_config
from spotref.spec.decode import PrefixBinding, fill_block

DRAW_ONLY = (Phase.explicit, Phase.reuse, Phase.generate)  # a failure as drawn: no shrinking
BLOCKS = (1, 2, 3, 4, 5, 7, 8, 9, 16)  # the kit's block sizes but 32 (a canvas of 32 takes seconds a case)


def endings(run) -> list:
    """``run()``'s result and, per decoded block, whether it ended on a drafted row (``Block.drafted_complete``)."""
    seen = []

    def spy(new_block, target, index, state):
        made = []
        out = fill_block(lambda *a: made.append(new_block(*a)) or made[-1], target, index, state)
        seen.append(made[0].drafted_complete)
        return out

    with mock.patch.object(spotref.api, "fill_block", spy):
        return run(), seen


def check(case, core) -> None:
    model, kw = case.model(), dict(case.kwargs)
    budget, depth = kw.pop("budget"), kw.pop("depth")
    kw.pop("fused_store", None)  # lookahead stores as the fused store does
    stored = {"fused_store": True} if case.family == "sdar" else {}
    gen = partial(spotref.generate, model, case.prompt, case.max_new_tokens, core=core, **kw)
    exact = gen()
    spot = lambda **more: gen(drafter=make_drafter(case.drafter, exact, case), budget=budget, depth=depth, **more)
    # a fresh drafter each run: the random ones draw from a generator of their own
    plain = spot(**stored)
    ahead, ended = endings(lambda: spot(lookahead=True))
    where = first_divergence(exact, ahead.tokens, case.block_size, len(case.prompt), case.family)
    assert where is None, f"lookahead differs from exact decoding at {where}"
    assert ahead.tokens == plain.tokens
    carried = sum(ended[:-1])  # the last decoded block has no next block to carry
    assert ahead.stats["carried"] == carried, (ahead.stats["carried"], ended)
    assert ahead.passes == plain.passes - carried
    assert gen(lookahead=True).passes == gen(**stored).passes  # exact decoding drafts nothing: carries nothing


@pytest.mark.parametrize("core", ["py", "c"])
@settings(max_examples=examples(0.3), deadline=None)
@given(case=cases(block_sizes=BLOCKS))
def test_lookahead_is_exact_and_saves_exactly_the_carried_passes(core, case):
    check(case, core)


@settings(max_examples=examples(0.3), deadline=None)
@given(case=cases(block_sizes=BLOCKS, batch=True))
def test_lookahead_is_exact_at_a_fixed_width_on_a_batch_sensitive_model(case):
    """The carried first pass runs at the decode's width, as exact decoding's first pass does."""
    check(case, "c")


@pytest.mark.parametrize("family", ["sdar", "llada", "dream", "llada2"])
def test_the_oracle_carries_every_block_but_the_last_and_the_always_wrong_drafter_none(family):
    """An oracle chain as deep as the block ends every block on a drafted row; a drafter whose
    first commit is always wrong never reaches the complete state by a drafted row."""
    config = tiny_config(family, 40, 39, 4, hidden=32, layers=2, heads=4, kv=2, tied=False, init=0.3)
    torch.manual_seed(3)
    model = model_class(family, config)(config).eval()
    prompt, n = [5, 6, 7, 8], 12  # SDAR, LLaDA2: a whole prompt block, so each decoded block has 4 masks
    run = partial(spotref.generate, model, prompt, n, temperature=0.7, seed=11, budget=8, depth=8)
    if family in ("llada", "dream"):
        run = partial(run, block_length=4)
    exact = run()
    blocks = len(exact.stats["blocks"])
    assert blocks >= 3
    oracle = make_drafter("oracle", exact, None)
    got = run(drafter=oracle, lookahead=True)
    assert got.tokens == exact.tokens and got.stats["carried"] == blocks - 1
    wrong = make_drafter("wrong", exact, type("Case", (), {"config": config}))
    got = run(drafter=wrong, lookahead=True)
    assert got.tokens == exact.tokens and got.stats["carried"] == 0


def test_lookahead_must_be_true_or_false():
    with pytest.raises(ValueError, match="lookahead must be True or False"):
        spotref.generate(tiny_model(), [1, 2], 4, lookahead="yes")


def test_the_kit_draws_lookahead_and_passes_spotref():
    seen = run_conformance(spotref.generate, max_examples=examples(0.3), lookahead=True, seed=0)
    assert seen["lookahead"] == seen["cases"] >= examples(0.3) // 2 and seen["carried"] > 0, seen


VERIFY = PrefixBinding.verify


def forgetful(self, states, one_forward=False):
    """A lossy lookahead: the carried first pass runs without the finished block's store."""
    if self.carried and self.pending is not None:
        self.pending = None  # the block's K/V never reach the cache
    return VERIFY(self, states, one_forward)


@pytest.mark.slow
def test_the_kit_with_lookahead_catches_a_carried_pass_that_forgets_the_store():
    def lossy(*args, **kwargs):
        with mock.patch.object(PrefixBinding, "verify", forgetful):
            return spotref.generate(*args, **kwargs)

    with pytest.raises(AssertionError, match=r"block \d+, step \d+, position \d+: exact \d+, got \d+"):
        run_conformance(lossy, max_examples=60, lookahead=True, families=("sdar",), seed=0, phases=DRAW_ONLY)
