"""spotref's SDAR model against transformers' Qwen3ForCausalLM on the same weights.

A random tiny checkpoint in the official format (the real SDAR-8B weight names and shard files
from ../shared/sdar-8b-chat/model.safetensors.index.json, dimensions shrunk, config.json edited
to match) is loaded with ``SDARModel.from_pretrained`` and with transformers (block-causal 4D
additive mask, eager attention, float32). Logits must agree for a full pass, for prefill, and
for denoise steps on a KV cache (transformers' DynamicCache, cropped after each denoise as
SDAR's generate.py keeps the cache to complete blocks); then the tokens of a full exact decode
must be identical (spotref.generate vs the naive reference decoder driven by transformers).
"""

import inspect
import json
import re
from pathlib import Path

import pytest
import torch
from helpers import SDAR_FILES

import spotref
from spotref import reference
from spotref.checkpoint import from_pretrained

transformers = pytest.importorskip("transformers")
safetensors_torch = pytest.importorskip("safetensors.torch")

REAL = SDAR_FILES
DIMS = dict(
    vocab_size=320,
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=32,
    mask_token_id=319,
    max_position_embeddings=512,
    bos_token_id=318,
    eos_token_id=318,
)  # ids of this vocabulary
ATOL = 1e-5


def tensor_shape(name: str, c: dict) -> tuple:
    V, H, I = c["vocab_size"], c["hidden_size"], c["intermediate_size"]
    q, kv, d = c["num_attention_heads"] * c["head_dim"], c["num_key_value_heads"] * c["head_dim"], c["head_dim"]
    table = {
        "embed_tokens": (V, H),
        "lm_head": (V, H),
        "q_proj": (q, H),
        "k_proj": (kv, H),
        "v_proj": (kv, H),
        "o_proj": (H, q),
        "q_norm": (d,),
        "k_norm": (d,),
        "gate_proj": (I, H),
        "up_proj": (I, H),
        "down_proj": (H, I),
        "input_layernorm": (H,),
        "post_attention_layernorm": (H,),
        "norm": (H,),
    }
    return table[name.split(".")[-2]]


def write_tiny_official(root: Path) -> dict:
    """A random checkpoint with the real names, shard files and config keys; returns the state."""
    config = json.loads((REAL / "config.json").read_text())
    index = json.loads((REAL / "model.safetensors.index.json").read_text())
    config.update(DIMS)
    keep = {
        n: f
        for n, f in index["weight_map"].items()
        if not (m := re.match(r"model\.layers\.(\d+)\.", n)) or int(m.group(1)) < DIMS["num_hidden_layers"]
    }
    g = torch.Generator().manual_seed(0)
    state = {}
    for n in keep:
        shape = tensor_shape(n, config)
        scale = 0.1 if len(shape) == 1 else (0.5 if n.endswith(("embed_tokens.weight", "lm_head.weight")) else 0.2)
        base = 1.0 if len(shape) == 1 else 0.0
        state[n] = base + scale * torch.randn(shape, generator=g)
    root.mkdir(parents=True, exist_ok=True)
    for f in sorted(set(keep.values())):
        safetensors_torch.save_file(
            {n: state[n].to(torch.bfloat16) for n in keep if keep[n] == f}, str(root / f), metadata={"format": "pt"}
        )
    index = {"metadata": {"total_size": 0}, "weight_map": keep}
    (root / "model.safetensors.index.json").write_text(json.dumps(index))
    (root / "config.json").write_text(json.dumps(config))
    return {n: t.to(torch.bfloat16).float() for n, t in state.items()}


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    if not (REAL / "model.safetensors.index.json").is_file():
        pytest.skip(
            f"the real SDAR-8B config and tokenizer files (kept outside the repository) are not at "
            f"{SDAR_FILES}: set SPOTREF_SDAR_DIR"
        )
    root = tmp_path_factory.mktemp("tiny_sdar")
    state = write_tiny_official(root)
    ours = from_pretrained(root, dtype="float32")
    c = json.loads((root / "config.json").read_text())
    hf_cfg = transformers.Qwen3Config(
        **{k: c[k] for k in DIMS if k != "mask_token_id"},
        rms_norm_eps=c["rms_norm_eps"],
        rope_theta=c["rope_theta"],
        tie_word_embeddings=False,
        attention_bias=False,
    )
    hf_cfg._attn_implementation = "eager"
    hf = transformers.Qwen3ForCausalLM(hf_cfg).eval()
    hf.load_state_dict(state, strict=True)
    return ours, hf


def block_causal(q0: int, L: int, S: int, B: int) -> torch.Tensor:
    """(1, 1, L, S) additive mask: query at q0 + i sees key j iff block(j) <= block(q0 + i)."""
    qb = (q0 + torch.arange(L)) // B
    kb = torch.arange(S) // B
    return torch.where(kb[None, :] <= qb[:, None], 0.0, torch.finfo(torch.float32).min)[None, None]


def cache_kw(hf) -> str:
    """transformers renamed ``past_key_values`` to ``cache`` (5.x); accept either."""
    return "cache" if "cache" in inspect.signature(hf.forward).parameters else "past_key_values"


@torch.no_grad()
def hf_logits(hf, x: torch.Tensor, B: int) -> torch.Tensor:
    """Full recompute, no cache: x (1, L) -> (1, L, V)."""
    return hf(input_ids=x, attention_mask=block_causal(0, x.shape[1], x.shape[1], B)).logits


@torch.no_grad()
def hf_step(hf, cache, block: torch.Tensor, P: int, B: int, keep: bool) -> torch.Tensor:
    """One block (B,) at positions P..P+B-1 over the cache; crops it again unless ``keep``."""
    out = hf(
        input_ids=block[None],
        attention_mask=block_causal(P, B, P + B, B),
        position_ids=torch.arange(P, P + B)[None],
        use_cache=True,
        **{cache_kw(hf): cache},
    )
    if not keep:
        cache.crop(-B)
    return out.logits[0]


def test_checkpoint_has_the_real_names(pair):
    ours, _ = pair
    assert not ours.config.tie_word_embeddings and ours.lm_head.weight.dtype == torch.float32
    assert ours.config.block_size == 4 and ours.config.mask_token_id == 319


def test_full_pass_logits_match(pair):
    ours, hf = pair
    x = torch.randint(0, 319, (1, 14), generator=torch.Generator().manual_seed(1))
    torch.testing.assert_close(ours(x), hf_logits(hf, x, ours.block_size), atol=ATOL, rtol=0)


def test_prefill_denoise_store_logits_match(pair):
    ours, hf = pair
    B, mask = ours.block_size, ours.mask_id
    g = torch.Generator().manual_seed(2)
    prompt = torch.randint(0, 319, (2 * B,), generator=g)
    cache = ours.prefill(prompt)
    hc = transformers.DynamicCache(config=hf.config)
    with torch.no_grad():
        hf(
            input_ids=prompt[None],
            attention_mask=block_causal(0, 2 * B, 2 * B, B),
            use_cache=True,
            **{cache_kw(hf): hc},
        )
    for blk in range(2):
        P = (2 + blk) * B
        states = torch.randint(0, 319, (3, B), generator=g)
        states[0], states[1, ::2] = mask, mask  # all MASK, half MASK, none
        got = ours.denoise(cache, states)  # (3, B, V) in one batch
        for i in range(3):
            torch.testing.assert_close(got[i], hf_step(hf, hc, states[i], P, B, keep=False), atol=ATOL, rtol=0)
        assert hc.get_seq_length() == P == cache.length
        ours.store(cache, states[2])
        hf_step(hf, hc, states[2], P, B, keep=True)


@pytest.mark.parametrize("temperature, drafter", [(0.0, None), (1.0, None), (1.0, "confidence")])
def test_exact_decode_tokens_match(pair, temperature, drafter):
    ours, hf = pair
    B, prompt = ours.block_size, [5, 17, 200, 3, 99, 42]  # ends mid-block
    kw = dict(temperature=temperature, seed=3)
    got = spotref.generate(ours, prompt, 10, drafter=drafter, **kw).tokens
    want = reference.generate(
        lambda x: hf_logits(hf, x, B),
        prompt,
        10,
        block_size=B,
        mask_id=ours.mask_id,
        vocab_size=ours.config.vocab_size,
        **kw,
    )
    assert got == want and len(got) == 10
