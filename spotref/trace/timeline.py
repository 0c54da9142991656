"""What a picture of a trace reads: when each position was committed (``spotref show``).

``cells(decode)`` lists every generated position of a decode with the verify pass (1-based,
counted over the whole decode) and the block step at which it was committed, its token and
its confidence; ``rounds(decode)`` is the number of verify passes. Pure Python, no matplotlib:
the HTML page and the pictures share it.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Cell:
    row: int  # the decode's block, counted from 0 (its rows in a picture)
    position: int  # in the block
    pass_: int  # the verify pass that committed it, 1-based over the decode
    step: int  # the block step of the decision
    token: int
    confidence: float


def cells(decode: dict) -> list:
    """Every position masked at its block's start and committed, in commit order."""
    out, n = [], 0
    for row, block in enumerate(decode["blocks"]):
        for round_ in block["rounds"]:
            n += 1
            for d in round_["decisions"]:
                out += [Cell(row, j, n, d["step"], x, c) for j, x, c in d["commits"]]
    return out


def rounds(decode: dict) -> int:
    """The decode's verify passes (rounds)."""
    return sum(len(b["rounds"]) for b in decode["blocks"])


def fixed(decode: dict) -> list:
    """(row, position, token) of each position a block started with (a prompt tail)."""
    mask = decode["mask_id"]
    return [(r, j, t) for r, b in enumerate(decode["blocks"]) for j, t in enumerate(b["start"]) if t != mask]


def piece(pieces: dict, token: int, width: int | None = None) -> str:
    """The text of ``token`` (its id where the trace has none), spaces and newlines shown, cut to ``width``."""
    text = pieces.get(str(token), f"#{token}")
    text = text.replace("\n", "\u21b5").replace(" ", "\u00b7") or "\u2205"
    return text if width is None or len(text) <= width else text[: width - 1] + "\u2026"


def best_round(decode: dict) -> tuple:
    """(block row, round) of the round that shows most: the longest accepted path, then the
    most rows; the first such."""
    best, key = (0, 0), (-1, -1)
    for row, block in enumerate(decode["blocks"]):
        for r, round_ in enumerate(block["rounds"]):
            k = (len(round_["decisions"]), len(round_["tree"]["parents"]))
            if k > key:
                best, key = (row, r), k
    return best
