"""Small shared builders for the tests."""

import os
from pathlib import Path

import torch
from hypothesis import settings

from spotref.configs import SDARConfig
from spotref.conformance_cases import cpu_seeded
from spotref.spec.sdar import SDARModel

TINY = dict(
    hidden_size=32,
    intermediate_size=48,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=8,
    initializer_range=0.3,
)  # the tiny shape the tests build (a 2-core CPU runs it in milliseconds)


def tiny_config(V=61, B=4, mask_id=None, **fields) -> SDARConfig:
    """The tests' tiny SDARConfig: vocabulary ``V``, block size ``B``, MASK id ``mask_id`` (default
    V - 1), the rest ``TINY`` with ``fields`` overriding any of it."""
    mask = V - 1 if mask_id is None else mask_id
    return SDARConfig(vocab_size=V, mask_token_id=mask, block_size=B, **{**TINY, **fields})


def tiny_model(V=61, B=4, mask_id=None, seed=0, layers=2, init=0.3, dtype=torch.float32, **kw):
    cfg = tiny_config(V, B, mask_id, num_hidden_layers=layers, initializer_range=init, **kw)
    with cpu_seeded(seed):
        return SDARModel(cfg).to(dtype).eval()


SDAR_FILES = Path(os.environ.get("SPOTREF_SDAR_DIR") or Path(__file__).resolve().parents[3] / "shared" / "sdar-8b-chat")
# The real SDAR-8B-Chat config.json, weight index and tokenizer files (no weights), for the tests
# that check spotref against them: SPOTREF_SDAR_DIR names the directory (default: ../shared/...).


def set_in(path, value):
    """An edit of a JSON-like object: ``path``'s last key set to ``value`` (tampered trace files)."""

    def edit(data):
        obj = data
        for key in path[:-1]:
            obj = obj[key]
        obj[path[-1]] = value

    return edit


def examples(scale: float) -> int:
    """A test's number of Hypothesis examples: ``scale`` times the active profile's (tests/conftest.py),
    at least 1. Under ci (100) ``examples(0.25)`` is 25, under dev (30) 8."""
    return max(1, round(settings.default.max_examples * scale))
