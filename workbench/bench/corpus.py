"""The training corpus of the stdlib targets, for the tools: collected by
``workbench.data.stdlib_corpus`` (its held-out prompts: ``workbench.data.corpora``), plus the tools' text metric.
"""

from __future__ import annotations

from workbench.data.stdlib_corpus import (  # noqa: F401 (re-exported for the tools)
    EXCLUDED_DIRS,
    Corpus,
    Document,
    build_corpus,
    heldout_code,
    is_heldout,
    pydoc_topics,
    stdlib_sources,
)


def whitespace_share(text: str) -> float:
    """Fraction of characters that are whitespace (space, tab, newline, ...)."""
    return sum(c.isspace() for c in text) / max(len(text), 1)
