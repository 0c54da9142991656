"""``spotref.generate``: argument checks, then exact or SPOT decoding (docs/spec.md section 7).

The decode parameters are one object, ``DecodeOptions``: each default is written there once, and
``DecodeOptions.check`` checks every one against the model before the first forward; a bad one
raises ``ValueError`` naming it (an ``OptionError``, whose ``option`` is the field).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, fields, replace
from functools import partial

import numpy as np

from spotref.checks import (  # noqa: F401  (re-exported: docs/reliability.md)
    MAX_TEMPERATURE,
    MIN_TEMPERATURE,
    as_numpy,
    check_length,
    check_prompt,
    check_real,
    check_stop_ids,
    check_temperature,
)
from spotref.names import auto_budget, check_drafter, recorder, resolve_core, resolve_drafter, resolve_model
from spotref.spec.checks import check_int, check_state
from spotref.spec.core import LIMIT
from spotref.spec.decode import (
    BLOCK_CAUSAL,
    CANVAS_FAMILIES,
    FAMILIES,
    Block,
    Result,
    Stats,
    decode,
    family,
    fill_block,
)
from spotref.spec.rules import (
    DTYPES,
    ENTROPY_FP16,
    PRECISIONS,
    SERVED,
    DecisionRule,
    for_family,
    precision_name,
)


class OptionError(ValueError):
    """A bad decode option: the ``ValueError`` whose message names it, ``option`` its field
    (``spotref generate`` names the flag by it)."""

    def __init__(self, option: str, message: str):
        super().__init__(message)
        self.option = option


def named(option: str, check, *args):
    """``check(*args)``, a ``ValueError`` it raises an ``OptionError`` of ``option``."""
    try:
        return check(*args)
    except ValueError as e:
        raise OptionError(option, str(e)) from None


@dataclass(frozen=True)
class DecodeOptions:
    """The decode parameters of one generation, each default written here once: ``generate``'s
    keywords in its order (docs/spec.md section 7 says what each means). ``Speculator`` takes all
    but the decode loop's (``LOOP``); ``spotref generate`` and the conformance kit build one.
    ``check(model)`` checks every one against a model's shape."""

    temperature: float = 0.0
    seed: int = 0
    threshold: float | None = None  # None: the one-position rule
    drafter: object = None  # None: exact decoding; a name, a trained order model or a drafter(view) -> Draft
    budget: int | str = 16  # the node budget N, or "auto"
    depth: int = 8
    top_k: int | None = None
    top_p: float | None = None
    stop_ids: object = None  # None, one id or a 1-D sequence of ids
    fused_store: bool = False
    lookahead: bool = False  # a block ending on a drafted state carries the next block's first pass
    core: object = None  # None (the active core), "py", "c" or a core module
    confidence: str | None = None  # None: the family's own
    precision: str | None = None  # None: the model's serving precision
    width: int | None = None  # None: each row of a pass alone
    block_length: int | None = None  # None: the model's own
    trace: bool = False

    @classmethod
    def of(cls, values: dict) -> DecodeOptions:
        """The options among ``values`` (a call's ``locals()``, a command line's options), the
        others at their defaults."""
        return cls(**{f.name: values[f.name] for f in fields(cls) if f.name in values})

    def kwargs(self, leave_out: tuple = ()) -> dict:
        """The options as ``generate``'s keywords, in its order, but those in ``leave_out`` (a
        drafter object stays itself: no copy)."""
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name not in leave_out}

    def check(self, model=None) -> DecodeOptions:
        """Every option checked against the vocabulary, block size, MASK id, positions and family of
        ``model`` (a model, a bundled target's metadata-only ``spotref.load.targets.Shape``, a
        ``Speculator``'s ``Sizes``; None: what needs none); a bad one raises ``OptionError`` (a
        ``ValueError``) naming it. Returns them as decoded: with a model, ``block_length`` its own
        where None, ``stop_ids`` a list, ``precision`` the one decided in; ints as ints."""
        checked = self if model is None else self.against(model)
        for flag in ("fused_store", "lookahead", "trace"):  # True or False (a numpy bool too)
            if not isinstance(getattr(self, flag), (bool, np.bool_)):
                raise OptionError(flag, f"{flag} must be True or False, got {getattr(self, flag)!r}")
        if model is not None and self.fused_store and family(model) != "sdar":
            why = f"fused_store: a {family(model)} model has no cache to store a block into (SDAR only)"
            raise OptionError("fused_store", why)
        checked.rule(model)  # temperature, seed, threshold, top_k, top_p, precision, confidence
        budget = named("budget", check_budget, self.budget)
        depth = named("depth", check_int, "depth", self.depth, 0, LIMIT - 1)
        width = named("width", check_width, self.width, 1 if self.drafter is None else budget)
        named("core", resolve_core, self.core)
        if self.drafter is not None:
            named("drafter", check_drafter, self.drafter)
        return replace(checked, budget=budget, depth=depth, width=width)

    def against(self, model) -> DecodeOptions:
        """What ``check`` reads of ``model`` first: the block length (``check_block_length``), the
        stop ids (in its vocabulary, never MASK) and the precision None stands for."""
        bl = named("block_length", check_block_length, model, self.block_length)
        stops = named("stop_ids", check_stop_ids, self.stop_ids, model.config.vocab_size, model.mask_id)
        precision = serving_precision(model) if self.precision is None else self.precision
        return replace(self, block_length=bl, stop_ids=stops, precision=precision)

    def rule(self, model=None) -> DecisionRule | None:
        """The decision rule these options give for ``model`` (its family's, ``rules.for_family``,
        in blocks of ``block_length``, else its own), each parameter checked; the family's own
        limits (LLaDA's T and filters, the confidences) by its rule. None without a model."""
        T = named("temperature", check_temperature, self.temperature)
        given = dict(temperature=T, seed=named("seed", check_int, "seed", self.seed, 0, 2**64 - 1))
        if self.threshold is not None:
            given["threshold"] = named("threshold", check_real, "threshold", self.threshold, 0.0, 1.0, True, True)
        if self.top_k is not None:
            given["top_k"] = named("top_k", check_int, "top_k", self.top_k, 1)
        if self.top_p is not None:
            given["top_p"] = named("top_p", check_real, "top_p", self.top_p, 0.0, 1.0, True)
        precision = serving_precision(model) if self.precision is None else self.precision
        if not isinstance(precision, str) or precision not in PRECISIONS:
            why = f"precision must be None or one of {', '.join(PRECISIONS)}, got {precision!r}"
            raise OptionError("precision", why)
        if model is None:
            return None
        name = family(model)
        if name not in FAMILIES:
            raise ValueError(f"family must be one of {', '.join(FAMILIES)}, got {name!r}")
        sizes = dict(mask_id=model.mask_id, vocab_size=model.config.vocab_size, precision=precision)
        sizes["block_size"], given["confidence"] = self.block_length or model.block_size, self.confidence
        for option in ("confidence", "temperature", "top_k", "top_p"):  # each refused by the family's rule, named
            at = {"temperature": T} if option in ("top_k", "top_p") else {}  # a filter at T (LLaDA2 takes none at 0)
            named(option, partial(for_family, name, **sizes, **at, **{option: given.get(option)}))
        rule = for_family(name, **sizes, **given)  # a confidence of None: the family's default
        if rule.confidence == "entropy" and precision == "auto" and weights_dtype(model) == DTYPES["float16"]:
            raise OptionError("confidence", ENTROPY_FP16)  # "auto" decides in the logits' dtype: the model's
        return rule


DEFAULTS = DecodeOptions()  # every signature below takes its defaults from here
LOOP = ("stop_ids", "fused_store", "lookahead", "trace")  # what generate's decode loop reads, not a Speculator


def generate(
    model,
    prompt_ids,
    max_new_tokens: int,
    temperature: float = DEFAULTS.temperature,
    seed: int = DEFAULTS.seed,
    threshold: float | None = DEFAULTS.threshold,
    drafter=DEFAULTS.drafter,
    budget: int = DEFAULTS.budget,
    depth: int = DEFAULTS.depth,
    top_k: int | None = DEFAULTS.top_k,
    top_p: float | None = DEFAULTS.top_p,
    stop_ids=DEFAULTS.stop_ids,
    fused_store: bool = DEFAULTS.fused_store,
    lookahead: bool = DEFAULTS.lookahead,
    core=DEFAULTS.core,
    confidence: str | None = DEFAULTS.confidence,
    precision: str | None = DEFAULTS.precision,
    width: int | None = DEFAULTS.width,
    block_length: int | None = DEFAULTS.block_length,
    trace: bool = DEFAULTS.trace,
) -> Result:
    """Decode ``max_new_tokens`` after ``prompt_ids``; identical tokens whatever the drafter.

    model: an ``SDARModel`` or a whole-canvas model (LLaDA, Dream), an object with either contract
    (docs/spec.md 1.1), a bundled ``Target`` or its name. drafter: None (exact decoding), a name
    ("confidence", "confidence-chain", "calibrated", "spot"), a trained order model
    (``spotref.load_drafter``) or any ``drafter(view) -> Draft``; budget: the node budget N or
    "auto"; depth: the depth cap D. precision: the rule's dtype (None: the model's serving
    precision); width: None (each row of a pass alone; with ``budget="auto"``, the cost model picks
    rows alone or a width, reported in ``stats["width"]``) or W >= budget (every pass one forward
    of W rows: exact decoding at width W, the decode SPOT at W is identical to); confidence: None,
    the family's own; block_length: None, the model's own (``check_canvas``); lookahead: docs/spec.md
    3 (a block ending on a drafted row carries the next block's first pass); trace: True records
    every round into ``Result.trace`` (docs/spec.md 8). The keywords are a ``DecodeOptions``,
    checked before the first forward (``ValueError`` naming one).
    """
    options = DecodeOptions.of(locals())
    model = resolve_model(model, lambda m: check_decode(m, prompt_ids, max_new_tokens, options))
    prompt, options = check_decode(model, prompt_ids, max_new_tokens, options)
    spec = Speculator.for_model(model, **options.kwargs(leave_out=LOOP))
    rec, stats, t = recorder() if options.trace else None, Stats(), time.perf_counter()
    fill = partial(fill_block, partial(spec.block, recorder=rec))
    n, stops = int(max_new_tokens), options.stop_ids
    loop = (bool(options.fused_store), options.block_length, bool(options.lookahead))  # decode's options
    tokens = decode(model, prompt, n, stops, fill, stats, *loop)
    measured = {k: v for k, v in vars(stats).items() if not k.startswith("_")}
    stats = {**measured, "rounds": len(stats.accepted), "wall_s": time.perf_counter() - t}
    stats.update(budget=spec.budget, width=spec.width)  # as decoded: budget="auto" chooses both
    return Result(tokens, stats["passes"], stats, traced(rec, spec, tokens, stats, len(prompt), max_new_tokens, stops))


def check_decode(model, prompt_ids, max_new_tokens, options: DecodeOptions) -> tuple:
    """(prompt ids, ``options`` checked against ``model``: ``DecodeOptions.check``): the prompt
    and ``max_new_tokens`` against its vocabulary and positions, a canvas family's canvas too
    (``check_canvas``); ``model``: a model, or a target's ``Shape`` (``resolve_model``)."""
    prompt = check_prompt(prompt_ids, model.config.vocab_size, model.mask_id)
    max_new_tokens = check_length(len(prompt), max_new_tokens, model.config.max_position_embeddings)
    options = options.check(model)
    check_canvas(model, len(prompt), max_new_tokens, options.block_length)
    return prompt, options


def traced(rec, spec, tokens, stats: dict, prompt_length: int, max_new_tokens: int, stops) -> object:
    """The ``Trace`` of a decode ``rec`` recorded (None without a recorder)."""
    if rec is None:
        return None
    meta = dict(prompt_length=prompt_length, max_new_tokens=int(max_new_tokens), stop_ids=sorted(stops))
    return rec.trace(spec, tokens=tokens, passes=stats["passes"], **meta)


@dataclass
class Sizes:
    """A model as a ``Speculator`` is told it (``vocab_size``, ``block_size``, ``mask_id``,
    ``family``), each checked: what ``DecodeOptions.check`` reads of a model, as a bundled
    target's ``Shape`` gives it, but the positions (its blocks are ``block_size`` long)."""

    vocab_size: int
    block_size: int
    mask_id: int
    family: str = "sdar"

    def __post_init__(self):
        self.vocab_size = check_int("vocab_size", self.vocab_size, 2)  # 1 would hold only MASK: nothing to commit
        self.block_size = check_int("block_size", self.block_size, 1)
        self.mask_id = check_int("mask_id", self.mask_id, 0, self.vocab_size - 1)

    @property
    def config(self) -> Sizes:
        """Itself, read as a model's config (``config.vocab_size``; no ``extra``, no served precision)."""
        return self


class Speculator:
    """The SPOT round without the model (docs/spec.md section 7, the step API): for decoders that own
    their model, cache and batching. ``block(index, state)`` gives a ``spotref.spec.decode.Block``:

        spec = Speculator(vocab_size=V, block_size=B, mask_id=M, drafter="confidence")
        blk = spec.block(index, state)          # state: int64 (B,), MASK where uncommitted
                                                # index: the block's (SDAR: absolute; canvas: k)
        while not blk.done:
            rows = blk.propose()                # int64 (R, B): run them through your model
            blk.accept(logits)                  # float (R, B, V) for those rows, same order

    Arguments as ``spotref.generate``'s (a ``DecodeOptions``: ``options``, as checked), but the
    drafter, "confidence" by default (``precision=None``: the model's serving precision with
    ``for_model``, else "auto", the logits' dtype). ``drafter=None`` is exact decoding
    (one row per pass). A model's own drafters (``"spot"``, ``"calibrated"``) and
    ``budget="auto"`` need the model: ``Speculator.for_model(model, ...)``. With ``width=W`` every
    ``propose`` returns W rows and ``blk.one_forward`` is True: run them as one forward
    (``model.denoise(cache, rows, one_forward=blk.one_forward)``; a canvas family: one call of the
    rows' canvases). ``family``: the decision rule's (``rules.for_family``; ``for_model`` takes
    the model's).

    ``drafter``: the drafter asked for, resolved; ``round_drafter``: the one each round calls (the
    blocks'): ``drafter`` for an int budget; for ``budget="auto"`` the choice this Speculator measured
    (``resolve_budget``), N = ``budget``, at ``width`` (without a width asked for, auto chooses it:
    None, rows alone, or W; the blocks are then identical to exact decoding at that width). To
    reuse that measurement, decode with ``drafter=spec.round_drafter, budget=spec.budget,
    width=spec.width``.
    """

    def __init__(
        self,
        vocab_size: int,
        block_size: int,
        mask_id: int,
        temperature: float = DEFAULTS.temperature,
        seed: int = DEFAULTS.seed,
        threshold: float | None = DEFAULTS.threshold,
        top_k: int | None = DEFAULTS.top_k,
        top_p: float | None = DEFAULTS.top_p,
        drafter="confidence",  # the step API speculates by default; generate decodes exactly
        budget=DEFAULTS.budget,
        depth: int = DEFAULTS.depth,
        confidence: str | None = DEFAULTS.confidence,
        core=DEFAULTS.core,
        model=None,
        precision: str | None = DEFAULTS.precision,
        width: int | None = DEFAULTS.width,
        family: str = "sdar",
    ):
        options = DecodeOptions.of(locals())
        sizes = Sizes(vocab_size, block_size, mask_id, family)
        if precision is None:
            options = replace(options, precision=serving_precision(model))
        self.options = options.check(sizes)
        self.family, self.rule = family, self.options.rule(sizes)
        self.depth, self.width, self.core = self.options.depth, self.options.width, resolve_core(core)
        self.drafter = None if drafter is None else resolve_drafter(drafter, model, self.rule.block_size)
        self.round_drafter, self.budget, self.width = self.resolve_budget(self.options.budget, model)

    def resolve_budget(self, budget, model) -> tuple:
        """(round drafter, N, width): an int budget: ``drafter`` at N and the width asked for;
        ``"auto"``: the cost model's choice for the model and this rule on this machine, measured
        now and kept by no one else (``names.auto_budget``): the drafter or its variant, each round's
        tree cut to the nodes worth their verify time (``drafters.budget.RoundBudget``), N <= the
        width asked for, or without one the width chosen too (None: rows alone)."""
        if budget != "auto":
            return self.drafter, int(budget), self.width
        if self.drafter is None:
            return None, 1, self.width
        if model is None:
            raise ValueError('budget="auto" measures the model on this machine: use Speculator.for_model(model, ...)')
        return auto_budget(model, self.drafter, self.depth, self.rule, self.width)

    @classmethod
    def for_model(cls, model, block_length: int | None = None, **kwargs) -> "Speculator":
        """A speculator for ``model`` (an SDARModel, a whole-canvas model, a bundled Target or a
        target name), its family's rule, in blocks of ``block_length`` (``check_block_length``;
        a target's name: the options checked from its metadata before its weights load)."""
        model = resolve_model(model, lambda m: DecodeOptions.of({**kwargs, "block_length": block_length}).check(m))
        B = named("block_length", check_block_length, model, block_length)
        return cls(model.config.vocab_size, B, model.mask_id, model=model, family=family(model), **kwargs)

    def block(self, index: int, state, stats: Stats | None = None, recorder=None) -> Block:
        """A ``Block`` for block ``index`` starting at ``state``: the index the noise is keyed by
        (SDAR: absolute, from position 0; LLaDA, Dream: k, the generated block, from 0).
        ``stats``: None, or a ``Stats`` the block's rounds are counted and timed in.
        ``recorder``: None, or a ``spotref.trace.record.Recorder`` that records the block's
        rounds (``recorder.trace(spec)`` gives the ``Trace``; docs/spec.md section 8). Both are
        the block's observers (``Block``)."""
        check_int("index", index, 0, LIMIT - 1)  # the noise key holds 64 bits; positions less
        rule = self.rule
        state = check_state("state", as_numpy(state), rule.mask_id, rule.vocab_size, rule.block_size)
        if recorder is not None and not all(callable(getattr(recorder, m, None)) for m in RECORDER):
            raise TypeError(f"recorder must have the methods {', '.join(RECORDER)} (spotref.trace.record.Recorder)")
        tree = (self.round_drafter, self.core, self.budget, self.depth)  # what each round drafts and builds
        observers = tuple(o for o in (stats, recorder) if o is not None)
        return Block(rule, *tree, int(index), np.asarray(state, np.int64), self.width, observers)


RECORDER = ("opened", "proposed", "walked")  # what a Block tells its observers


def check_block_length(model, block_length) -> int:
    """The block length of a decode: None, the model's own (``model.block_size``). An SDAR model
    decodes in the block size it was trained with; a canvas family in any bl from 1 to its
    positions (``check_canvas``: the whole canvas must fit)."""
    if block_length is None:
        return model.block_size
    bl = check_int("block_length", block_length, 1, model.config.max_position_embeddings)
    if family(model) in BLOCK_CAUSAL and bl != model.block_size:
        raise ValueError(
            f"block_length {bl}: a {family(model)} model decodes in the block size it was trained with "
            f"({model.block_size}); leave block_length None"
        )
    return bl


def check_canvas(model, prompt_len: int, max_new_tokens: int, bl: int) -> None:
    """A canvas family's canvas, the prompt then max_new_tokens rounded up to whole blocks of
    ``bl`` (checked: ``check_block_length``), fits the model's positions (SDAR's blocks:
    ``check_length``)."""
    G = -(-max_new_tokens // bl) * bl
    if family(model) in CANVAS_FAMILIES and prompt_len + G > model.config.max_position_embeddings:
        raise ValueError(
            f"the canvas, prompt_ids ({prompt_len}) + max_new_tokens ({max_new_tokens}) rounded up to "
            f"blocks of {bl} ({G}), exceeds the model's max_position_embeddings "
            f"({model.config.max_position_embeddings})"
        )


MAX_ROWS = 4096  # the most states one verify pass holds: 4,096 x B tokens (131,072 at B = 32)


def check_budget(budget) -> int | str:
    """The node budget N, checked: an int in [1, MAX_ROWS] (a tree of N states is verified in
    one pass), or "auto"."""
    return budget if budget == "auto" else check_int("budget", budget, 1, MAX_ROWS)


def check_width(width, budget) -> int | None:
    """The verify width, checked: None (each row of a pass alone) or W, the rows of every pass
    (the tree's states padded to W by the ``Block``, one forward), so the node budget N <= W
    (exact decoding: N = 1; ``budget="auto"`` picks N <= W itself). The one check of a width."""
    if width is None:
        return None
    width = check_int("width", width, 1, MAX_ROWS)
    if budget != "auto" and budget > width:
        raise ValueError(
            f"budget {budget} exceeds the verify width {width}: a pass verifies at most width states (budget <= width)"
        )
    return width


def weights_dtype(model):
    """The dtype of ``model``'s first parameter (its logits' dtype), or None where it has none."""
    params = getattr(model, "parameters", None)
    first = next(iter(params()), None) if callable(params) else None
    return None if first is None else first.dtype


def serving_precision(model) -> str:
    """The precision a model is served in: its config's ``decision_precision`` (spotref writes it
    where the stored dtype differs), else ``torch_dtype`` (or ``dtype``; SDAR-8B's config.json
    says bfloat16, the bundled gsm targets carry it too), when it names one of
    ``spotref.spec.rules.DTYPES`` (or an alias of one: "bf16"); else "auto" (the logits' dtype). None
    without a model: "auto"."""
    extra = getattr(getattr(model, "config", None), "extra", None) or {}
    dtype = precision_name(next((extra[k] for k in SERVED if extra.get(k)), None))  # "bf16": bfloat16
    return dtype if dtype in DTYPES else "auto"
