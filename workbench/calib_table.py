"""The SPOT-Sets calibration table: per target and threshold, threshold decoding alone, another
target's set drafter transferred as is, the same drafter calibrated (``spotref calibrate-sets``:
``calibrated``, the default fit, and ``set head only``, ``--set-head-only``) and the target's own
set drafter; ``full`` (``--full``, every weight fine-tuned on the same data: no longer light) where
``--fits`` names it.

``python -m workbench.calib_table --targets stdlib-b32,stdlib-b16,stdlib-b32-d192 --out
runs/calib/transfer-sets.md`` calibrates each target's source drafter (``--sources``, default
``SOURCES``: each from a target of another block size) on the target's training prompts, writes
the calibrated checkpoints beside the report, then decodes the target's held-out test prompts
with each drafter at every T and ``tau`` (``workbench.bench.bench_run``: every row's tokens
asserted identical to threshold decoding alone). ``fewer passes`` = threshold-alone passes /
passes; ``kept`` = (R - 1) / (R_own - 1), the share of the own set drafter's gain over threshold
decoding a drafter keeps; the goal is ``GOAL`` (90%) for the calibrated ones.
"""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from spotref import names
from spotref.calib import calibrate as cal
from spotref.cli.argtypes import add_threads, int_range, list_of, positive_int, real_list, seed_int, tool_main
from spotref.cli.options import Options
from spotref.cli.report import table
from spotref.drafters.spot import SpotDrafter
from spotref.files import atomic_write_text, check_writable, run_dir
from spotref.load.drafters import load_drafter, save_order_model
from workbench.bench import bench_options
from workbench.bench.bench_run import metrics, run_drafter, run_exact, target_setup

SOURCES = {"stdlib-b32": "stdlib-b16", "stdlib-b16": "stdlib-b32", "stdlib-b32-d192": "stdlib-b16"}
GOAL = 0.9  # the calibrated drafter keeps >= 90% of the own set drafter's gain
FITS = {"calibrated": {}, "set-head-only": {"set_head_only": True}, "full": {"full": True}}  # CalibOptions changes
COLUMNS = ["target", "source", "T", "tau", "N", "threshold passes", "drafter", "passes", "fewer passes", "kept"]


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--targets", default=",".join(SOURCES), help="comma list of bundled targets")
    p.add_argument(
        "--sources", default=None, help="comma list: each target's source set drafter (default: SOURCES' choice)"
    )
    p.add_argument("--prompts", type=positive_int, default=4, help="held-out test prompts per target (default 4)")
    p.add_argument("--new-tokens", type=positive_int, default=128, help="new tokens per prompt (default 128)")
    p.add_argument("--budget", type=int_range(2), default=64, help="node budget N (default 64)")
    p.add_argument("--taus", type=real_list(), default=[0.9, 0.7], help="thresholds (default 0.9,0.7)")
    p.add_argument("--temperatures", type=real_list(), default=[0.0], help="temperatures (default 0)")
    p.add_argument(
        "--calib-prompts", type=positive_int, default=cal.MAX_PROMPTS, help="calibration prompts (default 32)"
    )
    p.add_argument("--calib-new-tokens", type=positive_int, default=32, help="calibration new tokens (default 32)")
    p.add_argument(
        "--fits",
        type=list_of(fit_name, "fits"),
        default=list(FITS),
        help=f"calibrations measured, a comma list of {', '.join(FITS)} (default: all)",
    )
    p.add_argument("--seed", type=seed_int, default=0)
    p.add_argument("--out", default=None, help="report path (default runs/calib-table-TIME/transfer-sets.md)")
    add_threads(p)


@dataclass(frozen=True)
class TableOptions(Options):
    targets: str
    sources: str | None
    prompts: int
    new_tokens: int
    budget: int
    taus: list
    temperatures: list
    calib_prompts: int
    calib_new_tokens: int
    fits: list
    seed: int
    out: str | None
    threads: int


def fit_name(text: str) -> str:
    if text not in FITS:
        raise argparse.ArgumentTypeError(f"unknown fit {text!r}: choose from {', '.join(FITS)}")
    return text


def pairs(options: TableOptions) -> list[tuple[str, list[str]]]:
    """[(target, its source drafters)] (``--sources``: one item per target, several sources of
    one target joined by ``+``), ``ValueError`` for a target without a default source."""
    targets = [t for t in options.targets.split(",") if t]
    if options.sources is not None:
        sources = [s for s in options.sources.split(",") if s]
        if len(sources) != len(targets):
            raise ValueError(f"--sources names {len(sources)} items for {len(targets)} --targets")
        return [(t, [x for x in s.split("+") if x]) for t, s in zip(targets, sources)]
    missing = [t for t in targets if t not in SOURCES]
    if missing:
        raise ValueError(f"no default source drafter for {', '.join(missing)}: pass --sources")
    return [(t, [SOURCES[t]]) for t in targets]


def bench_options_for(target: str, options: TableOptions) -> bench_options.BenchOptions:
    o = options
    argv = ["--targets", target, "--prompts", str(o.prompts), "--new-tokens", str(o.new_tokens)]
    argv += ["--budgets", str(o.budget), "--rules", "threshold", "--no-auto", "--seed", str(o.seed)]
    argv += ["--thresholds", ",".join(f"{t:g}" for t in o.taus)]
    argv += ["--temperatures", ",".join(f"{t:g}" for t in o.temperatures)]
    return bench_options.BenchOptions.parse(bench_options.add_arguments, argv)


def calib_options(target: str, source: str, options: TableOptions) -> cal.CalibOptions:
    o = options
    kw = dict(prompts=o.calib_prompts, new_tokens=o.calib_new_tokens, seed=o.seed, threads=o.threads)
    opts = cal.CalibOptions.parse(cal.add_arguments, [source, target])
    return cal.CalibOptions(**{**{k: getattr(opts, k) for k in opts.names()}, **kw})


def record(target: str, options: TableOptions) -> tuple:
    """(``record_calibration``'s result for ``target``, its wall seconds, its CPU seconds)."""
    t0, c0 = time.time(), time.process_time()
    recorded = cal.record_calibration(names.target(target), calib_options(target, target, options))
    return recorded, time.time() - t0, time.process_time() - c0


def calibrated(target: str, source: str, options: TableOptions, out_dir: Path, recording: tuple) -> dict:
    """{label: (the calibrated SpotDrafter, its ``calibration`` header entry)} for each of ``--fits``:
    ``calibrated`` (the command's default fit, next-commit rows included), ``set head only``
    (``--set-head-only``), ``full`` (``--full``), all fit on one ``recording`` (``record``'s: its
    time is added to each entry's seconds); checkpoints are written."""
    o, (recorded, wall, cpu) = options, recording
    opts = calib_options(target, source, o)
    out = {}
    for fit in o.fits:
        model, header = cal.calibrate_sets(source, target, opts, recorded=recorded, **FITS[fit])
        info = header["calibration"]
        info["seconds"], info["cpu_seconds"] = round(info["seconds"] + wall, 1), round(info["cpu_seconds"] + cpu, 1)
        suffix = "" if fit == "calibrated" else f"-{fit}"
        save_order_model(out_dir / f"{target}-from-{Path(source).stem}{suffix}.pt", model, header)
        out[fit.replace("-", " ")] = (SpotDrafter(model, header), info)
    return out


def target_rows(target: str, sources: list, options: TableOptions, out_dir: Path) -> tuple[list, dict]:
    """The table rows of one target (threshold decoding alone and the own drafter run once), and
    its calibrations' header entries by (source, label)."""
    b = bench_options_for(target, options)
    setup = target_setup(target, b)
    if setup.spot is None or not setup.spot.model.has_sets:
        raise ValueError(f"{target} has no own set drafter to compare with")
    drafters, infos, recording = {("", "own"): setup.spot}, {}, record(target, options)
    for source in sources:
        fits = calibrated(target, source, options, out_dir, recording)
        picked = next(iter(fits.values()))[1]["source"]  # auto: the drafter it chose
        source = f"{source} ({picked})" if source == cal.AUTO else source
        drafters[(source, "transferred")] = load_drafter(picked, strict=False)
        drafters.update({(source, k): d for k, (d, _) in fits.items()})
        infos.update({(source, k): info for k, (_, info) in fits.items()})
    rows = []
    for T in options.temperatures:
        for tau in options.taus:
            ex = metrics(run_exact(setup, T, b, tau))["passes"]
            got = {
                key: metrics(run_drafter(setup, T, key[1], options.budget, b, drafter=d, threshold=tau))["passes"]
                for key, d in drafters.items()
            }
            R = {key: ex / max(p, 1) for key, p in got.items()}
            own = R[("", "own")]
            for key in drafters:
                kept = (R[key] - 1) / (own - 1) if own > 1 else float("nan")
                rows.append([target, key[0], f"{T:g}", f"{tau:g}", options.budget, ex, key[1], got[key], R[key], kept])
    return rows, infos


def goal_lines(rows: list) -> list[str]:
    out = []
    for r in rows:
        if r[6] in ("calibrated", "set head only", "full"):
            verdict = "met" if r[9] >= GOAL else "not met"
            out.append(
                f"* {r[0]} (from {r[1]}), T = {r[2]}, tau = {r[3]}: {r[6]} keeps {r[9]:.0%} of the own "
                f"set drafter's gain (goal >= {GOAL:.0%}: {verdict})"
            )
    return out


def report(options: TableOptions, rows: list, infos: dict, seconds: float) -> str:
    cal_rows = [
        [t, label, source, i["n_parameters"], i["prompts"], i["new_tokens"], i["states"], i["loss_before"]]
        + [i["loss_after"], i["seconds"], i["cpu_seconds"]]
        for t, by_label in infos.items()
        for (source, label), i in by_label.items()
    ]
    return "\n".join(
        [
            "# SPOT-Sets with a light calibration",
            "",
            f"Command: `python -m workbench.calib_table {' '.join(options.argv)}` ({seconds / 60:.1f} min)",
            "",
            f"Calibrated parameters: {', '.join(cal.calib_fit.CALIBRATED)}; set head only: "
            f"{', '.join(cal.calib_fit.SET_HEAD_ONLY)} (everything else is the source drafter's); "
            "full: every weight. "
            "Seconds include the recording, shared by both fits.",
            "",
            table(
                ["target", "fit", "source", "numbers", "prompts", "new tokens", "states", "loss before", "loss after"]
                + ["s", "CPU s"],
                cal_rows,
            ),
            "",
            table(COLUMNS, rows),
            "",
            *goal_lines(rows),
            "",
        ]
    )


def run(args: argparse.Namespace) -> int:
    o = TableOptions.from_namespace(args)
    torch.set_num_threads(o.threads)
    todo = pairs(o)
    out = check_writable(o.out or run_dir("calib-table") / "transfer-sets.md")
    out.parent.mkdir(parents=True, exist_ok=True)
    t0, rows, infos = time.time(), [], {}
    for target, sources in todo:
        r, infos[target] = target_rows(target, sources, o, out.parent)
        rows += r
        print(table(COLUMNS, r), flush=True)
    atomic_write_text(out, report(o, rows, infos, time.time() - t0))
    print("\n".join(goal_lines(rows)))
    print(f"wrote {out}")
    return 0


def main(argv=None) -> int:
    return tool_main("python -m workbench.calib_table", __doc__, add_arguments, run, argv)


if __name__ == "__main__":
    raise SystemExit(main())
