# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""Draft trees and their verification, compiled: the Cython twin of ``spotref/core.py``.

``spotref/core.py`` is the specification: this module has the same public names, the same
semantics and the same ``ValueError`` messages (a rejected node is re-checked by a verbatim copy
of ``check_node``, so a message cannot drift). The distinct states live in one C int64 buffer,
indexed by an open-addressing hash table on (incremental Zobrist hash of the tokens, step),
with a full state and step comparison on every hash match.
"""
import numpy as np

from cpython.buffer cimport PyBUF_C_CONTIGUOUS, PyBUF_FORMAT, PyBUF_WRITABLE
from cpython.buffer cimport PyBuffer_Release, PyObject_CheckBuffer, PyObject_GetBuffer
from cpython.long cimport PyLong_AsLongLongAndOverflow
from cpython.number cimport PyNumber_Index, PyNumber_Long
from libc.stdint cimport int32_t, int64_t, uint64_t
from libc.stdlib cimport free, malloc
from libc.string cimport memcpy, memcmp, memset

cdef object _empty = np.empty
cdef object _int64 = np.dtype(np.int64)
cdef tuple _ints = (int, np.integer)


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


# ---- int conversion (the pure module's int/np.integer semantics) ---------------------------

cdef inline bint _as_i64(object x, int64_t *out) except -1:
    """``x`` into ``out`` when it is an int or numpy integer (not a bool) that fits in int64."""
    cdef int ovf
    if type(x) is not int:
        if type(x) is bool or not isinstance(x, _ints):
            return False
        x = PyNumber_Index(x)
    out[0] = PyLong_AsLongLongAndOverflow(x, &ovf)
    return ovf == 0


cdef inline bint _int_i64(object x, int64_t *out) except -1:
    """``int(x)`` into ``out``; False when it does not fit in int64 (errors of int() propagate)."""
    cdef int ovf
    if type(x) is not int:
        x = PyNumber_Long(x)
    out[0] = PyLong_AsLongLongAndOverflow(x, &ovf)
    return ovf == 0


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


cdef object _array(object shape, const int64_t *src, Py_ssize_t n, int64_t sub):
    """A new numpy int64 array of ``shape`` holding ``src[:n] - sub``."""
    cdef Py_buffer view
    cdef Py_ssize_t k
    cdef int64_t *dst
    arr = _empty(shape, _int64)
    PyObject_GetBuffer(arr, &view, PyBUF_WRITABLE)
    dst = <int64_t *>view.buf
    if sub == 0:
        memcpy(dst, src, n * sizeof(int64_t))
    else:
        for k in range(n):
            dst[k] = src[k] - sub
    PyBuffer_Release(&view)
    return arr


# ---- the tree ------------------------------------------------------------------------------

cdef class Tree:
    """A validated draft, its distinct states flattened for one verify forward.

    Public attributes as in ``spotref.core.Tree``: states (U, B), steps (U,), depths (U,),
    node_of (N,), all numpy int64 copies of the C buffers (depths and node_of are made on first
    use: the decoder never reads them); ``len``, ``lookup`` and ``child``. Made only by
    ``build_tree``.
    """
    cdef readonly object states   # (U, B) int64 numpy: the distinct states, row 0 the root
    cdef readonly object steps    # (U,) int64 numpy: the step of each state
    cdef object _depths           # (U,) int64 numpy: steps - steps[0]; None until read
    cdef object _node_of          # (N,) int64 numpy: the row of each draft node; None until read
    cdef Py_ssize_t B             # block length (tokens per state)
    cdef Py_ssize_t U             # distinct states (rows)
    cdef Py_ssize_t N             # draft nodes
    cdef Py_ssize_t cap           # rows allocated (the draft's node count); row cap is scratch
    cdef void *mem                # the one allocation that holds every buffer below
    cdef int64_t *tok             # (cap + 1, B) row-major tokens of each row, then scratch
    cdef int64_t *step            # (cap,) step of each row
    cdef uint64_t *zh             # (cap,) Zobrist hash of each row's tokens (step not mixed in)
    cdef int64_t *node            # (cap,) row of each draft node
    cdef int32_t *seen            # (B,) last node that committed each position (duplicates)
    cdef int32_t *ovf             # (B,) child(): 1 where the scratch holds a token past int64
    cdef bint ovf_dirty           # child(): ovf may hold stale flags (an error interrupted it)
    cdef int32_t *slot            # (nslot,) open-addressing table: a row, or -1 when empty
    cdef size_t nslot             # table size, a power of two >= 2 cap

    def __init__(self, *args, **kwargs):
        raise TypeError("Tree is built by build_tree")

    def __dealloc__(self):
        free(self.mem)

    cdef int _alloc(self, Py_ssize_t n, Py_ssize_t B) except -1:
        cdef size_t nslot = 8, wide, narrow
        while nslot < <size_t>(2 * n):
            nslot <<= 1
        wide = (<size_t>((n + 1) * B) + 3 * <size_t>n) * sizeof(int64_t)
        narrow = (2 * <size_t>B + nslot) * sizeof(int32_t)
        self.mem = malloc(wide + narrow)
        if self.mem == NULL:
            raise MemoryError()
        self.B, self.U, self.cap, self.nslot = B, 0, n, nslot
        self.tok = <int64_t *>self.mem
        self.step = self.tok + (n + 1) * B
        self.zh = <uint64_t *>(self.step + n)
        self.node = <int64_t *>(self.zh + n)
        self.seen = <int32_t *>(self.node + n)
        self.ovf = self.seen + B
        self.slot = self.ovf + B
        memset(self.seen, 0xFF, B * sizeof(int32_t))
        memset(self.ovf, 0, B * sizeof(int32_t))
        memset(self.slot, 0xFF, nslot * sizeof(int32_t))
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

    @property
    def depths(self):
        if self._depths is None and self.mem != NULL:
            self._depths = _array(self.U, self.step, self.U, self.step[0])
        return self._depths

    @property
    def node_of(self):
        if self._node_of is None and self.mem != NULL:
            self._node_of = _array(self.N, self.node, self.N, 0)
        return self._node_of

    def __len__(self):
        return self.U

    def lookup(self, state, step):
        """Row of the verified state equal to (state, step), or -1."""
        cdef int64_t *s = self.tok + self.cap * self.B
        cdef int64_t st
        cdef Py_buffer view
        cdef bint ok = True
        cdef Py_ssize_t k = 0
        if self.mem == NULL:
            raise TypeError("Tree is built by build_tree")
        if _get_i64_vector(state, &view):
            ok = view.shape[0] == self.B
            if ok:
                memcpy(s, view.buf, self.B * sizeof(int64_t))
            PyBuffer_Release(&view)
        else:
            for t in state:                        # int() of every token, as the pure lookup
                if not _int_i64(t, s + k if k < self.B else s) or k >= self.B:
                    ok = False
                k += 1
            ok = ok and k == self.B
        if not _int_i64(step, &st) or not ok:
            return -1
        return max(self._find(s, self._hash(s), st), -1)

    def child(self, row, commits):
        """Row of the state ``states[row]`` plus ``commits`` at the next step, or -1."""
        cdef int64_t r
        if self.mem == NULL:
            raise TypeError("Tree is built by build_tree")
        if not _as_i64(row, &r):
            r = PyNumber_Index(row)                # TypeError, or OverflowError when huge
        if r < 0:
            r += self.U
        if not 0 <= r < self.U:
            raise IndexError(f"index {row} is out of bounds for axis 0 with size {self.U}")
        return self._child(r, commits)

    cdef Py_ssize_t _child(self, Py_ssize_t r, object commits) except -2:
        """child() for a valid row: copy it to the scratch row, apply, look up."""
        cdef Py_ssize_t B = self.B, npairs, k, nbad = 0
        cdef int64_t *s = self.tok + self.cap * B
        cdef uint64_t zh = self.zh[r]
        cdef int64_t pos, tok
        cdef tuple items = commits if type(commits) is tuple else tuple(commits)
        if self.ovf_dirty:
            memset(self.ovf, 0, B * sizeof(int32_t))
        self.ovf_dirty = False
        memcpy(s, self.tok + r * B, B * sizeof(int64_t))
        npairs = len(items)
        for k in range(npairs):
            item = items[k]
            if type(item) is tuple and len(<tuple>item) == 2:
                pos_o, tok_o = (<tuple>item)[0], (<tuple>item)[1]
            else:
                pos_o, tok_o = item
            if not _as_i64(pos_o, &pos):
                pos = PyNumber_Index(pos_o)        # TypeError for a non-index, as a list
            if pos < 0:
                pos += B
            if not 0 <= pos < B:
                raise IndexError("list assignment index out of range")
            if _int_i64(tok_o, &tok):
                if self.ovf[pos]:
                    self.ovf[pos] = 0
                    nbad -= 1
            else:                                  # a token past int64 matches no state
                tok = 0
                if not self.ovf[pos]:
                    self.ovf[pos] = 1
                    self.ovf_dirty = True
                    nbad += 1
            zh ^= _zob(pos, s[pos]) ^ _zob(pos, tok)
            s[pos] = tok
        if nbad:
            return -1
        return max(self._find(s, zh, self.step[r] + 1), -1)


# ---- building ------------------------------------------------------------------------------

def build_tree(root, root_step, parents, commits, mask_id, vocab_size, max_set, budget, depth):
    """Validate a draft and flatten it; a bad node raises ``ValueError`` naming it.

    Arguments and result as ``spotref.core.build_tree``.
    """
    cdef Py_buffer view
    cdef bint have_view = _get_i64_vector(root, &view)
    cdef list root_list = None
    try:
        if not have_view:
            root_list = [int(t) for t in root]
        check_shape(parents, commits, budget)
        return _build(root, root_list, &view, root_step, parents, commits,
                      mask_id, vocab_size, max_set, budget, depth)
    finally:
        if have_view:
            PyBuffer_Release(&view)


cdef Tree _build(root, list root_list, Py_buffer *view, root_step, parents, commits,
                 mask_id, vocab_size, max_set, budget, depth):
    cdef tuple ps = parents if type(parents) is tuple else tuple(parents)
    cdef tuple css = commits if type(commits) is tuple else tuple(commits)
    cdef Py_ssize_t n = min(len(ps), len(css)), i, k, B, prow, r     # zip()'s length
    cdef int64_t step0 = root_step, mask = mask_id, V = vocab_size, S = max_set, D = depth
    cdef int64_t p = 0, d
    cdef Tree t = Tree.__new__(Tree)
    cdef int64_t *row
    B = view.shape[0] if root_list is None else len(root_list)
    t._alloc(n, B)
    row = t.tok
    if root_list is None:
        memcpy(row, view.buf, B * sizeof(int64_t))
    else:
        for k in range(B):
            row[k] = root_list[k]
    t.step[0], t.zh[0], t.node[0], t.U = step0, t._hash(row), 0, 1
    t.slot[-1 - t._find(row, t.zh[0], step0)] = 0
    for i in range(1, n):
        p_o = ps[i]
        if type(p_o) is int or isinstance(p_o, _ints):
            if not _as_i64(p_o, &p) or not 0 <= p < i:
                _reject(t, i, p_o, css[i], -1, 0, mask_id, vocab_size, max_set, depth)
        else:                                      # not an integer: check_node says so
            _reject(t, i, p_o, css[i], -1, 0, mask_id, vocab_size, max_set, depth)
        prow = t.node[p]
        d = t.step[prow] - step0 + 1
        r = _add_node(t, i, prow, d, css[i], mask, V, S, D)
        if r < 0:
            _reject(t, i, p_o, css[i], prow, d, mask_id, vocab_size, max_set, depth)
        t.node[i] = r
    t.states = _array((t.U, B), t.tok, t.U * B, 0)
    t.steps = _array(t.U, t.step, t.U, 0)
    t.N = n
    return t


cdef Py_ssize_t _add_node(Tree t, Py_ssize_t i, Py_ssize_t prow, int64_t d, object cs,
                          int64_t mask, int64_t V, int64_t S, int64_t D) except -2:
    """Node i: parent row ``prow`` plus ``cs`` at depth d; its row, or -1 when invalid."""
    cdef Py_ssize_t B = t.B, npairs, k, found
    cdef const int64_t *ps = t.tok + prow * B       # the parent's tokens
    cdef int64_t *s = t.tok + t.U * B               # the candidate row (kept if new)
    cdef uint64_t zh = t.zh[prow]
    cdef int64_t pos, tok, step = t.step[prow] + 1
    if d > D:
        return -1
    npairs = len(cs)
    if not 1 <= npairs <= S:
        return -1
    cdef tuple items = cs if type(cs) is tuple else tuple(cs)
    memcpy(s, ps, B * sizeof(int64_t))
    for k in range(len(items)):
        item = items[k]
        if type(item) is tuple and len(<tuple>item) == 2:
            pos_o, tok_o = (<tuple>item)[0], (<tuple>item)[1]
        else:
            try:
                pos_o, tok_o = item
            except (TypeError, ValueError):
                return -1                       # check_node raises the same error
        if not _as_i64(pos_o, &pos) or not _as_i64(tok_o, &tok):
            return -1
        if not 0 <= pos < B or ps[pos] != mask or t.seen[pos] == i:
            return -1
        if not 0 <= tok < V or tok == mask:
            return -1
        t.seen[pos] = <int32_t>i
        s[pos] = tok
        zh ^= _zob(pos, mask) ^ _zob(pos, tok)
    found = t._find(s, zh, step)
    if found >= 0:
        return found
    t.slot[-1 - found] = <int32_t>t.U
    t.step[t.U], t.zh[t.U] = step, zh
    t.U += 1
    return t.U - 1


cdef int _reject(Tree t, Py_ssize_t i, p, cs, Py_ssize_t prow, int64_t d,
                 mask_id, vocab_size, max_set, depth) except -1:
    """Re-check a node that failed the fast path with ``check_node``, for its exact error."""
    cdef Py_ssize_t k
    cdef const int64_t *s = t.tok + (prow if prow >= 0 else 0) * t.B
    state = [s[k] for k in range(t.B)]
    check_node(i, p, cs, state, d, mask_id, vocab_size, max_set, depth)
    raise AssertionError(f"spotref._core: draft node {i} failed the fast check only")


# ---- checks: the pure module's own functions (their messages are part of the contract) -----

from spotref.core import check_node, check_shape   # noqa: E402  (re-exported: twin names)


# ---- acceptance ----------------------------------------------------------------------------

def walk(tree, decide):
    """Accept by state equality. ``decide(row)`` gives the target's decision at a row.

    Returns (path, bonus) as ``spotref.core.walk``.
    """
    cdef Tree t
    cdef Py_ssize_t row = 0, nxt
    path = [0]
    t = <Tree?>tree
    while True:
        d = decide(row)
        nxt = t._child(row, d) if d else -1
        if nxt < 0:
            return path, d
        path.append(nxt)
        row = nxt
