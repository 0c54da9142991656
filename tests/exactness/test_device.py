"""Every drafter and the rule run on the logits' device (issue 37).

On a CPU-only machine the code path is audited: in the modules that touch the logits (the rule,
the view, the drafters' inputs), every tensor made from host data names the device it goes to.
Where CUDA is present, gsm-b32 is decoded on it by every drafter at a fixed width and compared
with exact decoding at that width, T = 0 and 1."""

import re
from pathlib import Path

import pytest
import torch

import spotref
from workbench.data.corpora import open_corpus

ROOT = Path(__file__).resolve().parents[2]
ON_LOGITS_DEVICE = ["spotref/spec/rules.py", "spotref/spec/draft.py", "spotref/drafters/inputs.py"]
MAKERS = re.compile(r"torch\.(arange|as_tensor|tensor|from_numpy|zeros|ones|full|empty)\(")


def calls(text: str):
    """(line number, the whole call) for each tensor maker, parentheses balanced."""
    for m in MAKERS.finditer(text):
        depth, i = 0, m.end() - 1
        while True:
            depth += {"(": 1, ")": -1}.get(text[i], 0)
            i += 1
            if depth == 0:
                break
        yield text.count("\n", 0, m.start()) + 1, text[m.start() : i]


@pytest.mark.parametrize("path", ON_LOGITS_DEVICE)
def test_tensors_made_beside_the_logits_name_their_device(path):
    found = list(calls((ROOT / path).read_text()))
    bad = [(n, c) for n, c in found if "device=" not in c]
    assert not bad, f"{path}: tensors made without a device (they land on the CPU): {bad}"


def test_the_audit_can_fail():
    assert list(calls("x = torch.from_numpy(a)[:, None]\ny = torch.arange(3, device=d)"))[0][1] == "torch.from_numpy(a)"


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device here (run where one is)")
@pytest.mark.parametrize("T", [0.0, 1.0])
@pytest.mark.parametrize("drafter", ["confidence", "calibrated", "spot"])
def test_every_drafter_decodes_on_cuda_identically_at_a_fixed_width(drafter, T):
    target = spotref.load_target("gsm-b32")
    model = target.model.cuda()
    prompt = target.encode(open_corpus(target.meta["corpus"]).heldout(1, seed=2)[0][0])  # the workbench's seed 2
    kw = dict(temperature=T, seed=5, stop_ids=target.stop_ids, width=8)
    exact = spotref.generate(model, prompt, 96, **kw)
    spot = spotref.generate(model, prompt, 96, drafter=drafter, budget=8, **kw)
    assert spot.tokens == exact.tokens and spot.passes < exact.passes
