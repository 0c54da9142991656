"""Quality report of a math (gsm) target at T = 0: does it solve the problems, and is it stable?

``python -m workbench.bench.quality gsm-b32 [--prompts 500]`` (the quality tool reads the target's
corpus and comes here for a gsm target). Prompts: the first ``--prompts`` held-out problems of the
target's own corpus (its metadata record's, ``workbench.data.corpora``: what ``target.heldout(n,
seed=0)`` gives for a bundled target; its difficulty and templates, chat-formatted). Decoding:
``spotref.generate`` at T = 0, one-position rule, stop at end-of-text.

* ``answers``: share of right final answers (``#### N``), overall and by the problem's number of
  reasoning steps (``answers_by_steps``);
* ``equations``: share of the written equations ``a op b = c`` that are right (and how many were
  written per problem); ``equations_by_kind``: the same by operator and size (``"* 3+ digits"``:
  a multiplication with a number of three or more digits among a, b, c), where the points go;
  ``equations_wrong_length``: the share of the wrong equations whose result has the wrong number
  of digits (``38 - 34 = 14``; a quotient that is no integer counts as wrong, not as a length);
* ``stability_d0``: d = 0 top-1 token stability (``workbench.bench.stability``: the share of
  commits after a block's first whose token is the coupled stale token), overall and without the
  commits of end-of-text (``stability_d0_text``: no fill in the number).

The bar (``meets_bar``): answers >= 50%, equations >= 90%, ``stability_d0_text`` >= 0.90.
"""

from __future__ import annotations

import time
from collections import defaultdict

import numpy as np

from spotref.cli.report import progress
from spotref.record.trajectories import record_run, stack
from workbench.bench import stability
from workbench.data import gsm
from workbench.data.corpora import open_corpus

BAR = dict(answers=0.5, equations=0.9, stability_d0_text=0.9)


def problems_of(target, n: int) -> list:
    """The target's first ``n`` held-out problems (seed 0), as ``gsm.Problem`` (steps included):
    the same problems as its corpus record's ``heldout(n, 0)`` (a bundled target's ``target.heldout(n, 0)``)."""
    record = target.meta.get("corpus") or {}
    if record.get("name") != "gsm":
        raise ValueError(f"{target.name} is not a math target (its corpus is {record.get('name', 'stdlib')!r})")
    out = gsm.problems(n, 0, "heldout", gsm.Difficulty(**record["difficulty"]))
    if [(p.prompt, p.answer) for p in out[:3]] != open_corpus(record).heldout(min(n, 3), 0):
        raise ValueError(f"{target.name}: its corpus record does not rebuild its held-out problems")
    return out


def equation_kind(a: int, op: str, b: int, c: int) -> str:
    """The operator and the size of an equation ``a op b = c``: ``"+ 1-2 digits"`` when a, b and c
    are all below 100, else ``"+ 3+ digits"``."""
    return f"{op} {'1-2' if max(a, b, c) < 100 else '3+'} digits"


def wrong_length(a: int, op: str, b: int, c: int) -> bool:
    """Whether the written result ``c`` of ``a op b`` has another number of digits than the
    true result (False when that is no integer)."""
    true = gsm.apply_op(a, op, b)
    return true is not None and len(str(true)) != len(str(c))


def outcome(a: int, op: str, b: int, c: int) -> str:
    """``"right"``, ``"wrong length"`` (``wrong_length``) or ``"wrong digits"``: what a written
    equation ``a op b = c`` got wrong."""
    return "right" if gsm.apply_op(a, op, b) == c else "wrong length" if wrong_length(a, op, b, c) else "wrong digits"


def report(target, n: int, new_tokens: int) -> dict:
    t0, rows, right, by_steps = time.perf_counter(), [], [], defaultdict(list)
    eq_right = eq_all = 0
    by_kind, lengths = defaultdict(list), []
    samples = []
    stops = list(target.stop_ids or ())
    for i, p in enumerate(progress(problems_of(target, n), "quality")):
        ids = target.encode(p.prompt)
        rs, res = record_run(target.model, ids, new_tokens, 0.0, 0, stops)
        rows += [{**r, "prompt": np.int32(i)} for r in rs]
        text = target.tokenizer.decode(res.tokens)
        ok = gsm.final_answer(text) == p.answer
        right.append(ok)
        by_steps[p.steps].append(ok)
        eqs = gsm.equations(text)
        eq_right, eq_all = eq_right + sum(e[-1] for e in eqs), eq_all + len(eqs)
        for e in eqs:
            by_kind[equation_kind(*e[:4])].append(e[-1])
            if not e[-1]:
                lengths.append(wrong_length(*e[:4]))
        if i < 4:
            samples.append({"question": p.question, "answer": p.answer, "generated": text})
    ds = stack(rows, target.model.mask_id, target.model.block_size)
    top1, _, commits = stability.rates(ds, 0)
    text_top1, _, text_commits = stability.rates(ds, 0, where=lambda o: ~np.isin(o["tok"], stops))
    r = {
        "target": target.name,
        "problems": n,
        "new_tokens": new_tokens,
        "temperature": 0.0,
        "answers": round(float(np.mean(right)), 4),
        "answers_by_steps": {str(k): [round(float(np.mean(v)), 4), len(v)] for k, v in sorted(by_steps.items())},
        "equations": round(eq_right / max(eq_all, 1), 4),
        "equations_per_problem": round(eq_all / n, 2),
        "equations_by_kind": {k: [round(float(np.mean(v)), 4), len(v)] for k, v in sorted(by_kind.items())},
        "equations_wrong_length": round(float(np.mean(lengths)), 4) if lengths else None,
        "stability_d0": round(top1, 4),
        "stability_d0_commits": commits,
        "stability_d0_text": round(text_top1, 4),
        "stability_d0_text_commits": text_commits,
        "wall_s": round(time.perf_counter() - t0, 1),
        "samples": samples,
    }
    r["meets_bar"] = all(r[k] >= v for k, v in BAR.items())
    return r
