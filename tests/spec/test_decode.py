"""Exact and speculative decoding: pass accounting, trees, DAG merging, stop ids."""

import numpy as np
import pytest
import torch
from helpers import tiny_model

import spotref
from spotref import Draft
from spotref.conformance import assert_identical, oracle_drafter


def test_exact_passes_follow_the_reference_loop():
    # prefill 1 + per block (B decisions + 1 store); prompt 6 = one full block + a tail of 2.
    m = tiny_model(V=40, B=4)
    res = spotref.generate(m, list(range(6)), 10)
    assert len(res.tokens) == 10  # blocks 1..3 hold the tail + 10 new
    assert res.passes == 1 + (4 - 2) + 1 + 2 * (4 + 1)
    assert res.stats["accepted"] == [1] * (2 + 4 + 4) and res.stats["rounds"] == 10
    assert [b for b, _ in res.stats["starts"]] == [1, 1] + [2] * 4 + [3] * 4


def test_zero_new_tokens_costs_nothing():
    res = spotref.generate(tiny_model(), [1, 2, 3], 0, drafter="confidence")
    assert res.tokens == [] and res.passes == 0


@pytest.mark.parametrize("T", [0.0, 1.0])
@pytest.mark.parametrize("threshold", [None, 0.2])
@pytest.mark.parametrize(
    "budget, depth", [(1, 0), (1, 4), (4, 2), (16, 8), pytest.param(64, 16, marks=pytest.mark.slow)]
)
def test_confidence_drafter_is_exact(T, threshold, budget, depth):
    m = tiny_model(V=80, B=16, seed=4)
    kw = dict(temperature=T, seed=5, threshold=threshold)
    exact = spotref.generate(m, [3, 1, 4, 1, 5], 37, **kw)
    spot = spotref.generate(m, [3, 1, 4, 1, 5], 37, drafter="confidence", budget=budget, depth=depth, **kw)
    assert_identical(exact, spot.tokens, 16, 5)
    assert spot.passes <= exact.passes
    assert max(spot.stats["draft_nodes"]) <= budget


def test_oracle_drafter_commits_depth_plus_one_per_round():
    m = tiny_model(V=80, B=16, seed=4)
    exact = spotref.generate(m, [], 32, temperature=1.0)
    spot = spotref.generate(m, [], 32, temperature=1.0, drafter=oracle_drafter(exact), budget=8, depth=7)
    assert spot.tokens == exact.tokens
    # per block: one plain pass (1 commit), then rounds of 8 commits: 1 + 8 + 7 -> 3 passes.
    assert spot.stats["accepted"] == [1, 8, 7] * 2
    assert spot.passes == 3 * 2 + 2  # no prefill, one store per block


def test_equal_states_reached_by_different_paths_are_verified_once():
    m = tiny_model(V=30, B=4)
    seen = []

    def diamond(view):
        a, b = view.masked[:2]
        ta, tb = view.coupled_token(a, view.step), view.coupled_token(b, view.step)
        ta2, tb2 = view.coupled_token(a, view.step + 1), view.coupled_token(b, view.step + 1)
        return Draft((-1, 0, 0, 1, 2), ((), ((a, ta),), ((b, tb),), ((b, tb2),), ((a, ta2),)))

    def spy_denoise(cache, states, _denoise=m.denoise):
        seen.append(len(states))
        return _denoise(cache, states)

    exact = spotref.generate(m, [1], 3)
    m.denoise = spy_denoise
    res = spotref.generate(m, [1], 3, drafter=diamond, budget=5, depth=2)
    assert res.tokens == exact.tokens
    assert 4 in seen  # 5 nodes, 4 distinct states, when tokens agree


def test_stop_ids_end_decoding_after_their_block():
    m = tiny_model(V=40, B=4, seed=2)
    free = spotref.generate(m, [5, 6], 30)
    stop = free.tokens[5]
    res = spotref.generate(m, [5, 6], 30, stop_ids=[stop], drafter="confidence")
    first = free.tokens.index(stop)
    assert res.tokens == free.tokens[: first + 1]
    assert res.passes < free.passes


@pytest.mark.parametrize("drafter", [None, "confidence"])
def test_the_block_holding_a_stop_id_finishes_and_each_block_records_its_passes(drafter):
    # B = 4, prompt [5, 6]: block 0 holds the tail + 2 new tokens, block b >= 1 holds 4 new.
    m = tiny_model(V=40, B=4, seed=2)
    free = spotref.generate(m, [5, 6], 30)
    first = free.tokens.index(free.tokens[5])
    stop_block = (2 + first) // 4
    res = spotref.generate(m, [5, 6], 30, stop_ids=[free.tokens[5]], drafter=drafter, budget=4, depth=3)
    assert res.tokens == free.tokens[: first + 1] and res.stats["stopped"]
    blocks = res.stats["blocks"]  # (new tokens, passes) per block
    assert [n for n, _ in blocks] == [2] + [4] * stop_block
    assert sum(p for _, p in blocks) == res.passes  # no prefill: the prompt is one tail
    assert {b for b, _ in res.stats["starts"]} == set(range(stop_block + 1))
    if drafter is None:  # B decisions (the tail's 2 fixed) + a store
        assert blocks == [(2, 3)] + [(4, 5)] * stop_block
    assert not free.stats["stopped"] and sum(n for n, _ in free.stats["blocks"]) == 30


def test_fused_store_counts_a_blocks_store_in_the_next_block():
    m = tiny_model(V=40, B=4, seed=2)
    res = spotref.generate(m, list(range(9)), 8, fused_store=True)  # prefill 2 blocks, tail of 1
    assert res.stats["blocks"] == [(3, 3), (4, 4), (4, 4)]  # the last block never stored (nor cut)
    assert res.passes == 1 + 3 + 4 + 4 and len(res.tokens) == 8


def test_pure_and_compiled_cores_agree_when_both_exist():
    cores = [spotref.core_module("py")]
    if spotref.EXTENSION:
        cores.append(spotref.core_module("c"))
    m = tiny_model(V=80, B=8, seed=1)
    outs = [spotref.generate(m, [1, 2, 3], 40, temperature=0.5, drafter="confidence", core=c) for c in cores]
    assert all(o.tokens == outs[0].tokens and o.passes == outs[0].passes for o in outs)


def test_stale_logits_view_is_float32_of_shape_b_v():
    m = tiny_model(V=33, B=4)
    seen = []

    def spy(view):
        seen.append((view.stale_logits.dtype, tuple(view.stale_logits.shape), view.tokens.dtype))
        return Draft.root()

    spotref.generate(m, [], 8, drafter=spy)
    assert seen and set(seen) == {(torch.float32, (4, 33), np.dtype(np.int64))}


@pytest.mark.parametrize("T, threshold", [(0.0, None), (1.0, None), (1.0, 0.3)])
@pytest.mark.parametrize("budget, depth", [(1, 0), (16, 8)])
def test_view_unseen_is_the_last_decision_the_stale_pass_did_not_see(T, threshold, budget, depth):
    """The stale logits are the deepest accepted state's; the round's bonus decision came after."""
    from spotref.drafters.confidence import ConfidenceDrafter

    m, seen, inner = tiny_model(V=80, B=16, seed=4), [], ConfidenceDrafter()

    def spy(view):
        assert not view.unseen.flags.writeable and view.unseen.dtype == bool
        seen.append((view.block, view.step, set(np.flatnonzero(view.unseen).tolist())))
        return inner(view)

    res = spotref.generate(
        m, [3, 1, 4], 40, temperature=T, seed=2, threshold=threshold, drafter=spy, budget=budget, depth=depth
    )
    decided = {(b, k): {p for p, _ in d} for b, k, d in res.stats["trajectory"]}
    assert seen and all(unseen == decided[(b, k - 1)] and unseen for b, k, unseen in seen)


def test_auto_budget_is_exact_and_within_the_measured_budgets():
    m = tiny_model(V=80, B=8, seed=1)
    auto = spotref.generate(m, [1, 2, 3], 20, temperature=1.0, drafter="confidence", budget="auto")
    exact = spotref.generate(m, [1, 2, 3], 20, temperature=1.0, width=auto.stats["width"])  # the width it chose
    assert auto.tokens == exact.tokens
    assert 1 <= max(auto.stats["draft_nodes"]) <= 64


def test_generate_calls_the_model_and_the_drafter_under_inference_mode():
    """docs/spec.md 1.1: every model call and the drafter run under ``torch.inference_mode``
    (autograd off); a caller's own grad mode is back after the call."""
    model, seen = tiny_model(B=4), []
    denoise, prefill = model.denoise, model.prefill
    model.denoise = lambda *a, **k: seen.append(("denoise", torch.is_inference_mode_enabled())) or denoise(*a, **k)
    model.prefill = lambda *a, **k: seen.append(("prefill", torch.is_inference_mode_enabled())) or prefill(*a, **k)

    def drafter(view):
        seen.append(("drafter", torch.is_inference_mode_enabled()))
        return Draft([-1], [()])

    spotref.generate(model, [1, 2, 3, 4, 5], 8, drafter=drafter, budget=4)
    assert {name for name, _ in seen} == {"prefill", "denoise", "drafter"} and all(on for _, on in seen), seen
    assert torch.is_grad_enabled() and not torch.is_inference_mode_enabled()
