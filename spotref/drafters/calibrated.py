"""The ``calibrated`` baseline (Spiffy-like): a static draft graph over stale-confidence ranks.

A node of the graph is a rank sequence ``(r1, ..., rd)``: from the current state commit the
masked position of stale-confidence rank r1, then, among the positions still masked, the one of
rank r2, and so on (ranks from the stale confidences at the round's root, rank 0 = most
confident; tokens coupled-noise matched). Calibration counts, over recorded exact-decoding
states of 20-50 prompts, how often each rank sequence is a prefix of the truth with the right
tokens (``calibrate``). The expected accepted length of a graph is the sum of its nodes'
frequencies, so the best graph under a node budget N and depth cap D is the N - 1 most frequent
prefixes (frequencies never grow along a path, so they form a tree): ``shape(N, D)``.
"""

from __future__ import annotations

from collections import Counter

import numpy as np

from spotref.drafters.confidence import ConfidenceDrafter, ranked
from spotref.drafters.inputs import ViewInputs
from spotref.drafters.order import temperature_key
from spotref.spec.draft import Draft

MAX_PREFIXES = 4000  # kept in a checkpoint


class CalibratedDrafter:
    """``drafter(view) -> Draft``: the calibrated rank graph for the view's budget and depth."""

    name = "calibrated"

    def __init__(self, tables: dict, curves: dict | None = None, measured_block: int | None = None):
        self.tables = {k: dict(v) for k, v in tables.items()}  # "0" / "1" -> {ranks: count}
        self.curves = curves or {}  # for the cost model
        self.measured_block = measured_block  # the block length the curves were measured in (None: unknown)
        self._shapes = {}

    @classmethod
    def from_header(cls, header: dict, path=None):
        cal = header.get("calibrated")
        if not isinstance(cal, dict) or not cal:
            raise ValueError(f"the drafter checkpoint {path} holds no calibrated graph")
        tables = {k: {tuple(r): c for r, c in v} for k, v in cal.items()}
        return cls(tables, header.get("curves", {}).get("calibrated"), (header.get("config") or {}).get("block_size"))

    def to_header(self) -> dict:
        return {
            k: [[list(r), c] for r, c in sorted(v.items(), key=lambda rc: -rc[1])[:MAX_PREFIXES]]
            for k, v in self.tables.items()
        }

    def __call__(self, view) -> Draft:
        if view.threshold is not None:
            return ConfidenceDrafter()(view)
        return self.draft(ViewInputs(view), view.budget, view.depth, view.temperature)

    def shape(self, budget: int, depth: int, temperature: float) -> list:
        """The N - 1 most frequent rank prefixes of length <= D, parents first."""
        key = (budget, depth, temperature > 0)
        if key not in self._shapes:
            table = self.tables.get(temperature_key(temperature)) or next(iter(self.tables.values()))
            chosen = set()
            for r, _ in sorted(table.items(), key=lambda rc: (-rc[1], len(rc[0]), rc[0])):
                if len(chosen) >= budget - 1:
                    break
                if len(r) <= depth and (len(r) == 1 or r[:-1] in chosen):
                    chosen.add(r)
            self._shapes[key] = sorted(chosen, key=lambda r: (len(r), r))
        return self._shapes[key]

    def draft(self, inp, budget: int, depth: int, temperature: float) -> Draft:
        masked = np.flatnonzero(inp.tokens == inp.mask_id)
        conf = inp.coupled(inp.step)[1].numpy()
        parents, commits, index = [-1], [()], {(): (0, list(ranked(masked, conf)))}
        for r in self.shape(budget, depth, temperature):
            if r[:-1] not in index or r[-1] >= len(index[r[:-1]][1]):
                continue  # fewer masked positions than ranks
            p, remaining = index[r[:-1]]
            j = int(remaining[r[-1]])
            tok = int(inp.coupled(inp.step + len(r) - 1)[0][j])
            index[r] = (len(parents), remaining[: r[-1]] + remaining[r[-1] + 1 :])
            parents.append(p), commits.append(((j, tok),))
        return Draft(parents, commits)


def true_ranks(conf: np.ndarray, masked: np.ndarray, future: list) -> tuple:
    """Rank sequence of the true future commit positions among the remaining masked positions."""
    remaining = list(ranked(masked, conf))
    ranks = []
    for j in future:
        r = remaining.index(j)
        ranks.append(r)
        remaining.pop(r)
    return tuple(ranks)


def calibrate(records, depth: int = 16) -> Counter:
    """Prefix counts of the true rank sequences, cut where a coupled stale token is wrong."""
    counts = Counter()
    for rec in records:
        n = rec.accepted_prefix(depth)  # true commits with right stale tokens
        if n == 0:
            continue
        masked = np.flatnonzero(rec.tokens == rec.mask_id)
        ranks = true_ranks(rec.pc[0].astype(np.float64), masked, list(rec.fut_pos[:n]))
        for d in range(1, n + 1):
            counts[ranks[:d]] += 1
    return counts
