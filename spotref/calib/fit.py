"""The fit behind ``spotref calibrate-sets``: a set drafter's output layers, refit on a new
target's recorded threshold trajectories.

What changes (``CALIBRATED``: 248 numbers for a checkpoint reading 54 features, 242 for one
reading 48 such as stdlib-b16's; d_model 128, set hidden 64):

* the exceed-set logit: ``set_scale`` (the log of the skip's scale ``s`` in
  ``s * log(p_coupled / tau)``, 1) and the set head's output layer (``set_head.2.weight``, 64;
  ``set_head.2.bias``, 1);
* the next-commit ranking (SPOT-Sets' fallback ``p_next``, which ranks the singleton decisions
  that threshold decoding makes almost always on the stdlib targets): the next-commit row of the
  output layer, ``head.weight[0]`` (128), and of the linear skip from the features,
  ``skip.weight[0]`` (one per feature read, 54 or 48: it holds the scale of the confidence
  log-odds the score starts from).
  ``head.bias[0]`` is left out: a constant does not move a softmax.

Everything else is frozen, bit for bit: the encoder, the token head (``head.weight[1]``,
``head.bias``, ``skip.weight[1]``) and the set head's hidden layer. The next-commit row is the
one-position drafter's too, so a calibrated checkpoint ranks the one-position rule's next commit
with the refit row (fit on the same kind of decision: a single commit is the most confident
position under either rule). Because only output layers move, each example's encoder output,
features and set-head hidden activations are computed once (``Frozen``): the fit is a
regularised logistic / softmax regression over precomputed inputs, seconds on one CPU thread.

``fit_full`` (``spotref calibrate-sets --full``) is the heavier adaptation: every weight of the
order model (the encoder included, about 627,000 numbers) fine-tuned from the source on the same
data and loss, by Adam from the source values with a cosine schedule; no longer a light
calibration, measured beside it in docs/results-transfer-sets.md.

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

CALIBRATED = (
    "set_scale",
    "set_head.2.weight",
    "set_head.2.bias",
    "head.weight[0]",
    "skip.weight[0]",
)  # what the fit changes (a name[row]: that row of the tensor only)
SET_HEAD_ONLY = CALIBRATED[:3]  # ``fit(next_commit=False)``: the set head's output and scale, 66 numbers
NEXT_ROW = 0  # the next-commit row of ``head`` and ``skip`` (row 1: the token head, frozen)
EXAMPLES = 4096  # teacher-forced examples the fit reads at most
DEEPER = 4  # examples per recorded state at most (the state itself and teacher-forced deeper ones)
CHUNK = 512  # examples per encoder call while precomputing


@dataclass
class Frozen:
    """The fit's inputs, every frozen part of the model applied once: per example and position
    the set head's hidden activation ``g`` (n, B, H), ``rel`` = log(p_coupled / tau) (n, B), the
    encoder output ``h`` (n, B, d), the features the skip reads ``x`` (n, B, F), ``masked``
    (n, B) and the truth ``y`` (n, B): in the next set."""

    g: torch.Tensor
    rel: torch.Tensor
    h: torch.Tensor
    x: torch.Tensor
    masked: torch.Tensor
    y: torch.Tensor

    def __len__(self) -> int:
        return len(self.y)


def examples(ds: tj.Trajectories, limit: int = EXAMPLES, tf_depth: int = 12, seed: int = 0) -> tuple:
    """(rows, depths) of at most ``limit`` examples (at most ``DEEPER`` per recorded state): every
    recorded state (at depth 0) and, while room is left, teacher-forced deeper ones
    (``tj.teacher_sample``)."""
    rng = np.random.default_rng(seed)
    limit = min(limit, DEEPER * len(ds))
    rows = np.arange(len(ds))
    rows = rng.permutation(rows)[:limit] if len(rows) > limit else rows
    depths = np.zeros(len(rows), np.int64)
    if len(rows) < limit:
        extra, d = tj.teacher_sample(ds, limit - len(rows), tf_depth, rng)
        rows, depths = np.concatenate([rows, extra]), np.concatenate([depths, d])
    return rows, depths


@torch.no_grad()
def frozen(model: order.OrderModel, ds: tj.Trajectories, limit: int = EXAMPLES, tf_depth: int = 12, seed: int = 0):
    """``Frozen`` inputs of ``examples(ds, limit, tf_depth, seed)``."""
    rows, depths = examples(ds, limit, tf_depth, seed)
    parts = [
        hidden(model, *ts.set_batch(ds, rows[i : i + CHUNK], depths[i : i + CHUNK])) for i in range(0, len(rows), CHUNK)
    ]
    return Frozen(*(torch.cat(p) for p in zip(*parts)))


def hidden(model: order.OrderModel, x, masked, tau, y) -> tuple:
    """(g, rel, h, x, masked, y) of one batch (``Frozen``'s fields), the frozen layers applied."""
    h = model.encode(x)  # (n, B, d)
    n, B, _ = h.shape
    rel = x[..., order.LOG_PC] * order.LOG_SCALE - tau.float().log()[:, None]  # (n, B)
    inp = torch.cat([h, (rel / order.LOG_SCALE)[..., None], tau.float()[:, None, None].expand(n, B, 1)], -1)
    g = model.set_head[1](model.set_head[0](inp))  # (n, B, H): the hidden layer, frozen
    return g, rel, h, model.take(x), masked, y


@dataclass
class Theta:
    """The calibrated numbers: ``scale`` (log), the set head's output ``w`` (H,) and ``b`` (1,),
    the next-commit rows ``head`` (d,) and ``skip`` (F,); ``head_bias`` is kept, not fitted."""

    scale: torch.Tensor
    w: torch.Tensor
    b: torch.Tensor
    head: torch.Tensor
    skip: torch.Tensor
    head_bias: torch.Tensor

    @classmethod
    def of(cls, model: order.OrderModel) -> "Theta":
        return cls(
            model.set_scale.detach().clone(),
            model.set_head[2].weight.detach()[0].clone(),
            model.set_head[2].bias.detach().clone(),
            model.head.weight.detach()[NEXT_ROW].clone(),
            model.skip.weight.detach()[NEXT_ROW].clone(),
            model.head.bias.detach()[NEXT_ROW].clone(),
        )

    def fitted(self, next_commit: bool = True) -> list[torch.Tensor]:
        """The fitted tensors, in ``CALIBRATED``'s order (``next_commit=False``: ``SET_HEAD_ONLY``'s)."""
        return [self.scale, self.w, self.b] + ([self.head, self.skip] if next_commit else [])

    @torch.no_grad()
    def write(self, model: order.OrderModel) -> None:
        """Copy the fitted numbers into ``model`` (in place); nothing else is touched."""
        model.set_scale.copy_(self.scale)
        model.set_head[2].weight.copy_(self.w[None])
        model.set_head[2].bias.copy_(self.b)
        model.head.weight[NEXT_ROW].copy_(self.head)
        model.skip.weight[NEXT_ROW].copy_(self.skip)


def n_calibrated(model: order.OrderModel, next_commit: bool = True) -> int:
    """How many numbers ``fit`` changes in ``model`` (248 or 242 for the shipped checkpoints, by
    their feature count; 66 without the next-commit rows)."""
    return sum(t.numel() for t in Theta.of(model).fitted(next_commit))


def logits(data: Frozen, t: Theta) -> tuple[torch.Tensor, torch.Tensor]:
    """(exceed logits, next-commit scores), each (n, B), as ``OrderModel.sets`` computes them
    from the frozen inputs (scores -inf where not masked)."""
    z = t.scale.exp() * data.rel + data.g @ t.w + t.b
    s = data.h @ t.head + t.head_bias + data.x @ t.skip
    return z, s.masked_fill(~data.masked, -torch.inf)


def nll(data: Frozen, z: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
    """``train_sets.set_loss`` on precomputed logits: mean -log P(true next decision)."""
    zero = torch.zeros_like(z)
    log_in = torch.where(data.masked, -F.softplus(-z), zero)
    log_out = torch.where(data.masked, -F.softplus(z), zero)
    y = data.y
    lp = (y * log_in + (1 - y) * log_out).sum(-1)
    pick = torch.log_softmax(s, -1).gather(1, y.argmax(-1, keepdim=True))[:, 0]
    lp = torch.where(y.sum(-1) == 1, torch.logaddexp(lp, log_out.sum(-1) + pick), lp)
    return -lp.mean()


def fit(
    model: order.OrderModel,
    data: Frozen,
    steps: int = 300,
    lr: float = 0.05,
    prior: float = 1e-3,
    next_commit: bool = True,
) -> dict:
    """Refit ``CALIBRATED`` of ``model`` (in place) on ``data`` (``next_commit=False``: only
    ``SET_HEAD_ONLY``, the next-commit rows kept); every other number is left as it is; a fit no
    better than the source on ``data`` keeps the source. Returns {"loss_before", "loss_after"}
    (on ``data``, without the prior)."""
    start = Theta.of(model)
    theta = Theta(*[t.clone() for t in start.fitted()], start.head_bias)
    params = theta.fitted(next_commit)
    for t in params:
        t.requires_grad_(True)
    opt = torch.optim.Adam(params, lr=lr)
    with torch.no_grad():
        before = nll(data, *logits(data, start)).item()
    bar = progress(range(steps), "fit output layers")
    for step in bar:
        for group in opt.param_groups:
            group["lr"] = lr * 0.5 * (1 + np.cos(np.pi * step / steps))
        loss = nll(data, *logits(data, theta))
        penalty = prior * sum(((t - t0) ** 2).sum() for t, t0 in zip(params, start.fitted(next_commit)))
        opt.zero_grad()
        (loss + penalty).backward()
        opt.step()
        if hasattr(bar, "set_postfix") and step % 20 == 0:
            bar.set_postfix(loss=f"{loss.item():.4f}")
    with torch.no_grad():
        after = nll(data, *logits(data, theta)).item()
    if not after <= before:  # no better than the source (or not finite): keep the source
        theta, after = start, before
    theta.write(model)
    return {"loss_before": round(before, 5), "loss_after": round(after, 5)}


@torch.no_grad()
def set_nll(model: order.OrderModel, ds: tj.Trajectories, rows: np.ndarray, depths: np.ndarray) -> float:
    """``train_sets.set_loss`` of ``model`` over the examples (rows, depths), in chunks."""
    total = 0.0
    for i in range(0, len(rows), CHUNK):
        r, d = rows[i : i + CHUNK], depths[i : i + CHUNK]
        total += float(ts.set_loss(model.eval(), *ts.set_batch(ds, r, d))) * len(r)
    return total / max(len(rows), 1)


def fit_full(
    model: order.OrderModel,
    ds: tj.Trajectories,
    steps: int = 500,
    lr: float = 3e-4,
    batch: int = 64,
    tf_depth: int = 12,
    seed: int = 0,
    which=None,
) -> dict:
    """Fine-tune every weight of ``model`` (in place; ``which(name)``: only the parameters it
    accepts) on ``ds`` under the set loss: ``steps`` Adam steps of ``batch`` teacher-forced
    examples from the source values, cosine learning rate from ``lr``. Reported (and guarded) like
    ``fit``: the loss before and after on ``examples(ds)``; a fine-tune no better than the source
    there keeps the source."""
    rows, depths = examples(ds, seed=seed)
    start = {k: v.clone() for k, v in model.state_dict().items()}
    before = set_nll(model, ds, rows, depths)
    params = [p for n, p in model.named_parameters() if which is None or which(n)]
    opt = torch.optim.Adam(params, lr=lr)
    rng = np.random.default_rng([seed, 1])
    bar = progress(range(steps), "fine-tune the order model")
    for step in bar:
        for group in opt.param_groups:
            group["lr"] = lr * 0.5 * (1 + np.cos(np.pi * step / steps))
        loss = ts.set_loss(model.train(), *ts.set_batch(ds, *tj.teacher_sample(ds, batch, tf_depth, rng)))
        model.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if hasattr(bar, "set_postfix") and step % 20 == 0:
            bar.set_postfix(loss=f"{loss.item():.4f}")
    model.eval().zero_grad(set_to_none=True)
    after = set_nll(model, ds, rows, depths)
    if not after <= before:  # no better than the source (or not finite): keep the source
        model.load_state_dict(start)
        after = before
    return {"examples": len(rows), "loss_before": round(before, 5), "loss_after": round(after, 5)}
