# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""Draft trees and their verification, compiled: the Cython twin of ``spotref/spec/core.py``.

``spotref/spec/core.py`` is the specification: this module has the same public names, semantics and
contract (checked by the specification's own functions, from ``spotref/checks.py``). Its fast
path tests the contract in C; whatever it refuses it hands back to those checks (a rejected
draft to the pure ``build_tree``), which raise the ``ValueError``, so a message cannot drift. The distinct
states live in one C int64 buffer, indexed by an open-addressing hash table on (incremental
Zobrist hash of the tokens, step), with a full state and step comparison on every hash match.
"""
import numpy as np

from cpython.buffer cimport PyBUF_C_CONTIGUOUS, PyBUF_FORMAT, PyBUF_WRITABLE
from cpython.buffer cimport PyBuffer_Release, PyObject_CheckBuffer, PyObject_GetBuffer
from cpython.long cimport PyLong_AsLongLongAndOverflow
from cpython.number cimport PyNumber_Index
from libc.stdint cimport int32_t, int64_t, uint64_t
from libc.stdlib cimport free, malloc
from libc.string cimport memcpy, memcmp, memset

from spotref.spec import core as _spec
from spotref.spec.checks import (
    LIMIT,
    check_build_args,
    check_decision,
    check_int,
    check_shape,
    check_state,
    check_tree,
)

__all__ = ["LIMIT", "Tree", "build_tree", "walk"]      # as spotref.spec.core's

cdef object _empty = np.empty
cdef object _int64 = np.dtype(np.int64)
cdef object _ndarray = np.ndarray
cdef tuple _ints = (int, np.integer)
cdef tuple _seqs = (tuple, list)
cdef int64_t _LIMIT = LIMIT


# ---- hashing -------------------------------------------------------------------------------

cdef inline uint64_t _mix(uint64_t x) noexcept nogil:
    """splitmix64's finaliser: a bijective scramble of 64 bits."""
    x ^= x >> 30
    x *= 0xBF58476D1CE4E5B9ULL
    x ^= x >> 27
    x *= 0x94D049BB133111EBULL
    return x ^ (x >> 31)


cdef inline uint64_t _zob(Py_ssize_t pos, int64_t tok) noexcept nogil:
    """Zobrist key of token ``tok`` at ``pos``, computed (V is too large for a table).
    A state's hash is the XOR of its positions' keys: a commit updates it in O(1)."""
    return _mix(<uint64_t>tok * 0x9E3779B97F4A7C15ULL + <uint64_t>pos * 0xD6E8FEB86659FD93ULL)


cdef inline size_t _slot_of(uint64_t zh, int64_t step) noexcept nogil:
    """Table slot (before masking) of the state with Zobrist hash ``zh`` at ``step``."""
    return <size_t>_mix(zh ^ (<uint64_t>step * 0xA24BAED4963EE407ULL))


# ---- reading the contract's ints; refusing the rest ------------------------------------------

cdef inline bint _as_i64(object x, int64_t *out) except -1:
    """``x`` into ``out`` when it is an int or numpy integer (not a bool) that fits in int64."""
    cdef int ovf
    if type(x) is not int:
        if type(x) is bool or not isinstance(x, _ints):
            return False
        x = PyNumber_Index(x)
    out[0] = PyLong_AsLongLongAndOverflow(x, &ovf)
    return ovf == 0


cdef inline bint _small(object x, int64_t *out, int64_t lo) except -1:
    """``x`` into ``out`` when it is an int in [lo, LIMIT)."""
    return _as_i64(x, out) and lo <= out[0] < _LIMIT


cdef inline bint _pair(object item, int64_t *pos, int64_t *tok) except -1:
    """``item`` into ``pos``, ``tok`` when it is a tuple or list of two int64 ints."""
    if type(item) is tuple:
        return len(<tuple>item) == 2 and _as_i64((<tuple>item)[0], pos) \
            and _as_i64((<tuple>item)[1], tok)
    return isinstance(item, _seqs) and len(item) == 2 and _as_i64(item[0], pos) \
        and _as_i64(item[1], tok)


cdef inline tuple _seq(object x):
    """``x`` as a tuple when it is a tuple or list, else None."""
    if type(x) is tuple:
        return <tuple>x
    return tuple(x) if isinstance(x, _seqs) else None


cdef int _refuse(object check, tuple args) except -1:
    """Raise the specification's ValueError for input that the fast path refused."""
    check(*args)
    raise AssertionError(f"spotref._core refused what {check.__module__}.{check.__name__} accepts: {args!r}")


cdef bint _get_i64_vector(object obj, Py_buffer *view) except -1:
    """Acquire ``view`` when ``obj`` is a C-contiguous 1-D native int64 buffer (a numpy state)."""
    if not PyObject_CheckBuffer(obj):
        return False
    try:
        PyObject_GetBuffer(obj, view, PyBUF_FORMAT | PyBUF_C_CONTIGUOUS)
    except (BufferError, TypeError, ValueError):
        return False
    if view.ndim == 1 and view.itemsize == 8 and view.format != NULL \
            and (view.format[0] == c'l' or view.format[0] == c'q') and view.format[1] == 0:
        return True
    PyBuffer_Release(view)
    return False


cdef list _root_tokens(object root, Py_buffer *view, int64_t mask, int64_t V):
    """The root as ``check_state`` takes it: None with ``view`` acquired for a C-contiguous
    numpy int64 vector of valid tokens (the decoder's), else the list ``check_state`` makes of
    it (or its ValueError)."""
    cdef const int64_t *s
    cdef Py_ssize_t k, n
    if isinstance(root, _ndarray) and _get_i64_vector(root, view):
        s, n = <const int64_t *>view.buf, view.shape[0]
        if n >= 1:
            for k in range(n):
                if not (0 <= s[k] < V or s[k] == mask):
                    break
            else:
                return None
        PyBuffer_Release(view)
    return check_state("draft root", root, mask, V)


cdef object _array(object shape, const int64_t *src, Py_ssize_t n):
    """A new numpy int64 array of ``shape`` holding ``src[:n]``."""
    cdef Py_buffer view
    arr = _empty(shape, _int64)
    PyObject_GetBuffer(arr, &view, PyBUF_WRITABLE)
    memcpy(view.buf, src, n * sizeof(int64_t))
    PyBuffer_Release(&view)
    return arr


# ---- the tree ------------------------------------------------------------------------------

cdef class Tree:
    """A validated draft, its distinct states flattened for one verify forward (``build_tree``).

    Public attributes as in ``spotref.spec.core.Tree``: states (U, B) and steps (U,), numpy int64
    copies of the C buffers, mask_id, vocab_size, max_set; ``len`` and ``child``, with the same
    contract.
    """
    cdef readonly object states   # (U, B) int64 numpy: the distinct states, row 0 the root
    cdef readonly object steps    # (U,) int64 numpy: the step of each state
    cdef readonly int64_t mask_id     # MASK
    cdef readonly int64_t vocab_size  # a committed token is in [0, vocab_size), not MASK
    cdef readonly int64_t max_set     # commits per node or decision, at most
    cdef Py_ssize_t B             # block length (tokens per state)
    cdef Py_ssize_t U             # distinct states (rows)
    cdef Py_ssize_t cap           # rows allocated (the draft's node count); row cap is scratch
    cdef void *mem                # the one allocation that holds every buffer below
    cdef int64_t *tok             # (cap + 1, B) row-major tokens of each row, then scratch
    cdef int64_t *step            # (cap,) step of each row
    cdef uint64_t *zh             # (cap,) Zobrist hash of each row's tokens (step not mixed in)
    cdef int64_t *node            # (cap,) row of each draft node
    cdef int32_t *slot            # (nslot,) open-addressing table: a row, or -1 when empty
    cdef size_t nslot             # table size, a power of two >= 2 cap

    def __init__(self, *args, **kwargs):
        raise TypeError("Tree is built by build_tree")

    def __dealloc__(self):
        free(self.mem)

    cdef int _alloc(self, Py_ssize_t n, Py_ssize_t B) except -1:
        cdef size_t nslot = 8, wide
        while nslot < <size_t>(2 * n):
            nslot <<= 1
        wide = (<size_t>((n + 1) * B) + 3 * <size_t>n) * sizeof(int64_t)
        self.mem = malloc(wide + nslot * sizeof(int32_t))
        if self.mem == NULL:
            raise MemoryError()
        self.B, self.U, self.cap, self.nslot = B, 0, n, nslot
        self.tok = <int64_t *>self.mem
        self.step = self.tok + (n + 1) * B
        self.zh = <uint64_t *>(self.step + n)
        self.node = <int64_t *>(self.zh + n)
        self.slot = <int32_t *>(self.node + n)
        memset(self.slot, 0xFF, nslot * sizeof(int32_t))
        return 0

    cdef int _built(self) except -1:
        if self.mem == NULL:
            raise TypeError("Tree is built by build_tree")
        return 0

    cdef inline Py_ssize_t _find(self, const int64_t *s, uint64_t zh, int64_t step) noexcept:
        """Row holding tokens ``s`` (hash ``zh``) at ``step``; else -1 - (the free slot)."""
        cdef size_t m = self.nslot - 1
        cdef size_t k = _slot_of(zh, step) & m
        cdef int32_t r
        while True:
            r = self.slot[k]
            if r < 0:
                return -1 - <Py_ssize_t>k
            if self.zh[r] == zh and self.step[r] == step \
                    and memcmp(self.tok + r * self.B, s, self.B * sizeof(int64_t)) == 0:
                return r
            k = (k + 1) & m

    cdef inline uint64_t _hash(self, const int64_t *s) noexcept:
        cdef uint64_t h = 0
        cdef Py_ssize_t k
        for k in range(self.B):
            h ^= _zob(k, s[k])
        return h

    cdef bint _apply(self, tuple items, int64_t *s, uint64_t *zh) except -1:
        """Commit the pairs ``items`` onto row ``s`` (hash ``zh``) in place; False at the first
        that breaks the contract: not two ints, a position outside the block or not masked in
        ``s`` (committed before, or earlier in ``items``), a token outside the vocabulary or MASK."""
        cdef Py_ssize_t k
        cdef int64_t pos = 0, tok = 0, mask = self.mask_id
        for k in range(len(items)):
            if not _pair(items[k], &pos, &tok) or not 0 <= pos < self.B or s[pos] != mask \
                    or not 0 <= tok < self.vocab_size or tok == mask:
                return False
            s[pos] = tok
            zh[0] ^= _zob(pos, mask) ^ _zob(pos, tok)
        return True

    def __len__(self):
        return self.U

    def child(self, row, commits):
        """Row of ``states[row]`` plus the decision ``commits``, at the next step; or -1."""
        cdef int64_t r = 0
        self._built()
        if not _as_i64(row, &r) or not 0 <= r < self.U:
            _refuse(check_int, ("child: row", row, 0, self.U - 1))
        return self._child(r, commits)

    cdef Py_ssize_t _child(self, Py_ssize_t r, object commits) except -2:
        """child() for a valid row: copy it to the scratch row, apply, look up."""
        cdef Py_ssize_t B = self.B, k
        cdef const int64_t *row = self.tok + r * B
        cdef int64_t *s = self.tok + self.cap * B
        cdef uint64_t zh = self.zh[r]
        cdef tuple items = _seq(commits)
        if items is not None and len(items) == 0:         # complete states only: nothing follows
            for k in range(B):
                if row[k] == self.mask_id:
                    self._refuse_decision(r, commits)
            return -1
        if items is None or len(items) > self.max_set:
            self._refuse_decision(r, commits)
        memcpy(s, row, B * sizeof(int64_t))
        if not self._apply(items, s, &zh):
            self._refuse_decision(r, commits)
        return max(self._find(s, zh, self.step[r] + 1), -1)

    cdef int _refuse_decision(self, Py_ssize_t r, object commits) except -1:
        return _refuse(check_decision, (r, commits, self.states[r].tolist(), self.mask_id,
                                        self.vocab_size, self.max_set))


# ---- building ------------------------------------------------------------------------------

def build_tree(root, root_step, parents, commits, mask_id, vocab_size, max_set, budget, depth):
    """Validate a draft and flatten it into a ``Tree``: contract and result as
    ``spotref.spec.core.build_tree``."""
    cdef int64_t step0 = 0, mask = 0, V = 0, S = 0, N = 0, D = 0
    cdef Py_buffer view
    if not (_small(root_step, &step0, 0) and _small(mask_id, &mask, 0) and _small(vocab_size, &V, 1)
            and _small(max_set, &S, 1) and _small(budget, &N, 1) and _small(depth, &D, 0)
            and step0 + D < _LIMIT):
        _refuse(check_build_args, (root_step, mask_id, vocab_size, max_set, budget, depth))
    tokens = _root_tokens(root, &view, mask, V)
    try:
        check_shape(parents, commits, budget)
        return _build(tokens, &view, step0, parents, commits, mask, V, S, D,
                      (root, root_step, parents, commits, mask_id, vocab_size, max_set, budget, depth))
    finally:
        if tokens is None:
            PyBuffer_Release(&view)


cdef Tree _build(list tokens, Py_buffer *view, int64_t step0, parents, commits, int64_t mask,
                 int64_t V, int64_t S, int64_t D, tuple args):
    """The checked root (``view``, or ``tokens``) and the shape-checked draft -> the Tree; the
    first node that breaks the contract is handed to the pure build_tree for its message."""
    cdef tuple ps = _seq(parents), css = _seq(commits)
    cdef Py_ssize_t n = len(ps), i, k, B, r
    cdef int64_t p = 0
    cdef Tree t = Tree.__new__(Tree)
    B = view.shape[0] if tokens is None else len(tokens)
    t._alloc(n, B)
    t.mask_id, t.vocab_size, t.max_set = mask, V, S
    if tokens is None:
        memcpy(t.tok, view.buf, B * sizeof(int64_t))
    else:
        for k in range(B):
            t.tok[k] = tokens[k]
    t.step[0], t.zh[0], t.node[0], t.U = step0, t._hash(t.tok), 0, 1
    t.slot[-1 - t._find(t.tok, t.zh[0], step0)] = 0
    for i in range(1, n):
        if not _as_i64(ps[i], &p) or not 0 <= p < i:
            _refuse(_spec.build_tree, args)
        r = _add_node(t, t.node[p], css[i], D + step0)
        if r < 0:
            _refuse(_spec.build_tree, args)
        t.node[i] = r
    t.states = _array((t.U, B), t.tok, t.U * B)
    t.steps = _array(t.U, t.step, t.U)
    return t


cdef Py_ssize_t _add_node(Tree t, Py_ssize_t prow, object cs, int64_t last) except -2:
    """A node: row ``prow`` plus the commits ``cs``, at most at step ``last``; its row, or -1
    when it breaks the contract."""
    cdef Py_ssize_t B = t.B, found
    cdef int64_t *s = t.tok + t.U * B               # the candidate row (kept if new)
    cdef uint64_t zh = t.zh[prow]
    cdef int64_t step = t.step[prow] + 1
    cdef tuple items = _seq(cs)
    if step > last or items is None or not 1 <= len(items) <= t.max_set:
        return -1
    memcpy(s, t.tok + prow * B, B * sizeof(int64_t))
    if not t._apply(items, s, &zh):
        return -1
    found = t._find(s, zh, step)
    if found >= 0:
        return found
    t.slot[-1 - found] = <int32_t>t.U
    t.step[t.U], t.zh[t.U] = step, zh
    t.U += 1
    return t.U - 1


# ---- acceptance ----------------------------------------------------------------------------

def walk(tree, decide):
    """Accept by state equality. ``decide(row)`` gives the target's decision at a row.

    Contract and result (path, bonus) as ``spotref.spec.core.walk``.
    """
    cdef Tree t
    cdef Py_ssize_t row = 0, nxt
    if not isinstance(tree, Tree):
        _refuse(check_tree, (tree, Tree))
    t = <Tree>tree
    t._built()
    path = [0]
    while True:
        d = decide(row)
        nxt = t._child(row, d)
        if nxt < 0:
            return path, d
        path.append(nxt)
        row = nxt
