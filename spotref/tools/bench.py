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
import math
import platform
import sys
import time
from pathlib import Path
from typing import NamedTuple

import numpy as np
import torch

from spotref.drafters.spot import SpotDrafter
from spotref.load.files import atomic_write_text, check_writable, run_dir
from spotref.load.targets import DEFAULT_TARGET, TARGETS_DIR, list_targets
from spotref.tools import bench_sets, stability
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
from spotref.tools.argtypes import (
    choice_list,
    int_list,
    nonneg_int,
    positive_int,
    real_list,
    seed_int,
    tool_main,
)
from spotref.tools.report import parse_table, progress, pyplot, save_png, table
from spotref.tools.trajectories import record

DRAFTERS = ("confidence", "calibrated", "spot", "oracle-order", "oracle")
EXTRA_DRAFTERS = ("spot-root",)          # on request (--drafters): SPOT with one order-model call per round
COLUMNS = ["target", "T", "drafter", "N", "passes/token", "fewer passes", "fewer denoise",
           "answer passes/token", "answer fewer passes", "commits/round", "tokens/s", "speed-up",
           "bookkeeping"]
STABILITY_COLUMNS = ["target", "T", "states", "d = 0 top-1", "d = 0 top-2", "d = 0 top-1, end-of-text excluded"]
GAIN_DRAFTERS = ("confidence", "calibrated", "spot", "oracle-order", "oracle")   # the gain figure's


class Row(NamedTuple):
    """One line of the main table, field by field as ``COLUMNS``."""

    target: str
    T: str                      # as printed: "0", "1"
    drafter: str
    N: int | str                # node budget; "-" for exact, "auto=N" for budget="auto"
    passes_per_token: float
    fewer_passes: float         # R = exact passes / passes
    fewer_denoise: float        # the same, denoise/verify passes only
    answer_passes_per_token: float      # on answer blocks alone (``report.answer_blocks``)
    answer_fewer_passes: float
    commits_per_round: float
    tokens_per_s: float
    speed_up: float             # exact wall time / wall time
    bookkeeping: str            # drafter + tree + acceptance share of the wall time, "12%"


GOALS = dict(                   # what SPOT should reach (the report checks each)
    vs_calibrated=1.3,          # calibrated passes / SPOT passes, same N
    vs_confidence=1.5,          # confidence passes / SPOT passes, same N
    oracle_order_gain=0.75,     # (R_spot - 1) / (R_oracle-order - 1), same N
    fewer_passes_n64=6.8,       # R at N = 64, T = 0, on the block-32 targets
    auto_speed_up=1.5,          # wall-clock speed-up of budget="auto" on the default target
)

SHIPPED_REPORT, SHIPPED_PLOT = "docs/results.md", "docs/results.png"
FULL = dict(temperatures=[0.0, 1.0], budgets=[1, 4, 8, 16, 32, 64], prompts=8, new_tokens=128,
            thresholds=[0.9, 0.7, 0.5])
QUICK = dict(temperatures=[0.0, 1.0], budgets=[1, 4], prompts=2, new_tokens=24, thresholds=[0.9])
RULES = ("one-position", "threshold")
PRECISION_NAMES = ("float64", "float32", "bfloat16", "float16")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--targets", default="all",
                   help="comma-separated bundled targets (default: all; 'random': a random tiny model)")
    p.add_argument("--temperatures", type=real_list(0.0), default=None,
                   help="comma list of temperatures (default 0,1)")
    p.add_argument("--budgets", type=int_list(1), default=None,
                   help="comma list of node budgets N (default 1,4,8,16,32,64; with --quick 1,4)")
    p.add_argument("--no-auto", action="store_true", help="skip budget='auto'")
    p.add_argument("--rules", type=choice_list(RULES), default=list(RULES),
                   help="decision rules to bench: one-position (the drafters' table), threshold (SPOT-Sets); default both")
    p.add_argument("--thresholds", type=real_list(0.0), default=None,
                   help="comma list of thresholds tau for the SPOT-Sets rows (default 0.9,0.7,0.5; with --quick 0.9)")
    p.add_argument("--drafters", type=choice_list(DRAFTERS + EXTRA_DRAFTERS), default=list(DRAFTERS),
                   help=f"comma list of drafters (default: all of {','.join(DRAFTERS)}; also "
                        f"{','.join(EXTRA_DRAFTERS)}: SPOT with one order-model call per round)")
    p.add_argument("--prompts", type=positive_int, default=None,
                   help="held-out prompts per target (default 8; with --quick 2)")
    p.add_argument("--prompt-tokens", type=positive_int, default=64,
                   help="tokens per prompt: a text to continue (code) is cut to this; "
                        "a question or chat prompt is taken whole")
    p.add_argument("--new-tokens", type=positive_int, default=None,
                   help="new tokens per prompt (default 128; with --quick 24)")
    p.add_argument("--depth", type=nonneg_int, default=32, help="depth cap D (with --quick at most 4)")
    p.add_argument("--seed", type=seed_int, default=0, help="noise seed, in [0, 2**64 - 1]")
    p.add_argument("--no-transfer", action="store_true", help="skip the transfer table")
    p.add_argument("--no-stability", action="store_true",
                   help="skip the token-stability measurement and the gain-against-stability figure")
    p.add_argument("--quick", action="store_true",
                   help="CI smoke test: a tiny grid (random model if no target); explicit options win")
    p.add_argument("--targets-dir", default=None, help="load targets from here (default: bundled)")
    p.add_argument("--drafters-dir", default=None, help="drafter checkpoints from here (default: bundled)")
    p.add_argument("--precision", choices=PRECISION_NAMES, default=None,
                   help="decide every run in this precision (default: each target's serving "
                        "precision, docs/spec.md 2.1); drafters are matched to the target first")
    p.add_argument("--out", default=None,
                   help="report path (default: runs/bench-TIME/results.md; missing directories are created)")
    p.add_argument("--plot", default=None, help="PNG, needs matplotlib (default: beside --out, as .png)")
    p.add_argument("--update-shipped", action="store_true",
                   help=f"write the committed {SHIPPED_REPORT}, {SHIPPED_PLOT} and the gain figure beside it "
                        "(not with --out or --plot)")
    p.add_argument("--replot", action="store_true",
                   help="only redraw --plot and the gain figure beside it from the tables in --out "
                        "(or the shipped report with --update-shipped)")
    p.add_argument("--with", dest="also", nargs="+", default=[], metavar="REPORT",
                   help="with --replot: draw these reports' tables too (other targets' runs), "
                        "so the gain figure spans every target")


def row(setup: Setup, T: float, name: str, N, m: dict, ex: dict) -> Row:
    per = lambda a, b: a / max(b, 1)
    return Row(setup.name, f"{T:g}", name, N, per(m["passes"], m["tokens"]), per(ex["passes"], m["passes"]),
               per(ex["denoise"], m["denoise"]), per(m["answer_passes"], m["answer_tokens"]),
               per(ex["answer_passes"], m["answer_passes"]), m["commits"], m["tokens"] / max(m["wall"], 1e-9),
               ex["wall"] / max(m["wall"], 1e-9), f"{100 * m['book']:.0f}%")


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
        ds = record(setup.model, setup.prompts, args.new_tokens, T, (args.seed,), setup.stops,
                    desc=f"stability T={T:g}")
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

def by_key(rows: list) -> dict:
    """(target, T, drafter, N) -> row."""
    return {(r.target, r.T, r.drafter, r.N): r for r in rows}


def goal_rows(rows: list, args, field: str = "fewer_passes") -> list:
    """Per target, T and N: SPOT's pass reduction vs calibrated / confidence, share of the
    oracle-order gain ((R_spot - 1) / (R_oo - 1), R = exact passes / passes: the Row ``field``,
    ``answer_fewer_passes`` for answer blocks alone)."""
    k, out = by_key(rows), []
    for (tgt, T, name, N), r in k.items():
        if name != "spot" or isinstance(N, str) or N < 2:
            continue
        R = lambda d: getattr(k[(tgt, T, d, N)], field) if (tgt, T, d, N) in k else float("nan")
        oo = (R("spot") - 1) / (R("oracle-order") - 1) if R("oracle-order") > 1 else float("nan")
        vs_cal, vs_conf = R("spot") / R("calibrated"), R("spot") / R("confidence")
        out.append([tgt, T, N, R("spot"), _num(vs_cal), _yes(vs_cal, "vs_calibrated"), _num(vs_conf),
                    _yes(vs_conf, "vs_confidence"), _num(oo), _yes(oo, "oracle_order_gain")])
    return out


def _yes(value: float, goal: str) -> str:
    """The verdict; "-" where the run has no row to compare with (a drafter left out)."""
    return "-" if math.isnan(value) else "yes" if value >= GOALS[goal] else "no"


def _num(value: float):
    return "-" if math.isnan(value) else value


def ceiling_rows(rows: list) -> list:
    """Per target and T, what a perfect order drafter could reach in this run: the best ratio
    over N of oracle-order's pass reduction to calibrated's and to confidence's, oracle-order's
    reduction at the largest N, and its best wall-clock speed-up (it drafts for free)."""
    k, out = by_key(rows), []
    for tgt, T in dict.fromkeys((r.target, r.T) for r in rows):
        oo = {N: r for (t, tt, d, N), r in k.items() if (t, tt, d) == (tgt, T, "oracle-order") and isinstance(N, int)}
        if not oo:
            continue
        best = lambda base: max(((oo[N].fewer_passes / k[(tgt, T, base, N)].fewer_passes, N)
                                 for N in oo if (tgt, T, base, N) in k), default=(float("nan"), "-"))
        (cal, n_cal), (conf, n_conf), top = best("calibrated"), best("confidence"), max(oo)
        speed, n_speed = max((oo[N].speed_up, N) for N in oo)
        out.append([tgt, T, f"{cal:.2f} (N={n_cal})", f"{conf:.2f} (N={n_conf})",
                    f"{oo[top].fewer_passes:.2f} (N={top})", f"{speed:.2f} (N={n_speed})"])
    return out


def headline(rows: list, setups: list) -> list[str]:
    """The two single-number goals: N = 64 on the block-32 targets at T = 0; auto wall clock on
    the default target (other targets' auto rows are listed without a verdict)."""
    blocks = {s.name: s.model.block_size for s in setups}
    lines = []
    goal, fast = GOALS["fewer_passes_n64"], GOALS["auto_speed_up"]
    for r in rows:
        if r.drafter == "spot" and r.N == 64 and r.T == "0" and blocks.get(r.target) == 32:
            met = lambda R: "met" if R >= goal else "not met"
            lines.append(f"* {r.target} (block 32), T = 0, N = 64: SPOT needs {r.fewer_passes:.2f}x fewer passes "
                         f"than exact (goal >= {goal:g}x: {met(r.fewer_passes)}); on answer blocks alone "
                         f"{r.answer_fewer_passes:.2f}x ({met(r.answer_fewer_passes)})")
        if r.drafter == "spot" and str(r.N).startswith("auto"):
            verdict = (f" (goal >= {fast:g}x: {'met' if r.speed_up >= fast else 'not met'})"
                       if r.target == DEFAULT_TARGET else "")
            lines.append(f"* {r.target}, T = {r.T}, budget {r.N}: SPOT throughput {r.speed_up:.2f}x exact{verdict}")
    return lines


def plot(rows: list, path: str) -> str | None:
    """Passes reduction vs N per drafter: a panel per target (columns) and T (rows), both axes
    log 2 so that the baselines and SPOT stay apart under the `oracle` line (PNG; None without
    matplotlib)."""
    targets, temps = list(dict.fromkeys(r.target for r in rows)), list(dict.fromkeys(r.T for r in rows))
    if not rows:
        return None
    series = {}
    for r in rows:
        if r.drafter != "exact" and not isinstance(r.N, str):
            series.setdefault((r.target, r.T), {}).setdefault(r.drafter, []).append((r.N, r.fewer_passes))
    mpl = pyplot()
    if mpl is None:
        return None
    plt, ticker = mpl
    fig, axes = plt.subplots(len(temps), len(targets), figsize=(4.5 * len(targets), 3.6 * len(temps)),
                             squeeze=False)
    for (i, T), (j, tgt) in ((a, b) for a in enumerate(temps) for b in enumerate(targets)):
        ax = axes[i][j]
        for name, pts in series.get((tgt, T), {}).items():
            ax.plot(*zip(*sorted(pts)), marker="o", ms=3, label=name,
                    ls="--" if name.startswith("oracle") else "-")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log", base=2)
        for axis in (ax.xaxis, ax.yaxis):
            axis.set_major_formatter(ticker.FuncFormatter(lambda v, _: f"{v:g}"))
        ax.set(xlabel="node budget N", ylabel="fewer passes than exact (x)", title=f"{tgt}, T = {T}")
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize=7)
    return save_png(plt, fig, path)


def gain_plot(rows: list, stab: dict, path: str) -> str | None:
    """Gain against stability across targets: x = d = 0 top-1 stability (``stab``: (target, T)
    -> rate), y = fewer passes than exact at N = 64 (the grid's largest N when it has no 64) for
    each of ``GAIN_DRAFTERS``; a column per T, all blocks above, answer blocks alone below (PNG;
    None without matplotlib or without stability numbers)."""
    budgets = [r.N for r in rows if isinstance(r.N, int)]
    mpl = pyplot()
    if not stab or not budgets or mpl is None:
        return None
    plt, N, temps = mpl[0], 64 if 64 in budgets else max(budgets), list(dict.fromkeys(T for _, T in stab))
    fig, axes = plt.subplots(2, len(temps), figsize=(5.5 * len(temps), 7.6), squeeze=False)
    for j, T in enumerate(temps):
        targets = [(tgt, x) for (tgt, TT), x in stab.items() if TT == T]
        gain_panel(axes[0][j], mpl[1], by_key(rows), targets, T, N, "fewer_passes", "all blocks")
        gain_panel(axes[1][j], mpl[1], by_key(rows), targets, T, N, "answer_fewer_passes", "answer blocks alone")
    return save_png(plt, fig, path)


def gain_panel(ax, ticker, k: dict, targets: list, T: str, N: int, attr: str, what: str) -> None:
    """One panel: a line per drafter through its (stability, Row ``attr``) points, one per target."""
    for name in GAIN_DRAFTERS:
        pts = sorted((x, getattr(k[(tgt, T, name, N)], attr)) for tgt, x in targets if (tgt, T, name, N) in k)
        if pts:
            ax.plot(*zip(*pts), marker="o", ms=4, label=name, ls="--" if name.startswith("oracle") else "-")
    for tgt, x in targets:
        ax.axvline(x, color="grey", alpha=0.25, lw=0.8)
        ax.text(x, 0.02, f" {tgt}", transform=ax.get_xaxis_transform(), rotation=90, va="bottom", fontsize=7)
    ax.set_xlim(min([0.5] + [x - 0.02 for _, x in targets]), 1.0)
    ax.set_yscale("log", base=2)
    ax.set_ylim(bottom=1)                               # R >= 1: a round commits at least one decision
    ax.yaxis.set_major_formatter(ticker.FuncFormatter(lambda v, _: f"{v:g}"))
    ax.set(xlabel=f"d = 0 top-1 token stability, T = {T}", ylabel=f"fewer passes than exact at N = {N} (x)",
           title=f"T = {T}, {what}")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=7, loc="upper left")


def sets_path(plot_path) -> str:
    """The SPOT-Sets figure's path: beside the report's plot (``results.png`` -> ``results-sets.png``)."""
    p = Path(plot_path)
    return str(p.with_name(f"{p.stem}-sets.png"))


def gain_path(plot_path) -> str:
    """The gain figure's path: beside the report's plot (``results.png`` -> ``results-stability.png``)."""
    p = Path(plot_path)
    return str(p.with_name(f"{p.stem}-stability.png"))


def rows_from_report(text: str, source: str = "the report") -> list:
    """The main table of a written report, parsed back (numbers as floats, N as int or str; a
    column that an older report lacks, such as the answer-block ones, reads as NaN).
    ``ValueError`` naming ``source`` when it holds no benchmark table."""
    table_ = parse_table(text, COLUMNS[:4])
    if not table_ and not parse_table(text, bench_sets.SET_COLUMNS[:5]):
        raise ValueError(f"{source}: no benchmark table in it")
    num = lambda c: float(c) if c else float("nan")
    return [Row(c["target"], c["T"], c["drafter"], int(c["N"]) if c["N"].isdigit() else c["N"],
                *(num(c.get(col, "")) for col in COLUMNS[4:-1]), c.get("bookkeeping", ""))
            for c in table_]


def stability_from_report(text: str) -> dict:
    """(target, T) -> d = 0 top-1 stability, from a report's stability table ({} without one)."""
    return {(c["target"], c["T"]): float(c[STABILITY_COLUMNS[3]]) for c in parse_table(text, STABILITY_COLUMNS)}


def report(args, rows: list, transfer: list, setups: list, plot_path, seconds: float,
           stab: list = (), gain_png=None, extra: list = ()) -> str:
    """The report: the header, the one-position tables (when ``rows``), then ``extra`` lines."""
    cmd = " ".join(["python -m spotref.tools.bench"] + getattr(args, "argv", sys.argv[1:]))
    lines = [
        "# Benchmark: SPOT vs the baselines (generated by `spotref bench`)", "",
        f"Command: `{cmd}`  ", f"Date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; "
        f"{seconds / 60:.1f} min in one process  ",
        f"Machine: {platform.machine()}, {platform.processor() or 'cpu'}, torch {torch.__version__}, "
        f"{torch.get_num_threads()} thread(s)  ",
        f"Grid: {args.prompts_note}, T in {{{args.temperatures}}}, N in {{{args.budgets}}}"
        f"{', tau in {' + ','.join(f'{t:g}' for t in args.taus) + '} (SPOT-Sets)' if args.taus else ''}"
        f"{' and auto' if args.auto else ''}; depth cap D = {args.depth}; seed {args.seed}; "
        f"every row's tokens asserted identical to exact decoding.", ""]
    if not rows:
        return "\n".join(lines + list(extra)) + "\n"
    lines += [
        "Columns: passes/token counts every target forward (prefill, denoise/verify, store); "
        "`fewer passes` = exact passes / passes; `fewer denoise` the same without prefill and store "
        "passes; commits/round = decisions per verify round; `speed-up` = exact wall time / wall time "
        "(same process, same prompts; for the `auto` rows exact decoding is re-timed right before the "
        "row, since the machine is shared and its speed drifts); bookkeeping = drafter + tree + "
        "acceptance share of the wall time.", "",
        table(COLUMNS, rows), "", "## Goals", "",
        "SPOT vs the baselines at the same budget N (`vs calibrated` = calibrated passes / SPOT "
        "passes; `oracle-order gain` = (R_spot - 1) / (R_oracle-order - 1), R = fewer passes):", "",
        table(["target", "T", "N", "SPOT fewer passes", "vs calibrated", f">= {GOALS['vs_calibrated']:g}",
               "vs confidence", f">= {GOALS['vs_confidence']:g}", "oracle-order gain",
               f">= {GOALS['oracle_order_gain']:g}"], goal_rows(rows, args)), "",
        "The same on answer blocks alone (the blocks before the one holding end-of-text; every block "
        "of a generation that produced none), so that no goal is met on end-of-text fill:", "",
        table(["target", "T", "N", "SPOT fewer passes, answer blocks", "vs calibrated", f">= {GOALS['vs_calibrated']:g}",
               "vs confidence", f">= {GOALS['vs_confidence']:g}", "oracle-order gain",
               f">= {GOALS['oracle_order_gain']:g}"], goal_rows(rows, args, "answer_fewer_passes")), "",
        *headline(rows, setups), "",
        "Ceilings in this run: what a perfect order drafter (the `oracle-order` rows: true next "
        "positions, stale coupled tokens, no drafter cost) reaches. An order drafter can beat "
        f"`calibrated` by {GOALS['vs_calibrated']:g}x only where the first column is >= "
        f"{GOALS['vs_calibrated']:g} (runner-up token branches can add a little on top).", "",
        *(table(["target", "T", "oracle-order vs calibrated, best", "oracle-order vs confidence, best",
                 "oracle-order fewer passes", "oracle-order speed-up, best"], ceiling_rows(rows))
          if ceiling_rows(rows) else "No `oracle-order` rows in this run (--drafters left it out).",), ""]
    if transfer:
        lines += ["## Transfer (T = 0, N = 16: fewer passes than exact)", "",
                  "Rows: whose drafter; columns: the target it drafts for.", "",
                  table(["drafter of"] + [s.name for s in setups], transfer), ""]
    if stab:
        lines += ["## Gain against stability", "",
                  "Token stability measured in this run on the same prompts, new tokens and seed (exact "
                  "decoding recorded once more; `spotref.tools.stability`'s rates): the share of next "
                  "commits whose token is the coupled stale token (d = 0 top-1), or it or the runner-up "
                  "(top-2), and top-1 without the commits of a stop id. The figure plots each drafter's "
                  "fewer passes at N = 64 (the grid's largest N if it has no 64) against top-1, a point "
                  "per target, overall and on answer blocks alone.", "",
                  table(STABILITY_COLUMNS, stab), "",
                  f"![gain against stability]({Path(gain_png).name})" if gain_png else
                  "No gain figure: matplotlib is not installed.", ""]
    lines += [f"![passes vs budget]({Path(plot_path).name})" if plot_path else
              "No plot: matplotlib is not installed (`pip install matplotlib`).", "", *extra]
    return "\n".join(lines).rstrip("\n") + "\n"


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
        raise ValueError(f"--targets: unknown target(s) {', '.join(unknown)}; known: "
                         f"{', '.join(known) or 'none'}, all, random")
    if args.quick and args.targets == "all":
        names = names[:1]
    if not names:
        return [lambda: random_setup(args)]
    names = sorted(names, key=lambda n: n != DEFAULT_TARGET)      # the default target first
    return [lambda n=n: target_setup(n, args) for n in names]     # loaded when its turn comes


def configure(args) -> None:
    """The grid: --quick's small one where an option was left out, the full one elsewhere."""
    for name, value in (QUICK if args.quick else FULL).items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    if args.quick:
        args.depth = min(args.depth, 4)
    args.T, args.N = list(args.temperatures), list(args.budgets)
    args.temperatures = ",".join(f"{t:g}" for t in args.T)        # as the report prints them
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
    for path in (args.out, args.plot, gain_path(args.plot)):   # refused now, not after the runs
        check_writable(path)


def run(args) -> int:
    if args.replot:
        outputs(args)
        sources = [("--out", args.out)] + [("--with", a) for a in args.also]
        texts = [read_report(path, option) for option, path in sources]
        rows = [r for (option, path), t in zip(sources, texts) for r in rows_from_report(t, f"{option} {path!r}")]
        stab = {k: v for t in texts for k, v in stability_from_report(t).items()}
        done = [plot(rows, args.plot), gain_plot(rows, stab, gain_path(args.plot)),
                bench_sets.plot([r for t in texts for r in bench_sets.rows_from_report(t)], sets_path(args.plot))]
        print("\n".join(f"wrote {d}" for d in done if d) or "no plot: matplotlib is not installed")
        return 0
    torch.set_num_threads(1)
    t0 = time.time()
    configure(args)
    makers, setups, rows, stab, set_rows = setups_for(args), [], [], [], []
    outputs(args)                                         # the run directory, once the input is good
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
        if i + 1 < len(makers):                           # partial report: a long run can be cut
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
    text = report(args, rows, transfer, setups, plot(rows, args.plot), seconds, stab, gain,
                  bench_sets.section(list(set_rows), setups, DEFAULT_TARGET, sets_png))
    if partial:
        text = text.replace("\n", "\n\n**Partial: the run was still going.**\n", 1)
    atomic_write_text(args.out, text)
    return text


def main(argv=None) -> int:
    return tool_main("python -m spotref.tools.bench", __doc__, add_arguments, run, argv)


if __name__ == "__main__":
    sys.exit(main())
