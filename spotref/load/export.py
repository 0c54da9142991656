"""Write an SDAR checkpoint directory that ``SDARModel.from_pretrained`` (and transformers) can
read: config.json, safetensors shards with the Hugging Face names, and the shard index; every
file written atomically."""

from __future__ import annotations

import json
import re
from pathlib import Path

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
