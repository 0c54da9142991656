"""``spotref conform MODULE:FUNCTION``: the conformance suite on a decoder named on the command line."""

import contextlib
import functools
import json
import textwrap
from collections import Counter
from pathlib import Path

import pytest

from spotref.cli.conform import summary
from spotref.cli.main import main
from spotref.conformance_cases import tiny_config
from spotref.spec.sdar import SDARModel
from workbench.checkpoint_writer import save_pretrained

DECODERS = """
import spotref
from workbench.checkpoint_writer import save_pretrained

def correct(model, prompt, n, **kw):
    return spotref.generate(model, prompt, n, **kw)

def lossy(model, prompt, n, **kw):  # one token short whenever it decodes two or more
    got = spotref.generate(model, prompt, n, **kw)
    got.tokens = got.tokens[:-1] if len(got.tokens) > 1 else got.tokens
    return got
"""


@pytest.fixture
def decoders(tmp_path, monkeypatch):
    (tmp_path / "my_decoders.py").write_text(textwrap.dedent(DECODERS))
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))


@pytest.mark.slow
def test_a_correct_decoder_passes_with_a_summary_of_what_was_covered(decoders, capsys):
    assert main(["conform", "my_decoders:correct", "--max-examples", "12", "--seed", "3"]) == 0
    out = capsys.readouterr().out
    assert "conform: 10 / 12 cases" in out and "conform: passed, 12 cases" in out
    covered = out[out.index("; covered:") :].splitlines()[1:]
    assert covered[0].startswith("  cases        12 checked: ") and "decoded a token" in covered[0]
    labels = [line.split("  ")[1] for line in covered]
    assert {"aimed at", "family", "temperature", "precision", "rule"} <= set(labels) and "other" not in labels
    columns = {len(line) - len(line[2 + len(label) :].lstrip()) for line, label in zip(covered, labels)}
    assert len(columns) == 1, covered  # every dimension's values start in one column


def test_the_summary_is_an_aligned_line_per_dimension():
    seen = Counter(
        {"cases": 12, "decoded": 11, "drafted": 8, "aim=tau": 4, "aim=none": 3, "aim=top-k": 5, "drafter=spot": 5}
    )
    seen.update({"family=sdar": 7, "family=dream": 5, "T>1": 4, "T=0": 3, "T<=1": 5, "fused-store": 2, "new": 1})
    assert summary(seen) == [
        "  cases        12 checked: 11 decoded a token, 8 drafted",
        "  aimed at     top-k 5, tau 4, none 3",
        "  drafter      spot 5",
        "  family       sdar 7, dream 5",
        "  temperature  T=0 3, T<=1 5, T>1 4",
        "  store        fused-store 2",
        "  other        new 1",
    ]
    seen["drafting-unreported"] = 4
    assert summary(seen)[0].endswith("8 drafted, 4 did not report drafting")


@pytest.mark.slow
def test_a_lossy_decoder_fails_with_the_first_difference_and_a_replay_file(decoders, capsys, tmp_path):
    """The minimal case goes to conform-replay.json here (printed); --replay reruns exactly it:
    the lossy decoder fails it again, a correct one passes it."""
    assert main(["conform", "my_decoders:lossy", "--max-examples", "20", "--seed", "0"]) == 1
    out = capsys.readouterr().out
    assert (
        "conform: FAILED in cases 1 to 10 (rerun them alone: --max-examples 10): " in out
        and "rerun it with --replay conform-replay.json" in out
    )
    doc = json.loads((tmp_path / "conform-replay.json").read_text())
    assert doc["failure"] in out and doc["first_difference"]["got"] is None  # lossy: one token short
    assert {"model", "prompt", "max_new_tokens", "drafter", "options"} <= set(doc)
    assert main(["conform", "my_decoders:lossy", "--replay", "conform-replay.json"]) == 1
    assert f"conform: replay of conform-replay.json: FAILED: {doc['failure']}" in capsys.readouterr().out
    assert main(["conform", "my_decoders:correct", "--replay", "conform-replay.json"]) == 0
    assert "identical to exact decoding" in capsys.readouterr().out


@pytest.mark.parametrize(
    "content, message",
    [
        (None, "no such file"),
        ('{"format": "spotref conformance replay", "version": 1', "is not JSON"),
        ('{"format": "other"}', "not a conformance replay file"),
        ("drop options.budget", "missing ['budget']"),
        ("set model.family", "replay file.model.family must be one of"),
        ("set model.config.vocab_size", "replay file.model.config:"),
    ],
)
def test_a_missing_or_corrupt_replay_file_is_one_line_and_status_2(decoders, capsys, tmp_path, content, message):
    replay = tmp_path / "replay.json"
    if content is not None and content.startswith(("drop", "set")):
        doc = json.loads(REPLAY)
        *path, last = content.split()[1].split(".")
        where = functools.reduce(lambda d, k: d[k], path, doc)
        where.pop(last) if content.startswith("drop") else where.update({last: "nonsense"})
        replay.write_text(json.dumps(doc))
    elif content is not None:
        replay.write_text(content)
    assert main(["conform", "my_decoders:correct", "--replay", str(replay)]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1, err


REPLAY = """{"format": "spotref conformance replay", "version": 1, "failure": "", "first_difference": null,
 "efficiency": false, "model": {"family": "sdar", "dtype": "float32", "batch_sensitive": false,
 "config": {"vocab_size": 8, "hidden_size": 16, "intermediate_size": 32, "num_hidden_layers": 1,
 "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 8, "mask_token_id": 0, "block_size": 4},
 "weights_seed": 0}, "prompt": [1], "max_new_tokens": 3, "drafter": "confidence",
 "options": {"temperature": 0.5, "seed": 7, "threshold": null, "top_k": null, "top_p": null,
 "confidence": "filtered", "precision": null, "budget": 4, "depth": 2, "stop_ids": 3, "width": null,
 "fused_store": true}}"""


def test_a_replay_file_written_by_hand_runs(decoders, capsys, tmp_path):
    (tmp_path / "replay.json").write_text(REPLAY)
    assert main(["conform", "my_decoders:correct", "--replay", "replay.json"]) == 0


@pytest.mark.parametrize(
    "args, message",
    [
        (["--vocab", "2"], "argument --vocab: must be an int in [3, 1048576], got 2"),
        (["--vocab", "9:x"], "argument --vocab: must be N or LO:HI"),
        (["--vocab", "50:9"], "argument --vocab: the range (50, 9) is empty"),
        (["--dtype", "float64"], "argument --dtype: invalid choice: 'float64'"),
        (["--model", "no_such_dir"], "argument --model: no directory 'no_such_dir'"),
        (["--model", "."], "has no config.json"),
        (["--model", ".", "--vocab", "9"], "--vocab: a checkpoint (--model) has its own vocabulary"),
        (["--replay", "r.json", "--dtype", "bfloat16"], "--replay reruns the file's own case: --dtype"),
    ],
)
def test_bad_knobs_are_one_line_and_status_2(decoders, capsys, args, message):
    with contextlib.suppress(SystemExit):  # argparse's errors exit 2
        assert main(["conform", "my_decoders:correct", *args]) == 2
    assert message in capsys.readouterr().err


@pytest.fixture
def checkpoint(tmp_path):
    """A small random SDAR checkpoint directory."""
    model = SDARModel(tiny_config("sdar", 40, 39, 4, hidden=16, layers=1, heads=2, kv=1, tied=False, init=0.3))
    return save_pretrained(model, tmp_path / "ckpt")


@pytest.mark.slow
def test_the_kit_runs_on_a_checkpoint_directory(decoders, capsys, checkpoint):
    assert main(["conform", "my_decoders:correct", "--model", str(checkpoint), "--max-examples", "4"]) == 0
    assert "  model        checkpoint 4" in capsys.readouterr().out
    assert (
        main(["conform", "my_decoders:lossy", "--model", str(checkpoint), "--max-examples", "10", "--no-shrink"]) == 1
    )
    doc = json.loads(Path("conform-replay.json").read_text())
    assert doc["model"]["checkpoint"] == str(checkpoint.resolve()) and "config" not in doc["model"]
    assert main(["conform", "my_decoders:lossy", "--replay", "conform-replay.json"]) == 1


@pytest.mark.slow
def test_a_time_budget_stops_the_run(decoders, capsys):
    assert main(["conform", "my_decoders:correct", "--minutes", "1e-9"]) == 0
    assert "time is up" in capsys.readouterr().out


@pytest.mark.parametrize(
    "target, message",
    [
        ("my_decoders", "target must be MODULE:FUNCTION"),
        ("no_such_module:f", "no module 'no_such_module'"),
        ("my_decoders:missing", "has no function 'missing'"),
    ],
)
def test_a_bad_target_is_one_line_and_status_2(decoders, capsys, target, message):
    assert main(["conform", target]) == 2
    assert message in capsys.readouterr().err
