"""Trained drafters on disk, and the one registry of drafter names.

Shipped SPOT drafter checkpoints live in ``order_models/`` beside this file, one per bundled
target (``NAME.pt``: the order model's weights and a JSON header with the target's fingerprint,
held-out accuracies, offline acceptance curves and the calibrated baseline's rank graph).
``load_drafter(name_or_path)`` loads one; ``drafter_for(model, kind)`` finds the shipped one
whose target fingerprint matches ``model`` (``drafter="spot"`` / ``"calibrated"``).
``DRAFTERS`` maps every drafter name to a factory of the model; ``resolve_drafter`` is what
``spotref.generate`` and the CLI call.
"""
from __future__ import annotations

import hashlib
import json
import os
import warnings
from pathlib import Path

import torch

from spotref.drafters import order
from spotref.drafters.calibrated import CalibratedDrafter
from spotref.drafters.confidence import ConfidenceDrafter
from spotref.drafters.spot import SpotDrafter
from spotref.load.files import atomic_save

ORDER_DIR = Path(__file__).parent / "order_models"


def save_order_model(path, model: order.OrderModel, meta: dict) -> None:
    """A drafter checkpoint: float16 weights + a JSON-able header (block size, feature width...)."""
    header = {"format": "spotref-order-model", "version": 1, "config": model.config, **meta}
    sd = {k: v.detach().half() for k, v in model.state_dict().items()}
    atomic_save({"header": header, "state_dict": sd}, path)       # a kill leaves the old file


def load_order_model(path, block_size: int | None = None) -> tuple[order.OrderModel, dict]:
    """(model in eval mode, header); ``ValueError`` for a corrupt or mismatched checkpoint."""
    try:
        blob = torch.load(path, map_location="cpu", weights_only=True)
    except FileNotFoundError:
        raise ValueError(f"no drafter checkpoint at {path}") from None
    except Exception as e:                                      # pickle / zip errors
        first = (str(e).strip().splitlines() or [""])[0]                          # one line
        raise ValueError(f"the drafter checkpoint {path} is corrupt: {type(e).__name__}: {first}") from None
    header = blob.get("header") if isinstance(blob, dict) else None
    if not isinstance(header, dict) or header.get("format") != "spotref-order-model":
        raise ValueError(f"{path} is not a spotref drafter checkpoint (no spotref-order-model header)")
    return order.build(header, blob.get("state_dict"), path, block_size), header


def model_fingerprint(model, weights: bool = True) -> str:
    """A short hash of the target's config and (``weights``) first embedding values."""
    cfg = json.dumps(model.config.to_dict(), sort_keys=True, default=str).encode()
    w = model.model.embed_tokens.weight.detach().flatten()[:256].half().cpu().numpy().tobytes() if weights else b""
    return hashlib.sha256(cfg + w).hexdigest()[:16]


def load_drafter(name, strict: bool = True, directory: Path | str | None = None) -> SpotDrafter:
    """A trained SPOT drafter: a bundled target's name (``list_checkpoints()``) or a checkpoint
    path (str or ``Path``). A bad name or checkpoint raises ``ValueError`` naming it."""
    if isinstance(name, os.PathLike):
        name = os.fspath(name)
    if not isinstance(name, str) or not name:
        raise ValueError(f"load_drafter needs a drafter name (bundled: "
                         f"{', '.join(list_checkpoints(directory)) or 'none'}) or a checkpoint path, got {name!r}")
    path = Path(name)
    if not (name.endswith(".pt") or path.is_file()):
        path = Path(directory or ORDER_DIR, f"{name}.pt")
        if not path.is_file():
            raise ValueError(f"no SPOT drafter named {name!r}; bundled: {', '.join(list_checkpoints(directory)) or 'none'}")
    model, header = load_order_model(path)
    return SpotDrafter(model, header, strict=strict)


def list_checkpoints(directory: Path | str | None = None) -> list[str]:
    return sorted(p.stem for p in Path(directory or ORDER_DIR).glob("*.pt"))


_HEADERS: dict = {}


def find_checkpoint(model, directory: Path | str | None = None) -> Path | None:
    """The shipped checkpoint trained on ``model`` (matched by fingerprint), or None. Failing
    that, one trained on a model of the same config (another version of the target: still exact,
    maybe less accurate), with a warning."""
    fp, cfg = model_fingerprint(model), model_fingerprint(model, weights=False)
    headers = [(p, _header(p)) for p in sorted(Path(directory or ORDER_DIR).glob("*.pt"))]
    for path, h in headers:
        if h.get("target", {}).get("fingerprint") == fp:
            return path
    for path, h in headers:
        if h.get("target", {}).get("config_fingerprint") == cfg:
            warnings.warn(f"{path.name} was trained on another version of this target (same config, "
                          f"other weights): output stays exact, acceptance may be lower")
            return path
    return None


def _header(path: Path) -> dict:
    key = (str(path), path.stat().st_mtime)
    if key not in _HEADERS:
        try:
            _HEADERS[key] = load_order_model(path)[1]
        except ValueError:
            _HEADERS[key] = {}
    return _HEADERS[key]


_DRAFTERS: dict = {}


def drafter_for(model, kind: str, directory: Path | str | None = None):
    """``drafter="spot"`` or ``"calibrated"``: the shipped drafter matching ``model`` (loaded once
    per process and checkpoint, so repeated ``generate`` calls share one object)."""
    path = find_checkpoint(model, directory)
    if path is None:
        raise ValueError(f"drafter {kind!r}: no shipped drafter checkpoint matches this model (bundled: "
                         f"{', '.join(list_checkpoints(directory)) or 'none'}); train one with "
                         f"`spotref train-drafter` or pass spotref.load_drafter(path)")
    key = (kind, str(path), path.stat().st_mtime)
    if key not in _DRAFTERS:
        if kind == "spot":
            _DRAFTERS[key] = load_drafter(str(path))
        else:
            _DRAFTERS[key] = CalibratedDrafter.from_header(_header(path), path)
    return _DRAFTERS[key]


MODEL_DRAFTERS = ("calibrated", "spot")   # the target's own: they need the model to be found
CONFIDENCE, CONFIDENCE_CHAIN = ConfidenceDrafter(), ConfidenceDrafter(chain=True)   # stateless: one each,
                                                 # so budget="auto"'s per-drafter measurement is reused
DRAFTERS = {                     # the one registry of drafter names (generate, the CLI, the tools)
    "confidence": lambda model: CONFIDENCE,
    "confidence-chain": lambda model: CONFIDENCE_CHAIN,
    "calibrated": lambda model: drafter_for(model, "calibrated"),
    "spot": lambda model: drafter_for(model, "spot"),
}


def resolve_drafter(drafter, model):
    """A drafter for ``model``: a registered name (``DRAFTERS``), a bundled SPOT drafter's name or a
    ``.pt`` checkpoint path (``load_drafter``), or any callable ``view -> Draft`` (kept as is)."""
    if isinstance(drafter, (str, os.PathLike)):
        name = os.fspath(drafter)
        if name in DRAFTERS:
            return DRAFTERS[name](model)
        if is_checkpoint_name(name):
            return load_drafter(name)
        raise ValueError(f"drafter {name!r} is unknown; known: {known_names()}")
    if not callable(drafter):
        raise ValueError(f"drafter must be None, a name or a callable, got {type(drafter).__name__}")
    return drafter


def is_checkpoint_name(name: str) -> bool:
    """Whether ``load_drafter`` would look for ``name``: a bundled drafter or a ``.pt`` path."""
    return name.endswith(".pt") or name in list_checkpoints() or Path(name).is_file()


def known_names() -> str:
    return (f"{', '.join(DRAFTERS)}, a bundled drafter ({', '.join(list_checkpoints()) or 'none'}) "
            f"or a drafter .pt path")
