"""The tokenizer of a real SDAR checkpoint (Qwen2 byte-level BPE) and the Qwen3 chat format.

``load_tokenizer(dir)`` reads, with the ``tokenizers`` library, either ``tokenizer.json`` or
``vocab.json`` + ``merges.txt`` (SDAR ships only these), then adds the added tokens of
``tokenizer_config.json`` at their ids (``<|endoftext|>`` 151643, ``<|im_start|>`` 151644,
``<|im_end|>`` 151645, ..., ``<|MASK|>`` 151669). Stop ids come from
``generation_config.json`` (SDAR: 151645, 151643), else the EOS token.

The vocab.json + merges.txt pipeline is the one of transformers' ``Qwen2Tokenizer``: NFC, the
Qwen2 pre-tokenizer regex, byte-level BPE without prefix space, byte-level decoder.
Added tokens are matched in raw text (``encode("<|im_start|>user")`` starts with 151644), as
transformers does with ``split_special_tokens=False``; that is what the chat format relies on.

Known quirk of the SDAR files: ``added_tokens.json`` calls id 151669 ``<MASK>`` while
``tokenizer_config.json`` calls it ``<|MASK|>``; transformers takes the latter, so do we.
The model's vocabulary (151936) is padded past the tokenizer's (151670): ids without a token
decode to nothing.

``final_answer`` reads the number of GSM8K's answer line (``#### N``) that ends a math (gsm)
target's reply.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from pathlib import Path

QWEN2_PRETOKENIZE_REGEX = (
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|"""
    r""" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""
)
MASK_TOKENS = ("<|MASK|>", "<MASK>", "<|mask|>")
IM_START, IM_END = "<|im_start|>", "<|im_end|>"
ASSISTANT = f"{IM_START}assistant\n"  # the assistant header a chat prompt ends in
FINAL = re.compile(r"####\s*(-?\d+)")  # GSM8K's answer line


def _tokenizers():
    try:
        import tokenizers
    except ImportError:
        raise ImportError(
            "the checkpoint tokenizer needs the 'tokenizers' package: "
            "pip install 'spotref[hf]' (or pip install tokenizers)"
        ) from None
    return tokenizers


class QwenTokenizer:
    """encode(str) -> list[int], decode(list) -> str, special ids, stop ids, chat format."""

    def __init__(self, tok, config: dict | None = None, stop_ids=None):
        self.tok, config = tok, config or {}
        self.vocab_size = tok.get_vocab_size(with_added_tokens=True)
        self.eos_id = self._id(config.get("eos_token") or "<|endoftext|>")
        self.pad_id = self._id(config.get("pad_token")) if config.get("pad_token") else self.eos_id
        mask = config.get("mask_token")
        self.mask_id = next(
            (
                i
                for i in ([self._id(mask)] if mask else []) + [tok.token_to_id(t) for t in MASK_TOKENS]
                if i is not None
            ),
            None,
        )
        self.im_start_id, self.im_end_id = tok.token_to_id(IM_START), tok.token_to_id(IM_END)
        self.stop_ids = list(stop_ids) if stop_ids else [self.eos_id]

    def _id(self, token) -> int | None:
        content = token.get("content") if isinstance(token, dict) else token
        i = self.tok.token_to_id(content)
        if i is None:
            raise ValueError(f"the tokenizer has no token {content!r}")
        return i

    def token_to_id(self, token: str) -> int | None:
        return self.tok.token_to_id(token)

    def encode(self, text: str) -> list[int]:
        if not isinstance(text, str):
            raise ValueError(f"the tokenizer encodes str, got {type(text).__name__}")
        return self.tok.encode(text, add_special_tokens=False).ids

    def decode(self, ids, skip_special_tokens: bool = False) -> str:
        ids = [int(i) for i in ids]
        bad = [i for i in ids if i < 0]
        if bad:
            raise ValueError(f"token id {bad[0]} is negative")
        return self.tok.decode(ids, skip_special_tokens=skip_special_tokens)

    def chat(self, messages, add_generation_prompt: bool = True, enable_thinking: bool | None = None) -> str:
        """The Qwen3 chat format (SDAR's chat_template.jinja) of a text or of messages."""
        return chat_format(messages, add_generation_prompt, enable_thinking)

    def encode_chat(self, messages, **kwargs) -> list[int]:
        return self.encode(self.chat(messages, **kwargs))


def chat_format(messages, add_generation_prompt: bool = True, enable_thinking: bool | None = None) -> str:
    """SDAR's (Qwen3's) chat template without tools, in Python (no Jinja needed).

    messages: a str (one user turn) or a list of {"role": system|user|assistant, "content": str}.
    Assistant turns before the last user turn lose their ``<think>`` part, as in the template.
    """
    msgs = [{"role": "user", "content": messages}] if isinstance(messages, str) else message_list(messages)
    check_messages(msgs)
    out = []
    if msgs and msgs[0]["role"] == "system":
        out.append(f"{IM_START}system\n{msgs[0]['content']}{IM_END}\n")
    last_query = max((i for i, m in enumerate(msgs) if m["role"] == "user"), default=len(msgs) - 1)
    for i, m in enumerate(msgs):
        if m["role"] == "user" or (m["role"] == "system" and i > 0):
            out.append(f"{IM_START}{m['role']}\n{m['content']}{IM_END}\n")
        elif m["role"] == "assistant":
            out.append(assistant_turn(m, keep_think=i > last_query, last=i == len(msgs) - 1))
    if add_generation_prompt:
        out.append(f"{IM_START}assistant\n")
        if enable_thinking is False:
            out.append("<think>\n\n</think>\n\n")
    return "".join(out)


def message_list(messages) -> list:
    """``messages`` (not a str) as a list of turns: a list, tuple or other iterable of them;
    ``ValueError`` naming the type otherwise (one message dict is not a list of messages)."""
    want = "messages must be a str (one user turn) or a list of {'role', 'content'} dicts"
    if isinstance(messages, Mapping):
        raise ValueError(f"{want}, got one {type(messages).__name__}: pass a list of them, [message]")
    if isinstance(messages, (bytes, bytearray)) or not isinstance(messages, Iterable):
        raise ValueError(f"{want}, got {type(messages).__name__} {messages!r:.60}")
    return list(messages)


def check_messages(msgs) -> None:
    for i, m in enumerate(msgs):
        if not isinstance(m, dict) or not isinstance(m.get("content"), str):
            raise ValueError(f"chat message {i} must be a dict with a str 'content'")
        if m.get("role") not in ("system", "user", "assistant"):
            raise ValueError(f"chat message {i}: role {m.get('role')!r} is not system, user or assistant")


def assistant_turn(m: dict, keep_think: bool, last: bool) -> str:
    content, reasoning = m["content"], m.get("reasoning_content")
    if reasoning is None:
        reasoning = ""
        if "</think>" in content:
            head, content = content.split("</think>")[0], content.split("</think>")[-1].lstrip("\n")
            reasoning = head.rstrip("\n").split("<think>")[-1].lstrip("\n")
    if keep_think and (last or reasoning):
        body = f"<think>\n{reasoning.strip(chr(10))}\n</think>\n\n{content.lstrip(chr(10))}"
    else:
        body = content
    return f"{IM_START}assistant\n{body}{IM_END}\n"


def final_answer(text: str) -> int | None:
    """The number after the first ``####`` of ``text`` (a math target's reply), or None."""
    m = FINAL.search(text)
    return int(m.group(1)) if m else None


def load_tokenizer(path) -> QwenTokenizer:
    """The tokenizer of a checkpoint directory (tokenizer.json, or vocab.json + merges.txt)."""
    root = Path(path)
    if not root.is_dir():
        raise ValueError(f"tokenizer directory {str(root)!r} does not exist")
    config = _json(root / "tokenizer_config.json")
    if (root / "tokenizer.json").is_file():
        try:
            tok = _tokenizers().Tokenizer.from_file(str(root / "tokenizer.json"))
        except Exception as e:  # the library raises its own exception type
            raise ValueError(f"cannot read {str(root / 'tokenizer.json')!r}: {e}") from None
    elif (root / "vocab.json").is_file() and (root / "merges.txt").is_file():
        tok = qwen2_bpe(root / "vocab.json", root / "merges.txt")
    else:
        raise ValueError(f"no tokenizer in {str(root)!r}: want tokenizer.json, or vocab.json + merges.txt")
    add_tokens(tok, config)
    gen = _json(root / "generation_config.json")
    stops = gen.get("eos_token_id")
    stops = [stops] if isinstance(stops, int) else stops
    return QwenTokenizer(tok, config, stops)


def _json(path: Path) -> dict:
    if not path.is_file():
        return {}
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"cannot read {str(path)!r}: {e}") from None


def qwen2_bpe(vocab: Path, merges: Path):
    """transformers' Qwen2Tokenizer pipeline over vocab.json + merges.txt."""
    tk = _tokenizers()
    model = tk.models.BPE.from_file(
        str(vocab),
        str(merges),
        unk_token=None,
        continuing_subword_prefix="",
        end_of_word_suffix="",
        fuse_unk=False,
        byte_fallback=False,
    )
    tok = tk.Tokenizer(model)
    tok.normalizer = tk.normalizers.NFC()
    tok.pre_tokenizer = tk.pre_tokenizers.Sequence(
        [
            tk.pre_tokenizers.Split(tk.Regex(QWEN2_PRETOKENIZE_REGEX), behavior="isolated", invert=False),
            tk.pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok.decoder = tk.decoders.ByteLevel()
    return tok


def add_tokens(tok, config: dict) -> None:
    """The added tokens of tokenizer_config.json, each at its own id (checked)."""
    tk = _tokenizers()
    decoder = config.get("added_tokens_decoder") or {}
    for i, spec in sorted(((int(k), v) for k, v in decoder.items())):
        content = spec["content"]
        if tok.token_to_id(content) == i:
            continue
        if tok.get_vocab_size(with_added_tokens=True) != i:
            raise ValueError(
                f"tokenizer_config.json: added token {content!r} wants id {i}, but the "
                f"next free id is {tok.get_vocab_size(with_added_tokens=True)}"
            )
        token = tk.AddedToken(
            content,
            single_word=spec.get("single_word", False),
            lstrip=spec.get("lstrip", False),
            rstrip=spec.get("rstrip", False),
            normalized=spec.get("normalized", False),
            special=spec.get("special", True),
        )
        tok.add_special_tokens([token]) if spec.get("special", True) else tok.add_tokens([token])
        if tok.token_to_id(content) != i:
            raise ValueError(
                f"tokenizer_config.json: added token {content!r} landed at id {tok.token_to_id(content)}, not {i}"
            )
