"""The report of ``python -m workbench bench``: its tables (main, goals, ceilings, transfer, stability), its
figures, and reading a written report back (``--replot``, ``--with``).
"""

from __future__ import annotations

import math
import platform
import time
from pathlib import Path
from typing import NamedTuple

import torch

from spotref.cli.report import table
from spotref.load.targets import DEFAULT_TARGET
from workbench.bench import bench_sets
from workbench.bench.bench_options import BenchOptions
from workbench.bench.tables import parse_table, pyplot, row_from_cells, save_png

COLUMNS = [
    "target",
    "T",
    "drafter",
    "N",
    "passes/token",
    "fewer passes",
    "fewer denoise",
    "answer passes/token",
    "answer fewer passes",
    "commits/round",
    "tokens/s",
    "speed-up",
    "bookkeeping",
]


STABILITY_COLUMNS = ["target", "T", "states", "d = 0 top-1", "d = 0 top-2", "d = 0 top-1, end-of-text excluded"]


GAIN_DRAFTERS = ("confidence", "calibrated", "spot", "oracle-order", "oracle")  # the gain figure's


class Row(NamedTuple):
    """One line of the main table, field by field as ``COLUMNS``."""

    target: str
    T: str  # as printed: "0", "1"
    drafter: str
    N: int | str  # node budget; "-" for exact, "auto=N" for budget="auto"
    passes_per_token: float
    fewer_passes: float  # R = exact passes / passes
    fewer_denoise: float  # the same, denoise/verify passes only
    answer_passes_per_token: float  # on answer blocks alone (``report.answer_blocks``)
    answer_fewer_passes: float
    commits_per_round: float
    tokens_per_s: float
    speed_up: float  # exact wall time / wall time
    bookkeeping: str  # drafter + tree + acceptance share of the wall time, "12%"


GOALS = dict(  # what SPOT should reach (the report checks each)
    vs_calibrated=1.3,  # calibrated passes / SPOT passes, same N
    vs_confidence=1.5,  # confidence passes / SPOT passes, same N
    oracle_order_gain=0.75,  # (R_spot - 1) / (R_oracle-order - 1), same N
    fewer_passes_n64=6.8,  # R at N = 64, T = 0, on the block-32 targets
    auto_speed_up=1.5,  # wall-clock speed-up of budget="auto" on the default target
)


def by_key(rows: list) -> dict:
    """(target, T, drafter, N) -> row."""
    return {(r.target, r.T, r.drafter, r.N): r for r in rows}


def goal_rows(rows: list, field: str = "fewer_passes") -> list:
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
        out.append(
            [
                tgt,
                T,
                N,
                R("spot"),
                _num(vs_cal),
                _yes(vs_cal, "vs_calibrated"),
                _num(vs_conf),
                _yes(vs_conf, "vs_confidence"),
                _num(oo),
                _yes(oo, "oracle_order_gain"),
            ]
        )
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
        best = lambda base: max(
            ((oo[N].fewer_passes / k[(tgt, T, base, N)].fewer_passes, N) for N in oo if (tgt, T, base, N) in k),
            default=(float("nan"), "-"),
        )
        (cal, n_cal), (conf, n_conf), top = best("calibrated"), best("confidence"), max(oo)
        speed, n_speed = max((oo[N].speed_up, N) for N in oo)
        out.append(
            [
                tgt,
                T,
                f"{cal:.2f} (N={n_cal})",
                f"{conf:.2f} (N={n_conf})",
                f"{oo[top].fewer_passes:.2f} (N={top})",
                f"{speed:.2f} (N={n_speed})",
            ]
        )
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
            lines.append(
                f"* {r.target} (block 32), T = 0, N = 64: SPOT needs {r.fewer_passes:.2f}x fewer passes "
                f"than exact (goal >= {goal:g}x: {met(r.fewer_passes)}); on answer blocks alone "
                f"{r.answer_fewer_passes:.2f}x ({met(r.answer_fewer_passes)})"
            )
        if r.drafter == "spot" and str(r.N).startswith("auto"):
            verdict = (
                f" (goal >= {fast:g}x: {'met' if r.speed_up >= fast else 'not met'})"
                if r.target == DEFAULT_TARGET
                else ""
            )
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
    fig, axes = plt.subplots(len(temps), len(targets), figsize=(4.5 * len(targets), 3.6 * len(temps)), squeeze=False)
    for (i, T), (j, tgt) in ((a, b) for a in enumerate(temps) for b in enumerate(targets)):
        ax = axes[i][j]
        for name, pts in series.get((tgt, T), {}).items():
            ax.plot(*zip(*sorted(pts)), marker="o", ms=3, label=name, ls="--" if name.startswith("oracle") else "-")
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
    ax.set_ylim(bottom=1)  # R >= 1: a round commits at least one decision
    ax.yaxis.set_major_formatter(ticker.FuncFormatter(lambda v, _: f"{v:g}"))
    ax.set(
        xlabel=f"d = 0 top-1 token stability, T = {T}",
        ylabel=f"fewer passes than exact at N = {N} (x)",
        title=f"T = {T}, {what}",
    )
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
    return [row_from_cells(Row, COLUMNS, c) for c in table_]


def stability_from_report(text: str) -> dict:
    """(target, T) -> d = 0 top-1 stability, from a report's stability table ({} without one)."""
    return {(c["target"], c["T"]): float(c[STABILITY_COLUMNS[3]]) for c in parse_table(text, STABILITY_COLUMNS)}


def report(
    options: BenchOptions,
    rows: list,
    transfer: list,
    setups: list,
    plot_path,
    seconds: float,
    stab: list = (),
    gain_png=None,
    extra: list = (),
) -> str:
    """The report: the header, the one-position tables (when ``rows``), then ``extra`` lines."""
    lines = header(options, seconds)
    if not rows:
        return "\n".join(lines + list(extra)) + "\n"
    lines += main_tables(rows, setups) + transfer_section(transfer, setups)
    lines += stability_section(stab, gain_png)
    lines += [
        f"![passes vs budget]({Path(plot_path).name})"
        if plot_path
        else "No plot: matplotlib is not installed (`pip install matplotlib`).",
        "",
    ]
    return "\n".join(lines + list(extra)).rstrip("\n") + "\n"


def header(options: BenchOptions, seconds: float) -> list[str]:
    g = options.grid
    cmd = " ".join(["python -m workbench.bench.bench", *options.argv])
    sets = f", tau in {{{','.join(f'{t:g}' for t in g.taus)}}} (SPOT-Sets)" if g.taus else ""
    temperatures, budgets = ",".join(f"{t:g}" for t in g.temperatures), ",".join(map(str, g.budgets))
    return [
        "# Benchmark: SPOT vs the baselines (generated by `python -m workbench bench`)",
        "",
        f"Command: `{cmd}`  ",
        f"Date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; {seconds / 60:.1f} min in one process  ",
        f"Machine: {platform.machine()}, {platform.processor() or 'cpu'}, torch {torch.__version__}, "
        f"{torch.get_num_threads()} thread(s)  ",
        f"Grid: {g.prompts} prompts x {g.new_tokens} new tokens, T in {{{temperatures}}}, N in {{{budgets}}}"
        f"{sets}{' and auto' if g.auto else ''}; depth cap D = {g.depth}; seed {options.seed}; "
        f"every row's tokens asserted identical to exact decoding.",
        "",
    ]


def goal_table(rows: list, first: str, field: str = "fewer_passes") -> str:
    g = GOALS
    columns = [
        "target",
        "T",
        "N",
        first,
        "vs calibrated",
        f">= {g['vs_calibrated']:g}",
        "vs confidence",
        f">= {g['vs_confidence']:g}",
        "oracle-order gain",
        f">= {g['oracle_order_gain']:g}",
    ]
    return table(columns, goal_rows(rows, field))


def main_tables(rows: list, setups: list) -> list[str]:
    """The main table, the goals (all blocks, answer blocks) and the ceilings."""
    ceilings = ceiling_rows(rows)
    ceiling_columns = [
        "target",
        "T",
        "oracle-order vs calibrated, best",
        "oracle-order vs confidence, best",
        "oracle-order fewer passes",
        "oracle-order speed-up, best",
    ]
    return [
        "Columns: passes/token counts every target forward (prefill, denoise/verify, store); "
        "`fewer passes` = exact passes / passes; `fewer denoise` the same without prefill and store "
        "passes; commits/round = decisions per verify round; `speed-up` = exact wall time / wall time "
        "(same process, same prompts; for the `auto` rows exact decoding is re-timed right before the "
        "row, since the machine is shared and its speed drifts); bookkeeping = drafter + tree + "
        "acceptance share of the wall time.",
        "",
        table(COLUMNS, rows),
        "",
        "## Goals",
        "",
        "SPOT vs the baselines at the same budget N (`vs calibrated` = calibrated passes / SPOT "
        "passes; `oracle-order gain` = (R_spot - 1) / (R_oracle-order - 1), R = fewer passes):",
        "",
        goal_table(rows, "SPOT fewer passes"),
        "",
        "The same on answer blocks alone (the blocks before the one holding end-of-text; every block "
        "of a generation that produced none), so that no goal is met on end-of-text fill:",
        "",
        goal_table(rows, "SPOT fewer passes, answer blocks", "answer_fewer_passes"),
        "",
        *headline(rows, setups),
        "",
        "Ceilings in this run: what a perfect order drafter (the `oracle-order` rows: true next "
        "positions, stale coupled tokens, no drafter cost) reaches. An order drafter can beat "
        f"`calibrated` by {GOALS['vs_calibrated']:g}x only where the first column is >= "
        f"{GOALS['vs_calibrated']:g} (runner-up token branches can add a little on top).",
        "",
        table(ceiling_columns, ceilings)
        if ceilings
        else "No `oracle-order` rows in this run (--drafters left it out).",
        "",
    ]


def transfer_section(transfer: list, setups: list) -> list[str]:
    if not transfer:
        return []
    return [
        "## Transfer (T = 0, N = 16: fewer passes than exact)",
        "",
        "Rows: whose drafter; columns: the target it drafts for.",
        "",
        table(["drafter of"] + [s.name for s in setups], transfer),
        "",
    ]


def stability_section(stab: list, gain_png) -> list[str]:
    if not stab:
        return []
    return [
        "## Gain against stability",
        "",
        "Token stability measured in this run on the same prompts, new tokens and seed (exact "
        "decoding recorded once more; `workbench.bench.stability`'s rates): the share of next "
        "commits whose token is the coupled stale token (d = 0 top-1), or it or the runner-up "
        "(top-2), and top-1 without the commits of a stop id. The figure plots each drafter's "
        "fewer passes at N = 64 (the grid's largest N if it has no 64) against top-1, a point "
        "per target, overall and on answer blocks alone.",
        "",
        table(STABILITY_COLUMNS, stab),
        "",
        f"![gain against stability]({Path(gain_png).name})"
        if gain_png
        else "No gain figure: matplotlib is not installed.",
        "",
    ]
