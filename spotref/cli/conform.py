"""``spotref conform MODULE:FUNCTION``: the conformance suite on your own decoder.

FUNCTION is called as ``spotref.generate`` is (docs/spec.md section 5.1 gives every keyword and
what it returns). The cases run in chunks of ``CHUNK``, each with its own seed (``--seed``,
then the next), with a progress line after each, until ``--max-examples`` cases ran or
``--minutes`` passed (the first chunk always runs: a pass means cases ran). The verdict: exit
status 0 and a summary of what was covered, or status 1 and the first difference from exact
decoding (``block b, step k, position p: exact t, got t'``) on the minimal case Hypothesis found, with the case itself;
that case is written to a replay file (``--write-replay``, default ``conform-replay.json`` here), and
``--replay FILE`` reruns exactly that case and prints its verdict. ``--model DIR`` decodes with a
checkpoint directory's model instead of toy models; ``--vocab`` and ``--dtype`` set the toy models'
vocabulary size and dtype. Bad input (a missing or corrupt replay file, a bad knob) is status 2.
"""

from __future__ import annotations

import argparse
import importlib
import sys
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import torch

from spotref.cli.argtypes import add_threads, positive_int, real_range, seed_int, tool_main
from spotref.cli.options import Options
from spotref.conformance import MAX_EXAMPLES, ResultTypeError, replay_conformance, run_conformance
from spotref.conformance_cases import MODEL_DTYPES, vocab_range

CHUNK = 10  # cases per progress line (one Hypothesis run each)
PROG = "python -m spotref.cli.conform"
REPLAY_FILE = "conform-replay.json"  # where a failure's minimal case is written by default


@dataclass(frozen=True)
class ConformOptions(Options):
    target: str
    max_examples: int
    minutes: float | None
    seed: int
    efficiency: bool
    batch_invariance: bool
    threads: int
    write_replay: str
    replay: str | None
    model: str | None
    vocab: int | tuple | None
    dtype: str | None


def add_arguments(p):
    p.add_argument("target", metavar="MODULE:FUNCTION", help="your decoder, e.g. mydecoder:generate")
    p.add_argument("--max-examples", type=positive_int, default=MAX_EXAMPLES, help=f"cases (default {MAX_EXAMPLES})")
    p.add_argument(
        "--minutes", type=real_range(0.0, open_lo=True), default=None, help="stop after this long (default: no limit)"
    )
    p.add_argument(
        "--seed", type=seed_int, default=0, help="the first chunk's seed, in [0, 2**64 - 1] (default 0): a run replays"
    )
    p.add_argument("--efficiency", action="store_true", help="also the efficiency check (spotref's own decoder)")
    p.add_argument("--batch-invariance", action="store_true", help="the batch-invariance check instead")
    add_threads(p)
    p.add_argument(
        "--write-replay",
        metavar="FILE",
        default=REPLAY_FILE,
        help=f"where a failure's minimal case goes ({REPLAY_FILE})",
    )
    p.add_argument("--replay", metavar="FILE", help="rerun the one case of a replay file and print its verdict")
    p.add_argument("--model", metavar="DIR", type=directory, help="a checkpoint directory to decode with (toy models)")
    p.add_argument("--vocab", metavar="N|LO:HI", type=vocab_arg, help="the toy models' vocabulary size (8:300)")
    p.add_argument("--dtype", choices=tuple(MODEL_DTYPES), help="the models' dtype (toy models: float32)")


def directory(text: str) -> str:
    """``--model``: an existing directory (whether it holds a checkpoint is checked as it loads)."""
    if not Path(text).is_dir():
        raise argparse.ArgumentTypeError(f"no directory {text!r} (a checkpoint directory: config.json and weights)")
    return text


def vocab_arg(text: str):
    """``--vocab``: ``N`` (every toy model's vocabulary) or ``LO:HI`` (drawn in that range), each in
    [3, ``MAX_VOCAB``]."""
    lo, sep, hi = text.partition(":")
    try:
        value = (int(lo), int(hi)) if sep else int(lo)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be N or LO:HI (integers), got {text!r}") from None
    try:
        vocab_range(value)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e).removeprefix("vocab ").removeprefix("vocab: ")) from None
    return value


def load_function(target: str):
    """The callable ``MODULE:FUNCTION`` names (the working directory importable); ``ValueError``
    naming what is missing."""
    module_name, sep, name = target.partition(":")
    if not sep or not module_name or not name:
        raise ValueError(f"target must be MODULE:FUNCTION (e.g. mydecoder:generate), got {target!r}")
    if not all(part.isidentifier() for part in module_name.split(".")):  # '../x' was a TypeError from importlib
        raise ValueError(
            f"target {target!r}: {module_name!r} is not a module name (dotted Python names, e.g. mydecoder "
            f"or mypackage.decoders, importable from the working directory: not a path)"
        )
    sys.path.insert(0, str(Path.cwd()))
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as e:
        raise ValueError(f"target {target!r}: no module {e.name!r} (run from the directory that holds it)") from None
    except Exception as e:  # a SyntaxError, or an error raised as the module runs: one line, not a traceback
        raise ValueError(f"target {target!r}: importing {module_name} failed: {described(e)}") from None
    fn = getattr(module, name, None)
    if not callable(fn):
        raise ValueError(f"target {target!r}: module {module_name} has no function {name!r}")
    return fn


class DecoderRaised(Exception):
    """The decoder under test raised (or exited) on a case: a failed conformance, one line."""


def guarded_decoder(fn):
    """``fn``, whose exceptions (``SystemExit`` too: a decoder that exits must not pass with status
    0) become ``DecoderRaised`` naming them; Ctrl-C stays Ctrl-C."""

    def decoder(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except KeyboardInterrupt:
            raise
        except BaseException as e:
            raise DecoderRaised(f"the decoder raised {described(e)}") from None

    return decoder


def described(e: BaseException) -> str:
    """``Type: message (file:line)``, the line where it was raised: the innermost frame that is not
    this module's (a decoder that is a builtin, or called with arguments it does not take, raised
    in no Python line of its own: the location named was conform.py's call)."""
    tb, last = e.__traceback__, None
    while tb is not None:
        if tb.tb_frame.f_code.co_filename != __file__:
            last = tb
        tb = tb.tb_next
    tb = last
    where = isinstance(e, SyntaxError) and e.filename and f"{Path(e.filename).name}:{e.lineno}"
    if tb is not None and not where:
        where = f"{Path(tb.tb_frame.f_code.co_filename).name}:{tb.tb_lineno}"
    return f"{type(e).__name__}: {str(e)[:200]}" + (f" ({where})" if where else "")


SUMMARY = (  # (label, the coverage keys of its line: a prefix "dim=" or the keys themselves)
    ("aimed at", "aim="),
    ("drafted by", "drafter="),
    ("family", "family="),
    ("model", "model="),
    ("temperature", ("T=0", "T<=1", "T>1")),
    ("precision", "precision="),
    ("confidence", "confidence="),
    ("rule", ("threshold", "one-position")),
    ("filter", ("top-k/top-p", "no-filter")),
    ("budget", ("budget<=64", "budget>64")),
    ("width", ("rows", "fixed-width")),
    ("prompt", ("whole-prompt-blocks", "partial-prompt-block", "canvas")),
    ("stop ids", "stop="),
    ("store", ("fused-store",)),
)
HAPPENED = ("cases", "decoded", "drafted", "drafting-unreported")  # the first line's counts


def summary(seen: Counter) -> list[str]:
    """The coverage as aligned lines, what happened first, then one line per dimension, its
    values by count (``  family       sdar 41, llada 30, dream 29``; a dimension of fixed keys,
    such as the temperature's, in its own order); keys it does not know go to a last line,
    "other"."""
    n = seen["cases"]
    lines = [("cases", f"{n} checked: {seen['decoded']} decoded a token, {seen['drafted']} drafted")]
    if seen["drafting-unreported"]:
        lines[0] = (lines[0][0], f"{lines[0][1]}, {seen['drafting-unreported']} did not report drafting")
    placed = set(HAPPENED)
    for label, keys in SUMMARY:
        mine = [k for k in seen if k.startswith(keys)] if isinstance(keys, str) else [k for k in keys if k in seen]
        placed.update(mine)
        if mine:
            prefix = keys if isinstance(keys, str) else ""
            values = sorted(mine, key=lambda k: (-seen[k], k)) if prefix else mine  # listed keys: in order
            lines.append((label, ", ".join(f"{k.removeprefix(prefix)} {seen[k]}" for k in values)))
    other = sorted(k for k in seen if k not in placed)
    if other:
        lines.append(("other", ", ".join(f"{k} {seen[k]}" for k in other)))
    width = max(len(label) for label, _ in lines)
    return [f"  {label:<{width}}  {text}" for label, text in lines]


def run(args) -> int:
    args = ConformOptions.from_namespace(args)
    torch.set_num_threads(args.threads)
    if args.replay is not None:
        return replay(args)
    if args.model is not None and args.vocab is not None:
        raise ValueError("--vocab: a checkpoint (--model) has its own vocabulary; give one or the other")
    fn, seen, start = guarded_decoder(load_function(args.target)), Counter(), time.perf_counter()
    chunk, seed = 0, args.seed
    knobs = {k: getattr(args, k) for k in ("efficiency", "batch_invariance", "vocab", "dtype", "model")}
    while seen["cases"] < args.max_examples:
        if chunk and args.minutes is not None and time.perf_counter() - start > 60 * args.minutes:
            print(f"conform: time is up ({args.minutes:g} min)")
            break
        n = min(CHUNK, args.max_examples - seen["cases"])
        try:
            got = run_conformance(fn, max_examples=n, seed=seed + chunk, replay_file=args.write_replay, **knobs)
        except (AssertionError, DecoderRaised, ResultTypeError) as e:  # a difference, a raise, a wrong result
            print(f"conform: FAILED (seed {seed + chunk}): {e}")
            if getattr(e, "replay_file", None):
                print(f"conform: the minimal case is in {e.replay_file}; rerun it with --replay {e.replay_file}")
            return 1
        seen.update(got)
        chunk += 1
        print(f"conform: {seen['cases']} / {args.max_examples} cases identical to exact decoding ({elapsed(start)})")
    print(f"conform: passed, {seen['cases']} cases identical to exact decoding; covered:")
    print("\n".join(summary(seen)))
    return 0


def replay(args) -> int:
    """``--replay FILE``: the file's one case on the decoder; status 0 when identical to exact
    decoding, 1 when not (the difference printed), 2 for a missing or corrupt file."""
    knobs = [o for o, v in (("--model", args.model), ("--vocab", args.vocab), ("--dtype", args.dtype)) if v]
    if knobs or args.batch_invariance:
        raise ValueError(
            f"--replay reruns the file's own case: {', '.join(knobs or ['--batch-invariance'])} does not apply"
        )
    fn = guarded_decoder(load_function(args.target))
    try:
        got = replay_conformance(fn, args.replay, efficiency=args.efficiency or None)
    except (AssertionError, DecoderRaised, ResultTypeError) as e:
        print(f"conform: replay of {args.replay}: FAILED: {e}")
        return 1
    print(
        f"conform: replay of {args.replay}: identical to exact decoding "
        f"({got['tokens']} tokens, {got['passes']} passes; exact decoding {got['exact_passes']})"
    )
    return 0


def elapsed(start: float) -> str:
    return f"{(time.perf_counter() - start) / 60:.1f} min"


def main(argv=None) -> int:
    """``python -m spotref.cli.conform``: ``spotref conform``, its usage and errors naming the
    module that was run (they said ``spotref conform``)."""
    return tool_main(PROG, __doc__, add_arguments, run, argv)


if __name__ == "__main__":
    sys.exit(main())
