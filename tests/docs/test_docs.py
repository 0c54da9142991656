"""Every code block in README.md and docs/*.md runs under this test, so the docs cannot drift.

Each fenced block is tagged with its language:

* ``python``: executed in a fresh namespace (``__name__ == "__main__"``) with a temporary
  directory as the working directory; a block of ``>>>`` examples runs as a doctest instead.
* ``bash``: split into commands (``\\`` continuations joined, ``#`` comments dropped, split at
  ``&&``, a leading ``nice -n N`` dropped); each command is checked as ``check_command`` says:
  run for real with small arguments, or parsed by its own argument parser (every flag and value
  checked, nothing executed: stricter than ``--help``). A command this file does not know fails.
* ``text``: output, samples or pseudocode, not code.

An untagged fence fails. A block right after ``<!-- not run: REASON -->`` is deliberately not
executed (it needs the real 16 GB weights, a GPU, or hours): a python block is still compiled and
a bash block's spotref commands still parsed, then the test skips with REASON, so ``pytest -rs``
lists every such block; ``NOT_RUN`` below must list the same blocks, so a new marker is a
reviewed change to this file.

Placeholders are replaced per block by ``SUBS`` (explicit and minimal; each must still occur in
its block). ``<tiny_sdar>`` is a tiny random SDAR model written in the official checkpoint layout
by ``workbench.checkpoint_writer.save_pretrained`` (SDAR-8B's vocabulary size, MASK id and bf16 storage);
``<tiny_sdar_tok>`` is the same directory with the real SDAR tokenizer files from
../shared/sdar-8b-chat added (the tests that need it skip when those files are absent).
"""

from __future__ import annotations

import argparse
import contextlib
import doctest
import os
import re
import runpy
import shlex
import shutil
import sys
import warnings
from pathlib import Path

import pytest
import torch
from helpers import tiny_config

ROOT = Path(__file__).resolve().parents[2]
SHARED = Path(os.environ.get("SPOTREF_SDAR_DIR") or ROOT.parent / "shared" / "sdar-8b-chat")
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LANGS = {"python", "bash", "text"}
NOT_RUN_MARK = re.compile(r"^<!--\s*not run:\s*(.+?)\s*-->$")

# (file, block index) -> [(text in the block, replacement)]; block indices count every fence of
# the file from 0 (the test id shows them: README.md#1).
SUBS = {
    ("README.md", 1): [("path/to/SDAR-8B-Chat", "<tiny_sdar>")],  # the 16 GB weights
    ("README.md", 3): [("progress=print)", "progress=print, max_examples=2)")],  # a minute -> seconds
    ("docs/checkpoints.md", 0): [
        ("/models/SDAR-8B-Chat", "<tiny_sdar_tok>"),
        ('device="cuda"', 'device="cpu"'),
        ("max_new_tokens=256", "max_new_tokens=8"),
    ],
    ("docs/checkpoints.md", 1): [
        ("/models/SDAR-8B-Chat-b32", "<tiny_sdar_tok>"),
        ("--block-length 32", "--block-length 4"),  # 32 passes a block
        ("--device cuda", "--device cpu --max-new-tokens 8"),
    ],
}

# Blocks marked <!-- not run: ... --> in the docs (the reason is in the doc).
NOT_RUN = {("docs/targets.md", 6), ("docs/targets.md", 9)}

# Shell commands that are not spotref's, each with why it is not run here.
OTHER_COMMANDS = {
    "pip install": "installs packages",
    "python -m pytest": "the test suite itself",
    "python setup.py build_ext": "compiles the extension (tests/spec/test_core.py checks it is loaded)",
    "mkdir -p": "makes a folder for a later command",
    "git archive": "extracts files of an earlier commit from the repository's history",
}
# Commands run for real (after SUBS: seconds). Every other spotref command (demo, bench,
# train-target, train-drafter, python -m spotref.*, benchmarks/*.py) is parsed only: they take
# minutes to hours, write shipped files or want a GPU, and have tests of their own.
RUN_COMMANDS = ("spotref generate", "spotref audit", "python -c")


def fences(path: Path) -> list[dict]:
    """The fenced blocks of a markdown file, in order: lang, code, line, not-run reason."""
    blocks, lines, i = [], path.read_text(encoding="utf-8").splitlines(), 0
    while i < len(lines):
        if lines[i].startswith("```"):
            prev = next((l.strip() for l in reversed(lines[:i]) if l.strip()), "")
            mark = NOT_RUN_MARK.match(prev)
            end = next(j for j in range(i + 1, len(lines)) if lines[j].startswith("```"))
            blocks.append(
                {
                    "lang": lines[i][3:].strip(),
                    "code": "\n".join(lines[i + 1 : end]) + "\n",
                    "line": i + 1,
                    "not_run": mark.group(1) if mark else None,
                }
            )
            i = end
        i += 1
    return blocks


BLOCKS = {(str(p.relative_to(ROOT)), k): b for p in DOCS for k, b in enumerate(fences(p))}
CODE = [key for key, b in BLOCKS.items() if b["lang"] in ("python", "bash")]


# --- fixtures: stand-ins for the real checkpoint ---------------------------------------------------


@pytest.fixture(scope="module")
def tiny_sdar(tmp_path_factory) -> Path:
    """A tiny random SDAR checkpoint in the official layout, SDAR-8B's vocabulary and MASK id."""
    from spotref.spec.sdar import SDARModel
    from workbench.checkpoint_writer import save_pretrained

    cfg = tiny_config(
        151936,
        mask_id=151669,
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=1024,
        initializer_range=0.02,
    )
    with torch.random.fork_rng():
        torch.manual_seed(0)
        model = SDARModel(cfg)
    root = save_pretrained(model, tmp_path_factory.mktemp("tiny_sdar"), dtype="bfloat16")
    if (SHARED / "vocab.json").is_file():
        for f in ("vocab.json", "merges.txt", "tokenizer_config.json", "generation_config.json"):
            shutil.copy(SHARED / f, root / f)
    return root


@pytest.fixture(scope="module")
def tiny_sdar_tok(tiny_sdar) -> Path:
    if not (tiny_sdar / "vocab.json").is_file():
        pytest.skip(
            f"needs the real SDAR tokenizer files (vocab.json, merges.txt) in {SHARED}, "
            f"which is not part of this repository"
        )
    return tiny_sdar


def substituted(key, request) -> str:
    code = BLOCKS[key]["code"]
    for old, new in SUBS.get(key, []):
        assert old in code, f"{key}: SUBS replaces {old!r}, which the block no longer contains"
        new = re.sub(r"<(\w+)>", lambda m: str(request.getfixturevalue(m.group(1))), new)
        code = code.replace(old, new)
    return code


# --- python blocks ------------------------------------------------------------------------------


def run_python(code: str, name: str) -> dict:
    if any(line.startswith(">>> ") for line in code.splitlines()):
        test = doctest.DocTestParser().get_doctest(code, {}, name, name, 0)
        runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
        runner.run(test)
        assert runner.failures == 0, f"{name}: {runner.failures} doctest example(s) failed (output above)"
        return test.globs
    ns = {"__name__": "__main__"}
    exec(compile(code, name, "exec"), ns)
    return ns


# --- shell blocks -------------------------------------------------------------------------------


def commands(code: str) -> list[list[str]]:
    """argv lists of a shell block: continuations joined, comments dropped, split at ``&&``."""
    lines, out, pending = code.replace("\\\n", " ").splitlines(), [], ""
    for line in lines:
        pending += line + "\n"
        try:
            argv = shlex.split(pending, comments=True)
        except ValueError:  # an open quote: the command goes on (python -c "...")
            continue
        pending = ""
        while argv:
            cut = argv.index("&&") if "&&" in argv else len(argv)
            out.append(argv[:cut])
            argv = argv[cut + 1 :]
    assert not pending, f"unterminated quote in {pending!r}"
    return [a[3:] if a[:2] == ["nice", "-n"] else a for a in out]


class Parsed(BaseException):
    """Raised by the patched ``ArgumentParser.parse_args`` once a command line has parsed."""


def entry(argv: list[str]):
    """A callable that runs ``argv`` in this process as the shell would; its exit status."""
    prog, args = argv[0], argv[1:]
    if prog == "spotref":
        from spotref.cli.main import main

        return lambda: main(args)
    assert prog == "python", f"unknown command {' '.join(argv)!r}: add it to tests/docs/test_docs.py"
    if args[0] == "-m":
        return lambda: as_main(
            [args[1], *args[2:]], lambda: runpy.run_module(args[1], run_name="__main__", alter_sys=True)
        )
    if args[0].endswith(".py"):
        path = ROOT / args[0]
        return lambda: as_main([str(path), *args[1:]], lambda: runpy.run_path(str(path), run_name="__main__"))
    raise AssertionError(f"unknown command {' '.join(argv)!r}: add it to tests/docs/test_docs.py")


def as_main(argv: list[str], run) -> int:
    """Run a ``__main__`` module with ``sys.argv``; its ``sys.exit`` status (0 when it returns)."""
    saved = sys.argv
    sys.argv = argv
    try:
        with warnings.catch_warnings():  # re-running an imported module as __main__ is fine here
            warnings.filterwarnings("ignore", message=".*found in sys.modules", category=RuntimeWarning)
            run()
        return 0
    except SystemExit as e:
        return e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    finally:
        sys.argv = saved


@contextlib.contextmanager
def parse_only():
    """Every ``ArgumentParser.parse_args`` parses, then raises ``Parsed`` before anything runs.
    Abbreviated flags are refused: a doc must spell out the flag the code has."""
    original, original_init = argparse.ArgumentParser.parse_args, argparse.ArgumentParser.__init__

    def parse_args(self, args=None, namespace=None):
        raise Parsed(original(self, args, namespace))

    def init(self, *args, **kwargs):
        original_init(self, *args, **{**kwargs, "allow_abbrev": False})

    argparse.ArgumentParser.parse_args, argparse.ArgumentParser.__init__ = parse_args, init
    try:
        yield
    finally:
        argparse.ArgumentParser.parse_args, argparse.ArgumentParser.__init__ = original, original_init


def check_command(argv: list[str], run: bool, capsys) -> str:
    """Parse one command with its own parser, then run it when ``run`` and it is in RUN_COMMANDS."""
    line = " ".join(argv)
    other = next((why for cmd, why in OTHER_COMMANDS.items() if (line + " ").startswith(cmd + " ")), None)
    if other:
        return f"not spotref's ({other}): {line}"
    if argv[:2] == ["python", "-c"]:
        compile(argv[2], "python -c", "exec")
        if run:
            run_python(argv[2], f"python -c in {line[:40]}")
        return f"{'ran' if run else 'compiled'}: {line}"
    call = entry(argv)
    with parse_only():
        try:
            rc = call()
            _, err = capsys.readouterr()
            raise AssertionError(f"{line}: the arguments do not parse (exit status {rc}):\n{err}")
        except Parsed:
            pass
    if not (run and line.startswith(RUN_COMMANDS)):
        return f"parsed: {line}"
    rc = call()
    _, err = capsys.readouterr()
    assert rc == 0, f"{line}\nexit status {rc}; stderr:\n{err}"
    return f"ran: {line}"


# --- the tests ----------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("key", CODE, ids=[f"{f}#{k}" for f, k in CODE])
def test_doc_block_runs(key, request, tmp_path, monkeypatch, capsys):
    block, name = BLOCKS[key], f"{key[0]}#{key[1]} (line {BLOCKS[key]['line']})"
    run = block["not_run"] is None
    code = substituted(key, request) if run else block["code"]
    monkeypatch.chdir(tmp_path)  # blocks that write (caches, .hypothesis) write here
    if block["lang"] == "python":
        ns = run_python(code, name) if run else compile(code, name, "exec")
        if run and key in CHECKS:
            CHECKS[key](ns, block["code"])
    else:
        done = [check_command(argv, run, capsys) for argv in commands(code)]
        assert done, f"{name}: a bash block without a command"
    if not run:
        pytest.skip(f"{name} not run: {block['not_run']} (compiled / parsed only)")


def readme_api_stats(ns: dict, code: str) -> None:
    """The keys the README lists for ``res.stats`` are the keys it has."""
    listing = code[code.index("res.stats") :].split("\n\n")[0]  # its line and the comment lines under it
    listed = set(re.findall(r'"(\w+)"', listing))
    assert {"passes", "stopped"} <= listed, listing
    missing = listed - set(ns["res"].stats)
    assert not missing, f"README lists res.stats keys that do not exist: {sorted(missing)}"


CHECKS = {("README.md", 1): readme_api_stats}


def test_every_block_is_tagged_and_accounted_for():
    """Every fence says python, bash or text; NOT_RUN and SUBS name real, runnable blocks."""
    untagged = [
        f"{f}#{k} (line {b['line']}): {b['lang'] or 'no language'}"
        for (f, k), b in BLOCKS.items()
        if b["lang"] not in LANGS
    ]
    assert not untagged, "tag each fence python, bash (run or parsed here) or text: " + "; ".join(untagged)
    marked = {key for key, b in BLOCKS.items() if b["not_run"]}
    assert marked == NOT_RUN, f"blocks marked <!-- not run: ... -->: {sorted(marked)}; NOT_RUN: {sorted(NOT_RUN)}"
    assert marked <= set(CODE), "a text block needs no not-run marker"
    unknown = set(SUBS) - set(CODE)
    assert not unknown, f"SUBS names blocks that are not python/bash blocks: {sorted(unknown)}"
    assert len(CODE) - len(NOT_RUN) >= 8, "hardly any doc block found: is the fence parser broken?"


MODULE_DOCTESTS = sorted(
    ".".join(p.relative_to(ROOT / "spotref").with_suffix("").parts)
    for p in (ROOT / "spotref").rglob("*.py")
    if ">>> " in p.read_text(encoding="utf-8")
)


@pytest.mark.parametrize("module", MODULE_DOCTESTS)
def test_module_docstring_examples(module):
    """The ``>>>`` examples in spotref's docstrings (STYLE: doctest the examples)."""
    import importlib

    result = doctest.testmod(importlib.import_module(f"spotref.{module}"), optionflags=doctest.ELLIPSIS)
    assert result.failed == 0, f"spotref.{module}: {result.failed} of {result.attempted} examples failed"


def test_a_new_model_comes_back_ready_to_decode():
    """The README's ``model = SDARModel(cfg)`` is in eval mode, as ``from_pretrained`` and
    ``load_target`` models are (decoding never trains)."""
    from spotref.configs import SDARConfig
    from spotref.spec.sdar import SDARModel

    cfg = SDARConfig(
        vocab_size=300,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        mask_token_id=299,
        block_size=8,
    )
    assert not SDARModel(cfg).training
