"""Tokenizers of the bundled targets: a byte-level BPE (the default) and plain bytes.

Both have the contract of docs/spec.md section 7 (``encode(str) -> list[int]``, ``decode(list) -> str``)
and two special tokens: ``EOS`` (ends a document; a stop id) and ``MASK`` (the diffusion mask,
never produced by ``encode``).

* ``ByteTokenizer``: ids 0..255 are the UTF-8 bytes, 256 is EOS, 257 is MASK.
* ``BPETokenizer``: a byte-level BPE of the ``tokenizers`` library (GPT-2 style pre-tokenizer,
  so runs of indentation become single tokens; the workbench trains it: ``train_loop.train_bpe``);
  ids 0 and 1 are EOS and MASK.
  With ``split_digits`` every digit is its own pre-token, so numbers are written digit by
  digit (``1234`` -> ``1 2 3 4``): a small model can then learn arithmetic digit-wise, where the
  default merges digit runs into arbitrary chunks.
  Why BPE: a byte model spends most of its predictions on whitespace (31% of the corpus's
  characters) and collapsed into runs of spaces at T = 0; see docs/targets.md for the numbers.

``encode`` raises ``ValueError`` for text that is not a ``str`` or not encodable as UTF-8
(lone surrogates); ``decode`` raises ``ValueError`` for ids outside the vocabulary, drops EOS
and shows MASK as ``MASK_TEXT``; invalid UTF-8 becomes U+FFFD.
"""

from __future__ import annotations

import json
import numbers
import re

EOS_TEXT, MASK_TEXT = "<|eos|>", "<|mask|>"


def _utf8(text) -> bytes:
    if not isinstance(text, str):
        raise ValueError(f"the tokenizer encodes str, got {type(text).__name__}")
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError as e:
        raise ValueError(
            f"the prompt does not encode as UTF-8: {e.reason} at index {e.start} ({text[e.start : e.end]!r})"
        ) from None


def _check_ids(ids, V: int) -> list[int]:
    """Token ids: ints (a bool, float or str is refused by index), each in [0, V)."""
    if isinstance(ids, (str, bytes)) or not hasattr(ids, "__iter__"):
        raise ValueError(f"decode takes a sequence of token ids, got {type(ids).__name__}")
    ids = list(ids.tolist() if hasattr(ids, "tolist") else ids)
    for i, t in enumerate(ids):
        if isinstance(t, bool) or not isinstance(t, numbers.Integral):
            raise ValueError(f"token id {t!r} at index {i} is not an integer")
        if not 0 <= t < V:
            raise ValueError(f"token id {t} at index {i} is outside the vocabulary [0, {V})")
    return [int(t) for t in ids]


SPECIAL_TEXT = re.compile(f"({re.escape(EOS_TEXT)}|{re.escape(MASK_TEXT)})")


def plain_pieces(text: str) -> list[str]:
    """``text`` cut so that no piece is a special token's text: the literal ``<|mask|>`` or
    ``<|eos|>`` in a prompt is text, never the MASK or end-of-text id."""
    out = []
    for piece in SPECIAL_TEXT.split(text):
        out += [piece[:-2], piece[-2:]] if SPECIAL_TEXT.fullmatch(piece) else [piece]
    return [p for p in out if p]


class ByteTokenizer:
    """UTF-8 bytes; EOS = 256, MASK = 257."""

    kind = "bytes"
    vocab_size, eos_id, mask_id = 258, 256, 257
    split_digits = True  # a digit is one byte, so one token

    def encode(self, text: str) -> list[int]:
        return list(_utf8(text))

    def decode(self, ids) -> str:
        ids = _check_ids(ids, self.vocab_size)
        out, raw = [], bytearray()
        for t in ids + [self.eos_id]:
            if t < 256:
                raw.append(t)
                continue
            out.append(raw.decode("utf-8", errors="replace"))
            raw = bytearray()
            out.append(MASK_TEXT if t == self.mask_id else "")
        return "".join(out)

    def to_json(self) -> str:
        return json.dumps({"kind": self.kind})


def _tokenizers():
    try:
        import tokenizers
    except ImportError:
        raise ImportError(
            "the BPE tokenizer needs the 'tokenizers' package: pip install 'spotref[cli]' (or pip install tokenizers)"
        ) from None
    return tokenizers


class BPETokenizer:
    """A byte-level BPE from the ``tokenizers`` library; EOS = 0, MASK = 1."""

    kind = "bpe"
    eos_id, mask_id = 0, 1

    def __init__(self, tok):
        self.tok = tok
        self.vocab_size = tok.get_vocab_size()
        assert tok.token_to_id(EOS_TEXT) == 0 and tok.token_to_id(MASK_TEXT) == 1, "EOS/MASK ids"

    @classmethod
    def from_json(cls, text: str) -> "BPETokenizer":
        return cls(_tokenizers().Tokenizer.from_str(text))

    def to_json(self) -> str:
        return self.tok.to_str()

    @property
    def split_digits(self) -> bool:
        """Whether the pre-tokenizer writes every digit as its own token."""
        pre = json.loads(self.tok.to_str()).get("pre_tokenizer") or {}
        return any(p.get("type") == "Digits" and p.get("individual_digits") for p in pre.get("pretokenizers", [pre]))

    def encode(self, text: str) -> list[int]:
        """Text -> ids; never EOS or MASK (their literal text is encoded as text)."""
        _utf8(text)
        if not SPECIAL_TEXT.search(text):
            return self.tok.encode(text, add_special_tokens=False).ids
        return [i for piece in plain_pieces(text) for i in self.tok.encode(piece, add_special_tokens=False).ids]

    def encode_batch(self, texts) -> list[list[int]]:
        texts = list(texts)
        if any(SPECIAL_TEXT.search(t) for t in texts if isinstance(t, str)):
            return [self.encode(t) for t in texts]
        return [e.ids for e in self.tok.encode_batch(texts, add_special_tokens=False)]

    def decode(self, ids) -> str:
        ids = _check_ids(ids, self.vocab_size)
        parts, run = [], []
        for t in ids + [self.eos_id]:
            if t > 1:
                run.append(t)
                continue
            parts.append(self.tok.decode(run, skip_special_tokens=False) if run else "")
            run = []
            parts.append(MASK_TEXT if t == self.mask_id else "")
        return "".join(parts)


def tokenizer_from_json(text: str):
    """Either tokenizer, from its ``to_json()`` text."""
    if json.loads(text).get("kind") == "bytes":
        return ByteTokenizer()
    return BPETokenizer.from_json(text)
