"""The one- and two-step templates of ``workbench.data.gsm`` (32 of its 40).
Each draws its numbers through a ``Ctx`` (``workbench.data.gsm_words``) and returns (question,
solution lines without the final line, answer).
"""

from __future__ import annotations

from workbench.data.gsm_words import CONTAINERS, ITEMS, PLACES, THINGS, VEHICLES, Retry, cap, registrar

TEMPLATES: list[tuple[str, int, object]] = []  # (name, steps, fn), in the order written
template = registrar(TEMPLATES)


@template(1)
def packs(c):
    ((p, he, _, _),) = c.people(1)
    box, obj, a, b = c.pick(CONTAINERS), c.pick(THINGS), c.f(), c.f(hi=c.d.max_operand)
    e, r = c.eq(a, "*", b)
    return (
        f"{p} buys {a} {box} of {obj}. Each of the {box} has {b} {obj}. How many {obj} does {p} have?",
        [f"{p} buys {a} {box} and each has {b} {obj}, so {he} has {e} {obj}."],
        r,
    )


@template(1)
def gets_more(c):
    (p, he, _, _), (q, *_) = c.people(2)
    obj, a, b = c.pick(THINGS), c.n(), c.n()
    e, r = c.eq(a, "+", b)
    return (
        f"{p} has {a} {obj}. {q} gives {p} {b} more {obj}. How many {obj} does {p} have now?",
        [f"{p} has {a} {obj} and gets {b} more {obj}, so {he} has {e} {obj} now."],
        r,
    )


@template(1)
def gives_away(c):
    (p, he, _, _), (q, *_) = c.people(2)
    obj, a = c.pick(THINGS), c.n(5)
    b = c.n(1, a - 1)
    e, r = c.eq(a, "-", b)
    return (
        f"{p} has {a} {obj}. {cap(he)} gives {b} {obj} to {q}. How many {obj} does {p} have left?",
        [f"{p} has {a} {obj} and gives {b} {obj} away, so {he} has {e} {obj} left."],
        r,
    )


@template(1)
def share(c):
    ((p, he, _, _),) = c.people(1)
    obj, k, each = c.pick(THINGS), c.f(), c.f(hi=c.d.max_operand)
    total = k * each
    e, r = c.eq(total, "/", k)
    return (
        f"{p} has {total} {obj} and shares them equally among {k} friends. How many {obj} does each friend get?",
        [f"{p} has {total} {obj} and shares them among {k} friends, so each friend gets {e} {obj}."],
        r,
    )


@template(1)
def speed(c):
    v, s, h = c.pick(VEHICLES), c.n(10), c.f()
    e, r = c.eq(s, "*", h)
    return (
        f"A {v} travels {s} kilometers every hour. How many kilometers does it travel in {h} hours?",
        [f"The {v} travels {s} kilometers every hour, so in {h} hours it travels {e} kilometers."],
        r,
    )


@template(1)
def tiles_area(c):
    ((p, he, _, _),) = c.people(1)
    l, w = c.f(hi=20), c.f(hi=20)
    e, r = c.eq(l, "*", w)
    return (
        f"{p} is tiling a floor that is {l} tiles long and {w} tiles wide. How many tiles does {p} need?",
        [f"The floor is {l} tiles long and {w} tiles wide, so {he} needs {e} tiles."],
        r,
    )


@template(1)
def cost_each(c):
    ((p, he, _, _),) = c.people(1)
    (item, items), k, price = c.pick(ITEMS), c.f(), c.f(hi=c.d.max_operand)
    total = k * price
    e, r = c.eq(total, "/", k)
    return (
        f"{p} paid {total} dollars for {k} {items}. Each of them cost the same. How many dollars did one {item} cost?",
        [f"{p} paid {total} dollars for {k} {items}, so one {item} cost {e} dollars."],
        r,
    )


@template(1)
def fewer_than(c):
    (p, *_), (q, *_) = c.people(2)
    obj, a = c.pick(THINGS), c.n(5)
    b = c.n(1, a - 1)
    e, r = c.eq(a, "-", b)
    return (
        f"{p} has {a} {obj}. {q} has {b} fewer {obj} than {p}. How many {obj} does {q} have?",
        [f"{p} has {a} {obj} and {q} has {b} fewer, so {q} has {e} {obj}."],
        r,
    )


@template(2)
def more_than_total(c):
    (p, *_), (q, *_) = c.people(2)
    obj, a, b = c.pick(THINGS), c.n(), c.n()
    e1, x = c.eq(a, "+", b)
    e2, r = c.eq(a, "+", x)
    return (
        f"{p} has {a} {obj}. {q} has {b} more {obj} than {p}. How many {obj} do they have together?",
        [f"{p} has {a} {obj} and {q} has {b} more, so {q} has {e1} {obj}.", f"Together they have {e2} {obj}."],
        r,
    )


@template(2)
def times_as_many(c):
    (p, *_), (q, *_) = c.people(2)
    obj, a, k = c.pick(THINGS), c.n(), c.f()
    e1, x = c.eq(a, "*", k)
    e2, r = c.eq(a, "+", x)
    return (
        f"{p} collects {a} {obj}. {q} collects {k} times as many {obj} as {p}. How many {obj} do they collect in all?",
        [
            f"{p} collects {a} {obj} and {q} collects {k} times as many, so {q} collects {e1} {obj}.",
            f"In all they collect {e2} {obj}.",
        ],
        r,
    )


@template(2)
def change(c):
    ((p, he, _, _),) = c.people(1)
    (_, items), k, price = c.pick(ITEMS), c.f(), c.f(hi=c.d.max_operand)
    e1, cost = c.eq(k, "*", price)
    paid = c.n(cost + 1)
    e2, r = c.eq(paid, "-", cost)
    return (
        f"{p} buys {k} {items} that cost {price} dollars each. {cap(he)} pays with {paid} dollars. "
        f"How many dollars of change does {p} get?",
        [
            f"{p} buys {k} {items} that cost {price} dollars each, so they cost {e1} dollars.",
            f"{cap(he)} pays with {paid} dollars, so the change is {e2} dollars.",
        ],
        r,
    )


@template(2)
def pages_left(c):
    ((p, he, _, his),) = c.people(1)
    per, days = c.f(hi=c.d.max_operand), c.f()
    e1, read = c.eq(per, "*", days)
    total = c.n(read + 1, c.d.max_result)
    e2, r = c.eq(total, "-", read)
    return (
        f"{p}'s book has {total} pages. {cap(he)} reads {per} pages every day for {days} days. "
        f"How many pages are left to read?",
        [
            f"{p} reads {per} pages every day for {days} days, so {he} reads {e1} pages.",
            f"The book has {total} pages, so {e2} pages are left.",
        ],
        r,
    )


@template(2)
def chairs_taken(c):
    place, rows, per = c.pick(PLACES), c.f(), c.f(hi=c.d.max_operand)
    e1, chairs = c.eq(rows, "*", per)
    empty = c.n(1, chairs - 1)
    e2, r = c.eq(chairs, "-", empty)
    return (
        f"The hall of the {place} has {rows} rows with {per} chairs in each row. {empty} chairs are empty. "
        f"How many chairs are taken?",
        [
            f"The hall has {rows} rows with {per} chairs in each row, so it has {e1} chairs.",
            f"Of them {empty} chairs are empty, so {e2} chairs are taken.",
        ],
        r,
    )


@template(2)
def savings_spent(c):
    ((p, he, _, _),) = c.people(1)
    a, w = c.f(hi=c.d.max_operand), c.f()
    e1, saved = c.eq(a, "*", w)
    b = c.n(1, saved - 1)
    e2, r = c.eq(saved, "-", b)
    return (
        f"{p} saves {a} dollars every week. After {w} weeks {he} spends {b} dollars on a gift. "
        f"How many dollars does {p} have left?",
        [
            f"{p} saves {a} dollars every week for {w} weeks, so {he} saves {e1} dollars.",
            f"{cap(he)} spends {b} dollars, so {he} has {e2} dollars left.",
        ],
        r,
    )


@template(2)
def bake_bags(c):
    ((p, he, _, _),) = c.people(1)
    trays, per, bag = c.f(), c.f(), c.f()
    if (trays * per) % bag:
        raise Retry
    e1, total = c.eq(trays, "*", per)
    e2, r = c.eq(total, "/", bag)
    return (
        f"{p} bakes {trays} trays of cookies with {per} cookies on each tray. {cap(he)} puts them into "
        f"bags of {bag}. How many bags does {p} fill?",
        [
            f"{p} bakes {trays} trays of cookies with {per} cookies on each tray, so {he} bakes {e1} cookies.",
            f"The bags of {bag} take them all, so {he} fills {e2} bags.",
        ],
        r,
    )


@template(2)
def fruit_eaten(c):
    ((p, he, _, _),) = c.people(1)
    f1, f2 = c.things(2)
    a, b = c.n(), c.n()
    e1, total = c.eq(a, "+", b)
    k = c.n(1, total - 1)
    e2, r = c.eq(total, "-", k)
    return (
        f"{p} has {a} {f1} and {b} {f2}. {cap(he)} gives away {k} of them. How many are left?",
        [
            f"{p} has {a} {f1} and {b} {f2}, so {he} has {e1} in all.",
            f"{cap(he)} gives away {k} of them, so {e2} are left.",
        ],
        r,
    )


@template(2)
def class_teams(c):
    boys, girls, team = c.n(), c.n(), c.f()
    if (boys + girls) % team:
        raise Retry
    e1, kids = c.eq(boys, "+", girls)
    e2, r = c.eq(kids, "/", team)
    return (
        f"A class has {boys} boys and {girls} girls. The teacher makes teams of {team} children. "
        f"How many teams are there?",
        [
            f"The class has {boys} boys and {girls} girls, so it has {e1} children.",
            f"The teams of {team} children make {e2} teams.",
        ],
        r,
    )


@template(2)
def wages(c):
    ((p, he, _, _),) = c.people(1)
    rate, hours, days = c.f(hi=c.d.max_operand), c.f(), c.f(hi=7)
    e1, daily = c.eq(rate, "*", hours)
    e2, r = c.eq(daily, "*", days)
    return (
        f"{p} earns {rate} dollars an hour and works {hours} hours a day. "
        f"How many dollars does {he} earn in {days} days?",
        [
            f"{p} earns {rate} dollars an hour and works {hours} hours a day, so {he} earns {e1} dollars a day.",
            f"In {days} days {he} earns {e2} dollars.",
        ],
        r,
    )


@template(2)
def half_then_buy(c):
    (p, he, _, _), (q, *_) = c.people(2)
    obj, a, b = c.pick(THINGS), 2 * c.n(2, c.d.max_operand // 2), c.n()
    e1, x = c.eq(a, "/", 2)
    e2, r = c.eq(x, "+", b)
    return (
        f"{p} has {a} {obj}. {cap(he)} gives half of them to {q}, then buys {b} more. "
        f"How many {obj} does {p} have now?",
        [
            f"{p} has {a} {obj} and gives half of them away, so {he} keeps {e1} {obj}.",
            f"Then {he} buys {b} more, so {he} has {e2} {obj} now.",
        ],
        r,
    )


@template(2)
def crates_boxes(c):
    obj = c.pick(THINGS)
    a, b, k = c.f(), c.f(), c.f()
    e1, boxes = c.eq(a, "*", b)
    e2, r = c.eq(boxes, "*", k)
    return (
        f"A shop gets {a} crates. Each crate holds {b} boxes, and each box holds {k} {obj}. "
        f"How many {obj} does the shop get?",
        [
            f"The shop gets {a} crates and each crate holds {b} boxes, so it gets {e1} boxes.",
            f"Each box holds {k} {obj}, so the shop gets {e2} {obj}.",
        ],
        r,
    )


@template(2)
def age_future(c):
    (p, *_), (q, *_) = c.people(2)
    a, b, y = c.n(3, 60), c.n(1, 30), c.n(1, 20)
    e1, qa = c.eq(a, "+", b)
    e2, r = c.eq(qa, "+", y)
    return (
        f"{p} is {a} years old. {q} is {b} years older than {p}. How old will {q} be in {y} years?",
        [
            f"{p} is {a} years old and {q} is {b} years older, so {q} is {e1} years old.",
            f"In {y} years {q} will be {e2} years old.",
        ],
        r,
    )


@template(2)
def runs_three_days(c):
    ((p, he, _, _),) = c.people(1)
    a, b, d = c.n(1, 30), c.n(1, 30), c.n(1, 30)
    e1, x = c.eq(a, "+", b)
    e2, r = c.eq(x, "+", d)
    return (
        f"{p} runs {a} kilometers on Monday, {b} kilometers on Tuesday and {d} kilometers on "
        f"Wednesday. How many kilometers does {he} run in the three days?",
        [
            f"{p} runs {a} kilometers on Monday and {b} kilometers on Tuesday, so {he} runs {e1} kilometers.",
            f"With {d} kilometers on Wednesday, {he} runs {e2} kilometers.",
        ],
        r,
    )


@template(2)
def library(c):
    a = c.n(20)
    b = c.n(1, a - 1)
    k = c.n()
    e1, x = c.eq(a, "-", b)
    e2, r = c.eq(x, "+", k)
    return (
        f"A library has {a} books on a shelf. {b} books are borrowed and then {k} books are returned. "
        f"How many books are on the shelf now?",
        [
            f"The library has {a} books on a shelf and {b} books are borrowed, so {e1} books are left.",
            f"Then {k} books are returned, so there are {e2} books on the shelf now.",
        ],
        r,
    )


@template(2)
def water_weeks(c):
    ((p, he, _, _),) = c.people(1)
    a, w = c.f(hi=12), c.f(hi=8)
    e1, week = c.eq(a, "*", 7)
    e2, r = c.eq(week, "*", w)
    return (
        f"{p} drinks {a} glasses of water every day. How many glasses does {he} drink in {w} weeks?",
        [
            f"{p} drinks {a} glasses of water every day and a week has 7 days, so {he} drinks {e1} glasses a week.",
            f"In {w} weeks {he} drinks {e2} glasses.",
        ],
        r,
    )


@template(2)
def keep_share(c):
    ((p, he, _, _),) = c.people(1)
    obj, k, each, keep = c.pick(THINGS), c.f(), c.f(hi=c.d.max_operand), c.n()
    total = k * each + keep
    e1, rest = c.eq(total, "-", keep)
    e2, r = c.eq(rest, "/", k)
    return (
        f"{p} has {total} {obj}. {cap(he)} keeps {keep} and shares the rest equally among {k} friends. "
        f"How many {obj} does each friend get?",
        [
            f"{p} has {total} {obj} and keeps {keep}, so {he} shares {e1} {obj}.",
            f"{cap(he)} shares the rest among {k} friends, so each friend gets {e2} {obj}.",
        ],
        r,
    )


@template(2)
def weeks_to_goal(c):
    ((p, he, _, _),) = c.people(1)
    (item, _), e, w = c.pick(ITEMS), c.f(hi=c.d.max_operand), c.f()
    have = c.n()
    price = have + e * w
    e1, rest = c.eq(price, "-", have)
    e2, r = c.eq(rest, "/", e)
    return (
        f"{p} wants a {item} that costs {price} dollars. {cap(he)} has {have} dollars and saves {e} dollars "
        f"a week. How many weeks does {he} need to save?",
        [
            f"The {item} costs {price} dollars and {he} has {have} dollars, so {he} needs {e1} dollars more.",
            f"{cap(he)} saves {e} dollars a week, so {he} needs {e2} weeks.",
        ],
        r,
    )


@template(2)
def room_cost(c):
    ((p, *_),) = c.people(1)
    l, w, cost = c.f(hi=15), c.f(hi=15), c.f()
    e1, area = c.eq(l, "*", w)
    e2, r = c.eq(area, "*", cost)
    return (
        f"{p}'s room is {l} meters long and {w} meters wide. Carpet costs {cost} dollars per square meter. "
        f"How many dollars does the carpet cost?",
        [
            f"The room is {l} meters long and {w} meters wide, so it is {e1} square meters.",
            f"Carpet costs {cost} dollars per square meter, so the carpet costs {e2} dollars.",
        ],
        r,
    )
