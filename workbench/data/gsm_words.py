"""What the templates of ``workbench.data.gsm`` draw from: the word lists, ``Ctx`` (the rng, the
difficulty and checked arithmetic) and ``registrar``, which lists a module's templates in the
order they are written (the order ``gsm.draw`` picks from).
"""

from __future__ import annotations

import numpy as np


def apply_op(a: int, op: str, b: int):
    """``a op b`` for + - * /, or None when the quotient is not an integer."""
    if op == "+":
        return a + b
    if op == "-":
        return a - b
    if op == "*":
        return a * b
    return a // b if b and a % b == 0 else None


# --- word lists -----------------------------------------------------------------------------

NAMES = [
    ("Liam", "he"),
    ("Noah", "he"),
    ("Oliver", "he"),
    ("James", "he"),
    ("Elijah", "he"),
    ("Lucas", "he"),
    ("Mason", "he"),
    ("Ethan", "he"),
    ("Leo", "he"),
    ("Jack", "he"),
    ("Owen", "he"),
    ("Sam", "he"),
    ("Ben", "he"),
    ("Max", "he"),
    ("Tom", "he"),
    ("Omar", "he"),
    ("Ravi", "he"),
    ("Carlos", "he"),
    ("Kenji", "he"),
    ("Ahmed", "he"),
    ("David", "he"),
    ("Felix", "he"),
    ("Hugo", "he"),
    ("Ivan", "he"),
    ("Marco", "he"),
    ("Emma", "she"),
    ("Olivia", "she"),
    ("Ava", "she"),
    ("Mia", "she"),
    ("Sophia", "she"),
    ("Isabella", "she"),
    ("Amelia", "she"),
    ("Harper", "she"),
    ("Ella", "she"),
    ("Lily", "she"),
    ("Grace", "she"),
    ("Chloe", "she"),
    ("Zoe", "she"),
    ("Nora", "she"),
    ("Sara", "she"),
    ("Aisha", "she"),
    ("Priya", "she"),
    ("Mei", "she"),
    ("Lucia", "she"),
    ("Fatima", "she"),
    ("Hannah", "she"),
    ("Julia", "she"),
    ("Rosa", "she"),
    ("Yuki", "she"),
    ("Anna", "she"),
]
PRON = {"he": ("he", "him", "his"), "she": ("she", "her", "her")}
THINGS = [
    "apples",
    "oranges",
    "pencils",
    "stickers",
    "marbles",
    "cookies",
    "cards",
    "books",
    "shells",
    "stamps",
    "buttons",
    "crayons",
    "balloons",
    "candies",
    "coins",
    "toy cars",
    "beads",
    "eggs",
    "cupcakes",
    "rocks",
    "feathers",
    "flowers",
    "erasers",
    "muffins",
    "comics",
    "pebbles",
    "lemons",
    "plums",
    "ribbons",
    "badges",
]
CONTAINERS = ["boxes", "bags", "packs", "jars", "baskets", "crates", "cartons", "tins"]
ITEMS = [
    ("notebook", "notebooks"),
    ("pen", "pens"),
    ("sandwich", "sandwiches"),
    ("toy", "toys"),
    ("shirt", "shirts"),
    ("ticket", "tickets"),
    ("cake", "cakes"),
    ("ball", "balls"),
    ("kite", "kites"),
    ("hat", "hats"),
    ("book", "books"),
    ("lamp", "lamps"),
    ("plant", "plants"),
    ("mug", "mugs"),
    ("puzzle", "puzzles"),
    ("scarf", "scarves"),
]
VEHICLES = ["car", "bus", "train", "truck", "boat", "van"]
PLACES = ["school", "library", "bakery", "zoo", "farm", "shop", "museum", "park"]
DAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]


class Retry(Exception):
    """The drawn numbers break a constraint; draw again."""


class Ctx:
    """What a template draws from: the rng, the difficulty, and checked arithmetic."""

    def __init__(self, rng: np.random.Generator, d):
        self.rng, self.d, self.eqs = rng, d, 0

    def n(self, lo: int = 1, hi: int | None = None) -> int:
        hi = self.d.max_operand if hi is None else min(hi, self.d.max_operand)
        if hi < lo:
            raise Retry
        return int(self.rng.integers(lo, hi + 1))

    def f(self, lo: int = 2, hi: int | None = None) -> int:
        hi = self.d.max_factor if hi is None else min(hi, self.d.max_factor)
        if hi < lo:
            raise Retry
        return int(self.rng.integers(lo, hi + 1))

    def pick(self, seq):
        return seq[int(self.rng.integers(len(seq)))]

    def people(self, k: int):
        idx = self.rng.choice(len(NAMES), size=k, replace=False)
        return [(NAMES[i][0],) + PRON[NAMES[i][1]] for i in idx]

    def things(self, k: int):
        return [THINGS[i] for i in self.rng.choice(len(THINGS), size=k, replace=False)]

    def eq(self, a: int, op: str, b: int) -> tuple[str, int]:
        """``"a op b = c"`` and c; Retry unless c is an integer in [1, max_result]."""
        c = apply_op(a, op, b)
        if c is None or not 1 <= c <= self.d.max_result:
            raise Retry
        self.eqs += 1
        return f"{a} {op} {b} = {c}", c


def cap(s: str) -> str:
    return s[0].upper() + s[1:]


def registrar(templates: list):
    """``@template(steps)``: append ``(name, steps, fn)`` to ``templates``."""

    def template(steps: int):
        def wrap(fn):
            templates.append((fn.__name__, steps, fn))
            return fn

        return wrap

    return template
