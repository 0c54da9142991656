"""The universal drafter against each target's own: held-out next-commit accuracy and target
passes saved over exact decoding, on every bundled target.

    python benchmarks/universal_drafter.py [--drafter universal] [--prompts 2] [--new-tokens 64]
        [--budget 64] [--depth 32] [--temperature 0] [--test-prompts 16] [--out runs/universal/measure.json]
        [--compare OTHER] [--offline]

Per target: accuracy (``train_drafter.accuracy``, depth 0) of the universal and the own drafter
on the same recorded held-out states (``--test-prompts`` per temperature, T = 0 and 1, the
trajectory cache ``--data-dir``), and ``generate`` on the first ``--prompts`` test prompts at
budget N and depth D: passes of exact decoding, of the own drafter and of the universal one,
and the share of the own drafter's gain (exact - own passes) the universal one keeps. Every
drafted run's tokens are asserted equal to exact decoding's. ``--compare OTHER`` measures a second
drafter (a name or a path) beside it on the same states and runs (``compare`` entries).
``--offline`` replaces ``generate`` by SPOT rounds simulated along the recorded held-out
trajectories at the same N, D and T (``train_drafter.simulate``, all ``--test-prompts`` prompts,
every state after a block's first): ``offline`` entries, the rounds of each drafter against the
states exact decoding steps through (no target pass is run, so it costs the drafter's calls
only). Results are written (atomically) after each target, so a cut run keeps what it measured.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout
import spotref  # noqa: E402
from spotref.cli.argtypes import guarded, positive_int, temperature_arg  # noqa: E402
from spotref.files import atomic_write_text  # noqa: E402
from spotref.load.drafters import load_drafter  # noqa: E402
from spotref.load.targets import list_targets  # noqa: E402
from spotref.record.prompts import TrajectorySpec, prompts_for, recorded  # noqa: E402
from spotref.train.train_drafter import accuracy, segments, simulate  # noqa: E402

TARGETS = ("gsm-b32", "gsm-b16", "stdlib-b32", "stdlib-b16", "stdlib-b32-d192", "gsm-llada", "gsm-dream")


def passes(target, drafter, prompts, o) -> tuple:
    """(total passes over the prompts, the tokens of each run)."""
    total, tokens = 0, []
    for p in prompts:
        r = spotref.generate(
            target.model,
            p,
            o.new_tokens,
            temperature=o.temperature,
            drafter=drafter,
            budget=o.budget,
            depth=o.depth,
            stop_ids=target.stop_ids,
        )
        total, tokens = total + r.passes, tokens + [r.tokens]
    return total, tokens


def share_of_gain(exact: int, own: int, other: int) -> float | None:
    """The share of the own drafter's gain (exact - own passes or rounds) that ``other`` keeps;
    None where the own drafter gains nothing."""
    return (exact - other) / (exact - own) if exact > own else None


def offline_rounds(drafter, ds, o) -> int:
    """SPOT rounds at budget ``o.budget``, depth ``o.depth`` and temperature ``o.temperature``
    simulated along every recorded block trajectory of ``ds`` (exact decoding: ``len(ds)``)."""
    draft = lambda r, N, D, T: drafter.draft(r, N, D)  # noqa: E731
    return sum(len(simulate(draft, ds, seg, o.budget, o.depth, o.temperature)) for seg in segments(ds))


def offline(ds, drafters: tuple, o) -> dict:
    """{"exact": states, label: rounds, ..., "share_of_own_gain": {label: ...}} on ``ds`` for
    ``drafters`` ((label, drafter), ...; one labelled "own")."""
    row = {"exact": len(ds), **{label: offline_rounds(d, ds, o) for label, d in drafters}}
    share = {label: share_of_gain(row["exact"], row["own"], row[label]) for label, _ in drafters if label != "own"}
    return {**row, "share_of_own_gain": share}


def measure(name: str, universal, o, compare=None) -> dict:
    target = spotref.load_target(name)
    own = load_drafter(name)
    spec = TrajectorySpec(o.data_dir, o.test_prompts, o.test_prompts, 60, 64, 128, 1)
    acc, sets = {}, {}
    for T in (0.0, 1.0):
        ds = sets[T] = recorded(target, spec, "test", T)
        acc[f"{T:g}"] = {"universal": accuracy(universal.model, ds), "own": accuracy(own.model, ds)}
        if compare is not None:
            acc[f"{T:g}"]["compare"] = accuracy(compare.model, ds)
    drafters = (("own", own), ("universal", universal)) + ((("compare", compare),) if compare is not None else ())
    if o.offline:
        ds = sets[o.temperature] if o.temperature in sets else recorded(target, spec, "test", o.temperature)
        return {"accuracy": acc, "offline": offline(ds, drafters, o)}
    prompts = prompts_for(target, o.prompts, "test", 64)
    exact, want = passes(target, None, prompts, o)
    row = {"accuracy": acc, "exact_passes": exact}
    for label, d in drafters:
        n, got = passes(target, d, prompts, o)
        assert got == want, f"{name}: the {label} drafter's tokens differ from exact decoding"
        row[f"{label}_passes"] = n
    row["share_of_own_gain"] = share_of_gain(exact, row["own_passes"], row["universal_passes"])
    if compare is not None:
        row["compare_share_of_own_gain"] = share_of_gain(exact, row["own_passes"], row["compare_passes"])
    return row


PROG = "python benchmarks/universal_drafter.py"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog=PROG, description=__doc__.splitlines()[0])
    p.add_argument("--drafter", default="universal")
    p.add_argument("--compare", default=None, help="another drafter measured beside it on the same runs")
    p.add_argument("--targets", default=",".join(TARGETS))
    p.add_argument("--prompts", type=positive_int, default=2)
    p.add_argument("--new-tokens", type=positive_int, default=64)
    p.add_argument("--budget", type=positive_int, default=64)
    p.add_argument("--depth", type=positive_int, default=32)
    p.add_argument("--temperature", type=temperature_arg, default=0.0)
    p.add_argument("--test-prompts", type=positive_int, default=16)
    p.add_argument("--data-dir", default="runs/drafter-data")
    p.add_argument("--offline", action="store_true", help="simulated rounds on the recorded trajectories, no generate")
    p.add_argument("--out", default="runs/universal/measure.json")
    o = p.parse_args(argv)
    unknown = [t for t in o.targets.split(",") if t not in list_targets()]
    if unknown:
        p.error(f"--targets: unknown target {', '.join(map(repr, unknown))}; known: {', '.join(list_targets())}")
    return guarded(PROG, lambda: run(o))


def run(o) -> int:
    torch.set_num_threads(1)
    universal = load_drafter(o.drafter)
    compare = load_drafter(o.compare) if o.compare else None
    results = {
        "drafter": o.drafter,
        "compare": o.compare,
        "header_target": universal.header.get("target"),
        "args": vars(o),
        "targets": {},
    }
    for name in o.targets.split(","):
        t0 = time.time()
        results["targets"][name] = row = measure(name, universal, o, compare)
        row["seconds"] = round(time.time() - t0)
        print(name, json.dumps(row), flush=True)
        atomic_write_text(Path(o.out), json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
