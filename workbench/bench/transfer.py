"""``python -m workbench.bench.transfer``: every shipped SPOT drafter on every shipped target.

Rows: the shipped drafters by name (``spotref.load_drafter``: not strict, so any drafter drafts
for any target, of any block size, task or family), then the training-free ``confidence`` and
each target's own ``calibrated`` drafter; columns: the targets. For each node budget N and
temperature T, every row decodes each target's held-out prompts (``workbench.bench.bench_run``:
``target_setup``, ``run_exact``, ``run_drafter``, ``metrics``; the same prompts, new tokens and
seed for every row) and two numbers are reported per cell:

* passes saved: exact decoding's target passes / the drafter's (> 1: fewer passes);
* share kept: (x - 1) / (own - 1), x the cell's passes saved and own the target's own SPOT
  drafter's (the shipped checkpoint trained on it): 1 for the own drafter, "-" where own <= 1.

Every decode is asserted identical to exact decoding (``run_drafter`` exits on the first
difference). Writes ``results-transfer.md`` (the command, date, machine, the tables, the
N = 64, T = 0 summary against the issue's goals), ``results-transfer.json`` (the raw totals) and
``results-transfer.png`` (share kept at N = 64, T = 0, or the grid's largest N and lowest T, as
a heatmap; skipped with a note without matplotlib) into a new run directory
``runs/transfer-TIME/`` or ``--out DIR``, atomically, after each target (a long run can be cut);
only ``--update-docs`` writes the shipped ``docs/results-transfer.md`` and its PNG.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from spotref.cli.argtypes import (
    add_prompt_tokens,
    choice_list,
    int_list,
    list_of,
    positive_int,
    seed_int,
    temperature_arg,
    tool_main,
)
from spotref.cli.options import Options
from spotref.cli.report import progress, table
from spotref.files import atomic_write_text, check_writable, run_dir
from spotref.load.drafters import find_checkpoint, list_checkpoints, load_drafter
from spotref.load.targets import list_targets
from workbench.bench.bench_options import BenchOptions
from workbench.bench.bench_options import add_arguments as bench_arguments
from workbench.bench.bench_report import header
from workbench.bench.bench_run import metrics, run_drafter, run_exact, target_setup
from workbench.bench.tables import pyplot, save_png

BASELINES = ("confidence", "calibrated")  # the extra rows: training-free, the target's own graph
SHIPPED = Path("docs") / "results-transfer.md"
NAMES = ("results-transfer.md", "results-transfer.json", "results-transfer.png")


def add_arguments(p: argparse.ArgumentParser) -> None:
    targets, drafters = list_targets(), list_checkpoints()
    p.add_argument(
        "--targets", type=choice_list(targets), default=targets, help="comma list of targets (default: all shipped)"
    )
    p.add_argument(
        "--drafters",
        type=choice_list(drafters + list(BASELINES)),
        default=drafters + list(BASELINES),
        help=f"comma list of rows (default: every shipped drafter and {', '.join(BASELINES)})",
    )
    p.add_argument("--prompts", type=positive_int, default=8, help="held-out prompts per target (default 8)")
    add_prompt_tokens(p)
    p.add_argument("--new-tokens", type=positive_int, default=128, help="new tokens per prompt (default 128)")
    p.add_argument("--budgets", type=int_list(1), default=[16, 64], help="comma list of node budgets N (default 16,64)")
    p.add_argument(
        "--temperatures",
        type=list_of(temperature_arg, "temperatures"),
        default=[0.0, 1.0],
        help="comma list of temperatures (default 0,1)",
    )
    p.add_argument("--depth", type=positive_int, default=32, help="depth cap D (default 32)")
    p.add_argument("--seed", type=seed_int, default=0, help="noise seed, in [0, 2**64 - 1]")
    p.add_argument("--out", default=None, help="run directory (default: a new runs/transfer-TIME/)")
    p.add_argument(
        "--update-docs",
        dest="update_shipped",
        action="store_true",
        help=f"write the shipped {SHIPPED} and its PNG (not with --out)",
    )


@dataclass(frozen=True)
class TransferOptions(Options):
    targets: list[str]
    drafters: list[str]  # shipped drafter names and BASELINES
    prompts: int
    prompt_tokens: int
    new_tokens: int
    budgets: list[int]
    temperatures: list[float]
    depth: int
    seed: int
    out: str | None
    update_shipped: bool  # --update-docs

    def bench(self) -> BenchOptions:
        """The same run settings as ``python -m workbench bench`` options, for ``bench_run``'s functions."""
        argv = ["--prompts", self.prompts, "--prompt-tokens", self.prompt_tokens, "--new-tokens", self.new_tokens]
        argv += ["--depth", self.depth, "--seed", self.seed, "--no-auto", "--rules", "one-position"]
        argv += ["--budgets", ",".join(map(str, self.budgets))]
        argv += ["--temperatures", ",".join(f"{t:g}" for t in self.temperatures)]
        return BenchOptions.parse(bench_arguments, [str(a) for a in argv])


def outputs(o: TransferOptions) -> dict:
    """{name: path} of the three outputs, each checked writable before any work."""
    if o.update_shipped and o.out:
        raise ValueError("--update-docs writes the shipped report: leave out --out")
    where = SHIPPED.parent if o.update_shipped else Path(o.out) if o.out else run_dir("transfer")
    paths = {n: where / n for n in NAMES}
    for p in paths.values():
        check_writable(p)
    return paths


def drafter_for_row(name: str, setup, loaded: dict):
    """The drafter of a row on ``setup``'s target: a shipped one by name (loaded once), the
    confidence drafter, or the target's own calibrated drafter (None when it has none)."""
    if name == "confidence":
        return "confidence"
    if name == "calibrated":
        return setup.calibrated
    if name not in loaded:
        loaded[name] = load_drafter(name)
    return loaded[name]


def own_name(setup) -> str | None:
    """The shipped drafter trained on ``setup``'s target (its checkpoint's name), or None."""
    path = None if setup.spot is None else find_checkpoint(setup.model)
    return None if path is None else path.stem


def measure_target(name: str, o: TransferOptions, bench: BenchOptions, cells: dict, loaded: dict, bar) -> str:
    """Every row on target ``name``: cells[(row, target, N, T)] = {"passes", "exact"}; the own
    drafter's also under ("own", target, N, T). Returns the own drafter's name ("-": none)."""
    setup = target_setup(name, bench)
    own = own_name(setup)
    for T in o.temperatures:
        exact = metrics(run_exact(setup, T, bench))["passes"]
        for row in o.drafters:
            d = drafter_for_row(row, setup, loaded)
            for N in o.budgets:
                if d is not None:
                    passes = metrics(run_drafter(setup, T, row, N, bench, drafter=d))["passes"]
                    cells[(row, name, N, T)] = {"passes": passes, "exact": exact}
                bar.update(1)
        if own is not None and own not in o.drafters:  # the share's reference, measured once
            for N in o.budgets:
                passes = metrics(run_drafter(setup, T, own, N, bench, drafter=setup.spot))["passes"]
                cells[("own", name, N, T)] = {"passes": passes, "exact": exact}
        elif own is not None:
            for N in o.budgets:
                cells[("own", name, N, T)] = cells[(own, name, N, T)]
    return own or "-"


def saved(cell) -> float:
    return cell["exact"] / max(cell["passes"], 1) if cell else math.nan


def share(cells: dict, row: str, target: str, N: int, T: float) -> float:
    """(x - 1) / (own - 1); NaN where a cell is missing or the own drafter saves nothing."""
    x, own = saved(cells.get((row, target, N, T))), saved(cells.get(("own", target, N, T)))
    return (x - 1) / (own - 1) if own > 1 else math.nan


def fmt(v: float, pct: bool = False) -> str:
    return "-" if math.isnan(v) else f"{100 * v:.0f}%" if pct else f"{v:.2f}"


def tables(o: TransferOptions, cells: dict, targets: list) -> list[str]:
    out = []
    for T in o.temperatures:
        for N in o.budgets:
            head = [f"N={N}, T={T:g}"] + targets
            x = [[r] + [fmt(saved(cells.get((r, t, N, T)))) for t in targets] for r in o.drafters]
            s = [[r] + [fmt(share(cells, r, t, N, T), pct=True) for t in targets] for r in o.drafters]
            out += [f"### Passes saved (exact / drafter), N = {N}, T = {T:g}", "", table(head, x), ""]
            out += [f"### Share of the own drafter's gain kept, N = {N}, T = {T:g}", "", table(head, s), ""]
    return out


def focus(o: TransferOptions) -> tuple[int, float]:
    """The (N, T) the summary and figure show: N = 64, T = 0 when measured, else the largest N
    and the lowest T."""
    return (64 if 64 in o.budgets else max(o.budgets)), (0.0 if 0.0 in o.temperatures else min(o.temperatures))


def summary(o: TransferOptions, cells: dict, owners: dict) -> list[str]:
    """Per trained drafter at ``focus``: its smallest share kept on another target, and the
    targets where it does not beat the calibrated drafter (the issue's goals: >= 85%, above)."""
    N, T = focus(o)
    rows = []
    for r in (r for r in o.drafters if r not in BASELINES):
        others = [t for t in owners if (r, t, N, T) in cells and owners[t] != r]
        shares = [share(cells, r, t, N, T) for t in others]
        shares = [v for v in shares if not math.isnan(v)]
        below = [t for t in others if saved(cells[(r, t, N, T)]) <= saved(cells.get(("calibrated", t, N, T)))]
        worst = min(shares) if shares else math.nan
        rows.append([r, fmt(worst, pct=True), "-" if math.isnan(worst) else "yes" if worst >= 0.85 else "no"])
        rows[-1].append(", ".join(below) if "calibrated" in o.drafters else "(not measured)")
    head = ["drafter", "least share kept, other targets", ">= 85%", "not above calibrated on"]
    return [f"## Summary, N = {N}, T = {T:g}", "", table(head, rows), ""]


def heatmap(o: TransferOptions, cells: dict, targets: list, path: Path) -> str | None:
    """Share kept at ``focus`` as a heatmap (rows: drafters, columns: targets); None without
    matplotlib."""
    mp = pyplot()
    if mp is None:
        return None
    plt, _ = mp
    N, T = focus(o)
    grid = [[share(cells, r, t, N, T) for t in targets] for r in o.drafters]
    fig, ax = plt.subplots(figsize=(1.3 * len(targets) + 3, 0.5 * len(o.drafters) + 2))
    im = ax.imshow(grid, cmap="viridis", vmin=0.0, vmax=1.2, aspect="auto")
    ax.set_xticks(range(len(targets)), targets, rotation=30, ha="right")
    ax.set_yticks(range(len(o.drafters)), o.drafters)
    for i, line in enumerate(grid):
        for j, v in enumerate(line):
            ax.text(j, i, fmt(v, pct=True), ha="center", va="center", color="w" if not v > 0.8 else "k", fontsize=8)
    ax.set_xlabel("target")
    ax.set_ylabel("drafter")
    ax.set_title(f"share of the own drafter's gain kept, N = {N}, T = {T:g}")
    fig.colorbar(im, ax=ax)
    return save_png(plt, fig, str(path))


def write(o: TransferOptions, bench: BenchOptions, paths: dict, cells: dict, owners: dict, seconds: float, partial):
    """The report, the raw totals and the figure, each written atomically; returns the report.
    owners: {target measured: its own drafter's name}."""
    targets = list(owners)
    png = heatmap(o, cells, targets, paths["results-transfer.png"]) if cells else None
    head = header(bench, seconds)
    head[0] = "# Transfer: every drafter on every target (generated by `python -m workbench.bench.transfer`)"
    head[2] = f"Command: `{' '.join(['python -m workbench.bench.transfer', *o.argv])}`  "
    text = "\n".join(
        head
        + (["**Partial: the run was still going.**", ""] if partial else [])
        + [
            "Rows: the drafter (a shipped SPOT drafter by name, the training-free confidence drafter, the "
            "target's own calibrated drafter); columns: the target it drafts for. Passes saved: exact "
            "decoding's target passes / the drafter's. Share kept: (x - 1) / (own - 1), own the passes "
            "saved by the target's own SPOT drafter.",
            "",
        ]
        + summary(o, cells, owners)
        + ["Own drafters: " + ", ".join(f"{t}: {d}" for t, d in owners.items()), ""]
        + tables(o, cells, targets)
        + ([f"![share kept]({Path(png).name})", ""] if png else ["(no figure: matplotlib is not installed)", ""])
    )
    raw = [{"row": r, "target": t, "N": N, "T": T, **v} for (r, t, N, T), v in sorted(cells.items(), key=str)]
    atomic_write_text(paths["results-transfer.json"], json.dumps(raw, indent=1) + "\n")
    atomic_write_text(paths["results-transfer.md"], text)
    return text


def run(args: argparse.Namespace) -> int:
    o = TransferOptions.from_namespace(args)
    bench = o.bench()
    torch.set_num_threads(1)
    paths = outputs(o)
    print(f"transfer: writing {paths['results-transfer.md']}", file=sys.stderr)
    t0, cells, loaded, owners = time.time(), {}, {}, {}
    bar = progress(range(len(o.targets) * len(o.temperatures) * len(o.drafters) * len(o.budgets)), "transfer")
    bar = bar if hasattr(bar, "update") else type("NoBar", (), {"update": lambda self, n: None})()
    for name in o.targets:
        owners[name] = measure_target(name, o, bench, cells, loaded, bar)
        text = write(o, bench, paths, cells, owners, time.time() - t0, partial=len(owners) < len(o.targets))
    print(text)
    return 0


def main(argv=None) -> int:
    return tool_main("python -m workbench.bench.transfer", __doc__, add_arguments, run, argv)


if __name__ == "__main__":
    sys.exit(main())
