"""Token stability rates (``spotref.tools.stability``) agree with reading the recorded rows one by one."""
import re

import numpy as np
import pytest
from helpers import tiny_model

from spotref.tools import stability
from spotref.tools.trajectories import record


@pytest.mark.parametrize("T", [0.0, 1.0])
def test_rates_match_the_rows(T):
    model = tiny_model(V=61, B=8, init=1.0, seed=3)
    ds = record(model, [[1, 2, 3, 4, 5, 6, 7, 8], [9, 10, 11]], 24, T, seeds=(0, 1))
    for d in (0, 1, 3):
        hits1, hits2 = [], []
        for i in range(len(ds)):
            r = ds.row(i)
            if len(r.fut_pos) <= d:
                continue
            j, want = r.fut_pos[d], r.fut_tok[d]
            hits1.append(r.coupled(r.step + d)[0][j] == want)
            hits2.append(hits1[-1] or r.second(r.step + d)[0][j] == want)
        top1, top2, n = stability.rates(ds, d)
        assert n == len(hits1) > 0
        assert top1 == pytest.approx(np.mean(hits1)) and top2 == pytest.approx(np.mean(hits2))
        assert top1 <= top2


def test_cli_writes_the_table(tmp_path, monkeypatch):
    out = tmp_path / "s.md"
    assert stability.main(["stdlib-b16", "--test-prompts", "1", "--new-tokens", "16",
                           "--data-dir", str(tmp_path), "--out", str(out)]) == 0
    text = out.read_text()
    for T in ("0", "1"):
        assert re.search(rf"stdlib-b16 \|\s*{T} \|\s*\d+ \|(\s*[01]\.\d{{3}} / [01]\.\d{{3}} \|){{4}}", text), text
    assert "d = 0: top-1 / top-2" in text
