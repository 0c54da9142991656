"""The per-round budget (``budget="auto"``): node path probabilities on drafts, their held-out
calibration, the cut of each round's tree, and exact output whatever the cut."""

import dataclasses

import numpy as np
import pytest
import torch
from helpers import examples, tiny_model
from hypothesis import given, settings
from hypothesis import strategies as st

import spotref
from spotref.api import Speculator
from spotref.conformance import cases, check_case
from spotref.drafters import budget
from spotref.drafters.budget import MIN_COUNT, RoundBudget, auto_drafter, calibration_table, reach, trim
from spotref.drafters.order import OrderModel
from spotref.drafters.spot import CALLS, SpotDrafter
from spotref.spec.draft import Draft, View
from spotref.spec.rules import DecisionRule


def spot_for(model, seed=0, calls="level", B=None):
    """An untrained SPOT drafter for blocks of ``B`` (the model's own block size by default)."""
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        return SpotDrafter(OrderModel(B or model.block_size), calls=calls)


def chain(probs) -> Draft:
    return Draft(tuple(range(-1, len(probs) - 1)), ((),) + tuple(((i, 1),) for i in range(len(probs) - 1)), probs)


def test_draft_probs_are_checked_and_kept_by_prefix():
    d = chain((1.0, 0.9, 0.5, 0.1))
    assert d.prefix(2) == Draft((-1, 0), ((), ((0, 1),))) and d.prefix(2).probs == (1.0, 0.9)
    assert d.prefix(0).parents == (-1,) and d.prefix(99) == d
    assert d == Draft(d.parents, d.commits)  # probs never change what is verified
    with pytest.raises(ValueError, match="3 probs for 4 nodes"):
        Draft(d.parents, d.commits, (1.0, 0.5, 0.2))
    with pytest.raises(ValueError, match=r"node 2: prob 1.5 is not in \[0, 1\]"):
        Draft(d.parents, d.commits, (1.0, 0.5, 1.5, 0.1))
    with pytest.raises(ValueError, match="probs must be a sequence of numbers"):
        Draft(d.parents, d.commits, "abcd")


def view_of(model, budget_n=16, depth=6, T=0.0):
    B, V, mask_id = model.block_size, model.config.vocab_size, model.mask_id
    cache = model.prefill(torch.arange(1, B + 1))  # one prompt block
    state = np.full(B, mask_id, dtype=np.int64)
    stale = model.denoise(cache, torch.from_numpy(state)[None])[0].float()  # (B, V)
    state[0] = 4
    return View.of(state, 1, 0, stale, DecisionRule(mask_id, V, B, T, 0), budget_n, depth)


@pytest.mark.parametrize("calls", CALLS)
@pytest.mark.parametrize("T", [0.0, 1.0])
def test_grown_drafts_carry_falling_path_probabilities(calls, T):
    model = tiny_model(V=61, B=8, init=1.0, seed=3)
    d = spot_for(model, calls=calls)(view_of(model, T=T))
    assert d.probs is not None and len(d.probs) == len(d) > 2 and d.probs[0] == 1.0
    assert all(a >= b for a, b in zip(d.probs[1:], d.probs[2:]))  # best first
    assert all(d.probs[p] >= q for p, q in zip(d.parents[1:], d.probs[1:]))  # a child never above its parent


def test_calibration_table_bins_and_reach_is_monotone():
    rng = np.random.default_rng(0)
    p = rng.uniform(0, 1, 5000)
    hit = rng.uniform(0, 1, 5000) < p**2  # over-confident drafter
    table = calibration_table(p, hit)
    assert all(n >= MIN_COUNT for _, _, n in table) and sum(n for _, _, n in table) == 5000
    assert reach(table, 0.5) == pytest.approx(0.25, abs=0.05)
    xs = np.linspace(0, 1, 101)
    ys = [reach(table, x) for x in xs]
    assert all(a <= b for a, b in zip(ys, ys[1:])) and 0.0 <= ys[0] and ys[-1] <= 1.0
    assert reach(None, 0.3) == reach([], 0.3) == 0.3  # no table: the drafter's own probability
    assert calibration_table([0.5] * (MIN_COUNT - 1), [True] * (MIN_COUNT - 1)) == []


def test_trim_keeps_the_nodes_worth_their_verify_time():
    d = chain((1.0, 0.9, 0.5, 0.1, 0.01))
    verify = {1: 1.0, 2: 1.1, 4: 1.3, 8: 1.7}  # 0.1 s a state
    assert len(trim(d, verify, rate=2.0)) == 3  # keep while reach >= 0.2
    assert len(trim(d, verify, rate=0.0)) == 5
    assert len(trim(d, verify, rate=100.0)) == 1
    assert trim(Draft(d.parents, d.commits), verify, rate=100.0) == d  # no probs: kept whole
    table = [[0.5, 0.05, 100], [0.9, 0.6, 100]]  # calibrated: the 0.5 node is rarely reached
    assert len(trim(d, verify, rate=2.0, table=table)) == 2


@settings(max_examples=examples(0.6))
@given(probs=st.lists(st.floats(0, 1), min_size=1, max_size=12), rate=st.floats(0, 50), slope=st.floats(0, 0.2))
def test_trim_is_the_first_failing_node(probs, rate, slope):
    probs = [1.0] + sorted(probs, reverse=True)
    verify = {n: 1.0 + slope * n for n in (1, 2, 4, 8, 16)}
    n = len(trim(chain(tuple(probs)), verify, rate))
    want = next((i for i in range(1, len(probs)) if probs[i] < rate * slope * (1 - 1e-12)), len(probs))
    assert n == want or abs(probs[min(n, len(probs) - 1)] - rate * slope) < 1e-9


@pytest.mark.slow
@settings(max_examples=examples(0.2))
@given(case=cases(), seed=st.integers(0, 3), calls=st.sampled_from(CALLS), rate=st.sampled_from([0.0, 0.5, 5.0, 1e3]))
def test_a_cut_tree_is_exact(case, seed, calls, rate):
    """Each round's tree cut at any rate: tokens identical to exact decoding, every rule."""

    def generate_fn(model, prompt, n, drafter=None, **kw):
        cut = RoundBudget(spot_for(model, seed, calls, B=case.block_size), {1: 1.0, 64: 1.0 + 63 * 0.01}, rate)
        return spotref.generate(model, prompt, n, drafter=cut, **kw)

    check_case(dataclasses.replace(case, drafter="confidence"), generate_fn)


@pytest.mark.slow
def test_a_high_rate_cuts_trees_and_costs_passes_not_tokens():
    model = tiny_model(V=61, B=8, init=1.0, seed=3)
    full = spotref.generate(model, [1, 2, 3], 24, drafter=spot_for(model), budget=16, depth=6)
    cut = spotref.generate(
        model, [1, 2, 3], 24, drafter=RoundBudget(spot_for(model), {1: 1.0, 64: 1.63}, 1e3), budget=16, depth=6
    )
    assert cut.tokens == full.tokens == spotref.generate(model, [1, 2, 3], 24).tokens
    assert max(cut.stats["draft_nodes"]) == 1 < max(full.stats["draft_nodes"])


VERIFY = {N: 1.0 + 0.01 * N for N in budget.BUDGETS}  # seconds per verify pass of N states


def rule_of(model, **kw) -> DecisionRule:
    return DecisionRule(model.mask_id, model.config.vocab_size, model.block_size, **kw)


def test_auto_cuts_each_round_at_the_run_rate(monkeypatch):
    model = tiny_model(V=61, B=8)
    d, rule = spot_for(model), rule_of(model)
    d.header = {"curves": {"spot": {"0": {"1": 1.0, "64": 4.0}}}, "node_calibration": {"0": [[0.5, 0.4, 50]]}}
    monkeypatch.setattr(budget, "draft_times", lambda *a, **k: {N: 0.1 for N in budget.BUDGETS})
    cut, N = auto_drafter(model, d, 8, rule, VERIFY)
    t = 1.0 + 0.01 * N + 0.1
    assert isinstance(cut, RoundBudget) and cut.drafter is d and N > 1
    assert cut.rate == pytest.approx(budget.expected_commits(d, N, 0.0) / t)
    assert cut.table == [[0.5, 0.4, 50]]
    monkeypatch.setattr(budget, "draft_times", lambda *a, **k: {N: 0.0 if N == 1 else 100.0 for N in budget.BUDGETS})
    assert auto_drafter(model, d, 8, rule, VERIFY) == (d, 1)  # drafting never pays: no cut
    assert auto_drafter(model, None, 8, rule, VERIFY) == (None, 1)


def test_auto_chooses_the_order_model_calls_that_commit_most_per_second(monkeypatch):
    model = tiny_model(V=61, B=8)
    d = spot_for(model)
    d.header = {"curves": {"spot": {"0": {"1": 1.0, "64": 4.0}}, "spot-root": {"0": {"1": 1.0, "64": 3.8}}}}
    cost = {"level": 0.5, "root": 0.1}  # per round: per-level calls cost more
    monkeypatch.setattr(budget, "draft_times", lambda dr, *a, **k: {N: cost[dr.calls] for N in budget.BUDGETS})
    cut, N = auto_drafter(model, d, 8, rule_of(model), VERIFY)
    assert cut.drafter.calls == "root" and cut.drafter.model is d.model and N > 1
    assert d.with_calls("root").curves == {"0": {"1": 1.0, "64": 3.8}}
    cost["level"] = 0.1  # equal cost: the better curve wins
    cut, N = auto_drafter(model, d, 8, rule_of(model), VERIFY)
    assert cut.drafter is d
    d.header = {"curves": {"spot": {"0": {"1": 1.0, "64": 4.0}}}}  # no per-round curve: the per-level one
    assert d.with_calls("root").curves == d.curves


@pytest.mark.slow
def test_costmodel_compares_whole_and_cut_trees():
    from workbench.bench.costmodel import round_budget_rows

    model = tiny_model(V=61, B=8, init=1.0, seed=3)
    rows = round_budget_rows(model, spot_for(model), [[1, 2, 3], [4, 5]], 16, 8, 4, 0.0, repeats=1)
    (e, e_ppt, e_nodes, _), (w, w_ppt, w_nodes, w_tps), (c, c_ppt, c_nodes, c_tps) = rows
    assert (e, w, c) == ("exact", "whole", "cut per round") and e_nodes == 1
    assert c_nodes <= w_nodes and e_ppt >= max(c_ppt, w_ppt) and c_tps > 0


def reference_options(d, inp, states, steps, marks, limit):
    """The per-node loop ``SpotDrafter.options`` replaced (kept here as the reference)."""
    from spotref.drafters.confidence import ranked

    p, q = d.scores(inp, states, steps, marks)
    out = []
    for i, k in enumerate(steps):
        x = inp.coupled(k)[0]
        best = ranked(np.flatnonzero(states[i] == inp.mask_id), p[i].numpy())[:limit]
        opts = [(w, ((int(j), int(x[j])),)) for w, j in zip((p[i, best] * q[i, best]).tolist(), best)]
        x2, p2 = inp.second(k)
        p1 = inp.coupled(k)[1]
        opts += [
            (float(p[i][j] * (1 - q[i][j]) * p2[j] / max(1 - p1[j], 1e-6)), ((int(j), int(x2[j])),))
            for j in best
            if q[i][j] < d.second and p2[j] > 0
        ]
        out.append(opts)
    return out


@pytest.mark.parametrize("T", [0.0, 1.0])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_vectorised_options_equal_the_per_node_loop(T, seed):
    from spotref.drafters.inputs import ViewInputs

    model = tiny_model(V=61, B=8, init=1.0, seed=seed)
    d = spot_for(model, seed)
    d.second = 0.9  # runner-up edges on most positions
    inp = ViewInputs(view_of(model, T=T))
    rng = np.random.default_rng(seed)
    states = [np.where(rng.random(8) < 0.5, inp.tokens, inp.mask_id) for _ in range(4)]
    for s in states:
        s[0] = 4  # as committed at the root
    marks = [np.zeros(8, dtype=np.int64)] * 4
    for limit in (1, 3, 8):
        assert d.options(inp, states, [1, 2, 2, 3], marks, limit) == reference_options(
            d, inp, states, [1, 2, 2, 3], marks, limit
        )


@pytest.mark.slow
def test_auto_measures_for_each_decode_and_a_choice_passed_on_is_reused(monkeypatch):
    """Three generate calls with drafter="confidence", budget="auto": three measurements, each
    decode its own (the process keeps none); a Speculator's choice passed on explicitly
    (``drafter=spec.round_drafter, budget=spec.budget``) measures nothing and decodes exactly."""
    from spotref.drafters import budget as bd

    m = tiny_model(V=40, B=4)
    calls = []
    real = bd.auto_way
    monkeypatch.setattr(bd, "auto_way", lambda *a, **k: calls.append(1) or real(*a, **k))
    for _ in range(3):
        spotref.generate(m, [1, 2, 3], 8, drafter="confidence", budget="auto")
    assert len(calls) == 3
    spec = Speculator.for_model(m, drafter="confidence", budget="auto")
    again = spotref.generate(m, [1, 2, 3], 8, drafter=spec.round_drafter, budget=spec.budget, width=spec.width)
    assert len(calls) == 4 and again.tokens == spotref.generate(m, [1, 2, 3], 8, width=spec.width).tokens


def test_two_speculators_with_budget_auto_share_no_measurement(monkeypatch):
    """Each Speculator times the machine itself: a steep verify curve for the first and a flat one
    for the second give each its own N (a process-wide cache gave the second the first's). Its
    ``drafter`` stays the one asked for; its blocks draft with ``round_drafter``, the cut one."""
    m = tiny_model(V=61, B=8)
    d = spot_for(m)
    d.header = {"curves": {"spot": {"0": {"1": 1.0, "64": 4.0}}}}
    monkeypatch.setattr(budget, "draft_times", lambda *a, **k: dict.fromkeys(budget.BUDGETS, 0.0))
    specs = []
    for slope in (1.0, 0.0):  # seconds per state of a verify pass: the first Speculator's, then the second's
        monkeypatch.setattr(budget, "verify_times", lambda *a, s=slope, **k: {N: 1.0 + s * N for N in budget.BUDGETS})
        specs.append(Speculator.for_model(m, drafter=d, budget="auto"))
    steep, flat = specs
    assert steep.budget == 1 and flat.budget == 64
    assert steep.drafter is d and flat.drafter is d
    assert isinstance(flat.round_drafter, RoundBudget) and flat.round_drafter.drafter is d
    assert not isinstance(steep.round_drafter, RoundBudget)  # N = 1: nothing to cut
    assert flat.block(0, np.full(8, m.mask_id)).drafter is flat.round_drafter


@pytest.mark.slow
def test_auto_measures_under_the_decoding_rule_each_time():
    """budget="auto" measures the drafter under the rule it will decode by, again for each
    Speculator: for each change of the cost (a threshold, the precision, the filters, the
    confidence, T), and for another seed too (nothing is kept from one to the next)."""
    m = tiny_model(V=40, B=4)
    seen = []

    def drafter(view):
        r = view.rule
        seen.append((r.threshold, r.precision, r.top_k, r.top_p, r.confidence, r.temperature, r.seed))
        return Draft.root()

    auto = dict(drafter=drafter, budget="auto")
    base = dict(threshold=None, precision="auto", top_k=None, top_p=None, confidence="filtered", temperature=0.0)
    Speculator.for_model(m, **auto)
    assert seen and set(seen) == {(*base.values(), 0)}
    for change in (
        dict(threshold=0.9),
        dict(threshold=0.9, precision="float32"),
        dict(top_k=3),
        dict(top_p=0.5),
        dict(confidence="unfiltered"),
        dict(temperature=1.0),
    ):
        seen.clear()
        Speculator.for_model(m, **auto, **change, seed=5)
        assert seen and set(seen) == {(*{**base, **change}.values(), 5)}, change  # measured again, under it
    seen.clear()
    Speculator.for_model(m, **auto, threshold=0.9, seed=6)
    assert seen and set(seen) == {(*{**base, "threshold": 0.9}.values(), 6)}  # measured again: nothing kept


class FlatCost(torch.nn.Module):
    """An SDAR model whose every forward costs a fixed sleep, whatever its rows: the verify curve of
    a weight-bound model (a real shape at a few tokens a row), rows alone N times one pass."""

    def __init__(self, model, seconds: float):
        super().__init__()
        self.inner, self.seconds = model, seconds
        self.config, self.block_size, self.mask_id = model.config, model.block_size, model.mask_id
        self.lm_head = model.lm_head

    def prefill(self, ids):
        return self.inner.prefill(ids)

    def store(self, cache, block):
        self.inner.store(cache, block)

    def denoise(self, cache, states, one_forward=False):
        import time

        time.sleep(self.seconds * (1 if one_forward else len(states)))
        return self.inner.denoise(cache, states, one_forward)


def curved(slope: float, width_slope: float):
    """A ``verify_times`` stand-in: rows alone 1 + slope (N - 1) per pass; at a width W, 1 + width_slope (W - 1)."""

    def times(model, budgets=budget.BUDGETS, width=None, limit=float("inf"), **kw):
        if width is not None:
            return dict.fromkeys((n for n in budgets if n <= width), 1.0 + width_slope * (width - 1))
        return {N: 1.0 + slope * (N - 1) for N in budgets}

    return times


@pytest.mark.parametrize(
    "slope, width_slope, way", [(1.0, 0.0, "a width"), (1.0, 1.0, "rows alone"), (0.0, 0.0, "rows alone")]
)
def test_auto_chooses_how_to_verify_as_well_as_how_much(monkeypatch, slope, width_slope, way):
    """Without a width, auto compares rows alone with each fixed width: a flat width curve beside
    linear rows alone picks a width (N = W > 1); widths costing their rows, or rows alone as cheap
    as one pass, keep rows alone (ties go to rows alone)."""
    model = tiny_model(V=61, B=8)
    d = spot_for(model)
    d.header = {"curves": {"spot": {"0": {"1": 1.0, "64": 4.0}}}}
    monkeypatch.setattr(budget, "draft_times", lambda *a, **k: dict.fromkeys(budget.BUDGETS, 0.0))
    monkeypatch.setattr(budget, "verify_times", curved(slope, width_slope))
    drafter, N, width = budget.auto_way(model, d, 8, rule_of(model))
    if way == "a width":
        assert width is not None and 1 < N <= width
    else:
        assert width is None and N == (1 if slope else 64)
    assert budget.auto_way(model, d, 8, rule_of(model), width=4)[1:] == (4, 4)  # one cost for every N <= W


@pytest.mark.slow
def test_auto_on_a_flat_curve_model_verifies_at_a_width_and_says_which_exact_decoding_it_equals():
    """A model whose pass costs the same at any row count (a sleep per forward): budget="auto"
    measures, picks a width and N > 1, reports both in stats, and its tokens are exact decoding's
    at that width (the decode SPOT at W is identical to)."""
    model = FlatCost(tiny_model(V=61, B=8, init=1.0, seed=2), 0.004)
    d = spot_for(model.inner)
    d.header = {"curves": {"spot": {"0": {"1": 1.0, "64": 4.0}}}}
    auto = spotref.generate(model, [1, 2, 3], 24, drafter=d, budget="auto", depth=6)
    assert auto.stats["width"] is not None and auto.stats["budget"] > 1
    assert auto.stats["budget"] <= auto.stats["width"]
    exact = spotref.generate(model.inner, [1, 2, 3], 24, width=auto.stats["width"])
    assert auto.tokens == exact.tokens
    assert spotref.generate(model.inner, [1, 2, 3], 24).stats["width"] is None


def test_a_curve_counts_only_in_the_blocks_it_was_measured_in():
    """A drafter's offline curve was measured in its order model's blocks: decoding in blocks of
    another length (gsm-b32's drafter at block 4), auto takes the conservative prior instead."""
    d = spot_for(tiny_model(V=61, B=8))
    d.header = {"curves": {"spot": {"0": {"1": 1.0, "64": 6.0}}}}
    assert budget.curve_block(d) == 8
    assert budget.expected_commits(d, 64, 0.0, 8) == budget.expected_commits(d, 64, 0.0) == 6.0
    assert budget.expected_commits(d, 64, 0.0, 4) == budget.PRIOR[64]
    from spotref.drafters.calibrated import CalibratedDrafter

    header = {"calibrated": {"0": [[[0], 3]]}, "curves": {"calibrated": {"0": {"1": 1.0, "64": 5.0}}}}
    cal = CalibratedDrafter.from_header({**header, "config": {"block_size": 32}})
    assert budget.curve_block(cal) == 32 and budget.expected_commits(cal, 64, 0.0, 4) == budget.PRIOR[64]
    assert budget.expected_commits(CalibratedDrafter.from_header(header), 64, 0.0, 4) == 5.0  # not known: its curve
