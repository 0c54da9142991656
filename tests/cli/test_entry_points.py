"""Every ``python -m spotref.X`` that README.md, docs/ or spotref's own help texts mention is a
module with a ``__main__`` entry, whose ``--help`` exits 0 (``python -m spotref.tools.demo`` once
exited 0 doing nothing: a module without the entry runs its imports and stops)."""

import re
import runpy
import sys
import warnings
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MENTION = re.compile(r"python -m ((?:spotref|workbench)(?:\.\w+)*)")
SOURCES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
SOURCES += [*sorted((ROOT / "spotref").rglob("*.py")), *sorted((ROOT / "workbench").rglob("*.py"))]


def documented() -> list[str]:
    """The modules a ``python -m spotref.X`` mention names, each once."""
    return sorted({m for path in SOURCES for m in MENTION.findall(path.read_text(encoding="utf-8"))})


MODULES = documented()


def test_the_mentions_are_found():
    assert {"workbench.bench.bench", "spotref.train.train_drafter", "workbench.architecture"} <= set(MODULES)


def entry_problem(name: str) -> str | None:
    """Why ``python -m name`` would not run as documented (no such module, or no ``__main__``
    entry), or None."""
    path = ROOT.joinpath(*name.split(".")).with_suffix(".py")
    if ROOT.joinpath(*name.split("."), "__main__.py").is_file():  # a package run as a command
        return None
    if not path.is_file():
        return f"python -m {name} is documented, but there is no {path.relative_to(ROOT)}"
    if not re.search(r'^if __name__ == "__main__":', path.read_text(encoding="utf-8"), re.M):
        return f"python -m {name} is documented, but the module has no __main__ entry: it would exit 0 doing nothing"
    return None


@pytest.mark.parametrize("name", MODULES)
def test_a_documented_module_has_a_main_entry(name):
    assert entry_problem(name) is None


def test_the_check_can_fail():
    assert "there is no spotref/tools/demo.py" in entry_problem("spotref.tools.demo")  # the old mention
    assert "no __main__ entry" in entry_problem("spotref.cli.report")  # a helper module, not a tool


@pytest.mark.slow
def test_python_m_demo_runs_the_demo(capsys):
    """``python -m spotref.cli.demo`` runs ``spotref demo`` (it exited 0 doing nothing)."""
    from spotref.cli import demo

    assert demo.main(["--model", "random", "--prompts", "1", "--gen-length", "8", "--no-auto", "--budgets", "2"]) == 0
    assert "every output identical to exact decoding: yes" in capsys.readouterr().out


@pytest.mark.parametrize("name", MODULES)
def test_a_documented_module_parses_help_with_exit_status_0(name, monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", [name, "--help"])
    with warnings.catch_warnings(), pytest.raises(SystemExit) as e:
        # re-running an imported module as __main__ warns (RuntimeWarning): harmless here
        warnings.filterwarnings("ignore", message=".*found in sys.modules", category=RuntimeWarning)
        runpy.run_module(name, run_name="__main__", alter_sys=True)
    assert e.value.code in (0, None) and "usage:" in capsys.readouterr().out


@pytest.mark.slow
@pytest.mark.parametrize(
    "module, args, shows",
    [
        ("spotref", ["--version"], "spotref "),
        ("spotref", ["generate", "--help"], "usage: spotref generate"),
        ("spotref.cli.generate", ["--help"], "usage: python -m spotref.cli.generate"),
    ],
)
def test_python_m_spotref_and_its_generate_module_run_the_command(module, args, shows):
    """``python -m spotref`` is the ``spotref`` command; ``python -m spotref.cli.generate`` is
    ``spotref generate`` (both exited doing nothing: no ``__main__``, or one that ran nothing)."""
    import subprocess

    r = subprocess.run([sys.executable, "-m", module, *args], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and shows in r.stdout + r.stderr, r.stderr[-2000:]
