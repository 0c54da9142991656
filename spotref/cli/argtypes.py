"""argparse ``type=`` validators for the command-line tools (no heavy imports: ``--help`` stays fast).

Each raises ``argparse.ArgumentTypeError``, so a bad value is an argparse error (exit status 2)
that names the option: ``spotref audit: error: argument --batch-rows: must be an int in
[0, 4096], got 100000``. The ranges are checked by ``spotref.checks``, the one family of checks.
"""

from __future__ import annotations

import argparse
import re
import sys
import warnings
from functools import partial

from spotref.checks import check_real, check_temperature
from spotref.files import shipped_writes, tidy_run_dirs
from spotref.spec.checks import check_int

SEED_MAX = 2**64 - 1  # the noise generator's key is 64 bits (spotref.spec.noise)
MAX_THREADS = 1024  # --threads: more than any machine's cores; torch crashed at 100000


def _parsed(kind, text: str, what: str):
    """``kind(text)`` (int or float); argparse's error saying the text is not ``what``. An int is
    ASCII digits with an optional sign (Python's ``int`` also reads "1_0" as 10 and other
    scripts' digits: a typo is not a number)."""
    try:
        if kind is int and not INTEGER.fullmatch(text):
            raise ValueError(text)
        return kind(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be {what}, got {text!r}") from None


INTEGER = re.compile(r"\s*[+-]?[0-9]{1,4000}\s*")  # within what int() reads from a str


def _checked(check, *args):
    """``check(*args)`` (a ``spotref.checks`` function, named ""), its ValueError as argparse's."""
    try:
        return check("", *args)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e).strip()) from None


def checked_by(check, what: str):
    """A validator that returns ``check(text)``, whose ``ValueError`` becomes argparse's error
    (for a check that already names what it refuses: a device, a dtype)."""

    def parse(text: str):
        try:
            return check(text)
        except ValueError as e:
            raise argparse.ArgumentTypeError(str(e).strip()) from None

    parse.__name__ = what
    return parse


def int_range(lo: int | None = None, hi: int | None = None, what: str = "an integer"):
    """A validator for integers in [lo, hi] (either bound may be None)."""

    def parse(text: str) -> int:
        return _checked(check_int, _parsed(int, text, "an integer"), lo, hi)

    parse.__name__ = what
    return parse


positive_int = int_range(1)
nonneg_int = int_range(0)
seed_int = int_range(0, SEED_MAX, "a seed (an integer)")


def real_range(lo: float | None = None, hi: float | None = None, open_lo: bool = False, open_hi: bool = False):
    """A validator for finite floats in [lo, hi] (open on a side with ``open_lo`` / ``open_hi``)."""

    def parse(text: str) -> float:
        return _checked(check_real, _parsed(float, text, "a number"), lo, hi, open_lo, open_hi)

    parse.__name__ = "number"
    return parse


def _temperature(text: str) -> float:
    return check_temperature(_parsed(float, text, "a number"), name="")


# A validator for a temperature T: 0 or in [1e-6, 3.4e38], the API's check (``check_temperature``);
# a family's own cap (LLaDA's) is checked when the model is known.
temperature_arg = checked_by(_temperature, "number")


positive_real = real_range(0.0, open_lo=True)
nonneg_real = real_range(0.0)


def list_of(one, what: str):
    """A validator for a comma-separated list (at least one item), each item checked by ``one``."""

    def parse(text: str) -> list:
        items = [t.strip() for t in text.split(",") if t.strip()]
        if not items:
            raise argparse.ArgumentTypeError(f"must be a comma-separated list of {what}, got {text!r}")
        return [one(t) for t in items]

    parse.__name__ = "list"
    return parse


def int_list(lo: int = 1):
    """A validator for a comma-separated list of integers >= lo (at least one)."""
    return list_of(int_range(lo), "integers")


def real_list(lo: float = 0.0):
    """A validator for a comma-separated list of finite floats >= lo (at least one)."""
    return list_of(real_range(lo), "numbers")


def token_ids(text: str) -> list[int]:
    """A validator for token ids: integers >= 0, separated by a comma or spaces (an empty or blank
    text: an empty prompt); an empty item ("5,,6", ",") is refused, not dropped."""
    if not text.strip():
        return []
    items = re.split(r"\s*,\s*|\s+", text.strip())
    if "" in items:
        raise argparse.ArgumentTypeError(f"an empty item between commas in {text!r}: give token ids (5,6 or 5 6)")
    return [nonneg_int(t) for t in items]


def model_name(text: str) -> str:
    """A validator for --model: a checkpoint directory or a target's name, never empty or blank
    (which a path would read as the working directory)."""
    if not text.strip():
        raise argparse.ArgumentTypeError(f"give a checkpoint directory or a bundled target name, got {text!r}")
    return text


def choice_list(choices):
    """A validator for a comma-separated list drawn from ``choices`` (at least one)."""

    def parse(text: str) -> list[str]:
        items = [t.strip() for t in text.split(",") if t.strip()]
        bad = [t for t in items if t not in choices]
        if bad or not items:
            raise argparse.ArgumentTypeError(
                f"{', '.join(map(repr, bad)) or repr(text)}: choose from {', '.join(choices)} (comma-separated)"
            )
        return items

    parse.__name__ = "list"
    return parse


def add_threads(p: argparse.ArgumentParser) -> None:
    """``--threads`` (default 1, at most ``MAX_THREADS``) for a tool that runs torch; the tool's
    ``run`` calls ``torch.set_num_threads(options.threads)``. torch's own default is every core, so
    two jobs side by side on a small machine would run more threads than cores and slow each other
    several-fold; 100000 threads crashed torch's thread pool (a segmentation fault)."""
    p.add_argument(
        "--threads",
        type=int_range(1, MAX_THREADS),
        default=1,
        help=f"torch CPU threads, at most {MAX_THREADS} (default 1: more threads than free cores slow every pass)",
    )


def add_prompt_tokens(p: argparse.ArgumentParser) -> None:
    """``--prompt-tokens`` (default 64) for a tool that decodes held-out prompts (``tools.prompts``)."""
    p.add_argument(
        "--prompt-tokens",
        type=positive_int,
        default=64,
        help="tokens per prompt: a text to continue (code) is cut to this; a question or chat prompt is taken whole",
    )


def plain(doc: str) -> str:
    """A docstring's first line as help text: without the RST ``literal`` markup."""
    return doc.strip().splitlines()[0].replace("``", "")


def guarded(prog: str, run) -> int:
    """``run()``'s exit status; bad input (ValueError) is one line and status 2, a missing
    optional package or an unwritable file one line and status 1, Ctrl-C one line and 130, a
    warning one line (``one_line_warning``) and the run goes on. A run
    directory the run made and left empty (refused, interrupted) is removed (``tidy_run_dirs``)."""
    try:
        with tidy_run_dirs(), warnings.catch_warnings():
            warnings.showwarning = partial(one_line_warning, prog)
            return run()
    except KeyboardInterrupt:  # Ctrl-C: one line, the shell's status for SIGINT
        print(f"{prog}: interrupted", file=sys.stderr)
        return 130
    except ValueError as e:  # bad input: one clear line, no traceback
        print(f"{prog}: error: {e}", file=sys.stderr)
        return 2
    except (ImportError, OSError) as e:
        print(f"{prog}: error: {e}", file=sys.stderr)
        return 1


def one_line_warning(prog: str, message, category, filename, lineno, file=None, line=None) -> None:
    """A warning as one line, ``spotref CMD: warning: ...`` (``warnings.showwarning``'s signature):
    Python's own form added the file and line of the code that warned, and that line's source."""
    print(f"{prog}: warning: {message}", file=sys.stderr if file is None else file)


def tool_main(prog: str, doc: str, add_arguments, run, argv=None) -> int:
    """A tool's ``main``: parse ``argv`` (default: the command line, kept as ``args.argv`` for
    the tool's report) and ``run(args)`` ``guarded``."""
    p = argparse.ArgumentParser(prog=prog, description=plain(doc), allow_abbrev=False)
    add_arguments(p)
    args = p.parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)
    return guarded(prog, lambda: run_allowed(run, args))


def run_allowed(run, args):
    """``run(args)``, shipped files writable only with ``--update-shipped`` (``spotref.files``)."""
    with shipped_writes(getattr(args, "update_shipped", False)):
        return run(args)
