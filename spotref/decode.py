"""Exact decoding and SPOT speculative decoding of a block-diffusion LM (SPEC sections 2-3).

Both run the same outer loop (``decode``): prefill the complete prompt blocks, then per block
start from MASK (a prompt tail that ends mid-block stays fixed), fill it, and store it in the
cache with one more pass (B + 1 forwards per block under the one-position rule, as SDAR's
generate.py, JetEngine, lmdeploy and sglang count them). They differ in how a block is filled:

* ``exact_block``: one denoise pass per decision, the decision applied at once;
* ``spot_block``: rounds of draft -> one batched verify forward over the tree's distinct
  states -> accept by state equality, plus the bonus decision at the deepest accepted state.
  Every accepted transition is the target's own decision at that state with that state's noise,
  so the committed tokens are those of ``exact_block`` whatever the drafter proposes.
"""
from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass, field

import numpy as np
import torch

from spotref.draft import Draft, View, apply
from spotref.rules import DecisionRule


@dataclass
class Result:
    tokens: list          # generated tokens, prompt excluded
    passes: int           # every target forward: prefill + denoise/verify + store
    stats: dict


@dataclass
class Stats:
    passes: int = 0
    starts: list = field(default_factory=list)       # (block, step) at each denoise/verify pass
    accepted: list = field(default_factory=list)     # decisions per denoise/verify pass
    committed: list = field(default_factory=list)    # positions per denoise/verify pass
    draft_nodes: list = field(default_factory=list)  # verify batch rows per pass
    trajectory: list = field(default_factory=list)   # (block, step, commits) in commit order
    blocks: list = field(default_factory=list)       # (new tokens, passes) per decoded block; passes:
                                                     # its denoise/verify passes and its store
    stopped: bool = False                            # the last decoded block holds a stop id
    model_s: float = 0.0
    draft_s: float = 0.0
    book_s: float = 0.0                              # tree building, decisions, acceptance

    @contextlib.contextmanager
    def timed(self, field_name: str):
        """Add the time spent inside the ``with`` block to the float field ``field_name``."""
        t = time.perf_counter()
        try:
            yield
        finally:
            setattr(self, field_name, getattr(self, field_name) + time.perf_counter() - t)

    def record(self, block, step, decisions, rows):
        self.starts.append((block, step))
        for k, d in enumerate(decisions):
            self.trajectory.append((block, step + k, d))
        self.accepted.append(len(decisions))
        self.committed.append(sum(len(d) for d in decisions))
        self.draft_nodes.append(rows)


class BoundTarget:
    """The model bound to one generation's KV cache. Every forward goes through here, counted
    and timed. With ``fused_store`` a finished block is not stored by a pass of its own: its K/V
    are computed inside the next block's first denoise pass (bit-identical, one pass fewer per
    block; the last block is then never stored)."""

    def __init__(self, model, prompt_blocks: torch.Tensor, stats: Stats, fused_store: bool = False):
        self.model, self.stats, self.fused, self.pending = model, stats, fused_store, None
        empty = len(prompt_blocks) == 0
        self.cache = model.prefill(prompt_blocks) if empty else self._pass(model.prefill, prompt_blocks)

    def _pass(self, fn, *args):
        t = time.perf_counter()
        out = fn(*args)
        self.stats.model_s += time.perf_counter() - t
        self.stats.passes += 1
        return out

    def denoise(self, states: np.ndarray) -> torch.Tensor:
        """states: (N, B) -> logits (N, B, V)."""
        states = torch.from_numpy(states)
        if self.pending is None:
            return self._pass(self.model.denoise, self.cache, states)
        block, self.pending = self.pending, None
        return self._pass(self.model.store_and_denoise, self.cache, block, states)

    def store(self, block: np.ndarray) -> None:
        if self.fused:
            self.pending = torch.from_numpy(block)
        else:
            self._pass(self.model.store, self.cache, torch.from_numpy(block))


def exact_block(rule: DecisionRule, target: BoundTarget, block: int, state: np.ndarray):
    """Fill one block with one denoise pass per decision (the reference loop)."""
    step = 0
    while (state == rule.mask_id).any():
        logits = target.denoise(state[None])[0]
        d = rule.decide(logits, state, block, step)                 # logits: (B, V)
        target.stats.record(block, step, [d], 1)
        state, step = apply(state, d), step + 1
    return state


def spot_block(rule, drafter, core, budget, depth, target, block, state):
    """Fill one block with SPOT rounds (SPEC section 3): draft, build, verify, walk."""
    stats, step, stale = target.stats, 0, None
    drafter_rule = rule.copy()       # the drafter's own: nothing it does to it reaches a decision
    max_set = 1 if rule.threshold is None else len(state)
    while (state == rule.mask_id).any():
        with stats.timed("draft_s"):                                          # 1. draft
            view = None if stale is None else View.of(state, step, block, stale, drafter_rule, budget, depth)
            draft = propose(drafter, view)
        with stats.timed("book_s"):                                           # 2. build
            tree = core.build_tree(state, step, draft.parents, draft.commits, rule.mask_id,
                                   rule.vocab_size, max_set, budget, depth)
        logits = target.denoise(tree.states)                                  # 3. verify: (U, B, V)
        with stats.timed("book_s"):                                           # 4. walk
            state, step, stale = accept(rule, core, tree, logits, block, stats)
    return state


def propose(drafter, view) -> Draft:
    """The drafter's tree at ``view`` (the root alone at a block's first state: nothing is stale)."""
    if view is None:
        return Draft.root()
    draft = drafter(view)
    if not isinstance(draft, Draft):
        raise TypeError(f"the drafter returned {type(draft).__name__}, not spotref.Draft")
    return draft


def accept(rule, core, tree, logits, block: int, stats: Stats):
    """Walk the verified tree by state equality; the bonus decision at the deepest accepted state.

    logits: (U, B, V), one row per tree state. Returns the new state, its step and the stale
    logits for the next round (those of the deepest accepted state)."""
    decided = {}

    def decide(row):
        decided[row] = rule.decide(logits[row], tree.states[row], block, int(tree.steps[row]))
        return decided[row]

    path, bonus = core.walk(tree, decide)
    last = path[-1]
    stats.record(block, int(tree.steps[0]), [decided[r] for r in path if decided[r]], len(tree))
    return apply(tree.states[last], bonus), int(tree.steps[last]) + 1, logits[last].float()


def decode(model, prompt: list, max_new_tokens: int, stop_ids, fill_block, stats: Stats,
           fused_store: bool = False) -> list:
    """The outer block loop shared by every decoder; returns the generated tokens."""
    B, mask_id = model.block_size, model.mask_id
    if max_new_tokens == 0:
        return []
    n_full, n_blocks = len(prompt) // B, -(-(len(prompt) + max_new_tokens) // B)
    target = BoundTarget(model, torch.tensor(prompt[: n_full * B], dtype=torch.long), stats, fused_store)
    generated, stops = [], set(stop_ids or ())
    for b in range(n_full, n_blocks):
        tail, before = prompt[b * B:], stats.passes    # the fixed prompt tail (first block only)
        state = np.full(B, mask_id, dtype=np.int64)
        state[: len(tail)] = tail
        state = fill_block(target, b, state)
        new = state[len(tail):].tolist()
        generated += new
        target.store(state)                            # as SDAR: every block
        stats.blocks.append((len(new), stats.passes - before))
        if stops.intersection(new):
            stats.stopped = True                       # SDAR's rule: the block holding it finishes
            break
    generated = generated[:max_new_tokens]
    for i, t in enumerate(generated):
        if t in stops:
            return generated[: i + 1]
    return generated
