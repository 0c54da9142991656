"""The SPOT drafter: a trained order model (``spotref.drafters.order``) turned into draft trees.

``SpotDrafter(order_model)(view) -> Draft``. From the stale distributions it builds the order
model's features at the root, scores the masked positions (the next-commit distribution) and
grows a best-first tree by cumulative path probability under the node budget N and depth cap D
(``grow_levels``): deeper levels re-run the order model on the hypothetical child states (same
stale distributions, updated masked / committed-in-draft / step features), one batched forward
per tree level over its ceil(N / D) + 1 best nodes. An edge's probability is P(position next) x
P(coupled token right); where
the token is uncertain a second edge carries the runner-up token (``second``). Equal states are
merged by the growth. Tokens are coupled-noise matched (``view.coupled_tokens(step)``).

Under the threshold rule (SPOT-Sets) the tree's edges are whole commit sets: the order model's
set head gives each masked position's probability of exceeding ``tau``, its next-commit head the
fallback (the most confident position), and ``spotref.drafters.sets`` proposes the most probable
decisions with their coupled-noise tokens (edge probability: P(set) x P(every member's coupled
token right)), and where a set's least certain member's token is uncertain, the same set with
that member's runner-up token (``sets.runner_up_sets``); growth, merging and the level-batched
calls are the one-position rule's. A checkpoint without a set head drafts the confidence sets
(``spotref.drafters.confidence.threshold_options``).

Checkpoints are loaded by ``spotref.load.drafters`` (``load_drafter``) and found by name by
``spotref.names`` (``drafter_for``).
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import torch

from spotref.drafters import order
from spotref.drafters.confidence import ConfidenceDrafter, ranked
from spotref.drafters.grow import grow, grow_levels
from spotref.drafters.inputs import ViewInputs
from spotref.drafters.sets import runner_up_sets
from spotref.drafters.sets import set_options as set_proposals
from spotref.spec.draft import Draft

SECOND = 0.5  # add a runner-up token edge where P(coupled token right) < SECOND
CALLS = ("level", "root")  # order-model calls per round: one per tree level, or one at the root


def _root(inp, budget: int, depth: int):
    return SimpleNamespace(tokens=inp.tokens, step=inp.step, budget=budget, depth=depth)


def _beam(budget: int, depth: int) -> int:
    return min(budget, -(-budget // max(depth, 1)) + 1)  # ceil(N / D) + 1 nodes expanded per level


class SpotDrafter(torch.nn.Module):
    """``drafter(view) -> Draft`` from a trained ``OrderModel`` (a ``torch.nn.Module`` holding it).

    second: add a runner-up token edge where P(coupled token right) < second (0: never);
    strict: refuse a target whose block size is not the order model's (default False: any block
    size, task or family; the features are block-relative and vocabulary-agnostic, see
    ``spotref.drafters.order``);
    calls: "level" (one order-model call per tree level, the default) or "root" (one call per
    round: the root's next-commit distribution read as a Plackett-Luce ranking, ``draft_root``;
    one-position rule only: SPOT-Sets always calls once per level).
    """

    name = "spot"

    def __init__(
        self,
        model: order.OrderModel,
        header: dict | None = None,
        second: float = SECOND,
        strict: bool = False,
        calls: str = "level",
    ):
        super().__init__()
        if calls not in CALLS:
            raise ValueError(f"calls must be one of {', '.join(CALLS)}, got {calls!r}")
        self.model, self.header = model.eval(), header or {}
        self.second, self.strict, self.calls = second, strict, calls

    @property
    def block_size(self) -> int | None:
        """The block length this drafter takes: its order model's when ``strict``, else None (any,
        the default). ``spotref.names.resolve_drafter`` refuses a strict drafter for a decode of
        another block length, before any pass."""
        return self.model.block_size if self.strict else None

    @property
    def curves(self) -> dict:
        """Offline commits per round vs budget ({"0"|"1": {N: commits}}) of this drafter's calls
        ("spot": per level, "spot-root": per round; the per-level curve where no other was
        measured), for the cost model."""
        measured = self.header.get("curves", {})
        return measured.get("spot-root" if self.calls == "root" else "spot") or measured.get("spot", {})

    def with_calls(self, calls: str) -> "SpotDrafter":
        """The same order model and header, drafting with ``calls``."""
        return SpotDrafter(self.model, self.header, self.second, self.strict, calls)

    def variants(self) -> list:
        """The drafters the cost model chooses among: one order-model call per level, or per round."""
        return [self if self.calls == c else self.with_calls(c) for c in CALLS]

    @property
    def node_calibration(self) -> dict:
        """{"0"|"1": [[path probability, rate reached, nodes], ...]} measured on held-out
        trajectories, for the per-round budget (``spotref.drafters.budget.trim``)."""
        return self.header.get("node_calibration", {})

    def forward(self, view) -> Draft:
        B = len(view.tokens)
        if self.strict and B != self.model.block_size:
            raise ValueError(
                f"the SPOT drafter was trained for block size {self.model.block_size}, the target's block size is {B}"
            )
        if view.budget < 2 or view.depth == 0:
            return Draft.root()
        if view.threshold is not None:
            if not self.model.has_sets:
                return ConfidenceDrafter()(view)
            return self.draft_sets(ViewInputs(view), view.budget, view.depth, view.threshold)
        return self.draft(ViewInputs(view), view.budget, view.depth)

    def draft(self, inp, budget: int, depth: int) -> Draft:
        """The tree over ``inp`` (ViewInputs, or recorded inputs for offline evaluation)."""
        if self.calls == "root":
            return self.draft_root(inp, budget, depth)
        return grow_levels(
            _root(inp, budget, depth), lambda s, k, m: self.options(inp, s, k, m, budget), _beam(budget, depth)
        )

    def draft_root(self, inp, budget: int, depth: int) -> Draft:
        """One order-model call per round: P(next = j) at the root, read as a Plackett-Luce
        ranking (at a node, j comes next with p_j / the mass of the positions still masked there),
        times the root's P(coupled token right); best-first growth (``grow``) without model calls."""
        B = len(inp.tokens)
        p, q = (
            a[0].double().numpy() for a in self.scores(inp, [inp.tokens], [inp.step], [np.zeros(B, dtype=np.int64)])
        )

        def options(state, step):
            masked = np.flatnonzero(state == inp.mask_id)
            mass = float(p[masked].sum())
            if mass <= 0.0:  # every remaining position underflowed: no guess
                return []
            best, x, pn = ranked(masked, p)[:budget], inp.coupled(step)[0], p / mass  # Plackett-Luce here
            opts = [(float(pn[j] * q[j]), ((int(j), int(x[j])),)) for j in best]
            return opts + (self.runner_up(inp, step, best, pn, q) if self.second else [])

        return grow(_root(inp, budget, depth), options)

    def draft_sets(self, inp, budget: int, depth: int, tau: float) -> Draft:
        """SPOT-Sets: the tree of commit sets under the threshold ``tau``."""
        return grow_levels(
            _root(inp, budget, depth),
            lambda s, k, m: self.set_options(inp, s, k, m, tau, budget),
            _beam(budget, depth),
        )

    @staticmethod
    def inputs(inp, states, steps, marks):
        """The order model's input at N hypothetical states: (features (N, B, F), masked (N, B))."""
        masked = torch.from_numpy(np.stack(states) == inp.mask_id)  # (N, B)
        pc = torch.stack([inp.coupled(k)[1] for k in steps])  # (N, B)
        x = order.features(
            inp.top,
            pc,
            masked,
            torch.from_numpy(np.stack(marks)),
            torch.tensor(steps),
            inp.temperature,
            torch.tensor(inp.unseen),
        )  # (N, B, F)
        return x, masked

    @torch.inference_mode()
    def scores(self, inp, states, steps, marks):
        """(P(next = j) (N, B), P(coupled token right) (N, B)) at N hypothetical states."""
        s, t = self.model(*self.inputs(inp, states, steps, marks))
        return torch.softmax(s, -1), torch.sigmoid(t)

    def options(self, inp, states, steps, marks, limit: int):
        p, q = (a.numpy() for a in self.scores(inp, states, steps, marks))  # (n, B) float32
        masked = np.stack(states) == inp.mask_id  # (n, B)
        best = np.argsort(np.where(masked, -p, np.inf), axis=1, kind="stable")[:, :limit]  # ranked, masked first
        w = np.take_along_axis(p * q, best, 1)  # float32 products
        out = []
        for i, k in enumerate(steps):
            b, x = best[i, : min(limit, int(masked[i].sum()))], inp.coupled(k)[0]
            opts = [(float(v), ((int(j), int(x[j])),)) for v, j in zip(w[i], b)]
            if self.second:
                opts += self.runner_up(inp, k, b, p[i], q[i])
            out.append(opts)
        return out

    @torch.inference_mode()
    def set_scores(self, inp, states, steps, marks, tau: float):
        """At N hypothetical states: (exceed-set logits (N, B), P(next = j) (N, B),
        P(coupled token right) (N, B))."""
        x, masked = self.inputs(inp, states, steps, marks)
        z, s, t = self.model.sets(x, masked, torch.full((len(states),), float(tau)))
        return z, torch.softmax(s, -1), torch.sigmoid(t)

    def set_options(self, inp, states, steps, marks, tau: float, limit: int):
        z, p, ok = (a.double().numpy() for a in self.set_scores(inp, states, steps, marks, tau))
        out = []
        for i, k in enumerate(steps):
            opts = set_proposals(z[i], p[i], ok[i], np.flatnonzero(states[i] == inp.mask_id), inp.coupled(k)[0], limit)
            if self.second:
                x2, p2 = inp.second(k)
                opts += runner_up_sets(
                    opts, ok[i], self.second, inp.coupled(k)[1].double().numpy(), x2, p2.double().numpy()
                )
            out.append(opts)
        return out

    def runner_up(self, inp, k, best, p, q):
        """Second-token edges where the coupled token is uncertain: P = p_j (1 - q_j) p2 / (1 - p1)
        (in float32, the stale probabilities' precision)."""
        x2, p2 = inp.second(k)
        p1, p2 = (np.asarray(a)[best] for a in (inp.coupled(k)[1], p2))  # float32
        p, q = np.asarray(p)[best], np.asarray(q)[best]
        w = (p * (1 - q)).astype(np.float32) * p2 / np.maximum(1 - p1, np.float32(1e-6))
        keep = (q < self.second) & (p2 > 0)
        return [(float(v), ((int(j), int(x2[j])),)) for v, j in zip(w[keep], best[keep])]
