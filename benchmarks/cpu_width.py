"""CPU wall clock of gsm-b32: the verify pass row by row and at a fixed width, and exact vs
drafted decoding at small widths, all in one process (ratios from one run; docs/results-gsm.md).

    python benchmarks/cpu_width.py --out runs/cpu/width.json        # about 2 minutes, one thread
"""

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout

import torch  # noqa: E402

import spotref  # noqa: E402
from spotref.cli.argtypes import guarded, positive_int  # noqa: E402
from spotref.files import atomic_write_text, check_writable  # noqa: E402
from workbench.bench.timing import median_ms  # noqa: E402

PROG = "python benchmarks/cpu_width.py"


def parse(argv):
    p = argparse.ArgumentParser(prog=PROG, description=__doc__.splitlines()[0])
    p.add_argument("--out", default="runs/cpu/width.json", help="JSON results path")
    p.add_argument("--problems", type=positive_int, default=4, help="held-out problems (seed 0)")
    p.add_argument("--tokens", type=positive_int, default=256, help="new tokens per problem")
    return p.parse_args(argv)


def curve(model) -> dict:
    """{N: (rows alone ms, width N ms)} after a 128-token prefix."""
    cache = model.prefill(torch.randint(2, 1000, (128,), generator=torch.Generator().manual_seed(0)))
    out = {}
    for N in (1, 2, 4, 8, 16):
        s = torch.randint(2, 1000, (N, model.block_size), generator=torch.Generator().manual_seed(N))
        s[:, ::2] = model.mask_id
        out[N] = {
            "rows_ms": round(median_ms(lambda: model.denoise(cache, s), 21), 2),
            "width_ms": round(median_ms(lambda: model.denoise(cache, s, one_forward=True), 21), 2),  # a pass at width N
        }
        print(N, out[N], flush=True)
    return out


def main(argv=None) -> int:
    args = parse(argv)
    return guarded(PROG, lambda: measure(args))


def measure(args) -> int:
    """The curve and the decoders' runs, written to ``--out`` (checked first)."""
    out_path = check_writable(args.out)
    torch.set_num_threads(1)
    target = spotref.load_target("gsm-b32")
    model, stops = target.model, target.stop_ids
    problems = [target.encode(p) for p, _ in target.heldout(args.problems, seed=0)]
    res = {"curve": curve(model), "runs": {}}

    def run(key, ref=None, **kw):
        outs = [spotref.generate(model, p, args.tokens, stop_ids=stops, **kw) for p in problems]
        wall = sum(r.stats["wall_s"] for r in outs)
        tokens = [r.tokens for r in outs]
        res["runs"][key] = {
            "tokens": sum(map(len, tokens)),
            "passes": sum(r.passes for r in outs),
            "tok_s": round(sum(map(len, tokens)) / wall, 1),
            "identical": ref is None or tokens == ref,
        }
        print(key, res["runs"][key], flush=True)
        return tokens

    exact = run("exact rows")
    for W in (2, 4, 8):
        at_w = run(f"exact W={W}", exact, width=W)  # identical to rows: reported
        for d in ("confidence", "calibrated", "spot"):
            run(f"{d} N={W} rows", exact, drafter=d, budget=W)
            run(f"{d} N={W} W={W}", at_w, drafter=d, budget=W, width=W)
        if W == 4:
            run("calibrated auto W=4", at_w, drafter="calibrated", budget="auto", width=W)
    run("spot auto rows", exact, drafter="spot", budget="auto")
    base = res["runs"]["exact rows"]
    for r in res["runs"].values():
        r["speedup"] = round(r["tok_s"] / base["tok_s"], 3)
        r["fewer_passes"] = round(base["passes"] / r["passes"], 3)
    atomic_write_text(out_path, json.dumps(res, indent=1) + "\n")
    print(f"results: {out_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
