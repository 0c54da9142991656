"""Where SPOT loses rounds against the oracle order at small budgets (issue 65), offline.

On held-out exact-decoding trajectories (``spotref.record``, the trainer's cache, recorded on
first use), a round is simulated at each round start as ``spotref.train.train_drafter.simulate``
does: SPOT's tree at budget N (depth cap D) is matched against the target's true decisions by
state equality. The oracle order is the chain of the true next positions with the stale coupled
tokens, N - 1 deep: it accepts ``Row.accepted_prefix(N - 1)``. Three tables per target:

1. commits per round of SPOT and of the oracle order, the tree nodes on the target's path, and,
   for each round where the oracle order goes deeper than SPOT, the rank of the true next
   position in the order model's next-commit distribution at the deepest node SPOT reached
   (rank 1: its top choice, whose child the budget did not keep; rank > 1: the order is wrong);
2. along the target's path (every depth the oracle order reaches), the next commit predicted
   right by the order model and by the stale order (p_coupled, ties to the lowest position), the
   share of states whose true next is tied with the top p_coupled, and the model's accuracy there;
3. every drafted node's path probability against how often the target reached it.

A power of every edge probability changes no tree (the tree compares path products, and
``prod p ** a`` orders paths as ``prod p`` does).
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout
from spotref.cli.argtypes import guarded, positive_int  # noqa: E402
from spotref.cli.report import table  # noqa: E402
from spotref.drafters.spot import SpotDrafter  # noqa: E402
from spotref.load.drafters import ORDER_DIR, load_order_model  # noqa: E402
from spotref.load.targets import list_targets, load_target  # noqa: E402
from spotref.record import trajectories as tj  # noqa: E402
from spotref.record.prompts import TrajectorySpec, recorded  # noqa: E402
from spotref.train.train_drafter import segments  # noqa: E402

PROG = "python benchmarks/order_gap.py"


def path(row, upto: int) -> tuple:
    """(states, steps, marks) of the target's own path from ``row``: depth 0 .. upto - 1."""
    state, marks = row.tokens.copy(), np.zeros(len(row.tokens), dtype=np.int64)
    states, steps, out_marks = [], [], []
    for d, decision in enumerate(row.fut_sets()[:upto]):
        states.append(state.copy()), steps.append(row.step + d), out_marks.append(marks.copy())
        for p, t in decision:
            state[p], marks[p] = t, d + 1
    return states, steps, out_marks


def rank_name(k: int) -> str:
    if k == 1:
        return "budget (its top choice)"
    return f"order, rank {k}" if k <= 3 else "order, rank 4-8" if k <= 8 else "order, rank > 8"


def along_path(spot, row, upto: int) -> list:
    """Per depth d of the target's path: (rank of the true next position under the order model,
    whether the stale order (p_coupled, ties to the lowest position) has it first, whether it is
    tied with the top p_coupled there)."""
    states, steps, marks = path(row, upto)
    if not states:
        return []
    p, _ = (a.numpy() for a in spot.scores(row, states, steps, marks))  # (d, B)
    out = []
    for d, (state, k) in enumerate(zip(states, steps)):
        masked = np.flatnonzero(state == row.mask_id)
        true = min(q for q, _ in row.fut_sets()[d])
        pc = np.asarray(row.coupled(k)[1])[masked]
        stale_first = masked[int(np.argmax(pc))]  # argmax: the first (lowest) of the tied
        tied = bool(pc[masked == true][0] == pc.max())
        out.append((int((p[d][masked] > p[d][true]).sum()) + 1, stale_first == true, tied))
    return out


def rounds(spot, ds, N: int, depth: int, limit: int):
    """SPOT's rounds simulated along ``ds`` (as ``train_drafter.simulate``), until ``limit``
    rounds: (row index, row, tree, decisions accepted) each."""
    n = 0
    for seg in segments(ds):
        i = 0
        while i < len(seg):
            r = ds.row(seg[i])
            tree = spot.draft(r, N, depth)
            got = tj.accepted(tree, r)
            yield seg[i], r, tree, got
            i, n = i + min(got + 1, len(r.fut_sets())), n + 1
        if n >= limit:
            break


def measure(spot, ds, N: int, depth: int, limit: int) -> dict:
    """Over ``rounds``: commits per round of SPOT and of the oracle order, the kind of SPOT's
    first miss where the oracle goes deeper, the path's per-depth ranks (``along_path``) and
    every node's (path probability, reached)."""
    m = dict(spot=[], oracle=[], kinds=Counter(), depths=[], nodes=([], []))
    for _, r, tree, got in rounds(spot, ds, N, depth, limit):
        n_dec, best = len(r.fut_sets()), r.accepted_prefix(min(N - 1, depth))
        ranks = along_path(spot, r, min(n_dec, best + 1))
        if got < min(best, n_dec):
            m["kinds"][rank_name(ranks[got][0])] += 1
        m["depths"] += list(enumerate(ranks))
        m["nodes"][0].extend(tree.probs[1:]), m["nodes"][1].extend(tj.reached(tree, r)[1:])
        m["spot"].append(min(got + 1, n_dec)), m["oracle"].append(min(best + 1, n_dec))
    return m


def misses(kinds: Counter) -> str:
    """The first misses' shares, largest first."""
    total = sum(kinds.values()) or 1
    return ", ".join(f"{k} {v / total:.0%}" for k, v in sorted(kinds.items(), key=lambda kv: -kv[1]))


DEPTHS = ((0, 0), (1, 1), (2, 3), (4, 7), (8, 15), (16, 10**9))


def depth_rows(T: float, depths: list) -> list:
    """Per depth band: states, next commit right (order model / stale order), the share whose
    true next is tied at the stale top, and the order model's accuracy on those."""
    rows = []
    for lo, hi in DEPTHS:
        band = [r for d, r in depths if lo <= d <= hi]
        if not band:
            continue
        right = np.mean([k == 1 for k, _, _ in band])
        stale = np.mean([s for _, s, _ in band])
        tied = [k == 1 for k, _, t in band if t]
        name = f"{lo}" if lo == hi else f"{lo}+" if hi > 99 else f"{lo}-{hi}"
        rows.append([f"{T:g}", name, len(band), f"{right:.3f}", f"{stale:.3f}", f"{len(tied) / len(band):.0%}",
                     f"{np.mean(tied):.3f}" if tied else "-"])  # fmt: skip
    return rows


CALIBRATION = (0.0, 0.05, 0.15, 0.3, 0.5, 0.7, 0.9, 1.01)


def calibration_rows(T: float, N: int, nodes: tuple) -> list:
    """Nodes by path probability band: their mean path probability and how often reached."""
    probs, hits = np.asarray(nodes[0]), np.asarray(nodes[1], dtype=float)
    rows = []
    for lo, hi in zip(CALIBRATION, CALIBRATION[1:]):
        sel = (probs >= lo) & (probs < hi)
        if sel.any():
            rows.append([f"{T:g}", N, f"[{lo:g}, {min(hi, 1):g})", int(sel.sum()), f"{probs[sel].mean():.3f}",
                         f"{hits[sel].mean():.3f}"])  # fmt: skip
    return rows


def add_round_arguments(ap: argparse.ArgumentParser, budgets: str, rounds: int) -> None:
    """The options of a run over simulated rounds on held-out trajectories (``held_out``)."""
    ap.add_argument("--budgets", default=budgets, help="comma list of N")
    ap.add_argument("--depth", type=positive_int, default=32)
    ap.add_argument("--rounds", type=positive_int, default=rounds, help="rounds per (N, T) at most")
    ap.add_argument("--test-prompts", type=positive_int, default=16)
    ap.add_argument("--data-dir", default="runs/drafter-data", help="trajectory cache (the trainer's)")


def held_out(target, args, T: float):
    """``target``'s held-out trajectories at T, as the drafter trainer records and caches them."""
    return recorded(target, TrajectorySpec(args.data_dir, 0, args.test_prompts, 0, 64, 128, 1), "test", T)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog=PROG, description=__doc__.splitlines()[0])
    ap.add_argument("targets", help="comma list of bundled targets (each with its shipped drafter)")
    add_round_arguments(ap, budgets="4,8,16", rounds=400)
    args = ap.parse_args(argv)
    return guarded(PROG, lambda: run(args, bundled(ap, args.targets)))


def bundled(ap: argparse.ArgumentParser, targets: str) -> list:
    """The comma list ``targets`` as names of bundled targets; an unknown one is ``ap.error``."""
    names = targets.split(",")
    unknown = [n for n in names if n not in list_targets()]
    if unknown:
        ap.error(f"unknown targets {unknown}; bundled: {', '.join(list_targets())}")
    return names


def run(args, names) -> int:
    budgets = [int(n) for n in args.budgets.split(",")]
    for name in names:
        target = load_target(name)
        spot = SpotDrafter(*load_order_model(ORDER_DIR / f"{name}.pt"))
        rounds, depth, calib = [], [], []
        for T in (0.0, 1.0):
            ds = held_out(target, args, T)
            for N in budgets:
                m = measure(spot, ds, N, args.depth, args.rounds)
                got, orc = np.mean(m["spot"]), np.mean(m["oracle"])
                rounds.append([f"{T:g}", N, f"{got:.2f}", f"{orc:.2f}", f"{got / orc:.0%}", f"{got - 1:.2f} of {N - 1}",
                               len(m["spot"]), misses(m["kinds"])])  # fmt: skip
                calib += calibration_rows(T, N, m["nodes"])
            depth += depth_rows(T, m["depths"])
        print(f"\n## {name}: commits per round, offline (D = {args.depth})\n")
        print(table(["T", "N", "SPOT", "oracle order", "share", "tree nodes on the path", "rounds",
                     "SPOT's first miss where the oracle goes on"], rounds))  # fmt: skip
        print(f"\n## {name}: the next commit along the target's path, by depth (N = {budgets[-1]}'s rounds)\n")
        print(table(["T", "depth", "states", "order model right", "stale order right", "true next tied at the top",
                     "order model right, tied"], depth))  # fmt: skip
        print(f"\n## {name}: node path probability against how often the node was reached\n")
        print(table(["T", "N", "path probability", "nodes", "mean", "reached"], calib))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
