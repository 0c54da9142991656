"""Train the universal drafter, one order model for several bundled targets:
``python -m workbench train-universal NAME --targets A,B[:PROMPTS] --held-out C``.

Batches alternate between the targets' trajectories (``--turns`` batches per cycle each), each
target is measured on its own held-out prompts (the --held-out ones too), and the checkpoint is
saved with ``any_block_size`` (``spotref.load_drafter`` runs it on a target of any block size)
and without a target fingerprint. ``--sets-only`` trains one set head on several targets, the
order model kept. Every other option is ``spotref train-drafter``'s (``spotref.train.train_drafter``),
whose recording, training and saving this uses; the shipped ``universal`` drafter was made so.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from dataclasses import dataclass

import torch

from spotref.cli.argtypes import tool_main
from spotref.train import train_drafter as td

PROG = "python -m workbench train-universal"


def target_list(text: str) -> tuple:
    """``--targets`` / ``--held-out``: ``NAME[:PROMPTS],...`` -> ((name, prompts or None), ...);
    ``ValueError`` naming a malformed entry."""
    out = []
    for item in text.split(","):
        name, _, n = item.strip().partition(":")
        if not name or (n and not (n.isdigit() and int(n) > 0)):
            raise ValueError(f"a target list needs NAME[:PROMPTS] entries separated by commas, got {item!r}")
        out.append((name, int(n) if n else None))
    return tuple(out)


def turn_list(text: str) -> tuple:
    """``--turns``: ``NAME=K,...`` -> ((name, K), ...), K >= 1; ``ValueError`` naming a malformed entry."""
    out = []
    for item in text.split(","):
        name, _, k = item.strip().partition("=")
        if not name or not (k.isdigit() and int(k) > 0):
            raise ValueError(f"--turns needs NAME=K entries (K >= 1) separated by commas, got {item!r}")
        out.append((name, int(k)))
    return tuple(out)


def add_arguments(p: argparse.ArgumentParser) -> None:
    """``spotref train-drafter``'s options, and the targets of one drafter."""
    td.add_arguments(p)
    p.add_argument(
        "--targets",
        type=target_list,
        required=True,
        help="train one drafter on the trajectories of several targets, NAME[:PROMPTS],... "
        "(PROMPTS: that target's training prompts, default --prompts); batches alternate between them",
    )
    p.add_argument(
        "--held-out",
        type=target_list,
        help="targets it does not train on, measured on their held-out prompts",
    )
    p.add_argument(
        "--turns",
        type=turn_list,
        help="batches per cycle of some targets, NAME=K,... (default 1 each); a cycle "
        "draws from every target in --targets order, then again from those with K >= 2, and so on",
    )


@dataclass(frozen=True)
class UniversalOptions(td.DrafterOptions):
    """``train-universal``'s options: ``train-drafter``'s (``target`` the drafter's name) and its targets."""

    targets: tuple = ()  # --targets: ((name, training prompts or None), ...)
    held_out: tuple | None = None  # --held-out: ((name, None), ...)
    turns: tuple | None = None  # --turns: ((name, batches per cycle), ...)


def run(args: argparse.Namespace) -> int:
    options = UniversalOptions.from_namespace(args)
    torch.set_num_threads(options.threads)
    torch.manual_seed(options.seed)
    if options.curves_only:
        raise ValueError("--curves-only re-measures one target's drafter: use spotref train-drafter")
    t0 = time.time()
    return universal_sets(options, t0) if options.sets_only else train_universal(options, t0)


def command(options: UniversalOptions) -> str:
    """The command line the checkpoint's header quotes."""
    return " ".join([PROG, *options.argv])


def cycle(names: list, turns: tuple | None) -> list:
    """Indices into ``names`` (the --targets order) of one cycle of batches: every target once,
    then those with at least 2 turns once more, and so on; ``ValueError`` for a --turns name not
    in ``names``."""
    k = dict(turns or ())
    unknown = sorted(set(k) - set(names))
    if unknown:
        raise ValueError(f"--turns names {', '.join(unknown)}, not in --targets ({', '.join(names)})")
    rounds = max(k.values(), default=1)
    return [i for r in range(rounds) for i, n in enumerate(names) if k.get(n, 1) > r]


def measured_targets(options: UniversalOptions) -> list[str]:
    """The --targets names, then the --held-out ones; ``ValueError`` for a name in both."""
    trained, held = [n for n, _ in options.targets], [n for n, _ in options.held_out or ()]
    both = sorted(set(trained) & set(held))
    if both:
        raise ValueError(f"--targets and --held-out share {', '.join(both)}: a held-out target is not trained on")
    return trained + held


def universal_data(options: UniversalOptions) -> dict:
    """{target name: (its training trajectories {T: ...}, None for a held-out target; its
    held-out trajectories {T: ...})}, each recorded (or read from the cache) with the target's
    own --targets prompt count; ``ValueError`` for a target both trained on and held out."""
    o, base = options, td.trajectory_spec(options)
    trained = dict(o.targets)
    data = {}
    for name in measured_targets(o):
        target = td.load_target(name, o.targets_dir or td.TARGETS_DIR)
        spec = dataclasses.replace(base, prompts=trained.get(name) or o.prompts)
        train_sets = {T: td.recorded(target, spec, "train", T) for T in (0.0, 1.0)} if name in trained else None
        data[name] = (train_sets, {T: td.recorded(target, spec, "test", T) for T in (0.0, 1.0)})
    return data


def per_target_accuracy(model, data: dict) -> dict:
    """{target: {"trained_on", "block_size", "heldout_accuracy" {T: ...}, "confidence_accuracy"
    {T: ...}}}: next-commit accuracy on each target's held-out prompts, printed as it goes."""
    key, out = td.order.temperature_key, {}
    for name, (train_sets, test_sets) in data.items():
        acc = {key(T): td.accuracy(model, ds) for T, ds in test_sets.items()}
        base = {key(T): td.confidence_accuracy(ds) for T, ds in test_sets.items()}
        out[name] = dict(
            trained_on=train_sets is not None,
            block_size=next(iter(test_sets.values())).block_size,
            heldout_accuracy=acc,
            confidence_accuracy=base,
        )
        role = "trained on" if train_sets is not None else "held out"
        print(
            f"{name} ({role}): held-out next-commit accuracy T=0 {acc['0']:.3f}, T=1 {acc['1']:.3f}; "
            f"stale-confidence order T=0 {base['0']:.3f}, T=1 {base['1']:.3f}"
        )
    return out


def train_universal(options: UniversalOptions, t0: float) -> int:
    """``--targets``: one order model trained on the trajectories of several targets (batches
    alternate between them, ``--turns`` batches per cycle each: ``cycle``), measured on every
    target's held-out prompts (--held-out ones too), saved with ``any_block_size``
    (``load_drafter`` runs it on any target) and without a target fingerprint (no target picks
    it for ``drafter="spot"``). No set head, curves or calibrated graph: those are per target."""
    o = options
    out = td.out_path(o)
    print(f"train-drafter: the checkpoint will be written to {out}", file=sys.stderr)
    trained = [n for n, _ in o.targets]
    order_of_turns = cycle(trained, o.turns)
    data = universal_data(o)
    parts = [td.tj.Trajectories.concat(list(tr.values())) for tr, _ in data.values() if tr is not None]
    model = td.initial_model(parts[0].block_size, o)
    print(f"trajectories: train {', '.join(f'{len(p)}' for p in parts)} states ({time.time() - t0:.0f} s)")
    td.train(model, [parts[i] for i in order_of_turns], o)
    per_target = per_target_accuracy(model, data)
    td.save_order_model(
        out,
        model,
        dict(
            target=dict(name=o.target, trained_on=trained, held_out=[n for n, _ in o.held_out or ()]),
            any_block_size=True,
            per_target=per_target,
            n_params=td.order.n_params(model),
            training=dict(
                command=command(o),
                seconds=round(time.time() - t0),
                train_states={n: len(p) for n, p in zip(trained, parts)},
                date=time.strftime("%Y-%m-%d"),
            ),
        ),
    )
    print(f"wrote {out} ({out.stat().st_size / 1e6:.2f} MB)")
    return 0


def universal_sets(options: UniversalOptions, t0: float) -> int:
    """``--targets --sets-only``: the checkpoint (``source_path``) with a fresh set
    head trained on the threshold trajectories of --targets (a batch of each in turn), its order
    model kept; held-out set accuracy on every --targets and --held-out target."""
    o, names = options, measured_targets(options)
    src, out = td.source_path(o), td.out_path(o)
    model, header = td.load_order_model(src)
    model = td.order.with_set_head(td.order.without_set_head(model))
    trained, spec = [n for n, _ in o.targets], td.trajectory_spec(o)
    data = {
        n: td.ts.recorded_sets(td.load_target(n, o.targets_dir or td.TARGETS_DIR), spec, n in trained) for n in names
    }
    parts = [td.tj.Trajectories.concat([tr for tr, _ in data[n].values()]) for n in trained]
    td.ts.train_sets(model, parts, o.set_steps, o.batch, o.lr, o.tf_depth, o.seed)
    per_target = {}
    for name, d in data.items():
        acc, base = td.ts.heldout_set_accuracy(
            model, d, f"{name} ({'trained on' if name in trained else 'held out'}): "
        )
        per_target[name] = dict(trained_on=name in trained, heldout_accuracy=acc, confidence_accuracy=base)
    header["sets"] = dict(
        taus=list(td.ts.TAUS),
        per_target=per_target,
        train_states={n: len(p) for n, p in zip(trained, parts)},
        seconds=round(time.time() - t0),
        command=command(o),
    )
    header["n_params"] = td.order.n_params(model)
    td.save_order_model(out, model, header)
    print(f"wrote {out}")
    return 0


def main(argv=None) -> int:
    return tool_main(PROG, __doc__, add_arguments, run, argv)


if __name__ == "__main__":
    sys.exit(main())
