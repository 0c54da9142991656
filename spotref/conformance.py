"""The conformance suite: is a decoder's output identical to exact decoding?

Reusable by any decoder that follows spotref's model and drafter contracts (docs/spec.md section 7):

    from spotref.conformance import run_conformance    # pip install "spotref[conformance]"
    run_conformance(my_generate)                       # 100 cases; AssertionError on the first bug

``my_generate(model, prompt_ids, max_new_tokens, **kwargs)`` must return an object with
``tokens`` and ``passes`` (``spotref.generate`` is the model). Each Hypothesis example draws a
family (SDAR, LLaDA or Dream) and a random tiny model of it, prompt (SDAR: partial blocks
included), length, block length (the canvas families'), temperature (0 or continuous in
[0.05, 3]), seed (the whole 64-bit range), top-k/top-p (not for LLaDA), threshold, stop ids, the
family's confidence measure, the rule's precision (docs/spec.md section 2.1), budget (up to
256), depth, verify width (None: rows alone; or a fixed width >= budget, exact decoding at that
width the reference) and drafter (confidence, random valid trees, an oracle proposing the true
trajectory, an always-wrong one, near misses of the truth, the SPOT drafter with random
weights, SPOT-Sets included); 5 cases in 8 are aimed at a boundary (a threshold equal to a
confidence that occurs, top-p at a cumulative mass, ties at the top logit, ties between
positions: ``aimed``). The verdict: tokens identical to exact decoding and never more passes
than exact, whatever drafter the decoder uses. ``efficiency=True`` adds a separate check of
spotref's own decoder: it drafts with the suite's drafter and accepts the oracle's rounds in
full. Divergences are reported as "block b, step k, position p: exact t, got t'".
"""

from __future__ import annotations

import contextlib
import dataclasses
import numbers
import os
import random
import tempfile
from collections import Counter
from dataclasses import dataclass, field
from unittest import mock

import numpy as np
import torch

from spotref.api import generate
from spotref.checks import check_int, is_array
from spotref.draft import Draft, DraftBuilder
from spotref.drafters.order import OrderModel
from spotref.drafters.spot import SpotDrafter
from spotref.dream import DreamConfig, DreamModel
from spotref.llada import LLaDAConfig, LLaDAModel
from spotref.models import SDARConfig, SDARModel
from spotref.rules import FAMILIES as RULES
from spotref.rules import PRECISIONS, DecisionRule

BLOCK_SIZES = (1, 2, 3, 4, 5, 7, 8, 9, 16, 32)
INIT_RANGES = (0.02, 0.3, 1.0)  # 1e-4 gives near-tie models: every flipped last bit shows
MAX_TEMPERATURE = 3.0  # T = 0, or continuous in [0.05, MAX_TEMPERATURE]
MAX_BUDGET = 256
DRAFTERS = ("confidence", "confidence-chain", "random", "oracle", "wrong", "near-miss", "spot")
FAMILIES = ("sdar", "llada", "dream")
MODELS = {"sdar": SDARModel, "llada": LLaDAModel, "dream": DreamModel}


@dataclass
class Case:
    """One conformance example: a tiny model of ``family`` and one generation request."""

    config: SDARConfig | LLaDAConfig | DreamConfig
    weights_seed: int
    prompt: list
    max_new_tokens: int
    drafter: str
    kwargs: dict = field(default_factory=dict)  # temperature, seed, threshold, top_k, top_p, confidence,
    # precision, budget, depth, stop_ids, width; block_length (canvas families)
    family: str = "sdar"

    def model(self) -> SDARModel | LLaDAModel | DreamModel:
        with torch.random.fork_rng():
            torch.manual_seed(self.weights_seed)
            return MODELS[self.family](self.config).eval()

    @property
    def block_size(self) -> int:
        """The block length decoded in: SDAR's trained block size, a canvas family's block_length."""
        return self.config.block_size if self.family == "sdar" else self.kwargs["block_length"]


def first_divergence(exact, got_tokens, block_size: int, prompt_len: int = 0, family: str = "sdar") -> str | None:
    """The first exact commit that ``got_tokens`` disagrees with, or None when identical.

    exact: the ``spotref.generate`` result of exact decoding (its stats hold the trajectory).
    SDAR's block index is absolute (its blocks start at multiples of ``block_size`` from position
    0); a canvas family's is k, its block k the generated tokens [k * bl, (k + 1) * bl)."""
    if list(got_tokens) == list(exact.tokens):
        return None
    offset = prompt_len if family == "sdar" else 0  # the generated tokens' first position in block 0
    for block, step, commits in exact.stats["trajectory"]:
        for pos, tok in commits:
            i = block * block_size + pos - offset  # index into the generated tokens
            if 0 <= i < len(exact.tokens) and (i >= len(got_tokens) or got_tokens[i] != tok):
                got = got_tokens[i] if i < len(got_tokens) else "nothing"
                return f"block {block}, step {step}, position {pos}: exact {tok}, got {got}"
    return (
        f"lengths differ: exact {len(exact.tokens)} tokens, got {len(got_tokens)} (first {len(exact.tokens)} identical)"
    )


def assert_identical(exact, got_tokens, block_size: int, prompt_len: int = 0, family: str = "sdar"):
    where = first_divergence(exact, got_tokens, block_size, prompt_len, family)
    assert where is None, where


# --- drafters for the suite ------------------------------------------------------------------


def oracle_drafter(exact, stale_tokens: bool = False):
    """Proposes the true trajectory: a chain of the target's next decisions, under budget and
    depth. stale_tokens: the true positions with the stale coupled tokens instead of the true
    ones (a perfect order drafter: the benchmark's order ceiling)."""
    truth = {(b, k): d for b, k, d in exact.stats["trajectory"]}

    def draft(view):
        n = min(view.depth, view.budget - 1)
        chain, free = [], set(view.masked.tolist())
        while len(chain) < n and (view.block, view.step + len(chain)) in truth:
            step = view.step + len(chain)
            commits = truth[(view.block, step)]
            if not free.issuperset(pos for pos, _ in commits):
                break  # a decoder that left the true trajectory: draft no more
            free.difference_update(pos for pos, _ in commits)
            if stale_tokens:
                commits = tuple((pos, view.coupled_token(pos, step)) for pos, _ in commits)
            chain.append(commits)
        return Draft.chain(chain)

    return draft


def wrong_drafter(exact, vocab_size, mask_id):
    """Proposes, under budget and depth, a chain whose first commit is never the target's."""
    truth = {(b, k): d for b, k, d in exact.stats["trajectory"]}

    def draft(view):
        masked = view.masked.tolist()
        if view.depth == 0 or view.budget < 2 or not masked:
            return Draft.root()
        d = truth.get((view.block, view.step), ())
        p, tok = masked[0], view.coupled_token(masked[0], view.step)
        if d == ((p, tok),):  # the truth: take another token
            tok = next(t for t in range(vocab_size) if t not in (tok, mask_id))
        chain = [((p, tok),)]
        for q in masked[1 : min(view.depth, view.budget - 1)]:  # keep going; all of it is off-path
            chain.append(((q, view.coupled_token(q, view.step + len(chain))),))
        return Draft.chain(chain)

    return draft


NEAR_MISSES = ("true", "early", "late", "minus", "plus", "token", "split")


def near_miss_drafter(exact, seed: int):
    """Valid trees whose edges are near misses of the truth: the true next decision itself, the
    one of the step after (early) or before (late), the true set minus or plus a member, one
    member's token changed, and the true set split over two steps (the right tokens at the
    wrong step). Under the one-position rule only the edits that keep one commit apply."""
    truth = {(b, k): d for b, k, d in exact.stats["trajectory"]}
    rng = random.Random(seed)

    def draft(view):
        V, B, mask = view.rule.vocab_size, len(view.tokens), view.mask_id
        t, sets = DraftBuilder(view.tokens, view.step), view.threshold is not None
        for _ in range(rng.randrange(view.budget)):
            if len(t) >= view.budget:
                break
            p = rng.randrange(len(t))
            masked = [j for j in range(B) if t.states[p][j] == mask]
            if not masked or t.depths[p] >= view.depth:
                continue
            kind = rng.choice(NEAR_MISSES if sets else ("true", "early", "late", "token"))
            step = t.steps[p] + {"early": 1, "late": -1}.get(kind, 0)
            s = [(j, x) for j, x in truth.get((view.block, step), ()) if j in masked]
            if kind == "minus" and len(s) > 1:
                s.pop(rng.randrange(len(s)))
            elif kind == "plus" and len(s) < len(masked):
                j = rng.choice([j for j in masked if j not in dict(s)])
                s.append((j, view.coupled_token(j, t.steps[p])))
            elif kind == "token" and s:
                i = rng.randrange(len(s))
                s[i] = (s[i][0], rng.choice([v for v in range(V) if v not in (mask, s[i][1])] or [s[i][1]]))
            if not s:
                j = rng.choice(masked)
                s = [(j, view.coupled_token(j, t.steps[p]))]
            if kind == "split" and len(s) > 1 and t.depths[p] + 1 < view.depth and len(t) + 2 <= view.budget:
                cut = rng.randrange(1, len(s))
                p = t.add(p, tuple(sorted(s[:cut])))
                s = s[cut:]
            t.add(p, tuple(sorted(s)))
        return t.draft()

    return draft


def spot_drafter(seed: int):
    """The SPOT drafter (SPOT-Sets under the threshold rule) with random weights, set head included."""

    def make(block_size):
        with torch.random.fork_rng():
            torch.manual_seed(seed)
            om = OrderModel(block_size)
            torch.nn.init.normal_(om.set_head[2].weight, std=3.0)  # not the untrained (zero) head
        return SpotDrafter(om.eval(), strict=False)

    return make


def random_drafter(seed: int):
    """Random valid trees: random parents, positions, set sizes; tokens coupled or random."""
    rng = random.Random(seed)

    def draft(view):
        V, B = view.rule.vocab_size, len(view.tokens)
        t = DraftBuilder(view.tokens, view.step)
        for _ in range(rng.randrange(view.budget)):
            p = rng.randrange(len(t))
            masked = [j for j in range(B) if t.states[p][j] == view.mask_id]
            if not masked or t.depths[p] >= view.depth:
                continue
            k = 1 if view.threshold is None else rng.randint(1, len(masked))
            t.add(p, tuple(sorted((j, random_token(rng, view, j, t.depths[p], V)) for j in rng.sample(masked, k))))
        return t.draft()

    return draft


def random_token(rng, view, j, depth, V):
    if rng.random() < 0.6:
        return view.coupled_token(j, view.step + depth)
    return rng.choice([t for t in range(V) if t != view.mask_id])


def make_drafter(kind: str, exact, case: Case):
    if kind in ("confidence", "confidence-chain"):
        return kind
    if kind == "oracle":
        return oracle_drafter(exact)
    if kind == "wrong":
        return wrong_drafter(exact, case.config.vocab_size, case.config.mask_token_id)
    if kind == "random":
        return random_drafter(case.weights_seed)
    if kind == "near-miss":
        return near_miss_drafter(exact, case.weights_seed)
    if kind == "spot":
        return spot_drafter(case.weights_seed)(case.block_size)
    raise ValueError(f"unknown suite drafter {kind!r}")


# --- the check --------------------------------------------------------------------------------


def check_case(case: Case, generate_fn, efficiency: bool = False) -> dict:
    """Run exact decoding and ``generate_fn`` on one case; assert the verdict. Returns stats.

    The verdict (always): tokens identical to exact decoding, and never more passes. efficiency:
    also assert that ``generate_fn`` drafts with the suite's drafter and accepts the oracle's
    rounds in full (``check_oracle_accepted``); a correct decoder that drafts with a drafter of
    its own fails it, so it is off unless asked for."""
    exact, got, tokens, passes = run_case(case, generate_fn)
    assert_identical(exact, tokens, case.block_size, len(case.prompt), case.family)
    assert passes <= exact.passes, f"{passes} passes, exact decoding needed {exact.passes}"
    if efficiency and case.drafter == "oracle":
        check_oracle_accepted(exact, got, min(case.kwargs["depth"], case.kwargs["budget"] - 1))
    return {"passes": passes, "exact_passes": exact.passes, "tokens": len(exact.tokens), "drafted": drafted(got)}


def drafted(got) -> bool | None:
    """Whether some verify pass of ``got`` held a drafted row besides the current state (its
    ``stats["draft_nodes"]``, as ``spotref.generate`` reports); None when it does not say."""
    nodes = got.stats.get("draft_nodes") if isinstance(getattr(got, "stats", None), dict) else None
    return None if nodes is None else any(n > 1 for n in nodes)


def run_case(case: Case, generate_fn) -> tuple:
    """(exact decoding's result, ``generate_fn``'s result, its tokens as a list of ints, its
    passes) on one case; a result of the wrong type is a ``TypeError`` (``checked_result``)."""
    model = case.model()
    kw = dict(case.kwargs)
    budget, depth = kw.pop("budget"), kw.pop("depth")
    exact = generate(model, case.prompt, case.max_new_tokens, **kw)
    drafter = make_drafter(case.drafter, exact, case)
    got = generate_fn(model, case.prompt, case.max_new_tokens, drafter=drafter, budget=budget, depth=depth, **kw)
    return (exact, got, *checked_result(got))


def checked_result(got) -> tuple:
    """(tokens, passes) of ``generate_fn``'s result: an object with ``tokens``, a 1-D list, tuple,
    array or tensor of int token ids, and ``passes``, an int (``spotref.generate``'s ``Result``);
    ``TypeError`` naming what it returned otherwise."""
    tokens, passes = getattr(got, "tokens", None), getattr(got, "passes", None)
    if tokens is None or passes is None:
        raise TypeError(
            f"generate_fn returned a {type(got).__name__}, not a result with tokens and passes: return "
            f"spotref.Result(tokens, passes, stats), as spotref.generate does"
        )
    if is_array(tokens) and tokens.ndim == 1:
        tokens = tokens.tolist()
    if not isinstance(tokens, (list, tuple)) or not all(
        isinstance(t, numbers.Integral) and not isinstance(t, bool) for t in tokens
    ):
        raise TypeError(
            f"generate_fn's result.tokens must be a 1-D list, tuple, array or tensor of int token ids, got {tokens!r}"
        )
    if isinstance(passes, bool) or not isinstance(passes, numbers.Integral):
        raise TypeError(f"generate_fn's result.passes must be an int (the forward passes), got {passes!r}")
    return [int(t) for t in tokens], int(passes)


def probe_case() -> Case:
    """The one small case ``run_conformance`` runs first: SDAR, 8 tokens, blocks of 2, the
    confidence drafter, every option at its plainest."""
    config = tiny_config("sdar", 8, 7, 2, hidden=16, layers=1, heads=2, kv=1, tied=False, init=0.3)
    kwargs = dict(
        temperature=0.0,
        seed=0,
        threshold=None,
        top_k=None,
        top_p=None,
        confidence="filtered",
        precision="auto",
        budget=4,
        depth=2,
        stop_ids=None,
        width=None,
    )
    return Case(config, 0, [1, 2, 3], 4, "confidence", kwargs, "sdar")


def check_oracle_accepted(exact, got, d_eff: int):
    """Each round of the oracle commits min(D + 1, remaining) decisions (1 at a block's start):
    read from ``got.stats["starts"]`` and ``["accepted"]`` (one entry per verify pass)."""
    stats = getattr(got, "stats", None)
    if not isinstance(stats, dict) or "starts" not in stats or "accepted" not in stats:
        raise AssertionError(
            'the efficiency check reads result.stats["starts"] and ["accepted"] (per verify pass: '
            "(block, step) and decisions accepted), as spotref.generate reports: this result has none"
        )
    remaining = {}
    for b, k, _ in exact.stats["trajectory"]:
        remaining[b] = max(remaining.get(b, 0), k + 1)  # decisions in block b
    for (b, k), n in zip(got.stats["starts"], got.stats["accepted"]):
        want = 1 if k == 0 else min(d_eff + 1, remaining[b] - k)
        assert n == want, f"oracle round at block {b}, step {k}: accepted {n}, want {want}"


# --- the Hypothesis strategy ------------------------------------------------------------------


def hypothesis():
    """The ``hypothesis`` package, or a ``ModuleNotFoundError`` saying how to install it."""
    try:
        import hypothesis
        import hypothesis.strategies  # noqa: F401  (hypothesis.strategies.*)
    except ModuleNotFoundError as e:
        if e.name != "hypothesis":
            raise
        raise ModuleNotFoundError(
            'the conformance suite needs Hypothesis: pip install "spotref[conformance]"', name="hypothesis"
        ) from None
    return hypothesis


def cases(block_sizes=BLOCK_SIZES, init_ranges=INIT_RANGES, families=FAMILIES, aims=True):
    """Hypothesis strategy of conformance cases (built by construction, no filtering). families:
    those drawn; the first (SDAR, the cheapest: no canvas to re-run) in about half the cases
    besides its share of the rest, and cases shrink towards it. Nine cases in ten can draft
    (blocks of 2 or more, budget >= 2, depth >= 1, 2 or more tokens asked); the tenth may be any
    corner (no token asked, blocks of 1, budget 1, depth 0). aims: 5 cases in 8 aimed at a
    boundary (``aimed``: a threshold equal to a confidence, ties at the k-th logit, top-p at a
    cumulative mass, ties between positions)."""
    st = hypothesis().strategies

    @st.composite
    def case(draw):
        family = families[0] if draw(st.booleans()) else draw(st.sampled_from(families))
        corner = draw(st.integers(0, 9)) == 9  # 1 in 10: any length, budget and depth, drafting or not
        drafting = [b for b in block_sizes if b >= 2] or list(block_sizes)
        B = draw(st.sampled_from(block_sizes if corner else drafting))  # SDAR's block size, a canvas' block_length
        V = draw(st.integers(8, 300))
        mask_id = draw(st.integers(0, V - 1))
        sizes = draw(model_sizes(init_ranges))
        cfg = tiny_config(family, V, mask_id, B, **sizes)
        token = st.integers(0, V - 2).map(lambda t: t + (t >= mask_id))  # never MASK
        prompt = draw(st.lists(token, max_size=3 * B if family == "sdar" else B))  # a canvas: every pass runs it
        precision = draw(st.sampled_from(PRECISIONS))
        confidences = [c for c in RULES[family].CONFIDENCES if (c, precision) != ("entropy", "float16")]
        filters = family != "llada"  # LLaDA's rule draws from the whole vocabulary
        kwargs = dict(
            temperature=draw(
                st.just(0.0)
                | st.integers(1, 60).map(lambda i: i / 20)  # every 0.05
                | st.floats(0.05, MAX_TEMPERATURE)
            ),
            seed=draw(st.integers(0, 2**64 - 1)),
            threshold=draw(st.none() | st.floats(0.01, 0.99)),
            top_k=draw(st.none() | st.integers(1, V)) if filters else None,
            top_p=draw(st.none() | st.floats(0.05, 1.0)) if filters else None,
            confidence=draw(st.sampled_from(confidences)),
            precision=precision,
            budget=draw(st.integers(1 if corner else 2, MAX_BUDGET)),
            depth=draw(st.integers(0 if corner else 1, B)),
            stop_ids=draw(st.lists(token, min_size=1, max_size=2)),
        )
        kwargs["width"] = draw(st.none() | st.integers(0, 8).map(lambda e: kwargs["budget"] + e))
        if family != "sdar":
            kwargs["block_length"] = B
        case = Case(
            cfg,
            draw(st.integers(0, 2**16)),
            prompt,
            draw(st.integers(0 if corner else 2, 2 * B + 5)),
            draw(st.sampled_from(DRAFTERS)),
            kwargs,
            family,
        )
        aim = draw(st.sampled_from(AIMS)) if aims else None
        return aimed(case, aim, draw(st.integers(0, 2**16))) if aim else case

    return case()


def model_sizes(init_ranges):
    """Hypothesis strategy of a tiny model's sizes: ``tiny_config``'s keyword arguments."""
    st = hypothesis().strategies
    return st.builds(
        lambda hk, **kw: dict(heads=hk[0], kv=hk[1], **kw),
        st.sampled_from([(2, 1), (2, 2), (4, 2)]),
        hidden=st.sampled_from([16, 32]),
        layers=st.integers(1, 2),
        tied=st.booleans(),
        init=st.sampled_from(init_ranges),
    )


AIMS = (None, None, None, "tau", "tau", "top-k", "top-p", "ties")  # 5 cases in 8 aim at a boundary


class _FirstDecision(Exception):
    """Stops ``first_decision``'s decoding at its first decision."""


def first_decision(case: Case):
    """(rule, logits (M, V) of the masked positions, their confidences c (M,) float64) at exact
    decoding's first decision in ``case``; None when it takes none."""
    decide, seen = DecisionRule.decide, []

    def recording(rule, logits, state, noise, step):
        masked = np.flatnonzero(state == rule.mask_id)
        if len(masked):
            rows = logits[torch.as_tensor(masked, device=logits.device)]
            seen.append((rule, rows, rule.drawn(rows, masked, noise, step)[1]))
            raise _FirstDecision
        return decide(rule, logits, state, noise, step)

    kw = {k: v for k, v in case.kwargs.items() if k not in ("budget", "depth")}
    with mock.patch.object(DecisionRule, "decide", recording), contextlib.suppress(_FirstDecision):
        generate(case.model(), case.prompt, case.max_new_tokens, **kw)
    return seen[0] if seen else None


def aimed(case: Case, aim: str, pick: int) -> Case:
    """``case`` aimed at a boundary where implementations differ, set from its first decision's
    numbers (``pick`` chooses among the candidates): "tau", a threshold equal to a confidence
    that occurs (below the largest, or tied with it); "top-k", k = 1 where the top logit ties
    with the next (near-tie weights, bf16: the filtered confidence is 1 / m, a mutant's 1);
    "top-p", p equal to the top entry's mass in a row other than the most confident (the mass
    before the second entry); "ties", an empty prompt (identical masked rows: positions' confidences tie, and ties
    go to the lowest position). A case without the boundary is returned as it is."""
    kw = dict(case.kwargs)
    if aim == "ties":
        return dataclasses.replace(case, prompt=[], kwargs={**kw, "threshold": None})
    filters = case.family != "llada"
    if aim in ("top-k", "top-p") and filters:
        kw.update(top_p=None) if aim == "top-k" else kw.update(top_k=None)
        if case.family == "sdar":
            kw["confidence"] = "filtered"  # the filter shows in the confidences
        if aim == "top-k":  # near-tie weights in the coarsest precision: ties at the top
            kw["precision"] = "bfloat16"
            init = "init_std" if case.family == "llada" else "initializer_range"
            case = dataclasses.replace(case, config=dataclasses.replace(case.config, **{init: 1e-3}))
    case = dataclasses.replace(case, kwargs=kw)
    first = first_decision(case)
    if first is None:
        return case
    rule, rows, c = first
    if aim == "tau" or not filters:
        values = sorted(v for v in set(c.tolist()) if 0 < v < 1)
        candidates = values[:-1] or values  # at the largest: the fallback, unless it is tied
        key, value = "threshold", candidates[pick % len(candidates)] if candidates else None
    else:
        ranked = torch.sort(rule.scaled(rows), dim=-1, descending=True, stable=True).values  # (M, V)
        if aim == "top-k":  # k = 1 tied with the next entry: the confidence is 1 / m, not 1
            tied = (ranked[:, 0] == ranked[:, 1]) & torch.isfinite(ranked[:, 1])
            key, value = "top_k", 1 if bool(tied.any()) else None
        else:  # p = the top entry's mass in a row not the most confident: keeps the second, or not
            rows = [r for r in range(len(c)) if r != int(c.argmax())] or [0]
            masses = sorted({float(v) for v in torch.softmax(ranked[rows], -1)[:, 0].double() if 0 < v < 1})
            key, value = "top_p", masses[pick % len(masses)] if masses else None
    return case if value is None else dataclasses.replace(case, kwargs={**kw, key: value})


def tiny_config(family: str, V: int, mask_id: int, B: int, hidden, layers, heads, kv, tied, init):
    """A tiny model's config of ``family``: every canvas (prompt <= B, max_new_tokens <= 2B + 5
    rounded up to blocks of B) within its positions."""
    if family == "llada":
        return LLaDAConfig(
            vocab_size=V,
            d_model=hidden,
            n_heads=heads,
            n_kv_heads=kv,
            n_layers=layers,
            mlp_hidden_size=32,
            max_sequence_length=4 * B + 8,
            weight_tying=tied,
            mask_token_id=mask_id,
            init_std=init,
        )
    if family == "dream":
        return DreamConfig(
            vocab_size=V,
            hidden_size=hidden,
            intermediate_size=32,
            num_hidden_layers=layers,
            num_attention_heads=heads,
            num_key_value_heads=kv,
            max_position_embeddings=4 * B + 8,
            tie_word_embeddings=tied,
            initializer_range=init,
            mask_token_id=mask_id,
            pad_token_id=None,  # no eos / bos either: a tiny vocabulary holds none of Dream's ids
        )
    return SDARConfig(
        vocab_size=V,
        hidden_size=hidden,
        intermediate_size=32,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv,
        head_dim=8,
        mask_token_id=mask_id,
        block_size=B,
        tie_word_embeddings=tied,
        initializer_range=init,
    )


def run_conformance(
    generate_fn,
    max_examples: int = 100,
    database=None,
    strategy=None,
    progress=None,
    efficiency: bool = False,
    **settings,
) -> Counter:
    """Run the suite on ``generate_fn``; raises AssertionError (with the minimal case) on failure.

    The verdict is exactness: tokens identical to exact decoding and never more passes, whatever
    drafter ``generate_fn`` uses. efficiency (default False): also require that it drafts with the
    suite's drafter and accepts every round of the oracle drafter in full (it reads
    ``result.stats["starts"]`` and ``["accepted"]``, as ``spotref.generate`` reports them): a
    check of spotref's own decoder, not of exactness.

    ``max_examples``: an int >= 1 (``ValueError`` otherwise). ``generate_fn`` is first run on one
    small case (``probe_case``), so one that is not callable, or whose result is not an object
    with ``tokens`` and ``passes`` (a list, say), is a ``TypeError`` before any Hypothesis case.

    Needs Hypothesis (``pip install "spotref[conformance]"``). database: where Hypothesis keeps
    failing examples to replay them; None (default) keeps nothing, so no ``.hypothesis/``
    directory appears in the caller's working directory; a path or a Hypothesis
    ``ExampleDatabase`` opts in. Other keyword arguments go to ``hypothesis.settings``; by default
    only the first bug found is reported (``report_multiple_bugs=False``), as one AssertionError
    rather than an ExceptionGroup of every distinct failure.

    Returns what was covered: a Counter of cases by family, rule, temperature and prompt shape
    (its "cases" entry is the number of distinct cases checked); what happened, not what was
    asked: "decoded" counts the cases with at least one token, "drafted" and "drafter=NAME" those
    where some verify pass held a drafted row (read from ``result.stats["draft_nodes"]``;
    "drafting-unreported" counts the cases whose result does not say). strategy: the cases to draw
    (default ``cases()``; e.g. ``cases(block_sizes=(5, 7, 9), init_ranges=(1e-4,))``).
    progress: a callable given one line at every tenth of the cases and the verdict at the end
    (e.g. ``print``); default None, silent."""
    h = hypothesis()
    HealthCheck, given, hsettings = h.HealthCheck, h.given, h.settings
    check_int("max_examples", max_examples, 1)
    if not callable(generate_fn):
        raise TypeError(f"generate_fn must be a callable like spotref.generate, got {type(generate_fn).__name__}")
    run_case(probe_case(), generate_fn)  # a result of the wrong type, named now: not after shrinking
    database, seen = example_database(database), Counter()
    settings = {"report_multiple_bugs": False, **settings}
    health = [HealthCheck.too_slow, HealthCheck.data_too_large]

    @hsettings(max_examples=max_examples, deadline=None, database=database, suppress_health_check=health, **settings)
    @given(cases() if strategy is None else strategy)
    def conformance(case):
        seen.update(coverage(case, check_case(case, generate_fn, efficiency)))
        if progress and seen["cases"] % max(max_examples // 10, 1) == 0:
            progress(f"conformance: {seen['cases']} / {max_examples} cases, each identical to exact decoding")

    with _storage(database is None):
        conformance()
    if progress:
        progress(f"conformance: passed, {seen['cases']} cases identical to exact decoding {happened(seen)}")
    return seen


def example_database(database):
    """Hypothesis' example database for ``database``: a path opens a directory of examples."""
    if isinstance(database, (str, os.PathLike)):
        from hypothesis.database import DirectoryBasedExampleDatabase

        return DirectoryBasedExampleDatabase(os.fspath(database))
    return database


def happened(seen: Counter) -> str:
    """What the checked cases did, for the verdict line."""
    return f"({seen['decoded']} decoded a token, {seen['drafted']} drafted)"


@contextlib.contextmanager
def _storage(private: bool):
    """With ``private``, Hypothesis' other files (its cache of source constants) go to a
    temporary directory, not to ``.hypothesis/`` in the working directory."""
    if not private or os.environ.get("HYPOTHESIS_STORAGE_DIRECTORY"):
        yield
        return
    from hypothesis import configuration

    before = vars(configuration).get("__hypothesis_home_directory")
    with tempfile.TemporaryDirectory(prefix="spotref-hypothesis-") as tmp:
        configuration.set_hypothesis_home_dir(tmp)
        try:
            yield
        finally:
            configuration.set_hypothesis_home_dir(before)


def coverage(case: Case, outcome: dict) -> list[str]:
    """The coverage keys of ``case`` given ``check_case``'s ``outcome`` (see ``run_conformance``)."""
    B, kw = case.block_size, case.kwargs
    T = kw["temperature"]
    if case.family != "sdar":
        prompt = "canvas"  # no prompt token inside a block
    else:
        prompt = "partial-prompt-block" if len(case.prompt) % B else "whole-prompt-blocks"
    drafted = outcome["drafted"]
    happened = ["decoded"] if outcome["tokens"] else []
    if drafted is None:
        happened.append("drafting-unreported")
    elif drafted:
        happened += ["drafted", f"drafter={case.drafter}"]
    return [
        "cases",
        *happened,
        f"family={case.family}",
        "T=0" if T == 0 else "T<=1" if T <= 1 else "T>1",
        f"precision={kw['precision']}",
        "budget>64" if kw["budget"] > 64 else "budget<=64",
        "rows" if kw.get("width") is None else "fixed-width",
        "threshold" if kw["threshold"] is not None else "one-position",
        prompt,
        "top-k/top-p" if kw["top_k"] or kw["top_p"] else "no-filter",
        f"confidence={kw['confidence']}",
    ]
