"""What the SPOT drafter costs per round, beside an SDAR-8B verify pass (issue 65).

On held-out exact-decoding trajectories of a bundled target (the trainer's cache, recorded on
first use), the shipped drafter drafts at each simulated round start (``order_gap.rounds``) at
each budget N, depth cap D. Per round: the order-model calls (one per tree level) and the states
they score, the drafter's FLOPs (``torch.utils.flop_counter``: the order model's matmuls and
attention; the tree bookkeeping is not counted), and its wall time on this CPU (one thread,
measured without the counter; the FLOPs with PyTorch's fused encoder-layer fast path off, which
the counter has no formula for). Beside it, the FLOPs of one SDAR-8B verify pass over N block
states of B tokens (counted the same way on a meta-device model of SDAR-8B's shape, no prefix:
attention to a cached prefix of L tokens adds about 4 L d FLOPs per token and layer, 1% at
L = 256), and the drafter's share of it.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import torch
from torch.utils.flop_counter import FlopCounterMode

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout
sys.path.insert(0, str(Path(__file__).resolve().parent))
from gpu_check import SDAR_8B  # noqa: E402  (SDAR-8B's shape: the real config's numbers)
from order_gap import add_round_arguments, held_out, rounds  # noqa: E402

from spotref.cli.argtypes import guarded  # noqa: E402
from spotref.cli.report import table  # noqa: E402
from spotref.drafters.spot import SpotDrafter  # noqa: E402
from spotref.load.drafters import ORDER_DIR, load_order_model  # noqa: E402
from spotref.load.targets import list_targets, load_target  # noqa: E402
from spotref.spec.sdar import SDARModel  # noqa: E402

PROG = "python benchmarks/drafter_cost.py"


def per_round(spot, rows, N: int, depth: int) -> dict:
    """Mean per round over ``rows``: order-model calls, states scored, FLOPs, seconds."""
    calls, states = [], []
    real = spot.model.forward

    def counting(x, masked):
        calls[-1] += 1
        states[-1] += len(x)
        return real(x, masked)

    spot.model.forward = counting
    torch.backends.mha.set_fastpath_enabled(False)  # the fused encoder-layer kernel: no FLOP formula
    try:
        with FlopCounterMode(display=False) as fc:
            for r in rows:
                calls.append(0), states.append(0)
                spot.draft(r, N, depth)
    finally:
        del spot.model.forward
        torch.backends.mha.set_fastpath_enabled(True)
    t0 = time.perf_counter()
    for r in rows:
        spot.draft(r, N, depth)
    seconds = (time.perf_counter() - t0) / len(rows)
    return dict(calls=np.mean(calls), states=np.mean(states), flops=fc.get_total_flops() / len(rows), seconds=seconds)


def sdar_8b_flops(n_states: int, block: int) -> float:
    """FLOPs of SDAR-8B's forward over ``n_states`` rows of ``block`` tokens (meta device)."""
    with torch.device("meta"):
        model = SDARModel(SDAR_8B)
    ids = torch.zeros((n_states, block), dtype=torch.long, device="meta")
    with FlopCounterMode(display=False) as fc, torch.no_grad():
        model(ids)
    return fc.get_total_flops()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog=PROG, description=__doc__.splitlines()[0])
    ap.add_argument("target", nargs="?", default="gsm-b32", help="a bundled target with a shipped drafter")
    add_round_arguments(ap, budgets="4,8,16,64", rounds=100)
    args = ap.parse_args(argv)
    if args.target not in list_targets():
        ap.error(f"unknown target {args.target!r}; bundled: {', '.join(list_targets())}")
    return guarded(PROG, lambda: run(args))


def run(args) -> int:
    torch.set_num_threads(1)
    budgets = [int(n) for n in args.budgets.split(",")]
    target = load_target(args.target)
    spot = SpotDrafter(*load_order_model(ORDER_DIR / f"{args.target}.pt"))
    ds = held_out(target, args, 0.0)
    B, rows = target.model.block_size, []
    for N in budgets:
        starts = [r for _, r, _, _ in rounds(spot, ds, N, args.depth, args.rounds)]
        m = per_round(spot, starts, N, args.depth)
        verify = sdar_8b_flops(N, B)
        rows.append([N, f"{m['calls']:.1f}", f"{m['states']:.1f}", f"{m['flops'] / 1e6:.0f}",
                     f"{m['seconds'] * 1e3:.1f}", f"{verify / 1e12:.2f}", f"{m['flops'] / verify:.4%}"])  # fmt: skip
    print(f"\n{args.target}'s drafter per round (T = 0, D = {args.depth}, B = {B}) against an SDAR-8B verify pass\n")
    print(table(["N", "order-model calls", "states scored", "drafter MFLOP", "drafter ms (this CPU, 1 thread)",
                 "SDAR-8B pass TFLOP (N states)", "drafter / pass FLOPs"], rows))  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
