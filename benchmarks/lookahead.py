"""Lookahead: fewer passes when a block's last verify pass carries the next block's first pass.

For each target, held-out problem, T and budget N, in one run: exact decoding without and with
lookahead (with it SDAR stores as with the fused store: exact decoding drafts nothing, so it
carries nothing), and each drafter (``--drafters``: SPOT, the calibrated rank graph, the
oracle order) without and with lookahead (every output asserted identical to exact decoding).
Per drafter the table gives fewer passes than exact decoding as the results pages count them
(all passes, SDAR's store its own pass); with lookahead ("+la") against the same exact
decoding, and against exact decoding under lookahead (the store folded into the next block's
first pass on both sides: the same accounting), on all blocks and on answer blocks; fewer
passes than calibrated, both under lookahead; the blocks whose first pass was carried (of
those after a block); the drafter's time per round (ms, this CPU, one thread). Writes
``lookahead.md`` to a run directory (``--out``).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout
sys.path.insert(0, str(Path(__file__).resolve().parent))  # order_gap
import torch  # noqa: E402
from order_gap import bundled  # noqa: E402

import spotref  # noqa: E402
from spotref.cli.argtypes import (  # noqa: E402
    choice_list,
    guarded,
    int_list,
    list_of,
    positive_int,
    temperature_arg,
)
from spotref.cli.report import answer_blocks, progress, table  # noqa: E402
from spotref.conformance import first_divergence, oracle_drafter  # noqa: E402
from spotref.files import atomic_write_text, run_dir  # noqa: E402
from spotref.names import drafter_for  # noqa: E402
from spotref.record.prompts import prompts_for  # noqa: E402

PROG = "python benchmarks/lookahead.py"
DRAFTERS = ("spot", "calibrated", "oracle-order")  # the target's own two; the order ceiling (true positions,
# stale coupled tokens)


def totals(results: list) -> dict:
    """passes, answer-block passes, carried blocks, blocks after a block, drafter s, rounds."""
    answer = [answer_blocks(r) for r in results]
    return dict(
        passes=sum(r.passes for r in results),
        answer=sum(p for _, p in answer),
        carried=sum(r.stats["carried"] for r in results),
        later=sum(len(r.stats["blocks"]) - 1 for r in results),
        draft_s=sum(r.stats["draft_s"] for r in results),
        rounds=sum(r.stats["rounds"] for r in results),
    )


def drafter(name: str, own: dict, exact):
    """The drafter ``name`` of DRAFTERS for one prompt: the target's own (``own``, loaded once), or
    the oracle order, which reads the prompt's exact decode."""
    return oracle_drafter(exact, stale_tokens=True) if name == "oracle-order" else own[name]


def run_target(name: str, args, write=lambda rows: None) -> list:
    """Table rows of one target: per (T, N, drafter); ``write(rows)`` after each (T, N)."""
    t = spotref.load_target(name)
    prompts = prompts_for(t, args.prompts, "test", 64)
    family = getattr(t.model, "family", "sdar")
    own = {d: drafter_for(t.model, d) for d in args.drafters if d != "oracle-order"}
    rows = []
    for T, N in progress([(T, N) for T in args.temperatures for N in args.budgets], name):
        got = {"exact": [], "exact+la": [], **{d + la: [] for d in args.drafters for la in ("", "+la")}}
        for p in prompts:
            gen = lambda **kw: spotref.generate(t.model, p, args.new_tokens, temperature=T, stop_ids=t.stop_ids, **kw)
            exact = gen()
            got["exact"].append(exact), got["exact+la"].append(gen(lookahead=True))
            for d in args.drafters:
                for la in ("", "+la"):
                    res = gen(drafter=drafter(d, own, exact), budget=N, depth=args.depth, lookahead=bool(la))
                    where = first_divergence(exact, res.tokens, t.model.block_size, len(p), family)
                    if where is not None:
                        raise SystemExit(f"{PROG}: {name}, T={T:g}, {d}{la}, N={N}: OUTPUT DIFFERS at {where}")
                    got[d + la].append(res)
        m = {k: totals(v) for k, v in got.items()}
        x = lambda a, b, key="passes": f"{m[a][key] / max(m[b][key], 1):.2f}x"
        for d in args.drafters:
            la = d + "+la"
            over = (
                [x("calibrated+la", la), x("calibrated+la", la, "answer")]
                if "calibrated" in args.drafters
                else ["-"] * 2
            )
            rows.append([name, f"{T:g}", N, d, x("exact", d), x("exact", la), x("exact+la", la),
                         x("exact+la", la, "answer"), *over, f"{m[la]['carried']}/{m[la]['later']}",
                         f"{1000 * m[la]['draft_s'] / max(m[la]['rounds'], 1):.1f}"])  # fmt: skip
        write(rows)
    return rows


HEADER = ["target", "T", "N", "drafter", "vs exact", "+la vs exact", "+la vs exact+la", "answer blocks",
          "vs calibrated (both +la)", "answer blocks", "first passes carried", "drafter ms/round"]  # fmt: skip


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog=PROG, description=__doc__.splitlines()[0])
    ap.add_argument("targets", help="comma list of bundled targets, each with its shipped drafters")
    ap.add_argument("--prompts", type=positive_int, default=16, help="held-out problems per target")
    ap.add_argument("--new-tokens", type=positive_int, default=128)
    ap.add_argument("--budgets", type=int_list(1), default=[4, 8, 16, 32, 64], help="comma list of N")
    ap.add_argument("--temperatures", type=list_of(temperature_arg, "temperatures"), default=[0.0, 1.0])
    ap.add_argument("--depth", type=positive_int, default=32, help="depth cap D")
    ap.add_argument(
        "--drafters",
        type=choice_list(DRAFTERS),
        default=["spot", "calibrated"],
        help=f"comma list of {', '.join(DRAFTERS)} (default spot,calibrated)",
    )
    ap.add_argument("--out", default=None, help="run directory (default: runs/lookahead-TIME)")
    args = ap.parse_args(argv)
    return guarded(PROG, lambda: run(args, bundled(ap, args.targets)))


def run(args, names) -> int:
    torch.set_num_threads(1)
    out = Path(args.out) if args.out else run_dir("lookahead")
    out.mkdir(parents=True, exist_ok=True)
    done = []  # every finished target's rows

    def write(rows: list) -> None:  # after each (T, N): an interrupted run keeps what it measured
        atomic_write_text(out / "lookahead.md", f"`{PROG} {' '.join(sys.argv[1:])}`\n\n{table(HEADER, done + rows)}\n")

    for name in names:
        done += run_target(name, args, write)
    print(table(HEADER, done))
    print(f"written: {out / 'lookahead.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
