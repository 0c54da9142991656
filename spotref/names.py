"""Names into objects: the one place where a target's name becomes its model, a drafter's name
its drafter and a core's name its module.

Every cache here is keyed by value (a name with the modification times of its files, a checkpoint
path and its modification time), so the same name finds the same object and a rewritten file is
loaded again. The targets' loader is imported when a target is first named and a drafter's
module when a drafter is first named: exact decoding with a model object loads neither, and
the cost model behind ``budget="auto"`` loads when that budget is asked for
(docs/architecture.md lists the few places that import on demand).
"""

from __future__ import annotations

import os
import weakref
from pathlib import Path
from typing import TYPE_CHECKING

import spotref
from spotref.checks import check_temperature

if TYPE_CHECKING:
    from spotref.load.targets import Target

# --- targets ----------------------------------------------------------------------------------

_TARGETS: dict = {}  # (metadata path, mtimes of metadata and weights) -> Target


def target(name: str, directory: Path | str | None = None) -> Target:
    """``load_target(name, directory)``, loaded once per process while its files are unchanged.
    The Target is shared: take ``load_target`` for a copy of your own to change."""
    from spotref.load.targets import TARGETS_DIR, load_target  # a model object needs no loader

    meta = Path(name) if name.endswith(".json") else Path(directory or TARGETS_DIR, f"{name}.json")
    key = (str(meta.resolve()), _mtime(meta), _mtime(meta.with_suffix(".safetensors")))
    if key not in _TARGETS:
        _TARGETS[key] = load_target(name, directory or TARGETS_DIR)
    return _TARGETS[key]


def _mtime(path: Path) -> int | None:
    try:
        return path.stat().st_mtime_ns
    except OSError:
        return None


def resolve_model(model):
    """An ``SDARModel`` (or a model with its contract), from a model, a ``Target`` or a name."""
    contract = lambda m: all(hasattr(m, a) for a in ("config", "prefill", "denoise", "store"))
    if isinstance(model, str):
        try:
            return target(model).model
        except ValueError as e:
            raise ValueError(f"model {model!r}: {e}") from None
    if contract(model):
        return model
    if contract(getattr(model, "model", None)) and hasattr(model, "tokenizer"):  # a Target
        return model.model
    raise ValueError(
        f"model must be an SDARModel, a spotref Target or a bundled target name "
        f"(spotref.list_targets()), got {type(model).__name__}"
    )


# --- drafters ---------------------------------------------------------------------------------

MODEL_DRAFTERS = ("calibrated", "spot")  # the target's own: they need the model to be found


def _confidence(model, chain: bool = False):
    from spotref.drafters.confidence import ConfidenceDrafter

    return _shared(("confidence", chain), lambda: ConfidenceDrafter(chain=chain))


DRAFTERS = {  # the one registry of drafter names (generate, the CLI, the tools)
    "confidence": lambda model: _confidence(model),
    "confidence-chain": lambda model: _confidence(model, chain=True),
    "calibrated": lambda model: drafter_for(model, "calibrated"),
    "spot": lambda model: drafter_for(model, "spot"),
}

_DRAFTERS: dict = {}  # ("confidence", chain) or (kind, checkpoint path, mtime) -> the drafter


def _shared(key, make):
    """One object per key: a stateless drafter is shared, so budget="auto"'s measurement of it
    (cached per drafter) is reused."""
    if key not in _DRAFTERS:
        _DRAFTERS[key] = make()
    return _DRAFTERS[key]


def drafter_for(model, kind: str, directory: Path | str | None = None):
    """``drafter="spot"`` or ``"calibrated"``: the shipped drafter matching ``model`` (loaded once
    per checkpoint file, so repeated ``generate`` calls share one object)."""
    from spotref.load import drafters as files

    path = files.find_checkpoint(model, directory)
    if path is None:
        raise ValueError(
            f"drafter {kind!r}: no shipped drafter checkpoint matches this model (bundled: "
            f"{', '.join(files.list_checkpoints(directory)) or 'none'}); train one with "
            f"`spotref train-drafter` or pass spotref.load_drafter(path)"
        )
    if kind == "spot":
        return _shared((kind, str(path), path.stat().st_mtime), lambda: files.load_drafter(str(path)))
    from spotref.drafters.calibrated import CalibratedDrafter

    return _shared(
        (kind, str(path), path.stat().st_mtime), lambda: CalibratedDrafter.from_header(files.header(path), path)
    )


def resolve_drafter(drafter, model):
    """A drafter for ``model``: a registered name (``DRAFTERS``), a bundled SPOT drafter's name or a
    ``.pt`` checkpoint path (``load_drafter``), or any callable ``view -> Draft`` (kept as is)."""
    if isinstance(drafter, (str, os.PathLike)):
        name = os.fspath(drafter)
        if name in DRAFTERS:
            return DRAFTERS[name](model)
        if is_checkpoint_name(name):
            from spotref.load.drafters import load_drafter

            return load_drafter(name)
        raise ValueError(f"drafter {name!r} is unknown; known: {known_names()}")
    if not callable(drafter):
        raise ValueError(f"drafter must be None, a name or a callable, got {type(drafter).__name__}")
    return drafter


def is_checkpoint_name(name: str) -> bool:
    """Whether ``load_drafter`` would look for ``name``: a bundled drafter or a ``.pt`` path."""
    from spotref.load.drafters import list_checkpoints

    return name.endswith(".pt") or name in list_checkpoints() or Path(name).is_file()


def known_names() -> str:
    from spotref.load.drafters import list_checkpoints

    return f"{', '.join(DRAFTERS)}, a bundled drafter ({', '.join(list_checkpoints()) or 'none'}) or a drafter .pt path"


# --- budget="auto" ---------------------------------------------------------------------------

_AUTO_BUDGETS = weakref.WeakKeyDictionary()  # model -> {(drafter, depth, T > 0): (drafter, N)}


def auto_budget(model, drafter, depth: int, temperature: float, width: int | None = None) -> tuple:
    """budget="auto": (the drafter cut per round, the cost model's N) for this model and drafter
    on this machine (measured once per process and model, see ``spotref.drafters.budget``);
    with a width, N <= width and the curve is measured at that width."""
    from spotref.drafters.budget import auto_drafter  # the cost model loads when asked for

    temperature = check_temperature(temperature)  # before any drafter runs: bad input named
    known = _AUTO_BUDGETS.setdefault(model, {})
    key = (drafter, depth, temperature > 0, width)
    if key not in known:
        known[key] = auto_drafter(model, drafter, depth, temperature, width)
    return known[key]


# --- cores ------------------------------------------------------------------------------------


def resolve_core(core):
    """None (the active core), "py", "c" or a core module -> the module."""
    if core is None or isinstance(core, str):
        try:
            return spotref.core_module(core)
        except ImportError:
            raise ImportError(
                "core='c': the compiled core is not built (python setup.py build_ext --inplace), or use core='py'"
            ) from None
    if not all(callable(getattr(core, f, None)) for f in ("build_tree", "walk")):
        raise ValueError(f"core must be None, 'py', 'c' or a core module (spotref.core_module()), got {core!r}")
    return core
