"""LLaDA checkpoints and model: spotref/spec/llada.py.

Small random LLaDA checkpoints in the real layout (LLaDA-8B's config.json keys, the
``model.transformer.*`` weight names, one safetensors file or shards with their index, bf16 or
float32) are read back with ``spotref.from_pretrained``; the logits are compared with the model
that wrote them, with transformers' ``LlamaForCausalLM`` on the same weights under a
bidirectional mask, and, where the mirror of NVlabs/Fast-dLLM is present, with LLaDA's own
modeling code (``llada/model/modeling_llada.py``) run on CPU with two import shims.
"""

import json
import os
import subprocess
import sys
import types
import warnings
from pathlib import Path

import pytest
import torch

import spotref
from spotref import checkpoint
from spotref.checkpoint import from_pretrained
from spotref.configs import LLaDAConfig, SDARConfig
from spotref.spec.llada import LLaDAModel
from spotref.spec.sdar import SDARModel
from workbench.checkpoint_writer import save_pretrained

safetensors_torch = pytest.importorskip("safetensors.torch")

ROOT = Path(__file__).resolve().parents[2]
ATOL = 1e-4  # float32 logits against another implementation

# LLaDA-8B-Instruct's config.json (every key its configuration class writes), sizes as released.
LLADA_8B = {
    "activation_type": "silu",
    "alibi": False,
    "alibi_bias_max": 8.0,
    "architectures": ["LLaDAModelLM"],
    "attention_dropout": 0.0,
    "attention_layer_norm": False,
    "attention_layer_norm_with_affine": True,
    "auto_map": {
        "AutoConfig": "configuration_llada.LLaDAConfig",
        "AutoModel": "modeling_llada.LLaDAModelLM",
        "AutoModelForCausalLM": "modeling_llada.LLaDAModelLM",
    },
    "bias_for_layer_norm": False,
    "block_group_size": 1,
    "block_type": "llama",
    "d_model": 4096,
    "embedding_dropout": 0.0,
    "embedding_size": 126464,
    "eos_token_id": 126081,
    "flash_attention": False,
    "include_bias": False,
    "include_qkv_bias": False,
    "init_cutoff_factor": None,
    "init_device": "meta",
    "init_fn": "mitchell",
    "init_std": 0.02,
    "input_emb_norm": False,
    "layer_norm_type": "rms",
    "layer_norm_with_affine": True,
    "mask_token_id": 126336,
    "max_sequence_length": 4096,
    "mlp_hidden_size": 12288,
    "mlp_ratio": 4,
    "model_type": "llada",
    "multi_query_attention": None,
    "n_heads": 32,
    "n_kv_heads": 32,
    "n_layers": 32,
    "pad_token_id": 126081,
    "precision": "amp_bf16",
    "residual_dropout": 0.0,
    "rms_norm_eps": 1e-05,
    "rope": True,
    "rope_full_precision": True,
    "rope_theta": 500000.0,
    "scale_logits": False,
    "torch_dtype": "bfloat16",
    "transformers_version": "4.46.3",
    "use_cache": False,
    "vocab_size": 126464,
    "weight_tying": False,
}
SMALL = dict(
    d_model=64,
    n_heads=4,
    n_kv_heads=2,
    n_layers=2,
    mlp_hidden_size=96,
    vocab_size=80,
    embedding_size=80,
    mask_token_id=79,
    eos_token_id=78,
    pad_token_id=78,
    max_sequence_length=256,
)


def tiny(seed=0, **kw) -> LLaDAModel:
    torch.manual_seed(seed)
    fields = dict(vocab_size=80, mask_token_id=79, n_kv_heads=2, mlp_hidden_size=96, rope_theta=500000.0)
    return LLaDAModel(LLaDAConfig(**{**fields, **kw}))


def ids(N=2, L=24, V=79, seed=1) -> torch.Tensor:
    return torch.randint(0, V, (N, L), generator=torch.Generator().manual_seed(seed))


def real_names(n_layers: int, tied: bool) -> list:
    """The weight names of a LLaDA checkpoint, as LLaDA-8B's index lists them."""
    per_block = ["attn_norm", "q_proj", "k_proj", "v_proj", "attn_out", "ff_norm", "ff_proj", "up_proj", "ff_out"]
    names = ["model.transformer.wte.weight", "model.transformer.ln_f.weight"]
    names += [f"model.transformer.blocks.{i}.{p}.weight" for i in range(n_layers) for p in per_block]
    return sorted(names + ([] if tied else ["model.transformer.ff_out.weight"]))


def write_real_layout(root: Path, config: dict, dtype=torch.bfloat16, seed=0) -> dict:
    """A random checkpoint written by hand in LLaDA's layout: ``config`` as config.json (however
    bad), tensors of SMALL's shapes under the real names, one shard per block (wte, ln_f and the
    head in the last) and the index. Returns the state."""
    tied = config.get("weight_tying") is True
    c = LLaDAConfig.from_dict({k: v for k, v in SMALL.items() if k not in ("eos_token_id", "pad_token_id")})
    D, d, I, V = c.d_model, c.head_dim, c.intermediate_size, c.vocab_size
    shape = {
        "wte": (V, D), "ln_f": (D,), "attn_norm": (D,), "ff_norm": (D,), "q_proj": (D, D), "attn_out": (D, D),
        "k_proj": (c.kv_heads * d, D), "v_proj": (c.kv_heads * d, D), "ff_proj": (I, D), "up_proj": (I, D),
        "ff_out": (D, I),
    }  # fmt: skip
    g = torch.Generator().manual_seed(seed)
    state = {}
    for n in real_names(c.n_layers, tied):
        part = n.split(".")[-2]
        size = (V, D) if n == "model.transformer.ff_out.weight" else shape[part]
        noise = torch.randn(size, generator=g)
        state[n] = (1 + 0.1 * noise if part in ("attn_norm", "ff_norm", "ln_f") else 0.05 * noise).to(dtype)
    root.mkdir(parents=True, exist_ok=True)
    (root / "config.json").write_text(json.dumps(config, indent=2))
    shards = {}
    for n in state:
        block = n.split(".")[3] if ".blocks." in n else str(c.n_layers)
        shards.setdefault(int(block), []).append(n)
    total, wmap = len(shards), {}
    for k, names in sorted(shards.items()):
        fname = f"model-{k + 1:05d}-of-{total:05d}.safetensors"
        safetensors_torch.save_file({n: state[n] for n in names}, str(root / fname), metadata={"format": "pt"})
        wmap.update({n: fname for n in names})
    index = {"metadata": {"total_size": sum(t.numel() * t.element_size() for t in state.values())}, "weight_map": wmap}
    (root / "model.safetensors.index.json").write_text(json.dumps(index))
    return state


def small_config(**changes) -> dict:
    return {k: v for k, v in {**LLADA_8B, **SMALL, **changes}.items() if v is not ...}


# ---- the model's contract ----------------------------------------------------------------------


def test_the_whole_canvas_contract():
    m = tiny()
    assert (m.family, m.logit_shift, m.block_size, m.mask_id) == ("llada", 0, 32, 79)
    assert m.config.vocab_size == 80 and m.config.max_position_embeddings == 1024
    x = ids()
    logits = m(x)
    assert logits.shape == (2, 24, 80) and logits.dtype == torch.float32
    assert not logits.requires_grad and m.logits(x).requires_grad  # forward decodes; logits trains


def test_attention_is_bidirectional():
    """Every position sees every position: changing the last token changes the first logit."""
    m = tiny()
    a = ids(1)
    b = a.clone()
    b[0, -1] = (a[0, -1] + 1) % 79
    assert not torch.equal(m(a)[0, 0], m(b)[0, 0])


def test_weight_names_are_llada_s():
    for tied in (False, True):
        m = tiny(weight_tying=tied)
        assert sorted(checkpoint.stored_tensors(m)) == real_names(2, tied)


def test_forward_refuses_a_flat_id_tensor():
    with pytest.raises(ValueError, match=r"ids of shape \(N, L\)"):
        tiny()(torch.zeros(5, dtype=torch.long))


# ---- round trips -------------------------------------------------------------------------------


@pytest.mark.parametrize("tied, shard", [(False, None), (True, None), (False, 40_000), (True, 40_000)])
def test_round_trip_is_bit_identical(tmp_path, tied, shard):
    m = tiny(weight_tying=tied)
    root = save_pretrained(m, tmp_path / "ck", max_shard_bytes=shard)
    index = root / "model.safetensors.index.json"
    assert index.is_file() == bool(shard) and (root / "model.safetensors").is_file() == (not shard)
    if shard:
        assert sorted(json.loads(index.read_text())["weight_map"]) == real_names(2, tied)
    cfg = json.loads((root / "config.json").read_text())
    assert cfg["model_type"] == "llada" and cfg["architectures"] == ["LLaDAModelLM"]
    assert cfg["block_type"] == "llama" and cfg["weight_tying"] is tied and cfg["torch_dtype"] == "float32"
    m2 = spotref.from_pretrained(root)
    assert type(m2) is LLaDAModel and m.config.to_dict().items() <= m2.config.to_dict().items()
    x = ids()
    assert torch.equal(m2(x), m(x))


def test_bf16_round_trip(tmp_path):
    """Saved in bf16: config.json says so, the reader loads bf16 by default, logits equal to the
    model cast to bf16; a float32 model saved in bf16 keeps float32 as its serving precision."""
    m = tiny()
    root = save_pretrained(m, tmp_path / "ck", dtype="bfloat16", max_shard_bytes=40_000)
    cfg = json.loads((root / "config.json").read_text())
    assert cfg["torch_dtype"] == "bfloat16"
    m2 = spotref.from_pretrained(root)
    assert m2.model.transformer.wte.weight.dtype == torch.bfloat16
    x = ids()
    assert torch.equal(m2(x), m.to(torch.bfloat16)(x))
    assert save_pretrained(m2, tmp_path / "again") and torch.equal(
        spotref.from_pretrained(tmp_path / "again")(x), m2(x)
    )
    f32 = from_pretrained(root, dtype="float32")
    assert f32.model.transformer.ln_f.weight.dtype == torch.float32


def test_a_checkpoint_in_llada_8b_s_layout(tmp_path):
    """LLaDA-8B's config.json keys (auto_map, precision, init_fn, ... kept in ``extra``), its
    weight names, bf16 shards and index: read as written."""
    state = write_real_layout(tmp_path / "ck", small_config())
    m = spotref.from_pretrained(tmp_path / "ck")
    assert type(m) is LLaDAModel and m.config.extra["auto_map"] == LLADA_8B["auto_map"]
    assert m.config.rope_theta == 500000.0 and m.config.max_position_embeddings == 256
    got = checkpoint.stored_tensors(m)
    assert sorted(got) == sorted(state) and all(torch.equal(got[n], state[n]) for n in state)
    assert all(t.dtype == torch.bfloat16 for t in got.values())
    assert spotref.api.serving_precision(m) == "bfloat16"
    out = save_pretrained(m, tmp_path / "again")  # written back: the same keys, read equal
    written = json.loads((out / "config.json").read_text())
    assert set(small_config()) <= set(written) and written["auto_map"] == LLADA_8B["auto_map"]
    assert torch.equal(spotref.from_pretrained(out)(ids()), m(ids()))


# ---- against transformers' Llama ---------------------------------------------------------------


def llama_twin(m: LLaDAModel):
    """transformers' LlamaForCausalLM with ``m``'s shapes and weights (eager attention, float32)."""
    transformers = pytest.importorskip("transformers")
    c = m.config
    hf_cfg = transformers.LlamaConfig(
        vocab_size=c.vocab_size,
        hidden_size=c.d_model,
        intermediate_size=c.intermediate_size,
        num_hidden_layers=c.n_layers,
        num_attention_heads=c.n_heads,
        num_key_value_heads=c.kv_heads,
        head_dim=c.head_dim,
        rms_norm_eps=c.rms_norm_eps,
        rope_parameters={"rope_type": "default", "rope_theta": c.rope_theta},
        max_position_embeddings=c.max_sequence_length,
        tie_word_embeddings=c.weight_tying,
        attention_bias=False,
        mlp_bias=False,
        hidden_act="silu",
    )
    hf_cfg._attn_implementation = "eager"
    hf = transformers.LlamaForCausalLM(hf_cfg).eval()
    top = {"wte": "model.embed_tokens.weight", "ln_f": "model.norm.weight", "ff_out": "lm_head.weight"}
    names = {
        "attn_norm": "input_layernorm",
        "q_proj": "self_attn.q_proj",
        "k_proj": "self_attn.k_proj",
        "v_proj": "self_attn.v_proj",
        "attn_out": "self_attn.o_proj",
        "ff_norm": "post_attention_layernorm",
        "ff_proj": "mlp.gate_proj",
        "up_proj": "mlp.up_proj",
        "ff_out": "mlp.down_proj",
    }
    state = {}
    for n, t in checkpoint.stored_tensors(m).items():
        parts = n.split(".")  # model.transformer.blocks.i.part.weight or model.transformer.part.weight
        if parts[2] == "blocks":
            state[f"model.layers.{parts[3]}.{names[parts[4]]}.weight"] = t
        else:
            state[top[parts[2]]] = t
    missing, unexpected = hf.load_state_dict(state, strict=False)
    assert not unexpected and set(missing) <= ({"lm_head.weight"} if c.weight_tying else set())
    return hf


@pytest.mark.parametrize("tied, kvh", [(False, 2), (True, 4), (False, 1)])
def test_logits_match_transformers_llama_with_a_bidirectional_mask(tmp_path, tied, kvh):
    """Llama's layer is LLaDA's: the logits agree within 1e-4 in float32 once Llama's attention
    is made non-causal by a 4D additive mask of zeros (N, 1, L, L), which transformers 5 uses as
    given (``masking_utils``: an already prepared 4D mask is returned as-is)."""
    m = tiny(weight_tying=tied, n_kv_heads=kvh)
    m = spotref.from_pretrained(save_pretrained(m, tmp_path / "ck", max_shard_bytes=40_000))
    hf = llama_twin(m)
    x = ids(3, 40)
    with torch.no_grad():
        theirs = hf(input_ids=x, attention_mask=torch.zeros(3, 1, 40, 40)).logits
        causal = hf(input_ids=x).logits
    ours = m(x)
    assert (ours - theirs).abs().max() < ATOL
    assert (ours - causal)[:, :-1].abs().max() > 1e-2  # the mask matters: causal Llama differs


# ---- bad configs, bad directories --------------------------------------------------------------


def load_error(root: Path, **config_changes) -> str:
    write_real_layout(root, small_config(**config_changes), dtype=torch.float32)
    with pytest.raises(ValueError) as e:
        spotref.from_pretrained(root)
    assert "\n" not in str(e.value)
    return str(e.value)


@pytest.mark.parametrize(
    "changes, named",
    [
        ({"block_type": "sequential"}, "block_type='sequential'"),
        ({"block_type": ...}, "block_type='sequential'"),  # absent: LLaDA's default
        ({"rope": False}, "rope=False"),
        ({"rope": 1}, "rope=1"),
        ({"layer_norm_type": "default"}, "layer_norm_type='default'"),
        ({"layer_norm_type": ...}, "layer_norm_type='default'"),
        ({"activation_type": "swiglu"}, "activation_type='swiglu'"),
        ({"alibi": True}, "alibi=True"),
        ({"include_bias": True}, "include_bias=True"),
        ({"include_qkv_bias": True}, "include_qkv_bias=True"),
        ({"attention_layer_norm": True}, "attention_layer_norm=True"),
        ({"block_group_size": 2}, "block_group_size=2"),
        ({"scale_logits": True}, "scale_logits=True"),
        ({"rope_full_precision": False}, "rope_full_precision=False"),
        ({"embedding_size": 128}, "embedding_size (128) differs from vocab_size (80)"),
        ({"embedding_size": ...}, "embedding_size (50304)"),  # absent: LLaDA's default
        ({"d_model": 60}, "d_model (60) must be n_heads (4)"),
        ({"n_heads": 4, "n_kv_heads": 3}, "multiple of n_kv_heads (3)"),
        ({"d_model": 64.0}, "LLaDAConfig.d_model must be an int"),
        ({"rms_norm_eps": "1e-5"}, "LLaDAConfig.rms_norm_eps must be a finite number"),
        ({"rope_theta": 1.0}, "LLaDAConfig.rope_theta must be in (1.0"),
        ({"weight_tying": "false"}, "LLaDAConfig.weight_tying must be True or False"),
        ({"mask_token_id": 80}, "LLaDAConfig.mask_token_id must be an int in [0, 79]"),
        ({"mask_token_id": ...}, "config.json has no mask_token_id (LLaDA's is 126336)"),
        ({"d_model": ..., "n_layers": ...}, "config.json has no d_model, n_layers"),
    ],
)
def test_bad_configs_are_refused_by_name(tmp_path, changes, named):
    assert named in load_error(tmp_path / "ck", **changes)


def test_llada_s_reader_refuses_another_family_s_config(tmp_path):
    write_real_layout(tmp_path / "ck", small_config(model_type="Dream"), dtype=torch.float32)
    with pytest.raises(ValueError, match="model_type is 'Dream', not 'llada'"):
        from_pretrained(tmp_path / "ck", model_type="llada")  # LLaDA's reader, whatever config.json says


def test_a_config_that_does_not_match_the_weights_names_the_tensors(tmp_path):
    write_real_layout(tmp_path / "ck", small_config(), dtype=torch.float32)
    cfg = json.loads((tmp_path / "ck" / "config.json").read_text())
    (tmp_path / "ck" / "config.json").write_text(json.dumps({**cfg, "mlp_hidden_size": 128, "weight_tying": True}))
    with pytest.raises(ValueError) as e:
        spotref.from_pretrained(tmp_path / "ck")
    msg = str(e.value)
    assert "unexpected 1 tensor(s): model.transformer.ff_out.weight" in msg
    assert "model.transformer.blocks.0.ff_out.weight (64, 96) (config.json wants (64, 128))" in msg


def test_the_settings_llada_s_reader_takes_are_checked(tmp_path):
    root = save_pretrained(tiny(), tmp_path / "ck")
    with pytest.raises(ValueError, match="unsupported dtype 'float64'"):
        spotref.from_pretrained(root, dtype="float64")
    with pytest.raises(ValueError, match="a llada checkpoint takes no block_size"):
        spotref.from_pretrained(root, block_size=4)
    with pytest.raises(ValueError, match="does not exist"):
        spotref.from_pretrained(tmp_path / "nowhere")


# ---- spotref.from_pretrained: the family dispatch ----------------------------------------------


def test_from_pretrained_reads_an_sdar_checkpoint_as_sdar(tmp_path):
    torch.manual_seed(0)
    m = SDARModel(SDARConfig(vocab_size=50, mask_token_id=49, block_size=4))
    root = save_pretrained(m, tmp_path / "sdar")
    m2 = spotref.from_pretrained(root, block_size=8)  # the SDAR reader's own options pass through
    assert type(m2) is SDARModel and m2.block_size == 8
    x = ids(1, 8, 49)
    assert torch.equal(spotref.from_pretrained(root)(x), m(x))


def test_an_unknown_model_type_names_the_known_ones(tmp_path):
    root = save_pretrained(tiny(), tmp_path / "ck")
    cfg = json.loads((root / "config.json").read_text())
    for model_type in ("qwen3", None):
        (root / "config.json").write_text(json.dumps({**cfg, "model_type": model_type}))
        known = r"'sdar', 'sdar_moe', 'llada', 'llada2_moe', 'Dream'"
        with pytest.raises(ValueError, match=r"model_type .*: spotref reads " + known):
            spotref.from_pretrained(root)


# ---- against LLaDA's own modeling code ---------------------------------------------------------

MIRROR = Path(os.environ.get("SPOTREF_FASTDLLM_DIR") or ROOT.parent / ".mirror" / "NVlabs+Fast-dLLM" / "repo")
OFFICIAL = ("__init__.py", "configuration_llada.py", "modeling_llada.py")


@pytest.fixture(scope="module")
def official(tmp_path_factory):
    """LLaDA's modeling code from the Fast-dLLM mirror (``git show HEAD:llada/model/...``), imported
    as the package ``llada_official`` with two shims: ``einops`` (imported, used only by the
    block-diffusion block) is a stub, and TorchDynamo is disabled so its ``@torch.compile()``
    attention runs eagerly on CPU. Skipped where the mirror or transformers is absent."""
    pytest.importorskip("transformers")
    pkg = tmp_path_factory.mktemp("official") / "llada_official"
    pkg.mkdir()
    for f in OFFICIAL:
        run = subprocess.run(
            ["git", "-C", str(MIRROR), "show", f"HEAD:llada/model/{f}"], capture_output=True, check=False
        )
        if run.returncode:
            pytest.skip(f"no NVlabs/Fast-dLLM mirror at {MIRROR} (set SPOTREF_FASTDLLM_DIR)")
        (pkg / f).write_bytes(run.stdout)
    mp = pytest.MonkeyPatch()
    mp.setitem(sys.modules, "einops", types.SimpleNamespace(rearrange=None))
    with warnings.catch_warnings():  # importing TorchDynamo warns that torch.jit is deprecated
        warnings.filterwarnings("ignore", "`torch.jit.script_method` is deprecated", DeprecationWarning)
        mp.setattr(torch._dynamo.config, "disable", True)
        mp.syspath_prepend(str(pkg.parent))
        import llada_official

    yield llada_official
    for name in [n for n in sys.modules if n.startswith("llada_official")]:
        del sys.modules[name]
    mp.undo()


def official_model(official, tied: bool, seed=0):
    fields = {k: v for k, v in small_config(weight_tying=tied).items() if k not in ("auto_map", "architectures")}
    torch.manual_seed(seed)
    return official.LLaDAModelLM(official.LLaDAConfig(**{**fields, "init_device": "cpu"}), init_params=True).eval()


@torch.no_grad()
def official_logits(m, x):
    return m(x, use_cache=False, return_dict=True).logits  # transformers 5 drops its config's use_cache


@pytest.mark.parametrize("tied", [False, True])
def test_a_checkpoint_written_by_llada_s_code_reads_to_its_logits(tmp_path, official, tied):
    """Within 1e-4 in float32, the goal; in fact bit-identical in float32 and in bfloat16 (LLaDA's
    serving precision): spotref runs LLaDA's operations in LLaDA's order (the attention through
    the same ``scaled_dot_product_attention``, the RoPE table at LLaDA's length)."""
    theirs = official_model(official, tied)
    save_pretrained(theirs, tmp_path / "ck", max_shard_size="40KB")
    assert (tmp_path / "ck" / "model.safetensors.index.json").is_file()
    ours = spotref.from_pretrained(tmp_path / "ck")
    assert type(ours) is LLaDAModel and ours.config.weight_tying is tied
    x = ids(2, 37)
    assert (ours(x) - official_logits(theirs, x)).abs().max() < ATOL
    assert torch.equal(ours(x), official_logits(theirs, x))
    ours = spotref.from_pretrained(tmp_path / "ck", dtype="bfloat16")
    if torch.backends.cpu.get_cpu_capability() == "AVX512":
        assert torch.equal(ours(x), official_logits(theirs.to(torch.bfloat16), x))
    else:  # below AVX-512 spotref's bf16 attention takes the math kernel (llada.attention_kernel)
        assert (ours(x).float() - official_logits(theirs.to(torch.bfloat16), x).float()).abs().max() < 0.05


@pytest.mark.parametrize("tied", [False, True])
def test_a_checkpoint_spotref_writes_reads_in_llada_s_code(tmp_path, official, tied):
    """Its config.json read by LLaDA's configuration class, its tensors loaded by name (strict)
    into LLaDA's model. (LLaDAModelLM.from_pretrained itself fails under transformers 5: the
    class never calls ``post_init``.)"""
    m = tiny(weight_tying=tied, **{k: v for k, v in SMALL.items() if k not in ("eos_token_id", "pad_token_id")})
    root = save_pretrained(m, tmp_path / "ck", max_shard_bytes=40_000)
    theirs = official.LLaDAModelLM(official.LLaDAConfig.from_pretrained(root)).eval()
    shards = json.loads((root / "model.safetensors.index.json").read_text())["weight_map"].values()
    state = {n: t for f in sorted(set(shards)) for n, t in safetensors_torch.load_file(str(root / f)).items()}
    theirs.load_state_dict(state, strict=True)
    x = ids(2, 40)
    assert (m(x) - official_logits(theirs, x)).abs().max() < ATOL
