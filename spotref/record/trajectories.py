"""Exact-decoding trajectories: the order model's training data (docs/spec.md section 6).

``record(model, prompts, temperature, seeds)`` runs ``spotref.generate`` with a drafter that
drafts nothing (so the run is exact decoding) but saves, at every state after a block's first,
what a drafter can read: the state, its step, what was committed since the stale pass, the
top-32 stale probabilities, and for the next ``DEPTH + 1`` steps the coupled-noise stale tokens
(and runner-up tokens) with their stale probabilities. The run's trajectory then gives the true
commits from each state to the end of
its block: ``fut_pos`` / ``fut_tok`` in commit order and ``fut_when``, the step offset of each
(0, 1, 2, ... under the one-position rule; under the threshold rule, ``record(threshold=tau)``,
one offset per commit set, members in ascending position; ``tau`` is NaN for one-position rows).
Everything is stacked into a ``Trajectories`` (numpy arrays, one row per state);
``Trajectories.row(i)`` reads like ``drafters.inputs.ViewInputs`` so drafters can be evaluated offline
(``accepted``): acceptance by state equality needs only the true commits.

Prompts: the target's held-out prompts (``Target.heldout``) of the ``train`` or ``test`` split
(``spotref.record.prompts.prompts_for``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

import spotref
from spotref.cli.report import progress
from spotref.drafters.inputs import ViewInputs
from spotref.files import atomic_save
from spotref.spec.draft import Draft

DEPTH = 16  # future steps recorded per state (teacher forcing, calibration, offline eval)
FORMAT = 4  # 4: decided in the target's serving precision (docs/spec.md 2.1); 3: + unseen;
# 2: stale probabilities of the coupled tokens in float32 (1: float16)
FIELDS = (
    "tokens",
    "step",
    "unseen",
    "top",
    "ctok",
    "pc",
    "ctok2",
    "pc2",
    "fut_pos",
    "fut_tok",
    "fut_when",
    "temp",
    "tau",
    "prompt",
)


class TrajectoryRecorder:
    """A drafter that drafts nothing and records the drafter's inputs at every round."""

    def __init__(self):
        self.rows = []

    def __call__(self, view) -> Draft:
        inp = ViewInputs(view)
        n = min(DEPTH + 1, int((view.tokens == view.mask_id).sum()))
        steps = (
            [view.step + min(i, n - 1) for i in range(DEPTH + 1)] if view.temperature > 0 else [view.step] * (DEPTH + 1)
        )  # T = 0: the same tokens at every step
        c = {m: inp.pair(m) for m in set(steps)}
        prob = lambda x: inp.probs.gather(1, x[:, None])[:, 0].float().cpu().numpy()  # float32: 1 - p matters
        self.rows.append(
            dict(
                block=view.block,
                step=view.step,
                tokens=view.tokens.copy(),
                unseen=view.unseen.copy(),
                top=inp.top.half().numpy(),
                ctok=torch.stack([c[m][0] for m in steps]).cpu().numpy().astype(np.int32),
                pc=np.stack([prob(c[m][0]) for m in steps]),
                ctok2=torch.stack([c[m][1] for m in steps]).cpu().numpy().astype(np.int32),
                pc2=np.stack([prob(c[m][1]) for m in steps]),
            )
        )
        return Draft.root()


def record_one(
    model, prompt, new_tokens: int, temperature: float, seed: int, stop_ids=None, threshold: float | None = None
) -> list[dict]:
    """The rows of one exact generation, each with its true future commits, temperature and threshold."""
    return record_run(model, prompt, new_tokens, temperature, seed, stop_ids, threshold)[0]


def record_run(
    model, prompt, new_tokens: int, temperature: float, seed: int, stop_ids=None, threshold: float | None = None
) -> tuple[list[dict], object]:
    """(``record_one``'s rows, the generation's ``Result``)."""
    rec = TrajectoryRecorder()
    res = spotref.generate(
        model,
        prompt,
        new_tokens,
        temperature=temperature,
        seed=seed,
        drafter=rec,
        budget=1,
        depth=0,
        stop_ids=stop_ids,
        threshold=threshold,
    )
    truth = {(b, k): sorted(d) for b, k, d in res.stats["trajectory"]}
    B = model.block_size
    for row in rec.rows:
        fut = [
            (d, c)
            for d, k in enumerate(range(row["step"], B))
            if (row["block"], k) in truth
            for c in truth[(row["block"], k)]
        ]
        row["fut_pos"] = np.full(B, -1, np.int16)
        row["fut_tok"] = np.full(B, -1, np.int32)
        row["fut_when"] = np.full(B, -1, np.int16)
        row["fut_pos"][: len(fut)] = [p for _, (p, _) in fut]
        row["fut_tok"][: len(fut)] = [t for _, (_, t) in fut]
        row["fut_when"][: len(fut)] = [d for d, _ in fut]
        row["temp"] = np.float32(temperature)
        row["tau"] = np.float32(np.nan if threshold is None else threshold)
    return rec.rows, res


def stack(rows: list, mask_id: int, block_size: int) -> "Trajectories":
    """Rows (``record_one``'s, each with a "prompt" index) stacked into ``Trajectories``."""
    arrays = {k: np.stack([r[k] for r in rows]) for k in FIELDS} if rows else {k: np.zeros(0) for k in FIELDS}
    return Trajectories(arrays, mask_id, block_size)


@dataclass
class Trajectories:
    """Recorded states, stacked: one row per state (see ``FIELDS``)."""

    arrays: dict
    mask_id: int
    block_size: int

    def __len__(self) -> int:
        return len(self.arrays["step"])

    def row(self, i: int) -> "Row":
        return Row(self, i)

    def save(self, path) -> None:
        """Written atomically: a kill mid-write leaves no truncated cache behind."""
        atomic_save(
            {
                "arrays": {k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in self.arrays.items()},
                "mask_id": self.mask_id,
                "block_size": self.block_size,
            },
            path,
        )

    @classmethod
    def load(cls, path) -> "Trajectories":
        """``ValueError`` naming the file when it is truncated, corrupt or not a trajectory file."""
        try:
            blob = torch.load(path, weights_only=True)
            arrays = {k: v.numpy() for k, v in blob["arrays"].items()}
            missing = [k for k in FIELDS if k not in arrays]
            if missing:
                raise KeyError(f"no {', '.join(missing)}")
            return cls(arrays, int(blob["mask_id"]), int(blob["block_size"]))
        except FileNotFoundError:
            raise
        except Exception as e:  # zip / pickle / key errors of a broken file
            first = (str(e).strip().splitlines() or [""])[0]  # one line
            raise ValueError(
                f"the trajectory file {path} is corrupt or truncated: {type(e).__name__}: {first}"
            ) from None

    @classmethod
    def concat(cls, parts: list) -> "Trajectories":
        """One ``Trajectories`` of ``parts`` (of one block size) in order; empty parts (a recording
        with no state: their arrays lack the trailing dimensions) are left out."""
        parts = [p for p in parts if len(p)] or parts[:1]
        return cls(
            {k: np.concatenate([p.arrays[k] for p in parts]) for k in FIELDS}, parts[0].mask_id, parts[0].block_size
        )


def record(
    model,
    prompts: list,
    new_tokens: int,
    temperature: float,
    seeds=(0,),
    stop_ids=None,
    desc: str = "record",
    threshold: float | None = None,
) -> Trajectories:
    """Trajectories of exact decoding (the threshold rule at ``threshold``) on every prompt and seed."""
    rows = []
    jobs = [(i, p, s) for i, p in enumerate(prompts) for s in seeds]
    for i, p, s in progress(jobs, desc):
        for row in record_one(model, p, new_tokens, temperature, s, stop_ids, threshold):
            rows.append({**row, "prompt": np.int32(i)})
    return stack(rows, model.mask_id, model.block_size)


def teacher_sample(ds: "Trajectories", n: int, tf_depth: int, rng) -> tuple:
    """(rows (n,), depths (n,)): ``n`` recorded states and how many true decisions to advance
    each by, d = floor(u^2 min(decisions left, tf_depth + 1)) (shallow levels more often)."""
    rows = rng.integers(len(ds), size=n)
    left = ds.arrays["fut_when"][rows].max(1).astype(np.int64) + 1  # decisions left
    return rows, (rng.random(n) ** 2 * np.minimum(left, tf_depth + 1)).astype(np.int64)


class Row:
    """One recorded state, read like ``ViewInputs`` (``DrafterInputs``) (plus the truth)."""

    def __init__(self, ds: Trajectories, i: int):
        a = ds.arrays
        self.tokens, self.step, self.mask_id = a["tokens"][i], int(a["step"][i]), ds.mask_id
        self.unseen = a["unseen"][i]  # (B,) bool
        self.top = torch.from_numpy(a["top"][i].astype(np.float32))  # (B, 32)
        self.ctok, self.pc, self.ctok2, self.pc2 = a["ctok"][i], a["pc"][i], a["ctok2"][i], a["pc2"][i]
        n = int((a["fut_pos"][i] >= 0).sum())
        self.fut_pos, self.fut_tok = a["fut_pos"][i][:n].astype(np.int64), a["fut_tok"][i][:n]
        self.fut_when = a["fut_when"][i][:n].astype(np.int64)
        self.temperature, self.tau = float(a["temp"][i]), float(a["tau"][i])

    def fut_sets(self) -> list[frozenset]:
        """The true decisions from this state on, one set of (position, token) per step."""
        sets = [set() for _ in range(int(self.fut_when.max(initial=-1)) + 1)]
        for w, p, t in zip(self.fut_when, self.fut_pos, self.fut_tok):
            sets[w].add((int(p), int(t)))
        return [frozenset(s) for s in sets]

    def _d(self, m: int) -> int:
        return min(m - self.step, len(self.ctok) - 1)

    def coupled(self, m: int):
        d = self._d(m)
        return self.ctok[d].astype(np.int64), torch.from_numpy(self.pc[d].astype(np.float32))

    def second(self, m: int):
        d = self._d(m)
        return self.ctok2[d].astype(np.int64), torch.from_numpy(self.pc2[d].astype(np.float32))

    def accepted_prefix(self, depth: int) -> int:
        """How many true commits (<= depth) the coupled stale tokens get right, in a row."""
        n = min(depth, len(self.fut_pos), len(self.ctok))
        for d in range(n):
            if self.ctok[d][self.fut_pos[d]] != self.fut_tok[d]:
                return d
        return n


def reached(draft: Draft, row: Row) -> list:
    """Per node of ``draft``: whether the target's decisions from ``row`` reach its state (its
    commits are the first ``depth`` true decisions, as a set)."""
    truth, s = [frozenset()], frozenset()
    for decision in row.fut_sets():
        s = s | decision
        truth.append(s)
    sets, depth = node_states(draft)
    return [d < len(truth) and sets[i] == truth[d] for i, d in enumerate(depth)]


def node_states(draft: Draft) -> tuple:
    """(each node's commits from the root as a set, each node's depth)."""
    sets, depth = [frozenset()], [0]
    for p, cs in zip(draft.parents[1:], draft.commits[1:]):
        sets.append(sets[p] | set(cs))
        depth.append(depth[p] + 1)
    return sets, depth


def accepted(draft: Draft, row: Row) -> int:
    """Accepted depth (decisions) of ``draft`` at ``row``, by state equality as in ``core.walk``:
    a node's state is the set of commits on its path at its depth (merged DAG paths count)."""
    known, s = set(zip(*node_states(draft))), frozenset()
    for d, decision in enumerate(row.fut_sets()):
        s = s | decision
        if (s, d + 1) not in known:
            return d
    return len(row.fut_sets())
