"""LLaDA's draw read two other ways (docs/spec.md section 2.2): ``argmax exp(L) / (-log u) ** T``
(the rule, float64) against a Gumbel-max over ``L / T`` rounded to the logits' dtype D, and over
``L / T`` in float64, on random rows (V = 1000, bf16 and float32 logits, four temperatures).

    python benchmarks/llada_draw_readings.py            # 200 seeds of 32 rows each
"""

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout

import torch  # noqa: E402

from spotref.cli.argtypes import guarded, positive_int  # noqa: E402
from spotref.spec.noise import gumbel_of, uniform  # noqa: E402
from spotref.spec.rules import divisor  # noqa: E402

ROWS, V, TEMPERATURES = 32, 1000, (0.3, 0.7, 1.5, 2.3)
PROG = "python benchmarks/llada_draw_readings.py"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog=PROG, description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=positive_int, default=200, help="noise seeds, 32 rows each (default 200)")
    args = ap.parse_args(argv)
    return guarded(PROG, lambda: run(args.seeds))


def run(seeds: int) -> int:
    torch.manual_seed(0)
    counts = {"bfloat16": [0, 0, 0], "float32": [0, 0, 0]}  # draws, L / T in D differs, L / T in float64 differs
    for s in range(seeds):
        T, u = TEMPERATURES[s % len(TEMPERATURES)], uniform(s, 0, 0, ROWS, V)
        g = gumbel_of(u)
        for name, scale in (("bfloat16", 1.0), ("float32", 3.0)):
            L = (torch.randn(ROWS, V, dtype=torch.float64) * scale).to(getattr(torch, name))
            x = (L.double().exp() / divisor(u, T)).argmax(-1)
            c = counts[name]
            c[0] += ROWS
            c[1] += int((x != ((L / T).double() + g).argmax(-1)).sum())
            c[2] += int((x != (L.double() / T + g).argmax(-1)).sum())
    print("| logits | draws | Gumbel-max on L / T in D differs | Gumbel-max on L / T in float64 differs |")
    print("|---|---|---|---|")
    for name, (n, d, f) in counts.items():
        print(f"| {name} | {n} | {d} ({d / n:.2%}) | {f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
