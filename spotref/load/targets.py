"""Bundled targets: small real SDAR models trained here (``spotref.tools.train``) on grade-school
math (``gsm-*``, the default ``gsm-b32``) and on Python's own text (``stdlib-*``).

Each target is three files in ``spotref/load/targets/``: ``NAME.safetensors`` (float16 weights with
the HF names of ``SDARModel``), ``NAME.tokenizer.json`` and ``NAME.json`` (metadata: config,
tokenizer, corpus, training command and time, held-out loss, quality numbers, and the SHA-256
of the weights, checked at load time so a corrupt or truncated file fails loudly).
``save_target`` writes the three files (the trainer's export calls it), the metadata last.

>>> import spotref
>>> "stdlib-b32" in spotref.list_targets()
True
>>> target = spotref.load_target("stdlib-b32")
>>> target.model.block_size, target.tokenizer.decode(target.tokenizer.encode("def f(x):"))
(32, 'def f(x):')
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path

import torch

from spotref.checkpoint import check_field_types, read_json
from spotref.checks import check_int
from spotref.files import atomic_path, atomic_write_text
from spotref.load.bpe import tokenizer_from_json
from spotref.load.tokenizer import chat_format
from spotref.models import SDARConfig, SDARModel

TARGETS_DIR = Path(__file__).parent / "targets"
DEFAULT_TARGET = "gsm-b32"
CHAT_CORPORA = ("gsm",)  # the corpora of chat-formatted documents (spotref.data.gsm.chat_document)
MAX_HELDOUT = 100_000  # held-out prompts one call may ask for (10**9 ran without bound)


@dataclass
class Target:
    name: str
    model: SDARModel  # eval mode, float32
    tokenizer: object  # encode(str) -> list[int], decode(list[int]) -> str
    meta: dict

    @property
    def eos_id(self) -> int:
        return self.tokenizer.eos_id

    @property
    def stop_ids(self) -> list[int]:
        return [self.tokenizer.eos_id]

    def encode(self, text: str) -> list[int]:
        """The prompt's token ids; ``ValueError`` if it does not encode."""
        return self.tokenizer.encode(text)

    @property
    def chat(self) -> bool:
        """Whether the target was trained on chat-formatted documents (the gsm targets): prompt
        it with ``encode_chat``."""
        return ((self.meta or {}).get("corpus") or {}).get("name") in CHAT_CORPORA

    def encode_chat(self, messages, **kwargs) -> list[int]:
        """A chat prompt's token ids, in SDAR's (Qwen3's) template ending in the assistant header,
        as the chat targets were trained (``spotref.load.tokenizer.chat_format``: a question as
        a str, or a list of {"role", "content"} turns); ``ValueError`` for a plain-text target."""
        if not self.chat:
            raise ValueError(f"target {self.name!r} is trained on plain text: prompt it with encode(text)")
        return self.tokenizer.encode(chat_format(messages, **kwargs))

    def heldout(self, n: int, seed: int = 0, split: str | None = None) -> list[tuple[str, int | None]]:
        """``n`` held-out ``(prompt text, answer or None)`` pairs of the target's own domain
        (its metadata's corpus, ``spotref.data.corpora``), a pure function of ``(n, seed, split)``;
        no prompt comes from a training document. split: None (the whole held-out set),
        ``"train"`` or ``"test"`` (two halves that share no document: drafter training vs
        evaluation). Code targets have no answers (None).

        >>> import spotref
        >>> prompt, answer = spotref.load_target("stdlib-b32").heldout(1, seed=0)[0]
        >>> type(prompt).__name__, answer
        ('str', None)
        """
        check_int("heldout: n", n, 0, MAX_HELDOUT)
        from spotref.data.corpora import open_corpus  # the corpora load only when asked for

        return open_corpus(self.meta.get("corpus")).heldout(n, seed, split)


def list_targets(directory: Path | str = TARGETS_DIR) -> list[str]:
    """Names of the bundled targets (those with both metadata and weights), sorted."""
    d = Path(directory)
    return sorted(
        p.stem
        for p in d.glob("*.json")
        if not p.name.endswith(".tokenizer.json") and p.with_suffix(".safetensors").exists()
    )


def load_target(name: str | os.PathLike = DEFAULT_TARGET, directory: Path | str = TARGETS_DIR) -> Target:
    """A bundled target by name (``list_targets()``), or by the path (str or ``Path``) of its
    ``NAME.json``. A bad name, metadata file or weights file raises ``ValueError`` naming it."""
    if isinstance(name, os.PathLike):
        name = os.fspath(name)
    if not isinstance(name, str):
        raise ValueError(f"target name must be a str or a path, got {type(name).__name__}")
    meta_path = Path(name) if name.endswith(".json") else Path(directory, f"{name}.json")
    if not name.endswith(".json") and name not in list_targets(directory):
        known = ", ".join(list_targets(directory)) or "none"
        raise ValueError(f"unknown target {name!r}; known targets: {known}")
    if not meta_path.is_file():
        raise ValueError(f"no target metadata at {meta_path}")
    meta = read_meta(meta_path)
    tokenizer = _load_tokenizer(
        inside(meta_path, meta["tokenizer"]["file"], "tokenizer.file"), meta["tokenizer"].get("sha256")
    )
    model = _load_model(inside(meta_path, meta["weights"]["file"], "weights.file"), meta, meta_path)
    check_pair(model.config, tokenizer, meta_path)
    return Target(meta.get("name", meta_path.stem), model, tokenizer, meta)


def inside(meta_path: Path, name: str, field: str) -> Path:
    """A file the metadata names: a plain file name beside the metadata, not a path elsewhere
    (the weights are checked against their SHA-256 whatever the file is)."""
    if not name or Path(name).name != name or name in (".", ".."):
        raise ValueError(
            f"the target metadata {meta_path}: {field} {name!r} must name a file beside it (no directories)"
        )
    return meta_path.parent / name


def check_pair(cfg, tokenizer, meta_path: Path) -> None:
    """The tokenizer fits the model: the same MASK id, and every id it makes is in the vocabulary."""
    if tokenizer.mask_id != cfg.mask_token_id:
        raise ValueError(
            f"the target {meta_path}: the tokenizer's MASK id is {tokenizer.mask_id}, the "
            f"model's mask_token_id {cfg.mask_token_id}"
        )
    if tokenizer.vocab_size != cfg.vocab_size:
        raise ValueError(
            f"the target {meta_path}: the tokenizer has {tokenizer.vocab_size} ids, the "
            f"model's vocabulary {cfg.vocab_size}"
        )


# The metadata fields load_target reads, and the JSON type of each.
META_FIELDS = {
    "config": dict,
    "weights": dict,
    "tokenizer": dict,
    "weights.file": str,
    "weights.bytes": int,
    "weights.sha256": str,
    "tokenizer.file": str,
}


def read_meta(path: Path) -> dict:
    """The target metadata ``NAME.json``: a JSON object with every field ``META_FIELDS`` lists."""
    meta = read_json(path, "the target metadata")
    for field, kind in META_FIELDS.items():
        head, _, key = field.partition(".")
        value = meta.get(head) if not key else meta[head].get(key)
        if value is None:
            raise ValueError(f"the target metadata {path} has no {field!r} field")
        if not isinstance(value, kind) or isinstance(value, bool):
            json_type = {dict: "an object", str: "a string", int: "an integer"}[kind]
            raise ValueError(f"the target metadata {path}: {field!r} must be {json_type}, got {value!r}")
    return meta


def _load_tokenizer(path: Path, sha256: str | None = None):
    """The tokenizer file, checked against the metadata's SHA-256 when it records one (an export
    killed between its files then fails here by name rather than pairing another tokenizer)."""
    try:
        raw = path.read_bytes()
    except OSError as e:
        raise ValueError(f"cannot load the tokenizer {path}: {e}") from None
    if sha256 is not None and hashlib.sha256(raw).hexdigest() != sha256:
        raise ValueError(
            f"the tokenizer file {path} does not match the metadata's SHA-256: "
            f"it is another tokenizer (an interrupted export?)"
        )
    try:
        return tokenizer_from_json(raw.decode("utf-8"))
    except (OSError, ValueError, Exception) as e:  # tokenizers raises its own Exception
        raise ValueError(f"cannot load the tokenizer {path}: {e}") from None


def _load_model(path: Path, meta: dict, meta_path: Path | None = None) -> SDARModel:
    """Weights checked against the metadata's size and SHA-256 before they are parsed."""
    try:
        from safetensors.torch import load  # optional dependency (the [cli] extra)
    except ImportError:
        raise ImportError("loading a target needs 'safetensors': pip install 'spotref[cli]'") from None
    if not path.is_file():
        raise ValueError(f"the weights file {path} is missing")
    raw, want = path.read_bytes(), meta["weights"]
    if len(raw) != want["bytes"]:
        raise ValueError(
            f"the weights file {path} is truncated or corrupt: {len(raw)} bytes, the metadata says {want['bytes']}"
        )
    if hashlib.sha256(raw).hexdigest() != want["sha256"]:
        raise ValueError(f"the weights file {path} is corrupt: its SHA-256 does not match the metadata")
    try:
        sd = load(raw)
    except Exception as e:  # safetensors' own error types
        raise ValueError(f"the weights file {path} cannot be parsed: {e}") from None
    return build_model(target_config(meta["config"], meta_path or path), sd)


def target_config(raw: dict, path: Path) -> SDARConfig:
    """The metadata's ``config``, its field types checked as a checkpoint's config.json."""
    try:
        check_field_types(raw)
        return SDARConfig.from_dict(raw)
    except (TypeError, ValueError) as e:
        raise ValueError(f"the target metadata {path}: config: {e}") from None


def build_model(cfg: SDARConfig, state_dict: dict) -> SDARModel:
    """An eval-mode float32 ``SDARModel`` from a (possibly tied, float16) state dict."""
    model = SDARModel(cfg)
    if cfg.tie_word_embeddings and "model.embed_tokens.weight" in state_dict:
        state_dict = {**state_dict, "lm_head.weight": state_dict["model.embed_tokens.weight"]}
    bad = [k for k, v in state_dict.items() if not torch.isfinite(v).all()]
    if bad:
        raise ValueError(f"the weights hold non-finite values (NaN or inf) in {', '.join(bad[:6])}")
    want = model.state_dict()
    wrong = [
        f"{k} {tuple(v.shape)} (config wants {tuple(want[k].shape)})"
        for k, v in sorted(state_dict.items())
        if k in want and v.shape != want[k].shape
    ]
    if wrong:
        more = f" and {len(wrong) - 4} more" if len(wrong) > 4 else ""
        raise ValueError(
            f"the weights do not match the config: {len(wrong)} wrong-shaped tensor(s): {', '.join(wrong[:4])}{more}"
        )
    missing, unexpected = model.load_state_dict({k: v.float() for k, v in state_dict.items()}, strict=False)
    if missing or unexpected:
        raise ValueError(f"the weights do not match the config: missing {missing}, unexpected {unexpected}")
    return model.float().eval()


def save_target(model, tokenizer, meta: dict, directory: Path, name: str) -> Path:
    """Write a target as ``load_target`` reads it: ``NAME.safetensors`` (float16, the tied head
    left out), ``NAME.tokenizer.json`` and ``NAME.json`` (``meta`` with its "weights" and
    "tokenizer" entries filled in, the SHA-256 of both files among them), each atomically and the
    metadata last, so a kill leaves the old target or one refused by name. Returns the weights."""
    try:
        from safetensors.torch import save_file  # optional dependency (the [cli] extra)
    except ImportError:
        raise ImportError("exporting needs the 'safetensors' package: pip install 'spotref[cli]'") from None
    directory.mkdir(parents=True, exist_ok=True)
    sd = {
        k: v.detach().to(torch.float16).contiguous()
        for k, v in model.state_dict().items()
        if not (model.config.tie_word_embeddings and k == "lm_head.weight")
    }
    weights, text = directory / f"{name}.safetensors", tokenizer.to_json()
    with atomic_path(weights) as tmp:
        save_file(sd, str(tmp))
    atomic_write_text(directory / f"{name}.tokenizer.json", text)
    meta = {
        **meta,
        "weights": {
            "file": weights.name,
            "dtype": "float16",
            "bytes": weights.stat().st_size,
            "sha256": hashlib.sha256(weights.read_bytes()).hexdigest(),
        },
        "tokenizer": {
            "kind": tokenizer.kind,
            "file": f"{name}.tokenizer.json",
            "vocab_size": tokenizer.vocab_size,
            "eos_id": tokenizer.eos_id,
            "mask_id": tokenizer.mask_id,
            "split_digits": tokenizer.split_digits,
            "sha256": hashlib.sha256(text.encode("utf-8")).hexdigest(),
        },
    }
    atomic_write_text(directory / f"{name}.json", json.dumps(meta, indent=1) + "\n")
    return weights
