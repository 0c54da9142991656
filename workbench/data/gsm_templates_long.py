"""The three- and four-step templates of ``workbench.data.gsm`` (8 of its 40).
Each draws its numbers through a ``Ctx`` (``workbench.data.gsm_words``) and returns (question,
solution lines without the final line, answer).
"""

from __future__ import annotations

from workbench.data.gsm_words import DAYS, ITEMS, PLACES, THINGS, VEHICLES, Retry, cap, registrar

TEMPLATES: list[tuple[str, int, object]] = []  # (name, steps, fn), in the order written
template = registrar(TEMPLATES)


@template(3)
def tickets(c):
    adult, child = c.f(hi=c.d.max_operand), c.f(hi=c.d.max_operand)
    x, y, place = c.f(), c.f(), c.pick(PLACES)
    e1, a = c.eq(x, "*", adult)
    e2, b = c.eq(y, "*", child)
    e3, r = c.eq(a, "+", b)
    return (
        f"Tickets to the {place} cost {adult} dollars for an adult and {child} dollars for a child. "
        f"{x} adults and {y} children go. How many dollars do the tickets cost?",
        [
            f"The {x} adults pay {adult} dollars each, so they pay {e1} dollars.",
            f"The {y} children pay {child} dollars each, so they pay {e2} dollars.",
            f"The tickets cost {e3} dollars.",
        ],
        r,
    )


@template(3)
def garden(c):
    ((p, he, _, _),) = c.people(1)
    flower, rows, per = c.pick(["roses", "tulips", "daisies", "lilies"]), c.f(), c.f()
    e1, planted = c.eq(rows, "*", per)
    dead = c.n(1, planted - 1)
    more = c.n()
    e2, alive = c.eq(planted, "-", dead)
    e3, r = c.eq(alive, "+", more)
    return (
        f"{p} plants {rows} rows of {flower} with {per} {flower} in each row. {dead} of them die, "
        f"then {he} plants {more} more. How many {flower} are there now?",
        [
            f"{p} plants {rows} rows of {flower} with {per} {flower} in each row, so {he} plants {e1} {flower}.",
            f"Then {dead} of them die, so {e2} are left.",
            f"Then {he} plants {more} more, so there are {e3} {flower} now.",
        ],
        r,
    )


@template(3)
def shopping_left(c):
    ((p, he, _, _),) = c.people(1)
    (i1, i1s), (i2, _) = [ITEMS[i] for i in c.rng.choice(len(ITEMS), size=2, replace=False)]
    k, price, other = c.f(), c.f(hi=c.d.max_operand), c.n()
    e1, a = c.eq(k, "*", price)
    e2, spent = c.eq(a, "+", other)
    money = c.n(spent + 1, c.d.max_result)
    e3, r = c.eq(money, "-", spent)
    return (
        f"{p} has {money} dollars. {cap(he)} buys {k} {i1s} for {price} dollars each and a {i2} for "
        f"{other} dollars. How many dollars does {p} have left?",
        [
            f"{p} buys {k} {i1s} for {price} dollars each, so they cost {e1} dollars.",
            f"With a {i2} for {other} dollars, {he} spends {e2} dollars.",
            f"{p} has {money} dollars, so {he} has {e3} dollars left.",
        ],
        r,
    )


@template(3)
def farm_legs(c):
    hens, cows = c.n(1, 50), c.n(1, 50)
    e1, a = c.eq(hens, "*", 2)
    e2, b = c.eq(cows, "*", 4)
    e3, r = c.eq(a, "+", b)
    return (
        f"A farm has {hens} chickens and {cows} cows. How many legs do the animals have?",
        [
            f"The farm has {hens} chickens with 2 legs each, so they have {e1} legs.",
            f"The {cows} cows have 4 legs each, so they have {e2} legs.",
            f"The animals have {e3} legs.",
        ],
        r,
    )


@template(3)
def pizza_left(c):
    pizzas, slices, people = c.f(hi=6), c.f(4, 12), c.f()
    e1, total = c.eq(pizzas, "*", slices)
    each = c.f(1, total // people)
    e2, eaten = c.eq(people, "*", each)
    e3, r = c.eq(total, "-", eaten)
    return (
        f"There are {pizzas} pizzas cut into {slices} slices each. {people} friends eat {each} slices each. "
        f"How many slices are left?",
        [
            f"There are {pizzas} pizzas cut into {slices} slices each, so there are {e1} slices.",
            f"The {people} friends eat {each} slices each, so they eat {e2} slices.",
            f"There are {e3} slices left.",
        ],
        r,
    )


@template(3)
def average_score(c):
    ((p, he, _, _),) = c.people(1)
    mean = c.n(5)
    a, b = c.n(1, 2 * mean), c.n(1, 2 * mean)
    d = 3 * mean - a - b
    if d < 1:
        raise Retry
    e1, x = c.eq(a, "+", b)
    e2, s = c.eq(x, "+", d)
    e3, r = c.eq(s, "/", 3)
    return (
        f"{p} scored {a}, {b} and {d} points in three games. What is {p}'s average score?",
        [
            f"{p} scored {a}, {b} and {d} points, so {he} scored {e1} points and then {e2} points in all.",
            f"The three games give an average of {e3} points.",
        ],
        r,
    )


@template(3)
def bus_stops(c):
    a = c.n(10)
    off1 = c.n(1, a - 1)
    on1 = c.n(1, 30)
    e1, x = c.eq(a, "-", off1)
    e2, y = c.eq(x, "+", on1)
    off2 = c.n(1, y - 1)
    e3, r = c.eq(y, "-", off2)
    return (
        f"A bus has {a} passengers. At the first stop {off1} get off and {on1} get on. At the second stop "
        f"{off2} get off. How many passengers are on the bus now?",
        [
            f"The bus has {a} passengers and at the first stop {off1} get off, so {e1} are left.",
            f"Then {on1} get on, so there are {e2} passengers.",
            f"At the second stop {off2} get off, so there are {e3} passengers now.",
        ],
        r,
    )


@template(3)
def fence_cost(c):
    l, w, cost = c.n(2, 40), c.n(2, 40), c.f()
    e1, half = c.eq(l, "+", w)
    e2, per = c.eq(half, "*", 2)
    e3, r = c.eq(per, "*", cost)
    return (
        f"A garden is {l} meters long and {w} meters wide. A fence costs {cost} dollars per meter. "
        f"How many dollars does a fence around the garden cost?",
        [
            f"The garden is {l} meters long and {w} meters wide, so one long and one wide side are {e1} meters.",
            f"The fence goes around twice that, so it is {e2} meters long.",
            f"A fence costs {cost} dollars per meter, so it costs {e3} dollars.",
        ],
        r,
    )


@template(4)
def shells_three(c):
    (p, *_), (q, *_), (s, *_) = c.people(3)
    obj, a, k = c.pick(THINGS), c.n(), c.f(2, 4)
    e1, x = c.eq(a, "*", k)
    b = c.n(1, x - 1)
    e2, y = c.eq(x, "-", b)
    e3, z = c.eq(a, "+", x)
    e4, r = c.eq(z, "+", y)
    return (
        f"{p} collects {a} {obj}. {q} collects {k} times as many as {p}. {s} collects {b} fewer than {q}. "
        f"How many {obj} do the three collect in all?",
        [
            f"{p} collects {a} {obj} and {q} collects {k} times as many, so {q} collects {e1} {obj}.",
            f"{s} collects {b} fewer than {q}, so {s} collects {e2} {obj}.",
            f"{p} and {q} collect {e3} {obj}.",
            f"In all the three collect {e4} {obj}.",
        ],
        r,
    )


@template(4)
def school_supplies(c):
    ((p, he, _, _),) = c.people(1)
    packs_, pack_price, books, book_price = c.f(), c.f(), c.f(), c.f()
    e1, a = c.eq(packs_, "*", pack_price)
    e2, b = c.eq(books, "*", book_price)
    e3, spent = c.eq(a, "+", b)
    money = c.n(spent + 1, c.d.max_result)
    e4, r = c.eq(money, "-", spent)
    return (
        f"{p} has {money} dollars. {cap(he)} buys {packs_} packs of pens at {pack_price} dollars a pack and "
        f"{books} notebooks at {book_price} dollars each. How many dollars does {he} have left?",
        [
            f"{cap(he)} buys {packs_} packs of pens at {pack_price} dollars a pack, so the pens cost {e1} dollars.",
            f"The {books} notebooks at {book_price} dollars each cost {e2} dollars.",
            f"{p} spends {e3} dollars.",
            f"{p} has {money} dollars, so {he} has {e4} dollars left.",
        ],
        r,
    )


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
        q, last = (
            "The bakery's two owners share the profit equally. How many dollars does each owner get?",
            f"The two owners share the profit, so each owner gets {e4} dollars.",
        )
    else:
        tip = c.n(1, 20)
        e4, r = c.eq(profit, "+", tip)
        q, last = (
            f"A customer also leaves a tip of {tip} dollars. How many dollars does the bakery have in the end?",
            f"With a tip of {tip} dollars the bakery has {e4} dollars in the end.",
        )
    return (
        f"On {day} a bakery sells {morning} muffins in the morning and {afternoon} in the afternoon, at {price} "
        f"dollars each. The flour costs {cost} dollars. {q}",
        [
            f"The bakery sells {morning} muffins in the morning and {afternoon} in the afternoon, so it "
            f"sells {e1} muffins.",
            f"At {price} dollars each it takes in {e2} dollars.",
            f"The flour costs {cost} dollars, so the profit is {e3} dollars.",
            last,
        ],
        r,
    )


@template(4)
def trip_fuel(c):
    v, speed_, hours, more = c.pick(VEHICLES), c.n(10, 100), c.f(), c.n()
    e1, d1 = c.eq(speed_, "*", hours)
    e2, total = c.eq(d1, "+", more)
    back = c.n(1, total - 1)
    e3, x = c.eq(total, "-", back)
    e4, r = c.eq(x, "*", 2)
    return (
        f"A {v} drives {speed_} kilometers an hour for {hours} hours, then {more} more kilometers. A second "
        f"{v} drives {back} kilometers less than the first, and a third drives twice as far as the second. "
        f"How many kilometers does the third {v} drive?",
        [
            f"The first {v} drives {speed_} kilometers an hour for {hours} hours, so {e1} kilometers.",
            f"Then {more} more kilometers make {e2} kilometers.",
            f"The second {v} drives {back} kilometers less, so {e3} kilometers.",
            f"The third {v} drives twice as far, so {e4} kilometers.",
        ],
        r,
    )


@template(4)
def stamps_album(c):
    ((p, he, _, his),) = c.people(1)
    pages, per, bought, k = c.f(), c.f(), c.n(), c.f()
    e1, have = c.eq(pages, "*", per)
    e2, total = c.eq(have, "+", bought)
    if total % k:
        raise Retry
    e3, each = c.eq(total, "/", k)
    e4, r = c.eq(total, "-", each)
    return (
        f"{p}'s album has {pages} pages with {per} stamps on each page. {cap(he)} buys {bought} more stamps. "
        f"Then {he} splits all {his} stamps into {k} equal piles and gives one pile to a friend. "
        f"How many stamps does {p} keep?",
        [
            f"The album has {pages} pages with {per} stamps on each page, so it holds {e1} stamps.",
            f"{cap(he)} buys {bought} more stamps, so {he} has {e2} stamps.",
            f"{cap(he)} splits them into {k} equal piles, so one pile has {e3} stamps.",
            f"{p} keeps {e4} stamps.",
        ],
        r,
    )
