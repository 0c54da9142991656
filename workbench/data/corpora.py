"""Corpora: what a target is trained on, and the held-out prompts of its domain.

A target's metadata names its corpus (``meta["corpus"]``: ``name``, ``seed``, ``options`` and
what the corpus reports of itself); ``open_corpus(record)`` rebuilds it from that record alone.
A corpus gives

* ``documents(split)``: the texts of ``"train"`` (what the target learned from) or
  ``"heldout"`` (held-out loss), each without end-of-text;
* ``heldout(n, seed, split)``: ``n`` held-out ``(prompt, answer or None)`` pairs, a pure function
  of ``(n, seed, split)`` whose prompts share no document with ``documents("train")``.
  ``split`` None is the whole held-out set (quality reports, the demo); ``"train"`` and
  ``"test"`` are two halves of it that never share a document (drafter training and
  calibration; drafter accuracy and the benchmark);
* ``record()``: the metadata record it is rebuilt from.

The corpora ``workbench.data`` can build (``CORPORA``): ``stdlib`` (Python's own text,
``workbench.data.stdlib_corpus``; the record of targets that predate the field) and ``file`` (a
text file of documents, one per line, or JSON lines with a ``"text"`` field). and ``gsm``
(grade-school math word problems from the
seeded generator ``workbench.data.gsm``, adapted by ``GsmCorpus``).
"""

from __future__ import annotations

import hashlib
import json
import zlib
from functools import partial
from pathlib import Path

import numpy as np

from spotref.load.tokenizer import ASSISTANT
from spotref.spec.checks import check_int
from workbench.data import gsm
from workbench.data.stdlib_corpus import build_corpus, heldout_code, is_heldout

SPLITS = (None, "train", "test")


def check_heldout_args(n, seed, split) -> None:
    """``ValueError`` naming the argument unless n >= 1, seed >= 0 (ints) and split in SPLITS."""
    for name, value, lo in (("n", n, 1), ("seed", seed, 0)):
        check_int(f"heldout: {name}", value, lo)
    if split not in SPLITS:
        raise ValueError(f"heldout: split must be None, 'train' or 'test', got {split!r}")


def in_test_half(key: str) -> bool:
    """Whether a held-out document (by its name or text) is in the ``"test"`` half."""
    return zlib.crc32(key.encode("utf-8")) % 4 == 0


# --- stdlib: Python's own text --------------------------------------------------------------


class StdlibCorpus:
    """The stdlib targets' corpus. Held-out prompts are exactly those the tools drew before
    ``Target.heldout`` existed, so published numbers stay reproducible: split None is the
    quality report's and the demo's (documents over 3000 characters, 4000-character texts,
    ``quality.heldout_prompts``); ``"train"`` / ``"test"`` the drafter's and the benchmark's
    (2000-character texts, ``spotref.record.prompts.prompts_for`` before its cut to tokens)."""

    name = "stdlib"

    def __init__(self, english: bool = True):
        self.english, self._corpus = english, None

    @property
    def corpus(self):
        """The collected text (read once per instance: about 0.3 s)."""
        if self._corpus is None:
            self._corpus = build_corpus(english=self.english)
        return self._corpus

    def documents(self, split: str) -> list[str]:
        return [d.text for d in (self.corpus.train if split == "train" else self.corpus.heldout)]

    def heldout(self, n: int, seed: int = 0, split: str | None = None) -> list[tuple[str, None]]:
        check_heldout_args(n, seed, split)
        texts = (
            heldout_code(n, seed, chars=4000, longer_than=3000) if split is None else heldout_code(n, seed, split=split)
        )
        return [(t, None) for t in texts]

    def record(self) -> dict:
        return {"name": self.name, "seed": None, "options": {"english": self.english}, **self.corpus.describe()}

    @classmethod
    def from_record(cls, record: dict) -> StdlibCorpus:
        return cls(english=bool(record.get("options", {}).get("english", True)))


# --- a text file of documents ----------------------------------------------------------------


class FileCorpus:
    """Documents from a text file: one per line, or JSON lines each with a ``"text"`` string
    (the format is told by the first non-empty line). Blank lines are skipped. A document is
    held out when the first byte of the SHA-256 of its text is below ``256 * HELDOUT_FRAC``
    (so equal documents fall on the same side). A held-out prompt is a held-out document up to
    its last chat assistant header (``<|im_start|>assistant\\n``), or its first half."""

    name = "file"
    HELDOUT_FRAC = 0.05

    def __init__(self, path):
        self.path = Path(path)
        try:
            raw = self.path.read_bytes()
        except OSError as e:
            raise ValueError(f"--corpus {str(self.path)!r}: cannot read the file: {e.strerror}") from None
        self.sha256 = hashlib.sha256(raw).hexdigest()
        self.format, texts = parse_documents(raw, self.path)
        self.train = [t for t in texts if not is_heldout(t, self.HELDOUT_FRAC)]
        self.held = [t for t in texts if is_heldout(t, self.HELDOUT_FRAC)]
        if not self.train or not self.held:
            raise ValueError(
                f"--corpus {str(self.path)!r}: {len(texts)} documents give {len(self.train)} "
                f"training and {len(self.held)} held-out ones; want at least one of each"
            )

    def documents(self, split: str) -> list[str]:
        return list(self.train if split == "train" else self.held)

    def heldout(self, n: int, seed: int = 0, split: str | None = None) -> list[tuple[str, None]]:
        check_heldout_args(n, seed, split)
        pool = (
            sorted(self.held) if split is None else sorted(t for t in self.held if in_test_half(t) == (split == "test"))
        )
        if not pool:
            raise ValueError(f"the corpus {str(self.path)!r} has no held-out document in the {split!r} half")
        rng = np.random.default_rng(seed)
        return [(prompt_of(pool[rng.integers(len(pool))]), None) for _ in range(n)]

    def record(self) -> dict:
        return {
            "name": self.name,
            "seed": None,
            "options": {"path": str(self.path.resolve())},
            "format": self.format,
            "sha256": self.sha256,
            "train": {"documents": len(self.train)},
            "heldout": {"documents": len(self.held)},
        }

    @classmethod
    def from_record(cls, record: dict) -> FileCorpus:
        corpus = cls(record.get("options", {}).get("path", ""))
        if record.get("sha256") not in (None, corpus.sha256):
            raise ValueError(
                f"the corpus file {str(corpus.path)!r} changed since the target was trained "
                f"(its SHA-256 does not match the metadata)"
            )
        return corpus


def parse_documents(raw: bytes, path: Path) -> tuple[str, list[str]]:
    """("lines" or "jsonl", the documents) of a corpus file; ``ValueError`` naming the line."""
    try:
        lines = raw.decode("utf-8").splitlines()
    except UnicodeDecodeError as e:
        raise ValueError(f"--corpus {str(path)!r} is not UTF-8 text (byte {e.start})") from None
    numbered = [(i + 1, line) for i, line in enumerate(lines) if line.strip()]
    if not numbered:
        raise ValueError(f"--corpus {str(path)!r} holds no document")
    if not numbered[0][1].lstrip().startswith("{"):
        return "lines", [line for _, line in numbered]
    texts = []
    for i, line in numbered:
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as e:
            raise ValueError(f"--corpus {str(path)!r} line {i}: not JSON ({e.msg})") from None
        if not isinstance(obj, dict) or not isinstance(obj.get("text"), str) or not obj["text"].strip():
            raise ValueError(f'--corpus {str(path)!r} line {i}: want an object with a non-empty "text" string')
        texts.append(obj["text"])
    return "jsonl", texts


def prompt_of(document: str) -> str:
    """A held-out document as a prompt: up to its last assistant header, else its first half."""
    cut = document.rfind(ASSISTANT)
    return document[: cut + len(ASSISTANT)] if cut >= 0 else document[: max(1, len(document) // 2)]


# --- grade-school math (the generator is handed in) --------------------------------------------


class GsmCorpus:
    """GSM8K-style word problems from a generator with the interface of ``workbench.data.gsm``
    (``documents``, ``problems``, ``iter_problems``, ``heldout``, ``describe``, ``Difficulty``,
    ``LEVELS``, ``VERSION``). ``size`` training problems drawn with ``seed`` at difficulty
    ``level``; held-out prompts are chat-formatted questions with their integer answers, drawn
    with the sampling seed (the held-out split is by question hash, whatever the corpus seed)."""

    name = "gsm"
    HELDOUT_DOCUMENTS = 512  # held-out loss: enough for 32 windows of 256 tokens

    def __init__(self, generator, seed: int = 0, size: int = 40000, level: int = 3, difficulty: dict | None = None):
        if level not in generator.LEVELS:
            raise ValueError(f"--corpus-level must be one of {sorted(generator.LEVELS)}, got {level!r}")
        self.gen, self.seed, self.size, self.level = generator, seed, size, level
        self.difficulty = generator.Difficulty(**difficulty) if difficulty else generator.LEVELS[level]

    def documents(self, split: str) -> list[str]:
        if split == "train":
            return self.gen.documents(self.size, self.seed, self.difficulty)
        return [p.document for p in self.gen.problems(self.HELDOUT_DOCUMENTS, self.seed, "heldout", self.difficulty)]

    def heldout(self, n: int, seed: int = 0, split: str | None = None) -> list[tuple[str, int]]:
        check_heldout_args(n, seed, split)
        if split is None:
            return self.gen.heldout(n, seed, self.difficulty)
        out = []
        for p in self.gen.iter_problems(seed, "heldout", self.difficulty):
            if in_test_half(p.question) == (split == "test"):
                out.append((p.prompt, p.answer))
                if len(out) == n:
                    return out

    def record(self) -> dict:
        return {
            **self.gen.describe(self.difficulty, self.seed),
            "name": self.name,
            "seed": self.seed,
            "options": {"size": self.size, "level": self.level},
        }

    @classmethod
    def from_record(cls, record: dict, generator) -> GsmCorpus:
        if record.get("version") not in (None, generator.VERSION):
            raise ValueError(
                f"the gsm corpus was generated by version {record['version']} of the generator, "
                f"this one is version {generator.VERSION}: its documents differ"
            )
        options = record.get("options", {})
        return cls(
            generator,
            record.get("seed", 0),
            options.get("size", 40000),
            options.get("level", 3),
            record.get("difficulty"),
        )


# --- the registry ------------------------------------------------------------------------------

CORPORA = {
    "stdlib": StdlibCorpus.from_record,
    "file": FileCorpus.from_record,
    "gsm": partial(GsmCorpus.from_record, generator=gsm),
}


def open_corpus(record: dict | None, corpora: dict = CORPORA):
    """The corpus a metadata record names (no record, or no name: ``stdlib``, as the targets
    that predate the field). ``corpora``: name -> ``from_record``; ``ValueError`` for others."""
    record = record or {}
    name = record.get("name", "stdlib")
    if name not in corpora:
        raise ValueError(f"the corpus {name!r} cannot be built here (known: {', '.join(sorted(corpora))})")
    return corpora[name](record)
