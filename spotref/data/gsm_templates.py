"""The 40 templates of ``spotref.data.gsm``, with their word lists: each template draws its
numbers through a ``Ctx`` (checked arithmetic within a ``Difficulty``) and returns (question,
solution lines without the final line, answer); ``TEMPLATES`` lists them with their step counts.
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

NAMES = [("Liam", "he"), ("Noah", "he"), ("Oliver", "he"), ("James", "he"), ("Elijah", "he"),
         ("Lucas", "he"), ("Mason", "he"), ("Ethan", "he"), ("Leo", "he"), ("Jack", "he"),
         ("Owen", "he"), ("Sam", "he"), ("Ben", "he"), ("Max", "he"), ("Tom", "he"),
         ("Omar", "he"), ("Ravi", "he"), ("Carlos", "he"), ("Kenji", "he"), ("Ahmed", "he"),
         ("David", "he"), ("Felix", "he"), ("Hugo", "he"), ("Ivan", "he"), ("Marco", "he"),
         ("Emma", "she"), ("Olivia", "she"), ("Ava", "she"), ("Mia", "she"), ("Sophia", "she"),
         ("Isabella", "she"), ("Amelia", "she"), ("Harper", "she"), ("Ella", "she"), ("Lily", "she"),
         ("Grace", "she"), ("Chloe", "she"), ("Zoe", "she"), ("Nora", "she"), ("Sara", "she"),
         ("Aisha", "she"), ("Priya", "she"), ("Mei", "she"), ("Lucia", "she"), ("Fatima", "she"),
         ("Hannah", "she"), ("Julia", "she"), ("Rosa", "she"), ("Yuki", "she"), ("Anna", "she")]
PRON = {"he": ("he", "him", "his"), "she": ("she", "her", "her")}
THINGS = ["apples", "oranges", "pencils", "stickers", "marbles", "cookies", "cards", "books",
          "shells", "stamps", "buttons", "crayons", "balloons", "candies", "coins", "toy cars",
          "beads", "eggs", "cupcakes", "rocks", "feathers", "flowers", "erasers", "muffins",
          "comics", "pebbles", "lemons", "plums", "ribbons", "badges"]
CONTAINERS = ["boxes", "bags", "packs", "jars", "baskets", "crates", "cartons", "tins"]
ITEMS = [("notebook", "notebooks"), ("pen", "pens"), ("sandwich", "sandwiches"), ("toy", "toys"),
         ("shirt", "shirts"), ("ticket", "tickets"), ("cake", "cakes"), ("ball", "balls"),
         ("kite", "kites"), ("hat", "hats"), ("book", "books"), ("lamp", "lamps"),
         ("plant", "plants"), ("mug", "mugs"), ("puzzle", "puzzles"), ("scarf", "scarves")]
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


# --- templates: each returns (question, solution lines without the final line, answer) ----

TEMPLATES: list[tuple[str, int, object]] = []


def template(steps: int):
    def wrap(fn):
        TEMPLATES.append((fn.__name__, steps, fn))
        return fn
    return wrap


@template(1)
def packs(c):
    (p, he, _, _), = c.people(1)
    box, obj, a, b = c.pick(CONTAINERS), c.pick(THINGS), c.f(), c.f(hi=c.d.max_operand)
    e, r = c.eq(a, "*", b)
    return (f"{p} buys {a} {box} of {obj}. Each of the {box} has {b} {obj}. How many {obj} does {p} have?",
            [f"{p} buys {a} {box} and each has {b} {obj}, so {he} has {e} {obj}."], r)


@template(1)
def gets_more(c):
    (p, he, _, _), (q, *_) = c.people(2)
    obj, a, b = c.pick(THINGS), c.n(), c.n()
    e, r = c.eq(a, "+", b)
    return (f"{p} has {a} {obj}. {q} gives {p} {b} more {obj}. How many {obj} does {p} have now?",
            [f"{p} has {a} {obj} and gets {b} more {obj}, so {he} has {e} {obj} now."], r)


@template(1)
def gives_away(c):
    (p, he, _, _), (q, *_) = c.people(2)
    obj, a = c.pick(THINGS), c.n(5)
    b = c.n(1, a - 1)
    e, r = c.eq(a, "-", b)
    return (f"{p} has {a} {obj}. {cap(he)} gives {b} {obj} to {q}. How many {obj} does {p} have left?",
            [f"{p} has {a} {obj} and gives {b} {obj} away, so {he} has {e} {obj} left."], r)


@template(1)
def share(c):
    (p, he, _, _), = c.people(1)
    obj, k, each = c.pick(THINGS), c.f(), c.f(hi=c.d.max_operand)
    total = k * each
    e, r = c.eq(total, "/", k)
    return (f"{p} has {total} {obj} and shares them equally among {k} friends. "
            f"How many {obj} does each friend get?",
            [f"{p} has {total} {obj} and shares them among {k} friends, so each friend gets {e} {obj}."], r)


@template(1)
def speed(c):
    v, s, h = c.pick(VEHICLES), c.n(10), c.f()
    e, r = c.eq(s, "*", h)
    return (f"A {v} travels {s} kilometers every hour. How many kilometers does it travel in {h} hours?",
            [f"The {v} travels {s} kilometers every hour, so in {h} hours it travels {e} kilometers."], r)


@template(1)
def tiles_area(c):
    (p, he, _, _), = c.people(1)
    l, w = c.f(hi=20), c.f(hi=20)
    e, r = c.eq(l, "*", w)
    return (f"{p} is tiling a floor that is {l} tiles long and {w} tiles wide. How many tiles does {p} need?",
            [f"The floor is {l} tiles long and {w} tiles wide, so {he} needs {e} tiles."], r)


@template(1)
def cost_each(c):
    (p, he, _, _), = c.people(1)
    (item, items), k, price = c.pick(ITEMS), c.f(), c.f(hi=c.d.max_operand)
    total = k * price
    e, r = c.eq(total, "/", k)
    return (f"{p} paid {total} dollars for {k} {items}. Each of them cost the same. "
            f"How many dollars did one {item} cost?",
            [f"{p} paid {total} dollars for {k} {items}, so one {item} cost {e} dollars."], r)


@template(1)
def fewer_than(c):
    (p, *_), (q, *_) = c.people(2)
    obj, a = c.pick(THINGS), c.n(5)
    b = c.n(1, a - 1)
    e, r = c.eq(a, "-", b)
    return (f"{p} has {a} {obj}. {q} has {b} fewer {obj} than {p}. How many {obj} does {q} have?",
            [f"{p} has {a} {obj} and {q} has {b} fewer, so {q} has {e} {obj}."], r)


@template(2)
def more_than_total(c):
    (p, *_), (q, *_) = c.people(2)
    obj, a, b = c.pick(THINGS), c.n(), c.n()
    e1, x = c.eq(a, "+", b)
    e2, r = c.eq(a, "+", x)
    return (f"{p} has {a} {obj}. {q} has {b} more {obj} than {p}. How many {obj} do they have together?",
            [f"{p} has {a} {obj} and {q} has {b} more, so {q} has {e1} {obj}.",
             f"Together they have {e2} {obj}."], r)


@template(2)
def times_as_many(c):
    (p, *_), (q, *_) = c.people(2)
    obj, a, k = c.pick(THINGS), c.n(), c.f()
    e1, x = c.eq(a, "*", k)
    e2, r = c.eq(a, "+", x)
    return (f"{p} collects {a} {obj}. {q} collects {k} times as many {obj} as {p}. "
            f"How many {obj} do they collect in all?",
            [f"{p} collects {a} {obj} and {q} collects {k} times as many, so {q} collects {e1} {obj}.",
             f"In all they collect {e2} {obj}."], r)


@template(2)
def change(c):
    (p, he, _, _), = c.people(1)
    (_, items), k, price = c.pick(ITEMS), c.f(), c.f(hi=c.d.max_operand)
    e1, cost = c.eq(k, "*", price)
    paid = c.n(cost + 1)
    e2, r = c.eq(paid, "-", cost)
    return (f"{p} buys {k} {items} that cost {price} dollars each. {cap(he)} pays with {paid} dollars. "
            f"How many dollars of change does {p} get?",
            [f"{p} buys {k} {items} that cost {price} dollars each, so they cost {e1} dollars.",
             f"{cap(he)} pays with {paid} dollars, so the change is {e2} dollars."], r)


@template(2)
def pages_left(c):
    (p, he, _, his), = c.people(1)
    per, days = c.f(hi=c.d.max_operand), c.f()
    e1, read = c.eq(per, "*", days)
    total = c.n(read + 1, c.d.max_result)
    e2, r = c.eq(total, "-", read)
    return (f"{p}'s book has {total} pages. {cap(he)} reads {per} pages every day for {days} days. "
            f"How many pages are left to read?",
            [f"{p} reads {per} pages every day for {days} days, so {he} reads {e1} pages.",
             f"The book has {total} pages, so {e2} pages are left."], r)


@template(2)
def chairs_taken(c):
    place, rows, per = c.pick(PLACES), c.f(), c.f(hi=c.d.max_operand)
    e1, chairs = c.eq(rows, "*", per)
    empty = c.n(1, chairs - 1)
    e2, r = c.eq(chairs, "-", empty)
    return (f"The hall of the {place} has {rows} rows with {per} chairs in each row. {empty} chairs are empty. "
            f"How many chairs are taken?",
            [f"The hall has {rows} rows with {per} chairs in each row, so it has {e1} chairs.",
             f"Of them {empty} chairs are empty, so {e2} chairs are taken."], r)


@template(2)
def savings_spent(c):
    (p, he, _, _), = c.people(1)
    a, w = c.f(hi=c.d.max_operand), c.f()
    e1, saved = c.eq(a, "*", w)
    b = c.n(1, saved - 1)
    e2, r = c.eq(saved, "-", b)
    return (f"{p} saves {a} dollars every week. After {w} weeks {he} spends {b} dollars on a gift. "
            f"How many dollars does {p} have left?",
            [f"{p} saves {a} dollars every week for {w} weeks, so {he} saves {e1} dollars.",
             f"{cap(he)} spends {b} dollars, so {he} has {e2} dollars left."], r)


@template(2)
def bake_bags(c):
    (p, he, _, _), = c.people(1)
    trays, per, bag = c.f(), c.f(), c.f()
    if (trays * per) % bag:
        raise Retry
    e1, total = c.eq(trays, "*", per)
    e2, r = c.eq(total, "/", bag)
    return (f"{p} bakes {trays} trays of cookies with {per} cookies on each tray. {cap(he)} puts them into "
            f"bags of {bag}. How many bags does {p} fill?",
            [f"{p} bakes {trays} trays of cookies with {per} cookies on each tray, so {he} bakes {e1} cookies.",
             f"The bags of {bag} take them all, so {he} fills {e2} bags."], r)


@template(2)
def fruit_eaten(c):
    (p, he, _, _), = c.people(1)
    f1, f2 = c.things(2)
    a, b = c.n(), c.n()
    e1, total = c.eq(a, "+", b)
    k = c.n(1, total - 1)
    e2, r = c.eq(total, "-", k)
    return (f"{p} has {a} {f1} and {b} {f2}. {cap(he)} gives away {k} of them. How many are left?",
            [f"{p} has {a} {f1} and {b} {f2}, so {he} has {e1} in all.",
             f"{cap(he)} gives away {k} of them, so {e2} are left."], r)


@template(2)
def class_teams(c):
    boys, girls, team = c.n(), c.n(), c.f()
    if (boys + girls) % team:
        raise Retry
    e1, kids = c.eq(boys, "+", girls)
    e2, r = c.eq(kids, "/", team)
    return (f"A class has {boys} boys and {girls} girls. The teacher makes teams of {team} children. "
            f"How many teams are there?",
            [f"The class has {boys} boys and {girls} girls, so it has {e1} children.",
             f"The teams of {team} children make {e2} teams."], r)


@template(2)
def wages(c):
    (p, he, _, _), = c.people(1)
    rate, hours, days = c.f(hi=c.d.max_operand), c.f(), c.f(hi=7)
    e1, daily = c.eq(rate, "*", hours)
    e2, r = c.eq(daily, "*", days)
    return (f"{p} earns {rate} dollars an hour and works {hours} hours a day. "
            f"How many dollars does {he} earn in {days} days?",
            [f"{p} earns {rate} dollars an hour and works {hours} hours a day, so {he} earns {e1} dollars a day.",
             f"In {days} days {he} earns {e2} dollars."], r)


@template(2)
def half_then_buy(c):
    (p, he, _, _), (q, *_) = c.people(2)
    obj, a, b = c.pick(THINGS), 2 * c.n(2, c.d.max_operand // 2), c.n()
    e1, x = c.eq(a, "/", 2)
    e2, r = c.eq(x, "+", b)
    return (f"{p} has {a} {obj}. {cap(he)} gives half of them to {q}, then buys {b} more. "
            f"How many {obj} does {p} have now?",
            [f"{p} has {a} {obj} and gives half of them away, so {he} keeps {e1} {obj}.",
             f"Then {he} buys {b} more, so {he} has {e2} {obj} now."], r)


@template(2)
def crates_boxes(c):
    obj = c.pick(THINGS)
    a, b, k = c.f(), c.f(), c.f()
    e1, boxes = c.eq(a, "*", b)
    e2, r = c.eq(boxes, "*", k)
    return (f"A shop gets {a} crates. Each crate holds {b} boxes, and each box holds {k} {obj}. "
            f"How many {obj} does the shop get?",
            [f"The shop gets {a} crates and each crate holds {b} boxes, so it gets {e1} boxes.",
             f"Each box holds {k} {obj}, so the shop gets {e2} {obj}."], r)


@template(2)
def age_future(c):
    (p, *_), (q, *_) = c.people(2)
    a, b, y = c.n(3, 60), c.n(1, 30), c.n(1, 20)
    e1, qa = c.eq(a, "+", b)
    e2, r = c.eq(qa, "+", y)
    return (f"{p} is {a} years old. {q} is {b} years older than {p}. How old will {q} be in {y} years?",
            [f"{p} is {a} years old and {q} is {b} years older, so {q} is {e1} years old.",
             f"In {y} years {q} will be {e2} years old."], r)


@template(2)
def runs_three_days(c):
    (p, he, _, _), = c.people(1)
    a, b, d = c.n(1, 30), c.n(1, 30), c.n(1, 30)
    e1, x = c.eq(a, "+", b)
    e2, r = c.eq(x, "+", d)
    return (f"{p} runs {a} kilometers on Monday, {b} kilometers on Tuesday and {d} kilometers on "
            f"Wednesday. How many kilometers does {he} run in the three days?",
            [f"{p} runs {a} kilometers on Monday and {b} kilometers on Tuesday, so {he} runs {e1} kilometers.",
             f"With {d} kilometers on Wednesday, {he} runs {e2} kilometers."], r)


@template(2)
def library(c):
    a = c.n(20)
    b = c.n(1, a - 1)
    k = c.n()
    e1, x = c.eq(a, "-", b)
    e2, r = c.eq(x, "+", k)
    return (f"A library has {a} books on a shelf. {b} books are borrowed and then {k} books are returned. "
            f"How many books are on the shelf now?",
            [f"The library has {a} books on a shelf and {b} books are borrowed, so {e1} books are left.",
             f"Then {k} books are returned, so there are {e2} books on the shelf now."], r)


@template(2)
def water_weeks(c):
    (p, he, _, _), = c.people(1)
    a, w = c.f(hi=12), c.f(hi=8)
    e1, week = c.eq(a, "*", 7)
    e2, r = c.eq(week, "*", w)
    return (f"{p} drinks {a} glasses of water every day. How many glasses does {he} drink in {w} weeks?",
            [f"{p} drinks {a} glasses of water every day and a week has 7 days, so {he} drinks {e1} glasses a week.",
             f"In {w} weeks {he} drinks {e2} glasses."], r)


@template(2)
def keep_share(c):
    (p, he, _, _), = c.people(1)
    obj, k, each, keep = c.pick(THINGS), c.f(), c.f(hi=c.d.max_operand), c.n()
    total = k * each + keep
    e1, rest = c.eq(total, "-", keep)
    e2, r = c.eq(rest, "/", k)
    return (f"{p} has {total} {obj}. {cap(he)} keeps {keep} and shares the rest equally among {k} friends. "
            f"How many {obj} does each friend get?",
            [f"{p} has {total} {obj} and keeps {keep}, so {he} shares {e1} {obj}.",
             f"{cap(he)} shares the rest among {k} friends, so each friend gets {e2} {obj}."], r)


@template(2)
def weeks_to_goal(c):
    (p, he, _, _), = c.people(1)
    (item, _), e, w = c.pick(ITEMS), c.f(hi=c.d.max_operand), c.f()
    have = c.n()
    price = have + e * w
    e1, rest = c.eq(price, "-", have)
    e2, r = c.eq(rest, "/", e)
    return (f"{p} wants a {item} that costs {price} dollars. {cap(he)} has {have} dollars and saves {e} dollars "
            f"a week. How many weeks does {he} need to save?",
            [f"The {item} costs {price} dollars and {he} has {have} dollars, so {he} needs {e1} dollars more.",
             f"{cap(he)} saves {e} dollars a week, so {he} needs {e2} weeks."], r)


@template(2)
def room_cost(c):
    (p, *_), = c.people(1)
    l, w, cost = c.f(hi=15), c.f(hi=15), c.f()
    e1, area = c.eq(l, "*", w)
    e2, r = c.eq(area, "*", cost)
    return (f"{p}'s room is {l} meters long and {w} meters wide. Carpet costs {cost} dollars per square meter. "
            f"How many dollars does the carpet cost?",
            [f"The room is {l} meters long and {w} meters wide, so it is {e1} square meters.",
             f"Carpet costs {cost} dollars per square meter, so the carpet costs {e2} dollars."], r)


@template(3)
def tickets(c):
    adult, child = c.f(hi=c.d.max_operand), c.f(hi=c.d.max_operand)
    x, y, place = c.f(), c.f(), c.pick(PLACES)
    e1, a = c.eq(x, "*", adult)
    e2, b = c.eq(y, "*", child)
    e3, r = c.eq(a, "+", b)
    return (f"Tickets to the {place} cost {adult} dollars for an adult and {child} dollars for a child. "
            f"{x} adults and {y} children go. How many dollars do the tickets cost?",
            [f"The {x} adults pay {adult} dollars each, so they pay {e1} dollars.",
             f"The {y} children pay {child} dollars each, so they pay {e2} dollars.",
             f"The tickets cost {e3} dollars."], r)


@template(3)
def garden(c):
    (p, he, _, _), = c.people(1)
    flower, rows, per = c.pick(["roses", "tulips", "daisies", "lilies"]), c.f(), c.f()
    e1, planted = c.eq(rows, "*", per)
    dead = c.n(1, planted - 1)
    more = c.n()
    e2, alive = c.eq(planted, "-", dead)
    e3, r = c.eq(alive, "+", more)
    return (f"{p} plants {rows} rows of {flower} with {per} {flower} in each row. {dead} of them die, "
            f"then {he} plants {more} more. How many {flower} are there now?",
            [f"{p} plants {rows} rows of {flower} with {per} {flower} in each row, so {he} plants {e1} {flower}.",
             f"Then {dead} of them die, so {e2} are left.",
             f"Then {he} plants {more} more, so there are {e3} {flower} now."], r)


@template(3)
def shopping_left(c):
    (p, he, _, _), = c.people(1)
    (i1, i1s), (i2, _) = [ITEMS[i] for i in c.rng.choice(len(ITEMS), size=2, replace=False)]
    k, price, other = c.f(), c.f(hi=c.d.max_operand), c.n()
    e1, a = c.eq(k, "*", price)
    e2, spent = c.eq(a, "+", other)
    money = c.n(spent + 1, c.d.max_result)
    e3, r = c.eq(money, "-", spent)
    return (f"{p} has {money} dollars. {cap(he)} buys {k} {i1s} for {price} dollars each and a {i2} for "
            f"{other} dollars. How many dollars does {p} have left?",
            [f"{p} buys {k} {i1s} for {price} dollars each, so they cost {e1} dollars.",
             f"With a {i2} for {other} dollars, {he} spends {e2} dollars.",
             f"{p} has {money} dollars, so {he} has {e3} dollars left."], r)


@template(3)
def farm_legs(c):
    hens, cows = c.n(1, 50), c.n(1, 50)
    e1, a = c.eq(hens, "*", 2)
    e2, b = c.eq(cows, "*", 4)
    e3, r = c.eq(a, "+", b)
    return (f"A farm has {hens} chickens and {cows} cows. How many legs do the animals have?",
            [f"The farm has {hens} chickens with 2 legs each, so they have {e1} legs.",
             f"The {cows} cows have 4 legs each, so they have {e2} legs.",
             f"The animals have {e3} legs."], r)


@template(3)
def pizza_left(c):
    pizzas, slices, people = c.f(hi=6), c.f(4, 12), c.f()
    e1, total = c.eq(pizzas, "*", slices)
    each = c.f(1, total // people)
    e2, eaten = c.eq(people, "*", each)
    e3, r = c.eq(total, "-", eaten)
    return (f"There are {pizzas} pizzas cut into {slices} slices each. {people} friends eat {each} slices each. "
            f"How many slices are left?",
            [f"There are {pizzas} pizzas cut into {slices} slices each, so there are {e1} slices.",
             f"The {people} friends eat {each} slices each, so they eat {e2} slices.",
             f"There are {e3} slices left."], r)


@template(3)
def average_score(c):
    (p, he, _, _), = c.people(1)
    mean = c.n(5)
    a, b = c.n(1, 2 * mean), c.n(1, 2 * mean)
    d = 3 * mean - a - b
    if d < 1:
        raise Retry
    e1, x = c.eq(a, "+", b)
    e2, s = c.eq(x, "+", d)
    e3, r = c.eq(s, "/", 3)
    return (f"{p} scored {a}, {b} and {d} points in three games. What is {p}'s average score?",
            [f"{p} scored {a}, {b} and {d} points, so {he} scored {e1} points and then {e2} points in all.",
             f"The three games give an average of {e3} points."], r)


@template(3)
def bus_stops(c):
    a = c.n(10)
    off1 = c.n(1, a - 1)
    on1 = c.n(1, 30)
    e1, x = c.eq(a, "-", off1)
    e2, y = c.eq(x, "+", on1)
    off2 = c.n(1, y - 1)
    e3, r = c.eq(y, "-", off2)
    return (f"A bus has {a} passengers. At the first stop {off1} get off and {on1} get on. At the second stop "
            f"{off2} get off. How many passengers are on the bus now?",
            [f"The bus has {a} passengers and at the first stop {off1} get off, so {e1} are left.",
             f"Then {on1} get on, so there are {e2} passengers.",
             f"At the second stop {off2} get off, so there are {e3} passengers now."], r)


@template(3)
def fence_cost(c):
    l, w, cost = c.n(2, 40), c.n(2, 40), c.f()
    e1, half = c.eq(l, "+", w)
    e2, per = c.eq(half, "*", 2)
    e3, r = c.eq(per, "*", cost)
    return (f"A garden is {l} meters long and {w} meters wide. A fence costs {cost} dollars per meter. "
            f"How many dollars does a fence around the garden cost?",
            [f"The garden is {l} meters long and {w} meters wide, so one long and one wide side are {e1} meters.",
             f"The fence goes around twice that, so it is {e2} meters long.",
             f"A fence costs {cost} dollars per meter, so it costs {e3} dollars."], r)


@template(4)
def shells_three(c):
    (p, *_), (q, *_), (s, *_) = c.people(3)
    obj, a, k = c.pick(THINGS), c.n(), c.f(2, 4)
    e1, x = c.eq(a, "*", k)
    b = c.n(1, x - 1)
    e2, y = c.eq(x, "-", b)
    e3, z = c.eq(a, "+", x)
    e4, r = c.eq(z, "+", y)
    return (f"{p} collects {a} {obj}. {q} collects {k} times as many as {p}. {s} collects {b} fewer than {q}. "
            f"How many {obj} do the three collect in all?",
            [f"{p} collects {a} {obj} and {q} collects {k} times as many, so {q} collects {e1} {obj}.",
             f"{s} collects {b} fewer than {q}, so {s} collects {e2} {obj}.",
             f"{p} and {q} collect {e3} {obj}.",
             f"In all the three collect {e4} {obj}."], r)


@template(4)
def school_supplies(c):
    (p, he, _, _), = c.people(1)
    packs_, pack_price, books, book_price = c.f(), c.f(), c.f(), c.f()
    e1, a = c.eq(packs_, "*", pack_price)
    e2, b = c.eq(books, "*", book_price)
    e3, spent = c.eq(a, "+", b)
    money = c.n(spent + 1, c.d.max_result)
    e4, r = c.eq(money, "-", spent)
    return (f"{p} has {money} dollars. {cap(he)} buys {packs_} packs of pens at {pack_price} dollars a pack and "
            f"{books} notebooks at {book_price} dollars each. How many dollars does {he} have left?",
            [f"{cap(he)} buys {packs_} packs of pens at {pack_price} dollars a pack, so the pens cost {e1} dollars.",
             f"The {books} notebooks at {book_price} dollars each cost {e2} dollars.",
             f"{p} spends {e3} dollars.",
             f"{p} has {money} dollars, so {he} has {e4} dollars left."], r)


@template(4)
def bakery_sales(c):
    morning, afternoon, price = c.n(), c.n(), c.f()
    day = c.pick(DAYS)
    e1, sold = c.eq(morning, "+", afternoon)
    e2, income = c.eq(sold, "*", price)
    cost = c.n(1, income - 1)
    e3, profit = c.eq(income, "-", cost)
    # 4th step: the profit is shared by 2 owners when even, else a tip is added
    if profit % 2 == 0:
        e4, r = c.eq(profit, "/", 2)
        q, last = "The bakery's two owners share the profit equally. How many dollars does each owner get?", \
            f"The two owners share the profit, so each owner gets {e4} dollars."
    else:
        tip = c.n(1, 20)
        e4, r = c.eq(profit, "+", tip)
        q, last = f"A customer also leaves a tip of {tip} dollars. How many dollars does the bakery have in the end?", \
            f"With a tip of {tip} dollars the bakery has {e4} dollars in the end."
    return (f"On {day} a bakery sells {morning} muffins in the morning and {afternoon} in the afternoon, at {price} "
            f"dollars each. The flour costs {cost} dollars. {q}",
            [f"The bakery sells {morning} muffins in the morning and {afternoon} in the afternoon, so it sells {e1} muffins.",
             f"At {price} dollars each it takes in {e2} dollars.",
             f"The flour costs {cost} dollars, so the profit is {e3} dollars.", last], r)


@template(4)
def trip_fuel(c):
    v, speed_, hours, more = c.pick(VEHICLES), c.n(10, 100), c.f(), c.n()
    e1, d1 = c.eq(speed_, "*", hours)
    e2, total = c.eq(d1, "+", more)
    back = c.n(1, total - 1)
    e3, x = c.eq(total, "-", back)
    e4, r = c.eq(x, "*", 2)
    return (f"A {v} drives {speed_} kilometers an hour for {hours} hours, then {more} more kilometers. A second "
            f"{v} drives {back} kilometers less than the first, and a third drives twice as far as the second. "
            f"How many kilometers does the third {v} drive?",
            [f"The first {v} drives {speed_} kilometers an hour for {hours} hours, so {e1} kilometers.",
             f"Then {more} more kilometers make {e2} kilometers.",
             f"The second {v} drives {back} kilometers less, so {e3} kilometers.",
             f"The third {v} drives twice as far, so {e4} kilometers."], r)


@template(4)
def stamps_album(c):
    (p, he, _, his), = c.people(1)
    pages, per, bought, k = c.f(), c.f(), c.n(), c.f()
    e1, have = c.eq(pages, "*", per)
    e2, total = c.eq(have, "+", bought)
    if total % k:
        raise Retry
    e3, each = c.eq(total, "/", k)
    e4, r = c.eq(total, "-", each)
    return (f"{p}'s album has {pages} pages with {per} stamps on each page. {cap(he)} buys {bought} more stamps. "
            f"Then {he} splits all {his} stamps into {k} equal piles and gives one pile to a friend. "
            f"How many stamps does {p} keep?",
            [f"The album has {pages} pages with {per} stamps on each page, so it holds {e1} stamps.",
             f"{cap(he)} buys {bought} more stamps, so {he} has {e2} stamps.",
             f"{cap(he)} splits them into {k} equal piles, so one pile has {e3} stamps.",
             f"{p} keeps {e4} stamps."], r)
