"""Every bad argument is a ValueError naming it, raised before any forward pass."""
import math

import numpy as np
import pytest
import torch

import spotref
from spotref import Draft
from helpers import tiny_model


@pytest.fixture
def model(monkeypatch):
    m = tiny_model(V=20, B=4)                               # MASK = 19

    def no_forward(*a, **k):
        raise AssertionError("a forward pass ran before the arguments were checked")
    for name in ("prefill", "denoise", "store", "forward"):
        monkeypatch.setattr(m, name, no_forward)
    return m


@pytest.mark.parametrize("kwargs, name", [
    (dict(prompt_ids=[1, 2.5]), "prompt_ids"),
    (dict(prompt_ids=["a"]), "prompt_ids"),
    (dict(prompt_ids="hello"), "prompt_ids"),
    (dict(prompt_ids=[[1, 2]]), "prompt_ids"),
    (dict(prompt_ids=torch.zeros(2, 2, dtype=torch.long)), "prompt_ids"),
    (dict(prompt_ids=[1, 20]), "prompt_ids"),
    (dict(prompt_ids=[-1]), "prompt_ids"),
    (dict(prompt_ids=[3, 19]), "MASK"),
    (dict(max_new_tokens=-1), "max_new_tokens"),
    (dict(max_new_tokens=2.0), "max_new_tokens"),
    (dict(max_new_tokens=40000), "max_position_embeddings"),
    (dict(temperature=-0.5), "temperature"),
    (dict(temperature=math.nan), "temperature"),
    (dict(temperature=math.inf), "temperature"),
    (dict(temperature="hot"), "temperature"),
    (dict(threshold=0.0), "threshold"),
    (dict(threshold=1.0), "threshold"),
    (dict(threshold=math.nan), "threshold"),
    (dict(top_k=0), "top_k"),
    (dict(top_p=0.0), "top_p"),
    (dict(top_p=1.5), "top_p"),
    (dict(budget=0), "budget"),
    (dict(depth=-1), "depth"),
    (dict(seed=-3), "seed"),
    (dict(stop_ids=[25]), "stop_ids"),
    (dict(drafter="nonsense"), "drafter"),
    (dict(drafter=42), "drafter"),
])
def test_bad_argument_is_named(model, kwargs, name):
    args = dict(prompt_ids=[1, 2, 3], max_new_tokens=8, drafter="confidence")
    args.update(kwargs)
    with pytest.raises(ValueError, match=name):
        spotref.generate(model, **args)


def test_numpy_and_torch_prompts_are_accepted():
    m = tiny_model(V=20, B=4)
    a = spotref.generate(m, [1, 2, 3], 5)
    assert spotref.generate(m, np.array([1, 2, 3]), 5).tokens == a.tokens
    assert spotref.generate(m, torch.tensor([1, 2, 3]), 5).tokens == a.tokens


@pytest.mark.parametrize("draft, message", [
    (Draft((-1, 0), ((), ((0, 5),))), "node 1: position 0 is already committed"),
    (Draft((-1, 0), ((), ((9, 5),))), "node 1: position 9 is outside the block"),
    (Draft((-1, 0), ((), ((2, 19),))), "node 1: token 19"),
    (Draft((-1, 0), ((), ((2, 20),))), "node 1: token 20"),
    (Draft((-1, 0, 0), ((), ((2, 5),), ((3, 1), (2, 4)))), "node 2: 2 commits"),
    (Draft((-1, 1), ((), ((2, 5),))), "node 1: parent 1"),
    (Draft((-1, 0), ((), ())), "node 1: 0 commits"),
    (Draft((0,), ((),)), "node 0"),
    (Draft((-1,) + (0,) * 16, ((),) + (((2, 5),),) * 16), "budget"),
    (Draft.chain([((2, 5),), ((3, 5),)]), "depth 2 exceeds the depth cap 1"),
])
def test_an_invalid_draft_is_rejected_naming_the_node(draft, message):
    m = tiny_model(V=20, B=4)
    with pytest.raises(ValueError, match=message):
        spotref.generate(m, [1, 2], 6, drafter=lambda view: draft, budget=16, depth=1)


def test_draft_commits_must_be_pairs():
    with pytest.raises(ValueError, match="node 1"):
        Draft((-1, 0), ((), (3,)))


def test_drafter_must_return_a_draft():
    m = tiny_model(V=20, B=4)
    with pytest.raises(TypeError, match="spotref.Draft"):
        spotref.generate(m, [1, 2], 6, drafter=lambda view: [(-1,), ((),)])
