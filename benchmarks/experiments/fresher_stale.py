"""Issue 65 experiment (a research script, run from the repository root as
`python benchmarks/experiments/fresher_stale.py gsm-b32 8 8,16`).

At a round start the stale logits are those of the deepest accepted state n*, which lack the
bonus decision (the one no draft predicted). The pass also verified other states; one below the
new state that holds the bonus and lacks one other commit is as stale, but has seen the bonus.
1. How often the last pass held such a state, and how often its logits, decided by the target's
   rule at the new state, give the target's next decision, against n*'s (SPOT online, shipped
   drafter, T = 0, D = 32, the held-out problems); "_any": the same for the verified state that
   holds the bonus and differs least from the new state, commits the new state lacks allowed.
2. Passes of SPOT with the drafter reading those logits instead (``Block.accept`` patched here;
   nothing decided reads the stale logits, so the tokens are asserted unchanged)."""

import contextlib
import sys
from pathlib import Path
from unittest import mock

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # a checkout
import spotref  # noqa: E402
import spotref.spec.decode as dec  # noqa: E402
from spotref.record.prompts import prompts_for  # noqa: E402


def fresher(tree, state: np.ndarray, step: int, bonus: tuple, mask_id: int):
    """(n*'s row, the row of a verified state below ``state`` holding ``bonus`` and lacking no
    more of its commits than n* does (None if none), unseen positions of the latter)."""
    states, steps = np.asarray(tree.states), np.asarray(tree.steps)
    masked = states == mask_id
    prior = state.copy()
    prior[[p for p, _ in bonus]] = mask_id
    last = int(np.flatnonzero((states == prior).all(1) & (steps == step - 1))[0])
    below = (masked | (states == state)).all(1)
    missing = (masked & (state != mask_id)).sum(1)
    holds = ~masked[:, [p for p, _ in bonus]].any(1)
    rows = np.flatnonzero(below & holds & (missing <= missing[last]))
    if not len(rows):
        return last, None, None
    row = int(rows[np.argmin(missing[rows])])
    return last, row, np.flatnonzero(masked[row] & (state != mask_id)).tolist()


def patched_accept(self, logits):
    """``Block.accept``, then the stale logits (and unseen) of ``fresher``'s state when there is one."""
    tree = self._tree
    ACCEPT(self, logits)
    if not self.done and self._decisions:
        _, row, unseen = fresher(tree, self.state, self.step, self._decisions[-1], self.rule.mask_id)
        if row is not None:
            self.stale, self.fresh_unseen = torch.as_tensor(logits)[row].clone(), unseen


def patched_propose(self):
    """``Block.propose`` whose view's unseen positions are the fresher state's (``patched_accept``):
    the view reads them from the last decision, swapped for the call."""
    unseen, self.fresh_unseen = getattr(self, "fresh_unseen", None), None
    if unseen is None:
        return PROPOSE(self)
    kept = self._decisions
    self._decisions = [*kept[:-1], tuple((pos, 0) for pos in unseen)]
    try:
        return PROPOSE(self)
    finally:
        self._decisions = kept


ACCEPT, PROPOSE = dec.Block.accept, dec.Block.propose


def predictions(target, prompts, N: int) -> dict:
    rounds = []
    orig = dec.accept

    def spy(rule, core, tree, logits, noise):
        out = orig(rule, core, tree, logits, noise)
        rounds.append((rule, noise, tree, logits, out[0].copy(), out[1], out[3]))
        return out

    seen = dict(starts=0, held=0, stale_right=0, stale_right_held=0, fresher_right=0)
    seen.update(held_any=0, stale_right_any=0, any_right=0)
    for p in prompts:
        rounds.clear()
        with mock.patch.object(dec, "accept", spy):
            spotref.generate(target, p, 128, drafter=DRAFTER, budget=N, depth=32, stop_ids=target.stop_ids)
        for (rule, noise, tree, logits, state, step, taken), nxt in zip(rounds, rounds[1:]):
            if not (np.asarray(nxt[2].states)[0] == state).all() or not nxt[6] or (state == rule.mask_id).all():
                continue  # the next round is another block's
            last, row, _ = fresher(tree, state, step, taken[-1], rule.mask_id)
            truth = nxt[6][0]
            right = rule.decide(logits[last], state, noise, step) == truth
            seen["starts"] += 1
            seen["stale_right"] += right
            if row is not None:
                seen["held"] += 1
                seen["stale_right_held"] += right
                seen["fresher_right"] += rule.decide(logits[row], state, noise, step) == truth
            other = nearest_holding(tree, state, taken[-1], rule.mask_id)
            if other is not None:
                seen["held_any"] += 1
                seen["stale_right_any"] += right
                seen["any_right"] += rule.decide(logits[other], state, noise, step) == truth
    return seen


def nearest_holding(tree, state: np.ndarray, bonus: tuple, mask_id: int):
    """The verified row holding ``bonus`` whose state differs from ``state`` at the fewest
    positions (commits it lacks or commits ``state`` lacks; the first of those), or None."""
    states = np.asarray(tree.states)
    rows = [i for i in range(len(states)) if all(states[i][p] == t for p, t in bonus)]
    return min(rows, key=lambda i: (int((states[i] != state).sum()), i)) if rows else None


def passes(target, prompts, N: int, fresh: bool) -> tuple:
    out = []
    with (
        mock.patch.multiple(dec.Block, accept=patched_accept, propose=patched_propose)
        if fresh
        else contextlib.nullcontext()
    ):
        for p in prompts:
            out.append(spotref.generate(target, p, 128, drafter=DRAFTER, budget=N, depth=32, stop_ids=target.stop_ids))
    return sum(r.passes for r in out), [r.tokens for r in out]


if __name__ == "__main__":
    torch.set_num_threads(1)
    name, n, budgets = sys.argv[1], int(sys.argv[2]), [int(b) for b in sys.argv[3].split(",")]
    target = spotref.load_target(name)
    prompts = prompts_for(target, n, "test", 64)
    DRAFTER = spotref.load_drafter(name)
    for N in budgets:
        print(f"{name} N={N} round starts:", predictions(target, prompts, N), flush=True)
        (plain, tokens), (fresh, tokens2) = passes(target, prompts, N, False), passes(target, prompts, N, True)
        assert tokens == tokens2
        print(f"{name} N={N} passes: n* stale {plain}, fresher stale {fresh}", flush=True)
