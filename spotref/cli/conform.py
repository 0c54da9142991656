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

The cases run in a child process that this one watches (``supervise``), so the verdict never
depends on the decoder's process ending well: a decoder that ends the process (``os._exit``, a
crash, a signal) or does not return from one call within ``--case-seconds`` (at most the
``--minutes`` budget, but never less than 10 s) fails with a message saying which.
"""

from __future__ import annotations

import argparse
import importlib
import math
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import torch

from spotref.cli.argtypes import add_threads, positive_int, real_range, seed_int, tool_main
from spotref.cli.options import Options
from spotref.conformance import MAX_EXAMPLES, ResultTypeError, load_replay, replay_conformance, run_conformance
from spotref.conformance_cases import FAMILIES, MODEL_DTYPES, vocab_range
from spotref.conformance_draws import hypothesis

CHUNK = 10  # cases per progress line (one Hypothesis run each)
PROG = "python -m spotref.cli.conform"
REPLAY_FILE = "conform-replay.json"  # where a failure's minimal case is written by default
CASE_SECONDS = 60.0  # the longest one decoder call may take (a toy case decodes in well under a second)
MIN_CALL_SECONDS = 10.0  # the least a call is given under a --minutes budget (the first chunk always runs)
WORKER = "SPOTREF_CONFORM_WORKER"  # set in the child process that runs the cases
MARK = "\x1espotref-conform:"  # the child's lines to its watcher: "call", "return", "verdict N"


@dataclass(frozen=True)
class ConformOptions(Options):
    target: str
    max_examples: int
    minutes: float | None
    seed: int
    efficiency: bool
    batch_invariance: bool
    lookahead: bool
    threads: int
    write_replay: str
    replay: str | None
    model: str | None
    vocab: int | tuple | None
    dtype: str | None
    case_seconds: float
    family: tuple | None
    no_shrink: bool


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
    p.add_argument(
        "--lookahead",
        action="store_true",
        help="every case with lookahead=True (a decoder that implements it, docs/spec.md 3)",
    )
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
    p.add_argument(
        "--family",
        type=family_arg,
        default=None,
        help=f"the families drawn, comma-separated, of {', '.join(FAMILIES)} (default: every one)",
    )
    p.add_argument(
        "--no-shrink",
        action="store_true",
        help="report a failing case as drawn, not minimised (faster; the replay file holds it as drawn)",
    )
    p.add_argument(
        "--case-seconds",
        type=real_range(0.0, open_lo=True),
        default=CASE_SECONDS,
        help=f"fail a decoder call that has not returned after this long (default {CASE_SECONDS:g})",
    )


def directory(text: str) -> str:
    """``--model``: an existing directory (whether it holds a checkpoint is checked as it loads)."""
    if not Path(text).is_dir():
        raise argparse.ArgumentTypeError(f"no directory {text!r} (a checkpoint directory: config.json and weights)")
    return text


def family_arg(text: str) -> tuple:
    """``--family``: e.g. ``sdar`` or ``llada,dream``: a decoder of those families only."""
    names = tuple(dict.fromkeys(text.split(",")))
    bad = [n for n in names if n not in FAMILIES]
    if bad:
        raise argparse.ArgumentTypeError(f"unknown {', '.join(map(repr, bad))}: the families are {', '.join(FAMILIES)}")
    return names


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
        tell("call")
        try:
            return fn(*args, **kwargs)
        except KeyboardInterrupt:
            raise
        except BaseException as e:
            raise DecoderRaised(f"the decoder raised {described(e)}") from None
        finally:
            tell("return")

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
    ("drafter", "drafter="),  # the drafter the suite gave (whether it was used: the first line)
    ("family", "family="),
    ("experts", ("experts", "dense")),  # a mixture of experts (SDAR-MoE, LLaDA2), or not
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
    ("lookahead", ("lookahead", "carried")),  # asked for; some block's first pass carried
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
    elif n and not seen["drafted"]:
        lines[0] = (lines[0][0], f"{lines[0][1]} (no verify pass held a drafted row: the drafters given went unused)")
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


def tell(event: str) -> None:
    """In the child process, a line for the watcher (``supervise``); nothing elsewhere."""
    if os.environ.get(WORKER) == "1":
        print(f"{MARK}{event}", flush=True)


def run(args) -> int:
    args = ConformOptions.from_namespace(args)
    if os.environ.get(WORKER) != "1":
        refuse(args)  # a bad target, knob or replay file is refused here, before a child starts
        budget = math.inf if args.minutes is None else max(60 * args.minutes, MIN_CALL_SECONDS)
        return supervise(list(args.argv), min(args.case_seconds, budget))
    status = cases_or_replay(args)
    tell(f"verdict {status}")
    return status


def refuse(args) -> None:
    """``ValueError`` for what would fail before a first case: the target, knobs that conflict,
    a missing or corrupt replay file."""
    load_function(args.target)
    if args.replay is not None:
        given = (("--model", args.model), ("--vocab", args.vocab), ("--dtype", args.dtype), ("--family", args.family))
        knobs = [o for o, v in given if v]
        knobs += [o for o, v in (("--batch-invariance", args.batch_invariance), ("--lookahead", args.lookahead)) if v]
        if knobs:
            raise ValueError(f"--replay reruns the file's own case: {', '.join(knobs)} does not apply")
        load_replay(args.replay)
    elif args.model is not None and args.vocab is not None:
        raise ValueError("--vocab: a checkpoint (--model) has its own vocabulary; give one or the other")
    elif args.model is not None and args.family is not None:
        raise ValueError("--family: a checkpoint (--model) has its own family; give one or the other")


def cases_or_replay(args) -> int:
    torch.set_num_threads(args.threads)  # the options were checked (``refuse``) before this child started
    if args.replay is not None:
        return replay(args)
    fn, seen, start = guarded_decoder(load_function(args.target)), Counter(), time.perf_counter()
    chunk, seed = 0, args.seed
    knobs = {k: getattr(args, k) for k in ("efficiency", "batch_invariance", "lookahead", "vocab", "dtype", "model")}
    knobs["families"] = args.family
    if args.no_shrink:  # Hypothesis's phases but the shrinking
        knobs["phases"] = tuple(p for p in hypothesis().Phase if p.name not in ("shrink", "explain"))
    while seen["cases"] < args.max_examples:
        if chunk and args.minutes is not None and time.perf_counter() - start > 60 * args.minutes:
            print(f"conform: time is up ({args.minutes:g} min)")
            break
        n, done = min(CHUNK, args.max_examples - seen["cases"]), seen["cases"]
        try:
            got = run_conformance(fn, max_examples=n, seed=seed + chunk, replay_file=args.write_replay, **knobs)
        except (AssertionError, DecoderRaised, ResultTypeError) as e:  # a difference, a raise, a wrong result
            again = f"--seed {seed + chunk} --max-examples {n}" if chunk else f"--max-examples {n}"
            print(f"conform: FAILED in cases {done + 1} to {done + n} (rerun them alone: {again}): {e}")
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
    decoding, 1 when not (the difference printed), 2 for a missing or corrupt file (``refuse``)."""
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


def supervise(argv: list, limit: float) -> int:
    """Run the cases in a child process (this module with ``argv``) and relay its output; its
    verdict is this one's. A child that ends without one, or a decoder call longer than ``limit``
    seconds (the child is then killed), is a failure, status 1."""
    code = "import sys; sys.path[:1] = [] if sys.path[:1] == [''] else sys.path[:1]; " + (
        "from spotref.cli.conform import main; raise SystemExit(main(sys.argv[1:]))"
    )  # no '' first on the path: a folder named spotref here must not shadow the package
    root = str(Path(__file__).resolve().parents[2])  # the folder holding this spotref package: first
    path = os.pathsep.join([root, *(p for p in sys.path if p and p != root)])  # then this process's path
    env = {**os.environ, WORKER: "1", "PYTHONUNBUFFERED": "1", "PYTHONPATH": path}
    pipes = dict(stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    child = subprocess.Popen([sys.executable, "-c", code, *argv], env=env, **pipes)
    lines: queue.Queue = queue.Queue()
    threading.Thread(target=lambda: [*map(lines.put, child.stdout), lines.put(None)], daemon=True).start()
    errors = threading.Thread(target=lambda: [*map(sys.stderr.write, child.stderr)], daemon=True)
    errors.start()  # the child's errors, as they come
    verdict, calls, since = None, 0, None  # since: when the call in progress began
    try:
        while True:
            try:
                line = lines.get(timeout=None if since is None else max(0.0, since + limit - time.monotonic()))
            except queue.Empty:
                child.kill()
                child.wait()
                print(f"conform: FAILED: the decoder did not return within {limit:g} s (call {calls}): killed")
                return 1
            if line is None:
                break
            text, _, event = line.partition(MARK)
            sys.stdout.write(text if event else line)
            event = event.strip()
            calls, since = (calls + 1, time.monotonic()) if event == "call" else (calls, None if event else since)
            verdict = int(event.split()[1]) if event.startswith("verdict ") else verdict
    except BaseException:
        child.kill()
        raise
    status = child.wait()
    errors.join()
    if verdict is None and status != 2:  # 2: bad input, its message printed by the child
        print(f"conform: FAILED: the decoder's process ended ({ended(status)}) during call {calls}, with no verdict")
        return 1
    return status if verdict is None else verdict


def ended(status: int) -> str:
    if status < 0:
        return f"killed by {signal.Signals(-status).name}"
    return f"exit status {status}"


def elapsed(start: float) -> str:
    return f"{(time.perf_counter() - start) / 60:.1f} min"


def main(argv=None) -> int:
    """``python -m spotref.cli.conform``: ``spotref conform``, its usage and errors naming the
    module that was run (they said ``spotref conform``)."""
    return tool_main(PROG, __doc__, add_arguments, run, argv)


if __name__ == "__main__":
    sys.exit(main())
