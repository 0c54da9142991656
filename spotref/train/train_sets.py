"""Train the order model's set head (SPOT-Sets): ``spotref train-drafter NAME`` runs it after the
order model; ``--sets-only`` adds it to an existing checkpoint.

1. Record exact threshold-decoding trajectories (``trajectories.record(threshold=tau)``) at the
   thresholds users run (``TAUS``: 0.9, 0.7, 0.5), T = 0 and T = 1, on training and held-out
   prompts; each row holds its true future commit sets.
2. Train the set head alone (the encoder, the next-commit head and the token head stay as they
   are, so the one-position drafter is unchanged): the negative log-likelihood of the true next
   decision under the SPOT-Sets model (the exceed set, or for a single commit also the fallback
   to the next-commit head's choice; ``spotref.drafters.sets``), at the recorded states and
   teacher-forced deeper ones (the state after the first d true sets, with their draft marks and
   step), ``tau`` an input.
3. Report held-out set accuracy, exact-set match of the top proposal against the true next set
   (positions), for SPOT-Sets and for the confidence sets, per T and ``tau``.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

from spotref.cli.report import progress
from spotref.drafters import order
from spotref.drafters.confidence import ranked, threshold_options
from spotref.drafters.sets import top_sets
from spotref.record import trajectories as tj
from spotref.record.prompts import recorded

TAUS = (0.9, 0.7, 0.5)  # thresholds the set head is trained and measured at


def when_matrix(ds: tj.Trajectories, rows: np.ndarray) -> torch.Tensor:
    """(n, B) int64: the future step offset at which each position is committed (-1: never)."""
    a, B = ds.arrays, ds.block_size
    pos = torch.from_numpy(a["fut_pos"][rows].astype(np.int64))  # (n, B), -1 padded
    when = torch.from_numpy(a["fut_when"][rows].astype(np.int64))
    out = torch.full((len(rows), B + 1), -1, dtype=torch.int64)
    return out.scatter_(1, torch.where(pos >= 0, pos, B), when)[:, :B]


def set_batch(ds: tj.Trajectories, rows: np.ndarray, depths: np.ndarray):
    """Teacher-forced examples: row r advanced by its first d true commit sets.

    Returns x (n, B, F), masked (n, B), tau (n,), y (n, B) float: in the next set."""
    a = ds.arrays
    when = when_matrix(ds, rows)  # (n, B)
    d = torch.from_numpy(depths)[:, None]  # (n, 1)
    marks = torch.where((when >= 0) & (when < d), when + 1, 0)  # draft depth
    masked = (torch.from_numpy(a["tokens"][rows]) == ds.mask_id) & (marks == 0)
    k = np.minimum(depths, a["pc"].shape[1] - 1)
    pc = torch.from_numpy(a["pc"][rows, k].astype(np.float32))
    step = torch.from_numpy(a["step"][rows].astype(np.int64) + depths)
    x = recorded_features(a, rows, pc, masked, marks, step)
    return x, masked, torch.from_numpy(a["tau"][rows].astype(np.float32)), (when == d).float()


def recorded_features(a: dict, rows: np.ndarray, pc, masked, marks, step) -> torch.Tensor:
    """The order model's features (``order.features``, (n, B, F)) of recorded rows ``a[...][rows]``
    at a teacher-forced draft: its coupled-token probabilities ``pc``, ``masked``, ``marks``, ``step``."""
    return order.features(
        torch.from_numpy(a["top"][rows].astype(np.float32)),
        pc,
        masked,
        marks,
        step,
        torch.from_numpy(a["temp"][rows].astype(np.float32)),
        torch.from_numpy(a["unseen"][rows]),
    )


def set_loss(model, x, masked, tau, y):
    """Mean negative log-likelihood of the true decisions y (n, B) under the SPOT-Sets model
    (``spotref.drafters.sets``): the exceed set, or for a singleton also the fallback."""
    z, s, _ = model.sets(x, masked, tau)  # (n, B) each
    zero = torch.zeros_like(z)
    log_in = torch.where(masked, -F.softplus(-z), zero)  # log q_j
    log_out = torch.where(masked, -F.softplus(z), zero)  # log (1 - q_j)
    lp = (y * log_in + (1 - y) * log_out).sum(-1)  # log P(E = truth)
    fallback = log_out.sum(-1) + torch.log_softmax(s, -1).gather(1, y.argmax(-1, keepdim=True))[:, 0]
    lp = torch.where(y.sum(-1) == 1, torch.logaddexp(lp, fallback), lp)
    return -lp.mean()


def recorded_sets(target, spec, trained: bool = True) -> dict:
    """{(T, tau): (training trajectories, None when not ``trained``; held-out trajectories)}: exact
    threshold decoding at ``TAUS``, T = 0 and 1 (``prompts.recorded``: cached under the spec's dir)."""
    return {
        (T, tau): (recorded(target, spec, "train", T, tau) if trained else None, recorded(target, spec, "test", T, tau))
        for T in (0.0, 1.0)
        for tau in TAUS
    }


def heldout_set_accuracy(model, data: dict, label: str = "") -> tuple[dict, dict]:
    """({T: {tau: SPOT-Sets' held-out set accuracy}}, the same for the confidence sets) on the
    held-out half of ``recorded_sets``' ``data``, printed as it goes (after ``label``)."""
    acc, base = {}, {}
    for (T, tau), (_, test) in data.items():
        a, b = set_accuracy(model, test)
        acc.setdefault(order.temperature_key(T), {})[f"{tau:g}"] = a
        base.setdefault(order.temperature_key(T), {})[f"{tau:g}"] = b
        print(f"{label}held-out set accuracy T={T:g} tau={tau:g}: SPOT-Sets {a:.3f}, confidence sets {b:.3f}")
    return acc, base


def train_sets(model: order.OrderModel, ds, steps: int, batch: int, lr: float, tf_depth: int, seed: int = 0):
    """Train the set head (``set_*`` parameters) on threshold trajectories ``ds`` (one
    ``Trajectories``, or a list of them, of any block sizes, drawn a batch each in turn); every
    other weight is kept. Returns ``model`` in eval mode."""
    parts = ds if isinstance(ds, list) else [ds]
    for p in model.parameters():
        p.requires_grad_(False)
    params = [p for n, p in model.named_parameters() if n.startswith("set_")]
    for p in params:
        p.requires_grad_(True)
    opt = torch.optim.AdamW(params, lr=lr, weight_decay=0.01)
    rng = np.random.default_rng(seed)
    bar = progress(range(steps), "train set head")
    for step in bar:
        for g in opt.param_groups:
            g["lr"] = lr * min(1.0, (step + 1) / 100) * 0.5 * (1 + np.cos(np.pi * step / steps))
        model.train()
        d = parts[step % len(parts)]
        loss = set_loss(model, *set_batch(d, *tj.teacher_sample(d, batch, tf_depth, rng)))
        opt.zero_grad()
        loss.backward()
        opt.step()
        if hasattr(bar, "set_postfix") and step % 10 == 0:
            bar.set_postfix(loss=f"{loss.item():.3f}")
    for p in model.parameters():
        p.requires_grad_(True)
    return model.eval()


@torch.no_grad()
def set_accuracy(model, ds: tj.Trajectories, limit: int = 4000) -> tuple[float, float]:
    """(SPOT-Sets, confidence sets): how often the top proposal's positions are the true next set."""
    rows = np.arange(min(len(ds), limit))
    if len(rows) == 0:
        return float("nan"), float("nan")
    x, masked, tau, y = set_batch(ds, rows, np.zeros(len(rows), np.int64))
    z, s, _ = model.eval().sets(x, masked, tau)
    z, p = z.double().numpy(), torch.softmax(s, -1).double().numpy()
    pc = ds.arrays["pc"][rows, 0].astype(np.float64)
    spot = conf = 0
    for i in range(len(rows)):
        m = np.flatnonzero(masked[i].numpy())
        truth = tuple(np.flatnonzero(y[i].numpy()).tolist())
        spot += top_sets(z[i, m], m, 1, p[i, m])[0][1] == truth
        top = threshold_options(ranked(m, pc[i]), pc[i], np.zeros(len(pc[i]), np.int64), float(tau[i]))[0][1]
        conf += tuple(j for j, _ in top) == truth
    return spot / len(rows), conf / len(rows)
