"""The decision step's cost at SDAR-8B's vocabulary on this CPU: ``DecisionRule.drawn`` (tokens
and confidences from one filter and one softmax, what ``decide`` runs) against ``tokens()`` then
``confidences()`` (two of each), asserted identical; best of 7, one thread, 32 masked rows.

    python benchmarks/rule_cost.py
"""

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout

import torch  # noqa: E402

from spotref.spec.rules import DecisionRule  # noqa: E402

V, B = 151936, 32
CASES = [("bfloat16", 0.0, None), ("bfloat16", 1.0, None), ("bfloat16", 1.0, 50), ("float64", 1.0, None),
         ("float64", 1.0, 50)]  # fmt: skip


def best_ms(f, n: int = 7) -> float:
    times = []
    for _ in range(n):
        t = time.perf_counter()
        f()
        times.append(time.perf_counter() - t)
    return 1e3 * min(times)


def main(argv=None) -> int:
    argparse.ArgumentParser(prog="python benchmarks/rule_cost.py", description=__doc__.splitlines()[0]).parse_args(argv)
    torch.set_num_threads(1)
    logits = torch.randn(B, V, generator=torch.Generator().manual_seed(0)).to(torch.bfloat16)  # (B, V)
    print("| precision | T | top-k | two passes (ms) | one pass (ms) |\n|---|---|---|---|---|")
    for precision, T, top_k in CASES:
        rule = DecisionRule(V - 1, V, B, T, 0, top_k, None, None, "filtered", precision)
        noise = rule.block_noise(0)
        two = lambda: (lambda x: (x, rule.confidences(logits, x)))(rule.tokens(logits, range(B), noise, 0))
        one = lambda: rule.drawn(logits, range(B), noise, 0)
        assert all(torch.equal(a, b) for a, b in zip(two(), one()))
        print(f"| {precision} | {T:g} | {top_k or '-'} | {best_ms(two):.0f} | {best_ms(one):.0f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
