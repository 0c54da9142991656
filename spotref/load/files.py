"""Moved to ``spotref.files`` (the spec core's layer, so that each format's reader and writer
share a module); kept only while the tools' imports are renamed."""

from spotref.files import *  # noqa: F401,F403
from spotref.files import _SHIPPED_OK  # noqa: F401
