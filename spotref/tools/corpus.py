"""The training corpus of the bundled targets: text that ships with every Python.

Two sources, both read from the running interpreter, so the corpus is reproducible from a
Python version alone (its SHA-256 is recorded in each target's metadata):

* code: the standard library's ``*.py`` sources, minus what would teach a tiny model little
  but repetition: ``site-packages``, every test directory (``test``, ``tests``, ``idle_test``),
  ``encodings`` (codec tables) and ``pydoc_data`` (the topics, taken as English below);
  exact duplicates are dropped;
* English: the ``pydoc_data.topics`` help texts, one document per topic.

Train / held-out split by document (never inside a file): a document is held out when the
first byte of SHA-256 of its name is below ``256 * heldout_frac``.
"""
from __future__ import annotations

import hashlib
import os
import sys
import sysconfig
from dataclasses import dataclass
from pathlib import Path

EXCLUDED_DIRS = {"site-packages", "__pycache__", "test", "tests", "idle_test", "encodings",
                 "pydoc_data"}


@dataclass(frozen=True)
class Document:
    name: str          # "code:json/decoder.py" or "topic:assert"
    text: str


def stdlib_sources(root: str | None = None) -> list[Document]:
    """The stdlib ``*.py`` files under ``root`` (default: this interpreter's), sorted by path."""
    root = Path(root or sysconfig.get_paths()["stdlib"])
    docs, seen = [], set()
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in EXCLUDED_DIRS)
        for f in sorted(filenames):
            if not f.endswith(".py"):
                continue
            path = Path(dirpath, f)
            text = path.read_bytes().decode("utf-8", errors="replace").replace("\r\n", "\n")
            digest = hashlib.sha256(text.encode()).digest()
            if text.strip() and digest not in seen:
                seen.add(digest)
                docs.append(Document("code:" + path.relative_to(root).as_posix(), text))
    return sorted(docs, key=lambda d: d.name)


def pydoc_topics() -> list[Document]:
    """The English help texts of ``pydoc_data.topics``, one document per topic."""
    from pydoc_data.topics import topics
    return [Document("topic:" + k, topics[k]) for k in sorted(topics)]


def is_heldout(name: str, heldout_frac: float) -> bool:
    return hashlib.sha256(name.encode()).digest()[0] < 256 * heldout_frac


@dataclass
class Corpus:
    train: list[Document]
    heldout: list[Document]
    python: str        # the interpreter version the text came from

    def describe(self) -> dict:
        """Sizes and the SHA-256 of the whole corpus (names and texts, in order)."""
        h = hashlib.sha256()
        for d in self.train + self.heldout:
            h.update(d.name.encode() + b"\0" + d.text.encode() + b"\0")

        def size(docs, kind):
            docs = [d for d in docs if d.name.startswith(kind)]
            return {"documents": len(docs), "bytes": sum(len(d.text.encode()) for d in docs)}
        return {"python": self.python, "sha256": h.hexdigest(),
                "train": {"code": size(self.train, "code:"), "english": size(self.train, "topic:")},
                "heldout": {"code": size(self.heldout, "code:"), "english": size(self.heldout, "topic:")}}


def build_corpus(heldout_frac: float = 0.05, root: str | None = None, english: bool = True) -> Corpus:
    """Collect the corpus from the running interpreter and split it by document."""
    docs = stdlib_sources(root) + (pydoc_topics() if english else [])
    train = [d for d in docs if not is_heldout(d.name, heldout_frac)]
    heldout = [d for d in docs if is_heldout(d.name, heldout_frac)]
    return Corpus(train, heldout, sys.version.split()[0])


def whitespace_share(text: str) -> float:
    """Fraction of characters that are whitespace (space, tab, newline, ...)."""
    return sum(c.isspace() for c in text) / max(len(text), 1)
