"""``python -m workbench bench`` (``python -m workbench.bench.bench``): every drafter side by side, in one process.

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

Token stability (``workbench.bench.stability``'s d = 0 rates) is measured inside the run, on the
same prompts, new tokens and seed, by recording exact decoding once more per target and T (about
one exact run's cost; ``--no-stability`` skips it): a stability report's own prompts and lengths
differ from the bench's, so its numbers would not be the x of these points. A second figure plots
each drafter's gain at N = 64 against it, across targets.

Writes a report (command, date, machine, the tables, the goals checked, the stability table) and
two plots (passes vs budget, ``results.png``; gain against stability, ``results-stability.png``
beside it; skipped, with a note, when matplotlib is not installed) into a new run directory
``runs/bench-TIME/`` (or ``--out``); only ``--update-shipped`` replaces the committed
``docs/results.md`` and its PNGs. ``--replot`` redraws both from a report's tables. Every file is
written atomically (``spotref.files``). ``--quick`` is a CI smoke test.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import NamedTuple

import numpy as np
import torch

from spotref.cli.argtypes import tool_main
from spotref.cli.report import progress
from spotref.drafters.spot import SpotDrafter
from spotref.files import atomic_write_text, check_writable, run_dir
from spotref.load.targets import DEFAULT_TARGET, TARGETS_DIR, list_targets
from spotref.record.trajectories import record
from workbench.bench import bench_sets, stability
from workbench.bench.bench_options import SHIPPED_PLOT, SHIPPED_REPORT, BenchOptions, add_arguments
from workbench.bench.bench_report import (
    Row,
    gain_path,
    gain_plot,
    plot,
    report,
    rows_from_report,
    sets_path,
    stability_from_report,
)
from workbench.bench.bench_run import (  # noqa: F401  (answer_blocks, gen: read by the tests)
    Setup,
    answer_blocks,
    gen,
    make_drafter,
    metrics,
    random_setup,
    run_auto,
    run_drafter,
    run_exact,
    table_row,
    target_setup,
)


def row(setup: Setup, T: float, name: str, N, m: dict, ex: dict) -> Row:
    return table_row(Row, m, ex, target=setup.name, T=f"{T:g}", drafter=name, N=N)


def bench_target(setup: Setup, options: BenchOptions, rows: list, bar) -> None:
    g = options.grid
    for T in g.temperatures:
        ex = metrics(run_exact(setup, T, options))
        rows.append(row(setup, T, "exact", "-", ex, ex))
        for name in g.drafters:
            if make_drafter(name, setup, setup.exact[T][0]) is None:
                continue
            for N in g.budgets:
                rows.append(row(setup, T, name, N, metrics(run_drafter(setup, T, name, N, options)), ex))
                bar.update(1)
            if g.auto and name in ("confidence", "calibrated", "spot", "spot-root"):
                rows.append(auto_row(setup, T, name, options, ex))
                bar.update(1)


def auto_row(setup: Setup, T: float, name: str, options: BenchOptions, ex: dict) -> Row:
    N, m, wall = run_auto(setup, T, name, options)
    return row(setup, T, name, f"auto={N}", m, {**ex, "wall": wall})


def stability_rows(setup: Setup, options: BenchOptions) -> list:
    """Token stability on the bench's own prompts, new tokens and seed, per T (the gain figure's
    x axis): exact decoding recorded once more (``trajectories.record``), read by
    ``workbench.bench.stability.rates`` at d = 0 (top-1, top-2, top-1 without the commits of a stop id)."""
    out, stops, g = [], list(setup.stops or ()), options.grid
    for T in g.temperatures:
        ds = record(
            setup.model, setup.prompts, g.new_tokens, T, (options.seed,), setup.stops, desc=f"stability T={T:g}"
        )
        top1, top2, n = stability.rates(ds, 0)
        text = stability.rates(ds, 0, where=lambda o: ~np.isin(o["tok"], stops))[0]
        out.append([setup.name, f"{T:g}", n, top1, top2, text])
    return out


def transfer_rows(setups: list, options: BenchOptions, N: int = 16) -> list:
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
            m = metrics(run_drafter(dst, 0.0, f"spot[{src.name}]", N, options, drafter=d))
            cells.append(ex["passes"] / max(m["passes"], 1))
        out.append([src.name] + cells)
    return out


# --- goals, report, plot ----------------------------------------------------------------------


def setups_for(options: BenchOptions) -> list:
    o = options
    if o.targets == "random":
        return [lambda: random_setup(o)]
    for option, d in (("--targets-dir", o.targets_dir), ("--drafters-dir", o.drafters_dir)):
        if d is not None and not Path(d).is_dir():
            raise ValueError(f"{option} {d!r} is not a directory")
    known = list_targets(o.targets_dir or TARGETS_DIR)
    names = known if o.targets == "all" else [t for t in o.targets.split(",") if t]
    unknown = [t for t in names if t not in known]
    if unknown:
        raise ValueError(
            f"--targets: unknown target(s) {', '.join(unknown)}; known: {', '.join(known) or 'none'}, all, random"
        )
    if o.quick and o.targets == "all":
        names = names[:1]
    if not names:
        return [lambda: random_setup(o)]
    names = sorted(names, key=lambda n: n != DEFAULT_TARGET)  # the default target first
    return [lambda n=n: target_setup(n, o) for n in names]  # loaded when its turn comes


class Paths(NamedTuple):
    """Where a run's report and its plot go (``outputs``); the other figures go beside the plot."""

    report: str
    plot: str


def outputs(options: BenchOptions) -> Paths:
    """Where the report and the plot go: a new run directory unless told (``--update-shipped``)."""
    o = options
    if o.update_shipped:
        if o.out or o.plot:
            raise ValueError("--update-shipped writes the shipped report: leave out --out and --plot")
        return writable(Paths(SHIPPED_REPORT, SHIPPED_PLOT))
    if o.also and not o.replot:
        raise ValueError("--with draws other reports' tables: only with --replot")
    if o.replot and not o.out:
        raise ValueError("--replot needs --out (the report to redraw from), or --update-shipped")
    out = o.out or str(run_dir("bench") / "results.md")
    return writable(Paths(out, o.plot or str(Path(out).with_suffix(".png"))))


def writable(paths: Paths) -> Paths:
    """``paths``, each file (and the gain figure beside the plot) checked writable: refused now,
    not after the runs."""
    for path in (paths.report, paths.plot, gain_path(paths.plot)):
        check_writable(path)
    return paths


def run(args: argparse.Namespace) -> int:
    options = BenchOptions.from_namespace(args)
    if options.replot:
        return replot(options)
    torch.set_num_threads(1)
    t0, g = time.time(), options.grid
    makers, setups, rows, stab, set_rows = setups_for(options), [], [], [], []
    paths = outputs(options)  # the run directory, once the input is good
    total = len(makers) * (len(g.temperatures) * len(g.drafters) * (len(g.budgets) + 1) + bench_sets.configs(options))
    bar = progress(range(total), "bench")
    bar = bar if hasattr(bar, "update") else type("NoBar", (), {"update": lambda self, n: None})()
    print(f"bench: writing {paths.report}", file=sys.stderr)
    for i, make in enumerate(makers):
        setups.append(make())
        if g.drafters:
            bench_target(setups[-1], options, rows, bar)
        bench_sets.bench_sets(setups[-1], options, set_rows, bar)
        stab += [] if options.no_stability or not rows else stability_rows(setups[-1], options)
        if i + 1 < len(makers):  # partial report: a long run can be cut
            write(options, paths, rows, [], setups, time.time() - t0, stab, set_rows, partial=True)
    transfer = transfer_rows(setups, options) if len(setups) > 1 and rows and not options.no_transfer else []
    print(write(options, paths, rows, transfer, setups, time.time() - t0, stab, set_rows))
    return 0


def replot(options: BenchOptions) -> int:
    """``--replot``: redraw the figures from the tables of --out (and of the --with reports)."""
    paths = outputs(options)
    sources = [("--out", paths.report)] + [("--with", a) for a in options.also]
    texts = [read_report(path, option) for option, path in sources]
    rows = [r for (option, path), t in zip(sources, texts) for r in rows_from_report(t, f"{option} {path!r}")]
    stab = {k: v for t in texts for k, v in stability_from_report(t).items()}
    done = [
        plot(rows, paths.plot),
        gain_plot(rows, stab, gain_path(paths.plot)),
        bench_sets.plot([r for t in texts for r in bench_sets.rows_from_report(t)], sets_path(paths.plot)),
    ]
    print("\n".join(f"wrote {d}" for d in done if d) or "no plot: matplotlib is not installed")
    return 0


def read_report(path: str, option: str) -> str:
    """A written report's text; ``ValueError`` naming ``option`` when it cannot be read."""
    try:
        return Path(path).read_text()
    except OSError as e:
        raise ValueError(f"{option} {path!r}: cannot read the report: {e.strerror}") from None


def write(
    options: BenchOptions,
    paths: Paths,
    rows,
    transfer,
    setups,
    seconds: float,
    stab: list,
    set_rows=(),
    partial: bool = False,
) -> str:
    gain = gain_plot(rows, {(r[0], r[1]): r[3] for r in stab}, gain_path(paths.plot))
    sets_png = bench_sets.plot(set_rows, sets_path(paths.plot))
    text = report(
        options,
        rows,
        transfer,
        setups,
        plot(rows, paths.plot),
        seconds,
        stab,
        gain,
        bench_sets.section(list(set_rows), setups, DEFAULT_TARGET, sets_png),
    )
    if partial:
        text = text.replace("\n", "\n\n**Partial: the run was still going.**\n", 1)
    atomic_write_text(paths.report, text)
    return text


def main(argv=None) -> int:
    return tool_main("python -m workbench.bench.bench", __doc__, add_arguments, run, argv)


if __name__ == "__main__":
    sys.exit(main())
