"""The threshold-rule rows of ``python -m workbench bench``: SPOT-Sets against threshold decoding alone.

For every target, T and threshold ``tau`` (``--thresholds``, default 0.9, 0.7, 0.5), threshold
decoding alone (no draft) runs first, then at each node budget N (and ``auto``): ``confidence``
(the confidence sets: the stale set ``{c > tau}``, one fewer, one more), ``spot`` (SPOT-Sets: the
order model's set head, ``spotref.drafters.sets``) and ``oracle-sets`` (the true next sets with
the stale coupled tokens: the ceiling of any set predictor). Every row's tokens are asserted
identical to threshold decoding. ``tokens/pass`` over threshold decoding alone is the paper's
SPOT-Sets measure (+59%: 1.59x); the held-out set accuracy of each target's set head (exact-set
match of the top proposal) comes from its drafter checkpoint, beside the confidence sets'.
"""

from __future__ import annotations

from typing import NamedTuple

from spotref.cli.report import table
from workbench.bench.bench_options import BenchOptions
from workbench.bench.bench_run import make_drafter, metrics, run_auto, run_drafter, run_exact, table_row
from workbench.bench.tables import parse_tables, pyplot, row_from_cells, save_png

SET_DRAFTERS = ("confidence", "spot", "oracle-sets")
AUTO_DRAFTERS = ("confidence", "spot")  # the ones with a budget="auto" row (its N from the one-position cost model)
SET_COLUMNS = [
    "target",
    "T",
    "tau",
    "drafter",
    "N",
    "passes/token",
    "tokens/pass",
    "fewer passes",
    "answer fewer passes",
    "commits/round",
    "tokens/s",
    "speed-up",
    "bookkeeping",
]
SET_GOALS = dict(
    over_threshold=1.59,  # SPOT-Sets tokens/pass over threshold alone, tau 0.9, N 64, T 0
    vs_confidence_sets=1.2,
)  # confidence-sets passes / SPOT-Sets passes, same N


class SetRow(NamedTuple):
    """One line of the SPOT-Sets table, field by field as ``SET_COLUMNS``."""

    target: str
    T: str
    tau: str
    drafter: str  # "threshold" (alone), confidence, spot, oracle-sets
    N: int | str
    passes_per_token: float
    tokens_per_pass: float
    fewer_passes: float  # threshold-alone passes / passes (= the tokens/pass ratio)
    answer_fewer_passes: float
    commits_per_round: float
    tokens_per_s: float
    speed_up: float
    bookkeeping: str


def set_row(setup, T: float, tau: float, name: str, N, m: dict, ex: dict) -> SetRow:
    return table_row(SetRow, m, ex, target=setup.name, T=f"{T:g}", tau=f"{tau:g}", drafter=name, N=N)


def configs(options: BenchOptions) -> int:
    """How many drafted rows one target adds (for the progress bar)."""
    g = options.grid
    autos = sum(1 for d in SET_DRAFTERS if d in AUTO_DRAFTERS) if g.auto else 0
    return len(g.temperatures) * len(g.taus) * (len(SET_DRAFTERS) * len(g.budgets) + autos)


def bench_sets(setup, options: BenchOptions, rows: list, bar) -> None:
    g = options.grid
    for T in g.temperatures:
        for tau in g.taus:
            ex = metrics(run_exact(setup, T, options, tau))
            rows.append(set_row(setup, T, tau, "threshold", "-", ex, ex))
            for name in SET_DRAFTERS:
                if make_drafter(name, setup, setup.exact[(T, tau)][0]) is None:
                    continue
                for N in g.budgets:
                    m = metrics(run_drafter(setup, T, name, N, options, threshold=tau))
                    rows.append(set_row(setup, T, tau, name, N, m, ex))
                    bar.update(1)
                if g.auto and name in AUTO_DRAFTERS:
                    rows.append(auto_set_row(setup, T, tau, name, options, ex))
                    bar.update(1)


def auto_set_row(setup, T: float, tau: float, name: str, options: BenchOptions, ex: dict) -> SetRow:
    N, m, wall = run_auto(setup, T, name, options, threshold=tau)
    return set_row(setup, T, tau, name, f"auto={N}", m, {**ex, "wall": wall})


def goal_rows(rows: list, field: str = "fewer_passes") -> list:
    """Per target, T, tau and N: SPOT-Sets over threshold alone, vs the confidence sets, and the
    share of the oracle-sets gain ((R_spot - 1) / (R_oracle-sets - 1))."""
    k = {(r.target, r.T, r.tau, r.drafter, r.N): r for r in rows}
    out = []
    for (tgt, T, tau, name, N), r in k.items():
        if name != "spot" or isinstance(N, str) or N < 2:
            continue
        R = lambda d: getattr(k[(tgt, T, tau, d, N)], field) if (tgt, T, tau, d, N) in k else float("nan")
        vs = R("spot") / R("confidence")
        oo = (R("spot") - 1) / (R("oracle-sets") - 1) if R("oracle-sets") > 1 else float("nan")
        out.append(
            [
                tgt,
                T,
                tau,
                N,
                R("spot"),
                R("oracle-sets"),
                vs,
                "yes" if vs >= SET_GOALS["vs_confidence_sets"] else "no",
                oo,
            ]
        )
    return out


def headline(rows: list, default_target: str) -> list[str]:
    """The paper's SPOT-Sets number: tokens/pass over threshold alone at tau = 0.9, N = 64, T = 0."""
    out, goal = [], SET_GOALS["over_threshold"]
    for r in rows:
        if r.drafter == "spot" and r.N == 64 and r.T == "0" and r.tau == "0.9":
            verdict = (
                f" (goal >= {goal:g}x: {'met' if r.fewer_passes >= goal else 'not met'})"
                if r.target == default_target
                else ""
            )
            out.append(
                f"* {r.target}, T = 0, tau = 0.9, N = 64: SPOT-Sets {r.fewer_passes:.2f}x tokens/pass "
                f"over threshold decoding alone{verdict}; on answer blocks alone {r.answer_fewer_passes:.2f}x"
            )
    return out


def accuracy_rows(setups: list) -> list:
    """Held-out set accuracy from each target's drafter checkpoint (its ``sets`` header)."""
    out = []
    for s in setups:
        sets = (getattr(s.spot, "header", None) or {}).get("sets") if s.spot is not None else None
        if not sets:
            out.append([s.name, "-", "-", "no trained set head in this checkpoint", "-"])
            continue
        for T, per_tau in sets["heldout_accuracy"].items():
            for tau, a in per_tau.items():
                out.append([s.name, T, tau, a, sets["confidence_accuracy"][T][tau]])
    return out


def section(rows: list, setups: list, default_target: str, png: str | None) -> list[str]:
    """The report's SPOT-Sets section (markdown lines)."""
    if not rows:
        return []
    return [
        "## SPOT-Sets: the threshold rule",
        "",
        "Threshold decoding (commit every masked position with confidence > tau, else the most "
        "confident) alone (`threshold`, N = -) and with drafts: `confidence` (the confidence sets), "
        "`spot` (SPOT-Sets) and `oracle-sets` (the true next sets, stale coupled tokens: the ceiling "
        "of a set predictor). `fewer passes` = threshold-alone passes / passes (= the tokens/pass "
        "ratio); every row's tokens asserted identical to threshold decoding at its tau.",
        "",
        table(SET_COLUMNS, rows),
        "",
        "### Goals",
        "",
        *headline(rows, default_target),
        "",
        "SPOT-Sets against the confidence sets at the same N (`vs confidence sets` = confidence-sets "
        "passes / SPOT-Sets passes; `oracle-sets gain` = (R_spot - 1) / (R_oracle-sets - 1)):",
        "",
        table(
            [
                "target",
                "T",
                "tau",
                "N",
                "SPOT-Sets fewer passes",
                "oracle-sets fewer passes",
                "vs confidence sets",
                f">= {SET_GOALS['vs_confidence_sets']:g}",
                "oracle-sets gain",
            ],
            goal_rows(rows),
        ),
        "",
        "Held-out set accuracy (the top proposal's positions are exactly the next commit set, at "
        "the recorded states; from the drafter checkpoint, `spotref train-drafter`):",
        "",
        table(["target", "T", "tau", "SPOT-Sets", "confidence sets"], accuracy_rows(setups)),
        "",
        f"![SPOT-Sets: fewer passes vs budget]({png.rsplit('/', 1)[-1]})"
        if png
        else "No SPOT-Sets plot: matplotlib is not installed.",
        "",
    ]


def rows_from_report(text: str) -> list:
    """The SPOT-Sets tables of a written report (one per target), parsed back ([] without one)."""
    return [row_from_cells(SetRow, SET_COLUMNS, c) for t in parse_tables(text, SET_COLUMNS[:5]) for c in t]


def plot(rows: list, path: str) -> str | None:
    """Fewer passes than threshold alone vs N: a panel per (target, T) row and tau column."""
    mpl = pyplot()
    panels = list(dict.fromkeys((r.target, r.T) for r in rows))
    taus = list(dict.fromkeys(r.tau for r in rows))
    if mpl is None or not rows:
        return None
    plt, ticker = mpl
    fig, axes = plt.subplots(len(panels), len(taus), figsize=(4.3 * len(taus), 3.4 * len(panels)), squeeze=False)
    for i, (tgt, T) in enumerate(panels):
        for j, tau in enumerate(taus):
            ax = axes[i][j]
            for name in SET_DRAFTERS:
                pts = sorted(
                    (r.N, r.fewer_passes)
                    for r in rows
                    if (r.target, r.T, r.tau, r.drafter) == (tgt, T, tau, name) and isinstance(r.N, int)
                )
                if pts:
                    ax.plot(*zip(*pts), marker="o", ms=3, label=name, ls="--" if name.startswith("oracle") else "-")
            ax.set_xscale("log", base=2)
            ax.xaxis.set_major_formatter(ticker.FuncFormatter(lambda v, _: f"{v:g}"))
            ax.set(
                xlabel="node budget N",
                ylabel="fewer passes than threshold alone (x)",
                title=f"{tgt}, T = {T}, tau = {tau}",
            )
            ax.grid(alpha=0.3, which="both")
            ax.legend(fontsize=7)
    return save_png(plt, fig, path)
