"""The numbers docs/spec.md prints are the code's: the noise's test vectors (section 2.1) and the
worked example of one SPOT round (section 1.2). A port checks itself against these numbers, so
each is read from the doc and computed again here: the doc and the code cannot drift apart."""

import contextlib
import io
import re
from pathlib import Path

import torch

import spotref
from spotref.spec.noise import GOLDEN, MASK64, gumbel, mix, noise_key, uniform

ROOT = Path(__file__).resolve().parents[2]
VECTORS = "| seed | block | step | V | j | v | n | key | word | u | g |"
EXAMPLE = "### 1.2 "


def spec_text() -> str:
    return (ROOT / "docs" / "spec.md").read_text(encoding="utf-8")


def table_after(text: str, header: str) -> list[list[str]]:
    """The cells of each row of the markdown table whose header line is ``header``."""
    assert header in text, f"docs/spec.md has no table {header!r}"
    lines = text.split(header, 1)[1].splitlines()[2:]  # after the header and the |---| line
    rows = []
    for line in lines:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in line.strip().strip("|").split("|")])
    return rows


# --- the noise's test vectors ------------------------------------------------------------------------


def vectors(text: str | None = None) -> list[dict]:
    """The noise table's rows: the inputs as ints, ``key`` and ``word`` from hex, ``u`` and ``g`` as floats."""
    text = spec_text() if text is None else text
    out = []
    for cells in table_after(text, VECTORS):
        seed, block, step, V, j, v, n = (int(c) for c in cells[:7])
        key, word = (int(c, 16) for c in cells[7:9])
        out.append(dict(seed=seed, block=block, step=step, V=V, j=j, v=v, n=n, key=key, word=word))
        out[-1].update(u=float(cells[9]), g=float(cells[10]))
    return out


def computed(seed: int, block: int, step: int, V: int, j: int, v: int) -> dict:
    """What the code computes for one entry: the counter, the key, the mixed word, u and g. The
    tensors are the code's own (``uniform``, ``gumbel``) over the block's rows up to ``j``: an
    entry does not depend on the block's length."""
    key, n = noise_key(seed, block, step), j * V + v + 1
    word = mix((key + n * GOLDEN) & MASK64)
    u = uniform(seed, block, step, j + 1, V)[j, v].item()
    g = gumbel(seed, block, step, j + 1, V)[j, v].item()
    return dict(n=n, key=key, word=word, u=u, g=g)


def wrong(rows: list[dict]) -> list[str]:
    """``"row i: field doc x, code y"`` for each value of the table the code does not give exactly."""
    out = []
    for i, row in enumerate(rows):
        want = computed(*(row[k] for k in ("seed", "block", "step", "V", "j", "v")))
        out += [f"row {i}: {k} doc {row[k]!r}, code {want[k]!r}" for k in want if row[k] != want[k]]
    return out


def test_the_vectors_are_there_and_reach_the_corners():
    rows = vectors()
    assert len(rows) >= 5, rows
    assert any(r["seed"] == 2**64 - 1 for r in rows), "no vector at the largest seed"
    assert any(r["V"] > 100_000 for r in rows), "no vector at a real vocabulary size"
    assert any(r["block"] and r["step"] and r["j"] for r in rows), "no vector with a block, step and position"


def test_each_vector_is_what_the_code_computes():
    """Bit for bit: u is integer maths, and g is defined as torch computes it on the CPU."""
    assert wrong(vectors()) == []


def test_the_pinned_mix_values():
    pins = re.findall(r"`mix\((\d+)\) = (0x[0-9A-F]+|0)`", spec_text())
    assert len(pins) >= 2, pins
    assert [mix(int(z)) for z, _ in pins] == [int(h, 16) for _, h in pins]


def test_the_vector_check_can_fail():
    row = (
        "| 0 | 0 | 0 | 3 | 0 | 1 | 2 | 0x0000000000000000 | 0x6E789E6AA1B965F4 "
        "| 0.43152799704851 | 0.17385007634518201 |"
    )
    doc = f"# x\n\n{VECTORS}\n|---|\n{row}\n\nafter\n"
    assert wrong(vectors(doc)) == []
    for old, new, field in [
        ("0.43152799704851", "0.43152799704852", "u"),  # the last digit of u
        ("0.17385007634518201", "0.173850076345182", "g"),  # another float64 near g
        ("0x6E789E6AA1B965F4", "0x6E789E6AA1B965F5", "word"),
        ("| 1 | 2 |", "| 1 | 3 |", "n"),  # a counter that is not j * V + v + 1
    ]:
        found = wrong(vectors(doc.replace(old, new)))
        assert [f.split(":")[1].split()[0] for f in found] == [field], (field, found)


# --- the worked example ---------------------------------------------------------------------------------


def example(text: str | None = None) -> dict:
    """Section 1.2's parts: its python block (``code``), the text block after it (``shown``), the
    table of the round (``rows``) and the passes it says SPOT and exact decoding take."""
    text = spec_text() if text is None else text
    assert EXAMPLE in text, f"docs/spec.md has no section {EXAMPLE!r}"
    section = text.split(EXAMPLE, 1)[1].split("\n## ", 1)[0]
    code = re.search(r"```python\n(.*?)```", section, flags=re.S).group(1)
    shown = re.search(r"```python\n.*?```\s*prints\s*```text\n(.*?)```", section, flags=re.S).group(1)
    passes = re.search(r"the block takes (\d+) passes where\s+exact decoding .*? takes (\d+)", section, flags=re.S)
    rows = table_after(section, "| pass | row | state (step) | confidences | decision | the walk |")
    return dict(code=code, shown=shown, rows=rows, passes=tuple(int(p) for p in passes.groups()))


def run(code: str) -> tuple[str, dict]:
    """What ``code`` prints, and its namespace once run (as tests/docs/test_docs.py runs a block)."""
    ns, out = {"__name__": "__main__"}, io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, "docs/spec.md section 1.2", "exec"), ns)
    return out.getvalue(), ns


def decided(target, mask_id: int, state: list[int]) -> tuple[dict, tuple]:
    """Section 2 at T = 0 with no filter, on the toy target's logits at ``state``: each masked
    position's confidence (4 decimals, as the doc prints it), and the decision (position, token)."""
    L = target(torch.tensor(state)).clone()
    L[:, mask_id] = -torch.inf
    p = torch.softmax(L, -1)  # in the logits' dtype, float32
    masked = [j for j, t in enumerate(state) if t == mask_id]
    best = max(masked, key=lambda j: (p[j].max().item(), -j))  # the lowest position on ties
    return {j: f"{p[j].max().item():.4f}" for j in masked}, (best, int(p[best].argmax()))


def table_problems(rows: list[list[str]], target, mask_id: int) -> list[str]:
    """What a row of the round's table says that the target's decision at that state does not."""
    out = []
    for cells in rows:
        state_cell, conf_cell, decision_cell = cells[2], cells[3], cells[4]
        state = [mask_id if t == "M" else int(t) for t in re.search(r"`(.*?)`", state_cell).group(1).split()]
        if not conf_cell:
            continue  # a row the walk did not reach: nothing decided there
        shown = dict(re.findall(r"(\d+): (\d\.\d{4})", conf_cell))
        conf, decision = decided(target, mask_id, state)
        if {int(j): c for j, c in shown.items()} != conf:
            out.append(f"{state_cell}: confidences {conf_cell}, the rule gives {conf}")
        if decision_cell != str(decision):
            out.append(f"{state_cell}: decision {decision_cell}, the rule gives {decision}")
    return out


def test_the_worked_example_prints_what_the_doc_shows():
    ex = example()
    printed, _ = run(ex["code"])
    assert printed == ex["shown"]


def test_the_round_table_is_the_rule_at_each_state():
    ex = example()
    _, ns = run(ex["code"])
    assert len([r for r in ex["rows"] if r[3]]) >= 4, ex["rows"]
    assert table_problems(ex["rows"], ns["target"], ns["M"]) == []


def test_exact_decoding_takes_the_passes_the_doc_says_and_the_same_decisions():
    ex = example()
    _, ns = run(ex["code"])
    exact = spotref.Speculator(vocab_size=5, block_size=4, mask_id=ns["M"], drafter=None).block(0, [ns["M"]] * 4)
    while not exact.done:
        exact.accept(torch.stack([ns["target"](r) for r in exact.propose()]))
    assert (ns["blk"].passes, exact.passes) == ex["passes"]
    assert exact.decisions == ns["blk"].decisions


def test_the_example_check_can_fail():
    ex = example()
    _, ns = run(ex["code"])
    rows = [list(r) for r in ex["rows"]]
    good = table_problems(rows, ns["target"], ns["M"])
    rows[1][3] = rows[1][3].replace("0.8700", "0.8701")  # a confidence off in its last digit
    rows[3][4] = "(0, 2)"  # another decision
    assert good == [] and len(table_problems(rows, ns["target"], ns["M"])) == 2
    printed, _ = run(ex["code"].replace("budget=5", "budget=4"))  # another tree: another output
    assert printed != ex["shown"]
