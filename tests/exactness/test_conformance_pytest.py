"""``conformance_test``: the kit's pytest entry point, as an implementer's CI runs it."""

import json
import traceback

import pytest
from hypothesis import Phase

import spotref
from spotref.conformance import conformance_test


def one_token_short(model, prompt, n, **kw):  # lossy whenever it decodes two tokens or more
    got = spotref.generate(model, prompt, n, **kw)
    got.tokens = got.tokens[:-1] if len(got.tokens) > 1 else got.tokens
    return got


def test_a_correct_decoder_passes_the_pytest_entry_point():
    test = conformance_test(spotref.generate, replay_file=None, max_examples=8, seed=1)
    assert test.__name__ == "test_conformance" and test() is None


def test_a_failure_reports_the_verdict_without_the_kits_frames(tmp_path):
    """The report holds the verdict (the first difference, the minimal case) raised from the test
    function itself: no frame of the kit's run, Hypothesis's or the case check's; the replay file
    is written."""
    replay = tmp_path / "replay.json"
    test = conformance_test(one_token_short, replay_file=replay, max_examples=30, seed=1, phases=[Phase.generate])
    with pytest.raises(AssertionError, match=r"block \d+, step \d+, position \d+|lengths differ") as failed:
        test()
    frames = [f.name for f in traceback.extract_tb(failed.value.__traceback__)]
    assert frames == ["test_a_failure_reports_the_verdict_without_the_kits_frames", "test_conformance"], frames
    assert json.loads(replay.read_text())["format"] == "spotref conformance replay"
