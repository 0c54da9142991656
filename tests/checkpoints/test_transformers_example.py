"""examples/transformers_spot.py: SPOT around transformers' Qwen3ForCausalLM (the caller's own
model, DynamicCache and loop over the step API) gives spotref.generate's tokens on the same
checkpoint: T = 0 and T = 1, one-position and threshold rules, with and without a drafter."""

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from helpers import tiny_config

import spotref
from spotref.checkpoint import from_pretrained
from spotref.spec.sdar import SDARModel
from workbench.checkpoint_writer import save_pretrained

pytest.importorskip(
    "transformers",
    reason="the example runs transformers' Qwen3ForCausalLM (a test-only dependency): pip install transformers",
)
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "transformers_spot.py"
PROMPTS = [
    [5, 17, 200, 3, 99, 42],  # one block cached, a tail fixed in the next
    [1, 2, 3, 4, 5, 6, 7, 8],  # complete blocks only
    [7],
]  # nothing cached: rows attend to their block only


@pytest.fixture(scope="module")
def example():
    spec = importlib.util.spec_from_file_location("transformers_spot", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    """A tiny random SDAR checkpoint in the official layout (bf16 storage, untied head)."""
    cfg = tiny_config(320, hidden_size=64, intermediate_size=128, head_dim=32, max_position_embeddings=512)
    with torch.random.fork_rng():
        torch.manual_seed(0)
        model = SDARModel(cfg)
    return save_pretrained(model, tmp_path_factory.mktemp("tiny_sdar"), dtype="bfloat16")


@pytest.fixture(scope="module")
def models(example, checkpoint):
    hf, B, mask, precision = example.load(checkpoint, dtype=torch.float32)
    assert precision == "bfloat16"  # saved in bf16: served, so decided, in bf16
    return from_pretrained(checkpoint, dtype="float32"), hf, B, mask, precision


@pytest.mark.parametrize(
    "kw",
    [dict(), dict(temperature=1.0, seed=3), dict(threshold=0.3), dict(temperature=1.0, seed=5, threshold=0.5)],
    ids=str,
)
@pytest.mark.parametrize("drafter", [None, "confidence"])
def test_the_example_gives_generates_tokens(example, models, monkeypatch, kw, drafter):
    ours, hf, B, mask, precision = models
    rows, forward = [], example.forward

    def counted(model, cache, ids, *args):
        rows.append(len(ids))
        return forward(model, cache, ids, *args)

    monkeypatch.setattr(example, "forward", counted)
    for prompt in PROMPTS:
        want = spotref.generate(ours, prompt, 14, **kw).tokens
        got = example.generate(hf, prompt, 14, B, mask, drafter=drafter, budget=8, depth=4, precision=precision, **kw)
        assert got == want and len(got) == 14, (prompt, want, got)
    assert (max(rows) > 1) == (drafter is not None)  # a drafter's rows share one forward


@pytest.mark.parametrize("drafter", [None, "confidence"])
def test_the_example_stops_as_generate_does(example, models, drafter):
    ours, hf, B, mask, precision = models
    for prompt in PROMPTS:
        free = spotref.generate(ours, prompt, 14).tokens
        stop = [free[5]]  # a token the decode does produce
        want = spotref.generate(ours, prompt, 14, stop_ids=stop).tokens
        got = example.generate(hf, prompt, 14, B, mask, stop_ids=stop, drafter=drafter, precision=precision)
        assert got == want and got[-1] == stop[0] and len(got) <= 6, (prompt, want, got)


@pytest.mark.slow
def test_the_example_runs_as_a_script(models, checkpoint):
    ours, *_ = models
    argv = [
        sys.executable,
        str(EXAMPLE),
        str(checkpoint),
        "--prompt-ids",
        "5,17,200",
        "--new",
        "6",
        "--temperature",
        "1",
    ]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=True).stdout
    want = spotref.generate(ours, [5, 17, 200], 6, temperature=1.0).tokens
    assert out.strip().splitlines()[-1] == str(want)


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--temperature", "nan"], "T must be a finite number"),
        (["--temperature", "-1"], "T must be"),
        (["--temperature", "1e300"], "above 3.4e+38"),
        (["--new", "0"], "must be at least 1, got 0"),
        (["--prompt-ids", "a,b"], "invalid literal"),
    ],
)
def test_the_example_refuses_bad_arguments_before_reading_the_checkpoint(example, capsys, argv, message):
    with pytest.raises(SystemExit) as e:
        example.arguments(["no-such-checkpoint", *argv])
    assert e.value.code == 2 and message in capsys.readouterr().err
    assert example.arguments(["x", "--temperature", "0.5", "--prompt-ids", "4,5"]).prompt_ids == [4, 5]
