"""Issue 38's catalogue: each input once accepted silently, or refused only after forward passes
or with a traceback from inside torch, is now refused by name before any work (exact type and
a message naming the culprit)."""

import numpy as np
import pytest
import torch
from helpers import tiny_model

import spotref
from spotref.api import Speculator
from spotref.checkpoint import from_pretrained
from spotref.configs import SDARConfig
from workbench.checkpoint_writer import save_pretrained


def spec(**kw):
    return Speculator(vocab_size=10, block_size=4, mask_id=9, drafter=None, **kw)


def test_a_position_whose_only_finite_logit_is_masks_is_refused_and_the_block_is_unchanged():
    blk = spec(temperature=1.0, top_p=0.5).block(0, np.full(4, 9))
    blk.propose()
    L = torch.zeros(1, 4, 10)
    L[0, 2, :9] = -torch.inf  # position 2: only MASK is finite
    with pytest.raises(ValueError, match="row 0, position 2 has no finite logit but MASK's"):
        blk.accept(L)
    blk.accept(torch.zeros(1, 4, 10))  # the block still works
    assert blk.passes == 1


@pytest.mark.parametrize("precision, T", [("float32", 0.0), ("bfloat16", 1.0), ("float16", 0.5)])
def test_float64_logits_that_overflow_the_rules_precision_are_refused_and_can_be_retried(precision, T):
    """Float64 logits of 1e300, decided in a narrower precision: refused by name, the rows stay
    pending, and the corrected logits then give the tokens a fresh block gives."""
    blocks = [spec(temperature=T, precision=precision).block(0, np.full(4, 9)) for _ in range(2)]
    for blk in blocks:
        blk.propose()
    bad = torch.zeros(1, 4, 10, dtype=torch.float64)
    bad[..., 3] = 1e300
    with pytest.raises(ValueError, match=f"logits / T overflow torch.{precision}"):
        blocks[0].accept(bad)
    good = torch.randn(1, 4, 10, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    for blk in blocks:
        blk.accept(good)
    assert np.array_equal(blocks[0].tokens, blocks[1].tokens) and blocks[0].passes == blocks[1].passes == 1


def test_float64_logits_of_1e300_decided_in_float64_are_decided():
    blk = spec(temperature=1.0, precision="float64").block(0, np.full(4, 9))
    blk.propose()
    L = torch.zeros(1, 4, 10, dtype=torch.float64)
    L[0, 1, 3] = 1e300  # position 1, token 3: certain
    blk.accept(L)
    assert blk.tokens.tolist() == [9, 3, 9, 9]


def test_a_vocabulary_of_only_mask_is_refused():
    with pytest.raises(ValueError, match="vocab_size must be an int in \\[2, inf\\], got 1"):
        Speculator(vocab_size=1, block_size=4, mask_id=0)
    with pytest.raises(ValueError, match="SDARConfig.vocab_size 1 holds only MASK"):
        SDARConfig(vocab_size=1, mask_token_id=0, head_dim=16)


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda: torch.zeros(1, 4, 10, device="meta"), "dense tensor with values"),
        (lambda: torch.zeros(1, 4, 10).to_sparse(), "dense tensor with values"),
    ],
)
def test_meta_and_sparse_logits_are_refused(make, message):
    blk = spec().block(0, np.full(4, 9))
    blk.propose()
    with pytest.raises(ValueError, match=message):
        blk.accept(make())


def test_logits_that_require_grad_are_taken_detached_and_the_block_finishes():
    blk = spec().block(0, np.full(4, 9))
    while not blk.done:
        rows = blk.propose()
        blk.accept(torch.randn(len(rows), 4, 10, requires_grad=True))
    assert blk.passes == 4 and blk.done


def test_accept_keeps_a_copy_not_a_view_of_the_callers_buffer():
    blk = spotref.Speculator(vocab_size=10, block_size=4, mask_id=9, drafter="confidence").block(0, np.full(4, 9))
    buf = torch.randn(1, 4, 10)
    blk.propose()
    blk.accept(buf)
    before = blk.stale.clone()
    buf.fill_(7.0)  # the caller reuses its buffer
    assert torch.equal(blk.stale, before)


@pytest.mark.parametrize(
    "kw, message", [(dict(budget=2**31), "budget must be an int in"), (dict(depth=2**31), "depth must be an int in")]
)
def test_budgets_and_depths_the_core_cannot_hold_are_refused_up_front(kw, message):
    with pytest.raises(ValueError, match=message):
        Speculator(vocab_size=10, block_size=4, mask_id=9, drafter="confidence", **kw)


@pytest.mark.parametrize("index", [2**31, 2**64, 2**64 + 1, -1])
def test_a_block_index_beyond_the_noise_key_is_refused(index):
    with pytest.raises(ValueError, match="index must be an int in"):
        spec().block(index, np.full(4, 9))


def test_mask_as_a_stop_id_is_refused():
    with pytest.raises(ValueError, match="stop_ids holds the MASK token 9"):
        spotref.generate(tiny_model(V=10, B=4), [1, 2], 4, stop_ids=[3, 9])


@pytest.mark.parametrize(
    "kw, message",
    [
        (dict(head_dim=7), "head_dim must be even"),
        (dict(vocab_size=2**63), r"vocab_size must be an int in \[1, 2\*\*31 - 1\]"),
        (dict(rope_theta=1e-300), "rope_theta must be above 1"),
        (dict(eos_token_id=-1), "eos_token_id -1 is not a token id"),
        (dict(eos_token_id=[5, 300]), r"eos_token_id \[5, 300\] is not a token id"),
        (dict(bos_token_id=300), "bos_token_id 300 is not a token id"),
    ],
)
def test_configs_that_would_fail_inside_torch_are_refused_by_field(kw, message):
    with pytest.raises(ValueError, match=message):
        SDARConfig(**{"vocab_size": 300, "head_dim": 16, **kw})


@pytest.mark.parametrize("device", ["mps", "cuda:7", "xla", "nonsense"])
def test_a_device_this_machine_lacks_is_refused_by_name(device):
    from spotref.checkpoint import resolve_device

    if torch.cuda.is_available() and device == "cuda:7" and torch.cuda.device_count() > 7:
        pytest.skip("this machine has 8 GPUs")
    with pytest.raises(ValueError, match="device"):
        resolve_device(device)


@pytest.mark.parametrize("name", ["stdlib-b32", "gsm-b32"])
def test_the_literal_text_of_a_special_token_encodes_as_text(name):
    tok = spotref.load_target(name).tokenizer
    text = "a <|mask|> b <|eos|>"
    ids = tok.encode(text)
    assert tok.mask_id not in ids and tok.eos_id not in ids and tok.decode(ids) == text
    assert tok.encode_batch([text, "x"]) == [ids, tok.encode("x")]


@pytest.mark.parametrize(
    "bad, message",
    [
        ([2.7], "2.7 at index 0 is not an integer"),
        (["5"], "'5' at index 0 is not an integer"),
        ([True, 5], "True at index 0 is not an integer"),
        ("12", "a sequence of token ids"),
    ],
)
def test_decode_refuses_what_is_not_token_ids(bad, message):
    with pytest.raises(ValueError, match=message):
        spotref.load_target("stdlib-b32").tokenizer.decode(bad)


def test_a_target_whose_files_do_not_fit_is_refused_by_name(tmp_path):
    import hashlib
    import json
    import os

    from spotref.load.targets import TARGETS_DIR, load_target

    meta = json.loads((TARGETS_DIR / "gsm-b32.json").read_text())
    for f in (meta["weights"]["file"], meta["tokenizer"]["file"]):
        os.symlink(TARGETS_DIR / f, tmp_path / f)

    def refused(edit, message):
        m = json.loads(json.dumps(meta))
        edit(m)
        (tmp_path / "gsm-b32.json").write_text(json.dumps(m))
        with pytest.raises(ValueError, match=message):
            load_target(tmp_path / "gsm-b32.json")

    refused(lambda m: m["tokenizer"].update(file="../targets/gsm-b32.tokenizer.json"), "must name a file beside it")
    refused(lambda m: m["config"].update(mask_token_id=5), "tokenizer's MASK id is 1, the model's mask_token_id 5")
    (tmp_path / "bytes.json").write_text(json.dumps({"kind": "bytes"}))
    other = hashlib.sha256((tmp_path / "bytes.json").read_bytes()).hexdigest()  # named, with its SHA-256: read
    refused(
        lambda m: m["tokenizer"].update(file="bytes.json", sha256=other),
        "tokenizer.s MASK id is 257, the model.s mask_token_id 1",
    )
    meta["config"]["mask_token_id"] = 257  # the same MASK id, other sizes
    refused(
        lambda m: m["tokenizer"].update(file="bytes.json", sha256=other),
        "the tokenizer has 258 ids, the model.s vocabulary 1024",
    )


@pytest.mark.parametrize("option", ["--targets-dir", "--drafters-dir"])
def test_bench_refuses_a_directory_that_is_not_there(capsys, option, tmp_path):
    from workbench.cli import main

    assert main(["bench", "--quick", option, "/nonexistent", "--out", str(tmp_path / "r.md")]) == 2
    assert f"{option} '/nonexistent' is not a directory" in capsys.readouterr().err


@pytest.mark.parametrize("n", [10**9, -1, 2.5, True])
def test_heldout_refuses_an_unbounded_or_odd_count(n):
    with pytest.raises(ValueError, match="heldout: n must be an int"):
        spotref.load_target("gsm-b32").heldout(n)


@pytest.mark.parametrize("path", [123, None, b"/tmp/ck", ""])
def test_a_checkpoint_path_that_is_not_a_path_is_refused_by_name(path, tmp_path):
    pytest.importorskip("safetensors")
    from workbench.checkpoint_writer import save_pretrained

    with pytest.raises(ValueError, match="the checkpoint directory must be a path"):
        from_pretrained(path)
    with pytest.raises(ValueError, match="save_pretrained: path must be a path"):
        save_pretrained(tiny_model(V=10, B=4), path)


# ---- issue 48, round 4: silent-wrong configs and API edges ------------------------------------


def saved_family(family: str, path):
    """A tiny model of ``family`` (conformance's shapes) saved to ``path``; returns the path."""
    from spotref.conformance import MODELS, tiny_config

    cfg = tiny_config(family, 40, 39, 4, hidden=16, layers=1, heads=2, kv=1, tied=False, init=0.3)
    torch.manual_seed(0)
    return save_pretrained(MODELS[family](cfg), path)


def edit_config(root, **changes):
    """config.json of ``root`` with ``changes`` (a value of ... removes the key)."""
    import json

    d = json.loads((root / "config.json").read_text())
    d.update(changes)
    d = {k: v for k, v in d.items() if v is not ...}
    (root / "config.json").write_text(json.dumps(d))
    return d


def test_sdar_configs_default_to_qwen3s_rope_base_and_norm_epsilon():
    """The stored gsm targets use RoPE base 10000, transformers' Qwen3 default; SDARConfig's was 1e6."""
    cfg = SDARConfig()
    assert (cfg.rope_theta, cfg.rms_norm_eps, cfg.max_position_embeddings) == (10000.0, 1e-6, 32768)


@pytest.mark.parametrize(
    "family, key, default",
    [
        ("sdar", "rope_theta", "transformers' Qwen3 default: 10000.0"),
        ("sdar", "rms_norm_eps", "Qwen3's default: 1e-06"),
        ("sdar", "head_dim", "Qwen3's default: 128"),
        ("llada", "rope_theta", "LLaDA's default: 10000.0"),
        ("llada", "rms_norm_eps", "LLaDA's default: 1e-05"),
        ("dream", "rope_theta", "Dream's default: 10000.0"),
        ("dream", "rms_norm_eps", "Dream's default: 1e-06"),
    ],
)
def test_a_config_json_without_a_key_that_sets_the_logits_is_refused_by_name(tmp_path, family, key, default):
    """Such a config loaded with spotref's default, which need not be the model's (RoPE base 1e6
    for a model trained with 1e4: garbage, without a word)."""
    pytest.importorskip("safetensors")
    from spotref.checkpoint import from_pretrained

    root = saved_family(family, tmp_path / "ckpt")
    from_pretrained(root)  # as saved: every key stated
    edit_config(root, **{key: ...})
    with pytest.raises(ValueError, match=rf"config.json has no {key} \({default}"):
        from_pretrained(root)


def test_a_rope_base_held_in_rope_parameters_is_stated(tmp_path):
    pytest.importorskip("safetensors")
    root = saved_family("sdar", tmp_path / "ckpt")
    edit_config(root, rope_theta=..., rope_parameters={"rope_type": "default", "rope_theta": 500000.0})
    assert from_pretrained(root).config.rope_theta == 500000.0


def test_a_target_whose_config_lacks_its_rope_base_is_refused_by_name(tmp_path):
    import json
    import os

    from spotref.load.targets import TARGETS_DIR, load_target

    meta = json.loads((TARGETS_DIR / "gsm-b32.json").read_text())
    for f in (meta["weights"]["file"], meta["tokenizer"]["file"]):
        os.symlink(TARGETS_DIR / f, tmp_path / f)
    del meta["config"]["rope_theta"]
    (tmp_path / "gsm-b32.json").write_text(json.dumps(meta))
    with pytest.raises(ValueError, match="config: config.json has no rope_theta"):
        load_target(tmp_path / "gsm-b32.json")


def test_a_resumed_training_run_keeps_the_rope_base_it_was_trained_with():
    """A run started under the old default (1e6, no --rope-theta) resumes with 1e6, not the new default."""
    from workbench.train.train_loop import with_saved_rope_theta
    from workbench.train.train_options import default_options

    saved = {"config": {"rope_theta": 1e6}}
    assert with_saved_rope_theta(default_options("r"), saved).rope_theta == 1e6
    assert with_saved_rope_theta(default_options("r"), {"config": {}}).rope_theta is None
    with pytest.raises(ValueError, match="--rope-theta: the run r was trained with 1000000.0, not 10000.0"):
        with_saved_rope_theta(TrainOptionsWith(rope_theta=1e4), saved)


def TrainOptionsWith(**changes):
    from dataclasses import replace

    from workbench.train.train_options import default_options

    return replace(default_options("r"), **changes)


@pytest.mark.parametrize(
    "key, value, served",
    [
        ("torch_dtype", "bf16", "bfloat16"),
        ("torch_dtype", "torch.bfloat16", "bfloat16"),
        ("torch_dtype", "half", "float16"),
        ("torch_dtype", "auto", "auto"),
        ("dtype", "fp16", "float16"),
        ("decision_precision", "bf16", "bfloat16"),
        ("decision_precision", "auto", "auto"),
    ],
)
def test_a_serving_precision_alias_or_auto_round_trips(tmp_path, key, value, served):
    """ "bf16" was served as "auto" (it is no rules.DTYPES name) and written back as a
    decision_precision the loader refused; "auto" too. Now: read as the canonical name, served
    as it (docs/spec.md section 2: "auto" is the logits' dtype), written back loadable, and a
    second round trip writes the same config."""
    pytest.importorskip("safetensors")
    import json

    from spotref.api import serving_precision

    root = saved_family("sdar", tmp_path / "a")
    edit_config(root, **{"torch_dtype": ... if key == "dtype" else "float32", key: value})  # dtype: transformers 5's
    model = from_pretrained(root, dtype="float32")
    assert serving_precision(model) == served
    configs = []
    for name in ("b", "c"):
        model = from_pretrained(save_pretrained(model, tmp_path / name), dtype="float32")
        assert serving_precision(model) == served
        configs.append(json.loads((tmp_path / name / "config.json").read_text()))
    assert configs[0] == configs[1] and configs[0]["torch_dtype"] == "float32"
    assert configs[0].get("decision_precision", "float32") == served


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda: np.zeros((1, 4, 10), dtype=np.longdouble), "numpy dtype float128"),
        (lambda: np.zeros((1, 4, 10), dtype=">f4"), "big-endian numpy array"),
        (lambda: np.zeros((1, 4, 10), dtype=np.float32)[..., ::-1], "a numpy array with a negative stride"),
        (lambda: torch.zeros(1, 4, 10, dtype=torch.float8_e4m3fn), "dtype torch.float8_e4m3fn"),
    ],
)
def test_logits_torch_cannot_take_as_they_are_are_refused_by_name_and_the_rows_stay_pending(make, message):
    if message.startswith("numpy dtype float128") and np.dtype(np.longdouble).itemsize <= 8:
        pytest.skip("this platform's long double is float64")
    blk = spec().block(0, np.full(4, 9))
    blk.propose()
    with pytest.raises(ValueError, match=message):
        blk.accept(make())
    blk.accept(np.zeros((1, 4, 10), dtype=np.float32))  # the block still takes good logits
    assert blk.passes == 1


def test_clearing_the_decisions_a_block_returns_leaves_the_block_working():
    """``Block.decisions`` was the block's own list: a caller clearing it broke the next round."""
    spec_ = Speculator(vocab_size=10, block_size=4, mask_id=9, drafter="confidence", temperature=1.0)
    blocks = [spec_.block(0, np.full(4, 9)) for _ in range(2)]
    logits = torch.randn(4, 64, 4, 10, generator=torch.Generator().manual_seed(1))
    for k, blk in enumerate(blocks):
        for i in range(4):
            if blk.done:
                break
            rows = blk.propose()
            blk.accept(logits[i, : len(rows)])
            if k == 0:
                got = blk.decisions
                assert isinstance(got, tuple)
                list(got).clear()
    assert blocks[0].decisions == blocks[1].decisions and np.array_equal(blocks[0].tokens, blocks[1].tokens)
    assert len(blocks[0].decisions) >= 1


def test_block_decisions_cannot_be_cleared_in_place():
    blk = spec().block(0, np.full(4, 9))
    blk.propose()
    blk.accept(torch.zeros(1, 4, 10))
    with pytest.raises(AttributeError):
        blk.decisions.clear()
    assert len(blk.decisions) == 1


def test_run_conformance_refuses_no_examples_by_name():
    pytest.importorskip("hypothesis")
    from spotref.conformance import run_conformance

    with pytest.raises(ValueError, match=r"max_examples must be an int in \[1, inf\], got 0"):
        run_conformance(spotref.generate, max_examples=0)


def test_run_conformance_names_a_decoder_that_returns_a_list_before_any_case():
    pytest.importorskip("hypothesis")
    from spotref.conformance import run_conformance

    calls = []

    def tokens_only(*args, **kwargs):
        calls.append(1)
        return spotref.generate(*args, **kwargs).tokens

    with pytest.raises(TypeError, match="generate_fn returned a list, not a result with tokens and passes"):
        run_conformance(tokens_only, max_examples=50)
    assert len(calls) == 1  # the probe case only: no Hypothesis case, no shrinking


@pytest.mark.parametrize(
    "messages, message",
    [
        (123, "messages must be a str .* got int 123"),
        ({"role": "user", "content": "hi"}, "got one dict: pass a list of them"),
        (b"hi", "got bytes"),
    ],
)
def test_encode_chat_names_messages_that_are_no_str_or_list(messages, message):
    with pytest.raises(ValueError, match=message):
        spotref.load_target("gsm-b32").encode_chat(messages)


@pytest.mark.parametrize(
    "make", [lambda: torch.tensor([1, 2, 3], device="meta"), lambda: torch.tensor([1, 2]).to_sparse()]
)
@pytest.mark.parametrize("argument", ["prompt_ids", "stop_ids"])
def test_a_meta_or_sparse_tensor_of_ids_is_refused_by_name(make, argument):
    kw = {"prompt_ids": [1, 2], "stop_ids": None, argument: make()}
    with pytest.raises(ValueError, match=f"{argument} must be a dense tensor with values"):
        spotref.generate(tiny_model(V=10, B=4), kw["prompt_ids"], 4, stop_ids=kw["stop_ids"])


@pytest.mark.parametrize("drafter", ["gsm-b16", "object"])
def test_a_drafter_of_another_block_size_is_taken_and_a_strict_one_refused_when_resolved(drafter):
    """A block-16 SPOT drafter for the block-32 gsm target, by name or as loaded, is taken (it was
    refused: transfer is the default). Asked for with strict=True it is refused when the
    Speculator resolves it, before the prefill (it was refused only at its first call, after a pass)."""
    from spotref.load.drafters import load_drafter

    if drafter == "object":
        d = load_drafter("gsm-b16")
        assert Speculator.for_model("gsm-b32", drafter=d).drafter is d
    else:
        assert Speculator.for_model("gsm-b32", drafter=drafter).drafter.model.block_size == 16
    with pytest.raises(ValueError, match="trained for block size 16, the target's block size is 32, and it is strict"):
        Speculator.for_model("gsm-b32", drafter=load_drafter("gsm-b16", strict=True))
