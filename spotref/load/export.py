"""The writers of the two model formats spotref reads, every file written atomically:
``save_pretrained``, an SDAR checkpoint directory that ``SDARModel.from_pretrained`` (and
transformers) reads (config.json, safetensors shards with the Hugging Face names, the shard
index; read by ``spotref.checkpoint``), and ``save_target``, a bundled target's three files
(read by ``spotref.load.targets.load_target``)."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

import torch

from spotref.checkpoint import CONFIG, INDEX, SINGLE, resolve_dtype
from spotref.checks import check_path
from spotref.load.files import atomic_dir, atomic_path, atomic_write_text, shipped_writes


def save_pretrained(
    model, path, dtype=None, max_shard_bytes: int | None = None, shard_of=None, update_shipped: bool = False
) -> Path:
    """Write ``model`` as a checkpoint directory in the official layout; returns the path.

    Whole or absent: the files are written into a fresh directory that then replaces ``path``
    (``spotref.load.files.atomic_dir``), so no shard or index of an earlier save survives; other
    files in ``path`` (a tokenizer) are kept. ``update_shipped``: allow a path inside the package.

    dtype: the stored dtype (default: the model's). One ``model.safetensors``, or shards with
    ``model.safetensors.index.json`` when ``max_shard_bytes`` is given (greedy, in name order)
    or ``shard_of(name) -> shard index`` maps names to shards (to mimic a real index). A tied
    head is not written (``lm_head.weight`` absent means tied, as in Qwen3 checkpoints).
    """
    from safetensors.torch import save_file

    check_path("save_pretrained: path", path)
    dtype = resolve_dtype(dtype) if dtype is not None else model.lm_head.weight.dtype
    with shipped_writes(update_shipped), atomic_dir(path, keep=not_checkpoint) as root:
        write(model, root, dtype, max_shard_bytes, shard_of, save_file)
    return Path(path)


def not_checkpoint(name: str) -> bool:
    """Files of a directory that a checkpoint save does not own (kept across saves)."""
    return name not in (CONFIG, SINGLE, INDEX) and not re.fullmatch(r"model-\d+-of-\d+\.safetensors", name)


def write(model, root: Path, dtype, max_shard_bytes, shard_of, save_file) -> None:
    """The checkpoint's files into the (fresh) directory ``root``."""
    state = {n: t.detach().to("cpu", dtype).contiguous() for n, t in model.state_dict().items()}
    if model.config.tie_word_embeddings:
        state.pop("lm_head.weight")
    cfg = {
        **model.config.to_dict(),
        "torch_dtype": str(dtype).removeprefix("torch."),
        "architectures": ["SDARForCausalLM"],
        "model_type": "sdar",
    }
    atomic_write_text(root / CONFIG, json.dumps(cfg, indent=2) + "\n")
    groups = shard_groups(state, max_shard_bytes, shard_of)
    if len(groups) == 1 and max_shard_bytes is None and shard_of is None:
        with atomic_path(root / SINGLE) as tmp:
            save_file(state, str(tmp), metadata={"format": "pt"})
        return
    wmap, total = {}, sum(t.numel() * t.element_size() for t in state.values())
    for i, names in enumerate(groups):
        fname = f"model-{i + 1:05d}-of-{len(groups):05d}.safetensors"
        with atomic_path(root / fname) as tmp:
            save_file({n: state[n] for n in names}, str(tmp), metadata={"format": "pt"})
        wmap.update({n: fname for n in names})
    index = {"metadata": {"total_size": total}, "weight_map": dict(sorted(wmap.items()))}
    atomic_write_text(root / INDEX, json.dumps(index, indent=2) + "\n")


def shard_groups(state: dict, max_shard_bytes, shard_of) -> list:
    """Tensor names grouped into shards (non-empty groups, in order)."""
    if shard_of is not None:
        groups = {}
        for n in state:
            groups.setdefault(int(shard_of(n)), []).append(n)
        return [groups[k] for k in sorted(groups)]
    if max_shard_bytes is None:
        return [list(state)]
    groups, size = [[]], 0
    for n, t in state.items():
        b = t.numel() * t.element_size()
        if groups[-1] and size + b > max_shard_bytes:
            groups.append([])
            size = 0
        groups[-1].append(n)
        size += b
    return groups


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
