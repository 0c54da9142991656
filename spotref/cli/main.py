"""The spotref command: demo (the main job), and one sub-command per job.

``COMMANDS`` maps each sub-command to its one-line help and the module that holds its
``add_*`` (options) and ``run*`` (entry point) functions. The module is imported only when its
command is chosen, so ``spotref --help`` imports no torch. Bad values of an option are argparse
errors naming it (exit status 2, ``spotref.cli.argtypes``); a bad input found later is one
line ``spotref CMD: error: ...`` (exit status 2); Ctrl-C prints ``interrupted`` and exits with
status 130, without a traceback.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata
import sys

from spotref.cli.argtypes import guarded, run_allowed

COMMANDS = {  # name: (one-line help, module, its add-options function, its entry point)
    "demo": (
        "exact vs SPOT decoding side by side, outputs checked identical",
        "spotref.cli.demo",
        "add_arguments",
        "run",
    ),
    "generate": (
        "decode with a checkpoint directory or a bundled target",
        "spotref.cli.generate",
        "add_generate",
        "run_generate",
    ),
    "show": (
        "pictures of a decode's trace: the commit order, a round's tree, a GIF and an HTML page",
        "spotref.cli.show",
        "add_arguments",
        "run",
    ),
    "audit": (
        "exact vs speculative decoding: identical, or the first divergence",
        "spotref.cli.generate",
        "add_audit",
        "run_audit",
    ),
    "conform": (
        "the conformance suite on your decoder MODULE:FUNCTION: identical to exact decoding, or the first difference",
        "spotref.cli.conform",
        "add_arguments",
        "run",
    ),
    "train-target": (
        "train a bundled SDAR target (BD3-LM objective) in runs/NAME/",
        "spotref.train.train_target",
        "add_arguments",
        "run",
    ),
    "bench": (
        "every drafter side by side on every bundled target; writes a report into "
        "runs/bench-TIME/ (docs/results.md with --update-shipped)",
        "spotref.bench.bench",
        "add_arguments",
        "run",
    ),
    "quality": (
        "quality report of a target at T = 0 on held-out prompts (exit status 1 below the bar)",
        "spotref.bench.quality",
        "add_arguments",
        "run",
    ),
    "train-drafter": (
        "record trajectories and train a SPOT order model (into runs/drafter-TIME/ unless --out or --update-shipped)",
        "spotref.train.train_drafter",
        "add_arguments",
        "run",
    ),
    "calibrate-sets": (
        "adapt a SPOT-Sets drafter to a new target from at most 32 of its prompts (into runs/calibrate-sets-TIME/)",
        "spotref.calib.calibrate",
        "add_arguments",
        "run",
    ),
}


def entry(name: str, which: int):
    """The chosen command's add-options (which=2) or run (which=3) function, its module imported now."""
    module = importlib.import_module(COMMANDS[name][1])
    return getattr(module, COMMANDS[name][which])


def parser_for(command: str | None) -> argparse.ArgumentParser:
    """The ``spotref`` parser; only ``command``'s options are built (the others' imports cost)."""
    parser = argparse.ArgumentParser(prog="spotref", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"spotref {version()}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, (help, *_) in COMMANDS.items():
        p = sub.add_parser(name, help=help, description=help)
        if name == command:
            entry(name, 2)(p)
    return parser


def version() -> str:
    """The installed distribution's version (pyproject.toml's), without importing torch."""
    try:
        return importlib.metadata.version("spotref")
    except importlib.metadata.PackageNotFoundError:
        return "unknown (not installed)"


def chosen(argv: list) -> str | None:
    """The sub-command named on the command line (the first word that is one), or None."""
    return next((a for a in argv if a in COMMANDS), None)


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    command = chosen(argv)

    def run() -> int:
        args = parser_for(command).parse_args(argv)
        args.argv = argv[argv.index(args.command) + 1 :]  # after the command name (for reports)
        return run_allowed(entry(args.command, 3), args) or 0

    return guarded(f"spotref {command}" if command else "spotref", run)


if __name__ == "__main__":
    sys.exit(main())
