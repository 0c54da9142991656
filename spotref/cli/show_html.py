"""The HTML page of ``spotref show``: one self-contained file, no network, no matplotlib.

Each decode of the trace is a grid of its blocks (a line each) and its text; a slider steps
through the verify passes (all decodes at once, so exact decoding and SPOT compare pass by pass):
a position committed by then shows its token, coloured by the pass that committed it, the others
a mask. Hovering a token shows its id, the pass and block step that committed it and its
confidence. The data are the trace's cells, written into the page as JSON.
"""

from __future__ import annotations

import html
import json

from spotref.trace.timeline import cells, fixed, piece, rounds

PAGE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{title}</title>
<style>
body {{ font-family: sans-serif; margin: 1.5em; }}
.decode {{ display: inline-block; vertical-align: top; margin: 0 2em 1em 0; }}
.row {{ white-space: nowrap; font-family: monospace; font-size: 12px; line-height: 1.7; }}
.row .label {{ display: inline-block; width: 5.5em; color: #666; }}
.cell {{ display: inline-block; min-width: 2.6em; text-align: center; margin: 1px; border-radius: 3px; }}
.mask {{ background: #ddd; color: #999; }}
.fixed {{ background: #f4f4f4; color: #888; font-style: italic; }}
.text {{ max-width: 60em; white-space: pre-wrap; font-family: monospace; font-size: 12px; margin-top: .5em; }}
</style></head><body>
<h2>{title}</h2>
<p><input id="pass" type="range" min="0" max="{top}" value="{top}" style="width: 40em">
 after verify pass <span id="shown">{top}</span> of {top}</p>
<div id="decodes"></div>
<script id="data" type="application/json">{data}</script>
<script>
const data = JSON.parse(document.getElementById("data").textContent);
const root = document.getElementById("decodes");
const colour = (p, top) => `hsl(${{Math.round(260 - 200 * (p - 1) / Math.max(top - 1, 1))}}, 70%, 78%)`;
const views = data.decodes.map(d => {{
  const box = document.createElement("div"); box.className = "decode";
  const h = document.createElement("h3"); h.textContent = d.title; box.appendChild(h);
  const spans = [];
  d.blocks.forEach((label, r) => {{
    const line = document.createElement("div"); line.className = "row";
    const l = document.createElement("span"); l.className = "label"; l.textContent = label; line.appendChild(l);
    for (let j = 0; j < d.length; j++) {{
      const s = document.createElement("span"); s.className = "cell mask"; s.textContent = "\u25a1";
      line.appendChild(s); spans.push(s);
    }}
    box.appendChild(line);
  }});
  d.fixed.forEach(([r, j, t]) => {{
    const s = spans[r * d.length + j]; s.className = "cell fixed"; s.textContent = t;
  }});
  const text = document.createElement("div"); text.className = "text"; box.appendChild(text);
  root.appendChild(box);
  return {{d, spans, text}};
}});
function show(t) {{
  document.getElementById("shown").textContent = t;
  for (const v of views) {{
    let words = [];
    for (const c of v.d.cells) {{
      const s = v.spans[c.r * v.d.length + c.j];
      if (c.p <= t) {{
        s.className = "cell"; s.textContent = c.x; s.style.background = colour(c.p, data.top);
        s.title = `token ${{JSON.stringify(c.w)}} (id ${{c.id}}): pass ${{c.p}}, block step ${{c.s}}, ` +
          `confidence ${{c.c.toPrecision(4)}}`;
      }} else {{
        s.className = "cell mask"; s.textContent = "\u25a1"; s.style.background = ""; s.title = "masked";
      }}
    }}
    v.text.textContent = v.d.order.map(i => v.d.cells[i]).map(c => c.p <= t ? c.w : "_").join("");
  }}
}}
document.getElementById("pass").addEventListener("input", e => show(+e.target.value));
show(data.top);
</script></body></html>
"""


def page_data(trace) -> dict:
    """The page's data: per decode its title, block labels, fixed cells and committed cells."""
    out = []
    for d in trace.decodes:
        cs = cells(d)
        order = sorted(range(len(cs)), key=lambda i: (cs[i].row, cs[i].position))  # reading order
        out.append(
            {
                "title": f"{d['label']}: {rounds(d)} verify passes, {len(d['tokens'])} tokens",
                "blocks": [f"block {b['index']}" for b in d["blocks"]],
                "length": d["block_length"],
                "fixed": [[r, j, piece(trace.pieces, t, 6)] for r, j, t in fixed(d)],
                "cells": [
                    {
                        "r": c.row,
                        "j": c.position,
                        "p": c.pass_,
                        "s": c.step,
                        "id": c.token,
                        "c": c.confidence,
                        "x": piece(trace.pieces, c.token, 6),
                        "w": trace.pieces.get(str(c.token), f"#{c.token} "),
                    }
                    for c in cs
                ],
                "order": order,
            }
        )
    return {"top": max(rounds(d) for d in trace.decodes), "decodes": out}


def page(trace, title: str = "spotref trace") -> str:
    """The whole page, as text."""
    data = page_data(trace)
    # no "<" inside the script element: "</script>" would end it, and "<!--<script>" in a token's
    # text would make the parser take the element's own "</script>" as text (HTML's escaped states)
    blob = json.dumps(data, separators=(",", ":")).replace("<", "\\u003c")
    return PAGE.format(title=html.escape(title), top=data["top"], data=blob)
