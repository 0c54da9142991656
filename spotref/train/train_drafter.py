"""Train a SPOT drafter for a target: ``python -m spotref.train.train_drafter stdlib-b32``.

1. Record exact-decoding trajectories (``spotref.record.trajectories``) at T = 0 and T = 1 on
   ``--prompts`` training prompts and ``--test-prompts`` held-out prompts (different documents).
2. Train the order model (``spotref.drafters.order``) on CPU: cross-entropy on the next commit position
   over the masked positions, teacher-forced deeper levels (from a recorded state, also the
   states after its first d true commits, d = floor(u^2 (--tf-depth + 1)), u uniform (shallow
   levels more often), with the same stale
   features and "committed in draft at depth i" marks; shallow levels drawn more often), plus a
   binary cross-entropy on whether
   the coupled stale token at the true next position is the target's token.
3. Report held-out next-commit accuracy (depth 0: argmax over masked positions == the truth)
   at T = 0 and T = 1; calibrate the ``calibrated`` baseline on the first 40 training prompts;
   measure offline acceptance curves (commits per round vs budget) for the cost model, and how
   often its drafted nodes of each path probability were reached (the per-round budget's
   calibration).
4. Train the set head for SPOT-Sets (``spotref.train.train_sets``: threshold trajectories at
   tau 0.9 / 0.7 / 0.5, the order model kept) and report its held-out set accuracy next to the
   confidence sets'; ``--sets-only`` does this step alone on an existing checkpoint.
5. Save ``runs/drafter-TIME/NAME.pt`` (or ``--out``; ``--update-shipped`` replaces the shipped
   ``spotref/load/order_models/NAME.pt``): float16 weights and a header with the block size, feature
   count, target fingerprint, accuracies, calibration and curves. Every file (the trajectory
   cache too) is written atomically; a corrupt cache file is a cache miss (recorded again).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from spotref.cli.argtypes import (
    add_prompt_tokens,
    add_threads,
    nonneg_int,
    positive_int,
    positive_real,
    seed_int,
    tool_main,
)
from spotref.cli.options import Options
from spotref.cli.report import progress
from spotref.drafters import order
from spotref.drafters.budget import calibration_table
from spotref.drafters.calibrated import CalibratedDrafter, calibrate
from spotref.drafters.spot import SpotDrafter
from spotref.files import check_writable, run_dir
from spotref.load.drafters import ORDER_DIR, load_order_model, model_fingerprint, save_order_model
from spotref.load.targets import TARGETS_DIR, load_target
from spotref.record import trajectories as tj
from spotref.record.prompts import TrajectorySpec, recorded
from spotref.train import train_sets as ts


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("target", help="bundled target name (spotref.list_targets())")
    p.add_argument("--prompts", type=positive_int, default=120, help="training prompts per temperature")
    p.add_argument("--test-prompts", type=positive_int, default=24, help="held-out prompts per temperature")
    p.add_argument("--seeds", type=positive_int, default=2, help="noise seeds per prompt at T = 1")
    add_prompt_tokens(p)
    p.add_argument("--new-tokens", type=positive_int, default=128, help="new tokens recorded per prompt")
    p.add_argument("--steps", type=positive_int, default=1500, help="training steps")
    p.add_argument("--batch", type=positive_int, default=64, help="examples per step")
    p.add_argument("--lr", type=positive_real, default=1e-3, help="peak learning rate")
    p.add_argument("--tf-depth", type=nonneg_int, default=12, help="teacher-forced levels below a recorded state")
    p.add_argument(
        "--calib-prompts", type=positive_int, default=40, help="training prompts the calibrated baseline is fitted on"
    )
    p.add_argument("--data-dir", default="runs/drafter-data", help="trajectory cache")
    p.add_argument(
        "--out",
        help="checkpoint path (default: runs/drafter-TIME/TARGET.pt; with --curves-only "
        "the checkpoint to re-measure, default the shipped one, which then needs "
        "--update-shipped)",
    )
    p.add_argument(
        "--update-shipped",
        action="store_true",
        help="write the shipped spotref/load/order_models/TARGET.pt (not with --out)",
    )
    p.add_argument("--seed", type=seed_int, default=0, help="training seed")
    p.add_argument(
        "--init", default=None, help="start from this checkpoint's weights (--curves-only, --sets-only: the one read)"
    )
    p.add_argument("--targets-dir", default=None, help="load the target from this directory (default: bundled)")
    p.add_argument(
        "--curves-only",
        action="store_true",
        help="keep the checkpoint's weights; re-measure its offline curves on the held-out prompts",
    )
    p.add_argument(
        "--sets-only",
        action="store_true",
        help="keep the checkpoint's order model (--init, else --out, else the shipped one); train its set head",
    )
    p.add_argument("--no-sets", action="store_true", help="skip the set head (SPOT-Sets)")
    p.add_argument(
        "--set-prompts",
        type=positive_int,
        default=60,
        help="training prompts per temperature and threshold for the set head",
    )
    add_threads(p)
    p.add_argument("--set-steps", type=positive_int, default=1500, help="set-head training steps")


@dataclass(frozen=True)
class DrafterOptions(Options):
    """The options of ``spotref train-drafter`` / ``python -m spotref.train.train_drafter``."""

    target: str  # bundled target name
    prompts: int  # training prompts per temperature
    test_prompts: int  # held-out prompts per temperature
    seeds: int  # noise seeds per prompt at T = 1
    prompt_tokens: int  # tokens per prompt (a text to continue is cut to this)
    new_tokens: int  # new tokens recorded per prompt
    steps: int  # order-model training steps
    batch: int  # examples per step
    lr: float  # peak learning rate
    tf_depth: int  # teacher-forced levels below a recorded state
    calib_prompts: int  # training prompts the calibrated baseline is fitted on
    data_dir: str  # the trajectory cache
    out: str | None  # --out, the checkpoint path (None: see out_path)
    update_shipped: bool  # write the shipped checkpoint
    seed: int  # training seed
    init: str | None  # --init, start from this checkpoint's weights
    targets_dir: str | None  # None: the bundled targets
    curves_only: bool
    sets_only: bool
    no_sets: bool  # skip the set head
    set_prompts: int  # training prompts per temperature and threshold for the set head
    threads: int  # torch CPU threads
    set_steps: int  # set-head training steps


def trajectory_spec(options: DrafterOptions) -> TrajectorySpec:
    """What the trainer records (``prompts.recorded``): its prompts, sizes and cache."""
    return options.into(TrajectorySpec)


# --- batches ----------------------------------------------------------------------------------


def batch(ds: tj.Trajectories, rows: np.ndarray, depths: np.ndarray):
    """Teacher-forced examples: row r advanced by its first d true commits.

    Returns x (n, B, F), masked (n, B), y (n,) next position, ok (n,) coupled token right."""
    a, n = ds.arrays, len(rows)
    fut_pos = torch.from_numpy(a["fut_pos"][rows].astype(np.int64))  # (n, B)
    state = torch.from_numpy(a["tokens"][rows])  # (n, B)
    marks = torch.zeros_like(state)
    d = torch.from_numpy(depths)
    for i in range(int(depths.max(initial=0))):
        on = d > i
        marks[on, fut_pos[on, i]] = i + 1
    masked = (state == ds.mask_id) & (marks == 0)
    ar = torch.arange(n)
    y = fut_pos[ar, d]  # (n,)
    pc = torch.from_numpy(a["pc"][rows, np.minimum(depths, a["pc"].shape[1] - 1)].astype(np.float32))
    ctok = torch.from_numpy(a["ctok"][rows, np.minimum(depths, a["ctok"].shape[1] - 1)].astype(np.int64))
    ok = (ctok[ar, y] == torch.from_numpy(a["fut_tok"][rows, depths].astype(np.int64))).float()
    step = torch.from_numpy(a["step"][rows].astype(np.int64)) + d
    return ts.recorded_features(a, rows, pc, masked, marks, step), masked, y, ok


def loss_fn(model, x, masked, y, ok):
    s, t = model(x, masked)  # (n, B), (n, B)
    ce = torch.nn.functional.cross_entropy(s, y)
    bce = torch.nn.functional.binary_cross_entropy_with_logits(t[torch.arange(len(y)), y], ok)
    return ce + 0.5 * bce, (s.argmax(-1) == y).float().mean()


SCORED_STATES = 4000  # the recorded states an accuracy is measured over (the first ones)


@torch.no_grad()
def accuracy(model, ds: tj.Trajectories, depth: int = 0, limit: int = SCORED_STATES) -> float:
    """Next-commit accuracy at ``depth`` teacher-forced levels (0: the recorded states)."""
    left = (ds.arrays["fut_pos"] >= 0).sum(1)
    rows = np.flatnonzero(left > depth)[:limit]
    if len(rows) == 0:
        return float("nan")
    hits = 0
    for i in range(0, len(rows), 512):
        r = rows[i : i + 512]
        x, masked, y, _ = batch(ds, r, np.full(len(r), depth))
        hits += int((model.eval()(x, masked)[0].argmax(-1) == y).sum())
    return hits / len(rows)


def report_accuracy(model, train_sets: dict, test_sets: dict) -> tuple:
    """Print and return ({T: held-out next-commit accuracy}, {T: the stale-confidence order's},
    {T: {"model", "stale"} on training states}). The training-state pair tells underfitting
    from overfitting: a model no better than the stale order on the states it trained on has
    found little in its inputs beyond that order."""
    key = order.temperature_key
    acc = {key(T): accuracy(model, ds) for T, ds in test_sets.items()}
    base = {key(T): confidence_accuracy(ds) for T, ds in test_sets.items()}
    fit = {
        key(T): {"model": accuracy(model, ds), "stale": confidence_accuracy(ds, SCORED_STATES)}
        for T, ds in train_sets.items()
    }
    print(
        f"held-out next-commit accuracy: T=0 {acc['0']:.3f}, T=1 {acc['1']:.3f} (paper, SDAR-8B-b32: 0.750); "
        f"stale-confidence order: T=0 {base['0']:.3f}, T=1 {base['1']:.3f}"
    )
    print(
        f"on training states: T=0 {fit['0']['model']:.3f}, T=1 {fit['1']['model']:.3f}; "
        f"stale-confidence order: T=0 {fit['0']['stale']:.3f}, T=1 {fit['1']['stale']:.3f}"
    )
    return acc, base, fit


def confidence_accuracy(ds: tj.Trajectories, limit: int | None = None) -> float:
    """The training-free reference: how often the most confident stale position is next (over
    the first ``limit`` states, default all)."""
    tokens, pc, fut = (ds.arrays[k][:limit] for k in ("tokens", "pc", "fut_pos"))
    conf = np.where(tokens == ds.mask_id, pc[:, 0].astype(np.float32), -1.0)  # (R, B)
    return float((conf.argmax(1) == fut[:, 0]).mean()) if len(tokens) else float("nan")


def train(model, ds, options: DrafterOptions, log=print):
    """Train ``model`` on ``ds``: one ``Trajectories``, or a list of them (several targets, each
    of its own block size: step s draws its batch from ``ds[s % len(ds)]``, since one batch
    holds states of one block size)."""
    o, parts = options, ds if isinstance(ds, list) else [ds]
    opt = torch.optim.AdamW(model.parameters(), lr=o.lr, weight_decay=0.01)
    rng = np.random.default_rng(o.seed)
    bar = progress(range(o.steps), "train order model")
    for step in bar:
        lr = o.lr * min(1.0, (step + 1) / 100) * 0.5 * (1 + np.cos(np.pi * step / o.steps))
        for g in opt.param_groups:
            g["lr"] = lr
        model.train()
        part = parts[step % len(parts)]
        loss, acc = loss_fn(model, *batch(part, *tj.teacher_sample(part, o.batch, o.tf_depth, rng)))
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if hasattr(bar, "set_postfix") and step % 10 == 0:
            bar.set_postfix(loss=f"{loss.item():.3f}", acc=f"{acc.item():.3f}")
        elif step % 200 == 0:
            log(f"step {step} loss {loss.item():.3f} acc {acc.item():.3f}")
    return model.eval()


# --- the pipeline -----------------------------------------------------------------------------


def calibrated_tables(data: dict, n_prompts: int) -> dict:
    """The calibrated graph's prefix counts at T = 0 ("0") and T = 1 ("1") on the first prompts."""
    tables = {}
    for T, ds in data.items():
        rows = np.flatnonzero(ds.arrays["prompt"] < n_prompts)
        tables[order.temperature_key(T)] = calibrate([ds.row(i) for i in rows])
    return tables


def segments(ds: tj.Trajectories) -> list:
    """Row indices of each recorded block trajectory (consecutive steps of one prompt and seed)."""
    step, prompt = ds.arrays["step"].astype(np.int64), ds.arrays["prompt"]
    cut = np.flatnonzero((np.diff(step) != 1) | (np.diff(prompt) != 0)) + 1
    return np.split(np.arange(len(ds)), cut) if len(ds) else []


def simulate(draft, ds: tj.Trajectories, seg: np.ndarray, N: int, D: int, T: float) -> list:
    """Commits per round of SPOT rounds along one recorded trajectory: a round at row i accepts
    a drafted commits plus the bonus and the next round starts a + 1 rows later, exactly as
    online (the row there holds the target's logits at the deepest accepted state as stale)."""
    out, i = [], 0
    while i < len(seg):
        r = ds.row(seg[i])
        c = min(tj.accepted(draft(r, N, D, T), r) + 1, len(r.fut_sets()))
        out.append(c)
        i += c
    return out


def curves(drafters: dict, data: dict, budgets=(1, 4, 16, 64), depth: int = 16, limit: int = 400) -> dict:
    """Offline mean commits per round vs budget: {drafter: {T: {N: commits}}}, simulating rounds
    along held-out trajectories until ``limit`` rounds (a mean over round starts, not over all
    states: states inside long accepted runs are skipped, as they are online)."""
    segs = {T: segments(ds) for T, ds in data.items()}
    out = {}
    for name, draft in drafters.items():
        out[name] = {}
        for T, ds in data.items():
            per_n = {}
            for N in budgets:
                rounds = []
                for seg in segs[T]:
                    rounds += simulate(draft, ds, seg, N, depth, T)
                    if len(rounds) >= limit:
                        break
                per_n[str(N)] = float(np.mean(rounds)) if rounds else 1.0
            out[name][order.temperature_key(T)] = per_n
    return out


class NodeLog:
    """The SPOT drafter for ``curves``, keeping (path probability, reached) of every node it drafts
    at budget ``N``: the data of the per-round budget's calibration (``tables``)."""

    def __init__(self, spot, N: int = 64):
        self.spot, self.N, self.nodes = spot, N, {}

    def __call__(self, r, n, d, T):
        tree = self.spot.draft(r, n, d)
        if n == self.N:
            probs, hits = self.nodes.setdefault(order.temperature_key(T), ([], []))
            probs.extend(tree.probs[1:]), hits.extend(tj.reached(tree, r)[1:])
        return tree

    def tables(self) -> dict:
        return {T: calibration_table(probs, hits) for T, (probs, hits) in self.nodes.items()}


def shipped_curves(spot, cal, test_sets: dict) -> tuple:
    """(the curves a checkpoint stores: its SPOT drafter's, per level and per round, and its
    calibrated graph's; the SPOT drafter's node calibration, from the same simulated rounds)."""
    root, log = spot.with_calls("root"), NodeLog(spot)
    out = curves(
        {
            "spot": log,
            "spot-root": lambda r, N, D, T: root.draft(r, N, D),
            "calibrated": lambda r, N, D, T: cal.draft(r, N, D, T),
        },
        test_sets,
    )
    return out, log.tables()


def command(options: DrafterOptions) -> str:
    """The command line the checkpoint's header quotes."""
    return " ".join(["python -m spotref.train.train_drafter", *options.argv])


def shipped_path(options: DrafterOptions) -> Path:
    return ORDER_DIR / f"{options.target}.pt"


def source_path(options: DrafterOptions) -> Path:
    """The checkpoint ``--curves-only`` and ``--sets-only`` start from: --init (only read), else
    --out, else the shipped one."""
    if options.init:
        return Path(options.init)
    return check_writable(Path(options.out) if options.out else shipped_path(options))


def out_path(options: DrafterOptions) -> Path:
    """Where the checkpoint goes: --out, the shipped file (--update-shipped), else a new run dir."""
    o = options
    if o.update_shipped:
        if o.out:
            raise ValueError("--update-shipped writes the shipped checkpoint: leave out --out")
        return check_writable(shipped_path(o))
    return check_writable(Path(o.out) if o.out else run_dir("drafter") / f"{o.target}.pt")


def run(args: argparse.Namespace) -> int:
    options = DrafterOptions.from_namespace(args)
    torch.set_num_threads(options.threads)
    torch.manual_seed(options.seed)
    t0 = time.time()
    target = load_target(options.target, options.targets_dir or TARGETS_DIR)
    if options.curves_only:
        return remeasure(target, options)
    if options.sets_only:
        return sets_only(target, options)
    return train_and_save(target, options, t0)


def train_and_save(target, options: DrafterOptions, t0: float) -> int:
    """Steps 1 to 5 of the module's docstring: record, train, measure, save (``t0``: when the
    command started, for the timings it prints and saves)."""
    o = options
    out = out_path(o)  # refuses --out with --update-shipped up front
    print(f"train-drafter: the checkpoint will be written to {out}", file=sys.stderr)
    spec = trajectory_spec(o)
    train_sets = {T: recorded(target, spec, "train", T) for T in (0.0, 1.0)}
    test_sets = {T: recorded(target, spec, "test", T) for T in (0.0, 1.0)}
    print(
        f"trajectories: train {sum(map(len, train_sets.values()))} states, "
        f"held-out {sum(map(len, test_sets.values()))} states ({time.time() - t0:.0f} s)"
    )
    model = initial_model(target.model.block_size, o)
    print(f"order model: {order.n_params(model):,} parameters (the paper's: 0.62M)")
    train(model, tj.Trajectories.concat(list(train_sets.values())), o)
    acc, base, train_acc = report_accuracy(model, train_sets, test_sets)
    cal = CalibratedDrafter(calibrated_tables(train_sets, o.calib_prompts))
    curve, reach = shipped_curves(SpotDrafter(model), cal, test_sets)
    print("offline commits per round:", json.dumps(curve))
    sets = {}
    if not o.no_sets:
        model, sets = set_head(model, target, o)
    save_order_model(
        out,
        model,
        dict(
            target=target_record(target),
            heldout_accuracy=acc,
            confidence_accuracy=base,
            train_accuracy=train_acc,
            n_params=order.n_params(model),
            calibrated=cal.to_header(),
            curves=curve,
            node_calibration=reach,
            training=dict(
                command=command(o),
                seconds=round(time.time() - t0),
                train_states=sum(map(len, train_sets.values())),
                heldout_states=sum(map(len, test_sets.values())),
                date=time.strftime("%Y-%m-%d"),
            ),
            **({"sets": sets} if sets else {}),
        ),
    )
    print(f"wrote {out} ({out.stat().st_size / 1e6:.2f} MB)")
    return 0


def initial_model(block_size: int, options: DrafterOptions) -> order.OrderModel:
    """The order model to train, without a set head (it comes after): fresh, or --init's weights."""
    model = order.OrderModel(block_size, set_hidden=None)
    if options.init:  # block-relative features; new ones start unused
        model.load_state_dict(order.widened(order.without_set_head(load_order_model(options.init)[0])).state_dict())
    return model


def target_record(target) -> dict:
    """The header's ``target`` entry: its name and fingerprints (weights, configuration)."""
    return {
        "name": target.name,
        "fingerprint": model_fingerprint(target.model),
        "config_fingerprint": model_fingerprint(target.model, weights=False),
    }


def set_head(model, target, options: DrafterOptions) -> tuple:
    """(the model with a trained set head, the header's ``sets`` entry): threshold trajectories
    at ``train_sets.TAUS``, T = 0 and 1; held-out set accuracy against the confidence sets'."""
    o, t0 = options, time.time()
    model = order.with_set_head(model)
    data = ts.recorded_sets(target, trajectory_spec(o))
    sets = tj.Trajectories.concat([tr for tr, _ in data.values()])
    ts.train_sets(model, sets, o.set_steps, o.batch, o.lr, o.tf_depth, o.seed)
    acc, base = ts.heldout_set_accuracy(model, data)
    return model, dict(
        taus=list(ts.TAUS),
        heldout_accuracy=acc,
        confidence_accuracy=base,
        train_states=len(sets),
        heldout_states=sum(len(te) for _, te in data.values()),
        seconds=round(time.time() - t0),
        command=command(o),
    )


def sets_only(target, options: DrafterOptions) -> int:
    """``--sets-only``: the checkpoint (--out, default the shipped one) with a trained set head,
    written where ``out_path`` says; its order model, calibration and curves are kept."""
    src = source_path(options)
    out = out_path(options)
    model, header = load_order_model(src, target.model.block_size)
    model, header["sets"] = set_head(order.without_set_head(model), target, options)  # a fresh set head
    header["n_params"] = order.n_params(model)
    save_order_model(out, model, header)
    print(f"wrote {out}")
    return 0


def remeasure(target, options: DrafterOptions) -> int:
    """``--curves-only``: the checkpoint's curves (and its next-commit accuracy on training and
    held-out states) re-measured, everything else kept (the set head's ``sets`` accuracies too:
    they come from threshold trajectories, which only training records). Reads --out
    (default: the shipped checkpoint) and writes it back where ``out_path`` says."""
    src = source_path(options)
    out = out_path(options)
    model, header = load_order_model(src, target.model.block_size)
    spec = trajectory_spec(options)
    test_sets = {T: recorded(target, spec, "test", T) for T in (0.0, 1.0)}
    train_sets = {T: recorded(target, spec, "train", T) for T in (0.0, 1.0)}
    header["heldout_accuracy"], header["confidence_accuracy"], header["train_accuracy"] = report_accuracy(
        model, train_sets, test_sets
    )
    header["curves"], header["node_calibration"] = shipped_curves(
        SpotDrafter(model, header), CalibratedDrafter.from_header(header, src), test_sets
    )
    header["curves_command"] = command(options)
    print("offline commits per round:", json.dumps(header["curves"]))
    print("nodes reached by path probability:", json.dumps(header["node_calibration"]))
    save_order_model(out, model, header)
    print(f"wrote {out}")
    return 0


def main(argv=None) -> int:
    return tool_main("python -m spotref.train.train_drafter", __doc__, add_arguments, run, argv)


if __name__ == "__main__":
    sys.exit(main())
