"""``save_pretrained``: a model written as a checkpoint directory in the official layout (docs/spec.md
section 1), which ``spotref.from_pretrained`` reads back bit for bit; the tests build their
checkpoints with it. The installed package reads checkpoints (``spotref.checkpoint``); writing
them is the repository's.

It writes one file or shards and their index into the directory it is given, each file whole
(``atomic_files``: all their bytes first, then the renames) and nothing else in the directory
touched; what the reader would refuse (non-finite weights, a precision it does not read) it
refuses before writing. Every family's model is written with its family's ``identity``
(``IDENTITIES``: config.json's ``architectures`` and ``model_type``).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import tempfile
from pathlib import Path

import torch

from spotref.checkpoint import CONFIG, DTYPES, INDEX, SINGLE, listing, read_json, resolve_dtype, stored_tensors
from spotref.checks import check_path
from spotref.configs import (
    DREAM_IDENTITY,
    LLADA_IDENTITY,
    SDAR_IDENTITY,
    SDAR_MOE_IDENTITY,
    check_field_types,
    check_supported,
)
from spotref.configs_llada2 import LLADA2_IDENTITY
from spotref.files import _mode, check_writable, clean_stale, shipped_writes
from spotref.spec.rules import ALIASES, PRECISIONS, SERVED, precision_name

IDENTITIES = {
    "sdar": SDAR_IDENTITY,
    "llada": LLADA_IDENTITY,
    "llada2": LLADA2_IDENTITY,
    "dream": DREAM_IDENTITY,
}  # model.family -> config.json's
TYPED = {"sdar_moe": SDAR_MOE_IDENTITY}  # a model's checkpoint_type where its family has several layouts


SHARD = re.compile(r"model-\d+-of-\d+\.safetensors")  # the shard names this writer (and HF) gives


def save_pretrained(
    model,
    path,
    dtype=None,
    max_shard_bytes: int | None = None,
    shard_of=None,
    update_shipped: bool = False,
    identity: dict | None = None,
) -> Path:
    """Write ``model`` as a checkpoint in the official layout into the directory ``path``; returns it.

    Only the checkpoint's own files are written (``model.safetensors`` or the shards and
    ``model.safetensors.index.json``, then ``config.json``), each whole (``spotref.files.
    atomic_files``: all bytes first, then the renames); the weight files of an earlier save that
    this one does not write (its shards, by the shard name pattern or its index's listing, its
    single file or index) are removed by name. Everything else in ``path`` is left as it was: other
    files, links, the directory itself (a link to a directory stays one; a read-only directory is
    refused). ``path`` is created when absent. ``update_shipped``: allow a path inside the package.

    Refused before anything is written, as ``from_pretrained`` would refuse the result: a stored
    dtype it does not read back (``dtype`` or the model's, not bfloat16 / float16 / float32), a
    tensor that is NaN or inf in the stored dtype (float16 overflows past 65504), a config whose
    precision (``torch_dtype`` / ``dtype`` / ``decision_precision``) or fields it refuses.

    dtype: the stored dtype (default: the model's). One ``model.safetensors``, or shards with
    ``model.safetensors.index.json`` when ``max_shard_bytes`` is given (greedy, in name order)
    or ``shard_of(name) -> shard index`` maps names to shards (to mimic a real index). A tied
    head is not written (``lm_head.weight`` absent means tied, as in Qwen3 checkpoints).
    ``identity``: config.json's ``architectures`` and ``model_type`` (None: the model's family's, ``IDENTITIES``).
    """
    from safetensors.torch import save  # bytes: its save_file leaves a .tmpXXXXXX of its own when killed

    check_path("save_pretrained: path", path)
    dtype = stored_dtype(model, dtype)
    state = stored_state(model, dtype)
    family = getattr(model, "family", "sdar")
    if identity is None and family not in IDENTITIES:
        raise ValueError(
            f"save_pretrained: model.family must be one of {', '.join(map(repr, IDENTITIES))}, got {family!r:.60}"
        )
    own = TYPED.get(getattr(model, "checkpoint_type", None)) or IDENTITIES[family]
    config = config_text(model, dtype, own if identity is None else identity)
    layout = file_layout(state, max_shard_bytes, shard_of)
    written = [*layout, *([] if SINGLE in layout else [INDEX]), CONFIG]
    with shipped_writes(update_shipped):
        root = save_dir(path, written)
        stale = sorted(weight_files_of(root) - set(written))
        with atomic_files(root) as stage:
            write_files(stage, state, config, layout, save)
            for name in stale:
                stage.remove(name)
    return Path(path)


def stored_dtype(model, dtype) -> torch.dtype:
    """The dtype to store: ``dtype``, else the model's; one ``from_pretrained`` reads back as such."""
    if dtype is not None:
        try:
            return resolve_dtype(dtype)
        except ValueError:
            raise ValueError(
                f"save_pretrained: dtype={dtype!r} is not a precision from_pretrained reads back: "
                f"use bfloat16, float16 or float32"
            ) from None
    have = next(model.parameters()).dtype
    if have not in DTYPES.values():
        raise ValueError(
            f"save_pretrained: the model's weights are {str(have).removeprefix('torch.')}, which "
            f"from_pretrained does not read back as such (it reads bfloat16, float16, float32): pass dtype="
        )
    return have


def stored_state(model, dtype: torch.dtype) -> dict:
    """{name: tensor} as stored (on the CPU, in ``dtype``); a tensor with NaN or inf values in
    ``dtype`` is refused by name, as the reader refuses it."""
    state = {n: t.detach().to("cpu", dtype).contiguous() for n, t in stored_tensors(model).items()}
    bad = [n for n, t in state.items() if t.is_floating_point() and not torch.isfinite(t).all()]
    if bad:
        name = str(dtype).removeprefix("torch.")
        raise ValueError(
            f"save_pretrained: {len(bad)} tensor(s) hold NaN or inf once stored as {name}: "
            f"{listing(bad)}; from_pretrained refuses such a checkpoint"
            + (" (float16 overflows past 65504: store bfloat16 or float32)" if dtype == torch.float16 else "")
        )
    return state


def config_text(model, dtype: torch.dtype, identity: dict) -> str:
    """config.json's text: the model's config as stored in ``dtype`` (``served_as``) with the
    family's ``identity``, checked as the reader checks it."""
    cfg = {**served_as(model.config.to_dict(), dtype), **identity}
    try:
        text = json.dumps(cfg, indent=2) + "\n"
        check_field_types(json.loads(text))
        check_supported(cfg)
    except (TypeError, ValueError) as e:
        raise ValueError(f"save_pretrained: from_pretrained would refuse the model's config: {e}") from None
    return text


def file_layout(state: dict, max_shard_bytes, shard_of) -> dict:
    """{weight file name: its tensor names}: ``model.safetensors``, or the shards of an index."""
    groups = shard_groups(state, max_shard_bytes, shard_of)
    if len(groups) == 1 and max_shard_bytes is None and shard_of is None:
        return {SINGLE: groups[0]}
    return {f"model-{i + 1:05d}-of-{len(groups):05d}.safetensors": names for i, names in enumerate(groups)}


def save_dir(path, names) -> Path:
    """The directory to save into, created when absent; ``ValueError`` for one that is not a
    directory, a link to nothing, a shipped or read-only one, or a name of ``names`` taken by a
    directory."""
    root = Path(path)
    if root.is_symlink() and not root.exists():
        raise ValueError(f"save_pretrained: {root} is a symbolic link to {os.readlink(root)!r}, which does not exist")
    if root.exists() and not root.is_dir():
        raise ValueError(f"save_pretrained: {root} exists and is not a directory")
    for name in names:
        check_writable(root / name)
    root.mkdir(parents=True, exist_ok=True)
    return root


def weight_files_of(root: Path) -> set:
    """The weight files of an earlier save in ``root`` (names): ``model.safetensors``, the index,
    the files named as shards, and the plain ``.safetensors`` names its index lists; directories
    never."""
    names = {e.name for e in root.iterdir() if e.name in (SINGLE, INDEX) or SHARD.fullmatch(e.name)}
    names |= listed_shards(root)
    return {n for n in names if (root / n).is_symlink() or not (root / n).is_dir()}


def listed_shards(root: Path) -> set:
    """The shard names an existing index lists that are plain ``.safetensors`` names in ``root``."""
    try:
        wmap = read_json(root / INDEX, "the weight index").get("weight_map")
    except ValueError:  # absent or unreadable: nothing listed
        return set()
    shards = wmap.values() if isinstance(wmap, dict) else []
    return {f for f in shards if isinstance(f, str) and f.endswith(".safetensors") and plain_name(f)}


def plain_name(name: str) -> bool:
    """A file name of the directory itself: no folder, no ``..``."""
    return name not in ("", ".", "..") and "\\" not in name and Path(name).name == name


def write_files(stage, state: dict, config: str, layout: dict, save) -> None:
    """The checkpoint's files into the ``atomic_files`` ``stage``: weights, index, config last.
    Every byte goes through the stage's own temporary files (``save``: safetensors' bytes), so a
    kill leaves only those, which the next save removes."""
    for fname, names in layout.items():
        stage.path(fname).write_bytes(save({n: state[n] for n in names}, metadata={"format": "pt"}))
    if SINGLE not in layout:
        total = sum(t.numel() * t.element_size() for t in state.values())
        wmap = {n: fname for fname, names in layout.items() for n in names}
        index = {"metadata": {"total_size": total}, "weight_map": dict(sorted(wmap.items()))}
        stage.write_text(INDEX, json.dumps(index, indent=2) + "\n")
    stage.write_text(CONFIG, config)


def served_as(cfg: dict, stored: torch.dtype) -> dict:
    """The config with ``torch_dtype`` the stored dtype (what loaders read it as) and, where the
    model is served in another precision (its config's ``decision_precision``, else its old
    ``torch_dtype`` / ``dtype``), that precision kept as ``decision_precision``, by its canonical
    name (``precision_name``; a value naming no float type serves as "auto", docs/spec.md section
    2.1, and is written so; a ``decision_precision`` naming none is refused, as its reader
    refuses it): what is written, ``from_pretrained`` reads back."""
    cfg = dict(cfg)
    found = [(k, cfg.pop(k)) for k in SERVED if k in cfg]  # every key popped
    key, served = next(((k, v) for k, v in found if v), (None, None))
    cfg["torch_dtype"] = str(stored).removeprefix("torch.")
    if key == "decision_precision" and precision_name(served) is None:  # the reader refuses it
        raise ValueError(
            f"save_pretrained: the model's config has decision_precision={served!r}, a precision "
            f"from_pretrained does not read: use one of {', '.join(PRECISIONS)} (or an alias: {', '.join(ALIASES)})"
        )
    served = None if served is None else (precision_name(served) or "auto")
    if served is not None and served != cfg["torch_dtype"]:
        cfg["decision_precision"] = served
    return cfg


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


@contextlib.contextmanager
def atomic_files(directory):
    """Write several files of the existing ``directory`` together, each whole (a ``Staging``).

    Inside the block, ``stage.path(name)`` (or ``stage.write_text``) gives a temporary file
    ``.NAME.PID.XXXX.tmp`` in ``directory`` to write ``name``'s bytes to, and ``stage.remove(name)``
    marks a file of ``directory`` to delete. When the block ends without an error every temporary
    file is fsynced, then renamed onto its name (``os.replace``, in the order staged), then the
    marked files are removed: the long part (writing the bytes) changes nothing a reader sees. On
    any error (KeyboardInterrupt included) the temporary files are removed and ``directory`` is
    left as it was. Nothing else in ``directory`` is touched: not its other entries, not the
    directory itself (its inode, its mode), and a name that is a link is replaced by the new file,
    never written through."""
    stage = Staging(Path(directory))
    try:
        yield stage
        stage.commit()
    except BaseException:
        stage.discard()
        raise


class Staging:
    """The files one ``atomic_files`` block writes and removes in ``directory``."""

    def __init__(self, directory: Path):
        self.directory = directory
        self.pending: dict[str, Path] = {}  # name -> its temporary file, until renamed
        self.removals: list[str] = []

    def path(self, name: str) -> Path:
        """A temporary file in the directory for ``name`` (for writers that want a file name)."""
        dest = check_writable(self.directory / name)
        clean_stale(dest)
        fd, tmp = tempfile.mkstemp(dir=self.directory, prefix=f".{name}.{os.getpid()}.", suffix=".tmp")
        os.close(fd)
        self.pending[name] = Path(tmp)
        return Path(tmp)

    def write_text(self, name: str, text: str) -> None:
        self.path(name).write_text(text, encoding="utf-8")

    def remove(self, name: str) -> None:
        """Delete ``name`` (the name only: a link, not what it leads to) after the renames."""
        self.removals.append(name)

    def commit(self) -> None:
        for tmp in self.pending.values():
            with open(tmp, "rb+") as f:  # on disk before the renames
                os.fsync(f.fileno())
        for name, tmp in list(self.pending.items()):
            os.chmod(tmp, _mode(self.directory / name))  # mkstemp makes 0600 files
            os.replace(tmp, self.directory / name)
            del self.pending[name]
        for name in self.removals:
            (self.directory / name).unlink(missing_ok=True)
        fsync_dir(self.directory)

    def discard(self) -> None:
        for tmp in self.pending.values():
            tmp.unlink(missing_ok=True)


def fsync_dir(directory: Path) -> None:
    """The directory's entries (renames, removals) on disk, where the system allows it."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
