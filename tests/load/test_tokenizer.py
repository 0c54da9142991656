"""The real SDAR tokenizer files (../shared/sdar-8b-chat, skipped when absent) and the chat format."""

import json

import pytest
from helpers import SDAR_FILES

from spotref.load.tokenizer import chat_format, load_tokenizer

pytest.importorskip("tokenizers")
REAL = SDAR_FILES
needs_real = pytest.mark.skipif(
    not (REAL / "vocab.json").is_file(),
    reason=f"the real SDAR-8B config and tokenizer files (kept outside the repository) are not at "
    f"{SDAR_FILES}: set SPOTREF_SDAR_DIR",
)

TEXTS = [
    "Hello, world! It's  a test.\n\n",
    "def f(x):\n\treturn x ** 2   # square\n\n\nclass A:\n    pass\n",
    "中文测试：你好，世界。日本語のテキスト。한국어 텍스트.",
    "emoji 🙂🚀 café naïve Ｆｕｌｌｗｉｄｔｈ ß ∑ x² \u00a0nbsp",
    "  leading spaces, trailing spaces   \r\n windows line\r\n",
    "I'd've thought 12345678 + 3.14159 == 'π' isn't <tag attr=\"1\">",
]
SPECIAL = {
    "<|endoftext|>": 151643,
    "<|im_start|>": 151644,
    "<|im_end|>": 151645,
    "<think>": 151667,
    "</think>": 151668,
    "<|MASK|>": 151669,
}


@pytest.fixture(scope="module")
def tok():
    return load_tokenizer(REAL)


@needs_real
@pytest.mark.parametrize("text", TEXTS)
def test_round_trip_real_text(tok, text):
    ids = tok.encode(text)
    assert ids and all(0 <= i < tok.vocab_size for i in ids)
    assert tok.decode(ids) == text


@needs_real
def test_special_ids(tok):
    assert tok.vocab_size == 151670
    assert (tok.eos_id, tok.pad_id, tok.mask_id) == (151643, 151643, 151669)
    assert (tok.im_start_id, tok.im_end_id) == (151644, 151645)
    assert tok.stop_ids == [151645, 151643]  # generation_config.json
    for text, i in SPECIAL.items():
        assert tok.encode(text) == [i] and tok.decode([i]) == text
    assert tok.encode("a<|MASK|>b") == [tok.encode("a")[0], 151669, tok.encode("b")[0]]


@needs_real
def test_known_ids(tok):
    assert tok.encode("Hello, world!") == [9707, 11, 1879, 0]
    assert tok.encode("def") == [750]
    assert tok.decode([151700]) == ""  # padded model vocabulary: no token


@needs_real
def test_chat_format_ids(tok):
    ids = tok.encode_chat("What is 2+2?")
    assert ids[:3] == [151644, 872, 198]  # <|im_start|> user \n
    assert ids[-3:] == [151644, 77091, 198]  # <|im_start|> assistant \n
    assert 151645 in ids


def test_chat_format_text():
    msgs = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "<think>\nhmm\n</think>\n\nHello!"},
        {"role": "user", "content": "Bye"},
    ]
    assert chat_format(msgs) == (
        "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
        "<|im_start|>assistant\nHello!<|im_end|>\n<|im_start|>user\nBye<|im_end|>\n"
        "<|im_start|>assistant\n"
    )
    assert chat_format("x", enable_thinking=False).endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")
    assert chat_format("x", add_generation_prompt=False) == "<|im_start|>user\nx<|im_end|>\n"
    with pytest.raises(ValueError, match="role 'tool'"):
        chat_format([{"role": "tool", "content": "x"}])


@needs_real
@pytest.mark.parametrize("thinking", [None, False])
def test_chat_format_matches_the_jinja_template(thinking):
    jinja2 = pytest.importorskip("jinja2")
    env = jinja2.Environment(trim_blocks=True, lstrip_blocks=True)
    env.filters["tojson"] = json.dumps
    template = env.from_string((REAL / "chat_template.jinja").read_text())
    cases = [
        "Hi",
        [
            {"role": "system", "content": "S"},
            {"role": "user", "content": "Q1"},
            {"role": "assistant", "content": "<think>\nr\n</think>\n\nA1"},
            {"role": "user", "content": "Q2"},
        ],
        [{"role": "user", "content": "Q"}, {"role": "assistant", "content": "<think>\nr\n</think>\n\nA"}],
    ]
    for msgs in cases:
        messages = [{"role": "user", "content": msgs}] if isinstance(msgs, str) else msgs
        kw = {} if thinking is None else {"enable_thinking": thinking}
        want = template.render(messages=messages, add_generation_prompt=True, tools=None, **kw)
        assert chat_format(msgs, enable_thinking=thinking) == want


@pytest.mark.slow
@needs_real
def test_same_ids_as_transformers(tok):
    transformers = pytest.importorskip("transformers")
    hf = transformers.Qwen2Tokenizer.from_pretrained(str(REAL))
    for text in TEXTS + [chat_format("Hi <|MASK|> there")]:
        assert tok.encode(text) == hf.encode(text, add_special_tokens=False)


@pytest.mark.slow
@needs_real
def test_tokenizer_json_path(tok, tmp_path):
    (tmp_path / "tokenizer.json").write_text(tok.tok.to_str())
    for name in ("tokenizer_config.json", "generation_config.json"):
        (tmp_path / name).write_text((REAL / name).read_text())
    tok2 = load_tokenizer(tmp_path)
    assert (tok2.mask_id, tok2.stop_ids, tok2.vocab_size) == (151669, [151645, 151643], 151670)
    assert tok2.encode(TEXTS[1]) == tok.encode(TEXTS[1])


def test_bad_tokenizer_directories(tmp_path):
    with pytest.raises(ValueError, match="does not exist"):
        load_tokenizer(tmp_path / "nope")
    with pytest.raises(ValueError, match="no tokenizer in"):
        load_tokenizer(tmp_path)
    (tmp_path / "tokenizer.json").write_text("{broken")
    with pytest.raises(ValueError, match="cannot read"):
        load_tokenizer(tmp_path)
