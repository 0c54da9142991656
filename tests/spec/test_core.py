"""The tree core in both implementations (pure ``spotref.spec.core``, compiled ``spotref._core``):
against a brute-force oracle, against each other, and a guard that the extension really loaded.

Drafts and decisions are built valid by construction (``st.data()``); invalid ones are a valid
draft (or a walk's decision) with one corruption at a known node (or row), so the expected
error is known too, and both cores must raise it with the pure core's message.
"""

from __future__ import annotations

import array
import importlib
import os
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import pytest
from helpers import examples
from hypothesis import given, note, settings
from hypothesis import strategies as st

import spotref

NO_EXT = bool(os.environ.get("SPOTREF_NO_EXTENSIONS"))
PY = spotref.core_module("py")


def compiled():
    """The compiled core: skipped under SPOTREF_NO_EXTENSIONS, a failure when not importable."""
    if NO_EXT:
        pytest.skip("SPOTREF_NO_EXTENSIONS is set: the compiled core is not used")
    try:
        mod = spotref.core_module("c")
    except ImportError as e:
        mod = e
    if getattr(mod, "__name__", None) != "spotref._core":  # the pure core is no stand-in
        pytest.fail(
            f"spotref.core_module('c') gave {mod!r}, not the compiled core: build it "
            f"with `python setup.py build_ext --inplace`, or set SPOTREF_NO_EXTENSIONS=1"
        )
    return mod


@pytest.fixture(scope="module", params=["py", "c"])
def core(request):
    return PY if request.param == "py" else compiled()


@pytest.fixture(scope="module")
def ccore():
    return compiled()


# ---- drafts, valid by construction -----------------------------------------------------------


@dataclass(frozen=True)
class Case:
    root: object  # (B,) tokens: numpy int64 / int32 / strided array, list or tuple
    root_step: int
    parents: object
    commits: object
    mask_id: int
    vocab_size: int
    max_set: int
    budget: int
    depth: int

    def args(self):
        return (
            self.root,
            self.root_step,
            self.parents,
            self.commits,
            self.mask_id,
            self.vocab_size,
            self.max_set,
            self.budget,
            self.depth,
        )

    @property
    def B(self):
        return len(self.root)

    @property
    def tokens(self):
        """The valid commit tokens: the vocabulary without MASK."""
        return [t for t in range(self.vocab_size) if t != self.mask_id]


ROOT_FORMS = {
    "int64": lambda r: np.array(r, dtype=np.int64),
    "int32": lambda r: np.array(r, dtype=np.int32),
    "strided": lambda r: np.repeat(np.array(r, dtype=np.int64), 2)[::2],
    "list": list,
    "tuple": tuple,
}


def draw_draft(data, max_b=8, max_nodes=12, max_vocab=5, min_nodes=1) -> Case:
    """A valid draft. Small vocabularies make different commit orders reach equal states; MASK
    may lie inside or outside the vocabulary."""
    draw = data.draw
    B = draw(st.integers(1, max_b), label="B")
    V = draw(st.integers(2, max_vocab), label="V")
    mask = draw(st.integers(0, V + 1), label="mask")
    tokens = [t for t in range(V) if t != mask]
    root = draw(st.lists(st.one_of(st.just(mask), st.integers(0, V - 1)), min_size=B, max_size=B))
    max_set = draw(st.sampled_from(sorted({1, 2, B})), label="max_set")
    cap = draw(st.integers(1, 5), label="depth cap")
    n = draw(st.integers(min_nodes, max_nodes), label="nodes")
    parents, commits, states, depths = [-1], [()], [list(root)], [0]
    np_ints = draw(st.booleans(), label="numpy ints in commits")
    while len(parents) < n:
        open_ = [j for j, s in enumerate(states) if depths[j] < cap and mask in s]
        if not open_:
            break
        p = draw(st.sampled_from(open_))
        cs = draw_commits(draw, states[p], mask, tokens, max_set)
        if np_ints and draw(st.booleans()):
            cs = tuple((np.int64(q), np.int64(t)) for q, t in cs)
        state = list(states[p])
        for q, t in cs:
            state[q] = int(t)
        parents.append(p), commits.append(cs), states.append(state), depths.append(depths[p] + 1)
    n = len(parents)
    root = ROOT_FORMS[draw(st.sampled_from(sorted(ROOT_FORMS)), label="root form")](root)
    if draw(st.booleans(), label="lists"):
        parents, commits = list(parents), [list(map(list, cs)) for cs in commits]
    else:
        parents, commits = tuple(parents), tuple(commits)
    return Case(
        root,
        draw(st.integers(0, 40), label="root step"),
        parents,
        commits,
        mask,
        V,
        max_set,
        draw(st.integers(n, n + 3), label="budget"),
        cap,
    )


def draw_commits(draw, state, mask, tokens, max_set) -> tuple:
    """A valid commit set onto ``state`` (which has a MASK): 1 .. max_set masked positions."""
    masked = [q for q in range(len(state)) if state[q] == mask]
    k = draw(st.integers(1, min(max_set, len(masked))))
    return tuple((q, draw(st.sampled_from(tokens))) for q in draw(st.permutations(masked))[:k])


# ---- the brute-force oracle -----------------------------------------------------------------


def oracle_tree(case: Case):
    """(states, steps, depths, node_of): every node's state replayed from the root along its
    path, rows found by linear search over (tokens, step)."""
    states, steps, node_of = [], [], []
    for i in range(len(case.parents)):
        path = [i]
        while path[-1] != 0:
            path.append(int(case.parents[path[-1]]))
        state = [int(t) for t in case.root]
        for j in reversed(path[:-1]):
            for pos, tok in case.commits[j]:
                state[int(pos)] = int(tok)
        step = case.root_step + len(path) - 1
        rows = [r for r in range(len(states)) if states[r] == state and steps[r] == step]
        if not rows:
            rows = [len(states)]
            states.append(state), steps.append(step)
        node_of.append(rows[0])
    return states, steps, [s - case.root_step for s in steps], node_of


def oracle_row(states, steps, state, step):
    rows = [r for r in range(len(states)) if states[r] == list(state) and steps[r] == step]
    return rows[0] if rows else -1


def oracle_child(states, steps, row, commits):
    """-1 after an empty decision (a complete state): nothing follows it."""
    state = list(states[row])
    for pos, tok in commits:
        state[int(pos)] = int(tok)
    return oracle_row(states, steps, state, steps[row] + 1) if len(commits) else -1


def oracle_walk(states, steps, decide):
    path = [0]
    while True:
        d = decide(path[-1])
        nxt = oracle_child(states, steps, path[-1], d)
        if nxt < 0:
            return path, d
        path.append(nxt)


def assert_tree(tree, states, steps):
    """Equal contents, reporting the first divergence as 'row r, position p: want t, got t''."""
    got = tree.steps
    assert isinstance(got, np.ndarray) and got.dtype == np.int64, type(got)
    assert got.tolist() == steps, f"steps: want {steps}, got {got.tolist()}"
    got = tree.states
    assert isinstance(got, np.ndarray) and got.dtype == np.int64
    assert len(tree) == len(states) and got.shape == (len(states), len(states[0])), got.shape
    for r, (want_row, got_row) in enumerate(zip(states, got.tolist())):
        for p, (w, g) in enumerate(zip(want_row, got_row)):
            assert w == g, f"row {r}, position {p}: want {w}, got {g}"


def successors(case, states, steps, r):
    """(row, decision) for every verified row one valid decision away from row r."""
    out = []
    for q in range(len(states)):
        diff = [(p, b) for p, (a, b) in enumerate(zip(states[r], states[q])) if a != b]
        if (
            steps[q] == steps[r] + 1
            and 1 <= len(diff) <= case.max_set
            and all(states[r][p] == case.mask_id for p, _ in diff)
        ):
            out.append((q, tuple(diff)))
    return out


# ---- valid drafts ---------------------------------------------------------------------------


@settings(deadline=None, max_examples=examples(0.6))
@given(data=st.data())
def test_build_tree_matches_oracle(core, data):
    case = draw_draft(data)
    note(f"case: {case}")
    tree = core.build_tree(*case.args())
    assert_tree(tree, *oracle_tree(case)[:2])
    assert tree.states.flags.writeable and tree.states.flags.c_contiguous
    assert (tree.mask_id, tree.vocab_size, tree.max_set) == (case.mask_id, case.vocab_size, case.max_set)


def test_equal_states_merge_only_at_equal_steps(core):
    """a then b, b then a: one state; {a, b} in one set is the same tokens one step earlier."""
    M = 9
    root = np.array([1, M, M, M], dtype=np.int64)
    parents = (-1, 0, 0, 1, 2, 0, 3)
    commits = ((), ((1, 5),), ((2, 6),), ((2, 6),), ((1, 5),), ((1, 5), (2, 6)), ((3, 4),))
    tree = core.build_tree(root, 7, parents, commits, M, 9, 2, 16, 8)
    assert len(tree) == 6  # nodes 3 and 4 merged
    assert tree.states[3].tolist() == tree.states[4].tolist() == [1, 5, 6, M]
    assert tree.steps.tolist() == [7, 8, 8, 9, 8, 10]
    assert tree.child(1, ((2, 6),)) == 3 == tree.child(2, [(1, np.int64(5))])  # either order reaches row 3
    assert tree.child(0, ((2, 6), (1, 5))) == 4
    assert tree.child(2, ((3, 4),)) == -1 and tree.child(3, [[3, 4]]) == 5


def test_an_empty_decision_at_a_complete_state_leads_nowhere(core):
    """{0, 1} in one set (step 1) and 0 then 1 (step 2) reach the same tokens: the complete
    state at step 1 decides (), which is not a step to its twin at step 2."""
    M = 9
    tree = core.build_tree([M, M], 0, (-1, 0, 0, 2), ((), ((0, 1), (1, 2)), ((0, 1),), ((1, 2),)), M, 9, 2, 8, 4)
    assert tree.states[3].tolist() == tree.states[1].tolist() == [1, 2] and tree.steps.tolist() == [0, 1, 1, 2]
    assert tree.child(2, ((1, 2),)) == 3 and tree.child(1, ()) == -1 and tree.child(1, []) == -1
    assert core.walk(tree, {0: ((0, 1), (1, 2)), 1: ()}.get) == ([0, 1], ())


@settings(deadline=None, max_examples=examples(0.4))
@given(data=st.data())
def test_child_matches_oracle(core, data):
    case = draw_draft(data)
    states, steps, _, _ = oracle_tree(case)
    tree = core.build_tree(*case.args())
    for r in range(len(states)):
        d = (
            ()
            if case.mask_id not in states[r]
            else draw_commits(data.draw, states[r], case.mask_id, case.tokens, case.max_set)
        )
        assert tree.child(r, d) == oracle_child(states, steps, r, d), (r, d)
        for q, d in successors(case, states, steps, r):
            assert tree.child(r, d) == oracle_row(states, steps, states[q], steps[q]) >= 0


# ---- invalid drafts and decisions: the same ValueError from both cores ------------------------

COMMIT_KINDS = [
    "outside",
    "committed",
    "duplicate",
    "token",
    "count",
    "not ints",
    "bools",
    "not pairs",
    "not a sequence",
]
COMMIT_KEYWORDS = {
    "outside": "outside the block",
    "committed": "already committed",
    "duplicate": "already committed",
    "token": "is not a vocabulary token",
    "count": "commits, want",
    "not ints": "is not a pair of ints",
    "bools": "is not a pair of ints",
    "not pairs": "must be (position, token) pairs",
    "not a sequence": "must be (position, token) pairs",
}


def corrupt_commits(draw, case: Case, cs, state):
    """(bad commits, message keyword): ``cs``, valid onto ``state``, broken one way."""
    B, mask, cs = case.B, case.mask_id, list(cs)
    kind = draw(st.sampled_from(COMMIT_KINDS), label="commit kind")
    committed = [q for q in range(B) if state[q] != mask]
    if (
        not cs
        and kind != "not a sequence"
        or kind == "committed"
        and not committed
        or kind == "duplicate"
        and case.max_set < 2
    ):
        kind = "count"  # a complete state; nothing to repeat
    k = draw(st.integers(0, max(len(cs) - 1, 0)))
    pos, tok = cs[k] if cs else (0, 0)
    if kind == "outside":
        cs[k] = (draw(st.sampled_from([B, B + 3, -1, -B - 1, 2**63, -(2**63) - 1, 2**70])), tok)
    elif kind == "committed":
        cs[k] = (draw(st.sampled_from(committed)), tok)
    elif kind == "duplicate":
        cs = ([cs[k], (pos, draw(st.sampled_from(case.tokens)))] + cs[:k] + cs[k + 1 :])[: case.max_set]
    elif kind == "token":
        cs[k] = (pos, draw(st.sampled_from([case.vocab_size, case.vocab_size + 4, -1, mask, 2**63, 2**64, -(2**70)])))
    elif kind == "count":  # () where a commit is due, or too many
        cs = [] if cs and draw(st.booleans()) else [(q, 0) for q in range(max(len(cs), case.max_set) + 1)]
    elif kind in ("not ints", "bools"):
        junk = draw(
            st.sampled_from(
                ["1", 1.0, None, np.float64(1), (1,), np.bool_(True)] if kind == "not ints" else [True, False]
            )
        )
        cs[k] = (junk, tok) if draw(st.booleans()) else (pos, junk)
    elif kind == "not pairs":
        junk = draw(st.sampled_from([(1, 2, 3), 5, "ab", (1,), None, {1: 2}, np.array([pos, tok])]))
        cs = cs[:k] + [junk] + cs[k + 1 :]
    else:
        return draw(
            st.sampled_from([None, 5, "ab", np.array(cs or [[0, 0]]), set(), {0: 1}, iter(cs)])
        ), COMMIT_KEYWORDS[kind]
    return (tuple(cs) if draw(st.booleans()) else cs), COMMIT_KEYWORDS[kind]


NODE_KINDS = ["parent", "parent type", "commits"]
KINDS = NODE_KINDS + ["depth", "budget", "root commits", "root parent", "shape", "shape types"]


def corrupt(data, case: Case):
    """(bad case, message prefix, message keyword): one corruption at a known place."""
    draw = data.draw
    n = len(case.parents)
    parents, commits = list(case.parents), [tuple(map(tuple, cs)) for cs in case.commits]
    states, _, depths, node_of = oracle_tree(case)
    kind = draw(st.sampled_from(KINDS if n > 1 else KINDS[-4:]), label="kind")  # budget >= 1
    if kind in NODE_KINDS:
        j = draw(st.integers(1, n - 1), label="node")
        if kind == "parent":
            parents[j] = draw(st.sampled_from([j, j + 1, n + 5, -1, -j - 3, 2**64, np.int64(j)]))
            keyword = "must be a smaller index"
        elif kind == "parent type":  # not an index, even when it equals one
            parents[j] = draw(st.sampled_from([None, "0", 0.0, True, False, float(j - 1), np.float64(0)]))
            keyword = "is not an integer node index"
        else:
            commits[j], keyword = corrupt_commits(draw, case, commits[j], states[node_of[parents[j]]])
        return replace(case, parents=parents, commits=commits), f"draft node {j}: ", keyword
    if kind == "budget":
        return replace(case, budget=draw(st.integers(1, n - 1))), f"draft: {n} nodes", "budget"
    if kind == "depth":
        cap = draw(st.integers(0, max(depths) - 1))
        j = next(i for i in range(n) if depths[node_of[i]] > cap)
        return replace(case, depth=cap), f"draft node {j}: ", "exceeds the depth cap"
    if kind == "root commits":
        commits[0] = draw(st.sampled_from([((0, case.tokens[0]),), None, 5, "ab"]))
        return replace(case, commits=commits), "draft node 0: ", "the root must have"
    if kind == "root parent":
        parents[0] = draw(st.sampled_from([0, 1, -2, None, -1.0, "-1", True]))
        return replace(case, parents=parents), "draft node 0: ", "the root must have"
    if kind == "shape types":
        bad = draw(st.sampled_from([None, np.array(parents), iter(parents), "ab", 5, {-1: 0}]))
        which = draw(st.sampled_from(["parents", "commits"]))
        return replace(case, **{which: bad}), "draft: ", "must be tuples or lists"
    cut = draw(st.sampled_from(["parents", "commits", "both"]))
    short = dict(
        parents=parents[:-1] if cut != "commits" else parents, commits=commits[:-1] if cut != "parents" else commits
    )
    if cut == "both" or n == 1:
        short = dict(parents=[], commits=[] if cut == "both" else commits)
    return replace(case, **short), "draft: ", "must be equal, non-empty"


def raised(fn, *args, **kwargs):
    with pytest.raises(ValueError) as e:
        fn(*args, **kwargs)
    return str(e.value)


@settings(deadline=None, max_examples=examples(1.5))
@given(data=st.data())
def test_invalid_draft_same_message(core, data):
    bad, prefix, keyword = corrupt(data, draw_draft(data, min_nodes=2))
    note(f"bad: {bad}")
    got = raised(core.build_tree, *bad.args())
    assert got == raised(PY.build_tree, *bad.args())
    assert got.startswith(prefix) and keyword in got, (got, prefix, keyword)


@settings(deadline=None, max_examples=examples(1))
@given(data=st.data())
def test_invalid_decision_same_message(core, data):
    """A decision broken at a row of the walk's path: walk and child refuse it, naming the row."""
    case = draw_draft(data)
    states, steps, _, _ = oracle_tree(case)
    decisions = draw_decisions(data, case, states, steps)
    path, _ = oracle_walk(states, steps, decisions.__getitem__)
    r = data.draw(st.sampled_from(path), label="row")
    decisions[r], keyword = corrupt_commits(data.draw, case, decisions[r], states[r])
    note(f"case: {case}\ndecisions: {decisions}")
    tree = core.build_tree(*case.args())
    got = raised(core.walk, tree, decisions.__getitem__)
    assert got == raised(PY.walk, PY.build_tree(*case.args()), decisions.__getitem__)
    assert got == raised(tree.child, r, decisions[r])
    assert got.startswith(f"decision at row {r}: ") and keyword in got, (got, keyword)


# The fixed tree of the examples below: row 0 [1, M, M, M], rows 1-3 [1, 5, M, M], [1, M, 6, M],
# [1, 5, 6, M] (steps 0, 1, 1, 2); vocabulary 0 .. 8 with MASK 7 inside it; max_set 2.
M = 7
FIXED = dict(
    root=np.array([1, M, M, M]),
    root_step=0,
    parents=(-1, 0, 0, 1),
    commits=((), ((1, 5),), ((2, 6),), ((2, 6),)),
    mask_id=M,
    vocab_size=9,
    max_set=2,
    budget=8,
    depth=4,
)
NOT_AN_ARRAY = "want a 1-D integer array or a tuple or list of ints"


@pytest.mark.parametrize(
    "root, message",
    [
        (np.array([], dtype=np.int64), "0 tokens, want at least 1"),
        ([], "0 tokens, want at least 1"),
        ([1, 9, M, M], "token 9 at position 1 is neither a vocabulary token (0 .. 8) nor MASK 7"),
        (np.array([1, -1, M, M]), "token -1 at position 1 is neither"),
        (np.array([1, 2**40, M, M]), "token 1099511627776 at position 1"),
        ([1, M, M, 2**63], "token 9223372036854775808 at position 3"),
        (np.array([1.0, M, M, M]), NOT_AN_ARRAY),
        (np.array([[1, M, M, M]]), NOT_AN_ARRAY),
        (np.array([1, 0, 1, 1], dtype=bool), NOT_AN_ARRAY),
        ([1, True, M, M], NOT_AN_ARRAY),
        ([1, 1.0, M, M], NOT_AN_ARRAY),
        (array.array("q", [1, M, M, M]), NOT_AN_ARRAY),
        (memoryview(np.array([1, M, M, M])), NOT_AN_ARRAY),
        (None, NOT_AN_ARRAY),
        ("1777", NOT_AN_ARRAY),
    ],
)
def test_a_bad_root_is_refused(core, root, message):
    got = raised(core.build_tree, **{**FIXED, "root": root})
    assert got == raised(PY.build_tree, **{**FIXED, "root": root})
    assert got.startswith("draft root: ") and message in got, got


@pytest.mark.parametrize(
    "name, value, message",
    [
        ("root_step", -1, "build_tree: root_step must be an int in [0, 2**31 - 1], got -1"),
        ("root_step", True, "root_step must be an int"),
        ("root_step", 1.0, "root_step must be an int"),
        ("root_step", 2**31, "got 2147483648"),
        ("root_step", np.int64(2**40), "root_step must"),
        ("mask_id", -1, "mask_id must be"),
        ("mask_id", None, "mask_id must be"),
        ("vocab_size", 0, "vocab_size must be an int in [1, 2**31 - 1]"),
        ("max_set", 0, "max_set must be an int in [1,"),
        ("budget", 0, "budget must be an int in [1,"),
        ("depth", -1, "depth must be"),
        ("depth", "4", "depth must be"),
        ("root_step", 2**31 - 4, "build_tree: root_step + depth must be below 2**31, got 2147483644 + 4"),
    ],
)
def test_bad_build_arguments_are_refused(core, name, value, message):
    got = raised(core.build_tree, **{**FIXED, name: value})
    assert got == raised(PY.build_tree, **{**FIXED, name: value})
    assert message in got, got


@pytest.mark.parametrize("entry", [(1, 2, 3), 5, (1,), "ab", None, {1: 4}, np.array([1, 4])])
def test_commit_entries_that_are_not_pairs(core, entry):
    args = {**FIXED, "parents": (-1, 0), "commits": ((), ((2, 4), entry))}
    got = raised(core.build_tree, **args)
    assert got == raised(PY.build_tree, **args)
    assert got.startswith("draft node 1: commits must be (position, token) pairs, got "), got


def test_raw_numpy_parents_or_commits_are_refused(core):
    """spotref.Draft makes tuples; a raw parent array must be one too."""
    for name in ["parents", "commits"]:
        bad = {**FIXED, name: np.array(FIXED["parents"])}
        assert raised(core.build_tree, **bad).startswith("draft: parents and commits must be tuples or lists")


@pytest.mark.parametrize(
    "d, message",
    [
        (((-1, 5),), "position -1 is outside the block [0, 4)"),
        (((2**63, 5),), "position 9223372036854775808 is outside the block [0, 4)"),
        (((1, 2**63),), "token 9223372036854775808 at position 1 is not a vocabulary token"),
        (((1, -1),), "token -1 at position 1 is not a vocabulary token (0 .. 8, MASK 7 excluded)"),
        (((1, M),), "token 7 at position 1 is not a vocabulary token"),
        (((0, 5),), "position 0 is already committed"),
        (((1, 5), (1, 6)), "position 1 is already committed"),
        (((1.0, 5),), "commit (1.0, 5) is not a pair of ints"),
        (((True, 5),), "commit (True, 5) is not a pair"),
        ((), "0 commits, want 1 .. 2"),
        (((1, 5), (2, 5), (3, 5)), "3 commits, want 1 .. 2"),
        (None, "commits must be (position, token) pairs, got None"),
        ([[1]], "commits must be (position, token) pairs"),
    ],
)
def test_a_bad_decision_is_refused_by_child_and_walk(core, d, message):
    tree = core.build_tree(**FIXED)
    got = raised(tree.child, 0, d)
    assert got == raised(core.walk, tree, {0: d}.get) == raised(PY.build_tree(**FIXED).child, 0, d)
    assert got.startswith(f"decision at row 0: {message}"), got


def test_a_decision_at_a_complete_state_is_empty(core):
    tree = core.build_tree([M, 2], 0, (-1, 0), ((), ((0, 1),)), M, 9, 1, 4, 4)
    assert core.walk(tree, {0: ((0, 1),), 1: ()}.get) == ([0, 1], ())
    assert raised(tree.child, 1, ((0, 3),)) == "decision at row 1: 1 commits, want 0 .. 0"
    assert raised(core.walk, tree, {0: ((0, 1),), 1: ((0, 3),)}.get) == "decision at row 1: 1 commits, want 0 .. 0"


@pytest.mark.parametrize("row", [-1, 4, 2**63, True, 1.0, None, np.float64(0), "0"])
def test_a_row_outside_the_tree_is_refused(core, row):
    got = raised(core.build_tree(**FIXED).child, row, ((1, 5),))
    assert got == f"child: row must be an int in [0, 3], got {row!r}"


def test_walk_takes_only_its_own_core_s_tree(ccore):
    py_tree, c_tree = PY.build_tree(**FIXED), ccore.build_tree(**FIXED)
    decide = {0: ((1, 5),)}.get
    for mod, tree, got in [
        (PY, c_tree, "spotref._core.Tree"),
        (ccore, py_tree, "spotref.spec.core.Tree"),
        (PY, None, "builtins.NoneType"),
        (ccore, None, "builtins.NoneType"),
    ]:
        assert raised(mod.walk, tree, decide) == f"walk: tree must be a Tree from this core's build_tree, got {got}"
    blank = ccore.Tree.__new__(ccore.Tree)  # never built: refused, never read
    for call in [
        lambda: ccore.walk(blank, decide),
        lambda: blank.child(0, ()),
        lambda: ccore.Tree(),
    ]:
        with pytest.raises(TypeError, match="Tree is built by build_tree"):
            call()


# ---- walk -----------------------------------------------------------------------------------


def draw_decisions(data, case: Case, states, steps):
    """A valid decision per row: () at a complete state, else mostly one to a verified row,
    otherwise random (mostly off-tree); numpy ints and lists in places, as a drafter may."""
    out = {}
    for r in range(len(states)):
        kids = successors(case, states, steps, r)
        if case.mask_id not in states[r]:
            d = ()
        elif kids and data.draw(st.integers(0, 3)):
            d = data.draw(st.permutations(data.draw(st.sampled_from(kids))[1]))
        else:
            d = draw_commits(data.draw, states[r], case.mask_id, case.tokens, case.max_set)
        if data.draw(st.booleans()):
            d = tuple((np.int64(p), np.int64(t)) for p, t in d)
        out[r] = tuple(d) if data.draw(st.booleans()) else list(d)
    return out


@settings(deadline=None, max_examples=examples(0.6))
@given(data=st.data())
def test_walk_matches_oracle(core, data):
    case = draw_draft(data)
    states, steps, _, _ = oracle_tree(case)
    decisions = draw_decisions(data, case, states, steps)
    note(f"case: {case}\ndecisions: {decisions}")
    seen = []

    def decide(row):
        seen.append(row)
        return decisions[row]

    path, bonus = core.walk(core.build_tree(*case.args()), decide)
    want_path, want_bonus = oracle_walk(states, steps, decisions.__getitem__)
    assert path == want_path and seen == want_path
    assert bonus is decisions[path[-1]] and want_bonus is bonus
    assert all(type(r) is int for r in path)


def test_walk_stops_on_complete_and_off_tree(core):
    tree = core.build_tree([M, M], 0, (-1, 0, 1), ((), ((0, 1),), ((1, 2),)), M, 9, 1, 4, 4)
    assert core.walk(tree, {0: ((0, 1),), 1: ((1, 2),), 2: ()}.get) == ([0, 1, 2], ())
    assert core.walk(tree, {0: ((0, 1),), 1: ((1, 3),)}.get) == ([0, 1], ((1, 3),))
    assert core.walk(tree, {0: ((1, 2),)}.get) == ([0], ((1, 2),))


# ---- the two cores agree --------------------------------------------------------------------


@settings(deadline=None, max_examples=examples(0.4))
@given(data=st.data())
def test_py_and_c_build_equal_trees(ccore, data):
    case = draw_draft(data, max_b=32, max_nodes=64, max_vocab=4)
    want, got = PY.build_tree(*case.args()), ccore.build_tree(*case.args())
    assert len(want) == len(got)
    for name in ["states", "steps"]:
        a, b = getattr(want, name), getattr(got, name)
        assert a.dtype == b.dtype == np.int64 and np.array_equal(a, b), name
    decisions = draw_decisions(data, case, want.states.tolist(), want.steps.tolist())
    assert PY.walk(want, decisions.get) == ccore.walk(got, decisions.get)


def test_draft_objects_and_decoder_types(ccore):
    """spotref.Draft's normalised tuples, a numpy root, the decoder's decision tuples."""
    M, B = 151_669, 32
    root = np.full(B, M, dtype=np.int64)
    root[:4] = [11, 12, 13, 14]
    draft = spotref.Draft((-1, 0, 1, 0, 3), ((), ((4, 7),), ((5, 8),), ((5, 8),), ((4, 7),)))
    trees = [m.build_tree(root, 3, draft.parents, draft.commits, M, 151_936, 1, 16, 8) for m in (PY, ccore)]
    assert [len(t) for t in trees] == [4, 4]  # node 4 reaches node 2's state
    assert np.array_equal(trees[0].states, trees[1].states)
    for t, m in zip(trees, (PY, ccore)):
        assert m.walk(t, {0: ((4, 7),), 1: ((5, 8),), 2: ((6, 1),)}.get) == ([0, 1, 2], ((6, 1),))


def test_compiled_core_mirrors_the_spec_names(ccore):
    spec = {
        n
        for n, v in vars(PY).items()
        if not n.startswith("_") and (n.isupper() or getattr(v, "__module__", None) == "spotref.spec.core")
    }
    assert spec - set(dir(ccore)) == set()
    public = {"states", "steps", "mask_id", "vocab_size", "max_set", "child"}
    assert public <= set(dir(PY.build_tree(**FIXED))) and public <= set(dir(ccore.build_tree(**FIXED)))


def test_extension_loaded_when_built():
    """Guard: a built extension in the package directory must be the active core."""
    pkg = Path(spotref.__file__).parent
    built = sorted(pkg.glob("_core*.so")) + sorted(pkg.glob("_core*.pyd"))
    if NO_EXT:
        pytest.skip("SPOTREF_NO_EXTENSIONS is set: the pure core is used on purpose")
    if not built:
        pytest.skip(f"no compiled core in {pkg} (built by pip install or setup.py build_ext --inplace)")
    assert spotref.EXTENSION, f"{built[0].name} exists but spotref.EXTENSION is False"
    assert spotref.core_module() is importlib.import_module("spotref._core")
    assert Path(spotref.core_module().__file__).resolve() in [b.resolve() for b in built]


@pytest.mark.slow
def test_without_extensions_the_pure_core_decodes_identically():
    """SPOTREF_NO_EXTENSIONS=1 (the install that skips the Cython build) makes the pure core the
    active one, and a drafted decode through it gives the tokens this process gives (CI runs the
    suite once: this is the run without the extension, in a subprocess of its own)."""
    import json
    import subprocess
    import sys

    code = (
        "import json, spotref; from helpers import tiny_model; m = tiny_model(V=64, B=8, mask_id=63); "
        "r = spotref.generate(m, [1, 2, 3], 40, temperature=0.7, drafter='confidence', budget=8, threshold=0.3); "
        "print(json.dumps([spotref.EXTENSION, spotref.core_module().__name__, r.tokens, r.passes]))"
    )
    support = str(Path(__file__).resolve().parents[1] / "support")
    env = {**os.environ, "SPOTREF_NO_EXTENSIONS": "1", "PYTHONPATH": os.pathsep.join([support, *sys.path])}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    extension, core, tokens, passes = json.loads(out.stdout)
    assert (extension, core) == (False, "spotref.spec.core")
    from helpers import tiny_model

    m = tiny_model(V=64, B=8, mask_id=63)
    r = spotref.generate(m, [1, 2, 3], 40, temperature=0.7, drafter="confidence", budget=8, threshold=0.3)
    assert (tokens, passes) == (list(r.tokens), r.passes)
