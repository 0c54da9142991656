"""The conformance suite's Hypothesis strategy: cases drawn by construction (``cases``), then aimed
at the boundaries where implementations differ (``aimed``), each set from exact decoding's own
numbers. The cases themselves, their tiny models and their JSON form: ``conformance_cases``."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import math
from unittest import mock

import numpy as np
import torch

from spotref.api import generate
from spotref.configs import SDARConfig, SDARMoEConfig
from spotref.configs_llada2 import LLaDA2Config
from spotref.conformance_cases import (
    BLOCK_SIZES,
    DRAFTERS,
    FAMILIES,
    INIT_RANGES,
    MAX_BUDGET,
    MAX_TEMPERATURE,
    Case,
    checked_knobs,
    decided_in,
    pretrained,
    tiny_config,
    weights_dtype,
)
from spotref.spec.decode import BLOCK_CAUSAL
from spotref.spec.decode import family as model_family
from spotref.spec.noise import gumbel_of, uniform
from spotref.spec.rules import FAMILIES as RULES
from spotref.spec.rules import PRECISIONS, DecisionRule, filter_top_k_top_p

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


def cases(
    block_sizes=BLOCK_SIZES,
    init_ranges=INIT_RANGES,
    families=FAMILIES,
    aims=True,
    batch=False,
    vocab=None,
    dtype=None,
    model=None,
    drafters=DRAFTERS,
):
    """Hypothesis strategy of conformance cases (built by construction, no filtering). families:
    those drawn (``("sdar",)``: SDAR alone); the first (SDAR, the cheapest) in about half the
    cases besides its share of the rest, and cases shrink towards it. Nine cases in ten can draft
    (blocks of 2 or more, budget >= 2, depth >= 1, 2 or more tokens asked); the tenth may be any
    corner (no token asked, blocks of 1, budget 1, depth 0). aims: 13 cases in 14 aimed at a
    boundary where implementations differ (``aimed``). batch: the batch-invariance check's
    cases: always a verify width, and a ``BatchSensitive`` model.

    The knobs (``checked_knobs``; a bad one is a ``ValueError`` naming it): vocab, the toy
    models' vocabulary size, an int or a range ``(lo, hi)`` drawn in (default ``VOCAB``); dtype,
    the models' dtype, "float32" (the toy models' default), "bfloat16" or "float16", or a
    sequence of them drawn from; model, a checkpoint directory (``spotref.from_pretrained``)
    every case decodes with instead of a toy model: its family, vocabulary and dtype (``dtype``
    overrides the last), SDAR in its own block size, a canvas family in the block lengths of
    ``block_sizes`` whose canvases fit its positions (``families``, ``init_ranges`` and the
    near-tie aims do not apply). drafters: the drafters drawn from (names of ``DRAFTERS``)."""
    vocab, dtypes, model, sizes = checked_knobs(vocab, dtype, model, block_sizes, drafters, families)
    st = hypothesis().strategies

    @st.composite
    def case(draw):
        if model is None:
            family = families[0] if draw(st.booleans()) else draw(st.sampled_from(tuple(families)))
        else:
            family = model_family(pretrained(model, dtypes[0]))
        corner = draw(st.integers(0, 9)) == 9  # 1 in 10: any length, budget and depth, drafting or not
        drafting = [b for b in sizes if b >= 2] or list(sizes)
        B = draw(st.sampled_from(sizes if corner else drafting))  # SDAR's block size, a canvas' block_length
        served = draw(st.sampled_from(SERVED_DTYPES))  # the toy config's torch_dtype: what precision=None reads
        cfg = draw(toy_configs(family, B, vocab, init_ranges, served)) if model is None else None
        model_dtype = draw(st.sampled_from(dtypes))
        if model is None:
            V, mask_id, dtype_name = cfg.vocab_size, cfg.mask_token_id, model_dtype
        else:
            loaded = pretrained(model, model_dtype)
            cfg, V, mask_id, dtype_name = loaded.config, loaded.config.vocab_size, loaded.mask_id, weights_dtype(loaded)
        token = st.integers(0, V - 2).map(lambda t: t + (t >= mask_id))  # never MASK
        prompt = draw(st.lists(token, max_size=3 * B if family in BLOCK_CAUSAL else B))  # a canvas: every pass runs it
        most = MOE_MAX_BUDGET if hasattr(cfg, "num_experts") else MAX_BUDGET  # a mixture of experts runs row by row
        kwargs = draw(options(family, V, B, token, corner, batch, decided_in(cfg, dtype_name), most))
        weights, n = draw(st.integers(0, 2**16)), draw(st.integers(0 if corner else 2, 2 * B + 5))
        case = Case(cfg, weights, prompt, n, draw(st.sampled_from(tuple(drafters))), kwargs, family, batch)
        case = dataclasses.replace(case, dtype=model_dtype, checkpoint=model)
        pick = draw(st.integers(0, 2**16))  # the aim and its choices (sampled_from drew some aims in 2 of 100)
        aim = AIMS[pick % len(AIMS)] if aims else None
        return aimed(case, aim, pick // len(AIMS), tuple(families)) if aim else case

    return case()


MOE_MAX_BUDGET = 24  # a mixture of experts' cases: every row routed alone costs its experts' calls per row
SERVED_DTYPES = (None, None, "bfloat16", "float16", "float32")  # a toy config's torch_dtype (None: none)


@functools.cache
def composite(fn):
    """``fn(draw, *args)`` as a Hypothesis strategy factory, decorated once: Hypothesis reads a
    composite's source each time one is decorated (a tenth of a case's drawing time)."""
    return hypothesis().strategies.composite(fn)


def toy_configs(family: str, B: int, vocab: tuple, init_ranges, served):
    """Hypothesis strategy of a toy model's config of ``family`` in blocks of ``B``, its
    vocabulary in ``vocab`` (lo, hi), ``served`` its config's torch_dtype (None: none)."""
    return composite(_toy_config)(family, B, vocab, init_ranges, served)


def _toy_config(draw, family, B, vocab, init_ranges, served):
    st = hypothesis().strategies
    V = draw(st.integers(*vocab))
    mask_id = draw(st.integers(0, V - 1))
    cfg = draw(routing(tiny_config(family, V, mask_id, B, **draw(model_sizes(init_ranges)))))
    return cfg if served is None else dataclasses.replace(cfg, extra={**cfg.extra, "torch_dtype": served})


def routing(cfg):
    """Hypothesis strategy of ``cfg`` with experts drawn: a toy SDAR one time in three SDAR-MoE
    (2 to 6 experts, 1 to all of them per token, ``norm_topk_prob`` either way, the first layer
    dense or not); a toy LLaDA2 its groups, kept groups, experts per token, shared experts and
    scale; any other as it is."""
    return composite(_routed)(cfg)


def _routed(draw, cfg):
    st = hypothesis().strategies
    if isinstance(cfg, LLaDA2Config):
        groups = draw(st.sampled_from([(4, 1), (4, 2), (6, 3), (8, 2), (8, 4)]))  # (E, groups): 2+ per group
        kept = draw(st.integers(1, groups[1]))
        k = draw(st.integers(1, kept * groups[0] // groups[1]))
        shared = draw(st.sampled_from([None, 1, 2]))
        fields = dict(num_experts=groups[0], n_group=groups[1], topk_group=kept, num_experts_per_tok=k)
        fields.update(num_shared_experts=shared, routed_scaling_factor=draw(st.sampled_from([1.0, 2.5])))
        return dataclasses.replace(cfg, **fields)
    if type(cfg) is not SDARConfig or draw(st.integers(0, 2)) < 2:  # shrinks to dense SDAR
        return cfg
    E = draw(st.integers(2, 6))
    moe = dict(num_experts=E, num_experts_per_tok=draw(st.integers(1, E)), moe_intermediate_size=16)
    dense = draw(st.sampled_from([[], [0]])) if cfg.num_hidden_layers > 1 else []  # a sparse layer in each
    moe.update(norm_topk_prob=draw(st.booleans()), mlp_only_layers=dense)
    return SDARMoEConfig(**{f.name: getattr(cfg, f.name) for f in dataclasses.fields(cfg)}, **moe)


def options(family: str, V: int, B: int, token, corner: bool, batch: bool, decided: tuple, most=MAX_BUDGET):
    """Hypothesis strategy of a case's ``generate`` keywords (``Case.kwargs``); ``decided``: the
    dtype ``precision=None`` decides in, "auto" the model's (``decided_in``); ``most``: the
    largest budget drawn."""
    return composite(_kwargs)(family, V, B, token, corner, batch, decided, most)


def _kwargs(draw, family, V, B, token, corner, batch, decided, most):
    st = hypothesis().strategies
    precision = draw(st.sampled_from((*PRECISIONS, None)))
    d = decided[0] if precision is None else decided[1] if precision == "auto" else precision
    confidences = [c for c in RULES[family].confidences if (c, d) != ("entropy", "float16")]
    T = draw(st.just(0.0) | st.integers(1, 60).map(lambda i: i / 20) | st.floats(0.05, MAX_TEMPERATURE))
    filters = family != "llada" and (T > 0 or family != "llada2")  # LLaDA: none; LLaDA2: greedy at T = 0
    kw = dict(
        temperature=T,  # 0, every 0.05, or any in [0.05, MAX_TEMPERATURE]
        seed=draw(st.integers(0, 2**64 - 1) | st.integers(2**32, 2**64 - 1)),  # half of them past 32 bits
        threshold=draw(st.none() | st.floats(0.01, 0.99)),
        top_k=draw(st.none() | st.integers(1, V)) if filters else None,
        top_p=draw(st.none() | st.floats(0.05, 1.0)) if filters else None,
        confidence=draw(st.sampled_from(confidences)),
        precision=precision,
        budget=draw(st.integers(1 if corner else 2, most)),
        depth=draw(st.integers(0 if corner else 1, B)),
        stop_ids=draw(st.lists(token, min_size=1, max_size=2) | token),  # a list, or one id
    )
    widths = st.integers(0, 8).map(lambda e: kw["budget"] + e)
    kw["width"] = draw(widths if batch else st.none() | widths)
    if family == "sdar":
        kw["fused_store"] = draw(st.booleans())
    elif family not in BLOCK_CAUSAL:
        kw["block_length"] = B
    return kw


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


AIMS = (
    None,
    "tau",
    "tau",
    "top-k",
    "top-k",
    "top-p",
    "top-p",
    "top-p-one",
    "top-p-one",
    "ties",
    "stop",
    "all",
    "draw",
    "draw",
)
NEAR_TIE_INIT = 1e-3  # weights this small: logits within a few bf16 ulps, ties at every rank


class _FirstDecision(Exception):
    """Stops ``first_decision``'s decoding at its first decision."""


def first_decision(case: Case, where: bool = False):
    """(rule, logits (M, V) of the masked positions, their confidences c (M,) float64) at exact
    decoding's first decision in ``case``; None when it takes none. where: also the masked
    positions (M,), the block's noise and the step."""
    decide, seen = DecisionRule.decide, []

    def recording(rule, logits, state, noise, step):
        masked = np.flatnonzero(state == rule.mask_id)
        if len(masked):
            rows = logits[torch.as_tensor(masked, device=logits.device)]
            seen.append((rule, rows, rule.drawn(rows, masked, noise, step)[1], masked, noise, step))
            raise _FirstDecision
        return decide(rule, logits, state, noise, step)

    kw = {k: v for k, v in case.kwargs.items() if k not in ("budget", "depth")}
    with mock.patch.object(DecisionRule, "decide", recording), contextlib.suppress(_FirstDecision):
        generate(case.model(), case.prompt, case.max_new_tokens, **kw)
    return None if not seen else seen[0] if where else seen[0][:3]


DRAW_SEEDS = 256  # the seeds a filter aim tries for a draw that shows its boundary
RACE_SEEDS = 1024  # the seeds the "draw" aim tries (LLaDA's L / T in bf16 flips 1 random row in 600)


def draw_aimed(case: Case, pick: int) -> Case:
    """The "draw" aim (``aimed``): T > 0 in bf16, the first noise seed (of ``RACE_SEEDS`` tried)
    whose first decision draws, in a row of the output, another token under a reading of the draw
    the spec rules out (``other_draws``); where none does, the seed of the closest race
    (the smallest gap between the two best of ``log p + g`` in a row; LLaDA's: of ``L - T
    log(-log u)``, the log of its ``exp(L) / (-log u) ** T``). The threshold goes below every
    confidence, so every row's token shows. LLaDA's T is never a power of two (``L / T`` would
    be exact in ``D``): one of ``LLADA_T`` instead."""
    T = case.kwargs["temperature"] or 1.0
    if case.family == "llada" and math.frexp(T)[0] == 0.5:
        T = LLADA_T[pick % len(LLADA_T)]
    case = with_kwargs(case, precision="bfloat16", temperature=T, threshold=None, stop_ids=None)  # no stop cuts a row
    first = first_decision(case, where=True)
    if first is None:
        return case
    rule, rows, _, masked, noise, step = first
    scores, others = rule.scores(rows), other_draws(rule, rows)  # (M, V) float64 each, whatever the seed
    shown, pos = torch.as_tensor(shown_rows(case, masked, noise)), torch.as_tensor(masked)

    form = RULES[rule.family].noise  # LLaDA's divisor of the uniforms; None: Gumbel, added

    def race(seed: int) -> tuple:  # (another reading differs in a shown row, the closest race of such a row)
        u = uniform(seed, noise.block, step, *noise.shape)  # (B, V): the block's, as BlockNoise makes it
        g = gumbel_of(u)[pos]  # the other readings' noise (and SDAR's and Dream's own)
        y = scores / form(u, rule.temperature)[pos] if form else scores + g
        differs = any(bool(((y.argmax(-1) != (o + g).argmax(-1)) & shown).any()) for o in others)
        top = (y.log() if form else y).topk(2, -1)
        apart = scores.gather(1, top.indices[:, :1]) != scores.gather(1, top.indices[:, 1:])
        gap = (top.values[:, 0] - top.values[:, 1]).masked_fill(~(apart[:, 0] & shown), torch.inf)
        return differs, float(gap.min())

    closest, seed = torch.inf, None
    for i in range(RACE_SEEDS):  # the first seed where another reading differs, else the closest race
        differs, gap = race(noise_seed(pick, i))
        if differs:
            seed = noise_seed(pick, i)
            break
        closest, seed = (gap, noise_seed(pick, i)) if gap < closest or seed is None else (closest, seed)
    case = with_kwargs(case, seed=seed)
    c = [v for v in first_decision(case)[2].tolist() if v > 0]
    return reached(case, "draw", threshold=min(c) / 2) if c and min(c) / 2 < 1 else case


def other_draws(rule: DecisionRule, rows: torch.Tensor) -> list:
    """The readings of the draw the spec rules out (docs/spec.md sections 2, 2.2), as scores (M,
    V) float64 of ``rows`` (M, V) whose argmax plus Gumbel noise is their token: SDAR's and
    Dream's ``log p`` taken in ``D``, and ``log_softmax(z)`` in float64 (not the log of ``p``
    rounded to ``D``); LLaDA's draw as a Gumbel-max over ``L / T`` rounded to ``D`` (not its
    float64 ``exp(L) / (-log u) ** T``)."""
    z = rule.filtered(rows)
    if rule.family == "llada":
        return [(z / rule.temperature).double()]
    return [torch.softmax(z, -1).log().double(), torch.log_softmax(z.double(), -1)]


LLADA_T = (0.3, 0.7, 1.5)  # the draw aim's temperatures for LLaDA where the drawn one is a power of two


def seeded(rule: DecisionRule, seed: int) -> DecisionRule:
    """``rule`` with the noise seed ``seed``."""
    return dataclasses.replace(rule, seed=seed)


def noise_seed(pick: int, i: int) -> int:
    """The ``i``-th noise seed an aim tries for ``pick``: spread over the whole 64-bit range."""
    return (pick * DRAW_SEEDS + i) * 0x9E3779B97F4A7C15 % 2**64


def shown_rows(case: Case, masked, noise) -> np.ndarray:
    """(M,) bool: which of the first decision's masked positions ``masked`` (in the block of
    ``noise``) are in the output, not cut by ``max_new_tokens``."""
    offset = len(case.prompt) if case.family in BLOCK_CAUSAL else 0
    return noise.block * noise.shape[0] + np.asarray(masked) - offset < case.max_new_tokens


def aimed(case: Case, aim: str, pick: int, families=FAMILIES) -> Case:
    """``case`` aimed at a boundary where implementations differ, set from exact decoding's
    numbers (``pick`` chooses among the candidates), its ``aim`` set to the boundary reached; a
    case without the boundary is returned as it is (``aim`` None). ``families``: those drawn,
    which an aim may move a toy case to (``as_family``: the same sizes and request).

    - "tau": a threshold equal to a confidence of the first decision (below the largest, or
      tied with it): ``c > tau``, not ``>=``; one time in two "tau-rounding" (``tau_aimed``);
    - "top-k", "top-p" (not LLaDA): k where a row's k-th logit ties with the next, p equal to
      the smallest top-entry mass of a row (``filter_aimed``);
    - "top-p-one" (SDAR and Dream, one time in two each): top_p = 1 where the two families'
      readings differ (``top_p_one_aimed``);
    - "ties": an empty prompt (identical masked rows: the positions' confidences tie, and ties
      go to the lowest position);
    - "stop": a stop id that exact decoding emits in its first block (the cut after it, the
      blocks after its block never decoded);
    - "all": near-tie weights in bf16 (at T = 0 two times in three) and a threshold below every
      confidence: the first decision commits every masked position, so each row's token shows
      (ties at the top go to the lowest id);
    - "draw": a race of the draw at T > 0 in bf16 (``draw_aimed``), on LLaDA one time in two.
    LLaDA has no filter: its filter aims run on an SDAR model of the same sizes where SDAR is
    drawn, else (and a LLaDA checkpoint's) they are "tau"'s."""
    if aim == "ties":
        return reached(dataclasses.replace(case, prompt=[]), "ties", threshold=None)
    if aim == "stop":
        return stop_aimed(case, pick)
    if aim == "all":
        return all_aimed(case, pick)
    if aim == "draw":
        return draw_aimed(as_family(case, ("llada", case.family)[pick % 2], families), pick // 2)
    if aim == "top-p-one":
        case = as_family(case, ("sdar", "dream")[pick % 2], families)
        case = as_family(case, "sdar" if case.family == "llada" else case.family, families)
        return tau_aimed(case, pick) if case.family == "llada" else top_p_one_aimed(case, pick // 2)
    if aim in ("top-k", "top-p"):
        case = as_family(case, "sdar", families) if case.family == "llada" else case
        return tau_aimed(case, pick) if case.family == "llada" else filter_aimed(case, aim, pick)
    return tau_aimed(case, pick)


ALL_SEEDS = 16  # the weight seeds the "all" aim tries at T = 0


def all_aimed(case: Case, pick: int) -> Case:
    """The "all" aim (``aimed``): near-tie weights in bf16 (at T = 0 two times in three) and a
    threshold below every confidence: the first decision commits every masked position, so each
    row's token shows. At T = 0, of ``ALL_SEEDS`` weight seeds (a toy model's) the first whose
    first decision has a row in the output whose largest ``p`` in ``D`` is tied between tokens
    of different logits: its token, the lowest id of the tie, is not the raw logits' argmax."""
    T = 0.0 if pick % 3 else case.kwargs["temperature"]
    case = with_kwargs(near_tie(case), precision="bfloat16", temperature=T)
    tries = ALL_SEEDS if T == 0 and case.checkpoint is None else 1
    for i in range(tries):
        tried = dataclasses.replace(case, weights_seed=(case.weights_seed + i) % 2**16)
        first = first_decision(tried, where=True)
        if first is None:
            return case
        if i == tries - 1 or top_tie_shows(tried, *first[:2], first[3], first[4]):
            c = [v for v in first[2].tolist() if v > 0]
            return reached(tried, "all", threshold=min(c) / 2) if c else case
    return case


def top_tie_shows(case: Case, rule: DecisionRule, rows: torch.Tensor, masked, noise) -> bool:
    """Whether a row of ``rows`` (M, V) in the output has its largest ``p`` (in ``D``) tied between
    tokens whose logits differ."""
    p = torch.softmax(rule.filtered(rows), -1)
    z = rule.rounded(rows)
    top = p == p.max(-1, keepdim=True).values  # (M, V)
    high = z.masked_fill(~top, -torch.inf).max(-1, keepdim=True).values
    low = z.masked_fill(~top, torch.inf).min(-1, keepdim=True).values
    return bool(((high != low)[:, 0] & torch.as_tensor(shown_rows(case, masked, noise))).any())


def tau_aimed(case: Case, pick: int) -> Case:
    """The "tau" aim (``aimed``): a threshold equal to a confidence of the first decision below
    the largest (or tied with it). One time in two, "tau-rounding": at T > 0 (the position
    committed a step early draws another token, so the output shows it) and in bf16 where the
    decision is in float64 (nothing rounds there), tau just below a confidence of a row in the
    output that rounds onto it in ``D``, where the decision with tau rounded differs."""
    rounding = pick % 2
    if rounding:
        case = with_kwargs(case, temperature=case.kwargs["temperature"] or 1.0)
    first = first_decision(case, where=True)
    if rounding and first is not None and first[0].dtype(first[1]) == torch.float64:
        case = with_kwargs(case, precision="bfloat16")
        first = first_decision(case, where=True)
    if first is None:
        return case
    rule, rows, c, masked, noise, _ = first
    values = sorted(v for v in set(c.tolist()) if 0 < v < 1)
    candidates = values[:-1] or values  # at the largest: the fallback, unless it is tied
    if not candidates:
        return case
    at = pick // 2 % len(candidates)
    if rounding:  # the first candidate from ``at`` on whose rounding shows in the decision
        shown = torch.as_tensor(shown_rows(case, masked, noise))
        D = rule.dtype(rows)
        for v in candidates[at:] + candidates[:at]:
            below = rounding_onto(v, D)
            if below is not None and bool(shown[c == v].any()) and splits(rule, c, below, D):
                return reached(case, "tau-rounding", threshold=below)
    return reached(case, "tau", threshold=candidates[at])


def splits(rule: DecisionRule, c: torch.Tensor, tau: float, D: torch.dtype) -> bool:
    """Whether the rule's decision over confidences ``c`` (M,) differs at threshold ``tau`` as
    given and at tau rounded to ``D`` (as torch compares a ``D`` tensor with a Python float)."""
    rounded = float(torch.tensor(tau, dtype=torch.float64).to(D))
    exact, other = (dataclasses.replace(rule, threshold=t).chosen(c).tolist() for t in (tau, rounded))
    return exact != other


TOP_P_ONE_T = tuple(k / 20 for k in range(5, 61))  # the temperatures top-p-one tries: 0.25 to 3 by 0.05


def top_p_one_aimed(case: Case, pick: int) -> Case:
    """The "top-p-one" aim (``aimed``; SDAR and Dream): top_p = 1 in float32 on spread weights
    (``INIT_RANGES``' largest), where the running sum of a row's probabilities rounds above 1
    before its last entries: SDAR applies top-p at 1 (those entries dropped, the rest
    renormalised), Dream skips it (docs/spec.md sections 2, 2.3). Of ``TOP_P_ONE_T`` (from one
    ``pick`` chooses), the first temperature at which a row of the first decision in the output
    draws another token, or has another confidence, under the other family's reading
    (``other_top_p_one``; the first decision's logits do not depend on T): the threshold below
    every confidence where a token differs (it shows), else at the lower of the row's two
    confidences (one reading commits the row a step early, where it draws another token)."""
    spread = {"initializer_range": max(INIT_RANGES)} if case.checkpoint is None else {}
    case = dataclasses.replace(case, config=dataclasses.replace(case.config, **spread))
    own = OWN_FILTERED[case.family]
    case = with_kwargs(case, top_k=None, top_p=1.0, threshold=None, confidence=own, precision="float32", stop_ids=None)
    case = with_kwargs(case, temperature=case.kwargs["temperature"] or 1.0)
    first = first_decision(case, where=True)
    if first is None:
        return case
    rule, rows, _, masked, noise, step = first
    shown = torch.as_tensor(shown_rows(case, masked, noise))
    at = pick % len(TOP_P_ONE_T)
    for T in TOP_P_ONE_T[at:] + TOP_P_ONE_T[:at]:
        ruled = dataclasses.replace(rule, temperature=T)
        (x, c), (other_x, other_c) = other_top_p_one(ruled, rows, masked, noise, step)
        if bool(((x != other_x) & shown).any()):
            return reached(case, "top-p-one", temperature=T, threshold=float(c[c > 0].min()) / 2)
        for i in torch.nonzero((c != other_c) & shown)[:, 0].tolist():
            tau = min(float(c[i]), float(other_c[i]))
            exact, other = (dataclasses.replace(rule, threshold=tau).chosen(v).tolist() for v in (c, other_c))
            if 0 < tau < 1 and exact != other:
                return reached(case, "top-p-one", temperature=T, threshold=tau)
    return case


def other_top_p_one(rule: DecisionRule, rows: torch.Tensor, masked, noise, step: int) -> tuple:
    """((tokens, confidences), the same under the other reading of top_p = 1), (M,) each, of the
    first decision's ``rows`` (M, V): SDAR's rule with top-p skipped at 1, Dream's with it
    applied (``filter_top_k_top_p``'s formula, which is Dream's at p < 1)."""
    family = RULES[rule.family]
    z = rule.scaled(rows)
    z = z if rule.family == "sdar" else filter_top_k_top_p(z, None, 1.0)
    p = torch.softmax(z, -1)
    other_x = rule.sample(family.score(rule, z, p), masked, noise, step)
    return rule.drawn(rows, masked, noise, step), (other_x, family.measure(rule, rows, p, other_x))


def rounding_onto(c: float, dtype: torch.dtype) -> float | None:
    """A threshold just below ``c`` (a value of ``dtype``) that ``dtype`` rounds to ``c`` (through
    float32, as torch converts a Python float): just above the midpoint between ``c`` and the
    value of ``dtype`` below it. ``c > tau`` exactly (docs/spec.md section 2) is True there; with
    tau rounded to the confidences' dtype first (a ``D`` tensor compared with the Python float in
    torch) it is False. None in float64 (nothing rounds)."""
    if dtype == torch.float64:
        return None
    t = torch.tensor([c], dtype=dtype)
    if dtype == torch.bfloat16:  # the bf16 below: one step down in its 16 bits
        prev = float((t.float().view(torch.int32) - (1 << 16)).view(torch.float32))
    else:
        prev = float(torch.nextafter(t, torch.zeros_like(t)))
    mid = (prev + c) / 2  # exact in float64; in float32 too below float32 (torch rounds through it)
    tau = float(np.nextafter(np.float32(mid), np.float32(c))) if dtype != torch.float32 else float(np.nextafter(mid, c))
    return tau if prev < tau < c and not bool((t > tau).item()) else None


def with_kwargs(case: Case, **kw) -> Case:
    """``case`` with ``kw`` set (``greedy``: LLaDA2's top-k / top-p dropped at T = 0)."""
    return greedy(dataclasses.replace(case, kwargs={**case.kwargs, **kw}))


def reached(case: Case, aim: str, **kw) -> Case:
    """``case`` with ``kw`` set, at the boundary ``aim`` (``Case.aim``: what the coverage reports)."""
    return greedy(dataclasses.replace(case, aim=aim, kwargs={**case.kwargs, **kw}))


def greedy(case: Case) -> Case:
    """``case``, but a LLaDA2 case at T = 0 without top-k / top-p: it refuses them there (its
    greedy branch reads the whole vocabulary; docs/spec.md section 2.4)."""
    if case.family != "llada2" or case.kwargs.get("temperature"):
        return case
    return dataclasses.replace(case, kwargs={**case.kwargs, "top_k": None, "top_p": None})


OWN_FILTERED = {"sdar": "filtered", "dream": "maskgit_plus", "llada2": "filtered"}  # a confidence the filter shows in


def as_family(case: Case, family: str, families=FAMILIES) -> Case:
    """A toy ``case`` as one of ``family`` (where ``families`` holds it; else ``case`` itself, and
    a checkpoint's always): the same sizes, vocabulary, MASK, weights seed, block length, served
    dtype and request (a canvas family's prompt at most one block), the family's default
    confidence (and routing), no top-k / top-p for LLaDA (LLaDA2 at T = 0), no fused store for SDAR."""
    if family == case.family or family not in families or case.checkpoint is not None:
        return case
    c, B = case.config.to_dict(), case.block_size
    llada = "d_model" in c  # LLaDA's names, or Qwen's (SDAR's and Dream's)
    names = ("d_model", "n_layers", "n_heads", "n_kv_heads", "weight_tying", "init_std") if llada else QWEN_SIZES
    sizes = dict(zip(("hidden", "layers", "heads", "kv", "tied", "init"), (c[n] for n in names)))
    cfg = tiny_config(family, c["vocab_size"], c["mask_token_id"], B, **sizes)
    served = {k: v for k, v in case.config.extra.items() if k == "torch_dtype"}
    kw = {k: v for k, v in case.kwargs.items() if k not in ("block_length", "fused_store")}
    kw.update(fused_store=False) if family == "sdar" else None
    kw.update(block_length=B) if family not in BLOCK_CAUSAL else None
    kw.update(confidence=RULES[family].confidences[0])
    kw.update(top_k=None, top_p=None) if family == "llada" else None
    prompt = case.prompt if family in BLOCK_CAUSAL else case.prompt[:B]
    config = dataclasses.replace(cfg, extra=served)
    return greedy(dataclasses.replace(case, family=family, config=config, kwargs=kw, prompt=prompt))


QWEN_SIZES = (
    "hidden_size",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "tie_word_embeddings",
    "initializer_range",
)


def near_tie(case: Case) -> Case:
    """``case`` with near-tie weights (``NEAR_TIE_INIT``)."""
    init = "init_std" if case.family == "llada" else "initializer_range"
    return dataclasses.replace(case, config=dataclasses.replace(case.config, **{init: NEAR_TIE_INIT}))


def filter_aimed(case: Case, aim: str, pick: int) -> Case:
    """The "top-k" and "top-p" aims (``aimed``): the filter's boundary in rows ``r`` of the first
    decision. Two cases in three show a draw (``shown_draw``): T > 0 (top-p: T >= 0.5, where a
    fast path may differ), a noise seed whose draw in a row of ``r`` is an entry only the
    boundary keeps, and the threshold below every confidence, so that entry is the output's
    token. The third: the threshold at ``r``'s confidence under the exact filter (a filter that
    keeps fewer entries raises it over the threshold, and the row commits a step early), also
    where no draw shows."""
    own = OWN_FILTERED[case.family]  # the filter shows in the confidence
    case = with_kwargs(case, top_k=None, top_p=None, threshold=None, confidence=own)
    draw = pick % 3 != 0  # two in three: a draw shows the boundary's entry
    T = case.kwargs["temperature"] or (1.0 if case.family == "llada2" else 0.0)  # LLaDA2 filters at T > 0 only
    if aim == "top-k":  # mostly T > 0: a row committed a step early draws another token (at T = 0, the same argmax)
        case = with_kwargs(near_tie(case), precision="bfloat16", temperature=T or (1.0 if draw else 0.0))
    elif draw and T < FAST_T[0]:
        case = with_kwargs(case, temperature=FAST_T[pick // 3 % len(FAST_T)])
    first = first_decision(case, where=True)
    if first is None:
        return case
    rule, rows, _, masked, noise, _ = first
    ranked = torch.sort(rule.scaled(rows), dim=-1, descending=True, stable=True).values  # (M, V) in D
    if aim == "top-k":  # the k-th entry tied with the (k + 1)-th, the smallest such k mostly
        tied = torch.nonzero((ranked[:, :-1] == ranked[:, 1:]) & torch.isfinite(ranked[:, 1:]))  # (n, 2)
        out = torch.as_tensor(shown_rows(case, masked, noise))[tied[:, 0]]  # in the output: a draw can show
        tied = tied[out] if draw and bool(out.any()) else tied
        if len(tied) == 0:
            return case
        ks = sorted({int(j) + 1 for j in tied[:, 1]})
        k = ks[0] if pick % 4 else ks[pick % len(ks)]  # mostly the smallest: dropping a tie shows most
        r, boundary, kept = tied[tied[:, 1] == k - 1][:, 0].tolist(), {"top_k": k}, k  # the rows tied at k
    else:  # the smallest top-entry mass below 1 (of a row in the output): its row keeps the second entry
        masses = torch.softmax(ranked, -1)[:, 0].double()  # (M,) in D, as the filter sums it
        inside = (masses > 0) & (masses < 1) & (torch.as_tensor(shown_rows(case, masked, noise)) | (not draw))
        masses = masses.masked_fill(~inside, 2.0)
        r = int(masses.argmin())
        if masses[r] >= 1:
            return case
        r, boundary, kept = [r], {"top_p": float(masses[r])}, 1
    case = with_kwargs(case, **boundary)
    shown = shown_draw(case, aim, r, kept, pick) if draw and case.kwargs["temperature"] > 0 else None
    if shown is not None:
        return shown
    first = first_decision(case)
    if first is None:
        return case
    c = first[2]  # a row other than the fallback's: its raised confidence shows as a commit of its own
    tau = float(c[next((i for i in r if i != int(c.argmax())), r[0])])
    return reached(case, aim, threshold=tau) if 0 < tau < 1 else case


FAST_T = (0.5, 1.0, 2.0)  # the top-p aim's temperatures for a drawn T below 0.5: a fast path above 0.5 shows


def shown_draw(case: Case, aim: str, rows: list, kept: int, pick: int) -> Case | None:
    """``case`` (T > 0, its filter at a boundary) with a noise seed (of ``DRAW_SEEDS`` tried)
    whose first decision draws, in one of ``rows`` in the output (the lowest position such), an
    entry of rank ``kept`` or more in that row's descending order (ties: the lower id first):
    one that only the boundary keeps (every tie with the k-th; the entry after a mass of
    exactly p). The threshold goes below every confidence, so every position commits at once
    and that token is the output's: a filter that drops the entry cannot draw it. None when no
    row of ``rows`` is in the output or no seed draws such an entry."""
    rule, logits, _, masked, noise, step = first_decision(case, where=True)
    rows = [i for i in sorted(rows) if shown_rows(case, masked, noise)[i]]
    if not rows:
        return None
    order = torch.sort(rule.scaled(logits[rows]), dim=-1, descending=True, stable=True).indices  # (R, V)

    def lowest(seed: int) -> int:  # the first of rows whose drawn token is of rank >= kept; len(rows) if none
        x = rule.drawn(logits, masked, type(noise)(seed, noise.block, *noise.shape), step)[0][rows]
        beyond = (order == x[:, None]).int().argmax(-1) >= kept
        return int(beyond.int().argmax()) if bool(beyond.any()) else len(rows)

    best, seed = len(rows), None
    for i in range(DRAW_SEEDS):  # the first seed at the lowest row: stop at the first that reaches rows[0]
        s, at = noise_seed(pick, i), lowest(noise_seed(pick, i))
        best, seed = (at, s) if at < best else (best, seed)
        if best == 0:
            break
    if seed is None:
        return None
    case = with_kwargs(case, seed=seed)
    c = [v for v in first_decision(case)[2].tolist() if v > 0]
    return reached(case, aim, threshold=min(c) / 2) if c and min(c) / 2 < 1 else None


def stop_aimed(case: Case, pick: int) -> Case:
    """A stop id among the first tokens exact decoding emits (``aimed``'s "stop")."""
    kw = {k: v for k, v in case.kwargs.items() if k not in ("budget", "depth", "stop_ids")}
    tokens = generate(case.model(), case.prompt, case.max_new_tokens, **kw).tokens
    if not tokens:
        return case
    tail = len(case.prompt) % case.block_size if case.family in BLOCK_CAUSAL else 0  # prompt tokens in the first block
    first_block = max(1, min(len(tokens) - 1, case.block_size - tail))
    stop = tokens[pick % first_block]
    return reached(case, "stop", stop_ids=stop if pick // first_block % 2 else [stop])  # one id, or a list
