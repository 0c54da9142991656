"""Time the tree core (build_tree + walk) of both implementations: pure Python vs Cython.

Random best-first-like draft trees, B = 32 positions (8 committed at the root), N = 64 nodes,
depth <= 8, one-position rule: a main chain of 8 commits in the drafter's preferred order, then
branches that prefer shallow parents and the preferred positions (geometric over that order);
tokens are mostly one stale token per position, as coupled noise at T = 0 gives, so different
commit orders reach equal states and get merged. The decision callback is precomputed: every
walk accepts 6 levels of the chain, then stops on an off-tree bonus commit.

    python benchmarks/bench_core.py [--trees 16] [--samples 31] [--seed 0]

Each sample times one batch per core, the cores interleaved so that load on a shared machine
hits both alike; the table gives the median over samples of the time per tree.
docs/core-benchmark.md records a run.
"""

from __future__ import annotations

import argparse
import datetime
import platform
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout
import spotref  # noqa: E402
from spotref.cli.argtypes import guarded, nonneg_int, positive_int  # noqa: E402
from spotref.spec.draft import DraftBuilder  # noqa: E402

B, N, DEPTH, ACCEPT, STEP = 32, 64, 8, 6, 8
V, MASK = 151_936, 151_669  # SDAR's vocabulary and MASK id


def random_draft(rng: np.random.Generator):
    """(root, parents, commits, decisions): a draft, and the walk's decision at each row."""
    root = np.full(B, MASK, dtype=np.int64)
    root[rng.choice(B, B - 24, replace=False)] = rng.integers(0, 1000, B - 24)
    stale = rng.integers(0, 1000, B)  # the stale token of each position
    rank = rng.permutation(B)  # the drafter's position preference
    t, edges = DraftBuilder(root, STEP), set()

    def add(p, pos, tok):
        if (p, pos, tok) not in edges:  # equal states stay: the core merges them
            edges.add((p, pos, tok))
            t.add(p, ((pos, tok),))

    def ranked_masked(p):
        masked = np.flatnonzero(t.states[p] == MASK)
        return masked[np.argsort(rank[masked])]

    for k in range(DEPTH):  # the main chain: nodes 0 .. 8
        pos = int(ranked_masked(k)[0])
        add(k, pos, int(stale[pos]))
    while len(t) < N:  # branches
        open_ = [i for i in range(len(t)) if t.depths[i] < DEPTH]
        w = np.array([1.0 / (1 + t.depths[i]) ** 2 for i in open_])
        p = open_[rng.choice(len(open_), p=w / w.sum())]
        masked = ranked_masked(p)
        pos = int(masked[min(rng.geometric(0.4) - 1, len(masked) - 1)])
        add(p, pos, int(stale[pos]) if rng.random() < 0.9 else int(rng.integers(0, V - 1000)))
    tree = spotref.core_module("py").build_tree(root, STEP, t.parents, t.commits, MASK, V, 1, N, DEPTH)
    rows = list(range(ACCEPT + 1))  # the chain's nodes come first, each one step deeper: rows 0 .. ACCEPT
    decisions = {rows[k]: t.commits[k + 1] for k in range(ACCEPT)}
    free = int(np.flatnonzero(tree.states[rows[ACCEPT]] == MASK)[0])
    decisions[rows[ACCEPT]] = ((free, V - 2),)  # off-tree: the bonus commit
    return root, tuple(t.parents), tuple(t.commits), decisions


def build(core, draft):
    root, parents, commits, _ = draft
    return core.build_tree(root, STEP, parents, commits, MASK, V, 1, N, DEPTH)


PROG = "python benchmarks/bench_core.py"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog=PROG, description=__doc__.splitlines()[0])
    ap.add_argument("--trees", type=positive_int, default=16, help="random draft trees (default 16)")
    ap.add_argument("--samples", type=positive_int, default=31, help="timed samples, the median reported (default 31)")
    ap.add_argument("--seed", type=nonneg_int, default=0, help="the trees' random seed (default 0)")
    args = ap.parse_args(argv)
    return guarded(PROG, lambda: bench(args))


def compiled_core():
    """The compiled core; ``ImportError`` saying how to build it."""
    try:
        return spotref.core_module("c")
    except ImportError:
        raise ImportError("the compiled core is not built: python setup.py build_ext --inplace") from None


def bench(args) -> int:
    cores = {"py": spotref.core_module("py"), "c": compiled_core()}
    rng = np.random.default_rng(args.seed)
    drafts = [random_draft(rng) for _ in range(args.trees)]
    trees = {name: [build(m, d) for d in drafts] for name, m in cores.items()}
    for k, d in enumerate(drafts):  # the cores agree; walks go deep
        walks = [m.walk(trees[name][k], d[3].__getitem__) for name, m in cores.items()]
        assert walks[0] == walks[1] and len(walks[0][0]) == ACCEPT + 1, walks
        assert np.array_equal(trees["py"][k].states, trees["c"][k].states)

    reps = {"py": 2, "c": 100}  # batches of reps x trees per sample

    def build_only(c, r):
        for _ in range(r):
            for d in drafts:
                build(cores[c], d)

    def walk_only(c, r):
        for _ in range(r):
            for t, d in zip(trees[c], drafts):
                cores[c].walk(t, d[3].__getitem__)

    def build_walk(c, r):
        for _ in range(r):
            for d in drafts:
                cores[c].walk(build(cores[c], d), d[3].__getitem__)

    jobs = {"build_tree": build_only, "walk": walk_only, "build+walk": build_walk}
    times = {(job, c): [] for job in jobs for c in cores}
    for _ in range(args.samples):
        for job, fn in jobs.items():
            for c in cores:
                t = time.perf_counter()
                fn(c, reps[c])
                times[job, c].append((time.perf_counter() - t) / (reps[c] * len(drafts)) * 1e6)
    med = {key: statistics.median(v) for key, v in times.items()}

    rows = statistics.mean(len(t) for t in trees["py"])
    print(f"{datetime.date.today()}, python {platform.python_version()}, numpy {np.__version__}, {platform.machine()}")
    print(
        f"B={B} N={N} depth<={DEPTH}: {args.trees} trees, mean {rows:.1f} distinct states, "
        f"walks accept {ACCEPT}; median of {args.samples} samples, microseconds per tree"
    )
    print(f"{'core':6}" + "".join(f"{job:>14}" for job in jobs))
    for name in cores:
        print(f"{name:6}" + "".join(f"{med[job, name]:14.2f}" for job in jobs))
    print(f"{'c/py':6}" + "".join(f"{med[job, 'py'] / med[job, 'c']:13.1f}x" for job in jobs) + "  (speed-up)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
