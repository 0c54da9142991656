"""Every bad argument is a ValueError naming it, raised before any forward pass: the catalogue
for ``spotref.generate`` and for drafts (checkpoints, targets and drafters are in
test_bad_input_files.py, the command line in test_bad_input_cli.py; docs/reliability.md lists
them all)."""

import math

import numpy as np
import pytest
import torch
from helpers import tiny_model

import spotref
from spotref import Draft


@pytest.fixture
def model(monkeypatch):
    m = tiny_model(V=20, B=4)  # MASK = 19

    def no_forward(*a, **k):
        raise AssertionError("a forward pass ran before the arguments were checked")

    for name in ("prefill", "denoise", "store", "forward"):
        monkeypatch.setattr(m, name, no_forward)
    return m


@pytest.mark.parametrize(
    "kwargs, name",
    [
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
        (dict(temperature=1e300), r"temperature 1e\+300 is above 3.4e\+38"),  # inf in float32
        (dict(temperature=1e39, precision="float64"), r"temperature 1e\+39 is above"),  # one range
        (dict(threshold=0.0), "threshold"),
        (dict(threshold=1.0), "threshold"),
        (dict(threshold=math.nan), "threshold"),
        (dict(top_k=0), "top_k"),
        (dict(top_p=0.0), "top_p"),
        (dict(top_p=1.5), "top_p"),
        (dict(budget=0), "budget"),
        (dict(budget=10**6), "budget"),  # unbounded trees: capped at MAX_ROWS states a pass
        (dict(budget=4, width=10**6), "width"),
        (dict(depth=-1), "depth"),
        (dict(seed=-3), "seed"),
        (dict(stop_ids=[25]), "stop_ids"),
        (dict(drafter="nonsense"), "drafter"),
        (dict(drafter=42), "drafter"),
    ],
)
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


@pytest.mark.parametrize(
    "draft, message",
    [
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
    ],
)
def test_an_invalid_draft_is_rejected_naming_the_node(draft, message):
    m = tiny_model(V=20, B=4)
    with pytest.raises(ValueError, match=message):
        spotref.generate(m, [1, 2], 6, drafter=lambda view: draft, budget=16, depth=1)


def test_drafter_must_return_a_draft():
    m = tiny_model(V=20, B=4)
    with pytest.raises(TypeError, match="spotref.Draft"):
        spotref.generate(m, [1, 2], 6, drafter=lambda view: [(-1,), ((),)])


# ---- generate: the catalogue of issue 9 and more ---------------------------------------------


class Opaque:
    """Neither a model nor a target."""


@pytest.mark.parametrize(
    "kwargs, name",
    [
        (dict(temperature=1e-320), "temperature"),  # L / T overflows float64
        (dict(temperature=1e-7), "temperature"),  # below MIN_TEMPERATURE
        (dict(temperature=5e-324), "temperature"),
        (dict(temperature=True), "temperature"),
        (dict(temperature=1j), "temperature"),
        (dict(temperature=np.float64("nan")), "temperature"),
        (dict(seed=2**64), "seed"),  # would wrap silently
        (dict(seed=2**70), "seed"),
        (dict(seed=1.5), "seed"),
        (dict(seed=True), "seed"),
        (dict(seed="0"), "seed"),
        (dict(prompt_ids={1, 2, 3}), "prompt_ids.*unordered"),
        (dict(prompt_ids=frozenset({1, 2})), "prompt_ids.*unordered"),
        (dict(prompt_ids={1: 0, 2: 0}), "prompt_ids.*unordered"),
        (dict(prompt_ids=None), "prompt_ids"),
        (dict(prompt_ids=5), "prompt_ids"),
        (dict(prompt_ids=b"ab"), "prompt_ids"),
        (dict(prompt_ids=[None]), "prompt_ids"),
        (dict(prompt_ids=[True, 2]), "prompt_ids"),
        (dict(prompt_ids=[np.float32(1)]), "prompt_ids"),
        (dict(prompt_ids=np.array([[1, 2]])), "prompt_ids"),
        (dict(prompt_ids=torch.tensor([1.0, 2.0])), "prompt_ids"),
        (dict(prompt_ids=torch.tensor(3)), "prompt_ids"),
        (dict(stop_ids=np.zeros((2, 2), dtype=np.int64)), "stop_ids"),
        (dict(stop_ids=torch.zeros(1, 2, dtype=torch.long)), "stop_ids"),
        (dict(stop_ids="5"), "stop_ids"),
        (dict(stop_ids=b"5"), "stop_ids"),
        (dict(stop_ids=2.0), "stop_ids"),
        (dict(stop_ids=True), "stop_ids"),
        (dict(stop_ids=[True]), "stop_ids"),
        (dict(stop_ids=[-1]), "stop_ids"),
        (dict(stop_ids=20), "stop_ids"),
        (dict(stop_ids=[[1]]), "stop_ids"),
        (dict(stop_ids={1: 2}), "stop_ids"),
        (dict(stop_ids=np.array([1.5])), "stop_ids"),
        (dict(max_new_tokens=True), "max_new_tokens"),
        (dict(max_new_tokens=np.int64(-1)), "max_new_tokens"),
        (dict(max_new_tokens=None), "max_new_tokens"),
        (dict(top_k=True), "top_k"),
        (dict(top_k=1.0), "top_k"),
        (dict(top_p=-0.1), "top_p"),
        (dict(top_p=math.inf), "top_p"),
        (dict(threshold=True), "threshold"),
        (dict(threshold=-0.5), "threshold"),
        (dict(threshold="0.5"), "threshold"),
        (dict(budget="x"), "budget"),
        (dict(budget=2.5), "budget"),
        (dict(budget=-1), "budget"),
        (dict(budget=None), "budget"),
        (dict(depth=1.5), "depth"),
        (dict(depth=True), "depth"),
        (dict(fused_store="no"), "fused_store"),
        (dict(fused_store=1), "fused_store"),
        (dict(fused_store=None), "fused_store"),
        (dict(core="x"), "core"),
        (dict(core=42), "core"),
        (dict(core=math), "core"),  # a module, but not a core
        (dict(drafter=[1, 2]), "drafter"),
        (dict(drafter=""), "drafter"),
    ],
)
def test_more_bad_arguments_are_named(model, kwargs, name):
    args = dict(prompt_ids=[1, 2, 3], max_new_tokens=8, drafter="confidence")
    args.update(kwargs)
    with pytest.raises(ValueError, match=name):
        spotref.generate(model, **args)


@pytest.mark.parametrize("bad", [42, None, "no-such-target", Opaque(), torch.nn.Linear(2, 2), [1, 2], "../x.json"])
def test_model_must_be_a_model_a_target_or_a_target_name(bad):
    with pytest.raises(ValueError, match="model"):
        spotref.generate(bad, [1, 2, 3], 4)


def test_stop_ids_as_an_int_an_array_or_a_tensor():
    """One id (as Hugging Face's eos_token_id), or any 1-D container of ids."""
    m = tiny_model(V=20, B=4)
    free = spotref.generate(m, [1, 2, 3], 12, temperature=1.0, seed=3)
    stop = free.tokens[5]
    want = free.tokens[: free.tokens.index(stop) + 1]
    for stops in (
        stop,
        np.int64(stop),
        [stop],
        np.array([stop]),
        torch.tensor([stop]),
        torch.tensor(stop),
        (stop, stop),
        {stop},
    ):
        got = spotref.generate(m, [1, 2, 3], 12, temperature=1.0, seed=3, stop_ids=stops)
        assert got.tokens == want, stops


def test_seed_uses_all_64_bits():
    m = tiny_model(V=20, B=4)
    a = spotref.generate(m, [1, 2, 3], 8, temperature=1.0, seed=2**64 - 1)
    b = spotref.generate(m, [1, 2, 3], 8, temperature=1.0, seed=2**64 - 1)
    assert a.tokens == b.tokens


def test_smallest_temperature_is_accepted():
    from spotref.api import MIN_TEMPERATURE

    m = tiny_model(V=20, B=4)
    assert len(spotref.generate(m, [1, 2, 3], 8, temperature=MIN_TEMPERATURE).tokens) == 8


@pytest.mark.parametrize("core", ["py", "c", None])
def test_core_by_name(core):
    if core == "c" and not spotref.EXTENSION:
        pytest.skip("the compiled core is not built")
    m = tiny_model(V=20, B=4)
    want = spotref.generate(m, [1, 2, 3], 8).tokens
    assert spotref.generate(m, [1, 2, 3], 8, drafter="confidence", core=core).tokens == want


@pytest.mark.slow
def test_model_as_a_target_or_its_name():
    target = spotref.load_target("stdlib-b32")
    ids = target.encode("def f(x):")
    want = spotref.generate(target.model, ids, 8).tokens
    assert spotref.generate(target, ids, 8).tokens == want
    assert spotref.generate("stdlib-b32", ids, 8, drafter="confidence").tokens == want


# ---- drafts: types (checked once, by build_tree: both cores share check_node's messages; see test_core.py)


def refused(draft, message):
    """generate with a drafter that proposes ``draft`` raises a ValueError matching ``message``."""
    m = tiny_model(V=20, B=4)
    with pytest.raises(ValueError, match=message):
        spotref.generate(m, [1, 2], 6, drafter=lambda view: draft)


def test_draft_commits_must_be_pairs():
    refused(Draft((-1, 0), ((), (3,))), "node 1: commits must be")


@pytest.mark.parametrize("parent", [None, "0", 0.0, True, False, 1.0, np.float64(0), [0]])
def test_a_parent_that_is_not_an_integer_names_the_node(parent):
    refused(Draft((-1, parent), ((), ((2, 5),))), "node 1: parent .* is not an integer node index")


@pytest.mark.parametrize(
    "commit", [(True, 5), (False, 5), (2, True), (np.bool_(True), 5), (2.0, 5), ("2", 5), (2, None), (2, np.float32(5))]
)
def test_a_position_or_token_that_is_not_an_integer_names_the_node(commit):
    refused(Draft((-1, 0), ((), (commit,))), "node 1: commit .* is not a pair of ints")


@pytest.mark.parametrize(
    "parents, commits, message",
    [
        (5, ((),), "draft: parents and commits must be tuples or lists, got int and tuple"),
        ("ab", ((),), "draft: parents and commits must be tuples or lists, got str and tuple"),
        ((-1,), 7, "draft: parents and commits must be tuples or lists, got tuple and int"),
        ((-1,), "x", "draft: parents and commits must be tuples or lists, got tuple and str"),
        ((None,), ((),), "node 0"),
    ],
)
def test_draft_shapes_that_are_not_sequences(parents, commits, message):
    refused(Draft(parents, commits), message)


@pytest.mark.parametrize(
    "parents, commits, message",
    [
        ((-1, None), ((), ((2, 5),)), "node 1: parent None"),
        ((-1, "0"), ((), ((2, 5),)), "node 1: parent '0'"),
        ((-1, 0.0), ((), ((2, 5),)), "node 1: parent 0.0"),
        ((-1, True), ((), ((2, 5),)), "node 1: parent True"),
        ((-1, 0), ((), ((True, 5),)), "node 1: commit \\(True, 5\\)"),
        ((-1.0,), ((),), "node 0"),
    ],
)
def test_raw_trees_are_refused_by_both_cores(parents, commits, message):
    """A raw parent array that never went through Draft is refused by either core, naming the node."""
    for core in ["py"] + (["c"] if spotref.EXTENSION else []):
        with pytest.raises(ValueError, match=message):
            spotref.core_module(core).build_tree(np.array([1, 2, 19, 19]), 0, parents, commits, 19, 20, 1, 16, 8)


def test_numpy_positions_and_tokens_are_accepted():
    m = tiny_model(V=20, B=4)
    want = spotref.generate(m, [1, 2], 6).tokens

    def drafter(view):
        j = view.masked[0]
        return Draft((np.int64(-1), np.int32(0)), ((), ((np.int64(j), np.int16(view.coupled_token(j, view.step))),)))

    assert spotref.generate(m, [1, 2], 6, drafter=drafter).tokens == want


# ---- a temperature the rule cannot take: refused before the first pass ---------------------------


@pytest.mark.parametrize("T", [30.0, 100.0, 1e6])
def test_llada_refuses_a_temperature_its_draw_cannot_take(T):
    """LLaDA's divisor (-log u) ** T underflows float64 to 0 above T = 20: MASK's 0 / 0 was NaN,
    and the rule committed MASK (the core then refused it as "token 39 ... is not a vocabulary
    token", after the first pass). Now the temperature is named before any pass."""
    from canvas_model import CanvasModel

    m = CanvasModel("llada")
    with pytest.raises(ValueError, match=rf"temperature {T!r} is above 20, the most LLaDA's draw takes"):
        spotref.generate(m, [1, 2, 3], 8, temperature=T, drafter="confidence", budget=4)
    assert m.calls == 0


def test_llada_takes_temperature_20_and_dream_larger_ones():
    from canvas_model import CanvasModel

    llada, dream = CanvasModel("llada"), CanvasModel("dream")
    assert len(spotref.generate(llada, [1, 2, 3], 8, temperature=20.0).tokens) == 8
    assert len(spotref.generate(dream, [1, 2, 3], 8, temperature=1e6).tokens) == 8
