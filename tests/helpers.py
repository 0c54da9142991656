"""Small shared builders for the tests."""

import os
from pathlib import Path

import torch

from spotref.models import SDARConfig, SDARModel


def tiny_model(V=61, B=4, mask_id=None, seed=0, layers=2, init=0.3, dtype=torch.float32, **kw):
    kw = {"intermediate_size": 48, **kw}
    cfg = SDARConfig(
        vocab_size=V,
        hidden_size=32,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=8,
        mask_token_id=V - 1 if mask_id is None else mask_id,
        block_size=B,
        initializer_range=init,
        **kw,
    )
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        return SDARModel(cfg).to(dtype).eval()


SDAR_FILES = Path(os.environ.get("SPOTREF_SDAR_DIR") or Path(__file__).resolve().parents[2] / "shared" / "sdar-8b-chat")
# The real SDAR-8B-Chat config.json, weight index and tokenizer files (no weights), for the tests
# that check spotref against them: SPOTREF_SDAR_DIR names the directory (default: ../shared/...).
