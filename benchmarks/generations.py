"""Generations to hold a refactor to: every bundled target x its decoders (exact; SPOT with its
own drafter, the universal drafter, confidence and calibrated; threshold decoding and SPOT-Sets;
a fixed verify width) x T in {0, 1}, and exact / SPOT in the float32 and float64 decision
precisions. Writes each generation's tokens and passes as JSON (an error's message where a
combination is refused); with ``--against FILE`` it compares them with an earlier run and prints
which differ (exit 1 if any differs). Only the public API is used, so a run before a redesign and
a run after it compare the same calls.

    python benchmarks/generations.py --out runs/generations.json
    python benchmarks/generations.py --out runs/after.json --against runs/generations.json
"""

import argparse
import itertools
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout

import spotref  # noqa: E402
from spotref.cli.argtypes import guarded, positive_int  # noqa: E402
from spotref.files import atomic_write_text, check_writable  # noqa: E402

PROG = "python benchmarks/generations.py"

DECODERS = {  # name -> generate's keywords
    "exact": {},
    "spot": {"drafter": "spot", "budget": 16},
    "universal": {"drafter": "universal", "budget": 16},
    "confidence": {"drafter": "confidence", "budget": 16},
    "calibrated": {"drafter": "calibrated", "budget": 8},
    "threshold": {"threshold": 0.9},
    "spot-sets": {"drafter": "spot", "budget": 16, "threshold": 0.9},
    "exact-width-16": {"width": 16},
    "spot-width-16": {"drafter": "spot", "budget": 16, "width": 16},
}
PRECISE = ("exact", "spot")  # also decided in float32 and float64
PROMPTS = {"gsm": "Tom has 3 apples and buys 5 more. How many apples does he have?", "stdlib": "def "}


def cases(targets):
    """(target, decoder, T, precision) in a fixed order."""
    for name, T in itertools.product(targets, (0.0, 1.0)):
        for decoder in DECODERS:
            yield name, decoder, T, None
        for decoder, precision in itertools.product(PRECISE, ("float32", "float64")):
            yield name, decoder, T, precision


def generations(targets, max_new_tokens: int) -> dict:
    out = {}
    for name, decoder, T, precision in cases(targets):
        if name not in _TARGETS:
            _TARGETS[name] = spotref.load_target(name)
        target = _TARGETS[name]
        ids = target.encode(PROMPTS[name.split("-")[0]])
        key = f"{name} {decoder} T={T:g} precision={precision or 'served'}"
        kw = DECODERS[decoder]
        try:
            r = spotref.generate(target, ids, max_new_tokens, temperature=T, seed=7, precision=precision, **kw)
            out[key] = {"tokens": [int(t) for t in r.tokens], "passes": int(r.passes)}
            print(f"{key}: {r.passes} passes", file=sys.stderr)
        except ValueError as e:
            out[key] = {"error": str(e)}
            print(f"{key}: refused: {e}", file=sys.stderr)
    return out


_TARGETS: dict = {}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, help="the JSON file to write")
    p.add_argument("--against", help="an earlier run's JSON file to compare with")
    p.add_argument("--max-new-tokens", type=positive_int, default=32, help="new tokens per generation (default 32)")
    p.add_argument("--targets", default=None, help="comma-separated bundled targets (default: every one)")
    args = p.parse_args(argv)
    return guarded(PROG, lambda: run(args))


def earlier(path: str) -> dict:
    """``--against``'s generations; ``ValueError`` naming the file when it cannot be read."""
    try:
        before = json.loads(Path(path).read_text())
    except (OSError, ValueError) as e:
        raise ValueError(f"--against {path!r}: cannot read an earlier run's JSON ({e})") from None
    if not isinstance(before, dict):
        raise ValueError(f"--against {path!r}: not a run's JSON object (got {type(before).__name__})")
    return before


def run(args) -> int:
    """The generations, written to ``--out``; with ``--against``, compared (both files checked first)."""
    check_writable(args.out)
    before = None if args.against is None else earlier(args.against)
    targets = spotref.list_targets() if args.targets is None else args.targets.split(",")
    out = generations(targets, args.max_new_tokens)
    atomic_write_text(args.out, json.dumps(out, indent=1))
    if before is None:
        return 0
    differ = [k for k in out if before.get(k) != out[k]]
    print(f"{len(out) - len(differ)} of {len(out)} generations identical to {args.against}")
    for k in differ:
        print(f"differs: {k}")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
