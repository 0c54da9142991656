"""Token stability rates (``workbench.bench.stability``) agree with reading the recorded rows one by one."""

import re

import numpy as np
import pytest
from helpers import tiny_model

from spotref.record.trajectories import record
from workbench.bench import stability


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


class Digits:
    """A tokenizer stand-in: token t decodes to str(t) when t < 10, to "x" otherwise."""

    def decode(self, ids):
        return "".join(str(t) if t < 10 else " x" for t in ids)


def test_token_classes_and_confidence_buckets():
    classify = stability.token_classes(Digits(), [60])
    assert list(classify(np.array([60, 3, 11, 0]))) == ["end-of-text", "digits", "other", "digits"]
    assert list(stability.bucket(np.array([0.0, 0.49, 0.5, 0.89, 0.9, 1.0]))) == [
        "[0, 0.5)",
        "[0, 0.5)",
        "[0.5, 0.9)",
        "[0.5, 0.9)",
        "[0.9, 1]",
        "[0.9, 1]",
    ]


@pytest.mark.parametrize("T", [0.0, 1.0])
def test_split_rows_partition_the_commits(T):
    """Each commit falls in exactly one class and one bucket: the groups' counts add up, and the
    end-of-text group holds exactly the commits of a stop id."""
    model = tiny_model(V=61, B=8, init=1.0, seed=3)
    ds = record(model, [[1, 2, 3, 4, 5, 6, 7, 8], [9, 10, 11]], 24, T)
    stop = int(stability.outcomes(ds, 0)["tok"][0])
    classify = stability.token_classes(Digits(), [stop])
    for label, names in (
        (lambda o: classify(o["tok"]), stability.CLASSES),
        (lambda o: stability.bucket(o["conf"]), stability.BUCKET_NAMES),
    ):
        rows = stability.split_rows("m", {T: ds}, label, names, depths=(0, 1))
        assert sum(r[3] for r in rows) == stability.rates(ds, 0)[2]
        assert all(r[2] in names for r in rows)
    top1, _, n = stability.rates(ds, 0, where=lambda o: o["tok"] == stop)
    hits = [
        r
        for r in stability.split_rows("m", {T: ds}, lambda o: classify(o["tok"]), stability.CLASSES)
        if r[2] == "end-of-text"
    ]
    assert hits[0][3] == n > 0 and hits[0][4].startswith(f"{top1:.3f} / ")


def test_cli_writes_the_tables(tmp_path):
    from spotref.load.targets import TARGETS_DIR

    out = tmp_path / "s.md"
    assert (
        stability.main(
            [
                "stdlib-b16",
                "--targets-dir",
                str(TARGETS_DIR),
                "--test-prompts",
                "1",
                "--new-tokens",
                "16",
                "--data-dir",
                str(tmp_path),
                "--out",
                str(out),
            ]
        )
        == 0
    )
    text = out.read_text()
    cell = r"(\s*([01]\.\d{3} / [01]\.\d{3}|-) \|){4}"
    for T in ("0", "1"):
        assert re.search(rf"stdlib-b16 \|\s*{T} \|\s*\d+ \|{cell}", text), text
        assert re.search(rf"stdlib-b16 \|\s*{T} \|\s*other \|\s*\d+ \|{cell}", text), text
        assert re.search(rf"stdlib-b16 \|\s*{T} \|\s*\[0, 0.5\) \|\s*\d+ \|{cell}", text), text
    assert "d = 0: top-1 / top-2" in text and "## By token class" in text and "## By stale confidence" in text


def test_cli_unknown_target_is_one_line(tmp_path, capsys):
    assert stability.main(["nope", "--targets-dir", str(tmp_path)]) == 2
    assert "unknown target(s) nope" in capsys.readouterr().err
