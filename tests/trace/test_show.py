"""``spotref show``: the HTML page (no matplotlib), the pictures (matplotlib, skipped without it)
for every drafter and family, and the refusals."""

import json
import shutil
import subprocess
import sys

import pytest
from canvas_model import CanvasModel
from helpers import tiny_model

import spotref
from spotref import names
from spotref.cli import show, show_draw, show_html
from spotref.cli.main import main
from spotref.trace.fmt import Trace

PROMPT = [3, 1, 4, 1, 5, 9]


def decodes(model, n=8, prompt=PROMPT, drafters=("confidence",), **kw) -> Trace:
    """Exact decoding, then each drafter, as one trace."""
    trace = spotref.generate(model, prompt, n, trace=True, **kw).trace
    for d in drafters:
        trace = trace + spotref.generate(model, prompt, n, drafter=d, budget=4, depth=3, trace=True, **kw).trace
    return trace


CASES = {
    "sdar": lambda: decodes(tiny_model(V=61, B=4, init=1.0), drafters=("confidence", "confidence-chain")),
    "sdar-sets": lambda: decodes(tiny_model(V=61, B=4, init=1.0), threshold=0.3, temperature=1.0),
    "llada": lambda: decodes(CanvasModel("llada"), block_length=4),
    "dream": lambda: decodes(CanvasModel("dream"), block_length=4, temperature=1.0),
    "gsm-b32": lambda: decodes(
        "gsm-b32", 2, names.target("gsm-b32").encode("Tom has 3 apples"), drafters=("spot", "calibrated")
    ),
}


@pytest.fixture(scope="module", params=sorted(CASES))
def saved(request, tmp_path_factory):
    path = tmp_path_factory.mktemp("show") / f"{request.param}.json"
    trace = CASES[request.param]()
    return trace.with_pieces(lambda ids: f"t{ids[0]}").save(path)


@pytest.mark.slow
def test_the_html_page_needs_no_matplotlib_and_holds_every_cell(saved, tmp_path):
    out = tmp_path / "html"
    assert main(["show", str(saved), "--out", str(out), "--pictures", "html"]) == 0
    text = (out / "page.html").read_text()
    trace = Trace.load(saved)
    data = show_html.page_data(trace)
    masked = [sum(b["start"].count(d["mask_id"]) for b in d["blocks"]) for d in trace.decodes]
    assert [len(d["cells"]) for d in data["decodes"]] == masked  # every position committed, once
    assert 'type="range"' in text and "confidence" in text and "http" not in text.split("<body>")[1]


@pytest.mark.slow
def test_every_picture_is_drawn(saved, tmp_path):
    pytest.importorskip("matplotlib")
    pytest.importorskip("PIL")
    out = tmp_path / "pictures"
    assert main(["show", str(saved), "--out", str(out), "--frames", "4"]) == 0
    for name, magic in (("order.png", b"\x89PNG"), ("round.png", b"\x89PNG"), ("decode.gif", b"GIF8")):
        assert (out / name).read_bytes().startswith(magic), name


def test_the_tree_marks_the_accepted_path_and_the_rejected_branches():
    round_ = {"tree": {"parents": [-1, 0, 0, 1, 2]}, "node_rows": [0, 1, 2, 3, 4], "path": [0, 2, 4]}
    assert show_draw.node_status(round_) == ["accepted", "rejected", "accepted", "unreached", "accepted"]
    assert show_draw.tree_layout([-1, 0, 0, 1]) == ([0, 1, 1, 2], [0.5, 0.0, 1.0, 0.0])


def test_a_bad_trace_or_round_is_one_line(tmp_path, capsys, saved):
    bad = tmp_path / "bad.json"
    bad.write_text('{"format": "spotref-trace", "vers')
    assert main(["show", str(bad), "--out", str(tmp_path / "o"), "--pictures", "html"]) == 2
    assert "not a complete JSON document" in capsys.readouterr().err
    assert main(["show", str(saved), "--out", str(tmp_path / "o"), "--pictures", "html", "--round", "0:999"]) == 0
    assert main(["show", str(saved), "--out", str(tmp_path / "o"), "--pictures", "round", "--round", "99:0"]) in (1, 2)


def test_without_matplotlib_the_pictures_name_what_to_install(monkeypatch, saved, tmp_path, capsys):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib raises ImportError
    assert main(["show", str(saved), "--out", str(tmp_path / "o"), "--pictures", "order"]) == 1
    assert "pip install matplotlib" in capsys.readouterr().err
    with pytest.raises(ImportError, match="pip install matplotlib"):
        show.needs_matplotlib()


DOM = r"""
// The least DOM the page's script touches: elements with children, text, class, style, title.
const make = tag => ({tag, children: [], className: "", textContent: "", style: {}, title: "", listeners: {},
  appendChild(c) { this.children.push(c); return c; },
  addEventListener(k, f) { this.listeners[k] = f; }});
const byId = {decodes: make("div"), shown: make("span"), pass: make("input"),
  data: Object.assign(make("script"), {textContent: require("fs").readFileSync(0, "utf8")})};
global.document = {getElementById: id => byId[id], createElement: make};
"""
CHECK = r"""
const cellsOf = box => box.children.filter(l => l.className === "row").flatMap(l => l.children.slice(1));
const boxes = byId.decodes.children;
const counts = t => { byId.pass.listeners.input({target: {value: String(t)}});
  return boxes.map(b => cellsOf(b).filter(s => s.className === "cell").length); };
const textNow = () => boxes.map(b => b.children.at(-1).textContent);
const shown = b => cellsOf(b).filter(s => s.className === "cell");
const hovers = () => boxes.map(b => shown(b).every(s => s.title.includes("confidence")));
const top = data.top, atTop = counts(top), texts = textNow(), titles = hovers();
const atZero = counts(0), textsAtZero = textNow();
console.log(JSON.stringify({top, atTop, atZero, shown: String(byId.shown.textContent),
  titles,
  masked: texts.map(t => t.includes("_")), allMasked: textsAtZero.map(t => /^_*$/.test(t))}));
"""


@pytest.mark.skipif(shutil.which("node") is None, reason="no JavaScript engine (node) on this machine")
def test_the_html_page_runs_its_slider_in_a_javascript_engine(saved, tmp_path):
    """The page's own script, run by node over a minimal DOM: at the last pass every committed
    cell shows its token with a hover naming its confidence; at pass 0 none does."""
    out = tmp_path / "html"
    assert main(["show", str(saved), "--out", str(out), "--pictures", "html"]) == 0
    text = (out / "page.html").read_text()
    script = text.split("<script>")[1].split("</script>")[0]
    blob = text.split('<script id="data" type="application/json">')[1].split("</script>")[0]
    run = subprocess.run(["node", "-e", DOM + script + CHECK], input=blob, capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    got = json.loads(run.stdout)
    data = show_html.page_data(Trace.load(saved))
    assert got["atTop"] == [len(d["cells"]) for d in data["decodes"]] and got["atZero"] == [0] * len(data["decodes"])
    assert got["shown"] == "0" and all(got["titles"]) and not any(got["masked"]) and all(got["allMasked"])
