"""The bench reports' tables read back (``parse_table``, ``row_from_cells``) and their plots
(``pyplot``, ``save_png``), beside the tables ``spotref.cli.report.table`` writes."""

from __future__ import annotations

from spotref.files import atomic_write


def parse_table(text: str, header: list) -> list[dict]:
    """The rows ({column: cell}) of the first table in ``text`` whose header starts with ``header``."""
    tables = parse_tables(text, header)
    return tables[0] if tables else []


def parse_tables(text: str, header: list) -> list[list[dict]]:
    """The rows of every table in ``text`` whose header starts with ``header``, table by table."""
    cells = lambda line: [x.strip() for x in line.strip().strip("|").split("|")]
    lines, out = text.splitlines(), []
    starts = [i for i, line in enumerate(lines) if line.startswith("|") and cells(line)[: len(header)] == header]
    for start in starts:
        head, rows = cells(lines[start]), []
        for line in lines[start + 2 :]:
            if not line.startswith("|"):
                break
            rows.append(dict(zip(head, cells(line))))
        out.append(rows)
    return out


def row_from_cells(cls, columns: list, cells: dict):
    """A table line read back (``parse_table``) as the NamedTuple ``cls``, its fields in ``columns``
    order: the fields up to ``N`` and the last as printed (``N`` an int where it is one: "-" and
    "auto=N" stay text), the ones between as floats (NaN for a column an older report lacks)."""
    text = [cells.get(c, "") for c in columns]
    k = cls._fields.index("N")
    num = lambda c: float(c) if c else float("nan")
    N = int(text[k]) if text[k].isdigit() else text[k]
    return cls(*text[:k], N, *map(num, text[k + 1 : -1]), text[-1])


def pyplot():
    """(matplotlib.pyplot, matplotlib.ticker) on the Agg backend, or None when not installed."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        import matplotlib.ticker
    except ImportError:
        return None  # the report says why there is no plot
    return plt, matplotlib.ticker


def save_png(plt, fig, path: str) -> str:
    """Lay out ``fig``, write it to ``path`` as a PNG atomically, close it; returns ``path``."""
    fig.tight_layout()
    atomic_write(path, lambda f: fig.savefig(f, format="png", dpi=100))
    plt.close(fig)
    return path
