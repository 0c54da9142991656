"""``python -m spotref.tools.costmodel``: the table behind ``budget="auto"`` on this machine."""
from __future__ import annotations

import argparse

import torch

from spotref.drafters.budget import (
    BUDGETS,
    choose_budget,
    draft_times,
    expected_commits,
    verify_times,
)
from spotref.load.drafters import resolve_drafter
from spotref.load.targets import DEFAULT_TARGET, load_target
from spotref.tools.report import table


def main(argv=None) -> int:
    """``python -m spotref.tools.costmodel [TARGET] [--drafter spot|calibrated|confidence] [--temperature T]``:
    the cost model's table on this machine (verify and draft times, E(N), commits per second)."""
    p = argparse.ArgumentParser(prog="python -m spotref.tools.costmodel", description=main.__doc__.splitlines()[0])
    p.add_argument("target", nargs="?", default=DEFAULT_TARGET)
    p.add_argument("--drafter", default="spot")
    p.add_argument("--temperature", type=float, default=0.0)
    p.add_argument("--depth", type=int, default=32)
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    model = load_target(args.target).model
    drafter = resolve_drafter(args.drafter, model)
    tv = verify_times(model, repeats=5)
    td = draft_times(drafter, model, depth=args.depth, temperature=args.temperature)
    e = {N: expected_commits(drafter, N, args.temperature) for N in BUDGETS}
    rows = [[N, 1e3 * tv[N], 1e3 * td[N], e[N], e[N] / (tv[N] + td[N]), e[N] / tv[N]] for N in BUDGETS]
    print(table(["N", "verify ms", "draft ms", "E(N) commits/round", "commits/s", "commits/s, free drafter"], rows))
    print(f"budget='auto' picks N = {choose_budget({N: tv[N] + td[N] for N in BUDGETS}, e)}; "
          f"exact decoding: {1 / tv[1]:.0f} commits/s (one verify of N = 1 per commit)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
