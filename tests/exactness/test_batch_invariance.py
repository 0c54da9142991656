"""Batch invariance (docs/spec.md section 4): a row of a batched pass is bit-identical to the same
state run alone (rows alone), and at a fixed width to the same state among other rows and
elsewhere in the pass, for the plain and the fused-store pass, in float32, bfloat16 and float16,
at odd block sizes and intermediate sizes, with 1 and 2 threads, under every CPU capability level
this machine has (each level in a subprocess of its own: torch reads ATEN_CPU_CAPABILITY once)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from helpers import tiny_model

from spotref.audit import batch_invariance, kernel_path

SUPPORT = Path(__file__).resolve().parents[1] / "support"


def cpu_flags() -> set:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return set()
    line = next((l for l in text.splitlines() if l.startswith("flags")), "")
    return set(line.split(":", 1)[-1].split())


def capability_levels() -> list:
    """ATen's levels this CPU can run: DEFAULT always; AVX2 and AVX512 by the CPU's flags."""
    flags, levels = cpu_flags(), ["default"]
    if {"avx2", "fma"} <= flags:
        levels.append("avx2")
    if {"avx512f", "avx512bw", "avx512vl", "avx512dq"} <= flags:
        levels.append("avx512")
    return levels


def worker_report(level: str, *args: str) -> dict:
    """The invariance worker's JSON report under capability ``level`` and 2 threads."""
    env = {**os.environ, "ATEN_CPU_CAPABILITY": level, "OMP_NUM_THREADS": "2"}
    out = subprocess.run(
        [sys.executable, str(SUPPORT / "invariance_worker.py"), *args],
        env=env,
        cwd=SUPPORT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.slow
@pytest.mark.parametrize("level", capability_levels())
def test_rows_are_bit_identical_under_each_cpu_capability(level):
    report = worker_report(level)
    assert report["capability"].lower() == level, f"asked for {level}, torch ran {report['capability']}"
    assert report["checked"] == 2 * (6 * 3 * 2 + 4)  # threads x (blocks x intermediate sizes x paths + tails)
    assert report["failures"] == [], json.dumps(report["failures"][:3], indent=1)


@pytest.mark.slow
@pytest.mark.parametrize("level", [level for level in capability_levels() if level != "default"])
def test_the_worker_fails_on_a_flattened_silu(level):
    """The worker's check can fail on a real kernel property: silu over the flattened batch puts a
    vector tail (the scalar path, another exp) inside some row, whose logits then differ."""
    report = worker_report(level, "--flat-silu")
    assert report["failures"], "a flattened silu went unnoticed"
    assert {f["dtype"] for f in report["failures"]} == {"torch.float32"}


def test_the_worker_sees_a_model_that_is_not_batch_invariant(monkeypatch):
    """The check can fail: a model whose logits depend on the batch is caught."""
    model = tiny_model(V=40, B=3)
    denoise = model.denoise
    monkeypatch.setattr(model, "denoise", lambda cache, s: denoise(cache, s) + 1e-6 * (len(s) > 1))
    r = batch_invariance(model, rows=4)
    assert r["equal_rows"] == 0 and r["first_bad_row"] == 0 and r["max_abs_diff"] > 0


def test_kernel_path_names_the_capability_and_threads():
    path = kernel_path()
    assert path.startswith("cpu ") and torch.backends.cpu.get_cpu_capability() in path
    assert f"{torch.get_num_threads()} threads" in path


@pytest.mark.skipif(
    not torch.cuda.is_available(), reason="no CUDA device here (benchmarks/gpu_check.py runs this on a GPU)"
)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("fused", [False, True])
@pytest.mark.parametrize("width", [None, 17, 24])
def test_rows_are_bit_identical_on_cuda(dtype, fused, width):
    for B in (1, 5, 32):
        model = tiny_model(V=67, B=B, dtype=dtype, intermediate_size=100).cuda()
        r = batch_invariance(model, prefix_len=2 * B, rows=17, fused=fused, width=width)
        assert r["equal_rows"] == r["rows"], r


@pytest.mark.parametrize(
    "leak",
    [
        lambda s: 1e-3 * s.float().mean(),  # a row depends on the other rows (a kernel mixing rows)
        lambda s: 1e-3 * torch.arange(len(s)).view(-1, 1, 1),  # a row depends on its place (a vector tail)
    ],
)
def test_the_fixed_width_check_can_fail(leak):
    """At a fixed width every pass holds one row count, so what can leak is the rows' contents
    and places: both are caught, the row alone at the width and the batch rolled by half."""
    model = tiny_model(V=67, B=5, intermediate_size=100)
    denoise = model.denoise
    model.denoise = lambda cache, s, one_forward=False: denoise(cache, s, one_forward) + leak(s)
    r = batch_invariance(model, prefix_len=5, rows=9, width=16)
    assert r["equal_rows"] == 0 and r["max_abs_diff"] > 0
