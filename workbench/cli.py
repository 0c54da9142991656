"""``python -m workbench COMMAND``: the workbench's commands, run from a checkout (spotref's own
command line, ``spotref.cli.main``, with this table)."""

import sys

from spotref.cli import main as spotref_cli

COMMANDS = {  # name: (one-line help, module, its add-options function, its entry point)
    "train-target": (
        "train a bundled SDAR target (BD3-LM objective) in runs/NAME/",
        "workbench.train.train_target",
        "add_arguments",
        "run",
    ),
    "train-universal": (
        "train one SPOT drafter on several bundled targets (the universal drafter)",
        "workbench.train.train_universal",
        "add_arguments",
        "run",
    ),
    "bench": (
        "every drafter side by side on every bundled target; writes a report into "
        "runs/bench-TIME/ (docs/results.md with --update-shipped)",
        "workbench.bench.bench",
        "add_arguments",
        "run",
    ),
    "quality": (
        "quality report of a target at T = 0 on held-out prompts (exit status 1 below the bar)",
        "workbench.bench.quality",
        "add_arguments",
        "run",
    ),
}


def main(argv=None) -> int:
    """``python -m workbench`` on ``argv`` (default: the process's): spotref's command line over ``COMMANDS``."""
    return spotref_cli.main(argv, commands=COMMANDS, prog="python -m workbench", about=__doc__.splitlines()[0])


if __name__ == "__main__":
    sys.exit(main())
