"""The tree core in both implementations (pure ``spotref.core``, compiled ``spotref._core``):
against a brute-force oracle, against each other, and a guard that the extension really loaded.

Drafts are built valid by construction (``st.data()``); invalid ones are a valid draft with one
corruption at a known node, so the expected error is known too.
"""
from __future__ import annotations

import importlib
import os
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import pytest
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
    if getattr(mod, "__name__", None) != "spotref._core":     # the pure core is no stand-in
        pytest.fail(f"spotref.core_module('c') gave {mod!r}, not the compiled core: build it "
                    f"with `python setup.py build_ext --inplace`, or set SPOTREF_NO_EXTENSIONS=1")
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
    root: object          # (B,) tokens: numpy int64 / int32 array or list
    root_step: int
    parents: object
    commits: object
    mask_id: int
    vocab_size: int
    max_set: int
    budget: int
    depth: int

    def args(self):
        return (self.root, self.root_step, self.parents, self.commits, self.mask_id,
                self.vocab_size, self.max_set, self.budget, self.depth)

    @property
    def B(self):
        return len(self.root)

    @property
    def tokens(self):
        """The valid commit tokens: the vocabulary without MASK."""
        return [t for t in range(self.vocab_size) if t != self.mask_id]


def draw_draft(data, max_b=8, max_nodes=12, max_vocab=5, min_nodes=1) -> Case:
    """A valid draft. Small vocabularies make different commit orders reach equal states."""
    draw = data.draw
    B = draw(st.integers(1, max_b), label="B")
    V = draw(st.integers(2, max_vocab), label="V")
    mask = draw(st.integers(0, V + 1), label="mask")
    tokens = [t for t in range(V) if t != mask]
    root = draw(st.lists(st.one_of(st.just(mask), st.integers(0, V + 2)), min_size=B, max_size=B))
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
        masked = [q for q in range(B) if states[p][q] == mask]
        k = draw(st.integers(1, min(max_set, len(masked))))
        pos = draw(st.permutations(masked))[:k]
        cs = tuple((q, draw(st.sampled_from(tokens))) for q in pos)
        if np_ints and draw(st.booleans()):
            cs = tuple((np.int64(q), np.int64(t)) for q, t in cs)
        state = list(states[p])
        for q, t in cs:
            state[q] = int(t)
        parents.append(p), commits.append(cs), states.append(state), depths.append(depths[p] + 1)
    n = len(parents)
    form = draw(st.sampled_from(["int64", "list", "int32"]), label="root form")
    root = list(root) if form == "list" else np.array(root, dtype=form)
    if draw(st.booleans(), label="lists"):
        parents, commits = list(parents), [list(map(list, cs)) for cs in commits]
    else:
        parents, commits = tuple(parents), tuple(commits)
    return Case(root, draw(st.integers(0, 40), label="root step"), parents, commits, mask, V,
                max_set, draw(st.integers(n, n + 3), label="budget"), cap)


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


def oracle_lookup(states, steps, state, step):
    rows = [r for r in range(len(states)) if states[r] == list(state) and steps[r] == step]
    return rows[0] if rows else -1


def oracle_child(states, steps, row, commits):
    state = list(states[row])
    for pos, tok in commits:
        state[int(pos)] = int(tok)
    return oracle_lookup(states, steps, state, steps[row] + 1)


def oracle_walk(states, steps, decide):
    path = [0]
    while True:
        d = decide(path[-1])
        nxt = oracle_child(states, steps, path[-1], d) if d else -1
        if nxt < 0:
            return path, d
        path.append(nxt)


def assert_tree(tree, states, steps, depths, node_of):
    """Equal contents, reporting the first divergence as 'row r, position p: want t, got t''."""
    for name, want in [("steps", steps), ("depths", depths), ("node_of", node_of)]:
        got = getattr(tree, name)
        assert isinstance(got, np.ndarray) and got.dtype == np.int64, (name, type(got))
        assert got.tolist() == want, f"{name}: want {want}, got {got.tolist()}"
    got = tree.states
    assert isinstance(got, np.ndarray) and got.dtype == np.int64
    assert len(tree) == len(states) and got.shape == (len(states), len(states[0])), got.shape
    for r, (want_row, got_row) in enumerate(zip(states, got.tolist())):
        for p, (w, g) in enumerate(zip(want_row, got_row)):
            assert w == g, f"row {r}, position {p}: want {w}, got {g}"


# ---- valid drafts ---------------------------------------------------------------------------

@settings(deadline=None, max_examples=60)
@given(data=st.data())
def test_build_tree_matches_oracle(core, data):
    case = draw_draft(data)
    note(f"case: {case}")
    tree = core.build_tree(*case.args())
    assert_tree(tree, *oracle_tree(case))
    assert tree.states.flags.writeable and tree.states.flags.c_contiguous


def test_equal_states_merge_only_at_equal_steps(core):
    """a then b, b then a: one state; {a, b} in one set is the same tokens one step earlier."""
    M = 9
    root = np.array([1, M, M, M], dtype=np.int64)
    parents = (-1, 0, 0, 1, 2, 0, 3)
    commits = ((), ((1, 5),), ((2, 6),), ((2, 6),), ((1, 5),), ((1, 5), (2, 6)), ((3, 4),))
    tree = core.build_tree(root, 7, parents, commits, M, 9, 2, 16, 8)
    assert tree.node_of.tolist() == [0, 1, 2, 3, 3, 4, 5]
    assert tree.states[3].tolist() == tree.states[4].tolist() == [1, 5, 6, M]
    assert tree.steps.tolist() == [7, 8, 8, 9, 8, 10] and tree.depths.tolist() == [0, 1, 1, 2, 1, 3]
    assert tree.lookup([1, 5, 6, M], 9) == 3 and tree.lookup(np.array([1, 5, 6, M]), 8) == 4
    assert tree.lookup([1, 5, 6, M], 10) == -1 and tree.lookup([1, 5, 6], 9) == -1
    assert tree.child(1, ((2, 6),)) == 3 and tree.child(0, ((2, 6), (1, 5))) == 4
    assert tree.child(-1, ((3, 4),)) == -1 and tree.child(3, [[3, 4]]) == 5


@settings(deadline=None, max_examples=40)
@given(data=st.data())
def test_lookup_and_child_match_oracle(core, data):
    case = draw_draft(data)
    states, steps, _, _ = oracle_tree(case)
    tree = core.build_tree(*case.args())
    for r in range(len(states)):
        form = data.draw(st.sampled_from([list, tuple, np.array]))
        assert tree.lookup(form(states[r]), steps[r]) == r
        step = data.draw(st.sampled_from([steps[r] - 1, steps[r] + 1, np.int64(steps[r] + 2)]))
        want = oracle_lookup(states, steps, states[r], step)
        assert tree.lookup(np.array(states[r]), step) == want
        assert tree.lookup(states[r] + [case.mask_id], steps[r]) == -1
        cs = data.draw(st.lists(st.tuples(st.integers(-case.B, case.B - 1),
                                          st.integers(0, case.vocab_size + 1)), max_size=3))
        assert tree.child(r, cs) == oracle_child(states, steps, r, cs), (r, cs)
    for r in range(1, len(states)):                 # each row is reached from one just above
        back = [q for q in range(len(states)) if steps[q] == steps[r] - 1 and all(
            a == b or a == case.mask_id for a, b in zip(states[q], states[r]))]
        if back:
            q = back[0]
            cs = [(p, t) for p, (a, t) in enumerate(zip(states[q], states[r])) if a != t]
            assert tree.child(q, cs) == r


# ---- invalid drafts: the same ValueError from both cores, naming the node --------------------

NODE_KINDS = ["parent", "parent type", "outside", "committed", "duplicate", "token", "too many",
              "empty", "not ints", "bools"]
KINDS = NODE_KINDS + ["depth", "budget", "root commits", "root parent", "shape"]


def corrupt(data, case: Case):
    """(bad case, message prefix, message keyword): one corruption at a known place."""
    draw = data.draw
    n, B, mask = len(case.parents), case.B, case.mask_id
    parents, commits = list(case.parents), [tuple(map(tuple, cs)) for cs in case.commits]
    states, _, depths, node_of = oracle_tree(case)
    kind = draw(st.sampled_from(KINDS if n > 1 else KINDS[-4:]), label="kind")
    if kind in NODE_KINDS:
        j = draw(st.integers(1, n - 1), label="node")
        ps = states[node_of[parents[j]]]
        cs, k = list(commits[j]), draw(st.integers(0, len(commits[j]) - 1))
        pos, tok = cs[k]
        committed = [q for q in range(B) if ps[q] != mask]
        if kind == "committed" and not committed or kind == "duplicate" and case.max_set < 2:
            kind = "empty"
        if kind == "parent":
            parents[j] = draw(st.sampled_from([j, j + 1, n + 5, -1, -j - 3, np.int64(j)]))
        elif kind == "parent type":                 # not an index, even when it equals one
            parents[j] = draw(st.sampled_from([None, "0", 0.0, True, False, float(j - 1), np.float64(0)]))
        elif kind == "outside":
            cs[k] = (draw(st.sampled_from([B, B + 3, -1, -B - 1, 2 ** 70])), tok)
        elif kind == "committed":
            cs[k] = (draw(st.sampled_from(committed)), tok)
        elif kind == "duplicate":
            again = (pos, draw(st.sampled_from(case.tokens)))
            cs = ([cs[k], again] + cs[:k] + cs[k + 1:])[: case.max_set]
        elif kind == "token":
            bad = [case.vocab_size, case.vocab_size + 4, -1, mask, 2 ** 64, -(2 ** 70)]
            cs[k] = (pos, draw(st.sampled_from(bad)))
        elif kind == "too many":
            cs = [(q, 0) for q in range(case.max_set + 1)]
        elif kind == "empty":
            cs = []
        elif kind == "not ints":
            junk = draw(st.sampled_from(["1", 1.0, None, np.float64(1), (1,), 2.5]))
            cs[k] = (junk, tok) if draw(st.booleans()) else (pos, junk)
        elif kind == "bools":                       # True is not position (or token) 1
            flag = draw(st.booleans())
            cs[k] = (flag, tok) if draw(st.booleans()) else (pos, flag)
        commits[j] = tuple(cs) if draw(st.booleans()) else cs
        return replace(case, parents=parents, commits=commits), f"draft node {j}: ", {
            "parent": "must be a smaller index", "parent type": "is not an integer node index",
            "outside": "outside the block",
            "committed": "already committed", "duplicate": "already committed",
            "token": "is not a vocabulary token", "too many": "commits, want",
            "empty": "0 commits, want", "not ints": "is not a pair of ints",
            "bools": "is not a pair of ints"}[kind]
    if kind == "budget":
        return replace(case, budget=draw(st.integers(0, n - 1))), f"draft: {n} nodes", "budget"
    if kind == "depth":
        cap = draw(st.integers(0, max(depths) - 1))
        j = next(i for i in range(n) if depths[node_of[i]] > cap)
        return replace(case, depth=cap), f"draft node {j}: ", "exceeds the depth cap"
    if kind == "root commits":
        commits[0] = ((0, case.tokens[0]),)
        return replace(case, commits=commits), "draft node 0: ", "the root must have"
    if kind == "root parent":
        parents[0] = draw(st.sampled_from([0, 1, -2, None, -1.0, "-1", True]))
        return replace(case, parents=parents), "draft node 0: ", "the root must have"
    cut = draw(st.sampled_from(["parents", "commits", "both"]))
    short = dict(parents=parents[:-1] if cut != "commits" else parents,
                 commits=commits[:-1] if cut != "parents" else commits)
    if cut == "both" or n == 1:
        short = dict(parents=[], commits=[] if cut == "both" else commits)
    return replace(case, **short), "draft: ", "must be equal, non-empty"


def raised(fn, *args):
    with pytest.raises(ValueError) as e:
        fn(*args)
    return str(e.value)


@settings(deadline=None, max_examples=150)
@given(data=st.data())
def test_invalid_draft_same_message(core, data):
    bad, prefix, keyword = corrupt(data, draw_draft(data, min_nodes=2))
    note(f"bad: {bad}")
    got = raised(core.build_tree, *bad.args())
    assert got == raised(PY.build_tree, *bad.args())
    assert got.startswith(prefix) and keyword in got, (got, prefix, keyword)


@pytest.mark.parametrize("entry", [(1, 2, 3), 5, (1,), "ab"])
def test_commit_entries_that_are_not_pairs(core, entry):
    """Unpacking errors are Python's own (not named): same type from both cores."""
    M, args = 9, (np.array([1, 9, 9]), 0, (-1, 0))
    with pytest.raises((TypeError, ValueError)) as want:
        PY.build_tree(*args, ((), ((1, 4), entry)), M, 9, 2, 8, 8)
    with pytest.raises(want.type):
        core.build_tree(*args, ((), ((1, 4), entry)), M, 9, 2, 8, 8)


@pytest.mark.parametrize("p, cs, state, d", [
    (3, ((0, 1),), [9, 9], 1), (-1, ((0, 1),), [9, 9], 1), (0, ((0, 1),), [9, 9], 5),
    (0, (), [9, 9], 1), (0, ((0, 1), (1, 1), (0, 2)), [9, 9], 1), (0, ((2, 1),), [9, 9], 1),
    (0, ((0, 1), (0, 2)), [9, 9], 1), (0, ((0, 9),), [9, 9], 1), (0, ((0, 1.5),), [9, 9], 1),
    (0, ((1, 12),), [9, 9], 1), (0, ((np.int64(0), 1), (1, -1)), [9, 9], 1),
    (None, ((0, 1),), [9, 9], 1), ("0", ((0, 1),), [9, 9], 1), (0.0, ((0, 1),), [9, 9], 1),
    (True, ((0, 1),), [9, 9], 1), (0, ((True, 1),), [9, 9], 1), (0, ((0, False),), [9, 9], 1),
])
def test_check_node_same_message(core, p, cs, state, d):
    args = (2, p, cs, state, d, 9, 10, 2, 3)
    assert raised(core.check_node, *args) == raised(PY.check_node, *args)


@pytest.mark.parametrize("parents, commits, budget", [
    ((), (), 4), ((-1, 0), ((),), 4), ((-1, 0, 0), ((), ((0, 1),), ((1, 1),)), 2),
    ((0,), ((),), 4), ((-1,), (((0, 1),),), 4), ((-1.0,), ((),), 4), ((True,), ((),), 4),
    ((None,), ((),), 4)])
def test_check_shape_same_message(core, parents, commits, budget):
    args = (parents, commits, budget)
    assert raised(core.check_shape, *args) == raised(PY.check_shape, *args)


# ---- walk -----------------------------------------------------------------------------------

def draw_decisions(data, case: Case, states, steps):
    """A decision per row: to a verified child, random (mostly off-tree), or empty."""
    out = {}
    for r in range(len(states)):
        kids = [q for q in range(len(states)) if steps[q] == steps[r] + 1 and all(
            a == b or a == case.mask_id for a, b in zip(states[r], states[q]))]
        kind = data.draw(st.sampled_from(["child", "child", "random", "empty"]))
        if kind == "child" and kids:
            q = data.draw(st.sampled_from(kids))
            d = [(p, t) for p, (a, t) in enumerate(zip(states[r], states[q])) if a != t]
            d = data.draw(st.permutations(d))
        elif kind == "empty":
            d = ()
        else:
            d = data.draw(st.lists(st.tuples(st.integers(0, case.B - 1),
                                             st.integers(0, case.vocab_size)), max_size=3))
        if data.draw(st.booleans()):
            d = tuple((np.int64(p), np.int64(t)) for p, t in d)
        out[r] = tuple(d) if data.draw(st.booleans()) else list(d)
    return out


@settings(deadline=None, max_examples=60)
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


def test_walk_stops_on_empty_and_off_tree(core):
    M = 9
    tree = core.build_tree([M, M], 0, (-1, 0, 1), ((), ((0, 1),), ((1, 2),)), M, 9, 1, 4, 4)
    assert core.walk(tree, {0: ((0, 1),), 1: ((1, 2),), 2: ()}.get) == ([0, 1, 2], ())
    assert core.walk(tree, {0: ((0, 1),), 1: ((1, 3),)}.get) == ([0, 1], ((1, 3),))
    assert core.walk(tree, {0: ((1, 2),)}.get) == ([0], ((1, 2),))
    assert core.walk(tree, {0: []}.get) == ([0], [])


# ---- the two cores agree --------------------------------------------------------------------

@settings(deadline=None, max_examples=40)
@given(data=st.data())
def test_py_and_c_build_equal_trees(ccore, data):
    case = draw_draft(data, max_b=32, max_nodes=64, max_vocab=4)
    want, got = PY.build_tree(*case.args()), ccore.build_tree(*case.args())
    assert len(want) == len(got)
    for name in ["states", "steps", "depths", "node_of"]:
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
    trees = [m.build_tree(root, 3, draft.parents, draft.commits, M, 151_936, 1, 16, 8)
             for m in (PY, ccore)]
    assert [t.node_of.tolist() for t in trees] == [[0, 1, 2, 3, 2]] * 2
    for t, m in zip(trees, (PY, ccore)):
        assert m.walk(t, {0: ((4, 7),), 1: ((5, 8),), 2: ((6, 1),)}.get) == ([0, 1, 2], ((6, 1),))


def test_extension_loaded_when_built():
    """Guard: a built extension in the package directory must be the active core."""
    pkg = Path(spotref.__file__).parent
    built = sorted(pkg.glob("_core*.so")) + sorted(pkg.glob("_core*.pyd"))
    if NO_EXT or not built:
        pytest.skip("no compiled core in the package directory, or SPOTREF_NO_EXTENSIONS set")
    assert spotref.EXTENSION, f"{built[0].name} exists but spotref.EXTENSION is False"
    assert spotref.core_module() is importlib.import_module("spotref._core")
    assert Path(spotref.core_module().__file__).resolve() in [b.resolve() for b in built]
