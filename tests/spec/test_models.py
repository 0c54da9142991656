import json

import pytest
import torch
from helpers import SDAR_FILES, tiny_model
from hypothesis import given
from hypothesis import strategies as st

from spotref.configs import SDARConfig
from spotref.spec.sdar import SDARModel

SHARED = SDAR_FILES


@given(st.data())
def test_batched_denoise_rows_are_bit_identical_to_single_rows(data):
    B = data.draw(st.sampled_from([1, 2, 3, 4, 8, 16, 32]))
    V = data.draw(st.integers(8, 300))
    model = tiny_model(V=V, B=B, seed=data.draw(st.integers(0, 99)), layers=data.draw(st.integers(1, 2)))
    n_prefix = data.draw(st.integers(0, 3))
    cache = model.prefill(torch.randint(0, V - 1, (n_prefix * B,)))
    N = data.draw(st.integers(1, 64))
    states = torch.randint(0, V, (N, B))  # (N, B), MASK included
    batched = model.denoise(cache, states)  # (N, B, V)
    for i in data.draw(st.lists(st.integers(0, N - 1), min_size=1, max_size=4)):
        assert torch.equal(batched[i], model.denoise(cache, states[i : i + 1])[0]), f"row {i} of {N}"


def test_cached_passes_match_the_full_block_causal_forward():
    model = tiny_model(V=50, B=4, dtype=torch.float64)
    ids = torch.randint(0, 49, (12,))
    full = model(ids[None])[0]  # (12, V)
    cache = model.prefill(ids[:4])
    torch.testing.assert_close(model.denoise(cache, ids[4:8][None])[0], full[4:8], rtol=1e-10, atol=1e-10)
    model.store(cache, ids[4:8])
    assert cache.length == 8
    torch.testing.assert_close(model.denoise(cache, ids[8:][None])[0], full[8:], rtol=1e-10, atol=1e-10)


def test_attention_is_block_causal():
    model = tiny_model(V=50, B=4, dtype=torch.float64)
    a = torch.randint(0, 49, (12,))
    b = a.clone()
    b[9] = (a[9] + 1) % 49  # change a token of block 2
    la, lb = model(a[None])[0], model(b[None])[0]
    assert torch.equal(la[:8], lb[:8])  # earlier blocks never see it
    assert not torch.equal(la[8], lb[8])  # its own block sees it (bidirectional)


def test_tied_lm_head_shares_the_embedding():
    model = tiny_model(tie_word_embeddings=True)
    assert model.lm_head.weight is model.model.embed_tokens.weight
    assert "lm_head.weight" in dict(model.named_parameters(remove_duplicate=False))


def test_weight_names_follow_the_hf_checkpoints():
    names = set(tiny_model(layers=1).state_dict())
    for n in [
        "model.embed_tokens.weight",
        "model.layers.0.self_attn.q_proj.weight",
        "model.layers.0.self_attn.k_norm.weight",
        "model.layers.0.mlp.gate_proj.weight",
        "model.layers.0.input_layernorm.weight",
        "model.layers.0.post_attention_layernorm.weight",
        "model.norm.weight",
        "lm_head.weight",
    ]:
        assert n in names


def test_random_init_follows_torchs_rng():
    torch.manual_seed(3)
    a = SDARModel(SDARConfig(block_size=4, mask_token_id=299))
    torch.manual_seed(3)
    b = SDARModel(SDARConfig(block_size=4, mask_token_id=299))
    assert all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values()))


@pytest.mark.skipif(
    not SHARED.exists(),
    reason=f"the real SDAR-8B config and tokenizer files (kept outside the repository) are not at "
    f"{SDAR_FILES}: set SPOTREF_SDAR_DIR",
)
def test_config_reads_the_real_sdar_config():
    cfg = SDARConfig.from_json(SHARED / "config.json")
    raw = json.loads((SHARED / "config.json").read_text())
    assert (cfg.vocab_size, cfg.hidden_size, cfg.num_hidden_layers) == (151936, 4096, 36)
    assert (cfg.num_key_value_heads, cfg.head_dim, cfg.mask_token_id) == (8, 128, 151669)
    assert cfg.tie_word_embeddings is False and cfg.rope_theta == 1_000_000
    assert cfg.to_dict()["model_type"] == raw["model_type"] == "sdar"


@pytest.mark.parametrize(
    "field, value", [("vocab_size", 0), ("num_key_value_heads", 3), ("mask_token_id", 300), ("block_size", 0)]
)
def test_bad_config_names_the_field(field, value):
    with pytest.raises(ValueError, match=field):
        SDARConfig(**{field: value})


@pytest.mark.parametrize(
    "field, value",
    [
        ("block_size", True),
        ("mask_token_id", 60.0),
        ("mask_token_id", "60"),
        ("rms_norm_eps", "1e-6"),
        ("rms_norm_eps", 0.0),
        ("rope_theta", float("inf")),
        ("max_position_embeddings", 1.5),
        ("head_dim", True),
        ("tie_word_embeddings", "yes"),
        ("initializer_range", -0.1),
    ],
)
def test_config_fields_of_the_wrong_type_name_the_field(field, value):
    with pytest.raises(ValueError, match=f"SDARConfig.{field}"):
        SDARConfig(**{field: value})
