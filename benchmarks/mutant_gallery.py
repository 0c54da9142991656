"""The mutant gallery against the conformance suite's default run: for each lossy decoder of
tests/support/mutants.py, the cases and the time until its first failing case (no shrinking),
for each of a few seeds, and the median; then the correct decoders over the same seeds (any
failure there is a false alarm). Times are CPU seconds of this process (one thread) and wall
seconds; a busy machine stretches the second, not the first.

    python benchmarks/mutant_gallery.py                    # seeds 1 2 3, every mutant
    python benchmarks/mutant_gallery.py --seeds 1,2,3,4,5 --correct-only
    python benchmarks/mutant_gallery.py --only "32-bit seed"
"""

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests" / "support")]  # run from a checkout

import torch  # noqa: E402
from hypothesis import Phase  # noqa: E402
from mutants import BATCH_LOSSY, CANDIDATES, CORRECT, LOSSY  # noqa: E402

from spotref.cli.argtypes import guarded, int_list, positive_int  # noqa: E402
from spotref.conformance import MAX_EXAMPLES, run_conformance  # noqa: E402

PROG = "python benchmarks/mutant_gallery.py"


def counted(generate_fn, calls: list):
    def fn(*args, **kw):
        calls.append(1)
        return generate_fn(*args, **kw)

    return fn


def catch(generate_fn, seed: int, batch: bool, max_examples: int) -> tuple:
    """(caught, cases run, CPU s, wall s) of one default run with ``seed``, stopped at the first failure."""
    calls, cpu, wall = [], time.process_time(), time.perf_counter()
    try:
        run_conformance(
            counted(generate_fn, calls),
            max_examples=max_examples,
            seed=seed,
            batch_invariance=batch,
            phases=[Phase.generate],
        )
        caught = False
    except AssertionError:
        caught = True
    except Exception as e:  # a crash is not a verdict: named, and counted as missed
        print(f"  seed {seed}: {type(e).__name__}: {str(e)[:200]}", flush=True)
        caught = False
    return caught, len(calls) - 1, time.process_time() - cpu, time.perf_counter() - wall  # less the probe


def row(name: str, runs: list) -> str:
    caught = sum(r[0] for r in runs)
    med = [statistics.median(r[i] for r in runs) for i in (1, 2, 3)]
    return f"| {name} | {caught}/{len(runs)} | {med[0]:.0f} | {med[1]:.1f} | {med[2]:.1f} |"


def shard(text: str) -> tuple[int, int]:
    """``I/N`` with 1 <= I <= N."""
    i, _, n = text.partition("/")
    if not (i.isdigit() and n.isdigit() and 1 <= int(i) <= int(n)):
        raise argparse.ArgumentTypeError(f"must be I/N with 1 <= I <= N, got {text!r}")
    return int(i), int(n)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog=PROG, description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int_list(0), default=[1, 2, 3], help="comma list of seeds (default 1,2,3)")
    ap.add_argument("--only", nargs="+", help="these mutants only (names as in tests/support/mutants.py)")
    ap.add_argument("--correct-only", action="store_true", help="the correct decoders only")
    ap.add_argument("--max-examples", type=positive_int, default=MAX_EXAMPLES)
    ap.add_argument("--shard", type=shard, default=(1, 1), help="I/N: every N-th decoder from the I-th (parallel runs)")
    args = ap.parse_args(argv)
    unknown = sorted(set(args.only or ()) - set(LOSSY) - set(BATCH_LOSSY) - set(CANDIDATES))
    if unknown:
        ap.error(f"--only: no mutant named {', '.join(map(repr, unknown))} (see tests/support/mutants.py)")
    return guarded(PROG, lambda: run(args))


def run(args) -> int:
    torch.set_num_threads(1)
    gallery = {} if args.correct_only else {n: (f, False) for n, f in LOSSY.items()}
    if not args.correct_only:
        gallery.update({n: (f, True) for n, f in BATCH_LOSSY.items()})
    if args.only:
        gallery = {n: gallery.get(n, (CANDIDATES.get(n), False)) for n in args.only}
    i, n = args.shard
    gallery = dict(list(gallery.items())[i - 1 :: n])
    correct = dict(list(CORRECT.items())[i - 1 :: n])
    print("| lossy decoder | caught | cases to catch (median) | CPU s (median) | wall s (median) |")
    print("|---|---|---|---|---|")
    missed = []
    for name, (fn, batch) in gallery.items():
        runs = [catch(fn, s, batch, args.max_examples) for s in args.seeds]
        print(row(name, runs), flush=True)
        missed += [name] if not all(r[0] for r in runs) else []
    alarms = []
    if not args.only:
        print("\n| correct decoder | flagged | cases | CPU s (median) | wall s (median) |\n|---|---|---|---|---|")
        for name, fn in correct.items():
            runs = [catch(fn, s, False, args.max_examples) for s in args.seeds]
            print(row(name, runs), flush=True)
            alarms += [name] if any(r[0] for r in runs) else []
    print(f"\nmissed: {missed or 'none'}; false alarms: {alarms or 'none'}")
    return 1 if missed or alarms else 0


if __name__ == "__main__":
    sys.exit(main())
