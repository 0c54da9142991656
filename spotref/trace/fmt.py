"""The trace file: one JSON document, versioned, checked whole when read (docs/spec.md section 8).

``Trace`` holds one or more decodes (``decodes``, each a dict as ``Recorder.trace`` writes it)
and the text of their tokens where a tokenizer was at hand (``pieces``: id -> text). ``save``
writes it atomically; ``load`` refuses a file that is not JSON (a truncated write), not a
spotref trace, of another version, or whose fields do not hold what the format says, with one
``ValueError`` naming the file, the place (decode, block, round, decision) and the problem.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

from spotref.files import atomic_write_text

FORMAT, VERSION = "spotref-trace", 1
RULE_FIELDS = ("temperature", "seed", "threshold", "top_k", "top_p", "confidence", "precision")


class Trace:
    """Decodes recorded round by round; ``a + b`` lays two traces side by side."""

    def __init__(self, decodes: list, pieces: dict | None = None):
        self.decodes = list(decodes)
        self.pieces = dict(pieces or {})  # str(token id) -> its text

    def __add__(self, other: "Trace") -> "Trace":
        if not isinstance(other, Trace):
            return NotImplemented
        return Trace(self.decodes + other.decodes, {**self.pieces, **other.pieces})

    def __len__(self) -> int:
        return len(self.decodes)

    def with_pieces(self, decode_fn) -> "Trace":
        """The trace with the text of every token it holds, ``decode_fn([id]) -> str`` each."""
        ids = {t for d in self.decodes for t in d["tokens"]}
        ids |= {c[1] for d in self.decodes for b in d["blocks"] for r in b["rounds"] for c in _commits(r)}
        return Trace(self.decodes, {**self.pieces, **{str(i): decode_fn([i]) for i in sorted(ids)}})

    def to_dict(self) -> dict:
        return {"format": FORMAT, "version": VERSION, "pieces": self.pieces, "decodes": self.decodes}

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), separators=(",", ":"), allow_nan=False)

    def save(self, path) -> Path:
        """Write the trace to ``path`` atomically (a reader never sees half a file)."""
        return atomic_write_text(path, self.to_json())

    @classmethod
    def from_dict(cls, data, source: str = "trace") -> "Trace":
        """A trace from its JSON object, checked (``ValueError`` naming ``source`` and the place)."""
        check_trace(data, source)
        return cls(data["decodes"], data["pieces"])

    @classmethod
    def load(cls, path) -> "Trace":
        """Read and check a trace file: a regular file (a directory, a pipe or a device is
        refused, never read or waited on) holding one JSON document."""
        path = trace_path(path)
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as e:
            raise ValueError(f"trace {path}: cannot be read ({e})") from None
        try:
            data = json.loads(text)
        except json.JSONDecodeError as e:
            raise ValueError(
                f"trace {path}: not a complete JSON document ({e.msg} at line {e.lineno}, column {e.colno}); "
                f"a truncated or damaged file?"
            ) from None
        except (ValueError, RecursionError) as e:  # a 5,000-digit number; arrays nested 100,000 deep
            raise ValueError(f"trace {path}: not a trace spotref writes ({type(e).__name__}: {str(e)[:80]})") from None
        return cls.from_dict(data, f"trace {path}")


def trace_path(path) -> Path:
    """``path`` as a ``Path`` to a regular file, or ``ValueError`` naming it."""
    if isinstance(path, bytes) or not isinstance(path, (str, os.PathLike)) or not os.fspath(path):
        raise ValueError(f"a trace path must be a non-empty str or path, got {path!r:.60}")
    path = Path(path)
    if path.exists() and not path.is_file():
        what = "a directory" if path.is_dir() else "not a regular file (a pipe or a device)"
        raise ValueError(f"trace {path}: {what}; a trace is a file spotref wrote")
    return path


def load(path) -> Trace:
    """``Trace.load(path)``."""
    return Trace.load(path)


def _commits(round_: dict) -> list:
    return [c for d in round_.get("decisions", ()) for c in d["commits"]]


def committed(decode: dict) -> list:
    """The generated tokens a trace's blocks commit: each block's start with its decisions
    applied, the positions masked at its start, blocks in order; cut to ``max_new_tokens`` and
    after the first stop id, as ``decode.decode`` cuts them."""
    mask, out = decode["mask_id"], []
    for block in decode["blocks"]:
        state = list(block["start"])
        for round_ in block["rounds"]:
            for d in round_["decisions"]:
                for j, x, _ in d["commits"]:
                    state[j] = x
        out += [state[j] for j, t in enumerate(block["start"]) if t == mask]
    return cut(out, decode)


def cut(out: list, decode: dict) -> list:
    """Generated tokens cut to the decode's ``max_new_tokens`` and after its first stop id."""
    if decode.get("max_new_tokens") is not None:
        out = out[: decode["max_new_tokens"]]
    stops = set(decode.get("stop_ids") or ())
    for i, t in enumerate(out):
        if t in stops:
            return out[: i + 1]
    return out


# --- the checks ---------------------------------------------------------------------------------

INT, NUM, STR, LIST, DICT = "an int", "a number", "a string", "a list", "an object"
TRACE_FAMILIES = ("sdar", "llada", "llada2", "dream")  # a decode's "family" (spotref.spec.decode.FAMILIES)
RULE_KINDS = {  # the rule's fields (RULE_FIELDS): (kind, may be null, floor)
    "temperature": (NUM, False, 0),
    "seed": (INT, False, 0),
    "threshold": (NUM, True, 0),
    "top_k": (INT, True, 1),
    "top_p": (NUM, True, 0),
    "confidence": (STR, False, None),
    "precision": (STR, False, None),
}


def kind_ok(value, kind: str) -> bool:
    """Whether a JSON value is of ``kind`` (a bool is no int; a number is finite)."""
    if kind == INT:
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == NUM:
        return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    return isinstance(value, {STR: str, LIST: list, DICT: dict}[kind])


def need(obj: dict, key: str, kind: str, where: str, optional: bool = False, lo=None):
    """``obj[key]``, which must be of ``kind`` (or None when ``optional``), and a number at least
    ``lo`` where ``lo`` is given (a count, a step or a time is never negative)."""
    if key not in obj:
        raise ValueError(f"{where}: no field {key!r}")
    value = obj[key]
    if (value is None and optional) or (kind_ok(value, kind) and (lo is None or value >= lo)):
        return value
    kind = kind if lo is None else f"{kind} >= {lo}"
    raise ValueError(f"{where}: {key!r} must be {kind}{' or null' if optional else ''}, got {value!r:.60}")


def ints(obj: dict, key: str, where: str, lo: int = 0, hi: int | None = None, optional: bool = False) -> list:
    """``obj[key]``: a list of ints in [lo, hi) (or None when ``optional``)."""
    values = need(obj, key, LIST, where, optional)
    if values is None:
        return None
    for v in values:
        if not kind_ok(v, INT) or v < lo or (hi is not None and v >= hi):
            span = f"[{lo}, {hi})" if hi is not None else f">= {lo}"
            raise ValueError(f"{where}: {key!r} must hold ints in {span}, got {v!r:.60}")
    return values


def check_trace(data, source: str) -> None:
    """The whole document, or ``ValueError`` naming the first problem."""
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise ValueError(f'{source}: not a spotref trace (no "format": {FORMAT!r})')
    version = data.get("version")
    if not kind_ok(version, INT) or version != VERSION:  # true and 1.0 are no version 1
        raise ValueError(f"{source}: trace version {version!r}; this spotref reads version {VERSION}")
    pieces = need(data, "pieces", DICT, source)
    if not all(isinstance(v, str) for v in pieces.values()):
        raise ValueError(f"{source}: 'pieces' must map token ids to strings")
    decodes = need(data, "decodes", LIST, source)
    if not decodes:
        raise ValueError(f"{source}: 'decodes' is empty")
    for i, decode in enumerate(decodes):
        check_decode(decode, f"{source}, decode {i}")


def check_decode(decode, where: str) -> None:
    if not isinstance(decode, dict):
        raise ValueError(f"{where}: must be an object")
    for key in ("label", "family", "drafter"):
        need(decode, key, STR, where)
    bl = need(decode, "block_length", INT, where, lo=1)
    need(decode, "mask_id", INT, where, lo=0)
    need(decode, "vocab_size", INT, where, lo=1)
    if decode["family"] not in TRACE_FAMILIES:
        raise ValueError(f"{where}: 'family' must be one of {', '.join(TRACE_FAMILIES)}, got {decode['family']!r:.60}")
    check_rule(need(decode, "rule", DICT, where), f"{where}, rule")
    for key in ("budget", "depth", "passes"):
        need(decode, key, INT, where, lo=0)
    need(decode, "width", INT, where, optional=True, lo=1)
    need(decode, "prompt_length", INT, where, optional=True, lo=0)
    need(decode, "max_new_tokens", INT, where, optional=True, lo=0)
    ints(decode, "stop_ids", where)
    tokens = ints(decode, "tokens", where)
    for b, block in enumerate(need(decode, "blocks", LIST, where)):
        check_block(block, bl, f"{where}, block {b}")
    if committed(decode) != tokens:
        raise ValueError(f"{where}: the decisions its blocks record do not commit its 'tokens'")


def check_rule(rule: dict, where: str) -> None:
    """The rule's fields (``RULE_FIELDS``), each of its kind: a temperature of "hot" or a seed of
    "x" was read, and replayed as the rule's default."""
    for key, (kind, optional, lo) in RULE_KINDS.items():
        need(rule, key, kind, where, optional=optional, lo=lo)


def check_block(block, bl: int, where: str) -> None:
    if not isinstance(block, dict):
        raise ValueError(f"{where}: must be an object")
    need(block, "index", INT, where, lo=0)
    start = ints(block, "start", where)
    if len(start) != bl:
        raise ValueError(f"{where}: 'start' holds {len(start)} tokens, not the block length {bl}")
    need(block, "fixed", INT, where, lo=0)
    for r, round_ in enumerate(need(block, "rounds", LIST, where)):
        check_round(round_, bl, f"{where}, round {r}")


def check_round(round_, bl: int, where: str) -> None:
    if not isinstance(round_, dict):
        raise ValueError(f"{where}: must be an object")
    need(round_, "step", INT, where, lo=0)
    for key in ("wall_s", "draft_s"):
        need(round_, key, NUM, where, lo=0)
    parents = check_tree(need(round_, "tree", DICT, where), bl, where)
    rows = need(round_, "rows", INT, where, lo=1)
    node_rows = ints(round_, "node_rows", where, hi=rows)
    path = ints(round_, "path", where, hi=rows)
    if len(node_rows) != len(parents) or not path or path[0] != 0:
        raise ValueError(f"{where}: 'node_rows' must give each node's row and 'path' start at row 0")
    ints(round_, "stale_order", where, hi=bl, optional=True)
    decisions = need(round_, "decisions", LIST, where)
    if not 1 <= len(decisions) <= len(path) or len(decisions) < len(path) - 1:
        raise ValueError(f"{where}: {len(decisions)} decisions along a path of {len(path)} rows")
    for k, d in enumerate(decisions):
        check_decision(d, bl, f"{where}, decision {k}")


def check_tree(tree: dict, bl: int, where: str) -> list:
    """A round's tree: ``parents`` (-1, then an earlier node each), ``commits`` (a list of
    [position, token] pairs per node, none at the root) and ``probs`` (numbers >= 0, or null),
    parallel. Returns the parents. (A commit of 5 or "ab", a probability of "x" or null, were
    tracebacks or "not enough values to unpack" when the round was drawn.)"""
    parents = ints(tree, "parents", f"{where}, tree", lo=-1)
    commits = need(tree, "commits", LIST, f"{where}, tree")
    probs = need(tree, "probs", LIST, f"{where}, tree", optional=True)
    if not parents or parents[0] != -1 or any(not 0 <= p < i for i, p in enumerate(parents[1:], 1)):
        raise ValueError(f"{where}: the tree's 'parents' must start with -1 and name an earlier node each")
    if len(commits) != len(parents) or (probs is not None and len(probs) != len(parents)):
        raise ValueError(f"{where}: the tree's 'parents', 'commits' and 'probs' differ in length")
    for i, node in enumerate(commits):
        if not isinstance(node, list) or not all(is_commit(c, bl) for c in node) or (i == 0 and node):
            raise ValueError(
                f"{where}, tree: 'commits' of node {i} must be a list of [position, token] pairs "
                f"(positions in [0, {bl}), none at the root), got {node!r:.60}"
            )
    for i, p in enumerate(probs or ()):
        if not kind_ok(p, NUM) or p < 0:
            raise ValueError(f"{where}, tree: 'probs' must hold numbers >= 0 (or be null), node {i} has {p!r:.60}")
    return parents


def is_commit(c, bl: int) -> bool:
    """Whether ``c`` is a tree node's commit: [position in [0, bl), token >= 0]."""
    return isinstance(c, list) and len(c) == 2 and all(kind_ok(x, INT) and x >= 0 for x in c) and c[0] < bl


def check_decision(d, bl: int, where: str) -> None:
    if not isinstance(d, dict):
        raise ValueError(f"{where}: must be an object")
    need(d, "step", INT, where, lo=0)
    need(d, "row", INT, where, lo=0)
    masked = ints(d, "masked", where, hi=bl)
    tokens = ints(d, "tokens", where)
    conf = need(d, "confidences", LIST, where)
    if not (len(masked) == len(tokens) == len(conf)) or not all(kind_ok(c, NUM) for c in conf):
        raise ValueError(f"{where}: 'masked', 'tokens' and 'confidences' must be parallel lists (numbers)")
    commits = need(d, "commits", LIST, where)
    drawn = dict(zip(masked, tokens))
    for c in commits:
        ok = isinstance(c, list) and len(c) == 3 and kind_ok(c[0], INT) and kind_ok(c[2], NUM)
        if not ok or drawn.get(c[0]) != c[1]:
            raise ValueError(
                f"{where}: commit {c!r:.60} is no [position, token, confidence] drawn at a masked position"
            )
