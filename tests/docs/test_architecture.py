"""The layering of docs/architecture.md holds: no cycle, no upward import, small modules and functions
(the spec's closed list: tests/docs/test_spec_closed.py)."""

from pathlib import Path

from workbench import architecture

ROOT = Path(__file__).resolve().parents[2]


def test_no_cycle_no_import_up_no_import_inside_a_function():
    assert architecture.violations() == []


def test_the_check_can_fail():
    g = architecture.graph()
    g["spotref.spec.rules"] = (g["spotref.spec.rules"][0] | {"workbench.bench.bench"}, set())  # the spec imports a tool
    g["spotref.spec.noise"] = ({"spotref.spec.rules"}, {"spotref.api"})  # a cycle, an inner import
    found = "\n".join(architecture.violations(g))
    assert "spotref.spec.rules (spec core) imports workbench.bench.bench (workbench)" in found
    assert "cycle: spotref.spec.noise -> spotref.spec.rules -> spotref.spec.noise" in found
    assert "spotref.spec.noise imports inside a function: spotref.api" in found


IMPORTED = """
import sys, spotref.api
{extra}
ours = ("spotref", "workbench")
mods = [m for m in sys.modules.values() if m.__name__.startswith(ours) and getattr(m, "__file__", "")]
print(sum(sum(1 for _ in open(m.__file__)) for m in mods if m.__file__.endswith(".py")))
print(" ".join(sorted(m.__name__ for m in mods)))
"""


def imported(extra: str = "") -> tuple[int, list[str]]:
    """(lines of spotref (and workbench) source loaded, module names) in a fresh interpreter after ``extra``."""
    import subprocess
    import sys

    out = subprocess.run(
        [sys.executable, "-c", IMPORTED.format(extra=extra)], capture_output=True, text=True, check=True, cwd=ROOT
    ).stdout.split("\n")
    return int(out[0]), out[1].split()


def test_import_api_loads_the_spec_only():
    """``import spotref.api`` loads the decoding spec; the model, its checkpoint format and the
    loaders load when a model or a name is given (2,330 lines with the three families' decision
    rules, their refusals and targets; the bound keeps the models, checkpoints and loaders out)."""
    lines, mods = imported()
    assert lines <= 2400, f"import spotref.api loads {lines} lines of spotref"
    assert not [
        m
        for m in mods
        if m.startswith(
            (
                "spotref.cli",
                "spotref.train",
                "spotref.record",
                "workbench",
                "spotref.drafters.",
                "spotref.load",
            )
        )
    ]


def test_exact_decoding_loads_no_drafter_and_a_named_drafter_loads_its_module():
    run = "import spotref; spotref.generate('gsm-b32', [5, 6, 7], 4{kw})"
    _, exact = imported(run.format(kw=""))
    assert not [m for m in exact if m.startswith(("spotref.drafters.", "workbench"))], exact
    _, drafted = imported(run.format(kw=", drafter='confidence', budget=4"))
    assert "spotref.drafters.confidence" in drafted and "spotref.drafters.order" not in drafted


def test_no_module_over_700_lines_and_no_function_over_60():
    import ast

    long = []
    for base in ("spotref", "benchmarks", "examples"):
        for path in sorted((ROOT / base).rglob("*.py")):
            src = path.read_text(encoding="utf-8")
            if src.count("\n") > 700:
                long.append(f"{path.relative_to(ROOT)}: {src.count(chr(10))} lines")
            long += [
                f"{path.relative_to(ROOT)}:{n.lineno} {n.name}: {n.end_lineno - n.lineno + 1} lines"
                for n in ast.walk(ast.parse(src))
                if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.end_lineno - n.lineno + 1 > 60
            ]
    assert long == []


def test_the_package_face_lists_its_public_names_only():
    """``dir(spotref)`` is the public API (each name resolves), not the package's own imports."""
    import spotref

    assert dir(spotref) == sorted(spotref.__all__) and "os" not in dir(spotref)
    assert all(getattr(spotref, name) is not None for name in spotref.__all__)


def test_the_picture_is_redrawn_into_docs_only_with_update_shipped(monkeypatch, capsys):
    """``--update-shipped`` lets the shipped picture change (the write guard sees the flag)."""
    from spotref.files import check_writable

    drawn = []
    monkeypatch.setattr(architecture, "draw", lambda g, out: drawn.append(check_writable(out)))
    monkeypatch.setattr(architecture, "needs_matplotlib", lambda: None)  # nothing is drawn: CI has no matplotlib
    assert architecture.main(["--png", "--update-shipped"]) == 0
    assert drawn == [architecture.SHIPPED_PNG]
    monkeypatch.setattr(architecture, "run_dir", lambda name: architecture.SHIPPED_PNG.parent)
    assert architecture.main(["--png"]) == 2  # one line naming the shipped file (guarded)
    assert "shipped file" in capsys.readouterr().err


def test_the_installed_package_never_imports_the_workbench():
    """workbench/ is the repository's, not installed (pyproject's packages): spotref imports none of it."""
    g = architecture.graph()
    found = [f"{m} imports {d}" for m, (top, inner) in g.items() for d in top | inner if m.startswith("spotref")]
    assert [f for f in found if " imports workbench" in f] == []
    assert all(not p.startswith("workbench") for p in installed_packages())


def installed_packages() -> list[str]:
    """pyproject.toml's ``[tool.setuptools] packages``: what the wheel holds."""
    import tomllib

    return tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]["packages"]
