"""The spotref command: demo (the main job), and one sub-command per job.

Each sub-command is a pair ``add_NAME(parser)`` / ``run_NAME(args)`` registered in
``COMMANDS`` with its one-line help. Only the chosen sub-command's options are built, and heavy
imports (torch) happen inside ``run_NAME``, so ``spotref --help`` stays fast. Bad values of an
option are argparse errors naming it (exit status 2, ``spotref.argtypes``); a bad input found
later is one line ``spotref CMD: error: ...`` (exit status 2); Ctrl-C prints ``interrupted``
and exits with status 130, without a traceback.
"""
from __future__ import annotations

import argparse
import sys

from spotref.argtypes import int_list, nonneg_int, positive_int, seed_int


def add_demo(p):
    p.add_argument("--prompts", type=positive_int, default=4, help="number of held-out prompts (>= 1)")
    p.add_argument("--gen-length", type=positive_int, default=64, help="new tokens per prompt")
    p.add_argument("--temperature", type=float, default=0.0, help="sampling temperature T (0: argmax)")
    p.add_argument("--budgets", type=int_list(1), default=[16],
                   help="comma list of node budgets N (default 16)")
    p.add_argument("--no-auto", dest="budget_auto", action="store_false",
                   help="skip the budget='auto' row (the cost model's N for this machine)")
    p.add_argument("--depth", type=nonneg_int, default=8, help="tree depth cap D")
    p.add_argument("--seed", type=seed_int, default=0, help="noise seed, in [0, 2**64 - 1]")
    p.add_argument("--drafter", default=None,
                   help="drafter name (default: spot when the target ships one, else confidence)")
    p.add_argument("--fused-store", action="store_true",
                   help="store each finished block inside the next block's first pass (one pass fewer per block)")
    p.add_argument("--model", default="default",
                   help="bundled target name, 'default' (the default target, else random) or 'random'")


def run_demo(args) -> int:
    from spotref.demo import demo
    return demo(args)


COMMANDS = {"demo": ("exact vs SPOT decoding side by side, outputs checked identical", add_demo, run_demo)}


def add_generate(p):
    from_cli_models("add_model_args")(p, drafter_default="confidence")


def run_generate(args) -> int:
    return from_cli_models("generate_command")(args)


MAX_BATCH_ROWS = 4096           # a batched denoise of R rows holds R full activations


def add_audit(p):
    from spotref.argtypes import int_range
    from_cli_models("add_model_args")(p, drafter_default="confidence")
    p.set_defaults(max_new_tokens=64)
    p.add_argument("--batch-rows", type=int_range(0, MAX_BATCH_ROWS), default=8,
                   help=f"batch-invariance check rows, at most {MAX_BATCH_ROWS} (0: skip the check)")


def run_audit(args) -> int:
    return from_cli_models("audit_command")(args)


def from_cli_models(name):
    from spotref import cli_models
    return getattr(cli_models, name)


COMMANDS.update(
    generate=("decode with a checkpoint directory or a bundled target", add_generate, run_generate),
    audit=("exact vs speculative decoding: identical, or the first divergence", add_audit, run_audit))


def add_module_command(p, module):
    """A sub-command whose options and entry point live in ``module`` (add_arguments / run)."""
    import importlib
    importlib.import_module(module).add_arguments(p)


def module_runner(module):
    def run(args) -> int:
        import importlib
        return importlib.import_module(module).run(args)
    return run


for _name, _module, _help in [
        ("train-target", "spotref.train", "train a bundled SDAR target (BD3-LM objective) in runs/NAME/"),
        ("bench", "spotref.bench", "every drafter side by side on every bundled target; writes a report "
                                   "into runs/bench-TIME/ (docs/results.md with --update-shipped)"),
        ("train-drafter", "spotref.train_drafter", "record trajectories and train a SPOT order model "
                                                   "(into runs/drafter-TIME/ unless --out or --update-shipped)")]:
    COMMANDS[_name] = (_help, lambda p, m=_module: add_module_command(p, m), module_runner(_module))


def parser_for(command: str | None) -> argparse.ArgumentParser:
    """The ``spotref`` parser; only ``command``'s options are built (the others' imports cost)."""
    parser = argparse.ArgumentParser(prog="spotref", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, (help, add, _) in COMMANDS.items():
        p = sub.add_parser(name, help=help, description=help)
        if name == command:
            add(p)
    return parser


def chosen(argv: list) -> str | None:
    """The sub-command named on the command line (the first word that is one), or None."""
    return next((a for a in argv if a in COMMANDS), None)


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    command = chosen(argv)

    def run() -> int:
        args = parser_for(command).parse_args(argv)
        args.argv = argv[argv.index(args.command) + 1:]            # after the command name (for reports)
        return COMMANDS[args.command][2](args) or 0
    return guarded(f"spotref {command}" if command else "spotref", run)


def guarded(prog: str, run) -> int:
    """``run()``'s exit status; bad input (ValueError) is one line and status 2, a missing
    optional package or an unwritable file one line and status 1, Ctrl-C one line and 130."""
    try:
        return run()
    except KeyboardInterrupt:          # Ctrl-C: one line, the shell's status for SIGINT
        print(f"{prog}: interrupted", file=sys.stderr)
        return 130
    except ValueError as e:            # bad input: one clear line, no traceback
        print(f"{prog}: error: {e}", file=sys.stderr)
        return 2
    except (ImportError, OSError) as e:
        print(f"{prog}: error: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
