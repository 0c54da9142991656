"""The one family of argument checks: each bad value raises ``ValueError`` naming the argument,
before any work. The scalar checks (``is_index``, ``check_int``, ``check_real``) serve every
room and the command line (``spotref/cli/argtypes.py``); then come the contract of the tree core
(``spotref.spec.core`` and its compiled twin: a draft, a decision, a tree), a draft's node
probabilities, the model config (``SDARConfig``) and ``spotref.generate``'s sequences. Not part
of the algorithm: nothing here decides a token, and nothing here imports torch (a tensor is
read through its ``tolist`` / ``numpy``)."""

from __future__ import annotations

import math
import numbers
import os

import numpy as np

from spotref.spec.checks import _bound, check_int

# ---- scalars ---------------------------------------------------------------------------------


def check_real(name, value, lo=None, hi=None, open_lo=False, open_hi=False) -> float:
    """``value`` as a finite float in [lo, hi] (open on a side with ``open_lo`` / ``open_hi``)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or math.isnan(value) or math.isinf(value):
        raise ValueError(f"{name} must be a finite number, got {value!r}")
    bad_lo = lo is not None and (value <= lo if open_lo else value < lo)
    bad_hi = hi is not None and (value >= hi if open_hi else value > hi)
    if bad_lo or bad_hi:
        lb, rb = "(" if open_lo else "[", ")" if open_hi else "]"
        raise ValueError(f"{name} must be in {lb}{_bound(lo, '-inf')}, {_bound(hi, 'inf')}{rb}, got {value}")
    return float(value)


def check_path(name, value):
    """``value`` as a path: a str or an ``os.PathLike`` naming a str (not bytes, not a number)."""
    path = os.fspath(value) if isinstance(value, os.PathLike) else value
    if not isinstance(path, str) or not path:
        raise ValueError(f"{name} must be a path (a non-empty str or os.PathLike), got {value!r}")
    return path


def as_numpy(x):
    """A torch tensor as a numpy array (detached, on the CPU; bf16 as float32, which numpy lacks);
    anything else as it is."""
    if not (hasattr(x, "detach") and hasattr(x, "cpu")):
        return x
    t = x.detach().cpu()
    return (t.float() if t.is_floating_point() else t).numpy()


def is_array(x) -> bool:
    """A numpy array or a tensor (anything with ``ndim`` and ``tolist``)."""
    return hasattr(x, "ndim") and hasattr(x, "tolist")


def check_values(name: str, x) -> None:
    """An array or tensor whose values can be read: a tensor on the meta device (shapes, no
    values) or with a sparse layout is a ``ValueError`` naming ``name``, not torch's error from
    inside ``tolist``."""
    layout = str(getattr(x, "layout", "torch.strided"))
    if getattr(x, "is_meta", False) or layout != "torch.strided":
        raise ValueError(f"{name} must be a dense tensor with values, got one on {x.device} ({layout})")


# ---- the tree core's contract (spotref.spec.core, _ext/core.pyx) -------------------------------------


# ---- a draft's node probabilities (``Draft.probs``: build_tree never reads them) -----------------


# ---- the model config (``SDARConfig``) ------------------------------------------------------------


# ---- generate's arguments --------------------------------------------------------------------


def check_length(prompt_len: int, max_new_tokens, max_positions: int) -> int:
    """max_new_tokens as a Python int (a numpy integer never reaches the arithmetic: it wraps),
    checked to fit the model's positions after the prompt."""
    max_new_tokens = check_int("max_new_tokens", max_new_tokens, 0)
    if prompt_len + max_new_tokens > max_positions:
        raise ValueError(
            f"prompt_ids ({prompt_len}) + max_new_tokens ({max_new_tokens}) exceeds the "
            f"model's max_position_embeddings ({max_positions})"
        )
    return max_new_tokens


MIN_TEMPERATURE = 1e-6
MAX_TEMPERATURE = float(np.finfo(np.float32).max)  # 3.4e38: above it T is inf in float32


def check_temperature(temperature, name: str = "temperature") -> float:
    """T as a float: 0 (argmax) or in [MIN_TEMPERATURE, MAX_TEMPERATURE]. Below the floor ``L / T``
    heads for overflow; above the cap T itself is inf in float32, and the rule divides the logits
    by T in float32 or narrower (bfloat16 and float16 logits are divided in float32), so every
    score would be 0 or NaN. One range for every precision. ``name``: the argument's name."""
    T = check_real(name, temperature, lo=0.0)
    if 0 < T < MIN_TEMPERATURE:
        raise ValueError(
            f"{name} {T!r} is below {MIN_TEMPERATURE:g}: L / T heads for float64 "
            f"overflow and the noise no longer matters; use temperature=0 (argmax)"
        )
    if T > MAX_TEMPERATURE:
        raise ValueError(
            f"{name} {T!r} is above {MAX_TEMPERATURE:.3g}, float32's largest number: the rule divides "
            f"the logits by T in float32 or narrower, where such a T is inf"
        )
    return T


def check_stop_ids(stop_ids, V: int, mask_id: int | None = None) -> list:
    """None, one id, or a 1-D sequence / numpy array / tensor of ids -> a list of ints (never
    MASK: it is never committed, so it could never stop anything)."""
    if stop_ids is None:
        return []
    if is_array(stop_ids):
        check_values("stop_ids", stop_ids)
        if stop_ids.ndim > 1:
            raise ValueError(
                f"stop_ids must be one id or a 1-D sequence of ids, got a "
                f"{stop_ids.ndim}-D {type(stop_ids).__name__} of shape {tuple(stop_ids.shape)}"
            )
        stop_ids = stop_ids.tolist()
    if isinstance(stop_ids, numbers.Integral) and not isinstance(stop_ids, bool):
        stop_ids = [stop_ids]  # one id, as Hugging Face's eos_token_id
    if isinstance(stop_ids, (str, bytes, dict)) or not hasattr(stop_ids, "__iter__"):
        raise ValueError(f"stop_ids must be one id or a 1-D sequence of ids, got {stop_ids!r}")
    ids = [check_int("stop_ids", s, 0, V - 1) for s in stop_ids]
    if mask_id is not None and mask_id in ids:
        raise ValueError(f"stop_ids holds the MASK token {mask_id}: MASK is never committed, so it never stops")
    return ids


def check_prompt(prompt_ids, V: int, mask_id: int) -> list:
    if isinstance(prompt_ids, (set, frozenset, dict)):
        raise ValueError(
            f"prompt_ids must be an ordered 1-D sequence of token ids, got a {type(prompt_ids).__name__} (unordered)"
        )
    if is_array(prompt_ids):
        check_values("prompt_ids", prompt_ids)
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
