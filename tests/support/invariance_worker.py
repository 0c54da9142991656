"""Run by tests/exactness/test_batch_invariance.py in a subprocess per ATEN_CPU_CAPABILITY level (the level
is read once, when torch starts). Prints one JSON line: the kernel path and every failing case.

``--flat-silu`` runs silu over the flattened batch (one kernel call for every row), the kernel
behaviour spotref.spec.sdar.silu_rows exists to avoid: the TAILS cases must then fail."""

import itertools
import json
import sys

import torch
from helpers import tiny_config

from spotref.audit import batch_invariance
from spotref.spec import sdar
from spotref.spec.sdar import SDARModel

BLOCKS = (1, 3, 5, 7, 9, 16)
INTERMEDIATE = (24, 40, 100)  # not multiples of 16 or 32
DTYPES = (torch.float32, torch.bfloat16, torch.float16)
# float32 passes where every row is real (rows == width) and the silu buffer has a vector tail at
# its end and, with 2 threads (buffers >= 32768 floats are split), at the threads' boundary: (B, I, rows)
TAILS = ((16, 1001, 5), (7, 999, 11), (5, 101, 13), (9, 1003, 7))


def model(B, I, dtype, seed):
    cfg = tiny_config(67, B, hidden_size=24, intermediate_size=I, num_attention_heads=3, num_key_value_heads=1)
    torch.manual_seed(seed)
    return SDARModel(cfg).to(dtype).eval()


def main() -> int:
    if "--flat-silu" in sys.argv:
        sdar.silu_rows = torch.nn.functional.silu
    failures, checked = [], 0
    for threads in (1, 2):
        torch.set_num_threads(threads)
        for i, (B, I) in enumerate(itertools.product(BLOCKS, INTERMEDIATE)):
            dtype, fused = DTYPES[i % 3], bool(i // 3 % 2)  # each (dtype, fused) pair 3 times
            for width in (None, 3 + i % 11 + i % 5):  # rows alone; a fixed width >= rows
                r = batch_invariance(
                    model(B, I, dtype, i), prefix_len=B * (i % 3), rows=3 + i % 11, seed=i, fused=fused, width=width
                )
                checked += 1
                if r["equal_rows"] != r["rows"]:
                    failures.append({**r, "dtype": str(dtype), "intermediate_size": I, "threads": threads})
        for j, (B, I, rows) in enumerate(TAILS):
            r = batch_invariance(
                model(B, I, torch.float32, j), prefix_len=B, rows=rows, seed=j, fused=bool(j % 2), width=rows
            )
            checked += 1
            if r["equal_rows"] != r["rows"]:
                failures.append({**r, "dtype": "torch.float32", "intermediate_size": I, "threads": threads})
    print(json.dumps({"capability": torch.backends.cpu.get_cpu_capability(), "checked": checked, "failures": failures}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
