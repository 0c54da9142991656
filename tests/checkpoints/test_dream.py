"""spotref's Dream model (spotref/spec/dream.py): its checkpoint layout read and written, its logits
against transformers' Qwen2 with bidirectional attention, and against Dream's own modeling code.

The checkpoints are small and random, in Dream's real layout: Dream-v0-Instruct-7B's config.json
keys (dimensions shrunk), its weight names, one file or shards with an index, bf16 storage.
transformers' Qwen2 is made bidirectional by passing a 4D float attention mask of zeros
(N, 1, L, L): transformers 5 (``masking_utils.create_causal_mask``) returns a 4D mask as it is,
and eager attention adds it to the scores, so no causal mask is built.
"""

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from spotref.api import serving_precision
from spotref.checkpoint import from_pretrained
from spotref.configs import DreamConfig
from spotref.spec.dream import DreamModel
from workbench.checkpoint_writer import save_pretrained

safetensors_torch = pytest.importorskip("safetensors.torch")

DIMS = dict(
    vocab_size=320,
    hidden_size=64,
    intermediate_size=96,
    num_hidden_layers=3,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=512,
    mask_token_id=319,
    pad_token_id=318,
    bos_token_id=318,
    eos_token_id=318,
)
# Dream-v0-Instruct-7B's config.json, every key, with the dimensions and ids above in place of its own.
REAL_CONFIG = {
    "architectures": ["DreamModel"],
    "attention_dropout": 0.0,
    "auto_map": {"AutoConfig": "configuration_dream.DreamConfig", "AutoModel": "modeling_dream.DreamModel"},
    "hidden_act": "silu",
    "initializer_range": 0.02,
    "max_window_layers": 28,
    "model_type": "Dream",
    "rms_norm_eps": 1e-06,
    "rope_scaling": None,
    "rope_theta": 1000000.0,
    "sliding_window": None,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "transformers_version": "4.46.2",
    "use_cache": False,
    "use_sliding_window": False,
    **DIMS,
}
IDS = torch.tensor([[5, 17, 319, 319, 42, 7, 319, 300, 1, 0, 319], [9, 9, 9, 319, 319, 319, 319, 2, 3, 4, 5]])


def random_model(seed=0, **changes) -> DreamModel:
    """A Dream model with every tensor random (biases and norms too, so each is exercised)."""
    torch.manual_seed(seed)
    model = DreamModel(DreamConfig.from_dict({**REAL_CONFIG, **changes}))
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0.0, 0.3 if p.ndim == 1 else 0.08)
    return model


def tensor_names(layers: int) -> list:
    """Dream's weight names, as its checkpoints hold them."""
    per_layer = [f"self_attn.{p}_proj.{w}" for p in "qkv" for w in ("weight", "bias")]
    per_layer += ["self_attn.o_proj.weight", "mlp.gate_proj.weight", "mlp.up_proj.weight", "mlp.down_proj.weight"]
    per_layer += ["input_layernorm.weight", "post_attention_layernorm.weight"]
    names = [f"model.layers.{i}.{n}" for i in range(layers) for n in per_layer]
    return ["model.embed_tokens.weight", *names, "model.norm.weight", "lm_head.weight"]


def write_by_hand(root: Path, model: DreamModel, shards: int, dtype=torch.bfloat16) -> None:
    """The checkpoint as Dream's release lays it out, written here without spotref's writer:
    ``model-0000k-of-0000n.safetensors`` split by layer, and their index."""
    state = model.state_dict()
    assert sorted(state) == sorted(tensor_names(model.config.num_hidden_layers))
    root.mkdir()
    (root / "config.json").write_text(json.dumps({**REAL_CONFIG, "torch_dtype": str(dtype)[6:]}, indent=2))
    groups = {}
    for n in tensor_names(model.config.num_hidden_layers):
        layer = int(n.split(".")[2]) if n.startswith("model.layers.") else (0 if "embed" in n else 99)
        groups.setdefault(min(layer * shards // model.config.num_hidden_layers, shards - 1), []).append(n)
    wmap = {}
    for k, names in sorted(groups.items()):
        fname = f"model-{k + 1:05d}-of-{shards:05d}.safetensors"
        safetensors_torch.save_file({n: state[n].to(dtype) for n in names}, str(root / fname), {"format": "pt"})
        wmap.update({n: fname for n in names})
    index = {"metadata": {"total_size": 0}, "weight_map": wmap}
    (root / "model.safetensors.index.json").write_text(json.dumps(index, indent=2))


def bidirectional_qwen2(model: DreamModel):
    """transformers' Qwen2ForCausalLM with the weights of ``model`` (eager attention, float32)."""
    transformers = pytest.importorskip("transformers")
    c = model.config
    cfg = transformers.Qwen2Config(
        **{k: getattr(c, k) for k in (*DIMS, "rms_norm_eps", "rope_theta", "tie_word_embeddings")},
        attn_implementation="eager",
    )
    hf = transformers.Qwen2ForCausalLM(cfg).eval()
    missing, unexpected = hf.load_state_dict(model.state_dict(), strict=False)
    assert not unexpected and not [m for m in missing if "rotary" not in m], (missing, unexpected)
    return hf


def qwen2_logits(hf, ids):
    zeros = torch.zeros(ids.shape[0], 1, ids.shape[1], ids.shape[1])  # (N, 1, L, L): every position sees all
    with torch.no_grad():
        return hf(input_ids=ids, attention_mask=zeros).logits


def test_the_family_contract():
    m = random_model()
    assert (m.family, m.logit_shift, m.block_size, m.mask_id) == ("dream", 1, 32, 319)
    assert m.config.vocab_size == 320 and m.config.max_position_embeddings == 512
    assert m.config.extra["torch_dtype"] == "bfloat16" and serving_precision(m) == "bfloat16"
    assert m.config.extra["auto_map"] == REAL_CONFIG["auto_map"]
    out = m(IDS)
    assert out.shape == (2, 11, 320) and out.dtype == torch.float32 and not out.requires_grad


def test_bidirectional_and_rows_independent():
    m = random_model()
    out = m(IDS)
    later = IDS.clone()
    later[0, -1] = 8  # a later token changes an earlier position's logits: no causal mask
    assert not torch.allclose(m(later)[0, 0], out[0, 0])
    assert torch.allclose(m(IDS[1:]), out[1:], atol=1e-6)  # a row's logits do not read other rows


def test_logits_match_bidirectional_qwen2():
    m = random_model(seed=1)
    ours, theirs = m(IDS), qwen2_logits(bidirectional_qwen2(m), IDS)
    assert (ours - theirs).abs().max().item() <= 1e-4
    causal = bidirectional_qwen2(m)(input_ids=IDS).logits.detach()
    assert (ours - causal).abs().max().item() > 1e-3  # the mask matters: transformers' default differs


@pytest.mark.parametrize("shards", [1, 4])
def test_a_checkpoint_in_dreams_layout_reads_back(tmp_path, shards):
    m = random_model(seed=2)
    write_by_hand(tmp_path / "ck", m, shards)
    files = sorted(p.name for p in (tmp_path / "ck").iterdir())
    assert len([f for f in files if f.endswith(".safetensors")]) == shards
    back = from_pretrained(tmp_path / "ck")  # stored bf16, config says bfloat16
    assert back.lm_head.weight.dtype == torch.bfloat16 and not back.config.tie_word_embeddings
    as_bf16 = m.to(torch.bfloat16)
    for n, t in as_bf16.state_dict().items():
        assert torch.equal(back.state_dict()[n], t), n
    assert torch.equal(back(IDS), as_bf16(IDS))
    f32 = from_pretrained(tmp_path / "ck", dtype="float32")
    assert f32.lm_head.weight.dtype == torch.float32 and serving_precision(f32) == "bfloat16"


@pytest.mark.parametrize("sharded", [False, True])
def test_save_pretrained_writes_the_real_layout_and_reads_back_bit_for_bit(tmp_path, sharded):
    m = random_model(seed=3)
    save_pretrained(m, tmp_path / "ck", max_shard_bytes=60_000 if sharded else None)
    files = sorted(p.name for p in (tmp_path / "ck").iterdir())
    assert ("model.safetensors.index.json" in files) == sharded and ("model.safetensors" in files) != sharded
    cfg = json.loads((tmp_path / "ck" / "config.json").read_text())
    assert cfg["model_type"] == "Dream" and cfg["architectures"] == ["DreamModel"]
    assert cfg["torch_dtype"] == "float32" and cfg["decision_precision"] == "bfloat16"
    assert {k: cfg[k] for k in DIMS} == DIMS and cfg["auto_map"] == REAL_CONFIG["auto_map"]
    back = from_pretrained(tmp_path / "ck")
    assert back.config.to_dict() == DreamConfig.from_dict(cfg).to_dict()
    assert torch.equal(back(IDS), m(IDS))


def test_bf16_round_trip(tmp_path):
    m = random_model(seed=4).to(torch.bfloat16)
    save_pretrained(m, tmp_path / "ck")
    back = from_pretrained(tmp_path / "ck")
    assert back.lm_head.weight.dtype == torch.bfloat16
    assert json.loads((tmp_path / "ck" / "config.json").read_text())["torch_dtype"] == "bfloat16"
    assert all(torch.equal(back.state_dict()[n], t) for n, t in m.state_dict().items())
    assert torch.equal(back(IDS), m(IDS))


def test_a_tied_head_is_not_written_and_reads_back_tied(tmp_path):
    m = random_model(seed=5, tie_word_embeddings=True)
    assert m.lm_head.weight is m.model.embed_tokens.weight
    save_pretrained(m, tmp_path / "ck")
    back = from_pretrained(tmp_path / "ck")
    assert back.config.tie_word_embeddings and back.lm_head.weight is back.model.embed_tokens.weight
    assert torch.equal(back(IDS), m(IDS))


@pytest.mark.parametrize(
    "change, named",
    [
        (dict(mask_token_id=320), "DreamConfig.mask_token_id"),
        (dict(pad_token_id=-1), "DreamConfig.pad_token_id"),
        (dict(eos_token_id=[318, 999]), "DreamConfig.eos_token_id"),
        (dict(hidden_size=66), "DreamConfig.hidden_size"),
        (dict(hidden_size=60), "even head size"),
        (dict(num_key_value_heads=3), "num_key_value_heads"),
        (dict(num_hidden_layers=0), "DreamConfig.num_hidden_layers"),
        (dict(rope_theta=1.0), "DreamConfig.rope_theta"),
        (dict(rms_norm_eps="1e-6"), "rms_norm_eps"),
        (dict(vocab_size=1, mask_token_id=0, pad_token_id=None, bos_token_id=None, eos_token_id=None), "vocab_size"),
        (dict(tie_word_embeddings="no"), "tie_word_embeddings"),
        (dict(rope_scaling={"rope_type": "yarn", "factor": 4.0}), "rope_scaling"),
        (dict(hidden_act="gelu"), "hidden_act"),
        (dict(model_type="sdar"), "model_type"),  # read as Dream all the same (model_type="Dream")
    ],
)
def test_bad_configs_are_refused_by_name(tmp_path, change, named):
    m = random_model()
    save_pretrained(m, tmp_path / "ck")
    path = tmp_path / "ck" / "config.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), **change}))
    with pytest.raises(ValueError, match=named):
        from_pretrained(tmp_path / "ck", model_type="Dream")


def test_weights_that_do_not_fit_the_config_are_refused_by_name(tmp_path):
    m = random_model()
    state = {n: t for n, t in m.state_dict().items() if n != "model.layers.1.self_attn.k_proj.bias"}
    state["model.layers.0.self_attn.q_proj.bias"] = torch.zeros(7)
    (tmp_path / "ck").mkdir()
    (tmp_path / "ck" / "config.json").write_text(json.dumps(REAL_CONFIG))
    safetensors_torch.save_file(state, str(tmp_path / "ck" / "model.safetensors"))
    with pytest.raises(ValueError, match=r"missing 1 tensor\(s\): model.layers.1.self_attn.k_proj.bias") as e:
        from_pretrained(tmp_path / "ck")
    assert "wrong-shaped 1 tensor(s): model.layers.0.self_attn.q_proj.bias (7,)" in str(e.value)


def test_bad_ids_are_refused():
    with pytest.raises(ValueError, match=r"shape \(N, L\)"):
        random_model()(IDS[0])


# ---- Dream's own modeling code (the NVlabs/Fast-dLLM mirror), where it is here --------------------

MIRROR = Path("/work/.mirror/NVlabs+Fast-dLLM/repo")
OFFICIAL = """
import json, sys, torch
sys.path.insert(0, {pkg_root!r})
import transformers.modeling_rope_utils as rope_utils

def default_rope(config, device=None, **kwargs):  # transformers 5 dropped the "default" entry
    d = config.hidden_size // config.num_attention_heads
    return 1.0 / (config.rope_theta ** (torch.arange(0, d, 2).float().to(device) / d)), 1.0

rope_utils.ROPE_INIT_FUNCTIONS.setdefault("default", default_rope)
from dream_official.configuration_dream import DreamConfig
from dream_official.modeling_dream import DreamModel

DreamModel._tied_weights_keys = {{"lm_head.weight": "model.embed_tokens.weight"}}  # transformers 5 wants a dict

torch.manual_seed(0)
cfg = json.loads({config!r})
model = DreamModel(DreamConfig(**{{k: v for k, v in cfg.items() if k not in ("architectures", "auto_map")}})).eval()
with torch.no_grad():
    for p in model.parameters():
        p.normal_(0.0, 0.3 if p.ndim == 1 else 0.08)
    save_pretrained(model, {out!r}, max_shard_size={shard!r})
    torch.save(model(torch.tensor({ids!r})).logits, {out!r} + "/official_logits.pt")
"""


@pytest.mark.skipif(not MIRROR.is_dir(), reason="the NVlabs/Fast-dLLM mirror is not on this machine")
@pytest.mark.parametrize("shard", ["1GB", "40KB"])
def test_a_checkpoint_written_by_dreams_own_code_gives_its_logits(tmp_path, shard):
    """Dream's modeling_dream.py (two shims for transformers 5: no "default" RoPE init any more,
    tied-weight keys as a dict) writes a random checkpoint with transformers' save_pretrained and
    computes its logits, in a subprocess; spotref reads the checkpoint and must give the same
    logits within 1e-4 (measured: 3e-7)."""
    pytest.importorskip("transformers")
    pkg = tmp_path / "src" / "dream_official"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    for f in ("configuration_dream", "modeling_dream", "generation_utils"):
        src = subprocess.run(
            ["git", "-C", str(MIRROR), "show", f"HEAD:dream/model/{f}.py"], capture_output=True, text=True, check=True
        )
        (pkg / f"{f}.py").write_text(src.stdout)
    out = tmp_path / "ck"
    script = OFFICIAL.format(
        pkg_root=str(pkg.parent), config=json.dumps(REAL_CONFIG), out=str(out), shard=shard, ids=IDS.tolist()
    )
    run = subprocess.run([sys.executable, "-c", textwrap.dedent(script)], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr[-3000:]
    official = torch.load(out / "official_logits.pt")
    assert (out / "model.safetensors.index.json").is_file() == (shard == "40KB")
    ours = from_pretrained(out)  # transformers 5 writes the stored dtype as "dtype"
    assert json.loads((out / "config.json").read_text())["dtype"] == "float32"
    assert ours.lm_head.weight.dtype == torch.float32
    diff = (ours(IDS) - official).abs().max().item()
    print(f"max |spotref - modeling_dream.py| = {diff:.3g}")
    assert diff <= 1e-4
