"""``benchmarks/universal_drafter.py --offline``: SPOT rounds simulated along recorded
trajectories count the rounds the decoder runs online (every round after a block's first pass),
and exact decoding (a drafter that drafts nothing) one round per recorded state."""

import importlib.util
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from helpers import tiny_model

import spotref
from spotref.drafters.inputs import ViewInputs
from spotref.record.trajectories import record

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "universal_drafter.py"
PROMPTS, NEW = [[1, 2, 3, 4, 5, 6, 7, 8], [9, 10, 11]], 24


@pytest.fixture(scope="module")
def bench():
    path, threads = list(sys.path), torch.get_num_threads()
    spec = importlib.util.spec_from_file_location("bench_universal_drafter", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    finally:
        sys.path[:] = path
        torch.set_num_threads(threads)
    return module


class Chain:
    """Drafts the masked positions left to right with their coupled tokens (live or recorded)."""

    def __init__(self, depth_cap: int):
        self.cap = depth_cap

    def draft(self, inp, N, D):
        masked = np.flatnonzero(inp.tokens == inp.mask_id)[: min(N - 1, D, self.cap)]
        return spotref.Draft.chain([((int(j), int(inp.coupled(inp.step + d)[0][j])),) for d, j in enumerate(masked)])

    def __call__(self, view):
        return self.draft(ViewInputs(view), view.budget, view.depth)


@pytest.mark.parametrize("T", [0.0, 1.0])
def test_offline_rounds_are_the_online_rounds_after_each_blocks_first(bench, T):
    model = tiny_model(V=61, B=8, init=1.0, seed=3)
    o = SimpleNamespace(budget=6, depth=4, temperature=T)
    ds = record(model, PROMPTS, NEW, T, seeds=(0,))
    online = 0
    for p in PROMPTS:
        kw = dict(temperature=T, seed=0, budget=o.budget, depth=o.depth)
        res = spotref.generate(model, p, NEW, drafter=Chain(4), **kw)
        online += sum(1 for _, k in res.stats["starts"] if k > 0)
    assert bench.offline_rounds(Chain(4), ds, o) == online < len(ds)
    assert bench.offline_rounds(Chain(0), ds, o) == len(ds)  # drafting nothing: exact decoding's steps


def test_offline_share_of_the_own_drafters_gain(bench):
    model = tiny_model(V=61, B=8, init=1.0, seed=3)
    o = SimpleNamespace(budget=6, depth=4, temperature=0.0)
    ds = record(model, PROMPTS, NEW, 0.0, seeds=(0,))
    row = bench.offline(ds, (("own", Chain(4)), ("universal", Chain(1)), ("compare", Chain(0))), o)
    own, one = row["own"], row["universal"]
    assert row["exact"] == len(ds) and row["compare"] == len(ds) and own <= one and own < len(ds)
    assert row["share_of_own_gain"] == {"universal": (len(ds) - one) / (len(ds) - own), "compare": 0.0}
