"""The SPOT drafter: a trained order model (``spotref.order``) turned into draft trees.

``SpotDrafter(order_model)(view) -> Draft``. From the stale distributions it builds the order
model's features at the root, scores the masked positions (the next-commit distribution) and
grows a best-first tree by cumulative path probability under the node budget N and depth cap D
(``grow_levels``): deeper levels re-run the order model on the hypothetical child states (same
stale distributions, updated masked / committed-in-draft / step features), one batched forward
per tree level over its ceil(N / D) + 1 best nodes. An edge's probability is P(position next) x P(coupled token right); where
the token is uncertain a second edge carries the runner-up token (``second``). Equal states are
merged by the growth. Tokens are coupled-noise matched (``view.coupled_tokens(step)``).

Under the threshold rule (SPOT-Sets) this first version drafts the confidence drafter's commit
sets (``spotref.drafters.threshold_options``); the learned order serves the one-position rule.

Checkpoints: ``load_drafter(name_or_path)``; ``drafter_for(model, kind)`` finds the shipped
checkpoint whose target fingerprint matches ``model`` (``drafter="spot"`` / ``"calibrated"``).
"""
from __future__ import annotations

import functools
import hashlib
import json
import os
import warnings
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import torch

from spotref import order
from spotref.draft import Draft
from spotref.drafters import ConfidenceDrafter
from spotref.grow import grow_levels

ORDER_DIR = Path(__file__).parent / "order_models"
SECOND = 0.5        # add a runner-up token edge where P(coupled token right) < SECOND


class ViewInputs:
    """What the order model reads, computed from a live ``View``."""

    def __init__(self, view):
        self.view, self.tokens, self.step, self.mask_id = view, view.tokens, view.step, view.mask_id
        self.temperature = view.temperature
        self.probs = view.rule.probs(view.stale_logits).float()                # (B, V) what c is taken from
        self._coupled, self._second = {}, {}

    @functools.cached_property
    def top(self) -> torch.Tensor:
        """(B, 32) sorted stale probabilities (only the order model reads them)."""
        return order.top_probs(self.probs)

    @functools.cached_property
    def filtered(self) -> torch.Tensor:
        """(B, V) float64: what the noise of every step is added to."""
        return scaled_filtered(self.view)

    def coupled(self, m: int):
        """(tokens (B,) int64, their stale probabilities (B,)) under the noise of step m."""
        if m not in self._coupled:
            x = self.view.coupled_tokens(m)
            self._coupled[m] = (x, self.probs.gather(1, torch.from_numpy(x)[:, None])[:, 0])
        return self._coupled[m]

    def second(self, m: int):
        """The runner-up coupled tokens at step m and their stale probabilities."""
        if m not in self._second:
            x2 = coupled_pair(self.view, self.filtered, m)[1]
            self._second[m] = (x2.numpy(), self.probs.gather(1, x2[:, None])[:, 0])
        return self._second[m]


def scaled_filtered(view) -> torch.Tensor:
    """(B, V) float64: the rule's scores of the stale logits, what the noise is added to."""
    return view.rule.scores(view.stale_logits)


def coupled_pair(view, z: torch.Tensor, m: int):
    """(coupled tokens, runner-up tokens) (B,) at step m over ``z = scaled_filtered(view)``."""
    return view.rule.runner_up(z, range(len(z)), view.block, m)


class SpotDrafter(torch.nn.Module):
    """``drafter(view) -> Draft`` from a trained ``OrderModel`` (a ``torch.nn.Module`` holding it).

    second: add a runner-up token edge where P(coupled token right) < second (0: never);
    strict: refuse a target whose block size is not the order model's (False: allow transfer).
    """

    name = "spot"

    def __init__(self, model: order.OrderModel, header: dict | None = None, second: float = SECOND,
                 strict: bool = True):
        super().__init__()
        self.model, self.header = model.eval(), header or {}
        self.second, self.strict = second, strict

    @property
    def curves(self) -> dict:
        """Offline commits per round vs budget ({"0"|"1": {N: commits}}), for the cost model."""
        return self.header.get("curves", {}).get("spot", {})

    def forward(self, view) -> Draft:
        B = len(view.tokens)
        if self.strict and B != self.model.block_size:
            raise ValueError(f"the SPOT drafter was trained for block size {self.model.block_size}, "
                             f"the target's block size is {B}")
        if view.budget < 2 or view.depth == 0:
            return Draft.root()
        if view.threshold is not None:
            return ConfidenceDrafter()(view)
        return self.draft(ViewInputs(view), view.budget, view.depth)

    def draft(self, inp, budget: int, depth: int) -> Draft:
        """The tree over ``inp`` (ViewInputs, or recorded inputs for offline evaluation)."""
        root = SimpleNamespace(tokens=inp.tokens, step=inp.step, budget=budget, depth=depth)
        width = min(budget, -(-budget // max(depth, 1)) + 1)          # ceil(N / D) + 1 nodes per level
        return grow_levels(root, lambda s, k, m: self.options(inp, s, k, m, budget), width)

    @torch.no_grad()
    def scores(self, inp, states, steps, marks):
        """(P(next = j) (N, B), P(coupled token right) (N, B)) at N hypothetical states."""
        masked = torch.from_numpy(np.stack(states) == inp.mask_id)                 # (N, B)
        pc = torch.stack([inp.coupled(k)[1] for k in steps])                        # (N, B)
        x = order.features(inp.top, pc, masked, torch.from_numpy(np.stack(marks)),
                           torch.tensor(steps), inp.temperature)                    # (N, B, F)
        s, t = self.model(x, masked)
        return torch.softmax(s, -1), torch.sigmoid(t)

    def options(self, inp, states, steps, marks, limit: int):
        p, q = self.scores(inp, states, steps, marks)
        out = []
        for i, k in enumerate(steps):
            x = inp.coupled(k)[0]
            masked = np.flatnonzero(states[i] == inp.mask_id)
            best = masked[np.argsort(-p[i, masked].numpy(), kind="stable")][:limit]
            pq = (p[i, best] * q[i, best]).tolist()                      # float32 products
            opts = [(w, ((int(j), int(x[j])),)) for w, j in zip(pq, best)]
            if self.second:
                opts += self.runner_up(inp, k, best, p[i], q[i])
            out.append(opts)
        return out

    def runner_up(self, inp, k, best, p, q):
        """Second-token edges where the coupled token is uncertain: P = p_j (1 - q_j) p2 / (1 - p1)."""
        x2, p2 = inp.second(k)
        p1 = inp.coupled(k)[1]
        return [(float(p[j] * (1 - q[j]) * p2[j] / max(1 - p1[j], 1e-6)), ((int(j), int(x2[j])),))
                for j in best if q[j] < self.second and p2[j] > 0]


def model_fingerprint(model, weights: bool = True) -> str:
    """A short hash of the target's config and (``weights``) first embedding values."""
    cfg = json.dumps(model.config.to_dict(), sort_keys=True, default=str).encode()
    w = model.model.embed_tokens.weight.detach().flatten()[:256].half().cpu().numpy().tobytes() if weights else b""
    return hashlib.sha256(cfg + w).hexdigest()[:16]


def load_drafter(name, strict: bool = True, directory: Path | str | None = None) -> SpotDrafter:
    """A trained SPOT drafter: a bundled target's name (``list_checkpoints()``) or a checkpoint
    path (str or ``Path``). A bad name or checkpoint raises ``ValueError`` naming it."""
    if isinstance(name, os.PathLike):
        name = os.fspath(name)
    if not isinstance(name, str) or not name:
        raise ValueError(f"load_drafter needs a drafter name (bundled: "
                         f"{', '.join(list_checkpoints(directory)) or 'none'}) or a checkpoint path, got {name!r}")
    path = Path(name)
    if not (name.endswith(".pt") or path.is_file()):
        path = Path(directory or ORDER_DIR, f"{name}.pt")
        if not path.is_file():
            raise ValueError(f"no SPOT drafter named {name!r}; bundled: {', '.join(list_checkpoints(directory)) or 'none'}")
    model, header = order.load(path)
    return SpotDrafter(model, header, strict=strict)


def list_checkpoints(directory: Path | str | None = None) -> list[str]:
    return sorted(p.stem for p in Path(directory or ORDER_DIR).glob("*.pt"))


_HEADERS: dict = {}


def find_checkpoint(model, directory: Path | str | None = None) -> Path | None:
    """The shipped checkpoint trained on ``model`` (matched by fingerprint), or None. Failing
    that, one trained on a model of the same config (another version of the target: still exact,
    maybe less accurate), with a warning."""
    fp, cfg = model_fingerprint(model), model_fingerprint(model, weights=False)
    headers = [(p, _header(p)) for p in sorted(Path(directory or ORDER_DIR).glob("*.pt"))]
    for path, h in headers:
        if h.get("target", {}).get("fingerprint") == fp:
            return path
    for path, h in headers:
        if h.get("target", {}).get("config_fingerprint") == cfg:
            warnings.warn(f"{path.name} was trained on another version of this target (same config, "
                          f"other weights): output stays exact, acceptance may be lower")
            return path
    return None


def _header(path: Path) -> dict:
    key = (str(path), path.stat().st_mtime)
    if key not in _HEADERS:
        try:
            _HEADERS[key] = order.load(path)[1]
        except ValueError:
            _HEADERS[key] = {}
    return _HEADERS[key]


_DRAFTERS: dict = {}


def drafter_for(model, kind: str, directory: Path | str | None = None):
    """``drafter="spot"`` or ``"calibrated"``: the shipped drafter matching ``model`` (loaded once
    per process and checkpoint, so repeated ``generate`` calls share one object)."""
    path = find_checkpoint(model, directory)
    if path is None:
        raise ValueError(f"drafter {kind!r}: no shipped drafter checkpoint matches this model (bundled: "
                         f"{', '.join(list_checkpoints(directory)) or 'none'}); train one with "
                         f"`python -m spotref.train_drafter` or pass spotref.load_drafter(path)")
    key = (kind, str(path), path.stat().st_mtime)
    if key not in _DRAFTERS:
        if kind == "spot":
            _DRAFTERS[key] = load_drafter(str(path))
        else:
            from spotref.calibrated import CalibratedDrafter
            _DRAFTERS[key] = CalibratedDrafter.from_header(_header(path), path)
    return _DRAFTERS[key]


MODEL_DRAFTERS = {"spot": lambda model: drafter_for(model, "spot"),
                  "calibrated": lambda model: drafter_for(model, "calibrated")}
