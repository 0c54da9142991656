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
import os
import sys
import tempfile

import spotref

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


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, help="the JSON file to write")
    p.add_argument("--against", help="an earlier run's JSON file to compare with")
    p.add_argument("--max-new-tokens", type=int, default=64)
    args = p.parse_args()
    out = generations(args.max_new_tokens)
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with tempfile.NamedTemporaryFile("w", dir=os.path.dirname(os.path.abspath(args.out)), delete=False) as f:
        json.dump(out, f, indent=1)
    os.replace(f.name, args.out)
    if args.against is None:
        return 0
    with open(args.against) as f:
        before = json.load(f)
    differ = [k for k in out if before.get(k, {}).get("tokens") != out[k]["tokens"]]
    print(f"{len(out) - len(differ)} of {len(out)} generations identical to {args.against}")
    for k in differ:
        print(f"differs: {k}")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
