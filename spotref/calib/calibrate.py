"""``spotref calibrate-sets DRAFTER TARGET``: a SPOT-Sets drafter adapted to a new target from at
most ``MAX_PROMPTS`` (32) of that target's prompts, in about a minute on one CPU thread.

1. Record exact threshold decoding of the target (``spotref.record.trajectories.record``, the
   recorder the trainer uses) on ``--prompts`` of its training-split prompts (never the test
   split the bench measures on), at each ``--taus`` threshold and ``--temperatures`` T.
2. Refit only ``spotref.calib.fit.CALIBRATED``: ``set_scale`` and the set head's output layer
   (``set_head.2.weight``, ``set_head.2.bias``), and the next-commit rows of the output layer and
   the feature skip (``head.weight[0]``, ``skip.weight[0]``): 248 numbers (242 for a checkpoint
   reading 48 features); ``--set-head-only``: the first three, 66 numbers.
   The encoder, the token head and the set head's hidden layer are kept bit for bit.
   ``--full``: every weight of the order model fine-tuned instead (``calib_fit.fit_full``, about
   627,000 numbers, ``--steps`` default 500): no longer light, about a minute of CPU more.
3. Write the drafter checkpoint (atomically) into ``runs/calibrate-sets-TIME/TARGET.pt`` or
   ``--out``; a shipped file only with ``--update-shipped``. Its ``config.block_size`` is the
   target's (the order model has no block-size-bound weights), so it loads as that target's
   drafter (``spotref.load_drafter(path)``, ``spotref generate --drafter PATH``); its header's
   ``target`` is the new target, and ``calibration`` says what was changed and from what: the
   source drafter, the parameter names, prompts, tokens, thresholds, temperatures, loss before
   and after, seconds (wall and CPU).

``DRAFTER`` ``auto``: the bundled set drafter (the target's own left out) whose set-head loss on
the recording is lowest, before any fit (``chosen_source``; a few seconds): which source a target
starts from matters more than the fit (docs/results-transfer-sets.md). The header's
``calibration`` lists every candidate's loss.

Refused before any work: a drafter without a set head (``spotref train-drafter NAME --sets-only``
adds one), more than 32 prompts (more data is training, not a light calibration: use
``train-drafter --sets-only``), a threshold outside (0, 1), an output that cannot be written.
Decoding stays exact whatever the drafter proposes (verification decides every commit).
"""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from spotref import names
from spotref.calib import fit as calib_fit
from spotref.checks import check_temperature
from spotref.cli.argtypes import (
    SEED_MAX,
    add_prompt_tokens,
    add_threads,
    list_of,
    positive_int,
    real_list,
    seed_int,
    temperature_arg,
    tool_main,
)
from spotref.cli.options import Options
from spotref.drafters import order
from spotref.files import check_writable, run_dir
from spotref.load.drafters import list_checkpoints, load_drafter, model_fingerprint, save_order_model
from spotref.record import trajectories as tj
from spotref.record.prompts import prompts_for
from spotref.spec.checks import check_int
from spotref.train.train_drafter import target_record

MAX_PROMPTS = 32  # the light calibration's limit (the "at most 32 prompts")
STEPS = {"light": 300, "full": 500}  # --steps' default: the output-layer fit's, --full's
TAUS = (0.9, 0.7)  # thresholds recorded by default
TEMPERATURES = (0.0, 1.0)
AUTO = "auto"  # DRAFTER: choose the bundled set drafter by its loss on the recording


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "drafter",
        help="the set drafter to adapt: a bundled drafter's name, a checkpoint path, or auto (the bundled "
        "set drafter with the lowest loss on the target's recording)",
    )
    p.add_argument("target", help="the target to adapt it to: a bundled target's name")
    p.add_argument(
        "--prompts",
        type=positive_int,
        default=MAX_PROMPTS,
        help=f"the target's training-split prompts recorded, at most {MAX_PROMPTS} (default {MAX_PROMPTS})",
    )
    p.add_argument("--new-tokens", type=positive_int, default=32, help="new tokens recorded per prompt (default 32)")
    add_prompt_tokens(p)
    p.add_argument("--taus", type=real_list(), default=list(TAUS), help="thresholds recorded (default 0.9,0.7)")
    p.add_argument(
        "--temperatures",
        type=list_of(temperature_arg, "temperatures"),
        default=list(TEMPERATURES),
        help="temperatures recorded (default 0,1)",
    )
    p.add_argument(
        "--steps",
        type=positive_int,
        help=f"fit steps (default {STEPS['light']}, milliseconds each; with --full {STEPS['full']}, 0.1 s each)",
    )
    p.add_argument("--seed", type=seed_int, default=0, help="the recording's noise seed and the fit's sampling seed")
    p.add_argument(
        "--set-head-only",
        action="store_true",
        help="refit only the set head's output layer and scale (66 numbers), keeping the next-commit rows",
    )
    p.add_argument(
        "--full",
        action="store_true",
        help="fine-tune every weight of the order model (the encoder too): no longer a light calibration",
    )
    p.add_argument("--out", default=None, help="checkpoint path (default runs/calibrate-sets-TIME/TARGET.pt)")
    p.add_argument("--targets-dir", default=None, help="load the target from this directory (default: bundled)")
    p.add_argument("--update-shipped", action="store_true", help="allow --out to replace a shipped file")
    add_threads(p)


@dataclass(frozen=True)
class CalibOptions(Options):
    drafter: str
    target: str
    prompts: int
    new_tokens: int
    prompt_tokens: int
    taus: list
    temperatures: list
    steps: int | None
    seed: int
    set_head_only: bool
    full: bool
    out: str | None
    targets_dir: str | None
    update_shipped: bool
    threads: int


def check_request(options: CalibOptions) -> None:
    """``ValueError`` for a request refused before any work (the drafter is checked on load),
    naming the option: also what ``calibrate_sets``' keyword changes pass by the parser
    (``prompts=0`` was "heldout: n must be ...", ``steps=0`` returned the drafter unfitted)."""
    o = options
    if isinstance(o.prompts, int) and o.prompts > MAX_PROMPTS:
        raise ValueError(
            f"--prompts {o.prompts}: a light calibration reads at most {MAX_PROMPTS} prompts; "
            f"for more, train the set head: spotref train-drafter NAME --sets-only"
        )
    bad = [t for t in o.taus if not 0.0 < t < 1.0]
    if bad or not o.taus:
        raise ValueError(f"--taus must be thresholds in (0, 1), got {', '.join(f'{t:g}' for t in bad) or 'none'}")
    if not o.temperatures:
        raise ValueError("--temperatures needs at least one temperature")
    check_int("prompts", o.prompts, 1, MAX_PROMPTS)
    if o.full and o.set_head_only:
        raise ValueError("--full and --set-head-only: choose one (--full fine-tunes every weight)")
    for name in ("new_tokens", "prompt_tokens") + (("steps",) if o.steps is not None else ()):
        check_int(name, getattr(o, name), 1)
    check_int("seed", o.seed, 0, SEED_MAX)
    for T in o.temperatures:
        check_temperature(T, "temperatures: a temperature")


def set_drafter(name) -> tuple:
    """(order model, header) of a drafter name or path; ``ValueError`` when it has no set head."""
    d = load_drafter(name)
    if not d.model.has_sets:
        raise ValueError(
            f"the drafter {name} has no set head (it was trained without one, as universal was, or "
            f"before SPOT-Sets): nothing to calibrate; spotref train-drafter NAME --sets-only adds one"
        )
    return d.model, d.header


def for_block_size(model: order.OrderModel, block_size: int) -> order.OrderModel:
    """A copy of ``model`` declaring ``block_size`` (the weights are block-size free: position
    features are relative to B, there is no position table)."""
    new = order.OrderModel.from_config({**model.config, "block_size": block_size})
    new.load_state_dict(model.state_dict())
    return new.eval()


def record_calibration(target, options: CalibOptions) -> tuple:
    """(exact threshold trajectories of ``target`` on its first ``--prompts`` training prompts,
    how many prompts were used: a text shorter than ``--prompt-tokens`` is left out, with a warning)."""
    o = options
    prompts = prompts_for(target, o.prompts, "train", o.prompt_tokens)
    if not prompts:
        raise ValueError(f"{target.name}: no training prompt of at least {o.prompt_tokens} tokens (--prompt-tokens)")
    parts = [
        tj.record(
            target.model,
            prompts,
            o.new_tokens,
            T,
            (o.seed,),
            target.stop_ids,
            desc=f"record T={T:g} tau={tau:g}",
            threshold=tau,
        )
        for T in o.temperatures
        for tau in o.taus
    ]
    return tj.Trajectories.concat(parts), len(prompts)


def calibrate_sets(drafter, target, options: CalibOptions | None = None, recorded=None, **changes) -> tuple:
    """(calibrated order model, its checkpoint header) of set drafter ``drafter`` (a name or a
    path) adapted to ``target`` (a bundled target's name or a ``Target``). ``options`` default to
    the command's defaults; ``changes`` replace fields (``prompts=8, new_tokens=16``);
    ``recorded``: ``record_calibration``'s result for these options, reused (else recorded here)."""
    o = options or CalibOptions.parse(add_arguments, [str(drafter), str(getattr(target, "name", target))])
    o = CalibOptions(**{**{k: getattr(o, k) for k in o.names()}, **changes})
    check_request(o)
    if not isinstance(target, str) and not all(hasattr(target, a) for a in ("model", "heldout", "encode")):
        raise ValueError(f"target must be a bundled target's name or a spotref Target, got {type(target).__name__}")
    auto = drafter == AUTO
    source, header = (None, None) if auto else set_drafter(drafter)
    target = names.target(target, o.targets_dir) if isinstance(target, str) else target
    t0, c0 = time.time(), time.process_time()
    ds, used = recorded or record_calibration(target, o)
    if auto:
        drafter, losses = chosen_source(target, ds, o.seed)
        source, header = set_drafter(drafter)
    model = for_block_size(source, target.model.block_size)
    info = dict(
        **fit_model(model, ds, o),
        source=str(drafter),
        **({"source_losses": losses} if auto else {}),
        source_target=(header.get("target") or {}).get("name"),
        prompts=used,
        new_tokens=o.new_tokens,
        prompt_tokens=o.prompt_tokens,
        taus=list(o.taus),
        temperatures=list(o.temperatures),
        states=len(ds),
        seed=o.seed,
        seconds=round(time.time() - t0, 1),
        cpu_seconds=round(time.process_time() - c0, 1),
    )
    meta = {k: v for k, v in header.items() if k not in ("format", "version", "config")}
    return model, {**meta, "target": target_record(target), "calibration": info}


def chosen_source(target, ds: tj.Trajectories, seed: int = 0) -> tuple[str, dict]:
    """(``auto``'s source: the bundled set drafter with the lowest set-head loss on the recording
    ``ds`` as it stands, {each candidate: its loss}). The target's own drafter (by name, or by the
    target fingerprint in its header) is not a candidate; ``ValueError`` when none is left."""
    rows, depths = calib_fit.examples(ds, seed=seed)
    own, losses = model_fingerprint(target.model), {}
    for name in list_checkpoints():
        d = load_drafter(name)
        if d.model.has_sets and name != target.name and (d.header.get("target") or {}).get("fingerprint") != own:
            model = for_block_size(d.model, target.model.block_size)
            losses[name] = round(calib_fit.set_nll(model, ds, rows, depths), 5)
    if not losses:
        raise ValueError(f"auto: no bundled set drafter other than {target.name}'s own to choose from")
    return min(losses, key=losses.get), losses


def fit_model(model: order.OrderModel, ds, o: CalibOptions) -> dict:
    """Fit ``model`` in place as ``o`` asks; {parameters (names), n_parameters, steps, examples
    (the loss is measured on), loss_before, loss_after}."""
    steps = o.steps or STEPS["full" if o.full else "light"]
    if o.full:
        n = sum(p.numel() for p in model.parameters())
        losses = calib_fit.fit_full(model, ds, steps=steps, seed=o.seed)
        return dict(parameters=["every weight"], n_parameters=n, steps=steps, **losses)
    data, next_commit = calib_fit.frozen(model, ds, seed=o.seed), not o.set_head_only
    losses = calib_fit.fit(model, data, steps=steps, next_commit=next_commit)
    params = list(calib_fit.CALIBRATED if next_commit else calib_fit.SET_HEAD_ONLY)
    n = calib_fit.n_calibrated(model, next_commit)
    return dict(parameters=params, n_parameters=n, steps=steps, examples=len(data), **losses)


def out_path(options: CalibOptions) -> Path:
    target = Path(options.target).stem if options.target.endswith(".json") else options.target
    return check_writable(options.out or run_dir("calibrate-sets") / f"{target}.pt")


def run(args: argparse.Namespace) -> int:
    o = CalibOptions.from_namespace(args)
    torch.set_num_threads(o.threads)
    check_request(o)
    if o.drafter != AUTO:
        set_drafter(o.drafter)  # refused before a run directory is made
    out = out_path(o)
    model, header = calibrate_sets(o.drafter, o.target, o)
    save_order_model(out, model, header)
    c = header["calibration"]
    if "source_losses" in c:
        print(f"auto: {c['source']} (set-head loss on the recording: {c['source_losses']})")
    print(
        f"calibrated {c['n_parameters']} parameters ({', '.join(c['parameters'])}) on {c['states']} states "
        f"of {o.target}: loss {c['loss_before']:.4f} -> {c['loss_after']:.4f}; "
        f"{c['seconds']:.0f} s ({c['cpu_seconds']:.0f} s CPU)"
    )
    print(f"wrote {out}")
    return 0


def main(argv=None) -> int:
    return tool_main("python -m spotref.calib.calibrate", __doc__, add_arguments, run, argv)


if __name__ == "__main__":
    raise SystemExit(main())
