"""The one family of argument checks: each bad value raises ``ValueError`` naming the argument,
before any work. The scalar checks (``is_index``, ``check_int``, ``check_real``) serve every
room and the command line (``spotref/cli/argtypes.py``); then come the contract of the tree core
(``spotref.core`` and its compiled twin: a draft, a decision, a tree), a draft's node
probabilities, the model config (``SDARConfig``) and ``spotref.generate``'s sequences. Not part
of the algorithm: nothing here decides a token, and nothing here imports torch (a tensor is
read through its ``tolist`` / ``numpy``)."""

from __future__ import annotations

import math
import numbers
import os
import reprlib

import numpy as np

# ---- scalars ---------------------------------------------------------------------------------


def is_index(x) -> bool:
    """An integer (int or numpy integer), not a bool: ``True`` is not position 1."""
    return isinstance(x, numbers.Integral) and not isinstance(x, bool)


def check_int(name, value, lo=None, hi=None) -> int:
    """``value`` as an int in [lo, hi] (a bound of None: no bound on that side)."""
    if not is_index(value) or (lo is not None and value < lo) or (hi is not None and value > hi):
        raise ValueError(f"{name} must be an int in [{_bound(lo, '-inf')}, {_bound(hi, 'inf')}], got {value!r}")
    return int(value)


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


def _bound(b, none: str) -> str:
    """A bound as a message writes it: 2**31 - 1 rather than 2147483647."""
    if b is None:
        return none
    powers = [k for k in (31, 63, 64) if b == 2**k - 1]
    return f"2**{powers[0]} - 1" if powers else str(b)


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


# ---- the tree core's contract (spotref.core, _ext/core.pyx) -------------------------------------

LIMIT = 2**31  # bound on every int the tree core holds: the compiled twin's rows are int32
BUILD_INTS = (("root_step", 0), ("mask_id", 0), ("vocab_size", 1), ("max_set", 1), ("budget", 1), ("depth", 0))


def check_build_args(root_step, mask_id, vocab_size, max_set, budget, depth) -> None:
    """``build_tree``'s ints: each in [lower bound, LIMIT) (``BUILD_INTS``), and steps stay below LIMIT."""
    for (name, lo), x in zip(BUILD_INTS, (root_step, mask_id, vocab_size, max_set, budget, depth)):
        check_int(f"build_tree: {name}", x, lo, LIMIT - 1)
    if int(root_step) + int(depth) >= LIMIT:
        raise ValueError(
            f"build_tree: root_step + depth must be below 2**{LIMIT.bit_length() - 1}, got {root_step} + {depth}"
        )


def check_state(what, state, mask_id, vocab_size, B=None):
    """A block state: a 1-D numpy integer array or a tuple or list of ints, B of them (at least
    one when B is None), each a vocabulary token or MASK. Returns it as a list of ints."""
    if isinstance(state, np.ndarray) and state.ndim == 1 and state.dtype.kind in "iu":
        tokens = state.tolist()
    elif isinstance(state, (tuple, list)) and all(is_index(t) for t in state):
        tokens = [int(t) for t in state]
    else:
        raise ValueError(f"{what}: want a 1-D integer array or a tuple or list of ints, got {reprlib.repr(state)}")
    if len(tokens) != B if B is not None else not tokens:
        raise ValueError(f"{what}: {len(tokens)} tokens, want {'at least 1' if B is None else B}")
    for j, t in enumerate(tokens):
        if not (0 <= t < vocab_size or t == mask_id):
            raise ValueError(
                f"{what}: token {t} at position {j} is neither a vocabulary token "
                f"(0 .. {vocab_size - 1}) nor MASK {mask_id}"
            )
    return tokens


def check_shape(parents, commits, budget) -> None:
    """A draft's parent array and commits: tuples or lists of one length, 1 .. budget nodes, and
    node 0 the root (parent -1, no commits)."""
    if not isinstance(parents, (tuple, list)) or not isinstance(commits, (tuple, list)):
        raise ValueError(
            f"draft: parents and commits must be tuples or lists, got "
            f"{type(parents).__name__} and {type(commits).__name__}"
        )
    n = len(parents)
    if n == 0 or n != len(commits):
        raise ValueError(f"draft: parents ({n}) and commits ({len(commits)}) must be equal, non-empty")
    if n > budget:
        raise ValueError(f"draft: {n} nodes, over the node budget {budget}")
    root_parent, root_commits = parents[0], commits[0]
    if not (
        is_index(root_parent)
        and root_parent == -1
        and isinstance(root_commits, (tuple, list))
        and len(root_commits) == 0
    ):
        raise ValueError("draft node 0: the root must have parent -1 and no commits")


def check_node(i, parent, commits, states, depths, mask_id, vocab_size, max_set, depth) -> None:
    """Draft node ``i`` >= 1: ``parent`` an earlier node, the node at most ``depth`` below the root,
    ``commits`` 1 .. max_set pairs onto the parent's state (``states``, ``depths``: the earlier nodes')."""
    if not is_index(parent):
        raise ValueError(f"draft node {i}: parent {parent!r} is not an integer node index")
    if not 0 <= parent < i:
        raise ValueError(f"draft node {i}: parent {parent} must be a smaller index (0 .. {i - 1})")
    if depths[parent] + 1 > depth:
        raise ValueError(f"draft node {i}: depth {depths[parent] + 1} exceeds the depth cap {depth}")
    check_commits(f"draft node {i}", commits, states[parent], mask_id, vocab_size, 1, max_set)


def check_decision(row, commits, state, mask_id, vocab_size, max_set) -> None:
    """The target's decision at ``state`` (row ``row`` of a tree): () exactly when no MASK is
    left, else 1 .. max_set pairs."""
    n = max_set if mask_id in state else 0
    check_commits(f"decision at row {row}", commits, state, mask_id, vocab_size, min(n, 1), n)


def check_commits(where, commits, state, mask_id, vocab_size, least, most) -> None:
    """``least`` .. ``most`` (position, token) pairs onto ``state``: a tuple or list of pairs, each a
    tuple or list of two ints, distinct positions masked in ``state``, tokens of the vocabulary
    other than MASK."""
    if not isinstance(commits, (tuple, list)):
        raise ValueError(f"{where}: commits must be (position, token) pairs, got {reprlib.repr(commits)}")
    if not least <= len(commits) <= most:
        raise ValueError(f"{where}: {len(commits)} commits, want {least} .. {most}")
    seen = set()
    for c in commits:
        if not isinstance(c, (tuple, list)) or len(c) != 2:
            raise ValueError(f"{where}: commits must be (position, token) pairs, got {reprlib.repr(commits)}")
        pos, tok = c
        if not is_index(pos) or not is_index(tok):
            raise ValueError(f"{where}: commit ({pos!r}, {tok!r}) is not a pair of ints")
        if not 0 <= pos < len(state):
            raise ValueError(f"{where}: position {pos} is outside the block [0, {len(state)})")
        if state[pos] != mask_id or pos in seen:
            raise ValueError(f"{where}: position {pos} is already committed")
        if not 0 <= tok < vocab_size or tok == mask_id:
            raise ValueError(
                f"{where}: token {tok} at position {pos} is not a vocabulary token "
                f"(0 .. {vocab_size - 1}, MASK {mask_id} excluded)"
            )
        seen.add(pos)


def check_tree(tree, cls) -> None:
    """``walk``'s tree: a ``cls`` (the walking core's own Tree)."""
    if not isinstance(tree, cls):
        kind = type(tree)
        raise ValueError(
            f"walk: tree must be a Tree from this core's build_tree, got {kind.__module__}.{kind.__qualname__}"
        )


# ---- a draft's node probabilities (``Draft.probs``: build_tree never reads them) -----------------


def check_probs(probs, parents) -> tuple:
    """One number in [0, 1] per node of ``parents``, as a tuple of floats (not counted when
    ``parents`` is no tuple: then it is no draft, and ``build_tree`` refuses it)."""
    try:
        out = tuple(float(p) for p in probs)
    except (TypeError, ValueError):
        raise ValueError(f"draft: probs must be a sequence of numbers, got {probs!r}") from None
    if isinstance(parents, tuple) and len(out) != len(parents):
        raise ValueError(f"draft: {len(out)} probs for {len(parents)} nodes")
    for i, p in enumerate(out):
        if not (math.isfinite(p) and 0.0 <= p <= 1.0):
            raise ValueError(f"draft node {i}: prob {p!r} is not in [0, 1]")
    return out


# ---- the model config (``SDARConfig``) ------------------------------------------------------------

INT_MAX = 2**31 - 1  # every int field of the config fits an int32
CONFIG_SIZES = (
    "vocab_size",
    "hidden_size",
    "intermediate_size",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "head_dim",
    "max_position_embeddings",
)
CONFIG_REALS = ("rms_norm_eps", "rope_theta", "initializer_range")


def check_config(c) -> None:
    """An ``SDARConfig``: every field of its type and range, and the fields consistent (RoPE's
    pairs, grouped heads, token ids inside the vocabulary); the message names ``SDARConfig.field``."""
    for name in CONFIG_SIZES:
        check_int(f"SDARConfig.{name}", getattr(c, name), 1, INT_MAX)
    for name in CONFIG_REALS:
        value = getattr(c, name)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < float("inf"):
            raise ValueError(f"SDARConfig.{name} must be a positive finite number, got {value!r}")
    if c.head_dim % 2:
        raise ValueError(f"SDARConfig.head_dim must be even (RoPE rotates pairs), got {c.head_dim}")
    if not c.rope_theta > 1:
        raise ValueError(f"SDARConfig.rope_theta must be above 1 (the RoPE base), got {c.rope_theta!r}")
    for name in ("bos_token_id", "eos_token_id"):
        _check_config_ids(name, getattr(c, name), c.vocab_size)
    if c.num_attention_heads % c.num_key_value_heads:
        raise ValueError(
            f"SDARConfig.num_attention_heads ({c.num_attention_heads}) must be a "
            f"multiple of num_key_value_heads ({c.num_key_value_heads})"
        )
    if c.mask_token_id is not None:
        _check_config_mask(c.mask_token_id, c.vocab_size)
    if c.block_size is not None:
        check_int("SDARConfig.block_size", c.block_size, 1, INT_MAX)
    if not isinstance(c.tie_word_embeddings, bool):
        raise ValueError(f"SDARConfig.tie_word_embeddings must be True or False, got {c.tie_word_embeddings!r}")


def _check_config_ids(name, ids, vocab_size) -> None:
    """``bos_token_id`` / ``eos_token_id``: None, a token id or a list of them."""
    for t in ids if isinstance(ids, list) else [ids]:
        if t is not None and (isinstance(t, bool) or not isinstance(t, int) or not 0 <= t < vocab_size):
            raise ValueError(f"SDARConfig.{name} {ids!r} is not a token id of the vocabulary [0, {vocab_size})")


def _check_config_mask(mask_id, vocab_size) -> None:
    """MASK: a token of the vocabulary, which must hold another token besides."""
    check_int("SDARConfig.mask_token_id", mask_id, 0, INT_MAX)
    if mask_id >= vocab_size:
        raise ValueError(f"SDARConfig.mask_token_id {mask_id} is outside the vocabulary [0, {vocab_size})")
    if vocab_size == 1:
        raise ValueError("SDARConfig.vocab_size 1 holds only MASK: a decoder could commit nothing")


# ---- generate's arguments --------------------------------------------------------------------


def check_length(prompt_len: int, max_new_tokens, max_positions: int) -> None:
    check_int("max_new_tokens", max_new_tokens, 0)
    if prompt_len + max_new_tokens > max_positions:
        raise ValueError(
            f"prompt_ids ({prompt_len}) + max_new_tokens ({max_new_tokens}) exceeds the "
            f"model's max_position_embeddings ({max_positions})"
        )


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
