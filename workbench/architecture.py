"""The layers of spotref and the imports between them, checked and drawn.

``python -m workbench.architecture`` prints every module by layer with what it imports, and
any import that breaks the layering (a cycle, an import of a higher layer, a ``spotref`` import
inside a function); ``--png`` draws the picture of docs/architecture.md. The layers, bottom up:

1. ``spec core``: noise, rules, draft, core, decode, models, checkpoint, checks, files: the
   algorithm, the model, its file format (read and written), and the checks and atomic writes
   they share. They import nothing above them;
2. ``drafters``: every drafter, reading only the view the spec hands it;
3. ``load``: bundled targets (and their shipped held-out prompts) and drafters beside their
   data, tokenizers;
4. ``spec entry``: api (``spotref.generate``), names (names into objects), reference,
   conformance, audit, the package face, and the trace of a decode (``spotref.trace``);
5. ``tools``: the command line, demo, drafter training, calibration, recorded prompts;
6. ``workbench`` (the repository's, not installed): target training, the corpora and held-out
   problem generators (``workbench.data``), benchmarks, reports.

A module imports inside a function only where ``LAZY`` says why; even there, never upward.
"""

from __future__ import annotations

import argparse
import ast
from pathlib import Path

from spotref.cli.argtypes import guarded
from spotref.files import atomic_path, run_dir, shipped_writes

REPO = Path(__file__).resolve().parents[1]
ROOT = REPO / "spotref"  # the spotref package
PACKAGES = (ROOT, REPO / "workbench")  # the installed package, and the repository's workbench above it
SHIPPED_PNG = REPO / "docs" / "architecture.png"
LAYERS = ("spec core", "drafters", "load", "spec entry", "tools", "workbench")  # the last: not installed
ENTRY = {
    "spotref.api",
    "spotref.names",
    "spotref.reference",
    "spotref.conformance",
    "spotref.conformance_cases",
    "spotref.conformance_draws",
    "spotref.audit",
    "spotref",
}
LAZY = {  # the modules that import on demand, and why
    "spotref.cli.main": "the chosen command's module, when it runs (`spotref --help` loads no torch)",
    "spotref.names": "the targets' loader when a target is first named, a drafter's module when it is first "
    "named, the cost model when budget='auto', the trace recorder when a trace is asked for (exact decoding "
    "with a model object loads none of them)",
}


def module_name(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def layer(module: str) -> int:
    """The layer index (0 = bottom) of a spotref module."""
    if module in ENTRY:
        return 3
    for i, package in (
        (1, "spotref.drafters"),
        (2, "spotref.load"),
        (3, "spotref.trace"),
        (4, "spotref.cli"),
        (4, "spotref.train"),
        (4, "spotref.record"),
        (5, "workbench"),  # the repository's workbench: above everything installed
        (4, "spotref.calib"),
        (4, "spotref.__main__"),  # python -m spotref: the command
    ):
        if module == package or module.startswith(package + "."):
            return i
    return 0


def imports(path: Path) -> tuple[set, set]:
    """(spotref modules imported at module level, those imported inside a function)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    top, inner = set(), set()
    for node in ast.walk(tree):
        names = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        for name in names:
            if name.split(".")[0] in ("spotref", "workbench"):
                (top if node.col_offset == 0 else inner).add(name)
    return top, inner


def graph() -> dict:
    """{module: (imported modules at module level, inside functions)}, submodules resolved."""
    files = {module_name(p): p for package in PACKAGES for p in sorted(package.rglob("*.py"))}
    known = lambda names: {n for n in names if n in files}
    out = {}
    for module, path in files.items():
        top, inner = imports(path)
        out[module] = (known(top) - {module}, known(inner) - {module})
    return out


def violations(g: dict | None = None) -> list[str]:
    """Cycles, imports of a higher layer, and function-level spotref imports outside ``LAZY``."""
    g = g or graph()
    found = []
    for module, (top, inner) in sorted(g.items()):
        for dep in sorted(top | (inner if module in LAZY else set())):
            if layer(dep) > layer(module) and module != "spotref":
                found.append(f"{module} ({LAYERS[layer(module)]}) imports {dep} ({LAYERS[layer(dep)]})")
        if inner and module not in LAZY:
            found.append(f"{module} imports inside a function: {', '.join(sorted(inner))}")
    found += [f"cycle: {' -> '.join(c)}" for c in cycles({m: top for m, (top, _) in g.items()})]
    return found


def cycles(edges: dict) -> list[list]:
    """Every import cycle, found by depth-first search (each reported once, from its smallest member)."""
    found = []

    def visit(path):
        for dep in sorted(edges.get(path[-1], ())):
            if dep == path[0]:
                found.append(path + [dep])
            elif dep not in path and dep > path[0]:
                visit(path + [dep])

    for start in sorted(edges):
        visit([start])
    return found


def draw(g: dict, path: Path) -> None:
    """One row per layer (bottom up), a box per module, arrows between layers counted."""
    import matplotlib  # optional (the [bench] extra)

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    faces = {
        "spotref.drafters",
        "spotref.load",
        "spotref.cli",
        "spotref.train",
        "spotref.record",
        "workbench.bench",
        "workbench.data",
        "spotref.calib",
    }  # package faces: no code
    rows = [[m for m in sorted(g) if layer(m) == i and m not in faces] for i in range(len(LAYERS))]
    fig, ax = plt.subplots(figsize=(16, 9))
    where = {}
    for i, mods in enumerate(rows):
        ax.text(-0.02, i, LAYERS[i], ha="right", va="center", fontsize=11, weight="bold")
        for k, m in enumerate(mods):
            x = (k + 0.5) / max(len(mods), 1)
            where[m] = (x, i + (0.18 * (k % 2) if len(mods) > 10 else 0))  # stagger crowded rows
            ax.text(
                x,
                where[m][1],
                m.removeprefix("spotref.")
                .removeprefix("workbench.")
                .removeprefix("drafters.")
                .removeprefix("data.")
                .removeprefix("load.")
                .removeprefix("tools.")
                or "spotref",
                ha="center",
                va="center",
                fontsize=7,
                bbox=dict(boxstyle="round", fc=plt.cm.Pastel1(i), ec="grey"),
            )
    for m, (top, _) in g.items():
        for dep in top - faces:
            if m in faces:
                continue
            (x0, y0), (x1, y1) = where[m], where[dep]
            ax.annotate(
                "", (x1, y1 + 0.15), (x0, y0 - 0.15), arrowprops=dict(arrowstyle="->", color="grey", alpha=0.25, lw=0.6)
            )
    ax.set_xlim(-0.25, 1.02)
    ax.set_ylim(-0.6, len(LAYERS) - 0.4)
    ax.axis("off")
    ax.set_title("spotref: modules by layer (bottom up); every arrow points down (an import)")
    with atomic_path(path) as tmp:
        fig.savefig(tmp, dpi=110, bbox_inches="tight", format="png")
    plt.close(fig)


PROG = "python -m workbench.architecture"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog=PROG, description=__doc__.splitlines()[0])
    p.add_argument("--png", action="store_true", help="draw the picture (needs matplotlib)")
    p.add_argument("--update-shipped", action="store_true", help=f"draw it into {SHIPPED_PNG} (default: runs/)")
    args = p.parse_args(argv)
    return guarded(PROG, lambda: run(args))


def needs_matplotlib() -> None:
    """``ImportError`` saying what to install, before anything is printed or a directory made."""
    try:
        import matplotlib  # noqa: F401  (optional: the [bench] extra)
    except ImportError:
        raise ImportError("--png needs matplotlib: pip install 'spotref[bench]' (or pip install matplotlib)") from None


def run(args) -> int:
    """Print the layers and their imports; draw the picture with ``--png``; 1 when the layering is broken."""
    if args.png:
        needs_matplotlib()
    g = graph()
    for i in reversed(range(len(LAYERS))):
        print(f"{LAYERS[i]}:")
        for m in sorted(x for x in g if layer(x) == i):
            print(f"  {m:32s} imports {', '.join(sorted(g[m][0])) or '-'}")
    bad = violations(g)
    print("\n".join(["layering broken:", *bad]) if bad else "layering kept: no cycle, no import up")
    if args.png:
        out = SHIPPED_PNG if args.update_shipped else run_dir("architecture") / "architecture.png"
        with shipped_writes(args.update_shipped):  # the flag is what lets the shipped picture change
            draw(g, out)
        print(f"drew {out}")
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
