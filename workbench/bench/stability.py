"""Token stability: how often the stale coupled token is the token the target commits.

``python -m workbench.bench.stability [TARGET ...]`` writes ``runs/stability-TIME/stability.md`` (``--out``;
``--update-shipped`` replaces the committed ``docs/stability.md``), atomically.

SPOT drafts tokens from the stale distributions (docs/spec.md section 3), so its acceptance is bounded by
how often they are right, whatever the order drafter does. On recorded held-out trajectories of
exact decoding (``spotref.record.trajectories``), for the true commit d steps ahead of a state (d = 0:
the very next one), the share of commits whose token is the coupled stale token (top-1), and the
share where it is that token or the runner-up (top-2: what a second-token branch can catch).
The paper's premise: over 90% on SDAR-8B.

The same rates split two ways: by the class of the committed token (``CLASSES``: a stop id, digits
only, anything else, by the target's tokenizer decoding of that one token), so that end-of-text
fill is counted apart; and by the stale confidence of the coupled token at the committed position
(its probability under the stale distribution, as docs/spec.md section 2 defines confidence; ``BUCKETS``).
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass
from functools import cache

import numpy as np
import torch

from spotref.cli.argtypes import add_prompt_tokens, add_threads, positive_int, tool_main
from spotref.cli.options import Options
from spotref.cli.report import table
from spotref.files import atomic_write_text, check_writable, run_dir
from spotref.load.targets import TARGETS_DIR, list_targets, load_target
from spotref.record import trajectories as tj
from spotref.record.prompts import TrajectorySpec, recorded

DEPTHS = (0, 1, 3, 7)
CLASSES = ("end-of-text", "digits", "other")
BUCKETS = (0.5, 0.9)  # stale-confidence edges
BUCKET_NAMES = ("[0, 0.5)", "[0.5, 0.9)", "[0.9, 1]")
SHIPPED = "docs/stability.md"


def outcomes(ds: tj.Trajectories, depth: int) -> dict:
    """Per state with a true commit ``depth`` steps ahead: the committed token (``tok``), whether
    the coupled stale token is it (``top1``), or it or the runner-up (``top2``), and the coupled
    token's stale probability (``conf``)."""
    a = ds.arrays
    pos = a["fut_pos"][:, depth].astype(np.int64)  # (S,) -1: block ended
    rows = np.flatnonzero(pos >= 0)
    d = min(depth, a["ctok"].shape[1] - 1)
    p, tok = pos[rows], a["fut_tok"][rows, depth]  # (S',)
    top1 = a["ctok"][rows, d, p] == tok  # ctok: (S, DEPTH + 1, B)
    return dict(
        tok=tok, top1=top1, top2=top1 | (a["ctok2"][rows, d, p] == tok), conf=a["pc"][rows, d, p].astype(np.float32)
    )


def rates(ds: tj.Trajectories, depth: int, where=None) -> tuple[float, float, int]:
    """(top-1 rate, top-2 rate, commits counted) for the true commit ``depth`` steps ahead;
    ``where(outcomes) -> bool mask`` keeps only some of the commits."""
    o = outcomes(ds, depth)
    keep = np.ones(len(o["tok"]), bool) if where is None else where(o)
    if not keep.any():
        return float("nan"), float("nan"), 0
    return float(o["top1"][keep].mean()), float(o["top2"][keep].mean()), int(keep.sum())


def token_classes(tokenizer, stop_ids):
    """``classify(tokens) -> labels``: a stop id is "end-of-text", a token that decodes to digits
    alone (surrounding whitespace aside) is "digits", any other is "other"."""
    stops = set(stop_ids or ())

    @cache
    def one(t: int) -> str:
        if t in stops:
            return CLASSES[0]
        text = tokenizer.decode([t]).strip()
        return CLASSES[1] if text and all(c in "0123456789" for c in text) else CLASSES[2]

    return lambda tokens: np.array([one(int(t)) for t in tokens], dtype=object)


def bucket(conf: np.ndarray) -> np.ndarray:
    """The stale-confidence bucket of each commit (``BUCKET_NAMES``)."""
    return np.array(BUCKET_NAMES, dtype=object)[np.digitize(conf, BUCKETS)]


def cells(ds: tj.Trajectories, depths=DEPTHS, where=None) -> list:
    """Commits at d = 0, then "top-1 / top-2" per depth ("-" where nothing is counted)."""
    r = [rates(ds, d, where) for d in depths]
    return [r[0][2]] + [f"{a:.3f} / {b:.3f}" if n else "-" for a, b, n in r]


def table_rows(name: str, data: dict, depths=DEPTHS) -> list:
    """One row per temperature: target, T, commits at d = 0, then a cell per depth."""
    return [[name, f"{T:g}"] + cells(ds, depths) for T, ds in data.items()]


def split_rows(name: str, data: dict, label, names, depths=DEPTHS) -> list:
    """One row per temperature and group: ``label(outcomes) -> labels`` puts each commit in one of
    ``names``; a group with no commit at any depth is left out."""
    out = []
    for T, ds in data.items():
        for g in names:
            row = cells(ds, depths, where=lambda o, g=g: label(o) == g)
            if any(c != "-" for c in row[1:]):
                out.append([name, f"{T:g}", g] + row)
    return out


def target_tables(target, data: dict) -> tuple[list, list, list]:
    """The three tables' rows for one target: overall, by token class, by stale confidence."""
    classify = token_classes(target.tokenizer, target.stop_ids)
    return (
        table_rows(target.name, data),
        split_rows(target.name, data, lambda o: classify(o["tok"]), CLASSES),
        split_rows(target.name, data, lambda o: bucket(o["conf"]), BUCKET_NAMES),
    )


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("targets", nargs="*", help="targets (default: all in --targets-dir)")
    p.add_argument("--targets-dir", default=None, help="load targets from here (default: bundled)")
    p.add_argument("--test-prompts", type=positive_int, default=10, help="held-out prompts per target")
    add_prompt_tokens(p)
    p.add_argument("--new-tokens", type=positive_int, default=128, help="new tokens per prompt")
    p.add_argument("--data-dir", default="runs/drafter-data", help="trajectory cache")
    p.add_argument("--out", default=None, help="report path (default: runs/stability-TIME/stability.md)")
    add_threads(p)
    p.add_argument("--update-shipped", action="store_true", help=f"write the committed {SHIPPED}")


@dataclass(frozen=True)
class StabilityOptions(Options):
    """The options of ``python -m workbench.bench.stability``."""

    targets: list[str]  # the targets to measure (empty: all in --targets-dir)
    targets_dir: str | None  # None: the bundled targets
    test_prompts: int  # held-out prompts per target
    prompt_tokens: int  # tokens per prompt (a text to continue is cut to this)
    new_tokens: int  # new tokens per prompt
    data_dir: str  # the trajectory cache
    out: str | None  # --out, the report path (None: runs/stability-TIME/stability.md)
    threads: int  # torch CPU threads
    update_shipped: bool  # write the committed SHIPPED report


def trajectory_spec(options: StabilityOptions) -> TrajectorySpec:
    """What the report records (``prompts.recorded``): the held-out prompts only, one seed."""
    o = options
    return TrajectorySpec(
        data_dir=o.data_dir,
        prompts=0,
        test_prompts=o.test_prompts,
        set_prompts=0,
        prompt_tokens=o.prompt_tokens,
        new_tokens=o.new_tokens,
        seeds=1,
    )


def run(args: argparse.Namespace) -> int:
    options = StabilityOptions.from_namespace(args)
    torch.set_num_threads(options.threads)
    if options.update_shipped and options.out:
        raise ValueError(f"--update-shipped writes {SHIPPED}: leave out --out")
    directory = options.targets_dir or TARGETS_DIR
    names = chosen_targets(options.targets, directory)
    out = check_writable(SHIPPED if options.update_shipped else options.out or run_dir("stability") / "stability.md")
    spec = trajectory_spec(options)
    tables = ([], [], [])
    for name in names:
        target = load_target(name, directory)
        data = {T: recorded(target, spec, "test", T) for T in (0.0, 1.0)}
        for rows, more in zip(tables, target_tables(target, data)):
            rows += more
    text = report(options, *tables)
    atomic_write_text(out, text)
    print(text)
    return 0


def chosen_targets(names: list[str], directory) -> list[str]:
    """The targets named (every one in ``directory`` when none is); ``ValueError`` naming the unknown."""
    known = list_targets(directory)
    unknown = [t for t in names if t not in known]
    if unknown:
        raise ValueError(f"unknown target(s) {', '.join(unknown)} in {directory}; known: {', '.join(known) or 'none'}")
    return names or known


def report(options: StabilityOptions, overall: list, by_class: list, by_conf: list) -> str:
    depth_cols = [f"d = {d}: top-1 / top-2" for d in DEPTHS]
    return "\n".join(
        [
            "# Token stability of the bundled targets (generated by `python -m workbench.bench.stability`)",
            "",
            f"Command: `python -m workbench.bench.stability {' '.join(options.argv)}`  ",
            f"Date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; {options.test_prompts} held-out prompts x "
            f"{options.new_tokens} new tokens per target and temperature (exact decoding, seed 0)",
            "",
            "For the true commit d steps ahead of a recorded state: the share whose token is the coupled "
            "stale token (top-1) / that token or the runner-up (top-2). SPOT's tokens come from these "
            "stale distributions, so a draft path of length d + 1 needs every one of its tokens right; "
            "the paper's premise (SDAR-8B) is over 90% at d = 0.",
            "",
            table(["target", "T", "states"] + depth_cols, overall),
            "",
            "## By token class",
            "",
            "The committed token's class, by the target's tokenizer decoding of it: `end-of-text` (a stop "
            "id: the fill after an answer), `digits` (digits only), `other`. `commits`: at d = 0.",
            "",
            table(["target", "T", "token", "commits"] + depth_cols, by_class),
            "",
            "## By stale confidence",
            "",
            "The stale probability of the coupled token at the committed position (its confidence, docs/spec.md "
            "section 2, under the stale distribution). `commits`: at d = 0.",
            "",
            table(["target", "T", "stale confidence", "commits"] + depth_cols, by_conf),
            "",
        ]
    )


def main(argv=None) -> int:
    return tool_main("python -m workbench.bench.stability", __doc__, add_arguments, run, argv)


if __name__ == "__main__":
    sys.exit(main())
