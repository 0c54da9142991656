"""Bundled targets: the load_target contract, tokenizers, and clear errors on bad input."""

import json
import shutil

import pytest
import torch

import spotref
from spotref.load.bpe import ByteTokenizer
from spotref.load.targets import DEFAULT_TARGET, MODELS, family_of, list_targets, load_target
from workbench.data.corpora import open_corpus

pytest.importorskip("tokenizers")
pytest.importorskip("safetensors")
BUNDLED = list_targets()


def test_three_targets_ship_with_the_default_first_in_line():
    assert len(BUNDLED) >= 3, BUNDLED
    assert DEFAULT_TARGET in BUNDLED
    blocks = {load_target(n).model.block_size for n in BUNDLED}
    assert {16, 32} <= blocks


def test_the_default_target_is_a_math_target_that_meets_the_quality_bar():
    """The demo's default is gsm-b32, which ships because its recorded quality report (500
    held-out problems, T = 0) meets the bar: >= 50% answers, >= 90% equations, stability >= 0.90."""
    from workbench.bench.quality_math import BAR

    q = load_target(DEFAULT_TARGET).meta["quality"]
    assert DEFAULT_TARGET == "gsm-b32" and q["meets_bar"] is True and q["problems"] == 500
    assert q["temperature"] == 0.0 and all(q[k] >= v for k, v in BAR.items())
    assert load_target(DEFAULT_TARGET).heldout(1, seed=0)[0][1] is not None  # it has answers


def commands(tree) -> list[str]:
    """Every ``command`` string anywhere in a JSON tree."""
    if isinstance(tree, dict):
        return [v for k, v in tree.items() if k == "command" and isinstance(v, str)] + [
            c for v in tree.values() for c in commands(v)
        ]
    return [c for v in tree for c in commands(v)] if isinstance(tree, list) else []


def test_shipped_metadata_names_no_path_of_the_machine_it_was_trained_on():
    """A training command is recorded as invoked (``python -m workbench train-target ...``), without the
    absolute path of the program on the machine that ran it."""
    from spotref.load.targets import TARGETS_DIR

    seen = 0
    for path in sorted(TARGETS_DIR.glob("*.json")):
        for command in commands(json.loads(path.read_text())):
            seen += 1
            assert not command.startswith("/"), (path.name, command[:80])
    assert seen > 0


@pytest.mark.parametrize("name", BUNDLED)
def test_load_target_contract(name):
    target = load_target(name)
    m = target.model
    assert isinstance(m, MODELS[family_of(target.meta)]) and not m.training  # SDARModel, or a canvas family's
    assert all(p.dtype == torch.float32 for p in m.parameters())
    assert m.block_size and m.mask_id == target.tokenizer.mask_id
    assert target.name == name and target.meta["heldout_loss"] > 0
    assert target.eos_id == target.tokenizer.eos_id and target.stop_ids == [target.eos_id]
    experts = "num_experts" in target.meta["config"]  # a mixture of experts ships its experts: gsm-moe 8.5 MiB
    assert target.meta["weights"]["bytes"] <= (9 if experts else 8) * 2**20
    text = "def f(x):\n    return x  # ünïcode\n"
    assert target.tokenizer.decode(target.tokenizer.encode(text)) == text


@pytest.mark.slow
@pytest.mark.parametrize("name", BUNDLED)
def test_real_target_generates_identically_with_and_without_a_drafter(name):
    target = load_target(name)
    prompt = target.tokenizer.encode("import os\n\n\ndef main():\n    ")
    exact = spotref.generate(target.model, prompt, 24, drafter=None)
    spot = spotref.generate(target.model, prompt, 24, drafter="confidence")
    assert exact.tokens == spot.tokens and len(exact.tokens) == 24


@pytest.mark.slow
@pytest.mark.parametrize("name", [n for n in BUNDLED if n.startswith("gsm-")])
@pytest.mark.parametrize("T,threshold", [(0.0, None), (1.0, 0.7)])
def test_math_targets_decode_identically_with_their_shipped_drafters(name, T, threshold):
    """The high-stability regime: long accepted paths, the 49-wide order model and its set head
    (T = 0 under the one-position rule, T = 1 under the threshold rule: the kit crosses the rest)."""
    target = load_target(name)
    canvas = family_of(target.meta) != "sdar"  # every pass re-runs the whole canvas: one prompt, 24 tokens
    corpus = open_corpus(target.meta["corpus"])  # seed 3: drawn by the workbench (not a shipped set)
    n = 24 if canvas else 40
    for prompt, _ in corpus.heldout(1 if canvas else 2, seed=3):
        ids = target.tokenizer.encode(prompt)
        kw = dict(temperature=T, seed=11, threshold=threshold, stop_ids=target.stop_ids)
        exact = spotref.generate(target, ids, n, **kw)
        for drafter in ("spot", "calibrated"):
            got = spotref.generate(target, ids, n, drafter=drafter, budget=16, depth=8, **kw)
            assert got.tokens == exact.tokens, (name, drafter, T, threshold)
            assert got.passes < exact.passes or threshold is not None  # the drafts were used


def test_unknown_target_lists_the_known_ones():
    with pytest.raises(ValueError, match="unknown target 'nope'.*known targets: " + BUNDLED[0]):
        load_target("nope")
    with pytest.raises(ValueError, match="must be a str"):
        load_target(3)


@pytest.fixture
def copy_of_default(tmp_path):
    meta = load_target(DEFAULT_TARGET).meta
    for f in (f"{DEFAULT_TARGET}.json", meta["weights"]["file"], meta["tokenizer"]["file"]):
        shutil.copy(spotref.load.targets.TARGETS_DIR / f, tmp_path / f)
    return tmp_path, tmp_path / meta["weights"]["file"]


def test_truncated_weights_fail_clearly(copy_of_default):
    d, weights = copy_of_default
    weights.write_bytes(weights.read_bytes()[:1000])
    with pytest.raises(ValueError, match="truncated or corrupt"):
        load_target(DEFAULT_TARGET, directory=d)


def test_corrupt_weights_fail_clearly(copy_of_default):
    d, weights = copy_of_default
    raw = bytearray(weights.read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    weights.write_bytes(bytes(raw))
    with pytest.raises(ValueError, match="corrupt: its SHA-256"):
        load_target(DEFAULT_TARGET, directory=d)


def test_missing_weights_fail_clearly(copy_of_default):
    d, weights = copy_of_default
    weights.unlink()
    with pytest.raises(ValueError, match="unknown target"):
        load_target(DEFAULT_TARGET, directory=d)
    with pytest.raises(ValueError, match="is missing"):
        load_target(str(d / f"{DEFAULT_TARGET}.json"))


@pytest.mark.parametrize("tok", [ByteTokenizer(), "bundled"])
def test_prompts_that_do_not_encode_fail_clearly(tok):
    tok = load_target(DEFAULT_TARGET).tokenizer if tok == "bundled" else tok
    with pytest.raises(ValueError, match="does not encode as UTF-8"):
        tok.encode("x = '\ud800'")
    with pytest.raises(ValueError, match="encodes str, got bytes"):
        tok.encode(b"def f(x):")
    with pytest.raises(ValueError, match="outside the vocabulary"):
        tok.decode([tok.vocab_size])


def test_byte_tokenizer_round_trip_and_specials():
    tok = ByteTokenizer()
    ids = tok.encode("é\n")
    assert ids == [0xC3, 0xA9, 10] and tok.decode(ids) == "é\n"
    assert tok.decode([104, 105, tok.mask_id, tok.eos_id, 33]) == "hi<|mask|>!"


@pytest.mark.slow
def test_quality_report_runs_on_a_code_target():
    from workbench.bench.quality import heldout_prompts, passes_bar, report

    target = load_target("stdlib-b32")
    r = report(target, heldout_prompts(2), 64, 2 * target.model.block_size)
    assert r["blocks"] == 4 and 0 <= r["repeat_blocks"] <= r["one_char_blocks"] + 1
    assert 0 < r["corpus_whitespace_share"] < 1 and 0 <= r["token_stability"] <= 1
    assert passes_bar(r) in (True, False) and len(r["samples"]) == 2


def test_a_chat_target_encodes_a_question_as_it_was_trained():
    """gsm targets are trained on chat documents (workbench.data.gsm.chat_document): encode_chat
    gives the prompt those documents start with; a plain-text target refuses it by name."""
    from workbench.data.gsm import chat_prompt

    gsm, stdlib = spotref.load_target("gsm-b16"), spotref.load_target("stdlib-b16")
    q = "Ella has 62 shells and finds 20 more. How many shells does she have?"
    assert gsm.chat and not stdlib.chat
    assert gsm.encode_chat(q) == gsm.encode(chat_prompt(q))
    assert gsm.encode_chat([{"role": "user", "content": q}]) == gsm.encode_chat(q)
    with pytest.raises(ValueError, match="'stdlib-b16' is trained on plain text: prompt it with encode"):
        stdlib.encode_chat(q)


def test_each_file_is_stored_once_and_a_shared_one_is_never_overwritten(tmp_path):
    """save_target names a file of the directory that holds the same bytes (one run exported at
    two block sizes; one tokenizer) instead of writing a copy; load_target reads the shared file,
    its SHA-256 checked; other bytes for a file another target names are refused before any write."""
    from helpers import tiny_model

    from workbench.target_writer import save_target

    tok, model = ByteTokenizer(), tiny_model(V=258, B=4, mask_id=257)
    meta = lambda m, name: {"name": name, "config": m.config.to_dict()}
    save_target(model, tok, meta(model, "a-b4"), tmp_path, "a-b4")
    model.config.block_size = 8  # the same weights at another block size
    save_target(model, tok, meta(model, "a-b8"), tmp_path, "a-b8")
    files = sorted(p.name for p in tmp_path.iterdir())
    assert files == ["a-b4.json", "a-b4.safetensors", "a-b4.tokenizer.json", "a-b8.json"], files
    assert list_targets(tmp_path) == ["a-b4", "a-b8"]
    b8 = load_target("a-b8", directory=tmp_path)
    assert b8.model.block_size == 8 and b8.meta["weights"]["file"] == "a-b4.safetensors"
    b4 = load_target("a-b4", directory=tmp_path).model.state_dict()
    assert all(torch.equal(v, b4[k]) for k, v in b8.model.state_dict().items())
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    other = tiny_model(V=258, B=4, mask_id=257, seed=1)
    with pytest.raises(ValueError, match="a-b4.safetensors is also the file of the target.s. a-b8"):
        save_target(other, tok, meta(other, "a-b4"), tmp_path, "a-b4")
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before, "a refused save wrote"
    save_target(other, tok, meta(other, "c"), tmp_path, "c")  # other weights under a new name: a file of its own
    assert load_target("c", directory=tmp_path).meta["weights"]["file"] == "c.safetensors"
    assert load_target("c", directory=tmp_path).meta["tokenizer"]["file"] == "a-b4.tokenizer.json"


def test_a_shared_weights_file_is_still_checked_against_each_target_that_names_it(copy_of_default):
    d, weights = copy_of_default
    meta = load_target(DEFAULT_TARGET, directory=d).meta
    (d / "twin.json").write_text(json.dumps({**meta, "name": "twin"}))
    assert load_target("twin", directory=d).meta["weights"]["file"] == weights.name
    raw = bytearray(weights.read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    weights.write_bytes(bytes(raw))
    for name in (DEFAULT_TARGET, "twin"):
        with pytest.raises(ValueError, match="SHA-256 does not match"):
            load_target(name, directory=d)


def test_a_named_target_is_loaded_again_when_the_weights_its_metadata_names_change(copy_of_default):
    """names.target's cache is keyed by the file the metadata names (a shared one included), so a
    target sharing another's weights is not served stale after that file is rewritten."""
    import os

    from spotref import names

    d, weights = copy_of_default
    meta = load_target(DEFAULT_TARGET, directory=d).meta
    (d / "twin.json").write_text(json.dumps({**meta, "name": "twin"}))
    first = names.target("twin", d)
    assert names.target("twin", d) is first
    stat = weights.stat()
    os.utime(weights, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))  # the shared file rewritten
    assert names.target("twin", d) is not first
