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

The stdlib targets' held-out prompts are drawn from it (``workbench.data.corpora``; the sets
``Target.heldout`` ships: ``workbench.data.heldout``); the training tools reach it through
``workbench.bench.corpus``.
"""

from __future__ import annotations

import hashlib
import os
import sys
import sysconfig
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np

EXCLUDED_DIRS = {"site-packages", "__pycache__", "test", "tests", "idle_test", "encodings", "pydoc_data"}


@dataclass(frozen=True)
class Document:
    name: str  # "code:json/decoder.py" or "topic:assert"
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
    python: str  # the interpreter version the text came from

    def describe(self) -> dict:
        """Sizes and the SHA-256 of the whole corpus (names and texts, in order)."""
        h = hashlib.sha256()
        for d in self.train + self.heldout:
            h.update(d.name.encode() + b"\0" + d.text.encode() + b"\0")

        def size(docs, kind):
            docs = [d for d in docs if d.name.startswith(kind)]
            return {"documents": len(docs), "bytes": sum(len(d.text.encode()) for d in docs)}

        return {
            "python": self.python,
            "sha256": h.hexdigest(),
            "train": {"code": size(self.train, "code:"), "english": size(self.train, "topic:")},
            "heldout": {"code": size(self.heldout, "code:"), "english": size(self.heldout, "topic:")},
        }


def build_corpus(heldout_frac: float = 0.05, root: str | None = None, english: bool = True) -> Corpus:
    """Collect the corpus from the running interpreter and split it by document."""
    docs = stdlib_sources(root) + (pydoc_topics() if english else [])
    train = [d for d in docs if not is_heldout(d.name, heldout_frac)]
    heldout = [d for d in docs if is_heldout(d.name, heldout_frac)]
    return Corpus(train, heldout, sys.version.split()[0])


def heldout_code(n: int, seed: int = 0, split: str | None = None, chars: int = 2000, longer_than: int = 0) -> list[str]:
    """``n`` prompts from held-out code documents (never seen by the targets' training), drawn
    with replacement: a random document, from a random line start (one at least 2000 characters
    before its end, or its first line), cut to ``chars`` characters.

    split: None, every held-out code document; ``"train"`` (drafter training, calibration) or
    ``"test"`` (drafter held-out accuracy, benchmark), split by a hash of the document name so
    the two never share a document. longer_than: only documents of more characters than this.
    """
    assert split in (None, "train", "test"), split
    docs = sorted(
        (d for d in build_corpus().heldout if d.name.startswith("code:") and len(d.text) > longer_than),
        key=lambda d: d.name,
    )
    if split is not None:
        docs = [d for d in docs if (zlib.crc32(d.name.encode()) % 4 == 0) == (split == "test")]
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        text = docs[rng.integers(len(docs))].text
        starts = [0] + [i + 1 for i, c in enumerate(text[:-2000]) if c == "\n"]
        out.append(text[starts[rng.integers(len(starts))] :][:chars])
    return out
