"""Every code name that README.md and docs/*.md cite in backticks exists in the repository.

A doc cites code in four forms, each resolved against this checkout:

* a repository path, ``spotref/spec/decode.py``, ``tests/spec/test_core.py``, ``docs/gpu.md``,
  ``_ext/core.pyx``: the file or folder exists. A path may name something in the file:
  ``spotref/spec/decode.py: Block``, ``tests/exactness/test_conformance.py::test_x``, ``cli_models.py:102``
  (the name resolves; a line number is within the file);
* a bare file name, ``decode.py``, ``grow.py: walk``: some file of the project has that name
  (``OUTSIDE`` lists the files of other projects the docs name, such as SDAR's ``generate.py``);
* a dotted name that starts at the package, ``spotref.generate``, ``spotref.audit.audit``,
  ``python -m workbench.bench.bench``: the module imports and each attribute resolves;
* a dotted name that starts at a project module or class, ``core.walk``, ``rules.SERVED``,
  ``SDARModel.store_and_denoise``, ``Block.propose()``: the module or class has that attribute.

Anything else in backticks (shell commands, flags, config keys, formulas, other projects' names
such as ``torch.topk``) is not a citation of this project and is left alone: a dotted name is read
as a citation only when its first part is ``spotref``, a module of the package or a class defined
in it. Fenced code blocks are not read here: tests/docs/test_docs.py runs them.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import re
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
TOP = ("spotref", "tests", "benchmarks", "examples", "docs", "_ext", ".ci")  # the repository's folders
SEARCHED = ("spotref", "tests", "benchmarks", "examples", "_ext")  # where a bare file name is looked up
OUTSIDE = {  # bare file names the docs cite from other projects: name -> whose
    "generate.py": "SDAR's decoder, in SDAR's repository",
    "base.py": "SGLang's dLLM algorithm base (docs/engines.md)",
    "server_args.py": "SGLang's server options (docs/engines.md)",
    "model_agent.py": "lmdeploy's dLLM strategy (docs/engines.md)",
    "sampling.py": "lmdeploy's dLLM strategy (docs/engines.md)",
    "sequence.py": "lmdeploy's dLLM strategy (docs/engines.md)",
}
NOT_CODE = {  # dotted spans whose first part is a module's name but which name no code: span -> what
    "tokenizer.file": "a field of a bundled target's NAME.json (docs/reliability.md)",
}
COMPILED = {"spotref._core": "_ext/core.pyx"}  # built by setup.py (absent under SPOTREF_NO_EXTENSIONS=1)
PLACEHOLDER = re.compile(r"\b[A-Z]{3,}\b")  # NAME.json, TARGET.pt: a path's part stands for any name
FILE_EXT = {"py", "pyx", "md", "json", "pt", "png", "txt", "safetensors", "toml", "cfg", "sha256", "so"}

NAME = r"[A-Za-z_]\w*"
PATH_REF = re.compile(  # a repository path, then optionally ": name", "::name" or ":line"
    rf"(?<![\w./-])((?:{'|'.join(re.escape(t) for t in TOP)})/[\w./-]*)(?:(?:\s*:\s*|::)({NAME}(?:\.{NAME})*)|:(\d+))?"
)
FILE_REF = re.compile(  # a bare file name, then optionally ": name" or ":line"
    rf"(?<![\w./-])(\w+\.pyx?)\b(?:\s*:\s*({NAME}(?:\.{NAME})*)|:(\d+))?"
)
DOTTED = re.compile(rf"(?<![\w./-]){NAME}(?:\.{NAME})+(?![\w/-])")


# --- what the docs cite -----------------------------------------------------------------------------


def spans(path: Path) -> list[tuple[int, str]]:
    """(line, text) of every inline code span outside fenced blocks (a span may cross a line)."""
    lines, kept, fenced = path.read_text(encoding="utf-8").splitlines(), [], False
    for line in lines:
        if line.startswith("```"):
            fenced = not fenced
            kept.append("")
        else:
            kept.append("" if fenced else line)
    text, out = "\n".join(kept), []
    for m in re.finditer(r"(`+)(.+?)\1", text, flags=re.S):
        if "\n\n" not in m.group(2):
            out.append((text.count("\n", 0, m.start()) + 1, m.group(2)))
    return out


def citations(span: str) -> list[tuple]:
    """The citations in one code span: ("path", path, name, line), ("file", ...), ("dotted", name)."""
    out, taken = [], []
    for m in PATH_REF.finditer(span):
        out.append(("path", m.group(1).rstrip("."), m.group(2), m.group(3)))
        taken.append(m.span())
    for m in FILE_REF.finditer(span):
        if not any(a <= m.start() < b for a, b in taken):
            out.append(("file", m.group(1), m.group(2), m.group(3)))
            taken.append(m.span())
    for m in DOTTED.finditer(span):
        name, head = m.group(0), m.group(0).split(".")[0]
        if any(a <= m.start() < b for a, b in taken) or name.rsplit(".", 1)[1] in FILE_EXT or name in NOT_CODE:
            continue
        if head in modules() or head in classes():  # modules() has "spotref" itself
            out.append(("dotted", name))
    return out


# --- what the project has ------------------------------------------------------------------------------


@cache
def modules() -> dict:
    """Short module name -> full names: ``core`` -> [spotref.spec.core], ``drafters`` -> two packages."""
    out = {}
    for p in sorted((ROOT / "spotref").rglob("*.py")):
        parts = p.relative_to(ROOT).with_suffix("").parts
        full = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out.setdefault(full.rsplit(".", 1)[-1], []).append(full)
    return out


@cache
def classes() -> dict:
    """Class name -> the modules of spotref that define it at top level."""
    out = {}
    for full in {m for names in modules().values() for m in names}:
        for node in ast.parse(module_path(full).read_text(encoding="utf-8")).body:
            if isinstance(node, ast.ClassDef):
                out.setdefault(node.name, []).append(full)
    return out


def module_path(full: str) -> Path:
    base = ROOT.joinpath(*full.split("."))
    return base.with_suffix(".py") if base.with_suffix(".py").is_file() else base / "__init__.py"


@cache
def project_files() -> dict:
    """Bare file name -> its paths in the project's folders (and at the root: setup.py)."""
    out = {}
    for p in [*ROOT.glob("*.py"), *(f for top in SEARCHED for f in (ROOT / top).rglob("*.py*"))]:
        out.setdefault(p.name, []).append(p)
    return out


def members(cls: type) -> set:
    """What an instance of ``cls`` has beyond ``dir(cls)``: dataclass fields, annotations and the
    ``self.x = ...`` assignments of its methods (and of its bases')."""
    out = set()
    for k in inspect.getmro(cls):
        out |= set(getattr(k, "__dataclass_fields__", {})) | set(getattr(k, "__annotations__", {}))
        try:
            tree = ast.parse(inspect.cleandoc("\n" + inspect.getsource(k)))
        except (OSError, TypeError, SyntaxError):
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self":
                if isinstance(node.ctx, ast.Store):
                    out.add(node.attr)
    return out


def resolves(obj, attrs: list[str]) -> bool:
    """``obj.a.b...`` exists: by ``getattr``, or as an instance attribute of a class."""
    for a in attrs:
        if hasattr(obj, a):
            obj = getattr(obj, a)
        elif isinstance(obj, type) and a in members(obj):
            return True  # an instance attribute: what it holds is not known statically
        else:
            return False
    return True


def resolves_in_module(full: str, attrs: list[str]) -> bool:
    try:
        module = importlib.import_module(full)
    except ModuleNotFoundError as e:
        if e.name != full:  # a dependency is missing: say so, do not call the citation stale
            raise
        return False
    return resolves(module, attrs)


def file_names(path: Path) -> set:
    """Top-level names of a Python file outside the package, and ``Class.member`` pairs."""
    tree, out = ast.parse(path.read_text(encoding="utf-8")), set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out.add(node.name)
            if isinstance(node, ast.ClassDef):
                out |= {f"{node.name}.{n.name}" for n in node.body if hasattr(n, "name")}
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            out |= {t.id for t in targets if isinstance(t, ast.Name)}
    return out


def resolve_in_file(path: Path, name: str | None, line: str | None) -> str | None:
    """None when ``name`` (or ``line``) exists in the file at ``path``; else what is wrong."""
    if line is not None:
        n = len(path.read_text(encoding="utf-8").splitlines())
        return None if 1 <= int(line) <= n else f"{path.relative_to(ROOT)} has {n} lines, not {line}"
    if name is None:
        return None
    rel = path.relative_to(ROOT)
    if rel.parts[0] == "spotref" and path.suffix == ".py":
        parts = rel.with_suffix("").parts
        full = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        ok = resolves_in_module(full, name.split("."))
    elif path.suffix == ".py":
        ok = name in file_names(path)
    else:  # _ext/core.pyx: walk, a doc: a word in it
        ok = re.search(rf"\b{re.escape(name)}\b", path.read_text(encoding="utf-8")) is not None
    return None if ok else f"{rel} has no {name!r}"


def problem(cite: tuple) -> str | None:
    """None when the citation resolves; else what is missing."""
    kind = cite[0]
    if kind == "path":
        _, rel, name, line = cite
        parts = rel.split("/")
        fixed = next((i for i, part in enumerate(parts) if PLACEHOLDER.search(part)), len(parts))
        path = ROOT.joinpath(*parts[:fixed])  # a placeholder's folder must exist
        if fixed < len(parts):
            return None if path.is_dir() else f"no folder {path.relative_to(ROOT)}"
        if not path.exists():
            return f"no file or folder {rel}"
        return resolve_in_file(path, name, line) if path.is_file() else None
    if kind == "file":
        _, fname, name, line = cite
        paths = project_files().get(fname, [])
        if not paths:
            return None if fname in OUTSIDE else f"no file named {fname} in {', '.join(SEARCHED)}"
        errors = [resolve_in_file(p, name, line) for p in paths]
        return None if None in errors else "; ".join(errors)
    name = cite[1]
    head, *attrs = name.split(".")
    if name in COMPILED:
        return None if (ROOT / COMPILED[name]).is_file() else f"{name}: no source {COMPILED[name]}"
    if head == "spotref":
        parts = name.split(".")
        for k in range(len(parts), 0, -1):  # the longest prefix that is a module
            if module_path(".".join(parts[:k])).is_file():
                ok = resolves_in_module(".".join(parts[:k]), parts[k:])
                return None if ok else f"spotref has no {name}"
        return f"spotref has no {name}"
    owners = [(m, attrs) for m in modules().get(head, [])] + [(m, [head, *attrs]) for m in classes().get(head, [])]
    return None if any(resolves_in_module(m, a) for m, a in owners) else f"nothing in spotref defines {name}"


def shown(cite: tuple) -> str:
    """A citation as a doc writes it: ``spotref/spec/decode.py: Block``, ``core.py:12``, ``core.walk``."""
    if cite[0] == "dotted":
        return cite[1]
    _, where, name, line = cite
    return f"{where}: {name}" if name else f"{where}:{line}" if line else where


def all_citations() -> list[tuple[str, tuple]]:
    out = []
    for path in DOCS:
        for line, span in spans(path):
            out += [(f"{path.relative_to(ROOT)}:{line}", c) for c in citations(span)]
    return out


# --- the tests -------------------------------------------------------------------------------------------


def test_every_cited_code_name_exists():
    cites = all_citations()
    assert len(cites) > 200, f"only {len(cites)} citations found: is the span parser broken?"
    missing = [f"{where}: `{shown(c)}`: {why}" for where, c in cites if (why := problem(c))]
    assert not missing, "docs cite code that does not exist:\n" + "\n".join(missing)


@pytest.mark.parametrize(
    "span, found",
    [
        ("spotref/spec/decode.py: exact_block", "spotref/spec/decode.py has no 'exact_block'"),
        ("decode.py: exact_block", "spotref/spec/decode.py has no 'exact_block'"),
        ("spotref.spec.decode.exact_block", "spotref has no spotref.spec.decode.exact_block"),
        ("core.no_such_walk", "nothing in spotref defines core.no_such_walk"),
        ("Block.no_such_method()", "nothing in spotref defines Block.no_such_method"),
        ("spotref/no_such_module.py", "no file or folder spotref/no_such_module.py"),
        ("no_such_module.py", "no file named no_such_module.py"),
        ("spotref/spec/core.py:100000", "lines, not 100000"),
        ("spotref/no_such_folder/NAME.json", "no folder spotref/no_such_folder"),
        ("tests/spec/test_core.py::test_no_such_test", "tests/spec/test_core.py has no 'test_no_such_test'"),
    ],
)
def test_a_stale_citation_is_caught(span, found):
    problems = [problem(c) for c in citations(span)]
    assert problems and all(problems), (span, problems)
    assert any(found in p for p in problems), (span, problems)


@pytest.mark.parametrize(
    "span",
    [
        "spotref/spec/decode.py: Block",
        "spotref/api.py: Speculator",
        "spotref.generate(model, prompt_ids, max_new_tokens, temperature=0.0)",
        "spotref.audit.audit",
        "python -m workbench.bench.bench --targets gsm-b32",
        "SDARModel.store_and_denoise",
        "Block.propose()",
        "core.walk",
        "rules.SERVED",
        "Target.heldout",
        "View.tokens",
        "tests/exactness/test_conformance.py::test_near_tie_models_at_odd_block_sizes",
        "generate.py",
        "spotref/load/targets/NAME.json",
        "tokenizer.file",
        "torch.topk",
        "config.json",
        "x_j = argmax_v (log p[v] + g_k[j, v])",
        "target.encode(text)",
        "spotref demo --model stdlib-b32",
    ],
)
def test_a_true_citation_or_a_non_citation_passes(span):
    assert [problem(c) for c in citations(span)] == [None] * len(citations(span)), span
