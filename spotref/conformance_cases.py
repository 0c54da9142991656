"""The conformance suite's cases: tiny models of each family and generation requests, drawn by
Hypothesis and aimed at the boundaries where implementations differ (``spotref.conformance``)."""

from __future__ import annotations

import contextlib
import dataclasses
from dataclasses import dataclass, field
from unittest import mock

import numpy as np
import torch

from spotref.api import generate
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
    batch_sensitive: bool = False  # the model's logits depend on a forward's row count (``BatchSensitive``)

    def model(self) -> SDARModel | LLaDAModel | DreamModel:
        with torch.random.fork_rng():
            torch.manual_seed(self.weights_seed)
            model = MODELS[self.family](self.config).eval()
        return BatchSensitive(model) if self.batch_sensitive else model

    @property
    def block_size(self) -> int:
        """The block length decoded in: SDAR's trained block size, a canvas family's block_length."""
        return self.config.block_size if self.family == "sdar" else self.kwargs["block_length"]


class BatchSensitive:
    """``model`` made loudly batch-dependent, for the batch-invariance check: a forward of R rows
    (SDAR: a ``denoise`` of R rows with ``one_forward``, else R forwards of one row; a canvas
    family: a call of R canvases) adds a fixed pattern of R (standard normal, times ``scale``) to
    its logits. A decoder that runs every pass of width W as one forward of W rows, as exact
    decoding at width W does (docs/spec.md section 4), sees the pattern of W; one that ignores
    ``width`` sees another, and its decisions differ. Everything else is ``model``'s."""

    def __init__(self, model, scale: float = 1.0):
        self.model, self.scale = model, scale

    def __getattr__(self, name):
        return getattr(self.__dict__["model"], name)

    def loud(self, logits: torch.Tensor, rows: int) -> torch.Tensor:
        """logits (N, ..., V) of a forward of ``rows`` rows, plus the pattern of ``rows``."""
        g = torch.Generator().manual_seed(rows)
        pattern = torch.randn(logits.shape[1:], generator=g, dtype=torch.float64) * self.scale
        return logits + pattern.to(logits.dtype)

    def denoise(self, cache, states, one_forward: bool = False):
        return self.loud(self.model.denoise(cache, states, one_forward), len(states) if one_forward else 1)

    def store_and_denoise(self, cache, block, states, one_forward: bool = False):
        self.model.store(cache, block)
        return self.denoise(cache, states, one_forward)

    def __call__(self, ids):
        return self.loud(self.model(ids), len(ids))


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


def cases(block_sizes=BLOCK_SIZES, init_ranges=INIT_RANGES, families=FAMILIES, aims=True, batch=False):
    """Hypothesis strategy of conformance cases (built by construction, no filtering). families:
    those drawn; the first (SDAR, the cheapest: no canvas to re-run) in about half the cases
    besides its share of the rest, and cases shrink towards it. Nine cases in ten can draft
    (blocks of 2 or more, budget >= 2, depth >= 1, 2 or more tokens asked); the tenth may be any
    corner (no token asked, blocks of 1, budget 1, depth 0). aims: 7 cases in 9 aimed at a
    boundary (``aimed``: a threshold equal to a confidence, ties at the k-th logit, top-p at a
    cumulative mass, ties between positions, a stop id that occurs, every position at once).
    batch: the batch-invariance check's cases: always a verify width, and a ``BatchSensitive``
    model."""
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
        widths = st.integers(0, 8).map(lambda e: kwargs["budget"] + e)
        kwargs["width"] = draw(widths if batch else st.none() | widths)
        if family != "sdar":
            kwargs["block_length"] = B
        weights, n = draw(st.integers(0, 2**16)), draw(st.integers(0 if corner else 2, 2 * B + 5))
        case = Case(cfg, weights, prompt, n, draw(st.sampled_from(DRAFTERS)), kwargs, family, batch)
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


AIMS = (None, None, "tau", "tau", "top-k", "top-p", "ties", "stop", "all")  # 7 cases in 9 aim at a boundary
NEAR_TIE_INIT = 1e-3  # weights this small: logits within a few bf16 ulps, ties at every rank


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
    """``case`` aimed at a boundary where implementations differ, set from exact decoding's
    numbers (``pick`` chooses among the candidates). A case without the boundary is returned as
    it is.

    - "tau": a threshold equal to a confidence of the first decision (below the largest, or
      tied with it): ``c > tau``, not ``>=``;
    - "top-k" (not LLaDA): near-tie weights in bf16, k where a row's k-th logit ties with the
      next (every tie kept), and the threshold at that row's confidence: a decoder that drops a
      tie raises it over the threshold;
    - "top-p" (not LLaDA): p equal to the smallest top-entry mass of a row (the mass before its
      second entry: ``<= p`` keeps it) and the threshold at that row's confidence;
    - "ties": an empty prompt (identical masked rows: the positions' confidences tie, and ties
      go to the lowest position);
    - "stop": a stop id that exact decoding emits in its first block (the cut after it, the
      blocks after its block never decoded);
    - "all": near-tie weights in bf16 (at T = 0 one time in two) and a threshold below every
      confidence: the first decision commits every masked position, so each row's token shows
      (ties at the top go to the lowest id). LLaDA's filter aims are "tau"'s."""
    if aim == "ties":
        return with_kwargs(dataclasses.replace(case, prompt=[]), threshold=None)
    if aim == "stop":
        return stop_aimed(case, pick)
    if aim == "all":  # at T = 0 one time in two: the argmax's ties show
        T = 0.0 if pick % 2 else case.kwargs["temperature"]
        case = with_kwargs(near_tie(case), precision="bfloat16", temperature=T)
        first = first_decision(case)
        c = [] if first is None else [v for v in first[2].tolist() if v > 0]
        return with_kwargs(case, threshold=min(c) / 2) if c else case
    if aim in ("top-k", "top-p") and case.family != "llada":
        return filter_aimed(case, aim, pick)
    first = first_decision(case)
    values = [] if first is None else sorted(v for v in set(first[2].tolist()) if 0 < v < 1)
    candidates = values[:-1] or values  # at the largest: the fallback, unless it is tied
    return with_kwargs(case, threshold=candidates[pick % len(candidates)]) if candidates else case


def with_kwargs(case: Case, **kw) -> Case:
    return dataclasses.replace(case, kwargs={**case.kwargs, **kw})


def near_tie(case: Case) -> Case:
    """``case`` with near-tie weights (``NEAR_TIE_INIT``)."""
    init = "init_std" if case.family == "llada" else "initializer_range"
    return dataclasses.replace(case, config=dataclasses.replace(case.config, **{init: NEAR_TIE_INIT}))


def filter_aimed(case: Case, aim: str, pick: int) -> Case:
    """The "top-k" and "top-p" aims (``aimed``): the filter's boundary in one row ``r`` of the
    first decision, and the threshold at ``r``'s confidence under the exact filter."""
    own = {"sdar": "filtered", "dream": "maskgit_plus"}[case.family]  # the filter shows in the confidence
    case = with_kwargs(case, top_k=None, top_p=None, threshold=None, confidence=own)
    if aim == "top-k":
        case = with_kwargs(near_tie(case), precision="bfloat16")
    first = first_decision(case)
    if first is None:
        return case
    rule, rows, _ = first
    ranked = torch.sort(rule.scaled(rows), dim=-1, descending=True, stable=True).values  # (M, V) in D
    if aim == "top-k":  # the k-th entry tied with the (k + 1)-th, the smallest such k mostly
        tied = torch.nonzero((ranked[:, :-1] == ranked[:, 1:]) & torch.isfinite(ranked[:, 1:]))  # (n, 2)
        if len(tied) == 0:
            return case
        ks = sorted({int(j) + 1 for j in tied[:, 1]})
        k = ks[0] if pick % 2 else ks[pick % len(ks)]
        r, boundary = int(tied[tied[:, 1] == k - 1][0, 0]), {"top_k": k}
    else:  # the smallest top-entry mass below 1: its row keeps the second entry, the others not
        masses = torch.softmax(ranked, -1)[:, 0].double()  # (M,) in D, as the filter sums it
        masses = masses.masked_fill(~((masses > 0) & (masses < 1)), 2.0)
        r = int(masses.argmin())
        if masses[r] >= 1:
            return case
        boundary = {"top_p": float(masses[r])}
    case = with_kwargs(case, **boundary)
    first = first_decision(case)
    tau = None if first is None else float(first[2][r])
    return with_kwargs(case, threshold=tau) if tau is not None and 0 < tau < 1 else case


def stop_aimed(case: Case, pick: int) -> Case:
    """A stop id among the first tokens exact decoding emits (``aimed``'s "stop")."""
    kw = {k: v for k, v in case.kwargs.items() if k not in ("budget", "depth", "stop_ids")}
    tokens = generate(case.model(), case.prompt, case.max_new_tokens, **kw).tokens
    if not tokens:
        return case
    tail = len(case.prompt) % case.block_size if case.family == "sdar" else 0  # prompt tokens in the first block
    first_block = max(1, min(len(tokens) - 1, case.block_size - tail))
    return with_kwargs(case, stop_ids=[tokens[pick % first_block]])


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
