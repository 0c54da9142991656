"""A procedural corpus of grade-school math word problems in the style of GSM8K.

Every problem is drawn from a template (40 of them, 1-4 reasoning steps over + - * / with
integer results) with names, objects and units, and comes with a worked solution that writes
every equation (``3 * 12 = 36``) and ends with GSM8K's final line ``#### N``. Problems are
chat-formatted like SDAR-Chat (the Qwen3 chat template)::

    <|im_start|>user
    Mia buys 4 packs of pencils. Each pack has 6 pencils. How many pencils does Mia have?<|im_end|>
    <|im_start|>assistant
    Mia buys 4 packs of 6 pencils, so Mia has 4 * 6 = 24 pencils.
    #### 24<|im_end|>

Reproducible from the seed alone: problem ``i`` of a split is a pure function of
``(seed, split, i, difficulty)`` (numpy's PCG64 seeded with ``[seed, split, i]``), whatever else
is generated. Held-out problems share no problem text with training ones *by construction*: a
question belongs to the held-out split when the first byte of the SHA-256 of its text is below
``256 * HELDOUT_FRAC``; the training stream skips such questions and the held-out stream keeps
only them (and draws from its own seeds).

Difficulty (``Difficulty``: steps, operand and factor ranges, a cap on every intermediate
result) is a parameter, so a curriculum can start easy and widen; ``LEVELS`` holds presets.

Stdlib + numpy only.

    python -m workbench.data.gsm [--n 5] [--seed 0] [--level 3] [--heldout]
"""

from __future__ import annotations

import argparse
import hashlib
import re
from dataclasses import asdict, dataclass

import numpy as np

from spotref.load.tokenizer import FINAL, final_answer  # noqa: F401 (re-exported: GSM8K's answer line)
from workbench.data import gsm_templates, gsm_templates_long
from workbench.data.gsm_words import Ctx, Retry, apply_op

TEMPLATES = gsm_templates.TEMPLATES + gsm_templates_long.TEMPLATES  # the 40, fewest steps first

IM_START, IM_END = "<|im_start|>", "<|im_end|>"
HELDOUT_FRAC = 1 / 16
SPLITS = {"train": 0, "heldout": 1}
VERSION = 2  # bump when templates or word lists change


@dataclass(frozen=True)
class Difficulty:
    """What problems may be drawn: steps in [min_steps, max_steps]; amounts (start values,
    addends, prices, ...) in [1, max_operand]; multipliers, group sizes and divisors in
    [2, max_factor]; every intermediate result and the answer in [1, max_result]."""

    min_steps: int = 1
    max_steps: int = 4
    max_operand: int = 100
    max_factor: int = 12
    max_result: int = 1000

    def __post_init__(self):
        if not 1 <= self.min_steps <= self.max_steps <= 4:
            raise ValueError(f"want 1 <= min_steps <= max_steps <= 4, got {self.min_steps}, {self.max_steps}")
        if self.max_operand < 10 or self.max_factor < 3 or self.max_result < 2 * self.max_operand:
            raise ValueError("want max_operand >= 10, max_factor >= 3, max_result >= 2 * max_operand")


LEVELS = {
    0: Difficulty(1, 1, max_operand=12, max_factor=5, max_result=60),  # easier than 1: a curriculum's start
    1: Difficulty(1, 2, max_operand=20, max_factor=6, max_result=100),
    2: Difficulty(1, 3, max_operand=50, max_factor=9, max_result=300),
    3: Difficulty(1, 4, max_operand=100, max_factor=12, max_result=1000),
}


@dataclass(frozen=True)
class Problem:
    question: str
    solution: str  # worked solution; last line "#### N"
    answer: int
    steps: int  # equations in the solution
    template: str

    @property
    def prompt(self) -> str:
        return chat_prompt(self.question)

    @property
    def document(self) -> str:
        return chat_document(self.question, self.solution)


# --- chat format (Qwen3 / SDAR-Chat template, one user turn) ------------------------------


def chat_prompt(question: str) -> str:
    """The user turn and the assistant header: what the model is prompted with."""
    return f"{IM_START}user\n{question}{IM_END}\n{IM_START}assistant\n"


def chat_document(question: str, solution: str) -> str:
    """A whole training document: the prompt, the solution and the closing ``<|im_end|>``."""
    return chat_prompt(question) + solution + IM_END


# --- checking solutions -----------------------------------------------------------------

EQUATION = re.compile(r"(\d+) ([-+*/]) (\d+) = (\d+)")


def equations(text: str) -> list[tuple[int, str, int, int, bool]]:
    """Every ``a op b = c`` written in ``text``, with whether it is right."""
    out = []
    for a, op, b, c in EQUATION.findall(text):
        a, b, c = int(a), int(b), int(c)
        out.append((a, op, b, c, apply_op(a, op, b) == c))
    return out


# --- drawing problems ----------------------------------------------------------------------

DRILL_OPS = "+-+-*/"  # addition and subtraction twice as often


def drill(rng: np.random.Generator, d: Difficulty = LEVELS[3], ops: str = DRILL_OPS) -> Problem:
    """An arithmetic drill (a training aid, not one of the templates: the corpus is unchanged):
    "What is a op b?" answered by the one equation, with the operands and the result inside
    ``d``'s limits (products and quotients from factors up to ``max_factor``); the operator drawn
    uniformly from ``ops`` (a repeated operator is drawn that much more often)."""
    if not ops or set(ops) - set("+-*/"):
        raise ValueError(f"drill operators must be a non-empty string of + - * /, got {ops!r}")
    op = ops[int(rng.integers(len(ops)))]
    for _ in range(1000):  # the operation is kept, the numbers redrawn
        c = Ctx(rng, d)
        try:
            if op in "+-":
                a, b = c.n(2), c.n()
                b = b if op == "+" else c.n(1, a - 1)  # a - b >= 1
            else:
                a, b = c.n(), c.f()
                a = b * c.n(1, d.max_result // b) if op == "/" else a
            text, value = c.eq(a, op, b)
        except Retry:
            continue
        question = f"What is {a} {op} {b}?"
        return Problem(question, f"{text}\n#### {value}", value, 1, "drill")
    raise RuntimeError(f"no drill fits {d}")


def equation_drill(rng: np.random.Generator, d: Difficulty = LEVELS[3], ops: str = DRILL_OPS) -> Problem:
    """A drill on an equation the problems themselves write: the operator drawn uniformly from
    ``ops``, then problems drawn at ``d`` until one writes an equation with it, and one of those
    equations (uniformly) asked as "What is a op b?". Unlike ``drill``, whose operands are drawn
    uniformly in ``d``'s limits, its numbers follow the problems': sums and differences of
    earlier results (two and three digits) as often as the solutions hold them. Only equations
    of training problems (not ``is_heldout``) are drilled."""
    if not ops or set(ops) - set("+-*/"):
        raise ValueError(f"drill operators must be a non-empty string of + - * /, got {ops!r}")
    op = ops[int(rng.integers(len(ops)))]
    for _ in range(1000):
        p = draw(rng, d)
        found = [m for m in EQUATION.finditer(p.solution) if m[2] == op]
        if found and not is_heldout(p.question):
            m = found[int(rng.integers(len(found)))]
            a, b, c = int(m[1]), int(m[3]), int(m[4])
            return Problem(f"What is {a} {op} {b}?", f"{a} {op} {b} = {c}\n#### {c}", c, 1, "drill")
    raise RuntimeError(f"no problem at {d} writes an equation with {op}")


def is_heldout(question: str) -> bool:
    """The held-out split, by the SHA-256 of the question text."""
    return hashlib.sha256(question.encode("utf-8")).digest()[0] < 256 * HELDOUT_FRAC


def draw(rng: np.random.Generator, d: Difficulty = LEVELS[3], templates=None) -> Problem:
    """One problem from ``rng`` at difficulty ``d`` (templates: names to restrict to): the
    number of steps is uniform over those allowed, then the template uniform among them."""
    pool = [t for t in TEMPLATES if d.min_steps <= t[1] <= d.max_steps and (templates is None or t[0] in templates)]
    if not pool:
        raise ValueError(f"no template fits {d} and {templates}")
    by_steps = sorted({t[1] for t in pool})
    for _ in range(1000):
        k = by_steps[int(rng.integers(len(by_steps)))]  # steps uniform, then a template
        group = [t for t in pool if t[1] == k]
        name, steps, fn = group[int(rng.integers(len(group)))]
        c = Ctx(rng, d)
        try:
            q, lines, ans = fn(c)
        except Retry:
            continue
        assert c.eqs == steps, f"template {name} wrote {c.eqs} equations, declares {steps}"
        return Problem(q, "\n".join(lines + [f"#### {ans}"]), ans, steps, name)
    raise RuntimeError(f"no problem drawn at {d} in 1000 tries")


def iter_problems(seed: int = 0, split: str = "train", difficulty: Difficulty = LEVELS[3], templates=None):
    """The endless stream of a split: problem i is drawn from PCG64([seed, split, i]) and kept
    when its question's hash puts it in ``split``."""
    s = SPLITS[split]
    i = 0
    while True:
        p = draw(np.random.Generator(np.random.PCG64([seed, s, i])), difficulty, templates)
        i += 1
        if is_heldout(p.question) == (split == "heldout"):
            yield p


def problems(
    n: int, seed: int = 0, split: str = "train", difficulty: Difficulty = LEVELS[3], templates=None
) -> list[Problem]:
    """The first ``n`` problems of a split."""
    it = iter_problems(seed, split, difficulty, templates)
    return [next(it) for _ in range(n)]


def heldout(n: int, seed: int = 0, difficulty: Difficulty = LEVELS[3]) -> list[tuple[str, int]]:
    """``n`` held-out ``(prompt text, answer)`` pairs (the prompt is chat-formatted)."""
    return [(p.prompt, p.answer) for p in problems(n, seed, "heldout", difficulty)]


def documents(n: int, seed: int = 0, difficulty: Difficulty = LEVELS[3]) -> list[str]:
    """``n`` training documents: prompt + solution + ``<|im_end|>`` (add your own EOS)."""
    return [p.document for p in problems(n, seed, "train", difficulty)]


def describe(difficulty: Difficulty, seed: int) -> dict:
    """What to record in a target's metadata to regenerate its corpus."""
    return {
        "generator": "workbench.data.gsm",
        "version": VERSION,
        "seed": seed,
        "difficulty": asdict(difficulty),
        "heldout_frac": HELDOUT_FRAC,
        "templates": [t[0] for t in TEMPLATES],
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m workbench.data.gsm", description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=5)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--level", type=int, default=3, choices=sorted(LEVELS))
    ap.add_argument("--heldout", action="store_true")
    a = ap.parse_args(argv)
    for p in problems(a.n, a.seed, "heldout" if a.heldout else "train", LEVELS[a.level]):
        print(f"--- {p.template} ({p.steps} steps)\n{p.document}\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
