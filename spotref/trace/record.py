"""The recorder: an observer of ``Block``s that writes down every round (docs/spec.md section 8).

A ``Block`` built with ``recorder=rec`` (``Speculator.block(..., recorder=rec)``, or
``generate(..., trace=True)``) tells it of each round after the block has taken it:
``proposed(block, view, draft)`` at the end of ``propose`` and ``walked(block, tree, logits,
taken)`` at the end of ``accept``. The recorder only reads: the drafter's view after the draft
is made (the stale order), the verified tree, and the logits of the accepted rows, which it
decides again with the block's rule and its *own* copy of the block's noise to write down every
masked position's drawn token and confidence. So nothing it does reaches a decision: the tokens
and the pass counts are the same with and without it (tests/trace/test_trace.py).

Times: a round's ``wall_s`` runs from the end of the block's previous round (or its start) to the
call of ``walked``, less the time spent inside the recorder; ``draft_s`` is the part before
``proposed`` (drafting the tree and building the verify batch).
"""

from __future__ import annotations

import time

import numpy as np
import torch

from spotref.trace.fmt import RULE_FIELDS, Trace, committed


class Recorder:
    """Collects the rounds of every block it is attached to; ``trace(...)`` the result."""

    def __init__(self):
        self.blocks = []  # one record per block, in the order the blocks were opened
        self._open = {}  # id(block) -> (block, record, noise, time the current round began)

    def opened(self, block) -> None:
        """Start the record of ``block`` (its index and starting state); idempotent."""
        if id(block) in self._open:
            return
        start = block.state.tolist()
        fixed = sum(1 for t in start if t != block.rule.mask_id)
        record = {"index": int(block.index), "start": start, "fixed": fixed, "rounds": []}
        self.blocks.append(record)
        noise = block.rule.block_noise(block.index)  # the recorder's own: the block's is not read
        self._open[id(block)] = {"block": block, "record": record, "noise": noise, "began": time.perf_counter()}

    def proposed(self, block, view, draft) -> None:
        """The round's draft and, when the drafter saw stale logits, the stale order."""
        t = time.perf_counter()
        self.opened(block)
        entry = self._open[id(block)]
        probs = None if draft.probs is None else [float(p) for p in draft.probs]
        round_ = {
            "step": int(block.step),
            "tree": {
                "parents": [int(p) for p in draft.parents],
                "commits": [[[int(j), int(x)] for j, x in cs] for cs in draft.commits],
                "probs": probs,
            },
            "draft_s": t - entry["began"],
            **stale_order(view),
        }
        entry["record"]["rounds"].append(round_)
        entry["returned"] = time.perf_counter()

    def walked(self, block, tree, logits, taken) -> None:
        """The verified rows, the accepted path and every decision taken along it."""
        t = time.perf_counter()
        entry = self._open[id(block)]
        round_ = entry["record"]["rounds"][-1]
        round_["wall_s"] = round_["draft_s"] + (t - entry["returned"])
        path = accepted_path(tree, taken)
        round_["rows"] = len(tree)
        round_["node_rows"] = node_rows(tree, round_["tree"])
        round_["path"] = path
        noise = entry["noise"]
        round_["decisions"] = [decision(block.rule, tree, logits, r, noise, d) for r, d in zip(path, taken)]
        entry["began"] = time.perf_counter()

    def trace(self, spec, label=None, tokens=None, passes=None, **meta) -> Trace:
        """A ``Trace`` of one decode: the blocks recorded, with ``spec``'s (a ``Speculator``) rule,
        drafter, budget, depth and width; ``tokens`` (default: the blocks' committed tokens) and
        ``passes`` (default: the rounds), and ``meta`` (prompt_length, max_new_tokens, stop_ids,
        family, ...) as given."""
        rule = spec.rule
        name = "exact" if spec.drafter is None else getattr(spec.drafter, "name", type(spec.drafter).__name__)
        decode = {
            "label": label or (name if spec.drafter is None else f"{name} N={spec.budget}"),
            "family": getattr(spec, "family", "sdar"),
            "block_length": rule.block_size,
            "mask_id": rule.mask_id,
            "vocab_size": rule.vocab_size,
            "rule": {k: getattr(rule, k) for k in RULE_FIELDS},
            "drafter": name,
            "budget": int(spec.budget),
            "depth": int(spec.depth),
            "width": spec.width,
            "prompt_length": None,
            "max_new_tokens": None,
            "stop_ids": [],
            **meta,
            "blocks": self.blocks,
        }
        decode["tokens"] = list(tokens) if tokens is not None else committed(decode)
        decode["passes"] = int(passes) if passes is not None else sum(len(b["rounds"]) for b in self.blocks)
        return Trace([decode])


def stale_order(view) -> dict:
    """``stale_order``: the masked positions by descending stale confidence (ties: the lower
    first), as the drafters rank them, and ``stale_confidence`` in that order; None at a
    block's first round and in exact decoding (no drafter reads a view)."""
    if view is None:
        return {"stale_order": None, "stale_confidence": None}
    conf, masked = view.stale_confidence(), view.masked
    order = masked[np.argsort(-conf[masked], kind="stable")]
    return {"stale_order": order.tolist(), "stale_confidence": conf[order].tolist()}


def accepted_path(tree, taken) -> list:
    """The accepted rows from the root: each decision taken leads to the next row while that
    state was verified (the walk of ``core.walk``, read back from its decisions)."""
    path = [0]
    for d in taken:
        nxt = tree.child(path[-1], d)
        if nxt < 0:
            break
        path.append(nxt)
    return path


def node_rows(tree, draft: dict) -> list:
    """The verify row of each draft node (equal states at equal steps share a row)."""
    index = {(tuple(s), int(k)): r for r, (s, k) in enumerate(zip(tree.states.tolist(), tree.steps.tolist()))}
    states, depths, rows = [tree.states[0].tolist()], [0], [0]
    for p, cs in zip(draft["parents"][1:], draft["commits"][1:]):
        state = list(states[p])
        for j, x in cs:
            state[j] = x
        states.append(state)
        depths.append(depths[p] + 1)
        rows.append(index[(tuple(state), int(tree.steps[0]) + depths[-1])])
    return rows


def decision(rule, tree, logits, row: int, noise, taken) -> dict:
    """The decision ``taken`` at verify row ``row``: its step, every masked position with the
    token drawn there and its confidence (what the rule chooses from, decided again), and the
    commits taken, each with its confidence."""
    state, step = tree.states[row], int(tree.steps[row])
    masked = np.flatnonzero(state == rule.mask_id)
    rows = logits[row][torch.as_tensor(masked, device=logits.device)]
    x, c = rule.drawn(rows, masked, noise, step)
    x, c = x.tolist(), c.tolist()
    conf = dict(zip(masked.tolist(), c))
    return {
        "step": step,
        "row": int(row),
        "masked": masked.tolist(),
        "tokens": x,
        "confidences": c,
        "commits": [[int(j), int(t), conf[int(j)]] for j, t in taken],
    }
