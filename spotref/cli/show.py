"""``spotref show TRACE [TRACE ...]``: pictures of traces (docs/spec.md section 8).

The decodes of every trace file given are laid side by side (``spotref demo --trace DIR`` writes
exact decoding and SPOT of one prompt into one file): ``order.png``, the commit order (block
positions x blocks, each cell coloured by the verify pass that committed it, its token written
in); ``round.png``, one round's drafted tree with the accepted path (``--round``: which one;
default the round of the last decode that accepted most); ``decode.gif``, the decodes pass by
pass (pillow); ``page.html``, a self-contained page with a pass slider and each token's pass and
confidence on hover (no network, no matplotlib). The pictures need matplotlib, imported when one
is drawn; without it the command names what to install. Files go into ``--out`` (default a new
``runs/show-TIME/``).
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path

from spotref.cli import show_draw
from spotref.cli.argtypes import choice_list, positive_int, tool_main
from spotref.cli.options import Options
from spotref.cli.show_html import page
from spotref.files import atomic_path, atomic_write_text, check_writable, make_folder, run_dir
from spotref.trace.fmt import Trace
from spotref.trace.timeline import best_round

PICTURES = ("order", "round", "gif", "html")
FILES = {"html": "page.html", "order": "order.png", "round": "round.png", "gif": "decode.gif"}
MAX_ACROSS = 1024  # block positions across the commit-order grid (37 pixels each at 110 dpi)
MAX_TREE = 4096  # nodes of the round picture's tree (a decode's budget is at most 4096)
MAX_CELLS = 32768  # cells of the commit-order grids together (a 2,048-token decode in blocks of 4: 2,048)


def round_arg(text: str) -> tuple:
    """``--round``: BLOCK:ROUND, the block's place in the decode and the round in it (from 0)."""
    try:
        b, r = (int(t) for t in text.split(":"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be BLOCK:ROUND (two integers from 0), got {text!r}") from None
    if b < 0 or r < 0:
        raise argparse.ArgumentTypeError(f"must be BLOCK:ROUND (two integers from 0), got {text!r}")
    return b, r


def add_arguments(p) -> None:
    p.add_argument("traces", nargs="+", metavar="TRACE", help="trace files (spotref generate --trace, demo --trace)")
    p.add_argument("--out", default=None, help="directory for the pictures (default: a new runs/show-TIME/)")
    p.add_argument(
        "--pictures",
        type=choice_list(PICTURES),
        default=list(PICTURES),
        help=f"which to write, comma-separated from {', '.join(PICTURES)} (default: all)",
    )
    p.add_argument("--round", type=round_arg, default=None, help="the round drawn as a tree: BLOCK:ROUND")
    p.add_argument("--frames", type=positive_int, default=20, help="most frames of the GIF (default 20)")
    p.add_argument("--update-shipped", action="store_true", help="allow --out to be the docs/ of this checkout")


@dataclass(frozen=True)
class ShowOptions(Options):
    """The options of ``spotref show`` (``add_arguments``), built once by ``run``."""

    traces: list[str]
    out: str | None
    pictures: list[str]
    round: tuple | None  # (block row, round); None: ``best_round`` of the last decode
    frames: int
    update_shipped: bool


def run(args) -> int:
    return show(ShowOptions.from_namespace(args))


def show(o: ShowOptions) -> int:
    """Read every trace (each checked whole), check every output and the round asked for, then
    write the pictures asked for: a refusal writes nothing and makes no directory."""
    trace = read(o.traces)
    if {"order", "gif"} & set(o.pictures):
        check_grid(trace)
    decode = trace.decodes[-1]
    if "round" in o.pictures:
        row, r = o.round or best_round(decode)
        check_round(decode, row, r, o.round is not None)
    draw = needs_matplotlib() if any(p != "html" for p in o.pictures) else None  # after the input's checks
    out = Path(o.out) if o.out else run_dir("show")
    for picture in o.pictures:
        check_writable(out / FILES[picture])
    make_folder(out)
    written = []
    if "html" in o.pictures:
        written.append(atomic_write_text(out / "page.html", page(trace, f"spotref trace: {', '.join(o.traces)}")))
    if "order" in o.pictures:
        written.append(into(out / "order.png", lambda p: draw.draw_order(trace, p)))
    if "round" in o.pictures:
        written.append(into(out / "round.png", lambda p: draw.draw_round(decode, row, r, trace.pieces, p)))
    if "gif" in o.pictures:
        written.append(into(out / "decode.gif", lambda p: draw.draw_gif(trace, p, frames=o.frames)))
    print("\n".join(str(w) for w in written))
    return 0


def read(paths: list) -> Trace:
    """The traces' decodes side by side (``Trace.load`` refuses a bad file, naming it)."""
    trace = Trace([])
    for path in paths:
        trace = trace + Trace.load(path)
    return trace


def check_round(decode: dict, row: int, r: int, asked: bool = True) -> None:
    """``ValueError`` when the decode has no round ``r`` in its block ``row`` (``asked``: named by
    ``--round``; otherwise the decode has no round at all to draw)."""
    blocks = decode["blocks"]
    if row >= len(blocks) or r >= len(blocks[row]["rounds"]):
        n = len(blocks[row]["rounds"]) if row < len(blocks) else 0
        if not asked:
            raise ValueError(
                f"the round picture: the last decode ({decode['label']}) has no round to draw "
                f"({len(blocks)} blocks); leave out round (--pictures order,gif,html)"
            )
        raise ValueError(f"--round {row}:{r}: the decode has {len(blocks)} blocks, block {row} has {n} rounds")
    nodes = len(blocks[row]["rounds"][r]["tree"]["parents"])
    if nodes > MAX_TREE:
        raise ValueError(f"round {row}:{r}: its tree has {nodes} nodes; the round picture draws at most {MAX_TREE}")


def check_grid(trace: Trace) -> None:
    """``ValueError`` when the commit-order grid (order.png, decode.gif) would be larger than a
    picture holds: at most ``MAX_ACROSS`` block positions across and ``MAX_CELLS`` cells in all
    (a hand-made block length of 100,000 drew for minutes, growing in memory)."""
    across = max(d["block_length"] for d in trace.decodes)
    cells = sum(d["block_length"] * len(d["blocks"]) for d in trace.decodes)
    if across > MAX_ACROSS or cells > MAX_CELLS:
        raise ValueError(
            f"the commit-order grid of these traces is {across} positions across and {cells} cells: "
            f"order and gif draw at most {MAX_ACROSS} across and {MAX_CELLS} cells; --pictures html,round "
            f"shows any trace"
        )


def into(path: Path, draw) -> Path:
    """``draw(tmp)`` onto a temporary file beside ``path``, then renamed onto it (atomic)."""
    with atomic_path(path) as tmp:
        draw(tmp)
    return path


def needs_matplotlib():
    """The drawing module, once matplotlib is there; ``ImportError`` naming what to install."""
    try:
        import matplotlib  # noqa: F401  (optional)
    except ImportError:
        raise ImportError(
            "spotref show draws with matplotlib, which is not installed: pip install matplotlib "
            "(--pictures html needs nothing)"
        ) from None
    return show_draw


def main(argv=None) -> int:
    """``python -m spotref.cli.show``: the same as ``spotref show``."""
    return tool_main("python -m spotref.cli.show", __doc__, add_arguments, run, argv)


if __name__ == "__main__":
    raise SystemExit(main())
