"""The options of ``python -m workbench bench``: its command line, and the one typed object built from it.

``add_arguments`` builds the command line (the grid, then the run's settings and its files);
``BenchOptions.from_namespace`` turns the parsed namespace, once, into a frozen ``BenchOptions``
that every function of ``workbench.bench.bench``, ``bench_run``, ``bench_sets`` and
``bench_report`` reads, never the namespace. ``grid`` gives what a run decodes: the options left
out filled in from ``--quick``'s small grid or the full one (argparse cannot make a default
depend on another option), with the thresholds checked.
"""

from __future__ import annotations

import argparse
import functools
from dataclasses import dataclass

from spotref.cli.argtypes import (
    add_prompt_tokens,
    choice_list,
    int_list,
    list_of,
    nonneg_int,
    positive_int,
    real_range,
    seed_int,
    temperature_arg,
)
from spotref.cli.options import Options

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
    p.add_argument(
        "--temperatures",
        type=list_of(temperature_arg, "temperatures"),
        default=None,
        help="comma list of temperatures (default 0,1)",
    )
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
        type=list_of(real_range(0.0, 1.0, open_lo=True, open_hi=True), "thresholds"),
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
    add_prompt_tokens(p)
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


@dataclass(frozen=True)
class BenchOptions(Options):
    """The options of ``python -m workbench bench`` / ``python -m workbench.bench.bench``, named as
    ``add_arguments`` names them (``--with``: ``also``); ``None``: left out (``grid``,
    ``workbench.bench.bench.outputs`` fill it in)."""

    targets: str  # comma list of bundled targets, "all" or "random"
    temperatures: list[float] | None
    budgets: list[int] | None  # node budgets N
    no_auto: bool  # skip budget="auto"
    rules: list[str]  # of RULES
    thresholds: list[float] | None  # taus of the SPOT-Sets rows
    drafters: list[str]  # of DRAFTERS + EXTRA_DRAFTERS
    prompts: int | None  # held-out prompts per target
    prompt_tokens: int  # a text to continue is cut to this
    new_tokens: int | None  # per prompt
    depth: int  # depth cap D (--quick caps it at 4: grid)
    seed: int
    no_transfer: bool
    no_stability: bool
    quick: bool
    targets_dir: str | None  # None: the bundled targets
    drafters_dir: str | None  # None: the bundled drafters
    precision: str | None  # of PRECISION_NAMES; None: each target's serving precision
    out: str | None  # the report's path
    plot: str | None  # the PNG's path
    update_shipped: bool
    replot: bool
    also: list[str]  # --with REPORT ...: other reports' tables, with --replot

    @functools.cached_property
    def grid(self) -> Grid:
        """``grid(self)``, computed once (the object is frozen)."""
        return grid(self)


@dataclass(frozen=True)
class Grid:
    """What a run decodes (``grid``): per target, every T, drafter and N, and every T and tau."""

    temperatures: tuple[float, ...]
    budgets: tuple[int, ...]  # node budgets N
    prompts: int  # held-out prompts per target
    new_tokens: int  # per prompt
    depth: int  # depth cap D
    taus: tuple[float, ...]  # the SPOT-Sets rows' thresholds; () without the threshold rule
    drafters: tuple[str, ...]  # the one-position table's drafters; () without that rule
    auto: bool  # a budget="auto" row for the drafters that have one


def grid(options: BenchOptions) -> Grid:
    """The grid of ``options``: --quick's small one where an option was left out, the full one
    elsewhere (--quick also caps the depth at 4); ``ValueError`` on a threshold outside (0, 1)."""
    o, defaults = options, QUICK if options.quick else FULL
    pick = lambda name: defaults[name] if getattr(o, name) is None else getattr(o, name)
    bad = [t for t in pick("thresholds") if not 0.0 < t < 1.0]
    if bad:
        raise ValueError(f"--thresholds: each tau must lie in (0, 1), got {', '.join(f'{t:g}' for t in bad)}")
    return Grid(
        temperatures=tuple(pick("temperatures")),
        budgets=tuple(pick("budgets")),
        prompts=pick("prompts"),
        new_tokens=pick("new_tokens"),
        depth=min(o.depth, 4) if o.quick else o.depth,
        taus=tuple(pick("thresholds")) if "threshold" in o.rules else (),
        drafters=tuple(o.drafters) if "one-position" in o.rules else (),
        auto=not o.no_auto,
    )
