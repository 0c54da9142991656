"""The conformance suite's cases: tiny models of each family and generation requests, drawn by
Hypothesis and aimed at the boundaries where implementations differ (``spotref.conformance``)."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import numbers
import os
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from unittest import mock

import numpy as np
import torch

from spotref.api import DecodeOptions, generate, serving_precision
from spotref.checkpoint import from_pretrained
from spotref.configs import DreamConfig, LLaDAConfig, SDARConfig
from spotref.spec.checks import check_int
from spotref.spec.decode import FAMILIES
from spotref.spec.decode import family as model_family
from spotref.spec.dream import DreamModel
from spotref.spec.llada import LLaDAModel
from spotref.spec.rules import FAMILIES as RULES
from spotref.spec.rules import PRECISIONS, DecisionRule
from spotref.spec.sdar import SDARModel

BLOCK_SIZES = (1, 2, 3, 4, 5, 7, 8, 9, 16, 32)
INIT_RANGES = (0.02, 0.3, 1.0)  # 1e-4 gives near-tie models: every flipped last bit shows
MAX_TEMPERATURE = 3.0  # T = 0, or continuous in [0.05, MAX_TEMPERATURE]
MAX_BUDGET = 256
DRAFTERS = ("confidence", "confidence-chain", "random", "oracle", "wrong", "near-miss", "spot")
MODELS = {"sdar": SDARModel, "llada": LLaDAModel, "dream": DreamModel}
CONFIGS = {"sdar": SDARConfig, "llada": LLaDAConfig, "dream": DreamConfig}
MODEL_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
VOCAB = (8, 300)  # the toy models' vocabulary sizes, drawn in [8, 300] (``cases(vocab=...)``)
MAX_VOCAB = 2**20  # the largest vocabulary a toy model may be given


@dataclass
class Case:
    """One conformance example: a tiny model of ``family`` and one generation request."""

    config: SDARConfig | LLaDAConfig | DreamConfig
    weights_seed: int
    prompt: list
    max_new_tokens: int
    drafter: str
    kwargs: dict = field(default_factory=dict)  # generate's options (``DecodeOptions``) but ``NOT_CASE``: the
    # ``OPTIONS`` and some of ``OPTIONS_MAY`` (stop_ids, width, fused_store; block_length: a canvas family's)
    family: str = "sdar"
    batch_sensitive: bool = False  # the model's logits depend on a forward's row count (``BatchSensitive``)
    dtype: str | None = None  # the model's dtype (``MODEL_DTYPES``); None: float32, a checkpoint's its own
    checkpoint: str | None = None  # a checkpoint directory: the model ``from_pretrained`` reads (config: its own)
    aim: str | None = None  # the boundary ``aimed`` set (one of ``AIMS``), None: none was set

    def model(self) -> SDARModel | LLaDAModel | DreamModel:
        if self.checkpoint is not None:
            model = pretrained(self.checkpoint, self.dtype)
        else:
            with torch.random.fork_rng():
                torch.manual_seed(self.weights_seed)
                model = MODELS[self.family](self.config).eval()
            model = model.to(MODEL_DTYPES[self.dtype or "float32"])
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
    corner (no token asked, blocks of 1, budget 1, depth 0). aims: 10 cases in 11 aimed at a
    boundary (``aimed``: a threshold equal to a confidence, ties at the k-th logit, top-p at a
    cumulative mass, ties between positions, a stop id that occurs, every position at once, a close
    race of a Gumbel-max draw).
    batch: the batch-invariance check's cases: always a verify width, and a ``BatchSensitive``
    model.

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
        prompt = draw(st.lists(token, max_size=3 * B if family == "sdar" else B))  # a canvas: every pass runs it
        kwargs = draw(options(family, V, B, token, corner, batch, decided_in(cfg, dtype_name)))
        weights, n = draw(st.integers(0, 2**16)), draw(st.integers(0 if corner else 2, 2 * B + 5))
        case = Case(cfg, weights, prompt, n, draw(st.sampled_from(tuple(drafters))), kwargs, family, batch)
        case = dataclasses.replace(case, dtype=model_dtype, checkpoint=model)
        aim = draw(st.sampled_from(AIMS)) if aims else None
        return aimed(case, aim, draw(st.integers(0, 2**16)), "sdar" in families) if aim else case

    return case()


SERVED_DTYPES = (None, None, "bfloat16", "float16", "float32")  # a toy config's torch_dtype (None: none)


def toy_configs(family: str, B: int, vocab: tuple, init_ranges, served):
    """Hypothesis strategy of a toy model's config of ``family`` in blocks of ``B``, its
    vocabulary in ``vocab`` (lo, hi), ``served`` its config's torch_dtype (None: none)."""
    st = hypothesis().strategies

    @st.composite
    def config(draw):
        V = draw(st.integers(*vocab))
        mask_id = draw(st.integers(0, V - 1))
        cfg = tiny_config(family, V, mask_id, B, **draw(model_sizes(init_ranges)))
        return cfg if served is None else dataclasses.replace(cfg, extra={**cfg.extra, "torch_dtype": served})

    return config()


def options(family: str, V: int, B: int, token, corner: bool, batch: bool, decided: tuple):
    """Hypothesis strategy of a case's ``generate`` keywords (``Case.kwargs``); ``decided``: the
    dtype ``precision=None`` decides in, "auto" the model's (``decided_in``)."""
    st = hypothesis().strategies

    @st.composite
    def kwargs(draw):
        precision = draw(st.sampled_from((*PRECISIONS, None)))
        d = decided[0] if precision is None else decided[1] if precision == "auto" else precision
        confidences = [c for c in RULES[family].confidences if (c, d) != ("entropy", "float16")]
        filters = family != "llada"  # LLaDA's rule draws from the whole vocabulary
        kw = dict(
            temperature=draw(
                st.just(0.0)
                | st.integers(1, 60).map(lambda i: i / 20)  # every 0.05
                | st.floats(0.05, MAX_TEMPERATURE)
            ),
            seed=draw(st.integers(0, 2**64 - 1) | st.integers(2**32, 2**64 - 1)),  # half of them past 32 bits
            threshold=draw(st.none() | st.floats(0.01, 0.99)),
            top_k=draw(st.none() | st.integers(1, V)) if filters else None,
            top_p=draw(st.none() | st.floats(0.05, 1.0)) if filters else None,
            confidence=draw(st.sampled_from(confidences)),
            precision=precision,
            budget=draw(st.integers(1 if corner else 2, MAX_BUDGET)),
            depth=draw(st.integers(0 if corner else 1, B)),
            stop_ids=draw(st.lists(token, min_size=1, max_size=2) | token),  # a list, or one id
        )
        widths = st.integers(0, 8).map(lambda e: kw["budget"] + e)
        kw["width"] = draw(widths if batch else st.none() | widths)
        if family == "sdar":
            kw["fused_store"] = draw(st.booleans())
        else:
            kw["block_length"] = B
        return kw

    return kwargs()


def decided_in(config, dtype: str) -> tuple:
    """(the dtype ``precision=None`` decides in, the one ``"auto"`` does) for a model of
    ``config`` whose weights are ``dtype``: its serving precision (docs/spec.md section 2),
    "auto" being the logits', the model's dtype."""
    served = serving_precision(SimpleNamespace(config=config))
    return (dtype if served == "auto" else served), dtype


def weights_dtype(model) -> str:
    """The name of ``model``'s weights' dtype ("float32", "bfloat16", ...)."""
    return str(next(model.parameters()).dtype).removeprefix("torch.")


def checkpoint_block_sizes(model, block_sizes) -> list:
    """The block lengths a checkpoint's cases decode in: SDAR's own; a canvas family's, those of
    ``block_sizes`` whose canvases (prompt <= B, 2B + 5 tokens rounded up) fit its positions."""
    if model_family(model) == "sdar":
        return [model.block_size]
    cfg = model.config
    positions = getattr(cfg, "max_sequence_length", None) or getattr(cfg, "max_position_embeddings", None)
    fit = [b for b in block_sizes if positions is None or 4 * b + 8 <= positions]
    if not fit:
        raise ValueError(f"model: no block length of {tuple(block_sizes)} fits its {positions} positions")
    return fit


@functools.lru_cache(maxsize=2)
def pretrained(path: str, dtype: str | None):
    """``spotref.from_pretrained(path)`` in ``dtype`` (None: the checkpoint's own), loaded once per
    process: a decoder under test must not change it."""
    return from_pretrained(path, dtype=MODEL_DTYPES[dtype] if dtype else None)


def checked_knobs(vocab, dtype, model, block_sizes, drafters=DRAFTERS, families=FAMILIES) -> tuple:
    """``cases``' knobs as it uses them: (vocab (lo, hi), dtypes (a tuple of names, or (None,):
    a checkpoint's own), model (an absolute directory, or None), the block sizes drawn from (a
    checkpoint's: ``checkpoint_block_sizes``)); ``ValueError`` naming a bad one:
    a vocabulary outside [3, ``MAX_VOCAB``] (or given with a checkpoint, which has its own), a
    dtype not in ``MODEL_DTYPES``, a model directory that is not a checkpoint, drafters not of
    ``DRAFTERS``, families not of ``FAMILIES`` (or narrowed with a checkpoint, which has its own)."""
    if isinstance(families, str) or not families or not set(families) <= set(FAMILIES):
        raise ValueError(f"families must be a non-empty sequence of {FAMILIES}, got {families!r}")
    if model is not None and tuple(families) != tuple(FAMILIES):
        raise ValueError("families: a checkpoint (model) has its own family; give one or the other")
    if vocab is not None and model is not None:
        raise ValueError("vocab: a checkpoint (model) has its own vocabulary; give one or the other")
    lo, hi = vocab_range(VOCAB if vocab is None else vocab)
    names = [dtype] if dtype is None or isinstance(dtype, str) else list(dtype)
    if not names or not all(n is None or n in MODEL_DTYPES for n in names) or (None in names and len(names) > 1):
        raise ValueError(f"dtype must be one of {tuple(MODEL_DTYPES)} or a sequence of them, got {dtype!r}")
    path, sizes = None, block_sizes
    if model is not None:
        if not isinstance(model, (str, os.PathLike)) or not Path(model).is_dir():
            raise ValueError(f"model must be a checkpoint directory, got {model!r}")
        path = str(Path(model).resolve())
        sizes = checkpoint_block_sizes(pretrained(path, names[0]), block_sizes)  # it loads, and some length fits
    if isinstance(drafters, str) or not drafters or not set(drafters) <= set(DRAFTERS):
        raise ValueError(f"drafters must be a non-empty sequence of {DRAFTERS}, got {drafters!r}")
    return (lo, hi), tuple(n or "float32" for n in names) if model is None else tuple(names), path, sizes


def vocab_range(vocab) -> tuple:
    """``vocab``, an int or (lo, hi), as (lo, hi) in [3, ``MAX_VOCAB``]; ``ValueError`` otherwise."""
    pair = (
        (vocab, vocab)
        if isinstance(vocab, numbers.Integral)
        else tuple(vocab)
        if isinstance(vocab, (tuple, list))
        else ()
    )
    if len(pair) != 2 or not all(isinstance(v, numbers.Integral) and not isinstance(v, bool) for v in pair):
        raise ValueError(f"vocab must be an int or a (lo, hi) pair of ints, got {vocab!r}")
    lo, hi = (check_int("vocab", v, 3, MAX_VOCAB) for v in pair)
    if lo > hi:
        raise ValueError(f"vocab: the range ({lo}, {hi}) is empty (lo > hi)")
    return lo, hi


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


AIMS = (None, "tau", "tau", "top-k", "top-k", "top-p", "top-p", "ties", "stop", "all", "draw")  # None drawn ~1 in 3
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


DRAW_SEEDS = 256  # the seeds the "draw" aim tries


def draw_aimed(case: Case, pick: int) -> Case:
    """The "draw" aim (``aimed``; not LLaDA): T > 0 in bf16, the noise seed (of ``DRAW_SEEDS``
    tried) whose first decision holds the closest race of a Gumbel-max draw (the smallest gap
    between the two best of ``log p + g`` in a row), and the threshold below every confidence,
    so that row's token shows: a decoder that takes ``log p`` in another precision than float64
    (or from the unrounded softmax) can flip it."""
    case = with_kwargs(case, precision="bfloat16", temperature=case.kwargs["temperature"] or 1.0, threshold=None)
    first = first_decision(case, where=True)
    if first is None:
        return case
    rule, rows, _, masked, noise, step = first
    scores, B, V = rule.scores(rows), *noise.shape  # log p (M, V) float64: the first decision's rows, whatever the seed
    pos, shown = torch.as_tensor(masked), torch.as_tensor(shown_rows(case, masked, noise))

    def gap(seed: int) -> float:  # between the two best of a row whose log p differ (else no precision shows)
        top = (scores + type(noise)(seed, noise.block, B, V)(step)[pos]).topk(2, -1)
        differ = scores.gather(1, top.indices[:, :1]) != scores.gather(1, top.indices[:, 1:])
        return float((top.values[:, 0] - top.values[:, 1]).masked_fill(~(differ[:, 0] & shown), torch.inf).min())

    seed = min((noise_seed(pick, i) for i in range(DRAW_SEEDS)), key=gap)
    case = with_kwargs(case, seed=seed)
    c = [v for v in first_decision(case)[2].tolist() if v > 0]
    return reached(case, "draw", threshold=min(c) / 2) if c and min(c) / 2 < 1 else case


def noise_seed(pick: int, i: int) -> int:
    """The ``i``-th noise seed an aim tries for ``pick``: spread over the whole 64-bit range."""
    return (pick * DRAW_SEEDS + i) * 0x9E3779B97F4A7C15 % 2**64


def shown_rows(case: Case, masked, noise) -> np.ndarray:
    """(M,) bool: which of the first decision's masked positions ``masked`` (in the block of
    ``noise``) are in the output, not cut by ``max_new_tokens``."""
    offset = len(case.prompt) if case.family == "sdar" else 0
    return noise.block * noise.shape[0] + np.asarray(masked) - offset < case.max_new_tokens


def aimed(case: Case, aim: str, pick: int, sdar: bool = True) -> Case:
    """``case`` aimed at a boundary where implementations differ, set from exact decoding's
    numbers (``pick`` chooses among the candidates), its ``aim`` set to the boundary reached; a
    case without the boundary is returned as it is (``aim`` None).

    - "tau": a threshold equal to a confidence of the first decision (below the largest, or
      tied with it): ``c > tau``, not ``>=``; one time in two ("tau-rounding") just below it,
      where rounding to the confidences' dtype gives it: ``c > tau`` exactly, not with tau
      rounded to that dtype (as torch compares a ``D`` tensor with a Python float);
    - "top-k" (not LLaDA): near-tie weights in bf16, mostly at T > 0 (T = 1 for T = 0 two times
      in three), k where a row's
      k-th logit ties with the next (every tie kept; mostly the smallest such k), and the
      threshold at the confidence of such a row other than the fallback's: a decoder that drops
      a tie raises it over the threshold, and the row commits a step early with another draw;
    - "top-p" (not LLaDA): p equal to the smallest top-entry mass of a row (the mass before its
      second entry: ``<= p`` keeps it) and the threshold at that row's confidence;
    - "ties": an empty prompt (identical masked rows: the positions' confidences tie, and ties
      go to the lowest position);
    - "stop": a stop id that exact decoding emits in its first block (the cut after it, the
      blocks after its block never decoded);
    - "all": near-tie weights in bf16 (at T = 0 two times in three) and a threshold below every
      confidence: the first decision commits every masked position, so each row's token shows
      (ties at the top go to the lowest id);
    - "draw" (not LLaDA): a Gumbel-max race at T > 0 in bf16 (``draw_aimed``).
    LLaDA has no filter: its filter aims run on an SDAR model of the same sizes (``as_sdar``)
    where ``sdar`` (SDAR is among the families drawn), else (and a LLaDA checkpoint's) they are
    "tau"'s; its draw aim is "tau"'s."""
    if aim == "ties":
        return reached(dataclasses.replace(case, prompt=[]), "ties", threshold=None)
    if aim == "stop":
        return stop_aimed(case, pick)
    if aim == "all":  # at T = 0 two times in three: the argmax's ties show
        T = 0.0 if pick % 3 else case.kwargs["temperature"]
        case = with_kwargs(near_tie(case), precision="bfloat16", temperature=T)
        first = first_decision(case)
        c = [] if first is None else [v for v in first[2].tolist() if v > 0]
        return reached(case, "all", threshold=min(c) / 2) if c else case
    if aim in ("top-k", "top-p") and (case.family != "llada" or (sdar and case.checkpoint is None)):
        return filter_aimed(as_sdar(case) if case.family == "llada" else case, aim, pick)
    if aim == "draw" and case.family != "llada":
        return draw_aimed(case, pick)
    rounding = pick % 2  # one in two: tau just below a confidence, rounding onto it in D; at T > 0, where
    if rounding:  # the position committed a step early draws another token, so the output shows it
        case = with_kwargs(case, temperature=case.kwargs["temperature"] or 1.0)
    first = first_decision(case)
    values = [] if first is None else sorted(v for v in set(first[2].tolist()) if 0 < v < 1)
    candidates = values[:-1] or values  # at the largest: the fallback, unless it is tied
    if not candidates:
        return case
    c = candidates[pick // 2 % len(candidates)]
    below = rounding_onto(c, first[0].dtype(first[1])) if rounding else None
    return reached(case, "tau", threshold=c) if below is None else reached(case, "tau-rounding", threshold=below)


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
    return dataclasses.replace(case, kwargs={**case.kwargs, **kw})


def reached(case: Case, aim: str, **kw) -> Case:
    """``case`` with ``kw`` set, at the boundary ``aim`` (``Case.aim``: what the coverage reports)."""
    return dataclasses.replace(case, aim=aim, kwargs={**case.kwargs, **kw})


def as_sdar(case: Case) -> Case:
    """A toy LLaDA ``case`` as an SDAR one: the same sizes, vocabulary, MASK, weights seed, block
    length, served dtype and request, SDAR's default confidence, no fused store."""
    c = case.config
    sizes = dict(hidden=c.d_model, layers=c.n_layers, heads=c.n_heads, kv=c.n_kv_heads, tied=c.weight_tying)
    cfg = tiny_config("sdar", c.vocab_size, c.mask_token_id, case.block_size, init=c.init_std, **sizes)
    served = {k: v for k, v in c.extra.items() if k == "torch_dtype"}
    kw = {k: v for k, v in case.kwargs.items() if k != "block_length"}
    kw.update(fused_store=False, confidence="filtered")
    return dataclasses.replace(case, family="sdar", config=dataclasses.replace(cfg, extra=served), kwargs=kw)


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
    own = {"sdar": "filtered", "dream": "maskgit_plus"}[case.family]  # the filter shows in the confidence
    case = with_kwargs(case, top_k=None, top_p=None, threshold=None, confidence=own)
    draw = pick % 3 != 0  # two in three: a draw shows the boundary's entry
    T = case.kwargs["temperature"]
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
    tail = len(case.prompt) % case.block_size if case.family == "sdar" else 0  # prompt tokens in the first block
    first_block = max(1, min(len(tokens) - 1, case.block_size - tail))
    stop = tokens[pick % first_block]
    return reached(case, "stop", stop_ids=stop if pick // first_block % 2 else [stop])  # one id, or a list


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
    qwen = dict(  # the fields SDAR's and Dream's configs share, Qwen's names
        vocab_size=V,
        hidden_size=hidden,
        intermediate_size=32,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv,
        tie_word_embeddings=tied,
        initializer_range=init,
        mask_token_id=mask_id,
    )
    if family == "dream":  # no pad, eos or bos id: a tiny vocabulary holds none of Dream's
        return DreamConfig(**qwen, max_position_embeddings=4 * B + 8, pad_token_id=None)
    return SDARConfig(**qwen, head_dim=8, block_size=B)


# --- a case as JSON (the replay file) ---------------------------------------------------------

OPTIONS = ("temperature", "seed", "threshold", "top_k", "top_p", "confidence", "precision", "budget", "depth")
NOT_CASE = ("drafter", "core", "trace")  # generate's options no case holds (its drafter: ``Case.drafter``)
OPTIONS_MAY = tuple(DecodeOptions().kwargs(leave_out=OPTIONS + NOT_CASE))  # a case's other keywords


def case_to_dict(case: Case) -> dict:
    """``case`` as plain JSON values: the model (a toy model's family, config, weights seed and
    dtype, or a checkpoint directory), the prompt, the length, the drafter and the options."""
    model = {"family": case.family, "dtype": case.dtype, "batch_sensitive": case.batch_sensitive}
    if case.checkpoint is not None:
        model["checkpoint"] = case.checkpoint
    else:
        model.update(config=case.config.to_dict(), weights_seed=case.weights_seed)
    options = {k: list(v) if isinstance(v, (list, tuple)) else v for k, v in case.kwargs.items()}
    return dict(
        model=model,
        prompt=[int(t) for t in case.prompt],
        max_new_tokens=case.max_new_tokens,
        drafter=case.drafter,
        options=options,
    )


def case_from_dict(d: dict, where: str = "case") -> Case:
    """The case ``case_to_dict`` wrote; ``ValueError`` naming the first field that is missing or
    of the wrong kind (``where``: the name of ``d`` in the message). The options' values are
    checked as ``spotref.generate`` checks them, when the case runs."""
    model, options = field_of(d, "model", dict, where), field_of(d, "options", dict, where)
    family = field_of(model, "family", str, f"{where}.model")
    if family not in FAMILIES:
        raise ValueError(f"{where}.model.family must be one of {FAMILIES}, got {family!r}")
    dtype = model.get("dtype")
    if dtype is not None and dtype not in MODEL_DTYPES:
        raise ValueError(f"{where}.model.dtype must be null or one of {tuple(MODEL_DTYPES)}, got {dtype!r}")
    drafter = field_of(d, "drafter", str, where)
    if drafter not in DRAFTERS:
        raise ValueError(f"{where}.drafter must be one of {DRAFTERS}, got {drafter!r}")
    unknown = sorted(set(options) - set(OPTIONS) - set(OPTIONS_MAY))
    missing = [k for k in OPTIONS if k not in options]
    if unknown or missing:
        raise ValueError(f"{where}.options: unknown {unknown}, missing {missing}")
    prompt = field_of(d, "prompt", list, where)
    if not all(isinstance(t, int) and not isinstance(t, bool) for t in prompt):
        raise ValueError(f"{where}.prompt must be a list of token ids, got {prompt!r}")
    n = check_int(f"{where}.max_new_tokens", d.get("max_new_tokens"), 0)
    batch = bool(field_of(model, "batch_sensitive", bool, f"{where}.model"))
    case = Case(None, 0, prompt, n, drafter, dict(options), family, batch, dtype)
    if "checkpoint" in model:
        path = field_of(model, "checkpoint", str, f"{where}.model")
        if not Path(path).is_dir():
            raise ValueError(f"{where}.model.checkpoint: no checkpoint directory {path!r}")
        return dataclasses.replace(case, config=pretrained(path, dtype).config, checkpoint=path)
    config = field_of(model, "config", dict, f"{where}.model")
    try:
        config = CONFIGS[family].from_dict(config)
    except (TypeError, ValueError) as e:
        raise ValueError(f"{where}.model.config: {e}") from None
    weights = check_int(f"{where}.model.weights_seed", model.get("weights_seed"), 0, 2**64 - 1)
    return dataclasses.replace(case, config=config, weights_seed=weights)


def field_of(d: dict, name: str, kind: type, where: str):
    """``d[name]``, a ``kind``; ``ValueError`` naming ``where.name`` otherwise."""
    value = d.get(name) if isinstance(d, dict) else None
    if not isinstance(value, kind):
        raise ValueError(f"{where}.{name} must be a JSON {kind.__name__}, got {value!r}")
    return value
