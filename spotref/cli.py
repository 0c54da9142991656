"""The ``spotref`` command: ``demo`` (the main job), and one sub-command per job.

Each sub-command is a pair ``add_NAME(subparsers)`` / ``run_NAME(args)`` registered in
``COMMANDS``; heavy imports happen inside ``run_NAME`` so ``spotref --help`` stays fast.
"""
from __future__ import annotations

import argparse
import sys


def add_demo(sub):
    p = sub.add_parser("demo", help="exact vs SPOT decoding side by side, outputs checked identical")
    p.add_argument("--prompts", type=int, default=4, help="number of prompts")
    p.add_argument("--gen-length", type=int, default=64)
    p.add_argument("--temperature", type=float, default=0.0)
    p.add_argument("--budgets", type=lambda t: [int(x) for x in t.split(",")], default=[16],
                   help="comma list of node budgets N (default 16)")
    p.add_argument("--no-auto", dest="budget_auto", action="store_false",
                   help="skip the budget='auto' row (the cost model's N for this machine)")
    p.add_argument("--depth", type=int, default=8)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--drafter", default=None,
                   help="drafter name (default: spot when the target ships one, else confidence)")
    p.add_argument("--fused-store", action="store_true",
                   help="store each finished block inside the next block's first pass (one pass fewer per block)")
    p.add_argument("--model", default="default",
                   help="bundled target name, 'default' (the default target, else random) or 'random'")


def run_demo(args) -> int:
    from spotref.demo import demo
    return demo(args)


COMMANDS = {"demo": (add_demo, run_demo)}


def add_generate(sub):
    p = sub.add_parser("generate", help="decode with a checkpoint directory or a bundled target")
    from_cli_models("add_model_args")(p, drafter_default="confidence")


def run_generate(args) -> int:
    return from_cli_models("generate_command")(args)


def add_audit(sub):
    p = sub.add_parser("audit", help="exact vs speculative decoding: identical, or the first divergence")
    from_cli_models("add_model_args")(p, drafter_default="confidence")
    p.set_defaults(max_new_tokens=64)
    p.add_argument("--batch-rows", type=int, default=8, help="batch-invariance check rows (0: skip)")


def run_audit(args) -> int:
    return from_cli_models("audit_command")(args)


def from_cli_models(name):
    from spotref import cli_models
    return getattr(cli_models, name)


COMMANDS.update(generate=(add_generate, run_generate), audit=(add_audit, run_audit))


def add_module_command(sub, name, module, help):
    """A sub-command whose options and entry point live in ``module`` (add_arguments / run)."""
    import importlib
    importlib.import_module(module).add_arguments(sub.add_parser(name, help=help))


def module_runner(module):
    def run(args) -> int:
        import importlib
        return importlib.import_module(module).run(args)
    return run


for _name, _module, _help in [
        ("train-target", "spotref.train", "train a bundled SDAR target (BD3-LM objective)"),
        ("bench", "spotref.bench", "every drafter side by side on every bundled target; writes docs/results.md"),
        ("train-drafter", "spotref.train_drafter", "record trajectories and train a SPOT order model")]:
    COMMANDS[_name] = (lambda sub, n=_name, m=_module, h=_help: add_module_command(sub, n, m, h),
                       module_runner(_module))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="spotref", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for add, _ in COMMANDS.values():
        add(sub)
    args = parser.parse_args(argv)
    args.argv = list(sys.argv[2:] if argv is None else argv[1:])    # after the command name (for reports)
    try:
        return COMMANDS[args.command][1](args) or 0
    except ValueError as e:            # bad input: one clear line, no traceback
        print(f"spotref {args.command}: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
