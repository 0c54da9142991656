"""Traces (docs/spec.md section 8): recording never changes tokens or passes; the trace commits
the output; a replay through the rule takes the same commits; a bad file is refused by name.
No matplotlib here (CI has none)."""

import json

import numpy as np
import pytest
import torch
from canvas_model import CanvasModel
from helpers import set_in, tiny_model

import spotref
from spotref import names
from spotref.api import Speculator
from spotref.trace.fmt import Trace, committed
from spotref.trace.record import Recorder
from spotref.trace.replay import replay

PROMPT = [3, 1, 4, 1, 5, 9]
MODELS = {
    "sdar": lambda: tiny_model(V=61, B=4, init=1.0),
    "llada": lambda: CanvasModel("llada"),
    "dream": lambda: CanvasModel("dream"),
}
SETTINGS = [
    dict(),
    dict(temperature=1.0, seed=7),
    dict(threshold=0.3),
    dict(drafter="confidence", budget=5, depth=3),
    dict(drafter="confidence", budget=5, depth=3, temperature=1.0, seed=7, width=6),
    dict(drafter="confidence-chain", budget=4, depth=3, threshold=0.3, temperature=1.0, seed=2),
]


def traced(model, n, prompt=PROMPT, **kw):
    """(plain result, traced result) of one decode."""
    return spotref.generate(model, prompt, n, **kw), spotref.generate(model, prompt, n, trace=True, **kw)


def check_trace(plain, res):
    """Identical output with and without the trace; the trace commits it, replays to it, and
    survives a JSON round trip."""
    assert res.tokens == plain.tokens and res.passes == plain.passes
    assert plain.trace is None
    (decode,) = res.trace.decodes
    assert decode["tokens"] == res.tokens == committed(decode) == replay(decode)
    assert decode["passes"] == res.passes
    assert sum(len(b["rounds"]) for b in decode["blocks"]) == res.stats["rounds"]
    again = Trace.from_dict(json.loads(res.trace.to_json()))
    assert again.decodes == res.trace.decodes


@pytest.mark.parametrize("family", sorted(MODELS))
@pytest.mark.parametrize("kw", SETTINGS, ids=lambda kw: ",".join(f"{k}={v}" for k, v in kw.items()) or "exact")
def test_a_trace_changes_nothing_and_commits_the_output(family, kw):
    model = MODELS[family]()
    extra = {} if family == "sdar" else dict(block_length=4)
    check_trace(*traced(model, 9, **kw, **extra))


@pytest.mark.slow
@pytest.mark.parametrize("target", ["gsm-b32", "gsm-llada"])
@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_shipped_targets_decode_the_same_with_a_trace(target, temperature):
    """The default target and a whole-canvas one, exact and SPOT, T = 0 and 1 (a few tokens)."""
    kw = dict(temperature=temperature, seed=11, prompt=names.target(target).encode("Tom has 3 apples and"))
    exact, traced_exact = traced(target, 3, **kw)
    check_trace(exact, traced_exact)
    plain, res = traced(target, 3, drafter="spot", budget=3, depth=2, **kw)
    check_trace(plain, res)
    assert res.tokens == exact.tokens


def test_the_step_api_records_through_a_recorder():
    model = tiny_model(V=61, B=4, init=1.0)
    spec, rec = Speculator.for_model(model, drafter="confidence", budget=4), Recorder()
    cache = model.prefill(torch.tensor(PROMPT[:4]))
    state = np.array(PROMPT[4:] + [model.mask_id] * 2)
    blk = spec.block(1, state, recorder=rec)
    while not blk.done:
        blk.accept(model.denoise(cache, torch.from_numpy(blk.propose())))
    (decode,) = rec.trace(spec).decodes
    assert decode["tokens"] == blk.tokens[2:].tolist() == replay(decode)
    assert decode["blocks"][0]["fixed"] == 2 and decode["label"] == "confidence N=4"
    with pytest.raises(TypeError, match="recorder must have the methods opened, proposed, walked"):
        spec.block(1, state, recorder=object())


def test_trace_must_be_a_bool():
    with pytest.raises(ValueError, match="trace must be True or False, got 'yes'"):
        spotref.generate(tiny_model(), PROMPT, 2, trace="yes")


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """A saved trace of a small SPOT decode and its text."""
    res = spotref.generate(tiny_model(V=61, B=4, init=1.0), PROMPT, 8, drafter="confidence", budget=4, trace=True)
    path = res.trace.save(tmp_path_factory.mktemp("trace") / "t.json")
    return path, path.read_text()


def test_a_saved_trace_loads_back(saved):
    path, text = saved
    assert Trace.load(path).decodes == json.loads(text)["decodes"]
    assert json.loads(text)["version"] == 1 and json.loads(text)["format"] == "spotref-trace"


def tampered(text: str, change) -> str:
    data = json.loads(text)
    change(data)
    return json.dumps(data)


ROUND = ["decodes", 0, "blocks", 0, "rounds", 0]
BAD = [
    (lambda t: t[: len(t) // 2], r"not a complete JSON document .* a truncated or damaged file"),
    (lambda t: "", r"not a complete JSON document"),
    (lambda t: "[1, 2]", r"not a spotref trace"),
    (lambda t: tampered(t, set_in(["version"], 2)), r"trace version 2; this spotref reads version 1"),
    (lambda t: tampered(t, set_in(["decodes"], [])), r"'decodes' is empty"),
    (lambda t: tampered(t, set_in(["decodes", 0, "tokens"], [1, True])), r"decode 0: 'tokens' must hold ints"),
    (lambda t: tampered(t, set_in(["decodes", 0, "tokens"], [1, 2])), r"decode 0: .* do not commit its 'tokens'"),
    (lambda t: tampered(t, set_in(["decodes", 0, "blocks", 0, "start"], [1])), r"block 0: 'start' holds 1 tokens"),
    (lambda t: tampered(t, set_in([*ROUND, "path"], [])), r"block 0, round 0: 'node_rows' .* 'path' start at row 0"),
    (lambda t: tampered(t, set_in([*ROUND, "wall_s"], "fast")), r"round 0: 'wall_s' must be a number"),
    (lambda t: tampered(t, set_in([*ROUND, "tree", "parents"], [0])), r"round 0: the tree's 'parents' must start"),
    (lambda t: tampered(t, set_in([*ROUND, "decisions", 0, "commits"], [[0, 1]])), r"decision 0: commit \[0, 1\]"),
]


@pytest.mark.parametrize("damage, message", BAD, ids=range(len(BAD)))
def test_a_bad_or_truncated_trace_is_refused_by_name(saved, tmp_path, damage, message):
    path, text = saved
    bad = tmp_path / "bad.json"
    bad.write_text(damage(text))
    with pytest.raises(ValueError, match=message) as e:
        Trace.load(bad)
    assert str(bad) in str(e.value)


def test_a_replay_refuses_a_commit_the_rule_does_not_take(saved):
    """Swapping the confidences of a decision's commit and another masked position: the file is
    well formed (it still commits its tokens), but the rule chooses otherwise."""
    decode = json.loads(saved[1])["decodes"][0]
    d = next(d for b in decode["blocks"] for r in b["rounds"] for d in r["decisions"] if len(d["masked"]) > 1)
    i = d["masked"].index(d["commits"][0][0])
    k = (i + 1) % len(d["masked"])
    d["confidences"][i], d["confidences"][k] = d["confidences"][k] / 2, d["confidences"][i]
    with pytest.raises(ValueError, match=r"block \d+, round \d+, decision \d+: the rule commits"):
        replay(decode)
    assert Trace.from_dict({"format": "spotref-trace", "version": 1, "pieces": {}, "decodes": [decode]})
