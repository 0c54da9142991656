"""Argument checks of ``spotref.generate`` and the step API: each bad value raises ``ValueError``
naming the argument, before any forward pass. Not part of the algorithm (the spec modules
import them; nothing here decides a token)."""
from __future__ import annotations

import math
import numbers

import numpy as np
import torch

from spotref.rules import DecisionRule

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


def check_length(prompt_len: int, max_new_tokens, max_positions: int) -> None:
    check_int("max_new_tokens", max_new_tokens, 0)
    if prompt_len + max_new_tokens > max_positions:
        raise ValueError(f"prompt_ids ({prompt_len}) + max_new_tokens ({max_new_tokens}) exceeds the "
                         f"model's max_position_embeddings ({max_positions})")


MIN_TEMPERATURE = 1e-6


def check_temperature(temperature) -> float:
    T = check_real("temperature", temperature, lo=0.0)
    if 0 < T < MIN_TEMPERATURE:
        raise ValueError(f"temperature {T!r} is below {MIN_TEMPERATURE:g}: L / T heads for float64 "
                         f"overflow and the noise no longer matters; use temperature=0 (argmax)")
    return T


def check_stop_ids(stop_ids, V: int, mask_id: int | None = None) -> list:
    """None, one id, or a 1-D sequence / numpy array / tensor of ids -> a list of ints (never
    MASK: it is never committed, so it could never stop anything)."""
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
    ids = [check_int("stop_ids", s, 0, V - 1) for s in stop_ids]
    if mask_id is not None and mask_id in ids:
        raise ValueError(f"stop_ids holds the MASK token {mask_id}: MASK is never committed, so it never stops")
    return ids


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
