"""Which weights a SPOT-Sets drafter must adapt to serve a new target: offline, on many prompts.

    python benchmarks/sets_adaptation.py --target stdlib-b16 --sources stdlib-b32,stdlib-b32-d192
        [--test-prompts 32] [--new-tokens 64] [--tau 0.9] [--budget 16] [--depth 16]
        [--adaptations as-is,calibrated,heads,last-layer,embed,full] [--steps 500]
        [--cache runs/sets-adaptation] [--out runs/sets-adaptation/TARGET.json]

Each source set drafter is adapted to ``--target`` from the one recording ``spotref
calibrate-sets`` makes (its defaults: 32 training-split prompts, tau 0.9 / 0.7, T = 0 / 1, 32 new
tokens each), in one of several ways (``ADAPTATIONS``): kept as it is, the light output-layer fit
(``calibrate-sets``' default, 248 numbers), or a fine-tune of a group of weights from the source
under the set loss (``spotref.calib.fit.fit_full`` with a parameter filter, ``--steps`` Adam
steps): the heads and final norm, those plus the encoder's last layer, those plus the feature
embedding, every weight (``calibrate-sets --full``). Each is then measured against the target's
own set drafter by SPOT-Sets rounds simulated along exact threshold-decoding trajectories of
``--test-prompts`` held-out test prompts at T = 0 (``train_drafter.simulate``: a round accepts
the drafted decisions the target's next decisions reach, plus one; no target pass is run):
commits per round ``c`` and the share of the own drafter's gain kept, (c - 1) / (c_own - 1).
Offline rounds cost no target pass, so many more prompts fit than in ``python -m
workbench.calib_table`` (docs/results-transfer-sets.md compares the two). Recordings are cached
under ``--cache``; the results are written (atomically) after each source.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout
from spotref import names  # noqa: E402
from spotref.calib import calibrate as cal  # noqa: E402
from spotref.calib import fit as calib_fit  # noqa: E402
from spotref.cli.argtypes import guarded, positive_int  # noqa: E402
from spotref.drafters.spot import SpotDrafter  # noqa: E402
from spotref.files import atomic_write_text  # noqa: E402
from spotref.load.drafters import load_drafter  # noqa: E402
from spotref.record import trajectories as tj  # noqa: E402
from spotref.record.prompts import prompts_for  # noqa: E402
from spotref.train.train_drafter import segments, simulate  # noqa: E402

HEADS = ("norm.", "head.", "skip.", "set_")  # the final norm, the output heads, the set head
ADAPTATIONS = {  # name: None (kept), "light" (calibrate-sets' fit) or the fine-tuned parameters
    "as-is": None,
    "calibrated": "light",
    "heads": lambda n: n.startswith(HEADS),
    "last-layer": lambda n: n.startswith(HEADS + ("encoder.layers.2.",)),
    "embed": lambda n: n.startswith(HEADS + ("embed.",)),
    "full": lambda n: True,
}


def cached(path: Path, make) -> tj.Trajectories:
    if path.exists():
        return tj.Trajectories.load(path)
    ds = make()
    ds.save(path)
    return ds


def test_trajectories(target, a) -> tj.Trajectories:
    """Exact threshold decoding (``--tau``, T = 0) of the first ``--test-prompts`` test prompts."""
    path = Path(a.cache, f"{target.name}-test-n{a.test_prompts}-g{a.new_tokens}-tau{a.tau:g}-T0.pt")
    prompts = prompts_for(target, a.test_prompts, "test", 64)
    model, stops = target.model, target.stop_ids
    return cached(path, lambda: tj.record(model, prompts, a.new_tokens, 0.0, (0,), stops, threshold=a.tau))


def defaults(target) -> cal.CalibOptions:
    """``spotref calibrate-sets``' options at its defaults (the drafter argument is not read)."""
    return cal.CalibOptions.parse(cal.add_arguments, [target.name, target.name])


def calibration_trajectories(target, a) -> tj.Trajectories:
    """``spotref calibrate-sets``' own recording of ``target`` at its defaults."""
    opts = defaults(target)
    return cached(Path(a.cache, f"{target.name}-calibration.pt"), lambda: cal.record_calibration(target, opts)[0])


def commits_per_round(drafter: SpotDrafter, ds: tj.Trajectories, a) -> float:
    rounds = []
    for seg in segments(ds):
        rounds += simulate(lambda r, n, d, T: drafter.draft_sets(r, n, d, r.tau), ds, seg, a.budget, a.depth, 0.0)
    return float(np.mean(rounds))


def adapted(source: str, target, calib: tj.Trajectories, how, a) -> tuple:
    """(the adapted SpotDrafter, numbers changed, CPU seconds of the fit)."""
    d = load_drafter(source, strict=False)
    model, c0 = cal.for_block_size(d.model, target.model.block_size), time.process_time()
    if how is None:
        n = 0
    elif how == "light":  # the command's own default fit
        n = cal.fit_model(model, calib, defaults(target))["n_parameters"]
    else:
        calib_fit.fit_full(model, calib, steps=a.steps, which=how)
        n = sum(p.numel() for k, p in model.named_parameters() if how(k))
    return SpotDrafter(model, d.header), n, time.process_time() - c0


PROG = "python benchmarks/sets_adaptation.py"


def run(a: argparse.Namespace) -> int:
    target = names.target(a.target)  # an unknown target or source is refused before any work
    for source in a.sources.split(","):
        load_drafter(source, strict=False)
    torch.set_num_threads(1)
    Path(a.cache).mkdir(parents=True, exist_ok=True)
    test, calib = test_trajectories(target, a), calibration_trajectories(target, a)
    own = commits_per_round(load_drafter(a.target), test, a)
    out = {"command": f"{PROG} {' '.join(a.argv)}", "own": own, "decisions": len(test), "rows": []}
    print(f"{a.target}: {len(test)} decisions, own drafter {own:.3f} commits per round", flush=True)
    for source in a.sources.split(","):
        for name in a.adaptations.split(","):
            drafter, n, cpu = adapted(source, target, calib, ADAPTATIONS[name], a)
            c = commits_per_round(drafter, test, a)
            kept = (c - 1) / (own - 1)
            row = dict(source=source, adaptation=name, numbers=n, fit_cpu_s=round(cpu, 1), c=c, kept=kept)
            out["rows"].append(row)
            print(f"  {source:16s} {name:11s} {n:7d} numbers  c = {c:.3f}  kept {kept:.0%}  ({cpu:.0f} s)", flush=True)
        atomic_write_text(Path(a.out or Path(a.cache, f"{a.target}.json")), json.dumps(out, indent=1))
    return 0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0])
    p.add_argument("--target", required=True)
    p.add_argument("--sources", required=True, help="comma list of set drafters (names or paths)")
    p.add_argument("--test-prompts", type=positive_int, default=32)
    p.add_argument("--new-tokens", type=positive_int, default=64)
    p.add_argument("--tau", type=float, default=0.9)
    p.add_argument("--budget", type=positive_int, default=16)
    p.add_argument("--depth", type=positive_int, default=16)
    p.add_argument("--adaptations", default=",".join(ADAPTATIONS), help=f"comma list of {', '.join(ADAPTATIONS)}")
    p.add_argument("--steps", type=positive_int, default=cal.STEPS["full"], help="fine-tune steps")
    p.add_argument("--cache", default="runs/sets-adaptation")
    p.add_argument("--out", default=None)
    argv = sys.argv[1:] if argv is None else list(argv)
    a = p.parse_args(argv)
    a.argv = argv
    unknown = [x for x in a.adaptations.split(",") if x not in ADAPTATIONS]
    if unknown or not 0.0 < a.tau < 1.0:
        p.error(f"unknown adaptations {unknown}" if unknown else f"--tau must be in (0, 1), got {a.tau:g}")
    return guarded(PROG, lambda: run(a))


if __name__ == "__main__":
    raise SystemExit(main())
