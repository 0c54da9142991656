"""spotref: the reference implementation of SPOT, lossless speculative decoding for
block-diffusion language models (SDAR). See docs/spec.md and the README.

The tree/verification core exists twice: ``spotref.spec.core`` (pure Python, the specification) and
``spotref._core`` (its Cython twin, built from ``_ext/core.pyx``). ``SPOTREF_NO_EXTENSIONS=1``
skips the build and forces the pure core; otherwise the import falls back to the pure core only
when the extension is absent (ImportError). ``spotref.EXTENSION`` is True when the compiled core is active.

The public names below are imported on first use (PEP 562), so ``import spotref`` and the
``spotref --help`` command do not pay for importing torch; they behave as plain attributes.
"""

import importlib
import os

from spotref.spec import core as _pure_core

_LAZY = {
    "generate": "spotref.api",
    "Speculator": "spotref.api",
    "Result": "spotref.spec.decode",
    "from_pretrained": "spotref.checkpoint",
    "Draft": "spotref.spec.draft",
    "View": "spotref.spec.draft",
    "ConfidenceDrafter": "spotref.drafters.confidence",
    "load_drafter": "spotref.load.drafters",
    "list_targets": "spotref.load.targets",
    "load_target": "spotref.load.targets",
}


def __getattr__(name: str):
    """The lazily imported public names, and submodules (``spotref.api``) on first access."""
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    if not name.startswith("_"):
        try:
            return importlib.import_module(f"spotref.{name}")
        except ModuleNotFoundError as e:
            if e.name != f"spotref.{name}":
                raise
    raise AttributeError(f"module 'spotref' has no attribute {name!r}")


def __dir__():
    return sorted(set(__all__) | set(_LAZY))  # the public names, not this module's own imports


if os.environ.get("SPOTREF_NO_EXTENSIONS"):
    _active_core, EXTENSION = _pure_core, False
else:
    try:
        _active_core, EXTENSION = importlib.import_module("spotref._core"), True
    except ImportError:
        _active_core, EXTENSION = _pure_core, False


def core_module(name: str | None = None):
    """The active core, or by name: ``"py"`` (pure) or ``"c"`` (the compiled twin)."""
    if name is None:
        return _active_core
    if name == "py":
        return _pure_core
    if name == "c":
        return importlib.import_module("spotref._core")  # ImportError when not built
    raise ValueError(f"core must be 'py' or 'c', got {name!r}")


__all__ = [
    "generate",
    "Speculator",
    "Result",
    "Draft",
    "View",
    "ConfidenceDrafter",
    "EXTENSION",
    "core_module",
    "list_targets",
    "load_target",
    "load_drafter",
    "from_pretrained",
]
