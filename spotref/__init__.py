"""spotref: the reference implementation of SPOT, lossless speculative decoding for
block-diffusion language models (SDAR). See docs/spec.md and the README.

The tree/verification core exists twice: ``spotref.core`` (pure Python, the specification) and
``spotref._core`` (its Cython twin, built from ``_ext/core.pyx``). ``SPOTREF_NO_EXTENSIONS=1``
skips the build and forces the pure core; otherwise the import falls back to the pure core only
when the extension is absent (ImportError). ``spotref.EXTENSION`` says which one is active.
"""
import importlib
import os

from spotref import core as _pure_core
from spotref.api import generate
from spotref.decode import Result
from spotref.draft import Draft, View
from spotref.drafters import ConfidenceDrafter
from spotref.spot import load_drafter
from spotref.targets import list_targets, load_target

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
        return importlib.import_module("spotref._core")    # ImportError when not built
    raise ValueError(f"core must be 'py' or 'c', got {name!r}")


__all__ = ["generate", "Result", "Draft", "View", "ConfidenceDrafter", "EXTENSION", "core_module",
           "list_targets", "load_target", "load_drafter"]
