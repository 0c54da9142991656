"""The fit behind ``spotref calibrate-sets``: a set drafter's last set-head layer and scale, refit
on a new target's recorded threshold trajectories.

What changes (``CALIBRATED``, 66 numbers at the shipped sizes): ``set_scale`` (the log of the
skip's scale ``s`` in ``s * log(p_coupled / tau)``) and the set head's output layer
(``set_head.2.weight``, ``set_head.2.bias``). Everything else is frozen: the encoder, the
next-commit and token heads (so the one-position drafter is unchanged) and the set head's hidden
layer. Because only the output layer moves, each example's hidden activations are computed once
(``Frozen``): the fit is a regularised logistic-style regression over precomputed features,
seconds on one CPU thread.

Loss: ``spotref.train.train_sets.set_loss``'s negative log-likelihood of the true next decision
(the exceed set, or for a single commit also the fallback to the next-commit head's choice), at
recorded states and teacher-forced deeper ones (``train_sets.set_batch``), plus
``prior * |theta - theta_source|^2``: with 32 prompts the fit stays near the source drafter
where the data say little.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from spotref.cli.report import progress
from spotref.drafters import order
from spotref.record import trajectories as tj
from spotref.train import train_sets as ts

CALIBRATED = ("set_scale", "set_head.2.weight", "set_head.2.bias")  # the parameters the fit changes
EXAMPLES = 4096  # teacher-forced examples the fit reads at most
DEEPER = 4  # examples per recorded state at most (the state itself and teacher-forced deeper ones)
CHUNK = 512  # examples per encoder call while precomputing


@dataclass
class Frozen:
    """The fit's inputs, every frozen part of the model applied once: per example and position
    the set head's hidden activation ``g`` (n, B, H), ``rel`` = log(p_coupled / tau) (n, B), the
    next-commit scores ``s`` (n, B), ``masked`` (n, B) and the truth ``y`` (n, B): in the next set."""

    g: torch.Tensor
    rel: torch.Tensor
    s: torch.Tensor
    masked: torch.Tensor
    y: torch.Tensor

    def __len__(self) -> int:
        return len(self.y)


@torch.no_grad()
def frozen(model: order.OrderModel, ds: tj.Trajectories, limit: int = EXAMPLES, tf_depth: int = 12, seed: int = 0):
    """``Frozen`` inputs of at most ``limit`` examples (and at most ``DEEPER`` per recorded state):
    every recorded state (at depth 0) and, while room is left, teacher-forced deeper ones
    (``tj.teacher_sample``)."""
    rng = np.random.default_rng(seed)
    limit = min(limit, DEEPER * len(ds))
    rows = np.arange(len(ds))
    rows = rng.permutation(rows)[:limit] if len(rows) > limit else rows
    depths = np.zeros(len(rows), np.int64)
    if len(rows) < limit:
        extra, d = tj.teacher_sample(ds, limit - len(rows), tf_depth, rng)
        rows, depths = np.concatenate([rows, extra]), np.concatenate([depths, d])
    parts = [
        hidden(model, *ts.set_batch(ds, rows[i : i + CHUNK], depths[i : i + CHUNK])) for i in range(0, len(rows), CHUNK)
    ]
    return Frozen(*(torch.cat(p) for p in zip(*parts)))


def hidden(model: order.OrderModel, x, masked, tau, y) -> tuple:
    """(g, rel, s, masked, y) of one batch (``Frozen``'s fields), the frozen layers applied."""
    h = model.encode(x)  # (n, B, d)
    n, B, _ = h.shape
    rel = x[..., order.LOG_PC] * order.LOG_SCALE - tau.float().log()[:, None]  # (n, B)
    inp = torch.cat([h, (rel / order.LOG_SCALE)[..., None], tau.float()[:, None, None].expand(n, B, 1)], -1)
    g = model.set_head[1](model.set_head[0](inp))  # (n, B, H): the hidden layer, frozen
    s = (model.head(h) + model.skip(model.take(x)))[..., 0].masked_fill(~masked, -torch.inf)
    return g, rel, s, masked, y


def exceed_logits(data: Frozen, scale: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """(n, B) the set head's exceed logits (``OrderModel.sets``) from the frozen inputs."""
    return scale.exp() * data.rel + data.g @ w + b


def nll(data: Frozen, z: torch.Tensor) -> torch.Tensor:
    """``train_sets.set_loss`` on precomputed logits: mean -log P(true next decision)."""
    zero = torch.zeros_like(z)
    log_in = torch.where(data.masked, -F.softplus(-z), zero)
    log_out = torch.where(data.masked, -F.softplus(z), zero)
    y = data.y
    lp = (y * log_in + (1 - y) * log_out).sum(-1)
    pick = torch.log_softmax(data.s, -1).gather(1, y.argmax(-1, keepdim=True))[:, 0]
    lp = torch.where(y.sum(-1) == 1, torch.logaddexp(lp, log_out.sum(-1) + pick), lp)
    return -lp.mean()


def fit(model: order.OrderModel, data: Frozen, steps: int = 300, lr: float = 0.05, prior: float = 1e-3) -> dict:
    """Refit ``CALIBRATED`` of ``model`` (in place) on ``data``; every other parameter is left as
    it is; a fit no better than the source on ``data`` keeps the source. Returns
    {"loss_before", "loss_after"} (on ``data``, without the prior)."""
    head = model.set_head[2]
    start = [model.set_scale.detach().clone(), head.weight.detach()[0].clone(), head.bias.detach().clone()]
    theta = [t.clone().requires_grad_(True) for t in start]
    opt = torch.optim.Adam(theta, lr=lr)
    with torch.no_grad():
        before = nll(data, exceed_logits(data, *theta)).item()
    bar = progress(range(steps), "fit set head")
    for step in bar:
        for group in opt.param_groups:
            group["lr"] = lr * 0.5 * (1 + np.cos(np.pi * step / steps))
        loss = nll(data, exceed_logits(data, *theta))
        penalty = prior * sum(((t - t0) ** 2).sum() for t, t0 in zip(theta, start))
        opt.zero_grad()
        (loss + penalty).backward()
        opt.step()
        if hasattr(bar, "set_postfix") and step % 20 == 0:
            bar.set_postfix(loss=f"{loss.item():.4f}")
    with torch.no_grad():
        after = nll(data, exceed_logits(data, *theta)).item()
        if not after <= before:  # no better than the source (or not finite): keep the source
            theta, after = start, before
        model.set_scale.copy_(theta[0])
        head.weight.copy_(theta[1][None])
        head.bias.copy_(theta[2])
    return {"loss_before": round(before, 5), "loss_after": round(after, 5)}
