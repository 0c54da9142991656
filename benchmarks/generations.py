"""48 generations to hold a refactor to: 4 decoders (exact, SPOT, confidence, SPOT-Sets) x 2 bundled
targets x T in {0, 1} x 3 decision precisions (the served one, float32, float64). Writes each
generation's tokens and passes as JSON; with ``--against FILE`` it compares them with an earlier
run and prints which differ (exit 1 if any differs).

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

TARGETS = ("gsm-b32", "stdlib-b32")
DECODERS = {  # name -> generate's keywords
    "exact": {},
    "spot": {"drafter": "spot", "budget": 16},
    "confidence": {"drafter": "confidence", "budget": 16},
    "spot-sets": {"drafter": "spot", "budget": 16, "threshold": 0.9},
}
PRECISIONS = (None, "float32", "float64")  # None: the target's serving precision
PROMPTS = {"gsm-b32": "Tom has 3 apples and buys 5 more. How many apples does he have?", "stdlib-b32": "def "}


def generations(max_new_tokens: int) -> dict:
    out = {}
    for name, (decoder, kw), T, precision in itertools.product(TARGETS, DECODERS.items(), (0.0, 1.0), PRECISIONS):
        target = spotref.load_target(name)
        ids = target.encode(PROMPTS[name])
        r = spotref.generate(target, ids, max_new_tokens, temperature=T, seed=7, precision=precision, **kw)
        key = f"{name} {decoder} T={T:g} precision={precision or 'served'}"
        out[key] = {"tokens": [int(t) for t in r.tokens], "passes": int(r.passes)}
        print(f"{key}: {r.passes} passes", file=sys.stderr)
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, help="the JSON file to write")
    p.add_argument("--against", help="an earlier run's JSON file to compare with")
    p.add_argument("--max-new-tokens", type=positive_int, default=64, help="new tokens per generation (default 64)")
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
    out = generations(args.max_new_tokens)
    atomic_write_text(args.out, json.dumps(out, indent=1))
    if before is None:
        return 0
    differ = [k for k in out if before.get(k, {}).get("tokens") != out[k]["tokens"]]
    print(f"{len(out) - len(differ)} of {len(out)} generations identical to {args.against}")
    for k in differ:
        print(f"differs: {k}")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
