"""A drafter cannot change the output through what its view hands it (docs/spec.md section 7): the state,
the stale logits, the rule and its noise are copies or read-only, whatever the drafter does."""

import numpy as np
import pytest
from helpers import tiny_model

import spotref
from spotref import Draft

PROMPT = [3, 1, 4, 1, 5]


def confidence_then(attack):
    """The confidence drafter's draft, after ``attack(view)`` has done its damage."""
    confidence = spotref.ConfidenceDrafter()

    def drafter(view):
        attack(view)
        return confidence(view)

    return drafter


def write_state(view):
    view.tokens.flags.writeable = True  # a copy: even unlocked, writes stay in the view
    view.tokens[view.masked[0]] = 5


def write_state_locked(view):
    with pytest.raises(ValueError, match="read-only"):
        view.tokens[view.masked[0]] = 5


def write_stale_logits(view):
    view.stale_logits.fill_(0.0)
    view.stale_logits[:, 7] = 50.0


def write_unseen(view):
    with pytest.raises(ValueError, match="read-only"):
        view.unseen[:] = True
    view.unseen.flags.writeable = True  # its own array: even unlocked, writes stay in the view
    view.unseen[:] = ~view.unseen


def bend_the_rule(view):
    rule = view.rule
    rule.temperature, rule.threshold, rule.top_k, rule.top_p = 3.0, 0.01, 2, 0.3
    rule.mask_id, rule.seed = 7, rule.seed + 1


def poison_the_noise(view):
    for k in range(view.step, view.step + 4):
        view.noise(k, view.stale_logits.device).fill_(100.0)
    view.noise(view.step, "cpu")[:, 9] = 1e6


ATTACKS = [write_state, write_state_locked, write_unseen, write_stale_logits, bend_the_rule, poison_the_noise]


@pytest.mark.parametrize("attack", ATTACKS, ids=lambda f: f.__name__)
@pytest.mark.parametrize(
    "kw",
    [
        dict(temperature=0.0),
        dict(temperature=1.0, seed=7),
        dict(temperature=0.5, threshold=0.4, seed=2),
        dict(temperature=2.0, top_k=5, top_p=0.9, seed=3),
    ],
    ids=str,
)
def test_a_hostile_drafter_cannot_change_the_output(attack, kw):
    model = tiny_model(V=40, B=4)
    exact = spotref.generate(model, PROMPT, 14, **kw)
    got = spotref.generate(model, PROMPT, 14, drafter=confidence_then(attack), budget=8, depth=4, **kw)
    assert got.tokens == exact.tokens


def test_a_view_kept_from_an_earlier_round_cannot_change_the_output():
    model, kept = tiny_model(V=40, B=8), []

    def drafter(view):
        kept.append(view)
        for old in kept:  # write into every view seen so far
            old.tokens.flags.writeable = True
            old.tokens[:] = 3
            old.stale_logits.zero_()
        return Draft.root()

    exact = spotref.generate(model, PROMPT, 20, temperature=1.0, seed=1)
    assert spotref.generate(model, PROMPT, 20, temperature=1.0, seed=1, drafter=drafter).tokens == exact.tokens


def test_the_state_write_changed_the_drafters_copy_only():
    """The attack is real: the drafter's own view did change (the test above is not vacuous)."""
    model, seen = tiny_model(V=40, B=4), []

    def drafter(view):
        before = view.tokens.copy()
        write_state(view)
        seen.append(not np.array_equal(before, view.tokens))
        return Draft.root()

    spotref.generate(model, PROMPT, 8, drafter=drafter)
    assert seen and all(seen)
