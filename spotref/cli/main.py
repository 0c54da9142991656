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


def entry(name: str, which: int, commands: dict | None = None):
    """The chosen command's add-options (which=2) or run (which=3) function, its module imported now."""
    commands = COMMANDS if commands is None else commands
    module = importlib.import_module(commands[name][1])
    return getattr(module, commands[name][which])


def parser_for(command: str | None, commands: dict | None = None, prog: str = "spotref", about=None):
    """``prog``'s parser over ``commands`` (default: spotref's; ``about``: its description); only
    ``command``'s options are built (the others' imports cost)."""
    commands = COMMANDS if commands is None else commands
    parser = argparse.ArgumentParser(prog=prog, description=about or __doc__.splitlines()[0], allow_abbrev=False)
    parser.add_argument("--version", action="version", version=f"spotref {version()}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, (help, *_) in commands.items():
        p = sub.add_parser(name, help=help, description=help, allow_abbrev=False)  # --targets is not --targets-dir
        if name == command:
            entry(name, 2, commands)(p)
    return parser


def version() -> str:
    """The installed distribution's version (pyproject.toml's), without importing torch."""
    try:
        return importlib.metadata.version("spotref")
    except importlib.metadata.PackageNotFoundError:
        return "unknown (not installed)"


def chosen(argv: list, commands: dict | None = None) -> str | None:
    """The sub-command named on the command line (the first word that is one), or None."""
    return next((a for a in argv if a in (COMMANDS if commands is None else commands)), None)


def main(argv=None, commands: dict | None = None, prog: str = "spotref", about: str | None = None) -> int:
    """Run the command ``argv`` names from ``commands`` (default: spotref's; the repository's
    workbench passes its own, ``python -m workbench``, and its ``about``)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    commands = COMMANDS if commands is None else commands
    command = chosen(argv, commands)

    def run() -> int:
        args = parser_for(command, commands, prog, about).parse_args(argv)
        args.argv = argv[argv.index(args.command) + 1 :]  # after the command name (for reports)
        return run_allowed(entry(args.command, 3, commands), args) or 0

    return guarded(f"{prog} {command}" if command else prog, run)


if __name__ == "__main__":
    sys.exit(main())
