"""The procedural grade-school math corpus (workbench.data.gsm)."""

import re
from collections import Counter

import pytest

from spotref.load.tokenizer import chat_format
from workbench.data import gsm


def test_same_seed_same_problems_and_prefix_stable():
    a = gsm.problems(40, seed=3)
    assert a == gsm.problems(40, seed=3)
    assert gsm.problems(15, seed=3) == a[:15]  # problem i does not depend on n
    assert [p.question for p in gsm.problems(40, seed=4)] != [p.question for p in a]
    assert gsm.documents(5, seed=3) == [p.document for p in a[:5]]


@pytest.mark.parametrize("level", sorted(gsm.LEVELS))
def test_every_equation_is_right_and_the_answer_follows(level):
    d = gsm.LEVELS[level]
    for p in gsm.problems(1500, seed=level, difficulty=d):
        eqs = gsm.equations(p.solution)
        assert len(eqs) == p.steps and d.min_steps <= p.steps <= d.max_steps, p
        assert all(ok for *_, ok in eqs), p
        assert all(1 <= c <= d.max_result for *_, c, _ in eqs), p
        assert eqs[-1][3] == p.answer == gsm.final_answer(p.solution), p
        assert p.solution.splitlines()[-1] == f"#### {p.answer}"
        # every operand is either a number of the question or an earlier result (or a constant)
        seen = {int(x) for x in re.findall(r"\d+", p.question)} | {2, 3, 4, 7}
        for a, _, b, c, _ in eqs:
            assert a in seen and b in seen, p
            seen.add(c)


def test_templates_cover_steps_and_are_many():
    assert len(gsm.TEMPLATES) >= 30
    assert len({t[0] for t in gsm.TEMPLATES}) == len(gsm.TEMPLATES)
    steps = Counter(p.steps for p in gsm.problems(800, seed=0))
    assert set(steps) == {1, 2, 3, 4} and min(steps.values()) > 120  # steps drawn uniformly
    used = {p.template for p in gsm.problems(3000, seed=1)}
    assert used == {t[0] for t in gsm.TEMPLATES}


def test_difficulty_limits_steps():
    d = gsm.Difficulty(min_steps=2, max_steps=2, max_operand=20, max_factor=5, max_result=100)
    ps = gsm.problems(300, seed=0, difficulty=d)
    assert {p.steps for p in ps} == {2}
    assert max(p.answer for p in ps) <= 100
    with pytest.raises(ValueError):
        gsm.Difficulty(min_steps=3, max_steps=2)


@pytest.mark.slow
def test_heldout_shares_no_problem_text_with_train():
    train = {p.question for p in gsm.problems(4000, seed=0)}
    held = gsm.problems(400, seed=0, split="heldout")
    assert all(gsm.is_heldout(p.question) for p in held)
    assert not any(gsm.is_heldout(q) for q in train)
    assert not train & {p.question for p in held}
    # also across seeds and difficulties: the split is a function of the text alone
    easy = {p.question for p in gsm.problems(2000, seed=7, difficulty=gsm.LEVELS[1])}
    easy_held = {p.question for p in gsm.problems(300, seed=7, split="heldout", difficulty=gsm.LEVELS[1])}
    assert not easy & easy_held


def test_chat_format_is_the_qwen3_template():
    p = gsm.problems(1, seed=0)[0]
    assert p.prompt == chat_format(p.question) == f"<|im_start|>user\n{p.question}<|im_end|>\n<|im_start|>assistant\n"
    assert p.document == p.prompt + p.solution + "<|im_end|>"
    pairs = gsm.heldout(5, seed=2)
    assert len(pairs) == 5
    for prompt, answer in pairs:
        assert prompt.startswith("<|im_start|>user\n") and prompt.endswith("<|im_start|>assistant\n")
        assert isinstance(answer, int) and answer >= 1


def test_checkers_on_written_text():
    eqs = gsm.equations("So 3 * 12 = 36 and 36 - 5 = 30, then 8 / 3 = 2.\n#### 30")
    assert [e[-1] for e in eqs] == [True, False, False]
    assert gsm.final_answer("blah\n#### 42") == 42 and gsm.final_answer("no answer") is None


def test_describe_and_main(capsys):
    meta = gsm.describe(gsm.LEVELS[2], seed=5)
    assert meta["seed"] == 5 and meta["difficulty"]["max_steps"] == 3 and len(meta["templates"]) >= 30
    assert gsm.main(["--n", "2", "--level", "1"]) == 0
    assert capsys.readouterr().out.count("#### ") == 2


def test_drills_are_right_and_within_the_level():
    from collections import Counter

    import numpy as np

    ops = Counter()
    for i in range(400):
        for level in (0, 3):
            d = gsm.LEVELS[level]
            p = gsm.drill(np.random.default_rng([i, level]), d)
            ((a, op, b, c, ok),) = gsm.equations(p.solution)
            assert ok and gsm.final_answer(p.solution) == c == p.answer and p.question == f"What is {a} {op} {b}?"
            assert 1 <= c <= d.max_result and p.steps == 1 and p.template == "drill"
            ops[op] += 1
    assert set(ops) == {"+", "-", "*", "/"} and ops["+"] > 1.5 * ops["*"] and ops["-"] > 1.5 * ops["/"]
    weighted = Counter(
        gsm.equations(gsm.drill(np.random.default_rng(i), gsm.LEVELS[3], "--/").solution)[0][1] for i in range(300)
    )
    assert set(weighted) == {"-", "/"} and weighted["-"] > 1.4 * weighted["/"]


def test_equation_drills_ask_the_equations_the_problems_write():
    from collections import Counter

    import numpy as np

    rng, d = np.random.default_rng(3), gsm.LEVELS[3]
    written = Counter(
        (op, len(str(max(a, b)))) for _ in range(300) for a, op, b, c, ok in gsm.equations(gsm.draw(rng, d).solution)
    )
    kinds = Counter()
    for i in range(300):
        p = gsm.equation_drill(np.random.default_rng(i), d)
        ((a, op, b, c, ok),) = gsm.equations(p.solution)
        assert ok and gsm.final_answer(p.solution) == c == p.answer and p.question == f"What is {a} {op} {b}?"
        assert p.steps == 1 and p.template == "drill"
        kinds[op, len(str(max(a, b)))] += 1
    assert p == gsm.equation_drill(np.random.default_rng(299), d)  # the seed alone
    # three-digit sums and differences (earlier results), which the problems write and range drills lack
    assert written["+", 3] > 20 and kinds["+", 3] > 10 and kinds["-", 3] > 10
    ranged = Counter(
        (op, len(str(max(a, b))))
        for a, op, b, c, ok in (gsm.equations(gsm.drill(np.random.default_rng(i), d).solution)[0] for i in range(300))
    )
    assert kinds["+", 3] > 3 * ranged["+", 3] and kinds["-", 3] > 3 * ranged["-", 3]
    subs = Counter(
        gsm.equations(gsm.equation_drill(np.random.default_rng(i), d, "-").solution)[0][1] for i in range(50)
    )
    assert set(subs) == {"-"}
    with pytest.raises(ValueError, match="drill operators must be"):
        gsm.equation_drill(np.random.default_rng(0), d, "x")
