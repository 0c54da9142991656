"""``spotref bench`` (``python -m spotref.tools.bench``): every drafter side by side, in one process.

For every bundled target, T in {0, 1} and node budget N in {1, 4, 8, 16, 32, 64} (and
``auto``, the cost model's choice), every drafter decodes the same held-out prompts with the
same seed: ``confidence`` (training-free), ``calibrated`` (Spiffy-like static rank graph),
``spot`` (the trained order model), and two ceilings that read the true trajectory of the exact
run: ``oracle-order`` (the true next positions, stale coupled tokens) and ``oracle`` (the true
commits). Exact decoding runs first; every row's tokens are asserted identical to it.

Numbers per row: target passes per generated token, the reduction vs exact (all passes, and
denoise/verify passes only), both again on answer blocks alone (the blocks before the one holding
end-of-text, ``report.answer_blocks``: no number is carried by end-of-text fill), commits per
verify round, tokens/s and its ratio to exact measured in this run, and the bookkeeping share of
the wall time (drafter + tree + acceptance).

Token stability (``spotref.tools.stability``'s d = 0 rates) is measured inside the run, on the
same prompts, new tokens and seed, by recording exact decoding once more per target and T (about
one exact run's cost; ``--no-stability`` skips it): a stability report's own prompts and lengths
differ from the bench's, so its numbers would not be the x of these points. A second figure plots
each drafter's gain at N = 64 against it, across targets.

Writes a report (command, date, machine, the tables, the goals checked, the stability table) and
two plots (passes vs budget, ``results.png``; gain against stability, ``results-stability.png``
beside it; skipped, with a note, when matplotlib is not installed) into a new run directory
``runs/bench-TIME/`` (or ``--out``); only ``--update-shipped`` replaces the committed
``docs/results.md`` and its PNGs. ``--replot`` redraws both from a report's tables. Every file is
written atomically (``spotref.load.files``). ``--quick`` is a CI smoke test.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import torch

from spotref.drafters.spot import SpotDrafter
from spotref.load.files import atomic_write_text, check_writable, run_dir
from spotref.load.targets import DEFAULT_TARGET, TARGETS_DIR, list_targets
from spotref.tools import bench_sets, stability
from spotref.tools.argtypes import choice_list, int_list, nonneg_int, positive_int, real_list, seed_int, tool_main
from spotref.tools.bench_report import (
    Row,
    gain_path,
    gain_plot,
    plot,
    report,
    rows_from_report,
    sets_path,
    stability_from_report,
)
from spotref.tools.bench_run import (  # noqa: F401  (answer_blocks, gen: read by the tests)
    Setup,
    answer_blocks,
    gen,
    make_drafter,
    metrics,
    random_setup,
    run_auto,
    run_drafter,
    run_exact,
    target_setup,
)
from spotref.tools.report import progress
from spotref.tools.trajectories import record

DRAFTERS = ("confidence", "calibrated", "spot", "oracle-order", "oracle")
EXTRA_DRAFTERS = ("spot-root",)  # on request (--drafters): SPOT with one order-model call per round


SHIPPED_REPORT, SHIPPED_PLOT = "docs/results.md", "docs/results.png"
FULL = dict(
    temperatures=[0.0, 1.0], budgets=[1, 4, 8, 16, 32, 64], prompts=8, new_tokens=128, thresholds=[0.9, 0.7, 0.5]
)
QUICK = dict(temperatures=[0.0, 1.0], budgets=[1, 4], prompts=2, new_tokens=24, thresholds=[0.9])
RULES = ("one-position", "threshold")
PRECISION_NAMES = ("float64", "float32", "bfloat16", "float16")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--targets", default="all", help="comma-separated bundled targets (default: all; 'random': a random tiny model)"
    )
    p.add_argument("--temperatures", type=real_list(0.0), default=None, help="comma list of temperatures (default 0,1)")
    p.add_argument(
        "--budgets",
        type=int_list(1),
        default=None,
        help="comma list of node budgets N (default 1,4,8,16,32,64; with --quick 1,4)",
    )
    p.add_argument("--no-auto", action="store_true", help="skip budget='auto'")
    p.add_argument(
        "--rules",
        type=choice_list(RULES),
        default=list(RULES),
        help="decision rules to bench: one-position (the drafters' table), threshold (SPOT-Sets); default both",
    )
    p.add_argument(
        "--thresholds",
        type=real_list(0.0),
        default=None,
        help="comma list of thresholds tau for the SPOT-Sets rows (default 0.9,0.7,0.5; with --quick 0.9)",
    )
    p.add_argument(
        "--drafters",
        type=choice_list(DRAFTERS + EXTRA_DRAFTERS),
        default=list(DRAFTERS),
        help=f"comma list of drafters (default: all of {','.join(DRAFTERS)}; also "
        f"{','.join(EXTRA_DRAFTERS)}: SPOT with one order-model call per round)",
    )
    p.add_argument(
        "--prompts", type=positive_int, default=None, help="held-out prompts per target (default 8; with --quick 2)"
    )
    p.add_argument(
        "--prompt-tokens",
        type=positive_int,
        default=64,
        help="tokens per prompt: a text to continue (code) is cut to this; a question or chat prompt is taken whole",
    )
    p.add_argument(
        "--new-tokens", type=positive_int, default=None, help="new tokens per prompt (default 128; with --quick 24)"
    )
    add_run_arguments(p)


def add_run_arguments(p: argparse.ArgumentParser) -> None:
    """The run's settings and where its files come from and go."""
    p.add_argument("--depth", type=nonneg_int, default=32, help="depth cap D (with --quick at most 4)")
    p.add_argument("--seed", type=seed_int, default=0, help="noise seed, in [0, 2**64 - 1]")
    p.add_argument("--no-transfer", action="store_true", help="skip the transfer table")
    p.add_argument(
        "--no-stability",
        action="store_true",
        help="skip the token-stability measurement and the gain-against-stability figure",
    )
    p.add_argument(
        "--quick",
        action="store_true",
        help="CI smoke test: a tiny grid (random model if no target); explicit options win",
    )
    p.add_argument("--targets-dir", default=None, help="load targets from here (default: bundled)")
    p.add_argument("--drafters-dir", default=None, help="drafter checkpoints from here (default: bundled)")
    p.add_argument(
        "--precision",
        choices=PRECISION_NAMES,
        default=None,
        help="decide every run in this precision (default: each target's serving "
        "precision, docs/spec.md 2.1); drafters are matched to the target first",
    )
    p.add_argument(
        "--out", default=None, help="report path (default: runs/bench-TIME/results.md; missing directories are created)"
    )
    p.add_argument("--plot", default=None, help="PNG, needs matplotlib (default: beside --out, as .png)")
    p.add_argument(
        "--update-shipped",
        action="store_true",
        help=f"write the committed {SHIPPED_REPORT}, {SHIPPED_PLOT} and the gain figure beside it "
        "(not with --out or --plot)",
    )
    p.add_argument(
        "--replot",
        action="store_true",
        help="only redraw --plot and the gain figure beside it from the tables in --out "
        "(or the shipped report with --update-shipped)",
    )
    p.add_argument(
        "--with",
        dest="also",
        nargs="+",
        default=[],
        metavar="REPORT",
        help="with --replot: draw these reports' tables too (other targets' runs), "
        "so the gain figure spans every target",
    )


def row(setup: Setup, T: float, name: str, N, m: dict, ex: dict) -> Row:
    per = lambda a, b: a / max(b, 1)
    return Row(
        setup.name,
        f"{T:g}",
        name,
        N,
        per(m["passes"], m["tokens"]),
        per(ex["passes"], m["passes"]),
        per(ex["denoise"], m["denoise"]),
        per(m["answer_passes"], m["answer_tokens"]),
        per(ex["answer_passes"], m["answer_passes"]),
        m["commits"],
        m["tokens"] / max(m["wall"], 1e-9),
        ex["wall"] / max(m["wall"], 1e-9),
        f"{100 * m['book']:.0f}%",
    )


def bench_target(setup: Setup, args, rows: list, bar) -> None:
    for T in args.T:
        ex = metrics(run_exact(setup, T, args))
        rows.append(row(setup, T, "exact", "-", ex, ex))
        for name in args.drafter_names:
            if make_drafter(name, setup, setup.exact[T][0]) is None:
                continue
            for N in args.N:
                rows.append(row(setup, T, name, N, metrics(run_drafter(setup, T, name, N, args)), ex))
                bar.update(1)
            if args.auto and name in ("confidence", "calibrated", "spot", "spot-root"):
                rows.append(auto_row(setup, T, name, args, ex))
                bar.update(1)


def auto_row(setup: Setup, T: float, name: str, args, ex: dict) -> Row:
    N, m, wall = run_auto(setup, T, name, args)
    return row(setup, T, name, f"auto={N}", m, {**ex, "wall": wall})


def stability_rows(setup: Setup, args) -> list:
    """Token stability on the bench's own prompts, new tokens and seed, per T (the gain figure's
    x axis): exact decoding recorded once more (``trajectories.record``), read by
    ``spotref.tools.stability.rates`` at d = 0 (top-1, top-2, top-1 without the commits of a stop id)."""
    out, stops = [], list(setup.stops or ())
    for T in args.T:
        ds = record(
            setup.model, setup.prompts, args.new_tokens, T, (args.seed,), setup.stops, desc=f"stability T={T:g}"
        )
        top1, top2, n = stability.rates(ds, 0)
        text = stability.rates(ds, 0, where=lambda o: ~np.isin(o["tok"], stops))[0]
        out.append([setup.name, f"{T:g}", n, top1, top2, text])
    return out


def transfer_rows(setups: list, args, N: int = 16) -> list:
    """Each target's SPOT drafter on every target (block-size mismatch allowed: features are
    block-relative), T = 0: fewer passes than exact."""
    out = []
    for src in setups:
        if src.spot is None:
            continue
        d = SpotDrafter(src.spot.model, src.spot.header, strict=False)
        cells = []
        for dst in setups:
            ex = metrics(dst.exact[0.0])
            m = metrics(run_drafter(dst, 0.0, f"spot[{src.name}]", N, args, drafter=d))
            cells.append(ex["passes"] / max(m["passes"], 1))
        out.append([src.name] + cells)
    return out


# --- goals, report, plot ----------------------------------------------------------------------


def setups_for(args) -> list:
    if args.targets == "random":
        return [lambda: random_setup(args)]
    for option, d in (("--targets-dir", args.targets_dir), ("--drafters-dir", args.drafters_dir)):
        if d is not None and not Path(d).is_dir():
            raise ValueError(f"{option} {d!r} is not a directory")
    known = list_targets(args.targets_dir or TARGETS_DIR)
    names = known if args.targets == "all" else [t for t in args.targets.split(",") if t]
    unknown = [t for t in names if t not in known]
    if unknown:
        raise ValueError(
            f"--targets: unknown target(s) {', '.join(unknown)}; known: {', '.join(known) or 'none'}, all, random"
        )
    if args.quick and args.targets == "all":
        names = names[:1]
    if not names:
        return [lambda: random_setup(args)]
    names = sorted(names, key=lambda n: n != DEFAULT_TARGET)  # the default target first
    return [lambda n=n: target_setup(n, args) for n in names]  # loaded when its turn comes


def configure(args) -> None:
    """The grid: --quick's small one where an option was left out, the full one elsewhere."""
    for name, value in (QUICK if args.quick else FULL).items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    if args.quick:
        args.depth = min(args.depth, 4)
    args.T, args.N = list(args.temperatures), list(args.budgets)
    args.temperatures = ",".join(f"{t:g}" for t in args.T)  # as the report prints them
    args.budgets = ",".join(map(str, args.N))
    bad = [t for t in args.thresholds if not 0.0 < t < 1.0]
    if bad:
        raise ValueError(f"--thresholds: each tau must lie in (0, 1), got {', '.join(f'{t:g}' for t in bad)}")
    args.taus = list(args.thresholds) if "threshold" in args.rules else []
    args.drafter_names = list(args.drafters) if "one-position" in args.rules else []
    args.auto = not args.no_auto
    args.prompts_note = f"{args.prompts} prompts x {args.new_tokens} new tokens"


def outputs(args) -> None:
    """Where the report and the plot go: a new run directory unless told (``--update-shipped``)."""
    if args.update_shipped:
        if args.out or args.plot:
            raise ValueError("--update-shipped writes the shipped report: leave out --out and --plot")
        args.out, args.plot = SHIPPED_REPORT, SHIPPED_PLOT
    elif args.also and not args.replot:
        raise ValueError("--with draws other reports' tables: only with --replot")
    elif args.replot and not args.out:
        raise ValueError("--replot needs --out (the report to redraw from), or --update-shipped")
    args.out = args.out or str(run_dir("bench") / "results.md")
    args.plot = args.plot or str(Path(args.out).with_suffix(".png"))
    for path in (args.out, args.plot, gain_path(args.plot)):  # refused now, not after the runs
        check_writable(path)


def run(args) -> int:
    if args.replot:
        outputs(args)
        sources = [("--out", args.out)] + [("--with", a) for a in args.also]
        texts = [read_report(path, option) for option, path in sources]
        rows = [r for (option, path), t in zip(sources, texts) for r in rows_from_report(t, f"{option} {path!r}")]
        stab = {k: v for t in texts for k, v in stability_from_report(t).items()}
        done = [
            plot(rows, args.plot),
            gain_plot(rows, stab, gain_path(args.plot)),
            bench_sets.plot([r for t in texts for r in bench_sets.rows_from_report(t)], sets_path(args.plot)),
        ]
        print("\n".join(f"wrote {d}" for d in done if d) or "no plot: matplotlib is not installed")
        return 0
    torch.set_num_threads(1)
    t0 = time.time()
    configure(args)
    makers, setups, rows, stab, set_rows = setups_for(args), [], [], [], []
    outputs(args)  # the run directory, once the input is good
    total = len(makers) * (len(args.T) * len(args.drafter_names) * (len(args.N) + 1) + bench_sets.configs(args))
    bar = progress(range(total), "bench")
    bar = bar if hasattr(bar, "update") else type("NoBar", (), {"update": lambda self, n: None})()
    print(f"bench: writing {args.out}", file=sys.stderr)
    for i, make in enumerate(makers):
        setups.append(make())
        if args.drafter_names:
            bench_target(setups[-1], args, rows, bar)
        bench_sets.bench_sets(setups[-1], args, set_rows, bar)
        stab += [] if args.no_stability or not rows else stability_rows(setups[-1], args)
        if i + 1 < len(makers):  # partial report: a long run can be cut
            write(args, rows, [], setups, time.time() - t0, stab, set_rows, partial=True)
    transfer = transfer_rows(setups, args) if len(setups) > 1 and rows and not args.no_transfer else []
    print(write(args, rows, transfer, setups, time.time() - t0, stab, set_rows))
    return 0


def read_report(path: str, option: str) -> str:
    """A written report's text; ``ValueError`` naming ``option`` when it cannot be read."""
    try:
        return Path(path).read_text()
    except OSError as e:
        raise ValueError(f"{option} {path!r}: cannot read the report: {e.strerror}") from None


def write(args, rows, transfer, setups, seconds: float, stab: list, set_rows=(), partial: bool = False) -> str:
    gain = gain_plot(rows, {(r[0], r[1]): r[3] for r in stab}, gain_path(args.plot))
    sets_png = bench_sets.plot(set_rows, sets_path(args.plot))
    text = report(
        args,
        rows,
        transfer,
        setups,
        plot(rows, args.plot),
        seconds,
        stab,
        gain,
        bench_sets.section(list(set_rows), setups, DEFAULT_TARGET, sets_png),
    )
    if partial:
        text = text.replace("\n", "\n\n**Partial: the run was still going.**\n", 1)
    atomic_write_text(args.out, text)
    return text


def main(argv=None) -> int:
    return tool_main("python -m spotref.tools.bench", __doc__, add_arguments, run, argv)


if __name__ == "__main__":
    sys.exit(main())
