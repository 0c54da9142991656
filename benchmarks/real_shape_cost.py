"""The cost of a verify pass at the shapes of real diffusion LMs on this CPU (issue 62, item 1).

A model of a real shape (``SHAPES``: SDAR-0.6B to 8B, LLaDA-8B, Dream-7B; the numbers of their
config.json files) with random weights in bf16, the dtype they are served in; for each block
length B and each count N of states, one verify pass timed two ways: rows alone (N forwards of
one row, batch invariant by construction) and one forward of N rows as spotref runs a fixed
width (batch invariant as docs/spec.md section 4 builds it: silu row by row, no padding). A canvas
family's pass is N canvases of ``--canvas`` tokens (its block length changes nothing in a pass).
The median of ``--reps`` passes after one warm-up; every cell is written to ``--out`` as it is
measured, so a run cut short keeps what it measured. Ratios are read within one run.

    python benchmarks/real_shape_cost.py --shapes sdar-1.7b --out runs/real-shape-cost.json
"""

import argparse
import gc
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout

import torch  # noqa: E402

from spotref.cli.argtypes import guarded, int_list, positive_int  # noqa: E402
from spotref.configs import DreamConfig, LLaDAConfig, SDARConfig  # noqa: E402
from spotref.files import atomic_write_text, check_writable  # noqa: E402
from spotref.spec.dream import DreamModel  # noqa: E402
from spotref.spec.llada import LLaDAModel  # noqa: E402
from spotref.spec.sdar import SDARModel  # noqa: E402
from workbench.bench.timing import median_ms  # noqa: E402

PROG = "python benchmarks/real_shape_cost.py"
QWEN3_VOCAB = 151936  # SDAR's vocabulary (Qwen3's)


def qwen3(hidden: int, layers: int, heads: int, intermediate: int) -> dict:
    """An SDAR (Qwen3) shape: 8 K/V heads of 128, Qwen3's vocabulary."""
    return dict(hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads, num_key_value_heads=8,
                head_dim=128, intermediate_size=intermediate, vocab_size=QWEN3_VOCAB)  # fmt: skip


LLADA_8B = dict(d_model=4096, n_layers=32, n_heads=32, n_kv_heads=32, mlp_hidden_size=12288, vocab_size=126464,
                embedding_size=126464)  # fmt: skip
DREAM_7B = dict(hidden_size=3584, num_hidden_layers=28, num_attention_heads=28, num_key_value_heads=4,
                intermediate_size=18944, vocab_size=152064)  # fmt: skip
SHAPES = {  # name -> (family, config fields): the real models' config.json numbers
    "sdar-0.6b": ("sdar", qwen3(1024, 28, 16, 3072)),
    "sdar-1.7b": ("sdar", qwen3(2048, 28, 16, 6144)),
    "sdar-4b": ("sdar", qwen3(2560, 36, 32, 9728)),
    "sdar-8b": ("sdar", qwen3(4096, 36, 32, 12288)),
    "llada-8b": ("llada", LLADA_8B),
    "dream-7b": ("dream", DREAM_7B),
}


def build(name: str, block: int):
    """The model ``name`` with random bf16 weights (built in bf16: an 8B model never in float32)."""
    family, fields = SHAPES[name]
    torch.manual_seed(0)
    default = torch.get_default_dtype()
    torch.set_default_dtype(torch.bfloat16)
    try:
        if family == "sdar":
            return SDARModel(SDARConfig(**fields, mask_token_id=1, block_size=block)).eval()
        if family == "llada":
            return LLaDAModel(LLaDAConfig(**fields, mask_token_id=1, max_sequence_length=4096)).eval()
        config = DreamConfig(**fields, mask_token_id=1, pad_token_id=0, bos_token_id=0, eos_token_id=0,
                             max_position_embeddings=4096)  # fmt: skip
        return DreamModel(config).eval()
    finally:
        torch.set_default_dtype(default)


def parameters(name: str) -> int:
    """The parameter count of shape ``name``, from a model built on the meta device (no memory)."""
    with torch.device("meta"):
        return sum(p.numel() for p in build(name, 4).parameters())


def available_bytes() -> int:
    """MemAvailable of /proc/meminfo (0 where it cannot be read)."""
    try:
        line = next(x for x in Path("/proc/meminfo").read_text().splitlines() if x.startswith("MemAvailable"))
        return int(line.split()[1]) * 1024
    except (OSError, StopIteration, ValueError, IndexError):
        return 0


def sdar_passes(model, N: int, prefix: int) -> dict:
    """The two ways to run a pass of N block states over a cache of ``prefix`` tokens."""
    g = torch.Generator().manual_seed(N)
    V, B = model.config.vocab_size, model.block_size
    cache = model.prefill(torch.randint(2, V, (prefix // B * B,), generator=g))
    states = torch.randint(2, V, (N, B), generator=g)

    return {
        "rows alone": lambda: model.denoise(cache, states),
        "one forward": lambda: model.denoise(cache, states, one_forward=True),
    }


def canvas_passes(model, N: int, canvas: int) -> dict:
    """A whole-canvas pass of N canvases of ``canvas`` tokens: rows alone, and one forward."""
    g = torch.Generator().manual_seed(N)
    rows = torch.randint(2, model.config.vocab_size, (N, canvas), generator=g)
    with torch.no_grad():
        return {"rows alone": lambda: [model(rows[i : i + 1]) for i in range(N)], "one forward": lambda: model(rows)}


def measure_shape(a, name: str, record: dict, out: Path) -> None:
    """Every (B, N, way) cell of shape ``name`` into ``record``, the file rewritten after each."""
    family = SHAPES[name][0]
    need = 2 * parameters(name)
    entry = record.setdefault(name, {"family": family, "parameters": need // 2, "cells": []})
    if need > 0.85 * available_bytes():
        entry["skipped"] = f"needs {need / 2**30:.2f} GiB of weights, {available_bytes() / 2**30:.2f} GiB available"
        print(f"{name}: skipped, {entry['skipped']}", flush=True)
        return
    blocks = a.blocks if family == "sdar" else [None]
    for B in blocks:
        model = build(name, B or 4)
        for N in a.states:
            ways = sdar_passes(model, N, a.prefix) if family == "sdar" else canvas_passes(model, N, a.canvas)
            for way, fn in ways.items():
                with torch.no_grad():
                    ms = round(median_ms(fn, a.reps), 1)
                entry["cells"].append({"block": B, "states": N, "way": way, "ms": ms})
                print(f"{name} B={B} N={N} {way}: {ms:.1f} ms", flush=True)
                atomic_write_text(out, json.dumps({"args": vars(a), "shapes": record}, indent=1) + "\n")
            del ways, fn  # their closures hold the model
        del model  # freed before the next block's is built: two 8B models do not fit in 24 GiB
        gc.collect()


def table(record: dict) -> str:
    """Per shape and block: one state's pass, and each N's pass cost in units of it, each way."""
    lines = ["| shape | block | way | 1 state (ms) | " + " | ".join(f"N={n} (x)" for n in (2, 4, 8, 16)) + " |"]
    lines.append("|---" * 8 + "|")
    for name, entry in record.items():
        cells = entry.get("cells", [])
        for B in dict.fromkeys(c["block"] for c in cells):
            for way in dict.fromkeys(c["way"] for c in cells):
                ms = {c["states"]: c["ms"] for c in cells if c["block"] == B and c["way"] == way}
                if 1 not in ms:
                    continue
                ratios = " | ".join(f"{ms[n] / ms[1]:.2f}" if n in ms else "" for n in (2, 4, 8, 16))
                lines.append(f"| {name} | {B or 'canvas'} | {way} | {ms[1]:.0f} | {ratios} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog=PROG, description=__doc__.splitlines()[0])
    p.add_argument("--out", default="runs/real-shape-cost.json", help="the JSON results file (written as it goes)")
    p.add_argument("--shapes", default="sdar-0.6b,sdar-1.7b", help=f"comma-separated, of {', '.join(SHAPES)}")
    p.add_argument("--blocks", type=int_list(1), default=[4, 8, 16, 32], help="SDAR's block lengths B")
    p.add_argument("--states", type=int_list(1), default=[1, 2, 4, 8], help="N: states per verify pass")
    p.add_argument("--prefix", type=positive_int, default=256, help="SDAR: the cached context before the block")
    p.add_argument("--canvas", type=positive_int, default=256, help="LLaDA, Dream: the canvas' tokens")
    p.add_argument("--reps", type=positive_int, default=3, help="timed passes per cell (the median)")
    p.add_argument("--threads", type=positive_int, default=None, help="torch threads (default: torch's own)")
    a = p.parse_args(argv)
    return guarded(PROG, lambda: run(a))


def run(a) -> int:
    out = check_writable(a.out)
    names = a.shapes.split(",")
    unknown = [n for n in names if n not in SHAPES]
    if unknown:
        raise ValueError(f"--shapes: unknown {unknown}; known: {', '.join(SHAPES)}")
    if a.threads:
        torch.set_num_threads(a.threads)
    record = {}
    for name in names:
        measure_shape(a, name, record, out)
        atomic_write_text(out, json.dumps({"args": vars(a), "shapes": record}, indent=1) + "\n")
    print(f"\n{table(record)}\n\n(torch {torch.__version__}, {torch.get_num_threads()} threads; {out})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
