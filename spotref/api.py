"""``spotref.generate``: argument checks, then exact or SPOT decoding (SPEC section 7).

Every argument is checked before the first forward; a bad one raises ``ValueError`` naming it.
"""
from __future__ import annotations

import math
import numbers
import time
from functools import partial

import numpy as np
import torch

from spotref import drafters as _drafters
from spotref.decode import Result, Stats, decode, exact_block, spot_block
from spotref.rules import DecisionRule


def generate(model, prompt_ids, max_new_tokens: int, temperature: float = 0.0, seed: int = 0,
             threshold: float | None = None, drafter=None, budget: int = 16, depth: int = 8,
             top_k: int | None = None, top_p: float | None = None, stop_ids=None,
             fused_store: bool = False, core=None) -> Result:
    """Decode ``max_new_tokens`` after ``prompt_ids``; identical tokens whatever the drafter.

    drafter: None (exact decoding), a name ("confidence", "confidence-chain", "calibrated",
    "spot"), a trained order model (``spotref.load_drafter``) or any callable
    ``drafter(view) -> spotref.Draft``. budget: tree node budget N (root included), or "auto"
    (the N that maximises expected commits per second on this machine); depth: depth cap D. core: the tree/verification implementation (default: the
    compiled one when built, see ``spotref.EXTENSION``). fused_store: compute each finished
    block's K/V inside the next block's first pass instead of a store pass of its own (identical
    tokens, one pass fewer per block).
    """
    cfg = model.config
    V, B, mask_id = cfg.vocab_size, model.block_size, model.mask_id
    prompt = check_prompt(prompt_ids, V, mask_id)
    check_int("max_new_tokens", max_new_tokens, 0)
    if len(prompt) + max_new_tokens > cfg.max_position_embeddings:
        raise ValueError(f"prompt_ids ({len(prompt)}) + max_new_tokens ({max_new_tokens}) exceeds the "
                         f"model's max_position_embeddings ({cfg.max_position_embeddings})")
    check_real("temperature", temperature, lo=0.0)
    check_int("seed", seed, 0)
    if threshold is not None:
        check_real("threshold", threshold, lo=0.0, hi=1.0, open_lo=True, open_hi=True)
    if top_k is not None:
        check_int("top_k", top_k, 1)
    if top_p is not None:
        check_real("top_p", top_p, lo=0.0, hi=1.0, open_lo=True)
    if budget != "auto":
        check_int("budget", budget, 1)
    check_int("depth", depth, 0)
    stops = [check_int("stop_ids", s, 0, V - 1) for s in (stop_ids or ())]
    rule = DecisionRule(mask_id, V, B, float(temperature), int(seed), top_k, top_p,
                        None if threshold is None else float(threshold))
    stats = Stats()
    if drafter is None:
        fill = partial(exact_block, rule)
    else:
        drafter = resolve_drafter(drafter, model)
        budget = auto_budget(model, drafter, int(depth), float(temperature)) if budget == "auto" else budget
        fill = partial(spot_block, rule, drafter, core or _default_core(), int(budget), int(depth))
    t = time.perf_counter()
    tokens = decode(model, prompt, int(max_new_tokens), stops, fill, stats, bool(fused_store))
    wall = time.perf_counter() - t
    return Result(tokens, stats.passes, {**vars(stats), "rounds": len(stats.accepted), "wall_s": wall})


_AUTO_BUDGETS = {}


def auto_budget(model, drafter, depth: int, temperature: float) -> int:
    """budget="auto": the cost model's N for this model and drafter on this machine (measured
    once per process, see ``spotref.costmodel``)."""
    from spotref.costmodel import resolve_budget
    key = (id(model), id(drafter), depth, temperature > 0)
    if key not in _AUTO_BUDGETS:
        _AUTO_BUDGETS[key] = resolve_budget("auto", model, drafter, depth, temperature)
    return _AUTO_BUDGETS[key]


def _default_core():
    import spotref
    return spotref.core_module()


def resolve_drafter(drafter, model):
    """A drafter name or object -> a callable ``view -> Draft``."""
    if isinstance(drafter, str):
        from spotref.spot import MODEL_DRAFTERS          # "spot", "calibrated": the target's own
        if drafter in MODEL_DRAFTERS:
            return MODEL_DRAFTERS[drafter](model)
        if drafter not in _drafters.DRAFTERS:
            known = sorted([*_drafters.DRAFTERS, *MODEL_DRAFTERS])
            raise ValueError(f"drafter {drafter!r} is unknown; known: {', '.join(known)}")
        return _drafters.DRAFTERS[drafter]()
    if not callable(drafter):
        raise ValueError(f"drafter must be None, a name or a callable, got {type(drafter).__name__}")
    return drafter


def check_prompt(prompt_ids, V: int, mask_id: int) -> list:
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
