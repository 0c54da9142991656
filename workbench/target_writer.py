"""``save_target``: a model written as a bundled target, as ``spotref.load_target`` reads it
(``spotref.load.targets``: its metadata, float16 weights and tokenizer, each file stored once).
The installed package reads targets; writing them is the repository's (the trainer's export).
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from spotref.checkpoint import stored_tensors
from spotref.files import atomic_write, atomic_write_text
from spotref.load.targets import MODELS, _files_named, _sha256, metadata_files


def save_target(model, tokenizer, meta: dict, directory: Path, name: str) -> Path:
    """Write a target of any family (``MODELS``) as ``load_target`` reads it: its weights
    (float16, the tied head left out) and its tokenizer, each stored once (``stored_file``: a
    file of the directory that holds these very bytes already, else ``NAME.safetensors`` /
    ``NAME.tokenizer.json``, written atomically), then ``NAME.json`` (``meta`` with "config" the
    model's where it gives none, "family" the model's but for SDAR (absent), and "weights" and
    "tokenizer" entries filled in, the file and the SHA-256 of each among them), so a kill leaves
    the old target or one refused by name. Returns the weights file."""
    try:
        from safetensors.torch import save  # optional dependency (the [cli] extra)
    except ImportError:
        raise ImportError("exporting needs the 'safetensors' package: pip install 'spotref[cli]'") from None
    directory, family = Path(directory), getattr(model, "family", "sdar")
    if family not in MODELS:
        raise ValueError(f"save_target: model.family must be one of {', '.join(map(repr, MODELS))}, got {family!r}")
    sd = {k: v.detach().to(torch.float16).contiguous() for k, v in stored_tensors(model).items()}
    raw, text = save(sd), tokenizer.to_json().encode("utf-8")
    weights = stored_file(directory, name, ".safetensors", raw)
    tok_file = stored_file(directory, name, ".tokenizer.json", text)  # both found before either is written
    for path, data in ((weights, raw), (tok_file, text)):
        if not holds(path, data):
            atomic_write(path, lambda f, data=data: f.write(data))
    meta = {
        **{k: v for k, v in meta.items() if k != "family"},
        **({"family": family} if family != "sdar" else {}),
        "config": meta.get("config") or model.config.to_dict(),
        "weights": {"file": weights.name, "dtype": "float16", "bytes": len(raw), "sha256": _sha256(raw)},
        "tokenizer": {
            "kind": tokenizer.kind,
            "file": tok_file.name,
            "vocab_size": tokenizer.vocab_size,
            "eos_id": tokenizer.eos_id,
            "mask_id": tokenizer.mask_id,
            "split_digits": tokenizer.split_digits,
            "sha256": _sha256(text),
        },
    }
    atomic_write_text(directory / f"{name}.json", json.dumps(meta, indent=1) + "\n")
    return weights


def stored_file(directory: Path, name: str, suffix: str, data: bytes) -> Path:
    """Where a target's file of this kind (``suffix``) is stored: ``NAME + suffix``, or another
    target's file that holds these very bytes already (weights shared by one run's exports at two
    block sizes, a shared tokenizer), else ``NAME + suffix`` to write. ``ValueError`` when that
    file is another target's too and the bytes differ: writing them would break that target."""
    own = directory / f"{name}{suffix}"
    for p in [own, *sorted(q for q in directory.glob(f"*{suffix}") if q != own)]:
        if holds(p, data):
            return p
    users = sorted(m.stem for m in metadata_files(directory) if m.stem != name and own.name in _files_named(m))
    if users:
        raise ValueError(
            f"{own} is also the file of the target(s) {', '.join(users)}: other bytes in it would "
            f"break them; export under another name"
        )
    return own


def holds(path: Path, data: bytes) -> bool:
    """Whether ``path`` is a file with exactly the bytes ``data`` (its size, then its SHA-256)."""
    return path.is_file() and path.stat().st_size == len(data) and _sha256(path.read_bytes()) == _sha256(data)
