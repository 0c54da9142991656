"""The pictures of ``spotref show`` (matplotlib, imported when a picture is drawn).

``draw_order``: each decode of a trace as a grid, blocks down and block positions across, each
cell coloured by the verify pass that committed it (one colour scale for all decodes, so exact
decoding and SPOT compare cell by cell) with its token written in. ``draw_round``: one round's
drafted tree, the accepted path highlighted, the branches the target rejected crossed out, the
bonus decision dashed. ``draw_gif``: the decodes side by side, pass by pass (pillow writes it).
"""

from __future__ import annotations

import numpy as np

from spotref.trace.timeline import cells, fixed, piece, rounds

CELL = 0.34  # inches per cell of the commit-order grid
ACCEPTED, REJECTED, UNREACHED = "#1a9850", "#d73027", "#bdbdbd"


def pyplot():
    """matplotlib's pyplot on the Agg backend; ``ImportError`` saying what to install."""
    try:
        import matplotlib
    except ImportError:
        raise ImportError("spotref show draws with matplotlib: pip install matplotlib") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def grid(decode: dict, upto: int | None = None) -> np.ndarray:
    """(blocks, bl) float: the verify pass that committed each cell (NaN: not yet, or a fixed
    prompt token), counting only passes <= ``upto``."""
    g = np.full((len(decode["blocks"]), decode["block_length"]), np.nan)
    for c in cells(decode):
        if upto is None or c.pass_ <= upto:
            g[c.row, c.position] = c.pass_
    return g


def order_axes(plt, trace, title: bool = True):
    """(figure, axes, the largest pass): one panel per decode, one above the other."""
    decodes = trace.decodes
    bl = max(d["block_length"] for d in decodes)
    rows = max(len(d["blocks"]) for d in decodes)
    w, h = bl * CELL + 2.2, (rows * CELL + 0.7) * len(decodes) + 0.3
    fig, axes = plt.subplots(len(decodes), 1, figsize=(w, h), squeeze=False, layout="constrained")
    return fig, axes[:, 0], max(rounds(d) for d in decodes)


def panel(ax, decode: dict, pieces: dict, top: int, upto=None, cmap="viridis"):
    """One decode's grid on ``ax``; returns (image, texts by (row, position))."""
    g = grid(decode, upto)
    ax.set_facecolor("#eeeeee")
    im = ax.imshow(np.ma.masked_invalid(g), cmap=cmap, vmin=1, vmax=max(top, 2), aspect="equal")
    texts = {}
    for c in cells(decode):
        shown = upto is None or c.pass_ <= upto
        colour = "white" if c.pass_ < 0.6 * top else "black"
        texts[c.row, c.position] = ax.text(
            c.position, c.row, piece(pieces, c.token, 5), ha="center", va="center", fontsize=4.5, color=colour
        )
        texts[c.row, c.position].set_visible(shown)
    for r, j, t in fixed(decode):
        ax.text(j, r, piece(pieces, t, 5), ha="center", va="center", fontsize=4.5, color="#777777", style="italic")
    ax.set_xticks(range(0, decode["block_length"], 4))
    ax.set_yticks(range(len(decode["blocks"])))
    ax.set_yticklabels([f"block {b['index']}" for b in decode["blocks"]], fontsize=6)
    ax.tick_params(axis="x", labelsize=6)
    ax.set_title(f"{decode['label']}: {rounds(decode)} verify passes, {len(decode['tokens'])} tokens", fontsize=8)
    return im, texts


def draw_order(trace, path) -> None:
    """The commit-order picture of every decode in ``trace``, one above the other (the blocks
    are wide), into ``path``."""
    plt = pyplot()
    fig, axes, top = order_axes(plt, trace)
    for ax, decode in zip(axes, trace.decodes):
        im, _ = panel(ax, decode, trace.pieces, top)
    bar = fig.colorbar(im, ax=list(axes), fraction=0.02, pad=0.01, aspect=10)
    bar.set_label("verify pass that committed the position", fontsize=7)
    bar.ax.tick_params(labelsize=6)
    fig.savefig(path, dpi=110, format="png")
    plt.close(fig)


def draw_gif(trace, path, frames: int = 20, fps: int = 4) -> None:
    """The decodes side by side, pass by pass (at most ``frames`` frames, the last one held), as
    an animated GIF written by pillow into ``path`` (any name: the format is given)."""
    plt = pyplot()
    try:
        from PIL import Image
    except ImportError:
        raise ImportError(
            "spotref show writes the GIF with pillow, which is not installed: pip install pillow"
        ) from None
    fig, axes, top = order_axes(plt, trace)
    fig.set_dpi(72)
    panels = [panel(ax, d, trace.pieces, top, upto=0) for ax, d in zip(axes, trace.decodes)]
    times = sorted(set(np.linspace(0, top, min(frames, top + 1)).round().astype(int).tolist()))
    images = []
    for t in times:
        for (im, texts), decode, ax in zip(panels, trace.decodes, axes):
            im.set_data(np.ma.masked_invalid(grid(decode, t)))
            for c in cells(decode):
                texts[c.row, c.position].set_visible(c.pass_ <= t)
            ax.set_xlabel(f"after verify pass {min(t, rounds(decode))} of {rounds(decode)}", fontsize=7)
        fig.canvas.draw()
        images.append(Image.fromarray(np.asarray(fig.canvas.buffer_rgba())).convert("RGB").quantize(64))
    plt.close(fig)
    durations = [1000 // fps] * (len(images) - 1) + [2000]  # hold the last frame
    with open(path, "wb") as f:
        images[0].save(f, format="GIF", save_all=True, append_images=images[1:], duration=durations, loop=0)


def tree_layout(parents: list) -> tuple:
    """(depth, y) per node: depth below the root, y the node's place among the leaves (a parent
    centred on its children), children in draft order."""
    kids = [[] for _ in parents]
    for i, p in enumerate(parents[1:], 1):
        kids[p].append(i)
    depth, y, leaf = [0] * len(parents), [0.0] * len(parents), [0]

    def place(n):
        for k in kids[n]:
            depth[k] = depth[n] + 1
            place(k)
        if kids[n]:
            y[n] = sum(y[k] for k in kids[n]) / len(kids[n])
        else:
            y[n], leaf[0] = float(leaf[0]), leaf[0] + 1

    place(0)
    return depth, y


def node_status(round_: dict) -> list:
    """Per node: "accepted" (its state is the accepted path's at its depth: equal states at equal
    steps are one row, so a node reached by another branch counts), "rejected" (a child of an
    accepted node the target did not take) or "unreached"."""
    parents, rows, path = round_["tree"]["parents"], round_["node_rows"], round_["path"]
    depth, _ = tree_layout(parents)
    on = [depth[i] < len(path) and rows[i] == path[depth[i]] for i in range(len(parents))]
    return ["accepted" if on[i] else "rejected" if on[p] else "unreached" for i, p in enumerate(parents)]


def node_label(round_: dict, i: int, pieces: dict) -> str:
    """A node's commits, "position:token" each (the root: its step)."""
    if i == 0:
        return f"root\nstep {round_['step']}"
    return "\n".join(f"{j}:{piece(pieces, x, 8)}" for j, x in round_["tree"]["commits"][i])


def draw_round(decode: dict, row: int, r: int, pieces: dict, path) -> None:
    """Round ``r`` of block row ``row``: the drafted tree, left to right by depth; the accepted
    path green, each rejected branch red and crossed, nodes below it grey; the bonus decision
    (taken at the deepest accepted state, drafted or not) dashed; the stale order beneath."""
    plt = pyplot()
    round_ = decode["blocks"][row]["rounds"][r]
    depth, y = tree_layout(round_["tree"]["parents"])
    fig, ax = plt.subplots(figsize=(2.0 + 1.5 * (max(depth) + 2), 1.2 + 0.55 * (max(y) + 1)))
    draw_tree(ax, round_, pieces, depth, y)
    ax.set_xlim(-0.7, max(depth) + 1.7)
    ax.set_ylim(max(y) + 0.6, -0.8)
    ax.axis("off")
    decided, stale = round_["decisions"], round_["stale_order"]
    order = "" if stale is None else "stale order (the drafter's view): " + ", ".join(map(str, stale[:16]))
    committed = sum(len(d["commits"]) for d in decided)
    ax.set_title(
        f"{decode['label']}, block {decode['blocks'][row]['index']}, round {r}: {len(depth)} nodes, "
        f"{round_['rows']} rows verified in one pass, {len(decided)} decisions ({committed} positions) accepted",
        fontsize=8,
    )
    legend = "green: accepted path (dotted: the same state on another branch); red x: rejected; grey: not reached"
    fig.text(0.01, 0.01, f"{order}    {legend}", fontsize=6.5)
    fig.savefig(path, dpi=120, bbox_inches="tight", format="png")
    plt.close(fig)


def box(ax, x, y, text: str, edge: str, **kw) -> None:
    """A node: ``text`` in a rounded box edged ``edge``."""
    style = dict(boxstyle="round", fc=kw.pop("fc", "white"), ec=edge, lw=kw.pop("lw", 2), ls=kw.pop("ls", "-"))
    ax.text(x, y, text, ha="center", va="center", fontsize=7, zorder=3, bbox=style)


def draw_tree(ax, round_: dict, pieces: dict, depth: list, y: list) -> None:
    """The nodes and edges of a round's tree, coloured by ``node_status``, and the bonus."""
    parents, probs = round_["tree"]["parents"], round_["tree"]["probs"]
    status = node_status(round_)
    colour = {"accepted": ACCEPTED, "rejected": REJECTED, "unreached": UNREACHED}
    for i, p in enumerate(parents[1:], 1):
        on = status[i] == "accepted" and status[p] == "accepted"
        ax.plot([depth[p], depth[i]], [y[p], y[i]], color=colour[status[i]], lw=2.5 if on else 1, zorder=1)
        if status[i] == "accepted" and status[p] != "accepted":  # the same state, drafted on another branch
            a = next(n for n in range(len(parents)) if status[n] == "accepted" and depth[n] == depth[p])
            ax.plot([depth[a], depth[i]], [y[a], y[i]], color=ACCEPTED, lw=2.5, ls=":", zorder=1)
    for i in range(len(parents)):
        text = node_label(round_, i, pieces) + ("" if probs is None or i == 0 else f"\np={probs[i]:.2f}")
        box(ax, depth[i], y[i], text, colour[status[i]], lw=1 if status[i] == "unreached" else 2)
        if status[i] == "rejected":
            ax.plot(depth[i] - 0.28, y[i], marker="x", color=REJECTED, ms=9, mew=2, zorder=4)
    last = max((i for i in range(len(parents)) if status[i] == "accepted"), key=lambda i: depth[i])
    decided = round_["decisions"]
    if len(decided) == len(round_["path"]):  # the bonus: the decision at the deepest accepted state
        bonus = "\n".join(f"{j}:{piece(pieces, x, 8)}" for j, x, _ in decided[-1]["commits"])
        ax.plot([depth[last], depth[last] + 1], [y[last], y[last]], color=ACCEPTED, lw=2.5, ls="--", zorder=1)
        box(ax, depth[last] + 1, y[last], f"bonus\n{bonus}", ACCEPTED, fc="#e5f5e0", ls="--")
