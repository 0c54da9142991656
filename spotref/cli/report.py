"""What the tools show people: plain-text tables (markdown pipes, so they paste into docs),
progress bars (tqdm when installed) and the answer-block pass count every table reports."""

from __future__ import annotations

SOLUTION_ROOM, CANVAS_SOLUTION_ROOM = 256, 160  # new tokens that hold a whole gsm solution


def solution_room(model) -> int:
    """New tokens for a math (gsm) target's solution: the longest held-out answer is 127 tokens
    and its end-of-text. An SDAR target gets 256 (a pass reads one block, whatever follows); a
    whole-canvas one 160 (5 blocks of 32), since its every pass reads the whole canvas: its
    prompt (at most 79 tokens) and 160 stay within the 256 positions it was trained on."""
    return SOLUTION_ROOM if getattr(model, "family", "sdar") == "sdar" else CANVAS_SOLUTION_ROOM


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
    return "\n".join(
        [line(cells[0]), "|" + "|".join("-" * (w + 2) for w in widths) + "|"] + [line(r) for r in cells[1:]]
    )


def answer_blocks(result) -> tuple[int, int]:
    """(tokens, passes) of one generation on its answer blocks alone: the blocks before the one
    holding a stop id (every block when none did), passes counting the prefill. The stop block
    ends in end-of-text fill, the easiest text there is to draft: reported beside the overall
    count, this keeps the fill from carrying a headline."""
    if not result.stats["stopped"]:
        return len(result.tokens), result.passes
    blocks = result.stats["blocks"]  # (new tokens, passes) per decoded block
    return sum(n for n, _ in blocks[:-1]), result.passes - blocks[-1][1]
