"""``spotref.generate``: argument checks, then exact or SPOT decoding (docs/spec.md section 7).

Every argument is checked before the first forward; a bad one raises ``ValueError`` naming it.
"""

from __future__ import annotations

import time
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
from spotref.names import MODEL_DRAFTERS, auto_budget, recorder, resolve_core, resolve_drafter, resolve_model
from spotref.spec.checks import check_int, check_state
from spotref.spec.core import LIMIT
from spotref.spec.decode import FAMILIES, Block, Result, Stats, decode, family, fill_block
from spotref.spec.rules import DTYPES, PRECISIONS, SERVED, DecisionRule, for_family, precision_name


def generate(
    model,
    prompt_ids,
    max_new_tokens: int,
    temperature: float = 0.0,
    seed: int = 0,
    threshold: float | None = None,
    drafter=None,
    budget: int = 16,
    depth: int = 8,
    top_k: int | None = None,
    top_p: float | None = None,
    stop_ids=None,
    fused_store: bool = False,
    core=None,
    confidence: str | None = None,
    precision: str | None = None,
    width: int | None = None,
    block_length: int | None = None,
    trace: bool = False,
) -> Result:
    """Decode ``max_new_tokens`` after ``prompt_ids``; identical tokens whatever the drafter.

    model: an ``SDARModel`` or a whole-canvas model (LLaDA, Dream), an object with either contract
    (docs/spec.md 1.1), a bundled ``Target`` or its name. drafter: None (exact decoding), a name
    ("confidence", "confidence-chain", "calibrated", "spot"), a trained order model
    (``spotref.load_drafter``) or any ``drafter(view) -> Draft``; budget: the node budget N or
    "auto"; depth: the depth cap D. precision: the rule's dtype (None: the model's serving
    precision); width: None (each row of a pass alone) or W >= budget (every pass one forward of W
    rows: exact decoding at width W); confidence: None, the family's own; block_length: None, the
    model's own (``check_canvas``); trace: True records every round into ``Result.trace`` (docs/spec.md
    8). Each argument (docs/spec.md 7) is checked before the first forward (``ValueError`` naming it).
    """
    model = resolve_model(model, lambda m: check_decode(m, prompt_ids, max_new_tokens, block_length))
    prompt, block_length = check_decode(model, prompt_ids, max_new_tokens, block_length)
    stops = check_stop_ids(stop_ids, model.config.vocab_size, model.mask_id)
    check_flags(fused_store=fused_store, trace=trace)
    spec = Speculator.for_model(
        model,
        temperature=temperature,
        seed=seed,
        threshold=threshold,
        top_k=top_k,
        top_p=top_p,
        drafter=drafter,
        budget=budget,
        depth=depth,
        confidence=confidence,
        core=core,
        precision=precision,
        width=width,
        block_length=block_length,
    )
    rec, stats, t = recorder() if trace else None, Stats(), time.perf_counter()
    fill = partial(fill_block, partial(spec.block, recorder=rec))
    tokens = decode(model, prompt, int(max_new_tokens), stops, fill, stats, bool(fused_store), block_length)
    stats = {**vars(stats), "rounds": len(stats.accepted), "wall_s": time.perf_counter() - t}
    return Result(tokens, stats["passes"], stats, traced(rec, spec, tokens, stats, len(prompt), max_new_tokens, stops))


def check_decode(model, prompt_ids, max_new_tokens, block_length) -> tuple:
    """(prompt ids, block length), checked against ``model``'s vocabulary and positions
    (``check_canvas``); ``model``: a model, or a target's ``Shape`` (``resolve_model``)."""
    prompt = check_prompt(prompt_ids, model.config.vocab_size, model.mask_id)
    check_length(len(prompt), max_new_tokens, model.config.max_position_embeddings)
    return prompt, check_canvas(model, len(prompt), max_new_tokens, block_length)


def check_flags(**flags) -> None:
    """Each flag True or False (a numpy bool too), else ``ValueError`` naming it."""
    for name, value in flags.items():
        if not isinstance(value, (bool, np.bool_)):
            raise ValueError(f"{name} must be True or False, got {value!r}")


def traced(rec, spec, tokens, stats: dict, prompt_length: int, max_new_tokens: int, stops) -> object:
    """The ``Trace`` of a decode ``rec`` recorded (None without a recorder)."""
    if rec is None:
        return None
    meta = dict(prompt_length=prompt_length, max_new_tokens=int(max_new_tokens), stop_ids=sorted(stops))
    return rec.trace(spec, tokens=tokens, passes=stats["passes"], **meta)


class Speculator:
    """The SPOT round without the model (docs/spec.md section 7, the step API): for decoders that own
    their model, cache and batching. ``block(index, state)`` gives a ``spotref.spec.decode.Block``:

        spec = Speculator(vocab_size=V, block_size=B, mask_id=M, drafter="confidence")
        blk = spec.block(index, state)          # state: int64 (B,), MASK where uncommitted
                                                # index: the block's (SDAR: absolute; canvas: k)
        while not blk.done:
            rows = blk.propose()                # int64 (R, B): run them through your model
            blk.accept(logits)                  # float (R, B, V) for those rows, same order

    Arguments as ``spotref.generate``'s, each checked here (``precision=None``: the model's
    serving precision with ``for_model``, else "auto", the logits' dtype). ``drafter=None`` is exact decoding
    (one row per pass). A model's own drafters (``"spot"``, ``"calibrated"``) and
    ``budget="auto"`` need the model: ``Speculator.for_model(model, ...)``. With ``width=W`` every
    ``propose`` returns W rows and ``blk.one_forward`` is True: run them as one forward
    (``model.denoise(cache, rows, one_forward=blk.one_forward)``; a canvas family: one call of the
    rows' canvases). ``family``: the decision rule's (``rules.for_family``; ``for_model`` takes
    the model's).
    """

    def __init__(
        self,
        vocab_size: int,
        block_size: int,
        mask_id: int,
        temperature: float = 0.0,
        seed: int = 0,
        threshold: float | None = None,
        top_k: int | None = None,
        top_p: float | None = None,
        drafter="confidence",
        budget=16,
        depth: int = 8,
        confidence: str | None = None,
        core=None,
        model=None,
        precision: str | None = None,
        width: int | None = None,
        family: str = "sdar",
    ):
        check_int("vocab_size", vocab_size, 2)  # 1 would hold only MASK: nothing to commit
        check_int("block_size", block_size, 1)
        check_int("mask_id", mask_id, 0, vocab_size - 1)
        self.family = family
        self.rule = decision_rule(
            int(vocab_size),
            int(block_size),
            int(mask_id),
            temperature,
            seed,
            threshold,
            top_k,
            top_p,
            confidence,
            serving_precision(model) if precision is None else precision,
            family,
        )
        check_budget(budget)
        self.depth = check_int("depth", depth, 0, LIMIT - 1)
        self.width = check_width(width, 1 if drafter is None else budget)
        self.core = resolve_core(core)
        self.drafter = None if drafter is None else speculator_drafter(drafter, model, self.rule.block_size)
        self.drafter, self.budget = self.resolve_budget(budget, model)

    def resolve_budget(self, budget, model) -> tuple:
        """(drafter, N): an int budget as given; ``"auto"``: the cost model's N (<= width) for the
        model and this rule on this machine, each round's tree cut to the nodes worth their
        verify time."""
        if budget != "auto":
            return self.drafter, int(budget)
        if self.drafter is None:
            return None, 1
        if model is None:
            raise ValueError('budget="auto" measures the model on this machine: use Speculator.for_model(model, ...)')
        return auto_budget(model, self.drafter, self.depth, self.rule, self.width)

    @classmethod
    def for_model(cls, model, block_length: int | None = None, **kwargs) -> "Speculator":
        """A speculator for ``model`` (an SDARModel, a whole-canvas model, a bundled Target or a
        target name), its family's rule, in blocks of ``block_length`` (``check_block_length``;
        a target's name: checked from its metadata before its weights load)."""
        model = resolve_model(model, lambda m: check_block_length(m, block_length))
        B = check_block_length(model, block_length)
        return cls(model.config.vocab_size, B, model.mask_id, model=model, family=family(model), **kwargs)

    def block(self, index: int, state, stats: Stats | None = None, recorder=None) -> Block:
        """A ``Block`` for block ``index`` starting at ``state``: the index the noise is keyed by
        (SDAR: absolute, from position 0; LLaDA, Dream: k, the generated block, from 0).
        ``recorder``: None, or a ``spotref.trace.record.Recorder`` that records the block's
        rounds (``recorder.trace(spec)`` gives the ``Trace``; docs/spec.md section 8)."""
        check_int("index", index, 0, LIMIT - 1)  # the noise key holds 64 bits; positions less
        rule = self.rule
        state = check_state("state", as_numpy(state), rule.mask_id, rule.vocab_size, rule.block_size)
        if recorder is not None and not all(callable(getattr(recorder, m, None)) for m in RECORDER):
            raise TypeError(f"recorder must have the methods {', '.join(RECORDER)} (spotref.trace.record.Recorder)")
        block = Block(
            rule,
            self.drafter,
            self.core,
            self.budget,
            self.depth,
            int(index),
            np.asarray(state, np.int64),
            stats,
            self.width,
            recorder,
        )
        if recorder is not None:
            recorder.opened(block)
        return block


RECORDER = ("opened", "proposed", "accepted")  # what a Block's recorder is told


def speculator_drafter(drafter, model, block_size: int):
    """The resolved drafter for blocks of ``block_size`` (one trained for another is refused);
    a model's own drafter asked for without the model is named."""
    if model is None and isinstance(drafter, str) and drafter in MODEL_DRAFTERS:
        raise ValueError(
            f"drafter {drafter!r} is the target's own trained drafter: use "
            f"Speculator.for_model(model, ...) or pass spotref.load_drafter(...)"
        )
    return resolve_drafter(drafter, model, block_size)


def decision_rule(
    V: int,
    B: int,
    mask_id: int,
    temperature,
    seed,
    threshold,
    top_k,
    top_p,
    confidence,
    precision="auto",
    family="sdar",
) -> DecisionRule:
    """The checked decision parameters of one generation (each bad one named), as the family's
    rule (``rules.for_family``; a confidence of None: the family's own)."""
    check_temperature(temperature)
    check_int("seed", seed, 0, 2**64 - 1)
    if threshold is not None:
        check_real("threshold", threshold, lo=0.0, hi=1.0, open_lo=True, open_hi=True)
    if top_k is not None:
        check_int("top_k", top_k, 1)
    if top_p is not None:
        check_real("top_p", top_p, lo=0.0, hi=1.0, open_lo=True)
    if not isinstance(precision, str) or precision not in PRECISIONS:
        raise ValueError(f"precision must be None or one of {', '.join(PRECISIONS)}, got {precision!r}")
    if family not in FAMILIES:
        raise ValueError(f"family must be one of {', '.join(FAMILIES)}, got {family!r}")
    params = dict(mask_id=mask_id, vocab_size=V, block_size=B, temperature=float(temperature), seed=int(seed))
    params.update(top_k=top_k, top_p=top_p, threshold=None if threshold is None else float(threshold))
    params.update(precision=precision, **({} if confidence is None else {"confidence": confidence}))
    return for_family(family, **params)  # a confidence of None: the family's default


def check_block_length(model, block_length) -> int:
    """The block length of a decode: None, the model's own (``model.block_size``). An SDAR model
    decodes in the block size it was trained with; a canvas family in any bl from 1 to its
    positions (``check_canvas``: the whole canvas must fit)."""
    if block_length is None:
        return model.block_size
    bl = check_int("block_length", block_length, 1, model.config.max_position_embeddings)
    if family(model) == "sdar" and bl != model.block_size:
        raise ValueError(
            f"block_length {bl}: an SDAR model decodes in the block size it was trained with "
            f"({model.block_size}); leave block_length None"
        )
    return bl


def check_canvas(model, prompt_len: int, max_new_tokens: int, block_length) -> int:
    """The checked block length (``check_block_length``), for which a canvas family's canvas, the
    prompt then max_new_tokens rounded up to whole blocks, fits the model's positions (SDAR's
    blocks: ``check_length``)."""
    bl = check_block_length(model, block_length)
    G = -(-max_new_tokens // bl) * bl
    if family(model) != "sdar" and prompt_len + G > model.config.max_position_embeddings:
        raise ValueError(
            f"the canvas, prompt_ids ({prompt_len}) + max_new_tokens ({max_new_tokens}) rounded up to "
            f"blocks of {bl} ({G}), exceeds the model's max_position_embeddings "
            f"({model.config.max_position_embeddings})"
        )
    return bl


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


def serving_precision(model) -> str:
    """The precision a model is served in: its config's ``decision_precision`` (spotref writes it
    where the stored dtype differs), else ``torch_dtype`` (or ``dtype``; SDAR-8B's config.json
    says bfloat16, the bundled gsm targets carry it too), when it names one of
    ``spotref.spec.rules.DTYPES`` (or an alias of one: "bf16"); else "auto" (the logits' dtype). None
    without a model: "auto"."""
    extra = getattr(getattr(model, "config", None), "extra", None) or {}
    dtype = precision_name(next((extra[k] for k in SERVED if extra.get(k)), None))  # "bf16": bfloat16
    return dtype if dtype in DTYPES else "auto"
