"""Names into objects: the one place where a target's name becomes its model, a drafter's name
its drafter and a core's name its module.

Its two process-wide caches, each keyed by value: ``_TARGETS`` by a target's file and the
modification times of its files, ``_DRAFTERS`` by a drafter's name or checkpoint path and its
modification time (so the same name finds the same object and a rewritten file is loaded again).
What loads is kept, never what is measured: ``budget="auto"`` times the machine for each decode
that asks for it (``auto_budget``), so no decode's choice depends on an earlier one's timing.
The targets' loader is imported when a target is first named and a drafter's module when a
drafter is first named: exact decoding with a model object loads neither, and the cost model
behind ``budget="auto"`` loads when that budget is asked for, and the trace recorder when a
trace is asked for (docs/architecture.md lists the few places that import on demand).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

import spotref
from spotref.spec.decode import CANVAS_FAMILIES

if TYPE_CHECKING:
    from spotref.load.targets import Target

# --- targets ----------------------------------------------------------------------------------

_TARGETS: dict = {}  # (metadata path, mtimes of metadata and the weights it names) -> Target


def target(name: str, directory: Path | str | None = None) -> Target:
    """``load_target(name, directory)``, loaded once per process while its files are unchanged.
    The Target is shared: take ``load_target`` for a copy of your own to change."""
    from spotref.load.targets import TARGETS_DIR, load_target, weights_of  # a model object needs no loader

    meta = Path(name) if name.endswith(".json") else Path(directory or TARGETS_DIR, f"{name}.json")
    key = (str(meta.resolve()), _mtime(meta), _mtime(weights_of(meta)))  # the weights its metadata names
    if key not in _TARGETS:
        _TARGETS[key] = load_target(name, directory or TARGETS_DIR)
    return _TARGETS[key]


def _mtime(path: Path) -> int | None:
    try:
        return path.stat().st_mtime_ns
    except OSError:
        return None


def resolve_model(model, precheck=None):
    """A model with one family's contract (docs/spec.md section 1.1), from a model, a ``Target``
    or a name: SDAR's (``SDARModel``: ``prefill``, ``denoise``, ``store``) or the whole canvas's
    (LLaDA, Dream: ``model(ids)``, a ``family`` of ``decode.CANVAS_FAMILIES``). ``precheck``:
    called on a target name's ``Shape`` (its metadata, no weight read) before the target loads."""
    sdar = lambda m: all(hasattr(m, a) for a in ("config", "prefill", "denoise", "store"))
    canvas = lambda m: callable(m) and hasattr(m, "config") and getattr(m, "family", None) in CANVAS_FAMILIES
    contract = lambda m: sdar(m) or canvas(m)
    if isinstance(model, str):
        from spotref.load.targets import target_shape

        if precheck is not None and (shape := target_shape(model)) is not None:
            precheck(shape)
        try:
            return target(model).model
        except ValueError as e:
            raise ValueError(f"model {model!r}: {e}") from None
    if contract(model):
        return model
    if contract(getattr(model, "model", None)) and hasattr(model, "tokenizer"):  # a Target
        return model.model
    raise ValueError(
        f"model must be an SDARModel, a whole-canvas model (family llada or dream), a spotref Target "
        f"or a bundled target name (spotref.list_targets()), got {type(model).__name__}"
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
    """One object per key: a stateless drafter (or a checkpoint's, loaded once) is shared."""
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


def resolve_drafter(drafter, model, block_size: int | None = None):
    """A drafter for ``model``: a registered name (``DRAFTERS``), a bundled SPOT drafter's name or a
    ``.pt`` checkpoint path (``load_drafter``), or any callable ``view -> Draft`` (kept as is).
    ``block_size``: the block length decoded in (None: not known yet); a drafter that declares
    another (a ``SpotDrafter`` made with ``strict=True``: ``block_size``) is refused here, before
    any pass. Drafters are not strict by default: one trained on any target drafts for any other."""
    resolved = named_drafter(drafter, model)
    declared = getattr(resolved, "block_size", None)
    if block_size is not None and declared is not None and declared != block_size:
        label = repr(os.fspath(drafter)) if isinstance(drafter, (str, os.PathLike)) else type(drafter).__name__
        raise ValueError(
            f"drafter {label} was trained for block size {declared}, the target's block size is "
            f"{block_size}, and it is strict (strict=True): leave strict out to transfer it"
        )
    return resolved


def named_drafter(drafter, model):
    """``resolve_drafter``'s lookup: the drafter a name or path gives, or the callable as it is."""
    check_drafter(drafter)
    if not isinstance(drafter, (str, os.PathLike)):
        return drafter
    name = os.fspath(drafter)
    if model is None and name in MODEL_DRAFTERS:
        raise ValueError(
            f"drafter {name!r} is the target's own trained drafter: use "
            f"Speculator.for_model(model, ...) or pass spotref.load_drafter(...)"
        )
    if name in DRAFTERS:
        return DRAFTERS[name](model)
    from spotref.load.drafters import load_drafter

    return load_drafter(name)


def check_drafter(drafter) -> None:
    """A drafter ``named_drafter`` takes: a registered name, a bundled drafter's name or a ``.pt``
    path (``is_checkpoint_name``), or a callable; else ``ValueError`` naming it. Nothing loads."""
    if isinstance(drafter, (str, os.PathLike)):
        name = os.fspath(drafter)
        if name not in DRAFTERS and not is_checkpoint_name(name):
            raise ValueError(f"drafter {name!r} is unknown; known: {known_names()}")
    elif not callable(drafter):
        raise ValueError(f"drafter must be None, a name or a callable, got {type(drafter).__name__}")


def is_checkpoint_name(name: str) -> bool:
    """Whether ``load_drafter`` would look for ``name``: a bundled drafter or a ``.pt`` path."""
    from spotref.load.drafters import list_checkpoints

    return name.endswith(".pt") or name in list_checkpoints() or Path(name).is_file()


def known_names() -> str:
    from spotref.load.drafters import list_checkpoints

    return f"{', '.join(DRAFTERS)}, a bundled drafter ({', '.join(list_checkpoints()) or 'none'}) or a drafter .pt path"


# --- budget="auto": a measurement on this machine --------------------------------------------


def auto_budget(model, drafter, depth: int, rule, width: int | None = None) -> tuple:
    """budget="auto": (the drafter cut per round, the cost model's N, the width) for this model,
    drafter, depth, decision rule and width on this machine (``spotref.drafters.budget.auto_way``);
    with a width, N <= width and the pass is measured at that width; without, the width is chosen
    too (None: rows alone). Measured at each call, kept nowhere: a ``Speculator`` measures for
    itself, and a caller reuses its choice only by passing it on (``Speculator.round_drafter``,
    ``budget`` and ``width``)."""
    from spotref.drafters import budget  # the cost model loads when asked for

    return budget.auto_way(model, drafter, depth, rule, width)


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


# --- traces -----------------------------------------------------------------------------------


def recorder():
    """A fresh ``spotref.trace.record.Recorder``: the trace module is imported when a trace is
    first asked for (``generate(..., trace=True)``), so decoding without one loads none of it."""
    from spotref.trace.record import Recorder

    return Recorder()
