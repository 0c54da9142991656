"""``spotref generate`` and ``spotref audit`` on a tiny checkpoint directory with a tokenizer."""

import json

import pytest
import torch

import spotref
from spotref.checkpoint import from_pretrained
from spotref.cli.main import main
from spotref.configs import SDARConfig
from spotref.load import targets
from spotref.load.tokenizer import load_tokenizer
from spotref.spec.sdar import SDARModel
from workbench.checkpoint_writer import save_pretrained

tokenizers = pytest.importorskip("tokenizers")
pytest.importorskip("safetensors")
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|MASK|>"]  # ids 0..3
TEXT = "def add(a, b):\n    return a + b\n\nprint(add(1, 2))\n" * 20


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    root = tmp_path_factory.mktemp("ckpt")
    tok = tokenizers.Tokenizer(tokenizers.models.BPE())
    tok.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = tokenizers.decoders.ByteLevel()
    tok.train_from_iterator(
        [TEXT],
        tokenizers.trainers.BpeTrainer(
            vocab_size=290,
            special_tokens=SPECIALS,
            show_progress=False,
            initial_alphabet=tokenizers.pre_tokenizers.ByteLevel.alphabet(),
        ),
    )
    tok.save(str(root / "tokenizer.json"))
    (root / "tokenizer_config.json").write_text(json.dumps({"eos_token": "<|endoftext|>", "mask_token": "<|MASK|>"}))
    (root / "generation_config.json").write_text(json.dumps({"eos_token_id": [2, 0]}))
    torch.manual_seed(0)
    cfg = SDARConfig(vocab_size=300, mask_token_id=3, block_size=4, initializer_range=0.3)
    save_pretrained(SDARModel(cfg), root)
    return root


def run(capsys, *argv):
    rc = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return rc, out, err


def expected(ckpt, text, n, **kw):
    tok = load_tokenizer(ckpt)
    res = spotref.generate(from_pretrained(ckpt), tok.encode(text), n, stop_ids=tok.stop_ids, **kw)
    toks = res.tokens[:-1] if res.tokens and res.tokens[-1] in tok.stop_ids else res.tokens
    return tok.decode(toks)


@pytest.mark.parametrize("drafter", ["confidence", "none"])
def test_generate_prints_the_exact_text(capsys, ckpt, drafter):
    rc, out, err = run(
        capsys,
        "generate",
        "--model",
        ckpt,
        "--prompt",
        "def add(a,",
        "--max-new-tokens",
        12,
        "--drafter",
        drafter,
        "--temperature",
        0,
    )
    assert rc == 0 and out == expected(ckpt, "def add(a,", 12) + "\n"
    assert "passes" in err and f"drafter {drafter}" in err


def test_generate_takes_lookahead_and_prints_the_exact_text(capsys, ckpt):
    args = ["generate", "--model", ckpt, "--prompt", "def add(a,", "--max-new-tokens", 40, "--budget", 8]
    passes = lambda err: int(err.split(" passes")[0].split()[-1])
    rc, out, err = run(capsys, *args, "--lookahead")
    assert rc == 0 and out == expected(ckpt, "def add(a,", 40) + "\n"
    carried = int(err.split(" first passes carried")[0].split()[-1])
    rc, plain, plain_err = run(capsys, *args)
    assert rc == 0 and plain == out and passes(err) + carried <= passes(plain_err)  # and the stores folded in


@pytest.mark.parametrize("precision", ["float64", "bfloat16"])
def test_generate_takes_the_precision_and_the_width(capsys, ckpt, precision):
    rc, out, _ = run(
        capsys,
        "generate",
        "--model",
        ckpt,
        "--prompt",
        "def add(a,",
        "--max-new-tokens",
        12,
        "--temperature",
        1.0,
        "--seed",
        3,
        "--precision",
        precision,
        "--width",
        16,
    )
    assert rc == 0
    assert (
        out
        == expected(
            ckpt, "def add(a,", 12, temperature=1.0, seed=3, precision=precision, width=16, drafter="confidence"
        )
        + "\n"
    )
    rc, out, _ = run(
        capsys,
        "audit",
        "--model",
        ckpt,
        "--prompt",
        "def add(a,",
        "--max-new-tokens",
        12,
        "--width",
        16,
        "--precision",
        precision,
    )
    assert rc == 0 and "8/8 rows" in out and "audit: identical" in out


def test_generate_chat_and_sampling(capsys, ckpt):
    rc, out, _ = run(
        capsys,
        "generate",
        "--model",
        ckpt,
        "--prompt",
        "add",
        "--chat",
        "--max-new-tokens",
        8,
        "--temperature",
        1.0,
        "--seed",
        7,
        "--block-length",
        8,
        "--dtype",
        "float32",
    )
    assert rc == 0 and out.endswith("\n")


def test_generate_prompt_ids_without_tokenizer(capsys, tmp_path):
    torch.manual_seed(0)
    save_pretrained(SDARModel(SDARConfig(vocab_size=50, mask_token_id=49, block_size=4)), tmp_path)
    rc, out, _ = run(capsys, "generate", "--model", tmp_path, "--prompt-ids", "1,2,3", "--max-new-tokens", 5)
    assert rc == 0 and len(out.split()) == 5 and all(0 <= int(t) < 49 for t in out.split())
    rc, _, err = run(capsys, "generate", "--model", tmp_path, "--prompt", "hi")
    assert rc == 2 and "no tokenizer files: use --prompt-ids" in err


@pytest.mark.parametrize(
    "args, message",
    [
        (["--drafter", "spot"], "no shipped drafter checkpoint matches this model"),
        (["--drafter", "missing.pt"], "missing.pt"),
        (["--drafter", "magic"], "--drafter 'magic' is unknown"),
        (["--mask-id", 5], "the tokenizer's MASK token is id 3 but the model's mask_token_id is 5"),
        (["--mask-id", 300], "mask_token_id 300 is outside the vocabulary"),
        (["--max-new-tokens", 10**6], "exceeds the model's max_position_embeddings"),
        (["--prompt-ids", "1,3"], "is the MASK token"),
    ],
)
def test_bad_input_is_one_clear_line(capsys, ckpt, args, message):
    argv = ["generate", "--model", ckpt, "--max-new-tokens", 4] + args
    if "--prompt-ids" not in args:
        argv += ["--prompt", "x"]
    rc, out, err = run(capsys, *argv)
    assert rc == 2 and out == "" and message in err
    assert err.count("\n") == 1 and err.startswith("spotref generate: error: ")


@pytest.mark.parametrize(
    "args, message",
    [
        (["--dtype", "int8"], "argument --dtype: unsupported dtype 'int8'"),
        (["--prompt-ids", "1,x"], "argument --prompt-ids: must be an integer, got 'x'"),
        (["--temperature", -1], "argument --temperature: must be in"),
    ],
)
def test_bad_option_values_are_refused_as_parsed(capsys, ckpt, args, message):
    """Argparse errors (exit status 2) naming the option: the checkpoint is never read."""
    argv = ["generate", "--model", ckpt, "--max-new-tokens", 4] + args
    if "--prompt-ids" not in args:
        argv += ["--prompt", "x"]
    with pytest.raises(SystemExit) as e:
        main([str(a) for a in argv])
    err = capsys.readouterr().err
    assert e.value.code == 2 and message in err.splitlines()[-1] and "Traceback" not in err


def test_bad_model_directories(capsys, ckpt, tmp_path):
    rc, _, err = run(capsys, "generate", "--model", tmp_path / "nope", "--prompt", "x")
    assert rc == 2 and "no such checkpoint directory" in err
    rc, _, err = run(capsys, "generate", "--model", tmp_path, "--prompt", "x")
    assert rc == 2 and "has no config.json" in err
    rc, _, err = run(capsys, "generate", "--model", ckpt / "config.json", "--prompt", "x")
    assert rc == 2 and "is a file, not a checkpoint directory" in err
    if not torch.cuda.is_available():
        with pytest.raises(SystemExit) as e:
            main(["generate", "--model", str(ckpt), "--prompt", "x", "--device", "cuda"])
        assert e.value.code == 2 and "argument --device: " in capsys.readouterr().err


def test_audit_command(capsys, ckpt):
    rc, out, _ = run(
        capsys,
        "audit",
        "--model",
        ckpt,
        "--prompt",
        "def add(a,",
        "--max-new-tokens",
        12,
        "--budget",
        8,
        "--batch-rows",
        4,
    )
    assert rc == 0
    assert "batch invariance: 4/4 rows" in out and "audit: identical (" in out
    rc, _, err = run(capsys, "audit", "--model", ckpt, "--prompt", "x", "--drafter", "none")
    assert rc == 2 and "compares a drafter" in err


def test_bundled_target_by_name(capsys, monkeypatch):
    """--model NAME falls back to spotref.load_target when no such directory exists."""
    import types

    from spotref.load.bpe import ByteTokenizer

    torch.manual_seed(0)
    model = SDARModel(SDARConfig(vocab_size=258, mask_token_id=257, block_size=4, initializer_range=0.3))

    def load_target(name):
        if name != "tiny-bytes":
            raise KeyError(f"unknown target {name!r}")
        return types.SimpleNamespace(model=model, tokenizer=ByteTokenizer())

    monkeypatch.setattr("spotref.cli.generate.load_target", load_target)
    rc, out, _ = run(capsys, "generate", "--model", "tiny-bytes", "--prompt", "ab", "--max-new-tokens", 6)
    res = spotref.generate(model, list(b"ab"), 6, stop_ids=[256])
    toks = res.tokens[:-1] if res.tokens and res.tokens[-1] == 256 else res.tokens
    assert rc == 0 and out == ByteTokenizer().decode(toks) + "\n"
    rc, _, err = run(capsys, "generate", "--model", "other", "--prompt", "ab")
    assert rc == 2 and "no such checkpoint directory or bundled target" in err


@pytest.mark.slow
def test_real_bundled_target(capsys):
    """Both drafters print the same text on a shipped bundled target."""
    names = targets.list_targets()
    assert names, "no bundled target ships: spotref/load/targets/ is empty"
    outs = []
    for drafter in ("none", "confidence"):
        rc, out, err = run(
            capsys,
            "generate",
            "--model",
            names[0],
            "--prompt",
            "def f(x):",
            "--max-new-tokens",
            24,
            "--drafter",
            drafter,
        )
        assert rc == 0, err
        outs.append(out)
    assert outs[0] == outs[1]


@pytest.mark.slow
def test_a_chat_trained_bundled_target_takes_a_plain_question_in_its_chat_format(capsys):
    """``spotref generate --model gsm-b32 --prompt QUESTION`` answers it: the prompt goes in the
    target's chat format by default (as with --chat); --raw sends the text as it is."""
    from spotref.load.tokenizer import chat_format

    q = "Tom has 5 apples and buys 7 more. How many apples does he have?"
    target = spotref.load_target("gsm-b32")
    assert target.encode_chat(q) == target.encode(chat_format(q))
    res = spotref.generate(target, target.encode_chat(q), 64, drafter="confidence", stop_ids=target.stop_ids)
    text = target.tokenizer.decode(res.tokens[:-1] if res.tokens[-1:] == target.stop_ids else res.tokens)
    assert text.endswith("<|im_end|>")  # the chat targets write the turn's end as text, then end-of-text
    for chat in ([], ["--chat"]):
        rc, out, err = run(capsys, "generate", "--model", "gsm-b32", *chat, "--prompt", q, "--max-new-tokens", 64)
        assert rc == 0 and out == text.removesuffix("<|im_end|>") + "\n" and "####" in out, err
        assert "note:" not in err
    raw = spotref.generate(target, target.encode(q), 8, drafter="confidence", stop_ids=target.stop_ids)
    rc, out, _ = run(capsys, "generate", "--model", "gsm-b32", "--raw", "--prompt", q, "--max-new-tokens", 8)
    assert rc == 0 and out == target.tokenizer.decode(raw.tokens[:-1] if raw.tokens[-1:] == [0] else raw.tokens) + "\n"
    rc, _, err = run(capsys, "generate", "--model", "gsm-b32", "--prompt", chat_format(q), "--max-new-tokens", 4)
    assert rc == 0 and "holds chat markup and is wrapped once more; --raw sends it as it is" in err
    rc, _, err = run(capsys, "generate", "--model", "stdlib-b32", "--chat", "--prompt", "x")
    assert rc == 2 and "has no chat format" in err


@pytest.mark.slow
def test_generate_and_audit_take_budget_auto(capsys):
    """``--budget auto`` is the API's budget="auto" (the cost model's N on this machine)."""
    ids = "5,6,7,8,9"
    rc, out, err = run(capsys, "generate", "--model", "stdlib-b32", "--prompt-ids", ids, "--budget", "auto")
    want = spotref.generate("stdlib-b32", [5, 6, 7, 8, 9], 128, drafter="confidence", budget="auto", stop_ids=[0])
    assert rc == 0 and f"{len(want.tokens)} tokens, " in err and "drafter confidence" in err
    rc, out, _ = run(capsys, "audit", "--model", "stdlib-b32", "--prompt-ids", ids, "--budget", "auto")
    assert rc == 0 and "identical" in out


def canvas_checkpoint(tmp_path, family):
    """A small random LLaDA or Dream checkpoint directory in its own layout (no tokenizer)."""
    from spotref.configs import DreamConfig, LLaDAConfig
    from spotref.spec.dream import DreamModel
    from spotref.spec.llada import LLaDAModel

    torch.manual_seed(0)
    if family == "llada":
        dims = dict(d_model=32, n_heads=2, n_kv_heads=2, n_layers=2, mlp_hidden_size=48, vocab_size=40)
        model = LLaDAModel(LLaDAConfig(**dims, embedding_size=40, mask_token_id=39, max_sequence_length=256))
    else:
        dims = dict(hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=2)
        model = DreamModel(
            DreamConfig(
                **dims,
                num_key_value_heads=2,
                vocab_size=40,
                mask_token_id=39,
                pad_token_id=38,
                bos_token_id=38,
                eos_token_id=38,
            )
        )
    return save_pretrained(model, tmp_path / family), model


@pytest.mark.parametrize("family", ["llada", "dream"])
def test_generate_and_audit_read_a_whole_canvas_checkpoint(capsys, tmp_path, family):
    """`spotref generate --model DIR` reads any family's directory (config.json's model_type) and
    decodes it as spotref.generate does, at the --block-length given; audit finds SPOT identical."""
    path, model = canvas_checkpoint(tmp_path, family)
    argv = ["--model", path, "--prompt-ids", "1,2,3", "--max-new-tokens", 16, "--block-length", 8]
    rc, out, _ = run(capsys, "generate", *argv, "--temperature", 1.0, "--drafter", "confidence", "--budget", 4)
    want = spotref.generate(model, [1, 2, 3], 16, temperature=1.0, block_length=8)
    assert rc == 0 and out.split() == [str(t) for t in want.tokens]
    rc, out, err = run(capsys, "audit", *argv, "--temperature", 1.0)
    assert rc == 0, err
    rc, _, err = run(capsys, "generate", *argv, "--mask-id", 5)
    assert rc == 2 and "--mask-id" in err
