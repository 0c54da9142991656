"""Exact decoding and SPOT speculative decoding of a diffusion LM (docs/spec.md sections 1-3).

Both run the same outer loop (``decode``): bind the model to a *target* by its family (docs/spec.md
section 1.1), then per block start from MASK, fill it, and store it. A target is all a decoder
sees of the model: its blocks, ``verify`` (the logits of R states of the current block: one
pass) and ``store`` (a finished block into the context). ``PrefixBinding`` is SDAR's: a prefix
KV cache, blocks at absolute multiples of B, a prompt tail that ends mid-block stays fixed, and
the store is one more pass (B + 1 passes per block under the one-position rule, as SDAR's
generate.py, JetEngine, lmdeploy and sglang count them). ``CanvasBinding`` is LLaDA's and
Dream's: the whole canvas (prompt, then masks), bidirectional, no cache; the store writes the
block into the canvas.

A block is filled by a ``Block``, the step API (docs/spec.md section 7): ``propose`` the block
states to run through the model, ``accept`` their logits, until ``done``. Each round is draft ->
build -> (the caller's) verify forward -> walk by state equality, plus the bonus decision at the
deepest accepted state. Every accepted transition is the target's own decision at that state
with that state's noise, so the committed tokens are those of exact decoding whatever the
drafter proposes; exact decoding is the same ``Block`` with no drafter (the root alone: one
state, one decision per pass).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from functools import partial

import numpy as np
import torch

from spotref.spec.draft import Draft, Drafter, View, apply
from spotref.spec.noise import BlockNoise
from spotref.spec.rules import FAMILIES as RULE_OF
from spotref.spec.rules import DecisionRule


@dataclass
class Result:
    tokens: list  # generated tokens, prompt excluded
    passes: int  # every pass: each verify, and SDAR's prefill and stores
    stats: dict
    trace: object = None  # generate(..., trace=True): the decode's ``spotref.trace.Trace``


@dataclass
class Stats:
    """What a decode measured: the passes (counted by the binding) and, as an observer of its
    ``Block``s (``Block(..., observers=(stats,))``), every round's decisions and times."""

    passes: int = 0
    starts: list = field(default_factory=list)  # (block, step) at each verify pass
    accepted: list = field(default_factory=list)  # decisions per verify pass
    committed: list = field(default_factory=list)  # positions per verify pass
    draft_nodes: list = field(default_factory=list)  # verify batch rows per pass
    trajectory: list = field(default_factory=list)  # (block, step, commits) in commit order
    blocks: list = field(default_factory=list)  # (new tokens, passes: verify, SDAR's store) per decoded block
    carried: int = 0  # lookahead: blocks whose first pass rode in the last verify pass of the block before
    stopped: bool = False  # the last decoded block holds a stop id
    model_s: float = 0.0  # inside the model's forwards
    draft_s: float = 0.0  # inside ``propose``: drafting the tree and building it
    book_s: float = 0.0  # inside ``accept``, the forward left out: the walk and its decisions
    _clock: tuple = field(default=(0.0, 0.0), repr=False)  # (the time of the last event, model_s then)

    def opened(self, block) -> None:
        self._clock = (time.perf_counter(), self.model_s)

    def proposed(self, block, view, draft) -> None:
        t = time.perf_counter()
        self.draft_s += t - self._clock[0]
        self._clock = (t, self.model_s)

    def walked(self, block, tree, logits, taken) -> None:
        t, (then, model_then) = time.perf_counter(), self._clock
        self.book_s += t - then - (self.model_s - model_then)
        self._clock = (t, self.model_s)
        self.starts.append((block.index, int(tree.steps[0])))
        for k, d in enumerate(taken):
            self.trajectory.append((block.index, int(tree.steps[0]) + k, d))
        self.accepted.append(len(taken))
        self.committed.append(sum(len(d) for d in taken))
        self.draft_nodes.append(len(tree))


FAMILIES = tuple(RULE_OF)  # "sdar", "llada", "llada2", "dream": each decides by its own ways (``rules.FAMILIES``)
CANVAS_FAMILIES = ("llada", "dream")  # the whole canvas, no cache: ``CanvasBinding``; SDAR a prefix cache
BLOCK_CAUSAL = ("sdar", "llada2")  # blocks at multiples of the model's B: SDAR's cache, LLaDA2's window


def family(model) -> str:
    """``model.family``; a model without one is SDAR."""
    return getattr(model, "family", "sdar")


class Binding:
    """What a decoder sees of the model bound to one generation (docs/spec.md section 1.1):
    ``blocks``, the (block index, fixed prompt tokens it starts with) of each block to decode;
    ``verify(states (R, bl), one_forward) -> logits (R, bl, V)``, one pass over R states of the
    current block; ``store(block (bl,))``, the finished block into the context. Every forward
    goes through ``_pass``: counted and timed."""

    stats: Stats
    lookahead = carried = False  # a block ending on a drafted row carries the next one's first forward (spec 3)

    def _pass(self, fn, *args):
        t = time.perf_counter()
        out = fn(*args)
        self.stats.model_s += time.perf_counter() - t
        self.stats.passes += not self.carried  # a carried forward rode in the last pass: not a pass
        self.stats.carried, self.carried = self.stats.carried + self.carried, False
        return out


def aligned_blocks(prompt: list, max_new_tokens: int, B: int) -> tuple:
    """SDAR's and LLaDA2's geometry: blocks of ``B`` at absolute multiples of ``B`` -> (the prompt's
    full blocks, [(block index, the fixed prompt tokens it starts with)] of the blocks to decode:
    the prompt tail in the first only)."""
    n_full, n_blocks = len(prompt) // B, -(-(len(prompt) + max_new_tokens) // B)
    return n_full, [(b, prompt[b * B : (b + 1) * B]) for b in range(n_full, n_blocks)]


class PrefixBinding(Binding):
    """SDAR: the model bound to one generation's prefix KV cache. Blocks of B = ``model.block_size``
    sit at absolute multiples of B (the block index: absolute, from position 0): the prompt's
    full blocks are prefilled (one pass), the first decoded block holds the prompt tail, fixed,
    and ``store`` runs a pass. With ``fused_store`` a finished block is not stored by a pass of
    its own: its K/V are computed inside the next block's first verify pass (bit-identical, one
    pass fewer per block; the last block is then never stored)."""

    def __init__(self, model, prompt: list, max_new_tokens: int, stats: Stats, fused_store: bool = False):
        B = model.block_size
        n_full, self.blocks = aligned_blocks(prompt, max_new_tokens, B)
        self.model, self.stats, self.fused, self.pending = model, stats, fused_store, None
        self.block_length = B
        prompt_blocks = torch.tensor(prompt[: n_full * B], dtype=torch.long)  # (n_full * B,)
        self.cache = model.prefill(prompt_blocks) if n_full == 0 else self._pass(model.prefill, prompt_blocks)

    def verify(self, states: np.ndarray, one_forward: bool = False) -> torch.Tensor:
        """states: (R, B) -> logits (R, B, V); ``one_forward``: the rows are a pass at a fixed width
        (``Block.one_forward``), run as one forward. A model used only rows alone needs no keyword."""
        states, kw = torch.from_numpy(states), {"one_forward": True} if one_forward else {}
        if self.pending is None:
            return self._pass(partial(self.model.denoise, **kw), self.cache, states)
        block, self.pending = self.pending, None
        return self._pass(partial(self.model.store_and_denoise, **kw), self.cache, block, states)

    def store(self, block: np.ndarray) -> None:
        if self.fused:
            self.pending = torch.from_numpy(block)
        else:
            self._pass(self.model.store, self.cache, torch.from_numpy(block))


class CanvasBinding(Binding):
    """LLaDA, Dream: the whole canvas, bidirectional, no cache. The canvas is the prompt (P
    tokens), then G = ceil(max_new_tokens / bl) * bl masks; generated block k (the block index,
    from 0) covers canvas positions [P + k * bl, P + (k + 1) * bl): LLaDA's generate.py geometry
    with gen_length = steps = G. Every verify is one pass; ``store`` writes the block into the
    canvas (no pass). ``model(ids)``: (N, L) -> logits (N, L, V), one forward over the N rows;
    ``model.logit_shift``: 0 (logits[:, i] predicts i), or 1 (Dream: logits[:, i] predicts i + 1)."""

    def __init__(self, model, prompt: list, max_new_tokens: int, block_length: int, stats: Stats):
        P, bl = len(prompt), block_length
        G = -(-max_new_tokens // bl) * bl
        self.model, self.stats, self.block_length, self.shift = model, stats, bl, model.logit_shift
        self.blocks = [(k, []) for k in range(G // bl)]  # no prompt token inside a block
        self.canvas = torch.full((P + G,), model.mask_id, dtype=torch.long)  # (L,) L = P + G
        self.canvas[:P] = torch.tensor(prompt, dtype=torch.long)
        self.start = P  # the current block's first canvas position: P + k * bl

    @torch.no_grad()
    def verify(self, states: np.ndarray, one_forward: bool = False) -> torch.Tensor:
        """states: (R, bl) -> logits (R, bl, V): R canvases, each the canvas with the current block
        replaced by a row, run through the model (``one_forward``: one call of all rows; else one
        call per row). Position i is decided by the logits at i - shift, position 0 by its own:
        Dream's shift, ``cat([logits[:, :1], logits[:, :-1]], 1)``, read at the block."""
        bl = self.block_length
        rows = self.canvas.repeat(len(states), 1)  # (R, L)
        rows[:, self.start : self.start + bl] = torch.from_numpy(states)
        read = (torch.arange(self.start, self.start + bl) - self.shift).clamp(min=0)  # (bl,)
        run = lambda ids: self.model(ids)[:, read]  # (n, L) -> (n, bl, V)
        return self._pass(lambda: run(rows) if one_forward else torch.cat([run(row[None]) for row in rows]))

    def store(self, block: np.ndarray) -> None:
        """block: (bl,) written into the canvas; the next block starts after it."""
        self.canvas[self.start : self.start + self.block_length] = torch.from_numpy(block)
        self.start += self.block_length


class WindowBinding(Binding):
    """LLaDA2: its generate's window, no cache. Blocks of B = ``model.block_size`` at absolute
    multiples of B, the first decoded block holding the prompt tail, fixed (as SDAR's); a verify
    runs the whole window so far, the prompt and every block up to the current one, block-causal
    from position 0 (``model.window``), and reads the current block's logits: one pass per
    verify, no prefill and no store pass; ``store`` writes the block into the window."""

    def __init__(self, model, prompt: list, max_new_tokens: int, stats: Stats):
        B = model.block_size
        n_full, self.blocks = aligned_blocks(prompt, max_new_tokens, B)
        self.model, self.stats, self.block_length = model, stats, B
        self.ids = torch.full(((n_full + len(self.blocks)) * B,), model.mask_id, dtype=torch.long)  # (n_blocks B,)
        self.ids[: len(prompt)] = torch.tensor(prompt, dtype=torch.long)
        self.end = (n_full + 1) * B  # the current block's end

    def verify(self, states: np.ndarray, one_forward: bool = False) -> torch.Tensor:
        """states: (R, B) -> logits (R, B, V): R windows, each the window with the current block
        replaced by a row (``one_forward``: one call of all rows; else one call per row)."""
        rows = self.ids[: self.end].repeat(len(states), 1)  # (R, end)
        rows[:, self.end - self.block_length :] = torch.from_numpy(states)
        return self._pass(partial(self.model.window, one_forward=one_forward), rows)

    def store(self, block: np.ndarray) -> None:
        """block: (B,) written into the window; the next block ends B later."""
        self.ids[self.end - self.block_length : self.end] = torch.from_numpy(block)
        self.end += self.block_length


def bind(model, prompt: list, max_new_tokens: int, stats: Stats, fused_store=False, block_length=None) -> Binding:
    """The model's target, chosen by its family; ``block_length``: the canvas families' (None:
    ``model.block_size``; SDAR decodes in its own)."""
    name = family(model)
    if name not in FAMILIES:
        raise ValueError(f"model.family must be one of {', '.join(FAMILIES)}, got {name!r}")
    if name == "sdar":
        return PrefixBinding(model, prompt, max_new_tokens, stats, fused_store)
    if fused_store:
        raise ValueError(f"fused_store: a {name} model has no cache to store a block into (SDAR only)")
    if name == "llada2":
        return WindowBinding(model, prompt, max_new_tokens, stats)
    return CanvasBinding(model, prompt, max_new_tokens, block_length or model.block_size, stats)


class Block:
    """One block decoded round by round: ``propose`` the states to verify, ``accept`` their logits.

    The block owns the decision rule, the noise, the drafter, the tree, the walk and the stale
    logits; the caller owns the model, its context (a prefix cache or the canvas) and batching
    (docs/spec.md section 7). ``index``: the block index the noise is keyed by (SDAR: absolute,
    from position 0; LLaDA, Dream: k, from 0 after the prompt). ``state`` (B,) holds MASK where
    uncommitted (SDAR: a prompt tail stays fixed). ``drafter=None``: exact decoding.
    ``width``: None, or every ``propose`` returns exactly that many rows (the tree's states, then
    copies of the root) and ``one_forward`` is True: the caller runs them as one forward of that
    one shape (docs/spec.md sections 4 and 7).
    Out-of-turn calls (``propose`` twice, ``accept`` before ``propose``) raise ``RuntimeError``;
    bad logits raise ``ValueError``: neither can corrupt the block.
    ``observers``: each is told of the block and of each round after the block has taken it:
    ``opened(block)`` once, ``proposed(block, view, draft)`` at the end of ``propose`` and
    ``walked(block, tree, logits, taken)`` at the end of ``accept`` (``Stats``, and
    ``spotref.trace``'s recorder); they read, and nothing they do reaches a decision.
    """

    def __init__(
        self,
        rule: DecisionRule,
        drafter: Drafter | None,
        core,
        budget: int,
        depth: int,
        index: int,
        state: np.ndarray,
        width: int | None = None,
        observers: tuple = (),
    ):
        self.rule, self.drafter, self.core, self.width = rule, drafter, core, width
        self.budget, self.depth, self.index = budget, depth, index
        self.state = np.array(state, dtype=np.int64)  # (B,) MASK where uncommitted
        self.step = 0  # decisions taken in this block
        self.stale = None  # (B, V) the last pass's logits at its deepest accepted state
        self.passes = 0  # verify forwards run on this block
        self.drafted_complete = False  # the block ended on a row of its last pass (not by the bonus)
        self._decisions = []  # the target's decisions in this block, in order (``decisions``)
        self.noise = rule.block_noise(index)  # g_k of this block, what its decisions read
        # the drafter's own rule and noise: nothing it does reaches a decision
        self._drafter_rule, self._drafter_noise = replace(rule), rule.block_noise(index)
        self._tree = None  # the proposed tree, until its logits are accepted
        self.observers = tuple(observers)
        for observer in self.observers:
            observer.opened(self)

    @property
    def done(self) -> bool:
        return not (self.state == self.rule.mask_id).any()

    @property
    def one_forward(self) -> bool:
        """Whether ``propose()``'s rows are a pass at a fixed width, to run as ONE forward
        (SDAR: ``SDARModel.denoise(cache, rows, one_forward=True)``; a canvas family: one call of
        all rows' canvases); False: each row alone."""
        return self.width is not None

    @property
    def tokens(self) -> np.ndarray:
        """(B,) the block's current state (every position committed once ``done``)."""
        return self.state.copy()

    @property
    def decisions(self) -> tuple:
        """The target's decisions in this block, in order: a tuple of commit tuples, the block's
        own list left out of the caller's reach (clearing a copy cannot change the block)."""
        return tuple(self._decisions)

    def propose(self) -> np.ndarray:
        """(R, B) int64: the distinct block states to verify in one forward (row 0: the current)."""
        if self._tree is not None:
            raise RuntimeError("propose() called twice: accept() the logits of the rows it returned first")
        if self.done:
            raise RuntimeError(f"block {self.index} is done: nothing to propose")
        view = (
            None
            if self.stale is None or self.drafter is None
            else View.of(
                self.state,
                self.step,
                self.index,
                self.stale,
                self._drafter_rule,
                self.budget,
                self.depth,
                [pos for pos, _ in self._decisions[-1]],
                self._drafter_noise,
            )
        )  # the bonus: after the stale pass
        draft = propose(self.drafter, view)  # 1. draft
        max_set = 1 if self.rule.threshold is None else len(self.state)
        limits = (self.rule.mask_id, self.rule.vocab_size, max_set, self.budget, self.depth)
        self._tree = self.core.build_tree(self.state, self.step, draft.parents, draft.commits, *limits)  # 2. build
        for observer in self.observers:
            observer.proposed(self, view, draft)
        return padded(self._tree.states, self.width)

    def accept(self, logits) -> None:
        """logits (R, B, V), float, torch or numpy: the model's output for ``propose()``'s rows."""
        if self._tree is None:
            raise RuntimeError("accept() without propose(): propose() the rows, run them, then accept")
        tree = self._tree
        R = len(tree) if self.width is None else self.width
        logits = checked_logits(logits, (R, len(self.state), self.rule.vocab_size), self.rule.mask_id)[: len(tree)]
        self.state, self.step, self.stale, taken = accept(self.rule, self.core, tree, logits, self.noise)  # 4. walk
        self._tree = None  # only now: logits the rule refuses leave the rows pending
        self._decisions += taken
        self.passes += 1
        self.drafted_complete = self.done and bool((tree.states == self.state).all(1).any())  # lookahead's test
        for observer in self.observers:
            observer.walked(self, tree, logits, taken)


def padded(states: np.ndarray, width: int | None) -> np.ndarray:
    """states (U, B), U <= width -> (width, B): the states, then copies of the first (a copy when
    width is None). The one padding to the width (``Speculator`` checked budget <= width)."""
    if width is None:
        return states.copy()
    return np.concatenate([states, np.repeat(states[:1], width - len(states), 0)])


LOGIT_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)  # what a decision reads


def checked_logits(logits, shape: tuple, mask_id: int) -> torch.Tensor:
    """The caller's logits as a dense float tensor of ``shape`` (R, B, V), detached, each position
    with a finite logit other than MASK's; ``ValueError`` otherwise."""
    if isinstance(logits, np.ndarray):
        logits = torch.from_numpy(checked_array(logits))
    if not isinstance(logits, torch.Tensor):
        raise ValueError(f"logits must be a torch tensor or a numpy array, got {type(logits).__name__}")
    if logits.layout != torch.strided or logits.device.type == "meta":
        raise ValueError(f"logits must be a dense tensor with values, got {logits.layout} on {logits.device}")
    logits = logits.detach()
    if not logits.is_floating_point():
        raise ValueError(f"logits must be floating point, got {logits.dtype}")
    if logits.dtype not in LOGIT_DTYPES:
        raise ValueError(
            f"logits of dtype {logits.dtype}: a decision reads float16, bfloat16, float32 or float64 logits; cast them"
        )
    if tuple(logits.shape) != shape:
        raise ValueError(f"logits of shape {tuple(logits.shape)}, want {shape} (R proposed rows, B, V)")
    if bool(torch.isnan(logits).any()) or bool((logits == float("inf")).any()):
        raise ValueError("logits hold NaN or +inf")
    finite = (~torch.isneginf(logits)).sum(-1)  # (R, B): one pass, no copy
    if bool((finite == 0).any()):
        raise ValueError("logits: a position has no finite logit (all -inf)")
    only_mask = (finite == 1) & ~torch.isneginf(logits[..., mask_id])
    if bool(only_mask.any()):
        r, j = (int(i) for i in torch.nonzero(only_mask)[0])
        raise ValueError(f"logits: row {r}, position {j} has no finite logit but MASK's (MASK is never committed)")
    return logits


def checked_array(logits: np.ndarray) -> np.ndarray:
    """Numpy logits torch can take as they are: float16, float32 or float64 (not float128, which
    torch cannot hold), in native byte order, with no negative stride; ``ValueError`` naming
    what to do otherwise (the values are the caller's to convert: nothing is converted here)."""
    dtype = logits.dtype
    if dtype.kind != "f":
        raise ValueError(f"logits must be floating point, got numpy {dtype}")
    if not dtype.isnative:
        order = "big-endian" if dtype.byteorder == ">" else "little-endian"
        raise ValueError(
            f"logits: a {order} numpy array ({dtype.str}), not this machine's byte order: "
            f"pass logits.astype(logits.dtype.newbyteorder('='))"
        )
    if dtype not in (np.float16, np.float32, np.float64):
        raise ValueError(f"logits of numpy dtype {dtype}: torch holds float16, float32 or float64; cast them")
    if any(stride < 0 for stride in logits.strides):
        raise ValueError(
            f"logits: a numpy array with a negative stride {logits.strides} (a reversed view): "
            f"pass a copy, np.ascontiguousarray(logits)"
        )
    return logits


def fill_block(new_block, target: Binding, index: int, state: np.ndarray) -> np.ndarray:
    """Fill one block through the step API: propose, one pass, accept, until done."""
    block = new_block(index, state, target.stats)
    while not block.done:
        block.accept(target.verify(block.propose(), block.one_forward))  # 3. verify: (R, B, V)
    target.carried = target.lookahead and block.drafted_complete  # its row carries the next block's first pass
    return block.state


def propose(drafter: Drafter | None, view: View | None) -> Draft:
    """The drafter's tree at ``view`` (the root alone at a block's first state: nothing is stale)."""
    if view is None:
        return Draft.root()
    draft = drafter(view)
    if not isinstance(draft, Draft):
        raise TypeError(f"the drafter returned {type(draft).__name__}, not spotref.Draft")
    return draft


def accept(rule, core, tree, logits, noise: BlockNoise):
    """Walk the verified tree by state equality; the bonus decision at the deepest accepted state.

    logits: (U, B, V), one row per tree state; noise: the block's. Returns the new state, its
    step, the stale logits for the next round (those of the deepest accepted state) and the
    decisions taken."""
    decided = {}

    def decide(row):
        decided[row] = rule.decide(logits[row], tree.states[row], noise, int(tree.steps[row]))
        return decided[row]

    path, bonus = core.walk(tree, decide)
    last, taken = path[-1], [decided[r] for r in path if decided[r]]
    return apply(tree.states[last], bonus), int(tree.steps[last]) + 1, logits[last].clone(), taken


@torch.inference_mode()  # no autograd: the kernels and bytes of no_grad, with less bookkeeping per op
def decode(model, prompt, max_new_tokens, stop_ids, fill, stats, fused_store=False, block_length=None, lookahead=False):
    """The outer block loop shared by every decoder and family: ``fill(target, index, state)``
    (``fill_block`` bound to a block factory) decides each block; returns the generated tokens.
    ``block_length``: the canvas families' (None: ``model.block_size``); lookahead: section 3."""
    if max_new_tokens == 0:
        return []
    fused = fused_store or lookahead and family(model) == "sdar"  # SDAR's lookahead stores as the fused store
    target = bind(model, prompt, max_new_tokens, stats, fused, block_length)
    target.lookahead = lookahead
    generated, stops = [], set(stop_ids or ())
    for index, tail in target.blocks:  # tail: the fixed prompt tokens the block starts with
        before = stats.passes
        state = np.full(target.block_length, model.mask_id, dtype=np.int64)  # (bl,)
        state[: len(tail)] = tail
        state = fill(target, index, state)
        new = state[len(tail) :].tolist()
        generated += new
        target.store(state)  # every block, as SDAR and LLaDA
        stats.blocks.append((len(new), stats.passes - before))
        if stops.intersection(new):
            stats.stopped = True  # the block holding it finishes; later blocks never change it
            break
    generated = generated[:max_new_tokens]
    for i, t in enumerate(generated):
        if t in stops:
            return generated[: i + 1]
    return generated
