"""``spotref.generate``: argument checks, then exact or SPOT decoding (SPEC section 7).

Every argument is checked before the first forward; a bad one raises ``ValueError`` naming it.
"""
from __future__ import annotations

import math
import numbers
import time
import weakref
from functools import partial

import numpy as np
import torch

import spotref
from spotref.decode import Block, Result, Stats, decode, fill_block
from spotref.drafters.budget import auto_drafter
from spotref.load.drafters import MODEL_DRAFTERS, resolve_drafter
from spotref.load.targets import load_target
from spotref.rules import CONFIDENCES, DecisionRule


def generate(model, prompt_ids, max_new_tokens: int, temperature: float = 0.0, seed: int = 0,
             threshold: float | None = None, drafter=None, budget: int = 16, depth: int = 8,
             top_k: int | None = None, top_p: float | None = None, stop_ids=None,
             fused_store: bool = False, core=None, confidence: str = "filtered") -> Result:
    """Decode ``max_new_tokens`` after ``prompt_ids``; identical tokens whatever the drafter.

    drafter: None (exact decoding), a name ("confidence", "confidence-chain", "calibrated",
    "spot"), a trained order model (``spotref.load_drafter``) or any callable
    ``drafter(view) -> spotref.Draft``. budget: tree node budget N (root included), or "auto"
    (the N that maximises expected commits per second on this machine); depth: depth cap D.
    core: the tree/verification implementation (default: the compiled one when built, see
    ``spotref.EXTENSION``). fused_store: compute each finished
    block's K/V inside the next block's first pass instead of a store pass of its own (identical
    tokens, one pass fewer per block).

    model: an ``SDARModel`` (or any object with its contract: config, block_size, mask_id,
    prefill, denoise, store), a bundled ``Target`` (``spotref.load_target``) or a bundled
    target's name (loaded once per process). stop_ids: None, one token id, or a 1-D sequence,
    numpy array or tensor of ids; ``stop_ids=None`` stops on nothing, even for a Target.
    temperature: 0 (argmax) or in [1e-6, inf): below ``MIN_TEMPERATURE`` ``L / T`` heads for
    float64 overflow (at T = 1e-320 it is inf) and the Gumbel noise (|g| < 37) can only reorder
    logits within 4e-5 of each other, float32 rounding of the logits: use ``temperature=0``.
    seed: an integer in [0, 2**64 - 1] (the noise generator's 64-bit key). core: None, "py",
    "c" or a core module (``spotref.core_module``). confidence: "filtered" (default: the sampled
    token's probability under the top-k / top-p filtered, renormalised distribution, as SDAR's
    generate.py) or "unfiltered" (under softmax(L / T), as lmdeploy and SGLang); the same without
    top-k / top-p. Every argument is checked before the first forward; a bad one raises
    ``ValueError`` naming it.
    """
    model = resolve_model(model)
    prompt = check_prompt(prompt_ids, model.config.vocab_size, model.mask_id)
    check_length(len(prompt), max_new_tokens, model.config.max_position_embeddings)
    stops = check_stop_ids(stop_ids, model.config.vocab_size)
    if not isinstance(fused_store, (bool, np.bool_)):
        raise ValueError(f"fused_store must be True or False, got {fused_store!r}")
    spec = Speculator.for_model(model, temperature=temperature, seed=seed, threshold=threshold,
                                top_k=top_k, top_p=top_p, drafter=drafter, budget=budget,
                                depth=depth, confidence=confidence, core=core)
    stats, t = Stats(), time.perf_counter()
    tokens = decode(model, prompt, int(max_new_tokens), stops, partial(fill_block, spec.block),
                    stats, bool(fused_store))
    wall = time.perf_counter() - t
    return Result(tokens, stats.passes, {**vars(stats), "rounds": len(stats.accepted), "wall_s": wall})


class Speculator:
    """The SPOT round without the model (SPEC section 7, the step API): for decoders that own
    their model, cache and batching. ``block(index, state)`` gives a ``spotref.decode.Block``:

        spec = Speculator(vocab_size=V, block_size=B, mask_id=M, drafter="confidence")
        blk = spec.block(index, state)          # state: int64 (B,), MASK where uncommitted
        while not blk.done:
            rows = blk.propose()                # int64 (R, B): run them through your model
            blk.accept(logits)                  # float (R, B, V) for those rows, same order

    Arguments as ``spotref.generate``'s, each checked here. ``drafter=None`` is exact decoding
    (one row per pass). A model's own drafters (``"spot"``, ``"calibrated"``) and
    ``budget="auto"`` need the model: ``Speculator.for_model(model, ...)``.
    """

    def __init__(self, vocab_size: int, block_size: int, mask_id: int, temperature: float = 0.0,
                 seed: int = 0, threshold: float | None = None, top_k: int | None = None,
                 top_p: float | None = None, drafter="confidence", budget=16, depth: int = 8,
                 confidence: str = "filtered", core=None, model=None):
        check_int("vocab_size", vocab_size, 1)
        check_int("block_size", block_size, 1)
        check_int("mask_id", mask_id, 0, vocab_size - 1)
        self.rule = decision_rule(int(vocab_size), int(block_size), int(mask_id), temperature, seed,
                                  threshold, top_k, top_p, confidence)
        if budget != "auto":
            check_int("budget", budget, 1)
        self.depth = check_int("depth", depth, 0)
        self.core = resolve_core(core)
        self.drafter = None if drafter is None else speculator_drafter(drafter, model)
        self.drafter, self.budget = self.resolve_budget(budget, model)

    def resolve_budget(self, budget, model) -> tuple:
        """(drafter, N): an int budget as given; ``"auto"``: the cost model's N for the model on
        this machine, each round's tree cut to the nodes worth their verify time."""
        if budget != "auto":
            return self.drafter, int(budget)
        if self.drafter is None:
            return None, 1
        if model is None:
            raise ValueError('budget="auto" measures the model on this machine: use Speculator.for_model(model, ...)')
        return auto_budget(model, self.drafter, self.depth, self.rule.temperature)

    @classmethod
    def for_model(cls, model, **kwargs) -> "Speculator":
        """A speculator for ``model`` (an SDARModel, a bundled Target or a target name)."""
        model = resolve_model(model)
        return cls(model.config.vocab_size, model.block_size, model.mask_id, model=model, **kwargs)

    def block(self, index: int, state, stats: Stats | None = None) -> Block:
        """A ``Block`` for block ``index`` (absolute, from position 0) starting at ``state``."""
        check_int("index", index, 0)
        return Block(self.rule, self.drafter, self.core, self.budget, self.depth, int(index),
                     check_state(state, self.rule), stats)


def speculator_drafter(drafter, model):
    """The resolved drafter; a model's own drafter asked for without the model is named."""
    if model is None and isinstance(drafter, str) and drafter in MODEL_DRAFTERS:
        raise ValueError(f"drafter {drafter!r} is the target's own trained drafter: use "
                         f"Speculator.for_model(model, ...) or pass spotref.load_drafter(...)")
    return resolve_drafter(drafter, model)


def check_state(state, rule: DecisionRule) -> np.ndarray:
    """A block state: B ints, each a vocabulary token or MASK -> int64 (B,) (a copy)."""
    if isinstance(state, torch.Tensor):
        state = state.detach().cpu().numpy()
    arr = np.asarray(state)
    if arr.shape != (rule.block_size,) or arr.dtype.kind not in "iu":
        raise ValueError(f"state must be {rule.block_size} integer token ids (int64 [B], MASK "
                         f"{rule.mask_id} where uncommitted), got shape {arr.shape} of {arr.dtype}")
    arr = arr.astype(np.int64)
    bad = (arr < 0) | (arr >= rule.vocab_size)
    if bad.any():
        j = int(np.flatnonzero(bad)[0])
        raise ValueError(f"state[{j}] = {arr[j]} is outside the vocabulary [0, {rule.vocab_size})")
    return arr


def decision_rule(V: int, B: int, mask_id: int, temperature, seed, threshold, top_k, top_p,
                  confidence) -> DecisionRule:
    """The checked decision parameters of one generation (each bad one named)."""
    check_temperature(temperature)
    check_int("seed", seed, 0, 2 ** 64 - 1)
    if threshold is not None:
        check_real("threshold", threshold, lo=0.0, hi=1.0, open_lo=True, open_hi=True)
    if top_k is not None:
        check_int("top_k", top_k, 1)
    if top_p is not None:
        check_real("top_p", top_p, lo=0.0, hi=1.0, open_lo=True)
    if confidence not in CONFIDENCES:
        raise ValueError(f"confidence must be one of {', '.join(CONFIDENCES)}, got {confidence!r}")
    return DecisionRule(mask_id, V, B, float(temperature), int(seed), top_k, top_p,
                        None if threshold is None else float(threshold), confidence)


def check_length(prompt_len: int, max_new_tokens, max_positions: int) -> None:
    check_int("max_new_tokens", max_new_tokens, 0)
    if prompt_len + max_new_tokens > max_positions:
        raise ValueError(f"prompt_ids ({prompt_len}) + max_new_tokens ({max_new_tokens}) exceeds the "
                         f"model's max_position_embeddings ({max_positions})")


_AUTO_BUDGETS = weakref.WeakKeyDictionary()    # model -> {(drafter, depth, T > 0): (drafter, N)}


def auto_budget(model, drafter, depth: int, temperature: float) -> tuple:
    """budget="auto": (the drafter cut per round, the cost model's N) for this model and drafter
    on this machine (measured once per process and model, see ``spotref.drafters.budget``)."""
    known = _AUTO_BUDGETS.setdefault(model, {})
    key = (drafter, depth, temperature > 0)
    if key not in known:
        known[key] = auto_drafter(model, drafter, depth, temperature)
    return known[key]


MIN_TEMPERATURE = 1e-6


def resolve_model(model):
    """An ``SDARModel`` (or a model with its contract), from a model, a ``Target`` or a name."""
    contract = lambda m: all(hasattr(m, a) for a in ("config", "prefill", "denoise", "store"))
    if isinstance(model, str):
        return _named_target(model).model
    if contract(model):
        return model
    if contract(getattr(model, "model", None)) and hasattr(model, "tokenizer"):     # a Target
        return model.model
    raise ValueError(f"model must be an SDARModel, a spotref Target or a bundled target name "
                     f"(spotref.list_targets()), got {type(model).__name__}")


_NAMED: dict = {}


def _named_target(name: str):
    """``spotref.load_target(name)``, loaded once per process (ValueError naming it if unknown)."""
    if name not in _NAMED:
        try:
            _NAMED[name] = load_target(name)
        except ValueError as e:
            raise ValueError(f"model {name!r}: {e}") from None
    return _NAMED[name]


def resolve_core(core):
    """None (the active core), "py", "c" or a core module -> the module."""
    if core is None or isinstance(core, str):
        try:
            return spotref.core_module(core)
        except ImportError:
            raise ImportError("core='c': the compiled core is not built (python setup.py "
                              "build_ext --inplace), or use core='py'") from None
    if not all(callable(getattr(core, f, None)) for f in ("build_tree", "walk")):
        raise ValueError(f"core must be None, 'py', 'c' or a core module (spotref.core_module()), "
                         f"got {core!r}")
    return core


def check_temperature(temperature) -> float:
    T = check_real("temperature", temperature, lo=0.0)
    if 0 < T < MIN_TEMPERATURE:
        raise ValueError(f"temperature {T!r} is below {MIN_TEMPERATURE:g}: L / T heads for float64 "
                         f"overflow and the noise no longer matters; use temperature=0 (argmax)")
    return T


def check_stop_ids(stop_ids, V: int) -> list:
    """None, one id, or a 1-D sequence / numpy array / tensor of ids -> a list of ints."""
    if stop_ids is None:
        return []
    if isinstance(stop_ids, (torch.Tensor, np.ndarray)):
        if stop_ids.ndim > 1:
            raise ValueError(f"stop_ids must be one id or a 1-D sequence of ids, got a "
                             f"{stop_ids.ndim}-D {type(stop_ids).__name__} of shape {tuple(stop_ids.shape)}")
        stop_ids = stop_ids.tolist()
    if isinstance(stop_ids, numbers.Integral) and not isinstance(stop_ids, bool):
        stop_ids = [stop_ids]                   # one id, as Hugging Face's eos_token_id
    if isinstance(stop_ids, (str, bytes, dict)) or not hasattr(stop_ids, "__iter__"):
        raise ValueError(f"stop_ids must be one id or a 1-D sequence of ids, got {stop_ids!r}")
    return [check_int("stop_ids", s, 0, V - 1) for s in stop_ids]


def check_prompt(prompt_ids, V: int, mask_id: int) -> list:
    if isinstance(prompt_ids, (set, frozenset, dict)):
        raise ValueError(f"prompt_ids must be an ordered 1-D sequence of token ids, got a "
                         f"{type(prompt_ids).__name__} (unordered)")
    if isinstance(prompt_ids, torch.Tensor):
        prompt_ids = prompt_ids.tolist() if prompt_ids.ndim == 1 else None
    elif isinstance(prompt_ids, np.ndarray):
        prompt_ids = prompt_ids.tolist() if prompt_ids.ndim == 1 else None
    if prompt_ids is None or isinstance(prompt_ids, (str, bytes)) or not hasattr(prompt_ids, "__iter__"):
        raise ValueError("prompt_ids must be a 1-D sequence of token ids")
    prompt = list(prompt_ids)
    for i, t in enumerate(prompt):
        if isinstance(t, bool) or not isinstance(t, numbers.Integral):
            raise ValueError(f"prompt_ids[{i}] = {t!r} is not an integer token id")
        if not 0 <= t < V:
            raise ValueError(f"prompt_ids[{i}] = {t} is outside the vocabulary [0, {V})")
        if t == mask_id:
            raise ValueError(f"prompt_ids[{i}] is the MASK token {mask_id}: a prompt cannot hold MASK")
    return [int(t) for t in prompt]


def check_int(name, value, lo=None, hi=None):
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise ValueError(f"{name} must be an integer, got {value!r}")
    if (lo is not None and value < lo) or (hi is not None and value > hi):
        raise ValueError(f"{name} must be in [{lo}, {'inf' if hi is None else hi}], got {value}")
    return int(value)


def check_real(name, value, lo=None, hi=None, open_lo=False, open_hi=False):
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or math.isnan(value) or math.isinf(value):
        raise ValueError(f"{name} must be a finite number, got {value!r}")
    bad_lo = lo is not None and (value <= lo if open_lo else value < lo)
    bad_hi = hi is not None and (value >= hi if open_hi else value > hi)
    if bad_lo or bad_hi:
        lb, rb = "(" if open_lo else "[", ")" if open_hi else "]"
        raise ValueError(f"{name} must be in {lb}{lo}, {'inf' if hi is None else hi}{rb}, got {value}")
    return float(value)
