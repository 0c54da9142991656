"""The spec is a closed set of modules, listed once: docs/spec.md's table "The spec modules, in
reading order". Each listed module imports nothing from spotref outside the list, at module
level or inside a function, so the algorithm reads (and ports) without the drafters, loaders,
name resolvers or tools. The list is read from the doc, so the doc and this test cannot drift."""

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HEADING = "## The spec modules, in reading order"


def listed(text: str | None = None) -> list[str]:
    """The module names (``spotref.spec.noise``, ...) of the spec table, in order."""
    text = (ROOT / "docs" / "spec.md").read_text(encoding="utf-8") if text is None else text
    assert HEADING in text, f"docs/spec.md has no section {HEADING!r}"
    section = text.split(HEADING, 1)[1].split("\n#", 1)[0]
    paths = re.findall(r"^\| `(spotref/[\w/]+\.py)` \|", section, flags=re.M)
    return [p[: -len(".py")].replace("/", ".") for p in paths]


def module_file(name: str) -> Path:
    return ROOT.joinpath(*name.split(".")).with_suffix(".py")


def spotref_imports(path: Path) -> set[str]:
    """Every spotref module ``path`` imports, anywhere in the file (``from spotref import x``
    counts as ``spotref.x`` when x is a module, else as the package ``spotref`` itself)."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name.split(".")[0] == "spotref"}
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, f"{path.relative_to(ROOT)}: a relative import; spotref imports by full name"
            if node.module and node.module.split(".")[0] == "spotref":
                for a in node.names:
                    sub = f"{node.module}.{a.name}"
                    is_module = module_file(sub).is_file() or (ROOT.joinpath(*sub.split(".")) / "__init__.py").is_file()
                    out.add(sub if is_module else node.module)
    return out


def outside(spec: list[str], sources: dict | None = None) -> list[str]:
    """``"a imports b"`` for each import of a listed module that leaves the list."""
    sources = sources or {m: module_file(m) for m in spec}
    return [f"{m} imports {imp}" for m in spec for imp in sorted(spotref_imports(sources[m])) if imp not in set(spec)]


def test_the_spec_list_is_there_and_each_module_exists():
    spec = listed()
    assert len(spec) >= 6, spec
    assert len(set(spec)) == len(spec), f"a module listed twice: {spec}"
    assert all(module_file(m).is_file() for m in spec), [m for m in spec if not module_file(m).is_file()]
    assert {"spotref.spec.noise", "spotref.spec.rules", "spotref.spec.core", "spotref.spec.decode"} <= set(spec)


def test_the_spec_modules_import_only_each_other():
    assert outside(listed()) == []


def test_the_list_is_written_once():
    """README.md and docs/architecture.md point to the list; they do not repeat it as a table."""
    for doc in ("README.md", "docs/architecture.md"):
        rows = re.findall(r"^\| `spotref/\w+\.py` \|", (ROOT / doc).read_text(encoding="utf-8"), flags=re.M)
        assert rows == [], f"{doc} repeats the spec's module list: point to docs/spec.md instead"


SPEC_DIR = ROOT / "spotref" / "spec"
SPEC_BUDGET = 2500  # lines: the algorithm reads in one sitting
# What a spec module may import besides the others in the set: the algorithm needs arithmetic
# (numpy, torch) and plain Python; reading files, paths, JSON or the environment is a tool's job.
ALLOWED = {"__future__", "contextlib", "dataclasses", "functools", "math", "numbers", "reprlib", "time", "typing"}
ALLOWED |= {"numpy", "torch"}


def test_the_spec_folder_holds_exactly_the_listed_modules():
    """Every module of spotref/spec/ is in the table and every listed module is in spotref/spec/."""
    in_folder = {f"spotref.spec.{p.stem}" for p in SPEC_DIR.glob("*.py") if p.stem != "__init__"}
    assert in_folder == set(listed()), (sorted(in_folder - set(listed())), sorted(set(listed()) - in_folder))


def test_the_spec_reads_in_one_sitting():
    lines = sum(len(p.read_text(encoding="utf-8").splitlines()) for p in SPEC_DIR.glob("*.py"))
    assert lines <= SPEC_BUDGET, f"spotref/spec/ holds {lines} lines, over its budget of {SPEC_BUDGET}"


def foreign_imports(path: Path) -> set[str]:
    """The top-level packages ``path`` imports that are neither spotref nor ``ALLOWED``."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
        names += [node.module] if isinstance(node, ast.ImportFrom) and node.module else []
        out |= {n.split(".")[0] for n in names} - ALLOWED - {"spotref"}
    return out


def test_the_spec_imports_no_tool():
    """No file, path, JSON, environment or safetensors reading in the spec: that is checkpoint's."""
    found = {p.name: sorted(foreign_imports(p)) for p in SPEC_DIR.glob("*.py") if foreign_imports(p)}
    assert found == {}


def test_the_import_check_can_fail(tmp_path):
    bad = tmp_path / "x.py"
    bad.write_text("import json\nfrom pathlib import Path\nimport torch\nfrom spotref.spec import noise\n")
    assert foreign_imports(bad) == {"json", "pathlib"}


def test_the_front_door_is_above_the_spec():
    """api.py resolves names (names.py, which imports the loaders and drafters): not in the set."""
    spec = listed()
    assert "spotref.api" not in spec and "spotref.names" not in spec
    assert outside(["spotref.api"]) != []  # so it could not be listed


def test_the_check_can_fail(tmp_path):
    rows = "| module | what |\n|---|---|\n| `spotref/spec/noise.py` | a |\n| `spotref/spec/rules.py` | b |\n"
    doc = f"# x\n\n{HEADING}\n\n{rows}\n## 1. next\n\n| `spotref/api.py` | not in the list |\n"
    assert listed(doc) == ["spotref.spec.noise", "spotref.spec.rules"]
    rules = tmp_path / "rules.py"
    rules.write_text(
        "import numpy\nfrom spotref.spec.noise import gumbel\n\ndef f():\n    from spotref.names import x\n"
    )
    noise = tmp_path / "noise.py"
    noise.write_text("from spotref import api\nimport spotref.load.targets\n")
    found = outside(
        ["spotref.spec.noise", "spotref.spec.rules"], {"spotref.spec.noise": noise, "spotref.spec.rules": rules}
    )
    assert found == [
        "spotref.spec.noise imports spotref.api",
        "spotref.spec.noise imports spotref.load.targets",
        "spotref.spec.rules imports spotref.names",
    ]
