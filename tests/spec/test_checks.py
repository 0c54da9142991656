"""The checks room (``spotref/checks.py``): the model config's messages, and where a draft is
checked (once, by ``build_tree``; ``spotref.Draft`` holds it as tuples and checks only its probs).
The core's messages are pinned in test_core.py, generate's in test_bad_input*.py."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

import spotref
from spotref.configs import SDARConfig, check_config
from spotref.spec.checks import check_probs
from spotref.spec.draft import Draft, DraftBuilder, View
from spotref.spec.rules import DecisionRule


@pytest.mark.parametrize(
    "fields, message",
    [
        (dict(vocab_size=0), "SDARConfig.vocab_size must be an int in [1, 2**31 - 1], got 0"),
        (dict(hidden_size=True), "SDARConfig.hidden_size must be an int in [1, 2**31 - 1], got True"),
        (dict(rms_norm_eps="x"), "SDARConfig.rms_norm_eps must be a positive finite number, got 'x'"),
        (dict(initializer_range=float("nan")), "SDARConfig.initializer_range must be a positive finite number"),
        (dict(head_dim=15), "SDARConfig.head_dim must be even (RoPE rotates pairs), got 15"),
        (dict(rope_theta=1.0), "SDARConfig.rope_theta must be above 1 (the RoPE base), got 1.0"),
        (dict(bos_token_id=300), "SDARConfig.bos_token_id 300 is not a token id of the vocabulary [0, 300)"),
        (dict(eos_token_id=[1, True]), "SDARConfig.eos_token_id [1, True] is not a token id of the vocabulary"),
        (
            dict(num_key_value_heads=3),
            "SDARConfig.num_attention_heads (4) must be a multiple of num_key_value_heads (3)",
        ),
        (dict(mask_token_id=-1), "SDARConfig.mask_token_id must be an int in [0, 2**31 - 1], got -1"),
        (dict(mask_token_id=300), "SDARConfig.mask_token_id 300 is outside the vocabulary [0, 300)"),
        (
            dict(mask_token_id=0, vocab_size=1),
            "SDARConfig.vocab_size 1 holds only MASK: a decoder could commit nothing",
        ),
        (dict(block_size=2**31), "SDARConfig.block_size must be an int in [1, 2**31 - 1], got 2147483648"),
        (dict(tie_word_embeddings=1), "SDARConfig.tie_word_embeddings must be True or False, got 1"),
    ],
)
def test_a_bad_config_field_is_named(fields, message):
    with pytest.raises(ValueError) as e:
        SDARConfig(**fields)
    assert str(e.value).startswith(message), str(e.value)


def test_check_config_checks_a_config_changed_after_construction():
    config = SDARConfig(eos_token_id=[1, None], mask_token_id=5, block_size=4)
    check_config(config)  # what its constructor ran
    config.head_dim = 15
    with pytest.raises(ValueError, match="SDARConfig.head_dim must be even"):
        check_config(config)


def test_a_draft_holds_tuples_and_checks_nothing_build_tree_checks():
    parents, commits = [-1, 0], [[], [[2, 5]]]
    d = Draft(parents, commits)
    parents.append(1), commits[1].append([3, 4])  # the caller's lists are not the draft's
    assert d == Draft((-1, 0), ((), ((2, 5),))) and hash(d) == hash(Draft((-1, 0), ((), ((2, 5),))))
    b = DraftBuilder(np.array([1, 2, 9, 9]))
    b.add(0, ((2, 5),))
    d = b.draft()
    b.add(1, ((3, 4),))
    assert len(d) == 2
    bad = Draft((-1, None), ((), ((2, 5),)))  # built: the tree is build_tree's to check
    for name in ["py"] + (["c"] if spotref.EXTENSION else []):
        core = spotref.core_module(name)
        with pytest.raises(ValueError, match=r"^draft node 1: parent None is not an integer node index$"):
            core.build_tree(np.array([1, 2, 9, 9]), 0, bad.parents, bad.commits, 9, 10, 1, 4, 4)


def test_probs_are_the_draft_s_own_check():
    assert Draft((-1, 0), ((), ((2, 5),)), [1, np.float32(0.5)]).probs == (1.0, 0.5)
    with pytest.raises(ValueError, match="draft: 1 probs for 2 nodes"):
        Draft((-1, 0), ((), ((2, 5),)), (1.0,))
    with pytest.raises(ValueError, match=r"draft node 1: prob nan is not in \[0, 1\]"):
        check_probs((1.0, float("nan")), (-1, 0))
    assert check_probs((1.0,), 5) == (1.0,)  # parents that are no draft: build_tree refuses them
    assert Draft(5, ((),), (1.0,)).parents == 5


def test_a_view_keeps_its_coupled_tokens_in_a_declared_field():
    rule = DecisionRule(mask_id=9, vocab_size=10, block_size=4, temperature=1.0)
    view = View.of(np.array([1, 9, 9, 9]), 1, 0, torch.randn(4, 10), rule, 4, 2)
    assert "_coupled" in {f.name for f in dataclasses.fields(View)} and view._coupled == {}
    first = view.coupled_tokens(1)
    assert view.coupled_tokens(1) is first and list(view._coupled) == [1]
    assert View.of(np.array([1, 9, 9, 9]), 1, 0, view.stale_logits, rule, 4, 2)._coupled == {}  # one per view
