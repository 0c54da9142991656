"""Trained drafters on disk: the checkpoint format's reader and writer.

Shipped SPOT drafter checkpoints live in ``order_models/`` beside this file, one per bundled
target (``NAME.pt``: the order model's weights and a JSON header with the target's fingerprint,
held-out accuracies, offline acceptance curves and the calibrated baseline's rank graph).
``load_drafter(name_or_path)`` loads one; ``find_checkpoint(model)`` finds the shipped one
whose target fingerprint matches ``model`` (``drafter="spot"`` / ``"calibrated"``, which
``spotref.names`` resolves).
"""

from __future__ import annotations

import collections
import dataclasses
import hashlib
import io
import json
import os
import pickle
import warnings
import zipfile
from pathlib import Path

import torch

from spotref.drafters import order
from spotref.drafters.spot import SpotDrafter
from spotref.files import atomic_save, not_saved_by_torch
from spotref.spec.rules import DTYPES, SERVED

ORDER_DIR = Path(__file__).parent / "order_models"


def save_order_model(path, model: order.OrderModel, meta: dict) -> None:
    """A drafter checkpoint: float16 weights + a JSON-able header (block size, feature count...).
    ``meta`` is the rest of the header: a loaded header may be passed as it is (its format,
    version and config are written afresh, the config from ``model``)."""
    rest = {k: v for k, v in meta.items() if k not in ("format", "version", "config")}
    header = {"format": "spotref-order-model", "version": 1, "config": model.config, **rest}
    sd = {k: v.detach().half() for k, v in model.state_dict().items()}
    atomic_save({"header": header, "state_dict": sd}, path)  # a kill leaves the old file


def load_order_model(path, block_size: int | None = None) -> tuple[order.OrderModel, dict]:
    """(model in eval mode, header); ``ValueError`` for a corrupt or mismatched checkpoint."""
    why = not_saved_by_torch(path)
    if why is not None:  # torch.load's error spoke of weights_only
        raise ValueError(f"{path} is not a drafter checkpoint: {why}")
    try:
        blob = torch.load(path, map_location="cpu", weights_only=True)
    except FileNotFoundError:
        raise ValueError(f"no drafter checkpoint at {path}") from None
    except pickle.UnpicklingError:  # torch's allow-list: the advice was to load it with weights_only=False
        raise ValueError(
            f"{path} is not a drafter checkpoint: refused, not loaded: it holds objects other than tensors "
            f"and plain data (a drafter checkpoint holds none), which could run code as they load"
        ) from None
    except Exception as e:  # zip errors of a truncated file
        first = (str(e).strip().splitlines() or [""])[0]  # one line
        raise ValueError(f"the drafter checkpoint {path} is corrupt: {type(e).__name__}: {first}") from None
    header = blob.get("header") if isinstance(blob, dict) else None
    if not isinstance(header, dict) or header.get("format") != "spotref-order-model":
        raise ValueError(f"{path} is not a spotref drafter checkpoint (no spotref-order-model header)")
    return order.build(header, blob.get("state_dict"), path, block_size), header


def model_fingerprint(model, weights: bool = True) -> str:
    """A short hash of the target's architecture (``architecture``) and (``weights``) first
    embedding values: what the model computes, not how its config was written, so a target saved
    (``save_pretrained``) and read back keeps its drafter."""
    cfg = json.dumps(architecture(model.config), sort_keys=True, default=str).encode()
    embedding = next(m for m in model.modules() if isinstance(m, torch.nn.Embedding))  # any family's
    w = embedding.weight.detach().flatten()[:256].half().cpu().numpy().tobytes() if weights else b""
    return hashlib.sha256(cfg + w).hexdigest()[:16]


def architecture(config) -> dict:
    """The config's own fields (not the keys it merely carries in ``extra``: ``architectures``,
    ``model_type``, the stored ``torch_dtype`` a checkpoint adds) and, as ``torch_dtype``, the
    precision the target is served in (``decision_precision``, else ``torch_dtype`` / ``dtype``)
    unless float32 or none. For a config with no other extra keys (the bundled targets') this is
    its ``to_dict()``, so the fingerprints the shipped drafters carry stay the same."""
    d = {f.name: getattr(config, f.name) for f in dataclasses.fields(config) if f.name != "extra"}
    extra = config.extra or {}
    served = next((extra[k] for k in SERVED if extra.get(k)), None)
    name = str(served).removeprefix("torch.") if served is not None else None
    if name in DTYPES and name != "float32":
        d["torch_dtype"] = name
    return d


def load_drafter(name, strict: bool = False, directory: Path | str | None = None) -> SpotDrafter:
    """A trained SPOT drafter: a bundled target's name (``list_checkpoints()``) or a checkpoint
    path (str or ``Path``). It drafts for any target, of any block size, task or family (its
    inputs are block-relative and vocabulary-agnostic; output is exact either way);
    ``strict=True``: only for decodes in its own block size (refused before any pass otherwise).
    A bad name or checkpoint raises ``ValueError`` naming it. A checkpoint
    whose header says ``any_block_size`` (one trained on several targets: ``universal``) runs on a
    target of any block size whatever ``strict`` says."""
    if not isinstance(strict, bool):  # "no" would have meant strict
        raise ValueError(f"strict must be True or False, got {strict!r:.60}")
    if directory is not None and (isinstance(directory, bytes) or not isinstance(directory, (str, os.PathLike))):
        raise ValueError(f"directory must be None or a path (a str or os.PathLike), got {directory!r:.60}")
    if isinstance(name, os.PathLike):
        name = os.fspath(name)
    if not isinstance(name, str) or not name:
        raise ValueError(
            f"load_drafter needs a drafter name (bundled: "
            f"{', '.join(list_checkpoints(directory)) or 'none'}) or a checkpoint path, got {name!r}"
        )
    path = Path(name)
    if not (name.endswith(".pt") or path.is_file()):
        path = Path(directory or ORDER_DIR, f"{name}.pt")
        if not path.is_file():
            raise ValueError(
                f"no SPOT drafter named {name!r}; bundled: {', '.join(list_checkpoints(directory)) or 'none'}"
            )
    model, header = load_order_model(path)
    return SpotDrafter(model, header, strict=strict and not header.get("any_block_size", False))


def list_checkpoints(directory: Path | str | None = None) -> list[str]:
    return sorted(p.stem for p in Path(directory or ORDER_DIR).glob("*.pt"))


_HEADERS: dict = {}


def find_checkpoint(model, directory: Path | str | None = None) -> Path | None:
    """The shipped checkpoint trained on ``model`` (matched by fingerprint), or None. Failing
    that, one trained on a model of the same config (another version of the target: still exact,
    maybe less accurate), with a warning."""
    fp, cfg = model_fingerprint(model), model_fingerprint(model, weights=False)
    headers = [(p, header(p)) for p in sorted(Path(directory or ORDER_DIR).glob("*.pt"))]
    for path, h in headers:
        if h.get("target", {}).get("fingerprint") == fp:
            return path
    for path, h in headers:
        if h.get("target", {}).get("config_fingerprint") == cfg:
            warnings.warn(
                f"{path.name} was trained on another version of this target (same config, "
                f"other weights): output stays exact, acceptance may be lower"
            )
            return path
    return None


def header(path: Path) -> dict:
    """A checkpoint's header, read once per file version ({} for an unreadable file)."""
    key = (str(path), path.stat().st_mtime)
    if key not in _HEADERS:
        try:
            _HEADERS[key] = read_header(path)
        except ValueError:
            _HEADERS[key] = {}
    return _HEADERS[key]


def read_header(path: Path) -> dict:
    """A drafter checkpoint's header without its weights: ``torch.load``'s weights-only reader
    takes 0.4 s over a shipped header (its calibrated graph), and ``find_checkpoint`` reads every
    shipped one. The pickle is read by ``HeaderUnpickler`` (tensors become None); a file it
    cannot read is loaded whole (``load_order_model``, whose errors are ``ValueError``)."""
    try:
        with zipfile.ZipFile(path) as z:
            name = next(n for n in z.namelist() if n.endswith("/data.pkl"))
            blob = HeaderUnpickler(io.BytesIO(z.read(name))).load()
        h = blob["header"]
        if isinstance(h, dict) and h.get("format") == "spotref-order-model":
            return h
    except Exception:  # not a zip, no pickle, a global it refuses: the whole load says what is wrong
        pass
    return load_order_model(path)[1]


class HeaderUnpickler(pickle.Unpickler):
    """Plain data, with torch's tensors (their storages, dtypes and rebuild calls) read as None;
    any other global is refused, so nothing a file names runs as it loads."""

    def find_class(self, module, name):
        if (module, name) == ("collections", "OrderedDict"):
            return collections.OrderedDict
        if module == "torch" or module == "torch._utils" and name.startswith("_rebuild_"):
            return _nothing
        raise pickle.UnpicklingError(f"a drafter header holds no {module}.{name}")

    def persistent_load(self, pid):
        return None


def _nothing(*args, **kwargs):
    return None
