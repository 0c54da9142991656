"""Checkpoint directories: save/load round trips, dtypes, and one clear error per bad directory."""

import json
from pathlib import Path

import pytest
import torch
from helpers import SDAR_FILES

from spotref.checkpoint import from_pretrained
from spotref.configs import SDARConfig
from spotref.spec.sdar import SDARModel
from workbench.checkpoint_writer import save_pretrained

pytest.importorskip("safetensors")
REAL = SDAR_FILES


def tiny(tie=False, **kw) -> SDARModel:
    torch.manual_seed(0)
    cfg = SDARConfig(vocab_size=300, mask_token_id=299, block_size=8, tie_word_embeddings=tie, **kw)
    return SDARModel(cfg).eval()


@pytest.fixture
def ckpt(tmp_path):
    return save_pretrained(tiny(), tmp_path / "ckpt")


def load_error(path, **kw) -> str:
    with pytest.raises(ValueError) as e:
        from_pretrained(path, **kw)
    assert "\n" not in str(e.value)
    return str(e.value)


def edit_config(root: Path, **changes):
    cfg = json.loads((root / "config.json").read_text())
    cfg.update(changes)
    cfg = {k: v for k, v in cfg.items() if v is not None}
    (root / "config.json").write_text(json.dumps(cfg))


@pytest.mark.parametrize("tie, shard", [(False, None), (True, None), (False, 30_000), (True, 30_000)])
def test_round_trip_is_bit_identical(tmp_path, tie, shard):
    m = tiny(tie)
    root = save_pretrained(m, tmp_path, max_shard_bytes=shard)
    assert (root / ("model.safetensors.index.json" if shard else "model.safetensors")).is_file()
    m2 = from_pretrained(root)
    assert m2.config.tie_word_embeddings == tie
    assert (m2.lm_head.weight is m2.model.embed_tokens.weight) == tie
    x = torch.randint(0, 299, (2, 20))
    assert torch.equal(m(x), m2(x))


def test_the_model_saves_itself_beside_from_pretrained(tmp_path):
    """``model.save_pretrained`` is the checkpoint module's writer: same files, read back equal."""
    m = tiny()
    assert save_pretrained(m, tmp_path / "a", dtype="bf16", max_shard_bytes=30_000) == tmp_path / "a"
    save_pretrained(m, tmp_path / "b", dtype="bf16", max_shard_bytes=30_000)
    files = sorted(p.name for p in (tmp_path / "a").iterdir())
    assert files == sorted(p.name for p in (tmp_path / "b").iterdir()) and "model.safetensors.index.json" in files
    assert all((tmp_path / "a" / f).read_bytes() == (tmp_path / "b" / f).read_bytes() for f in files)
    m2 = from_pretrained(tmp_path / "a")
    assert m2.lm_head.weight.dtype == torch.bfloat16 and torch.equal(m2.lm_head.weight, m.lm_head.weight.bfloat16())


def test_a_round_trip_keeps_the_serving_precision(tmp_path):
    """A float32 model served in bf16 (its config's torch_dtype, as the bundled gsm targets) saved
    in float32: config.json's torch_dtype is the stored dtype and decision_precision the served
    one, so the reloaded model loads in float32 and decides in bf16, as the original did."""
    import spotref
    from spotref.api import serving_precision

    m = tiny()
    m.config.extra["torch_dtype"] = "bfloat16"
    root = save_pretrained(m, tmp_path / "a")
    cfg = json.loads((root / "config.json").read_text())
    assert (cfg["torch_dtype"], cfg["decision_precision"]) == ("float32", "bfloat16") and "dtype" not in cfg
    m2 = from_pretrained(root)
    assert m2.lm_head.weight.dtype == torch.float32 and serving_precision(m2) == "bfloat16"
    for T in (0.0, 0.7):
        a, b = (spotref.generate(x, [1, 2, 3], 12, temperature=T, seed=4, drafter="confidence") for x in (m, m2))
        exact = spotref.generate(m, [1, 2, 3], 12, temperature=T, seed=4)
        assert a.tokens == b.tokens == exact.tokens and a.stats["trajectory"] == b.stats["trajectory"]
    bf = json.loads((save_pretrained(m2, tmp_path / "b", dtype="bf16") / "config.json").read_text())
    assert bf["torch_dtype"] == "bfloat16" and "decision_precision" not in bf  # stored as served
    edit_config(root, decision_precision="fp8")
    assert "decision_precision must be one of auto, float64, float32, bfloat16, float16 (or an alias" in load_error(
        root
    )


@pytest.mark.parametrize(
    "name, want",
    [("bfloat16", torch.bfloat16), ("fp16", torch.float16), (torch.float32, torch.float32), (None, torch.bfloat16)],
)
def test_dtypes(tmp_path, name, want):
    root = save_pretrained(tiny(), tmp_path, dtype="bfloat16")  # config says torch_dtype bfloat16
    m = from_pretrained(root, dtype=name)
    assert {p.dtype for p in m.parameters()} == {want}
    assert m(torch.zeros(1, 8, dtype=torch.long)).dtype == want


def test_arguments_override_the_config(ckpt):
    edit_config(ckpt, block_size=None, mask_token_id=None)
    assert "block_size" in load_error(ckpt, mask_token_id=5)
    assert "mask_token_id" in load_error(ckpt, block_size=4)
    m = from_pretrained(ckpt, block_size=4, mask_token_id=5)
    assert (m.block_size, m.mask_id) == (4, 5)


def test_bad_directories(tmp_path, ckpt):
    assert "does not exist" in load_error(tmp_path / "nope")
    (tmp_path / "file").write_text("x")
    assert "not a checkpoint directory" in load_error(tmp_path / "file")
    (tmp_path / "empty").mkdir()
    assert "no config.json" in load_error(tmp_path / "empty")
    (ckpt / "model.safetensors").unlink()
    (ckpt / "pytorch_model.bin").write_text("x")
    assert "neither model.safetensors" in load_error(ckpt) and "pytorch_model.bin" in load_error(ckpt)
    (ckpt / "config.json").write_text("{not json")
    assert "cannot read the model config" in load_error(ckpt)


def test_missing_unexpected_and_wrong_shaped_tensors_are_named(tmp_path):
    from safetensors.torch import load_file, save_file

    root = save_pretrained(tiny(), tmp_path)
    state = load_file(root / "model.safetensors")
    del state["model.layers.1.mlp.up_proj.weight"]
    state["model.layers.7.mlp.up_proj.weight"] = torch.zeros(3)
    state["model.norm.weight"] = torch.ones(65)
    save_file(state, str(root / "model.safetensors"))
    msg = load_error(root)
    assert "missing 1 tensor(s): model.layers.1.mlp.up_proj.weight" in msg
    assert "unexpected 1 tensor(s): model.layers.7.mlp.up_proj.weight" in msg
    assert "wrong-shaped 1 tensor(s): model.norm.weight (65,) (config.json wants (64,))" in msg


def test_config_disagreeing_with_the_weights(ckpt):
    edit_config(ckpt, hidden_size=32)
    msg = load_error(ckpt)
    assert "wrong-shaped" in msg and "model.embed_tokens.weight (300, 64) (config.json wants (300, 32))" in msg


def test_missing_shard_and_index_mismatch(tmp_path):
    root = save_pretrained(tiny(), tmp_path, max_shard_bytes=30_000)
    index = json.loads((root / "model.safetensors.index.json").read_text())
    shard = index["weight_map"]["model.norm.weight"]
    index["weight_map"]["model.layers.0.extra.weight"] = shard
    (root / "model.safetensors.index.json").write_text(json.dumps(index))
    assert "model.layers.0.extra.weight" in load_error(root) and "not in" in load_error(root)
    (root / shard).unlink()
    assert f"missing: {shard}" in load_error(root)


def test_unsupported_dtypes_and_devices(ckpt, tmp_path):
    assert "unsupported dtype 'int8'" in load_error(ckpt, dtype="int8")
    assert "unsupported dtype" in load_error(ckpt, dtype=torch.float64)
    if not torch.cuda.is_available():
        assert "CUDA is not available" in load_error(ckpt, device="cuda")
    assert "bad device" in load_error(ckpt, device="gpu0")
    from safetensors.torch import save_file

    root = save_pretrained(tiny(), tmp_path / "q")
    save_file({n: t.to(torch.int8) for n, t in tiny().state_dict().items()}, str(root / "model.safetensors"))
    assert "unsupported stored dtype" in load_error(root)


def test_bad_vocab_or_mask_id(ckpt):
    assert "mask_token_id 300 is outside the vocabulary" in load_error(ckpt, mask_token_id=300)
    edit_config(ckpt, mask_token_id=151669)
    assert "outside the vocabulary [0, 300)" in load_error(ckpt)
    edit_config(ckpt, mask_token_id=299, vocab_size=400)
    assert "wrong-shaped" in load_error(ckpt) and "lm_head.weight (300, 64)" in load_error(ckpt)


def test_transformers5_rope_parameters(ckpt):
    edit_config(ckpt, rope_theta=None, rope_parameters={"rope_type": "default", "rope_theta": 10000.0})
    assert from_pretrained(ckpt).config.rope_theta == 10000.0
    edit_config(ckpt, rope_parameters={"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0})
    assert "rope_parameters" in load_error(ckpt)


def test_unsupported_qwen3_options(ckpt):
    edit_config(ckpt, rope_scaling={"type": "yarn", "factor": 4.0}, attention_bias=True)
    msg = load_error(ckpt)
    assert "rope_scaling" in msg and "attention_bias" in msg


@pytest.mark.skipif(
    not (REAL / "config.json").is_file(),
    reason=f"the real SDAR-8B config and tokenizer files (kept outside the repository) are not at "
    f"{SDAR_FILES}: set SPOTREF_SDAR_DIR",
)
def test_real_index_names_are_the_models_names():
    """Every name of the real SDAR-8B index, with the shape the real config gives it."""
    from spotref.checkpoint import build_on_meta
    from spotref.configs import sdar_config_fields as config_fields

    raw = json.loads((REAL / "config.json").read_text())
    cfg = SDARConfig.from_dict(config_fields(raw))
    assert (cfg.block_size, cfg.mask_token_id, cfg.vocab_size) == (4, 151669, 151936)
    model = build_on_meta(SDARModel, cfg)
    names = set(json.loads((REAL / "model.safetensors.index.json").read_text())["weight_map"])
    assert names == set(model.state_dict())
    total = sum(p.numel() for p in model.parameters()) * 2
    assert total == json.loads((REAL / "model.safetensors.index.json").read_text())["metadata"]["total_size"]
