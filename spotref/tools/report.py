"""What the tools show people: plain-text tables (markdown pipes, so they paste into docs) and
progress bars (tqdm when installed)."""
from __future__ import annotations


def progress(iterable, desc: str, total: int | None = None):
    """A tqdm bar when tqdm is installed, else the iterable itself (no progress shown)."""
    try:
        from tqdm.auto import (
            tqdm,  # optional (the [cli] extra): imported where it is used
        )
    except ImportError:
        return iterable
    return tqdm(iterable, desc=desc, total=total, leave=False)


def table(header: list[str], rows: list[list]) -> str:
    """A plain-text table (markdown pipe syntax, so it pastes into docs)."""
    cells = [header] + [[f"{c:.3g}" if isinstance(c, float) else str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    line = lambda r: "| " + " | ".join(c.rjust(w) for c, w in zip(r, widths)) + " |"
    return "\n".join([line(cells[0]), "|" + "|".join("-" * (w + 2) for w in widths) + "|"]
                     + [line(r) for r in cells[1:]])
