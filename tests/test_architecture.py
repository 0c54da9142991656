"""The layering of docs/architecture.md holds, and the README's reading list is true."""
import re
from pathlib import Path

from spotref.tools import architecture

ROOT = Path(__file__).resolve().parents[1]


def test_no_cycle_no_import_up_no_import_inside_a_function():
    assert architecture.violations() == []


def test_the_check_can_fail():
    g = architecture.graph()
    g["spotref.rules"] = (g["spotref.rules"][0] | {"spotref.tools.bench"}, set())    # the spec imports a tool
    g["spotref.noise"] = ({"spotref.rules"}, {"spotref.api"})                       # a cycle, an inner import
    found = "\n".join(architecture.violations(g))
    assert "spotref.rules (spec core) imports spotref.tools.bench (tools)" in found
    assert "cycle: spotref.noise -> spotref.rules -> spotref.noise" in found
    assert "spotref.noise imports inside a function: spotref.api" in found


def code_lines(path: Path) -> int:
    """Lines that are neither blank, comments nor docstrings."""
    import ast
    src = path.read_text(encoding="utf-8")
    doc = set()
    for n in ast.walk(ast.parse(src)):
        if isinstance(n, (ast.Module, ast.FunctionDef, ast.ClassDef)) and ast.get_docstring(n, clean=False) is not None:
            doc.update(range(n.body[0].lineno, n.body[0].end_lineno + 1))
    return sum(1 for i, line in enumerate(src.splitlines(), 1)
               if line.strip() and not line.strip().startswith("#") and i not in doc)


def test_the_readme_reading_list_counts_are_true_and_under_1000():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    rows = re.findall(r"^\| `(spotref/\w+\.py)` \| .* \| (\d+) \|$", readme, re.M)
    assert len(rows) >= 7, "the README's reading list is missing"
    for path, n in rows:
        assert code_lines(ROOT / path) == int(n), f"{path}: the README says {n} lines of code"
    total = sum(int(n) for _, n in rows)
    assert total < 1000 and f"{total} lines of code in all" in readme
