"""The step API (docs/spec.md section 7): Speculator / Block propose-accept, driven by a caller's own loop."""

import numpy as np
import pytest
import torch
from helpers import tiny_model

import spotref
from spotref.api import Speculator
from spotref.conformance import first_divergence

PROMPT = [3, 1, 4, 1, 5, 9]


def own_loop(model, prompt, new_tokens, **kw):
    """A caller that owns the model and its cache: prefill, per block propose/accept, store."""
    spec, B, mask = Speculator.for_model(model, **kw), model.block_size, model.mask_id
    full = len(prompt) // B * B
    cache, out = model.prefill(torch.tensor(prompt[:full])), []
    for index in range(full // B, -(-(len(prompt) + new_tokens) // B)):
        tail = prompt[index * B :]
        state = np.full(B, mask, dtype=np.int64)
        state[: len(tail)] = tail
        blk = spec.block(index, state)
        while not blk.done:
            rows = blk.propose()  # (R, B)
            blk.accept(model.denoise(cache, torch.from_numpy(rows)))
        model.store(cache, torch.from_numpy(blk.tokens))
        out += blk.tokens[len(tail) :].tolist()
    return out[:new_tokens]


@pytest.mark.parametrize(
    "kw",
    [
        dict(),
        dict(temperature=1.0, seed=4),
        dict(threshold=0.4),
        dict(temperature=2.0, top_k=5, top_p=0.9, seed=1, confidence="unfiltered"),
    ],
    ids=str,
)
@pytest.mark.parametrize("drafter", [None, "confidence", "confidence-chain"])
def test_a_callers_loop_gives_generates_tokens(kw, drafter):
    model = tiny_model(V=40, B=4)
    exact = spotref.generate(model, PROMPT, 14, **kw)
    got = own_loop(model, PROMPT, 14, drafter=drafter, budget=8, depth=4, **kw)
    assert first_divergence(exact, got, 4, len(PROMPT)) is None


def test_many_sequences_in_one_batched_forward_per_round():
    """Blocks of different prompts, temperatures and seeds share each forward (same prefix here:
    an empty one, so every row attends to its own block only) and get what each gets alone."""
    model = tiny_model(V=40, B=8)
    cache = model.prefill(torch.zeros(0, dtype=torch.long))
    settings = [
        dict(),
        dict(temperature=1.0, seed=3),
        dict(temperature=0.5, seed=9, threshold=0.3),
        dict(temperature=2.0, seed=1, top_k=4),
    ]
    prompts = [[1, 2, 3], [7], [5, 5, 6, 2], []]
    blocks = []
    for kw, p in zip(settings, prompts):
        state = np.full(8, 39, dtype=np.int64)
        state[: len(p)] = p
        blocks.append(Speculator.for_model(model, drafter="confidence", budget=6, depth=3, **kw).block(0, state))
    while not all(b.done for b in blocks):
        live = [b for b in blocks if not b.done]
        rows = [b.propose() for b in live]
        logits = model.denoise(cache, torch.from_numpy(np.concatenate(rows)))  # one forward
        for b, part in zip(live, torch.split(logits, [len(r) for r in rows])):
            b.accept(part)
    for kw, p, b in zip(settings, prompts, blocks):
        alone = spotref.generate(model, p, 8 - len(p), **kw)
        assert b.tokens[len(p) :].tolist() == alone.tokens


def block(model=None, **kw):
    model = model or tiny_model(V=40, B=4)
    return model, Speculator.for_model(model, drafter="confidence", **kw).block(0, np.full(4, 39))


def test_out_of_turn_calls_are_errors_that_change_nothing():
    model, blk = block()
    with pytest.raises(RuntimeError, match="accept\\(\\) without propose"):
        blk.accept(torch.zeros(1, 4, 40))
    rows = blk.propose()
    with pytest.raises(RuntimeError, match="propose\\(\\) called twice"):
        blk.propose()
    cache = model.prefill(torch.zeros(0, dtype=torch.long))
    blk.accept(model.denoise(cache, torch.from_numpy(rows)).numpy())  # numpy is accepted
    while not blk.done:
        blk.accept(model.denoise(cache, torch.from_numpy(blk.propose())))
    with pytest.raises(RuntimeError, match="done"):
        blk.propose()
    assert blk.tokens.tolist() == spotref.generate(model, [], 4).tokens and blk.passes >= 1


@pytest.mark.parametrize(
    "bad, match",
    [
        (torch.zeros(2, 4, 40), r"shape \(2, 4, 40\), want \(1, 4, 40\)"),
        (torch.zeros(1, 4, 39), "want"),
        (torch.zeros(1, 4, 40, dtype=torch.long), "floating point"),
        (np.zeros((1, 4, 40), dtype=np.int32), "floating point"),
        ([[0.0] * 40] * 4, "torch tensor or a numpy array"),
        (torch.full((1, 4, 40), float("nan")), "NaN"),
        (torch.full((1, 4, 40), float("inf")), r"\+inf"),
        (torch.full((1, 4, 40), -float("inf")), "all -inf"),
    ],
)
def test_bad_logits_are_refused_and_the_block_can_go_on(bad, match):
    model, blk = block()
    rows = blk.propose()
    with pytest.raises(ValueError, match=match):
        blk.accept(bad)
    with pytest.raises(RuntimeError, match="propose\\(\\) called twice"):
        blk.propose()  # still waiting for the right logits
    blk.accept(model.denoise(model.prefill(torch.zeros(0, dtype=torch.long)), torch.from_numpy(rows)))


@pytest.mark.parametrize(
    "kw, match",
    [
        (dict(vocab_size=0, block_size=4, mask_id=0), "vocab_size"),
        (dict(vocab_size=10, block_size=0, mask_id=0), "block_size"),
        (dict(vocab_size=10, block_size=4, mask_id=10), "mask_id"),
        (dict(vocab_size=10, block_size=4, mask_id=9, drafter="spot"), "Speculator.for_model"),
        (dict(vocab_size=10, block_size=4, mask_id=9, budget="auto"), "Speculator.for_model"),
        (dict(vocab_size=10, block_size=4, mask_id=9, temperature=-1), "temperature"),
        (dict(vocab_size=10, block_size=4, mask_id=9, drafter="nonsense"), "drafter"),
    ],
)
def test_bad_speculator_arguments_name_themselves(kw, match):
    with pytest.raises(ValueError, match=match):
        Speculator(**kw)


@pytest.mark.parametrize(
    "state, index, match",
    [
        (np.full(3, 9), 0, "state: 3 tokens, want 4"),
        (np.full(4, 10), 0, "state: token 10 at position 0 is neither a vocabulary token"),
        (np.full(4, 9.0), 0, "state: want a 1-D integer array"),
        (np.full(4, 9), -1, "index"),
        (np.full(4, 9), 1.0, "index"),
    ],
)
def test_bad_block_arguments_name_themselves(state, index, match):
    spec = Speculator(vocab_size=10, block_size=4, mask_id=9)
    with pytest.raises(ValueError, match=match):
        spec.block(index, state)


def test_without_a_model_the_speculator_takes_a_drafter_object():
    model = tiny_model(V=40, B=4)
    spec = Speculator(vocab_size=40, block_size=4, mask_id=39, drafter=spotref.ConfidenceDrafter(), budget=4)
    blk, cache = spec.block(0, np.full(4, 39)), model.prefill(torch.zeros(0, dtype=torch.long))
    while not blk.done:
        blk.accept(model.denoise(cache, torch.from_numpy(blk.propose())))
    assert blk.tokens.tolist() == spotref.generate(model, [], 4).tokens
    assert sum(len(d) for d in blk.decisions) == 4


def test_a_width_makes_every_proposal_that_many_rows_and_the_tokens_those_of_exact_at_it():
    m = tiny_model(V=50, B=4)
    spec = Speculator.for_model(m, drafter="confidence", budget=4, depth=3, width=6)
    cache = m.prefill(torch.tensor([1, 2, 3, 4]))
    blk = spec.block(1, np.full(4, m.mask_id))
    shapes = []
    while not blk.done:
        rows = blk.propose()
        shapes.append(rows.shape)
        assert (rows[len(np.unique(rows, axis=0)) :] == rows[0]).all()  # padding: copies of row 0
        with pytest.raises(ValueError, match="want"):
            blk.accept(torch.zeros(5, 4, 50))  # one row short
        blk.accept(m.denoise(cache, torch.from_numpy(rows), one_forward=blk.one_forward))  # no width to pass
    assert set(shapes) == {(6, 4)} and blk.one_forward and not Speculator.for_model(m).block(0, rows[0]).one_forward
    exact = spotref.generate(m, [1, 2, 3, 4], 4, width=6)
    assert blk.tokens.tolist() == exact.tokens
    with pytest.raises(ValueError, match="budget 8 exceeds the verify width 6"):
        Speculator.for_model(m, drafter="confidence", budget=8, width=6)


class Log:
    """An observer that writes down what a Block tells it."""

    def __init__(self):
        self.events = []

    def opened(self, block):
        self.events.append(("opened", block.index))

    def proposed(self, block, view, draft):
        self.events.append(("proposed", block.step, len(draft)))

    def walked(self, block, tree, logits, taken):
        self.events.append(("walked", len(tree), tuple(taken)))


def test_a_block_tells_its_observers_of_each_round_and_counts_nothing_itself():
    model = tiny_model(seed=2)
    spec = Speculator.for_model(model, drafter="confidence", budget=6, depth=3, temperature=1.0, seed=3)
    cache = model.prefill(torch.tensor(PROMPT[:4]))
    stats, log = spotref.api.Stats(), Log()
    blk = spec.block(1, np.full(4, model.mask_id), stats=stats, recorder=None)
    blk.observers += (log,)  # a second observer, told the same rounds (opened came before it joined)
    while not blk.done:
        blk.accept(model.denoise(cache, torch.from_numpy(blk.propose())))
    kinds = [e[0] for e in log.events]
    assert kinds == ["proposed", "walked"] * blk.passes and blk.passes >= 1
    walks = [e for e in log.events if e[0] == "walked"]
    assert stats.draft_nodes == [rows for _, rows, _ in walks] and stats.accepted == [len(t) for *_, t in walks]
    assert sum(stats.accepted) == len(blk.decisions) and stats.passes == 0  # the block ran no forward
    assert stats.draft_s > 0 and stats.book_s > 0 and not hasattr(blk, "stats")
    alone = spec.block(1, np.full(4, model.mask_id))  # no observer: the same tokens
    while not alone.done:
        alone.accept(model.denoise(cache, torch.from_numpy(alone.propose())))
    assert alone.tokens.tolist() == blk.tokens.tolist()


def test_a_decode_times_its_parts_within_its_wall_time():
    r = spotref.generate(tiny_model(seed=2), PROMPT, 12, drafter="confidence", budget=6)
    s = r.stats
    assert s["model_s"] > 0 and s["draft_s"] > 0 and s["book_s"] > 0 and not any(k.startswith("_") for k in s)
    assert s["model_s"] + s["draft_s"] + s["book_s"] <= s["wall_s"]
