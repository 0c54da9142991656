"""The exactness audit, the batch-invariance check, and the GPU check script's CPU smoke run."""

import importlib.util
import json
from pathlib import Path

import pytest
import torch

from spotref.audit import audit, batch_invariance
from spotref.configs import SDARConfig
from spotref.conformance import tiny_config
from spotref.spec.dream import DreamModel
from spotref.spec.sdar import SDARModel

ROOT = Path(__file__).parents[2]


def tiny(cls=SDARModel, B=4) -> SDARModel:
    torch.manual_seed(0)
    return cls(SDARConfig(vocab_size=64, mask_token_id=63, block_size=B, initializer_range=0.3)).eval()


class NotBatchInvariant(SDARModel):
    """A model whose logits change with the batch: token 7 wins whenever N > 1."""

    def denoise(self, cache, states):
        logits = super().denoise(cache, states)
        if states.shape[0] > 1:
            logits[..., 7] += 100.0
        return logits


@pytest.mark.parametrize("kw", [dict(), dict(temperature=1.0, seed=5), dict(threshold=0.3)])
def test_identical_on_the_reference_model(kw):
    r = audit(tiny(), [1, 2, 3, 4, 5], 12, budget=8, depth=4, **kw)
    assert r.identical and r.where is None and r.exact_tokens == r.spec_tokens
    assert str(r).startswith("identical (12 tokens; exact")
    assert r.spec_passes <= r.exact_passes


def test_reports_the_first_divergence():
    r = audit(tiny(NotBatchInvariant), [1, 2, 3, 4, 5], 12, budget=8, depth=4)
    assert not r.identical and r.block is not None and r.step >= 1
    i = r.block * 4 + r.position - 5
    assert r.exact_tokens[i] == r.exact_token and r.got_token in (7, None)
    assert str(r).startswith(f"diverged at block {r.block}, step {r.step}, position {r.position}: exact ")


def test_identical_on_a_canvas_model():
    cfg = tiny_config("dream", 30, 29, 4, hidden=16, layers=1, heads=2, kv=1, tied=False, init=1.0)
    torch.manual_seed(0)
    r = audit(DreamModel(cfg), [1, 2, 3, 4, 5], 12, block_length=4, budget=8, depth=4, temperature=1.0)
    assert r.identical and r.spec_passes <= r.exact_passes


def test_audit_needs_a_drafter():
    with pytest.raises(ValueError, match="drafter"):
        audit(tiny(), [1], 4, drafter=None)


def test_batch_invariance_check():
    ok = batch_invariance(tiny(B=8), prefix_len=16, rows=5)
    assert ok["equal_rows"] == 5 and ok["first_bad_row"] is None and ok["max_abs_diff"] == 0.0
    bad = batch_invariance(tiny(NotBatchInvariant), prefix_len=0, rows=3)
    assert bad["equal_rows"] == 0 and bad["first_bad_row"] == 0 and bad["max_abs_diff"] >= 99
    with pytest.raises(ValueError, match="multiple of the block size"):
        batch_invariance(tiny(), prefix_len=3)


@pytest.mark.slow
def test_gpu_check_smoke_runs_on_cpu(tmp_path):
    spec = importlib.util.spec_from_file_location("gpu_check", ROOT / "benchmarks" / "gpu_check.py")
    gpu_check = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gpu_check)
    out = tmp_path / "gpu_check.json"
    assert gpu_check.main(["--smoke", "--device", "cpu", "--out", str(out)]) == 0
    res = json.loads(out.read_text())
    assert {"env", "curve", "invariance", "audit", "gsm", "projection", "canvas"} <= set(res)
    for family in ("llada", "dream"):
        canvas = res["canvas"][family]
        assert {row["path"] for row in canvas["curve"]} == {"width", "rows"}
        assert canvas["invariance"]["equal_rows"] == canvas["invariance"]["rows"]
    assert res["curve"] and all(row["ms"] > 0 for row in res["curve"])
    assert {row["path"] for row in res["curve"]} == {"width", "rows"}
    assert res["invariance"] and all(r["equal_rows"] == r["rows"] for r in res["invariance"])
    assert res["audit"]["identical"]
    runs = res["gsm"]["runs"]
    assert {"exact rows", "spot N=4", "calibrated N=4", "confidence N=4"} <= set(runs)
    assert all(r["identical"] for k, r in runs.items() if not k.startswith("exact"))  # vs exact at W
