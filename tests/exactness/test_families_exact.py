"""Every family decodes as its own decoder does, and SPOT is exact on it: small random LLaDA and
Dream models (spotref/spec/llada.py, spotref/spec/dream.py, float32 and bf16) against the transcriptions of
LLaDA's generate.py and Dream's sampling loop (tests/support/*_transcription.py, the same noise),
and SPOT (the confidence drafter, a random SPOT drafter) identical to exact decoding, rows alone and
at a fixed width, on this CPU's kernels."""

import pytest
import torch
from family_oracle import assert_generate_is_transcription

import spotref
from spotref.audit import batch_invariance
from spotref.configs import DreamConfig, LLaDAConfig
from spotref.conformance import spot_drafter
from spotref.spec.dream import DreamModel
from spotref.spec.llada import LLaDAModel

V, MASK = 80, 79


def tiny(family: str, seed: int = 0, dtype=torch.float32):
    torch.manual_seed(seed)
    if family == "llada":
        cfg = LLaDAConfig(d_model=64, n_heads=4, n_kv_heads=2, n_layers=2, mlp_hidden_size=96, vocab_size=V,
                          embedding_size=V, mask_token_id=MASK, max_sequence_length=512)  # fmt: skip
        return LLaDAModel(cfg).to(dtype)
    cfg = DreamConfig(hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=2, vocab_size=V, mask_token_id=MASK, pad_token_id=78, bos_token_id=78,
                      eos_token_id=78)  # fmt: skip
    return DreamModel(cfg).to(dtype)


RULES = [
    ("llada", dict()),
    ("llada", dict(temperature=1.0, seed=5)),
    ("dream", dict()),
    ("dream", dict(temperature=1.0, seed=5, top_p=0.9)),
    ("dream", dict(confidence="topk_margin", temperature=0.8, seed=6, top_k=20)),
    ("dream", dict(confidence="entropy", temperature=1.0, seed=7)),
]


@pytest.mark.parametrize("family, kw", RULES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["float32", "bf16"])
def test_exact_decoding_is_the_familys_own_generate(family, kw, dtype):
    model = tiny(family, dtype=dtype)
    assert_generate_is_transcription(model, [5, 6, 7, 8, 9], 24, block_length=8, **kw)


@pytest.mark.slow
@pytest.mark.parametrize("family", ["llada", "dream"])
@pytest.mark.parametrize("width", [None, 16])
@pytest.mark.parametrize("T, threshold", [(0.0, None), (1.0, None), (1.0, 0.5)])
def test_spot_is_exact_decoding_on_every_family(family, width, T, threshold):
    model = tiny(family, seed=1, dtype=torch.bfloat16)
    kw = dict(temperature=T, seed=11, threshold=threshold, width=width, block_length=16)
    for prompt in ([3, 4, 5], list(range(1, 12))):
        exact = spotref.generate(model, prompt, 40, **kw)
        for drafter in ("confidence", spot_drafter(2)(16)):
            got = spotref.generate(model, prompt, 40, drafter=drafter, budget=16, **kw)
            assert got.tokens == exact.tokens and got.passes <= exact.passes


@pytest.mark.parametrize("family", ["llada", "dream"])
@pytest.mark.parametrize("prefix_len", [3, 13])
def test_a_canvas_row_is_the_same_alone_and_in_a_fixed_width_pass(family, prefix_len):
    inv = batch_invariance(tiny(family, dtype=torch.bfloat16), prefix_len=prefix_len, rows=8, width=8)
    assert inv["equal_rows"] == inv["rows"], inv


@pytest.mark.slow
def test_llada_in_bf16_decodes_on_every_cpu_dispatch_level():
    """Below AVX-512 torch's fused bf16 attention fails for long sequences (torch 2.13); LLaDA's
    attention then takes the math kernel for every pass: exact and SPOT decode, identically, on
    each level this CPU offers (a subprocess per level: torch reads ATEN_CPU_CAPABILITY once)."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    support = str(Path(__file__).resolve().parents[1] / "support")
    code = (
        "import sys, torch, spotref; sys.path.insert(0, %r); from test_families_exact import tiny; "
        "m = tiny('llada', dtype=torch.bfloat16); p = list(range(1, 40)); "
        "a = spotref.generate(m, p, 48, temperature=1.0, block_length=16); "
        "b = spotref.generate(m, p, 48, temperature=1.0, block_length=16, drafter='confidence'); "
        "assert a.tokens == b.tokens; print(torch.backends.cpu.get_cpu_capability())"
    ) % str(Path(__file__).parent)
    for level in ("avx2", "default"):
        env = {**os.environ, "ATEN_CPU_CAPABILITY": level, "PYTHONPATH": os.pathsep.join([support, *sys.path])}
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
        assert out.returncode == 0, (level, out.stderr[-2000:])
