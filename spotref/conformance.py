"""The conformance suite: is a decoder's output identical to exact decoding?

Reusable by any decoder that follows spotref's model and drafter contracts (docs/spec.md section 7):

    from spotref.conformance import run_conformance    # pip install "spotref[conformance]"
    run_conformance(my_generate)                       # 100 cases; AssertionError on the first bug

``my_generate(model, prompt_ids, max_new_tokens, **kwargs)`` must return an object with
``tokens`` and ``passes`` (``spotref.generate`` is the model). Each Hypothesis example draws a
family (SDAR, LLaDA or Dream) and a random tiny model of it, prompt (SDAR: partial blocks
included), length, block length (the canvas families'), temperature (0 or continuous in
[0.05, 3]), seed (the whole 64-bit range), top-k/top-p (not for LLaDA), threshold, stop ids (one
id or a list), the family's confidence measure, the rule's precision (docs/spec.md section 2;
None, the model's serving precision, included), budget (up to 256), depth, verify width (None:
rows alone; or a fixed width >= budget, exact decoding at that width the reference), SDAR's
``fused_store`` and drafter (confidence, random valid trees, an oracle proposing the true
trajectory, an always-wrong one, near misses of the truth, the SPOT drafter with random
weights, SPOT-Sets included); 10 cases in 11 are aimed at a boundary (a threshold equal to a
confidence that occurs, top-p at a cumulative mass, ties at the top logit, ties between
positions: ``aimed``). The verdict: tokens identical to exact decoding and never more passes
than exact, whatever drafter the decoder uses. ``efficiency=True`` adds a separate check of
spotref's own decoder: it drafts with the suite's drafter and accepts the oracle's rounds in
full. Divergences are reported as "block b, step k, position p: exact t, got t'", and with
``replay_file`` the minimal failing case is written to a JSON file that ``replay_conformance``
reruns. The knobs ``vocab``, ``dtype`` and ``model`` set the toy models' vocabulary and dtype, or
decode with a checkpoint directory's model instead (``cases``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import numbers
import os
import random
import tempfile
from collections import Counter
from functools import partial
from pathlib import Path
from unittest import mock

import numpy as np
import torch

from spotref.api import LOOP, DecodeOptions, Speculator, generate
from spotref.checks import is_array
from spotref.conformance_cases import (  # noqa: F401  (the suite's names, as before the split)
    BLOCK_SIZES,
    DRAFTERS,
    FAMILIES,
    INIT_RANGES,
    MAX_BUDGET,
    MAX_TEMPERATURE,
    MODELS,
    NOT_CASE,
    Case,
    case_from_dict,
    case_to_dict,
    cpu_seeded,
    tiny_config,
)
from spotref.conformance_draws import AIMS, aimed, cases, first_decision, hypothesis, model_sizes  # noqa: F401
from spotref.drafters.order import OrderModel
from spotref.drafters.spot import SpotDrafter
from spotref.files import atomic_write_text
from spotref.spec.checks import check_int
from spotref.spec.decode import BLOCK_CAUSAL
from spotref.spec.draft import Draft, DraftBuilder, View


def first_divergence(exact, got_tokens, block_size: int, prompt_len: int = 0, family: str = "sdar") -> str | None:
    """The first exact commit that ``got_tokens`` disagrees with, or None when identical.

    exact: the ``spotref.generate`` result of exact decoding (its stats hold the trajectory).
    SDAR's block index is absolute (its blocks start at multiples of ``block_size`` from position
    0); a canvas family's is k, its block k the generated tokens [k * bl, (k + 1) * bl)."""
    if list(got_tokens) == list(exact.tokens):
        return None
    return divergence_message(exact, got_tokens, first_difference(exact, got_tokens, block_size, prompt_len, family))


def divergence_message(exact, got_tokens, where: dict | None) -> str:
    """``first_divergence``'s message for tokens that differ, ``where`` their ``first_difference``."""
    if where is None:
        return (
            f"lengths differ: exact {len(exact.tokens)} tokens, got {len(got_tokens)} "
            f"(first {len(exact.tokens)} identical)"
        )
    got = "nothing" if where["got"] is None else where["got"]
    return (
        f"block {where['block']}, step {where['step']}, position {where['position']}: exact {where['exact']}, got {got}"
    )


def first_difference(exact, got_tokens, block_size: int, prompt_len: int = 0, family: str = "sdar") -> dict | None:
    """The first exact decision ``got_tokens`` departs from (``first_divergence``'s), as a dict:
    block, step, the decision's commits ``[[position, token], ...]``, and the first of them that
    differs (position, exact, got: None where ``got_tokens`` ends first); None when none does."""
    offset = prompt_len if family in BLOCK_CAUSAL else 0  # the generated tokens' first position in block 0
    for block, step, commits in exact.stats["trajectory"]:
        for pos, tok in commits:
            i = block * block_size + pos - offset  # index into the generated tokens
            if 0 <= i < len(exact.tokens) and (i >= len(got_tokens) or got_tokens[i] != tok):
                got = int(got_tokens[i]) if i < len(got_tokens) else None
                decision = [[int(p), int(t)] for p, t in commits]
                return dict(block=block, step=step, decision=decision, position=int(pos), exact=int(tok), got=got)
    return None


class Divergence(AssertionError):
    """A decoder's tokens or passes differ from exact decoding's; ``decision``: the first exact
    decision its tokens depart from (``first_difference``), None for a pass count."""

    def __init__(self, message: str, decision: dict | None = None):
        super().__init__(message)
        self.decision = decision


def assert_identical(exact, got_tokens, block_size: int, prompt_len: int = 0, family: str = "sdar"):
    __tracebackhide__ = True  # pytest shows the user's frames and the verdict, not the kit's (docs/spec.md 5.1)
    if list(got_tokens) != list(exact.tokens):
        where = first_difference(exact, got_tokens, block_size, prompt_len, family)
        raise Divergence(divergence_message(exact, got_tokens, where), where)


# --- drafters for the suite ------------------------------------------------------------------


def oracle_drafter(exact, stale_tokens: bool = False):
    """Proposes the true trajectory: a chain of the target's next decisions, under budget and
    depth. stale_tokens: the true positions with the stale coupled tokens instead of the true
    ones (a perfect order drafter: the benchmark's order ceiling)."""
    truth = {(b, k): d for b, k, d in exact.stats["trajectory"]}

    def draft(view):
        n = min(view.depth, view.budget - 1)
        chain, free = [], set(view.masked.tolist())
        while len(chain) < n and (view.block, view.step + len(chain)) in truth:
            step = view.step + len(chain)
            commits = truth[(view.block, step)]
            if not free.issuperset(pos for pos, _ in commits):
                break  # a decoder that left the true trajectory: draft no more
            free.difference_update(pos for pos, _ in commits)
            if stale_tokens:
                commits = tuple((pos, view.coupled_token(pos, step)) for pos, _ in commits)
            chain.append(commits)
        return Draft.chain(chain)

    return draft


def wrong_drafter(exact, vocab_size, mask_id):
    """Proposes, under budget and depth, a chain whose first commit is never the target's."""
    truth = {(b, k): d for b, k, d in exact.stats["trajectory"]}

    def draft(view):
        masked = view.masked.tolist()
        if view.depth == 0 or view.budget < 2 or not masked:
            return Draft.root()
        d = truth.get((view.block, view.step), ())
        p, tok = masked[0], view.coupled_token(masked[0], view.step)
        if d == ((p, tok),):  # the truth: take another token
            tok = next(t for t in range(vocab_size) if t not in (tok, mask_id))
        chain = [((p, tok),)]
        for q in masked[1 : min(view.depth, view.budget - 1)]:  # keep going; all of it is off-path
            chain.append(((q, view.coupled_token(q, view.step + len(chain))),))
        return Draft.chain(chain)

    return draft


NEAR_MISSES = ("true", "early", "late", "minus", "plus", "token", "split")


def near_miss_drafter(exact, seed: int):
    """Valid trees whose edges are near misses of the truth: the true next decision itself, the
    one of the step after (early) or before (late), the true set minus or plus a member, one
    member's token changed, and the true set split over two steps (the right tokens at the
    wrong step). Under the one-position rule only the edits that keep one commit apply."""
    truth = {(b, k): d for b, k, d in exact.stats["trajectory"]}
    rng = random.Random(seed)

    def draft(view):
        V, B, mask = view.rule.vocab_size, len(view.tokens), view.mask_id
        t, sets = DraftBuilder(view.tokens, view.step), view.threshold is not None
        for _ in range(rng.randrange(view.budget)):
            if len(t) >= view.budget:
                break
            p = rng.randrange(len(t))
            masked = [j for j in range(B) if t.states[p][j] == mask]
            if not masked or t.depths[p] >= view.depth:
                continue
            kind = rng.choice(NEAR_MISSES if sets else ("true", "early", "late", "token"))
            step = t.steps[p] + {"early": 1, "late": -1}.get(kind, 0)
            s = [(j, x) for j, x in truth.get((view.block, step), ()) if j in masked]
            if kind == "minus" and len(s) > 1:
                s.pop(rng.randrange(len(s)))
            elif kind == "plus" and len(s) < len(masked):
                j = rng.choice([j for j in masked if j not in dict(s)])
                s.append((j, view.coupled_token(j, t.steps[p])))
            elif kind == "token" and s:
                i = rng.randrange(len(s))
                s[i] = (s[i][0], rng.choice([v for v in range(V) if v not in (mask, s[i][1])] or [s[i][1]]))
            if not s:
                j = rng.choice(masked)
                s = [(j, view.coupled_token(j, t.steps[p]))]
            if kind == "split" and len(s) > 1 and t.depths[p] + 1 < view.depth and len(t) + 2 <= view.budget:
                cut = rng.randrange(1, len(s))
                p = t.add(p, tuple(sorted(s[:cut])))
                s = s[cut:]
            t.add(p, tuple(sorted(s)))
        return t.draft()

    return draft


def spot_drafter(seed: int):
    """The SPOT drafter (SPOT-Sets under the threshold rule) with random weights, set head included."""

    def make(block_size):
        with cpu_seeded(seed):
            om = OrderModel(block_size)
            torch.nn.init.normal_(om.set_head[2].weight, std=3.0)  # not the untrained (zero) head
        return SpotDrafter(om.eval(), strict=False)

    return make


def random_drafter(seed: int):
    """Random valid trees: random parents, positions, set sizes; tokens coupled or random."""
    rng = random.Random(seed)

    def draft(view):
        V, B = view.rule.vocab_size, len(view.tokens)
        t = DraftBuilder(view.tokens, view.step)
        for _ in range(rng.randrange(view.budget)):
            p = rng.randrange(len(t))
            masked = [j for j in range(B) if t.states[p][j] == view.mask_id]
            if not masked or t.depths[p] >= view.depth:
                continue
            k = 1 if view.threshold is None else rng.randint(1, len(masked))
            t.add(p, tuple(sorted((j, random_token(rng, view, j, t.depths[p], V)) for j in rng.sample(masked, k))))
        return t.draft()

    return draft


def random_token(rng, view, j, depth, V):
    if rng.random() < 0.6:
        return view.coupled_token(j, view.step + depth)
    return rng.choice([t for t in range(V) if t != view.mask_id])


def make_drafter(kind: str, exact, case: Case):
    if kind in ("confidence", "confidence-chain"):
        return kind
    if kind == "oracle":
        return oracle_drafter(exact)
    if kind == "wrong":
        return wrong_drafter(exact, case.config.vocab_size, case.config.mask_token_id)
    if kind == "random":
        return random_drafter(case.weights_seed)
    if kind == "near-miss":
        return near_miss_drafter(exact, case.weights_seed)
    if kind == "spot":
        return spot_drafter(case.weights_seed)(case.block_size)
    raise ValueError(f"unknown suite drafter {kind!r}")


# --- the suite's drafters for an outside decoder ----------------------------------------------


def drafter_adapter(model, drafter, **generate_kwargs):
    """The drafter ``run_conformance`` hands ``generate_fn`` (a name such as "confidence", a
    callable ``drafter(view) -> Draft`` or a SPOT drafter), as a function of plain arrays for a
    decoder that keeps its own state (docs/spec.md section 5.1):

        propose = drafter_adapter(model, drafter, **kwargs)   # kwargs: generate_fn's, as given
        draft = propose(state, step, block, stale_logits, unseen)
        # draft.parents: node 0 = -1 (the current state), then each node's parent;
        # draft.commits: per node, ((position, token), ...), () for the root

    state: (B,) ints, MASK where uncommitted; step: the decisions already taken in the block;
    block: its index (SDAR: absolute from position 0; a canvas family: k, from 0 after the
    prompt); stale_logits: (B, V), the last pass's logits at the state it decided from; unseen:
    the positions committed after that pass (the last round's bonus decision). At a block's first
    state nothing is stale: propose the root alone (``Draft.root()``). The draft never changes
    what is exact: verify its states and accept by state equality (section 3). generate_kwargs:
    ``spotref.generate``'s (a ``DecodeOptions``; those of its decode loop, ``api.LOOP``: stop_ids,
    fused_store, trace, ignored), checked as it checks them."""
    options = DecodeOptions(**generate_kwargs, drafter=drafter)
    spec = Speculator.for_model(model, **options.kwargs(leave_out=LOOP))

    def propose(state, step: int, block: int, stale_logits, unseen=()) -> Draft:
        state = np.asarray(state, dtype=np.int64)
        stale = torch.as_tensor(stale_logits)
        rule = dataclasses.replace(spec.rule)  # the drafter's own copy: nothing it does reaches a decision
        view = View.of(state, step, block, stale, rule, spec.budget, spec.depth, list(unseen))
        return spec.round_drafter(view)  # budget="auto": the drafter its measurement cut, as generate's

    return propose


# --- the check --------------------------------------------------------------------------------


def check_case(case: Case, generate_fn, efficiency: bool = False) -> dict:
    """Run exact decoding and ``generate_fn`` on one case; assert the verdict. Returns stats.

    The verdict (always): tokens identical to exact decoding, and never more passes. efficiency:
    also assert that ``generate_fn`` drafts with the suite's drafter and accepts the oracle's
    rounds in full (``check_oracle_accepted``); a correct decoder that drafts with a drafter of
    its own fails it, so it is off unless asked for."""
    __tracebackhide__ = True  # pytest shows the user's frames and the verdict, not the kit's (docs/spec.md 5.1)
    exact, got, tokens, passes = run_case(case, generate_fn)
    assert_identical(exact, tokens, case.block_size, len(case.prompt), case.family)
    if passes > exact.passes:
        raise Divergence(f"{passes} passes, exact decoding needed {exact.passes}")
    blocks = len(exact.stats["blocks"])
    if passes < (-(-blocks // 2) if case.kwargs.get("lookahead") else blocks):  # each block decoded is verified
        # at least once; under lookahead a block's first pass may ride in the last pass of the block before
        raise Divergence(f"{passes} passes for {blocks} decoded blocks: each needs a verify pass")
    if efficiency and case.drafter == "oracle":
        check_oracle_accepted(exact, got, min(case.kwargs["depth"], case.kwargs["budget"] - 1))
    outcome = {"passes": passes, "exact_passes": exact.passes, "tokens": len(exact.tokens), "drafted": drafted(got)}
    return {**outcome, "carried": carried(got)}


def carried(got) -> bool:
    """Whether ``got`` says (``stats["carried"]``, as ``spotref.generate`` reports it) that some
    block's first pass rode in the last verify pass of the block before (lookahead)."""
    stats = getattr(got, "stats", None)
    return isinstance(stats, dict) and bool(stats.get("carried"))


def drafted(got) -> bool | None:
    """Whether some verify pass of ``got`` held a drafted row besides the current state (its
    ``stats["draft_nodes"]``, as ``spotref.generate`` reports); None when it does not say."""
    nodes = got.stats.get("draft_nodes") if isinstance(getattr(got, "stats", None), dict) else None
    return None if nodes is None else any(n > 1 for n in nodes)


def run_case(case: Case, generate_fn) -> tuple:
    """(exact decoding's result, ``generate_fn``'s result, its tokens as a list of ints, its
    passes) on one case; a result of the wrong type is a ``TypeError`` (``checked_result``)."""
    model = case.model()
    kw = dict(case.kwargs)
    budget, depth = kw.pop("budget"), kw.pop("depth")
    exact = generate(model, case.prompt, case.max_new_tokens, **kw)
    drafter = make_drafter(case.drafter, exact, case)
    got = generate_fn(model, case.prompt, case.max_new_tokens, drafter=drafter, budget=budget, depth=depth, **kw)
    return (exact, got, *checked_result(got))


class ResultTypeError(TypeError):
    """``generate_fn`` returned what is not a result (``checked_result``): a failed conformance."""


def checked_result(got) -> tuple:
    """(tokens, passes) of ``generate_fn``'s result: an object with ``tokens``, a 1-D list, tuple,
    array or tensor of int token ids, and ``passes``, an int (``spotref.generate``'s ``Result``);
    ``TypeError`` naming what it returned otherwise."""
    tokens, passes = getattr(got, "tokens", None), getattr(got, "passes", None)
    if tokens is None or passes is None:
        raise ResultTypeError(
            f"generate_fn returned a {type(got).__name__}, not a result with tokens and passes: return "
            f"spotref.Result(tokens, passes, stats), as spotref.generate does"
        )
    if is_array(tokens) and tokens.ndim == 1:
        tokens = tokens.tolist()
    if not isinstance(tokens, (list, tuple)) or not all(
        isinstance(t, numbers.Integral) and not isinstance(t, bool) for t in tokens
    ):
        raise ResultTypeError(
            f"generate_fn's result.tokens must be a 1-D list, tuple, array or tensor of int token ids, got {tokens!r}"
        )
    if isinstance(passes, bool) or not isinstance(passes, numbers.Integral) or passes < 0:
        raise ResultTypeError(f"generate_fn's result.passes must be an int >= 0 (the forward passes), got {passes!r}")
    return [int(t) for t in tokens], int(passes)


def probe_case(family: str = "sdar") -> Case:
    """The one small case ``run_conformance`` runs first: ``family`` (SDAR by default), 8 tokens,
    blocks of 2, the confidence drafter, every option at its plainest."""
    config = tiny_config(family, 8, 7, 2, hidden=16, layers=1, heads=2, kv=1, tied=False, init=0.3)
    plain = DecodeOptions(confidence="filtered", precision="auto", budget=4, depth=2)
    kwargs = plain.kwargs(leave_out=(*NOT_CASE, "lookahead"))  # lookahead: only with run_conformance's knob
    return Case(config, 0, [1, 2, 3], 4, "confidence", kwargs, family)


def check_oracle_accepted(exact, got, d_eff: int):
    """Each round of the oracle commits min(D + 1, remaining) decisions (1 at a block's start):
    read from ``got.stats["starts"]`` and ``["accepted"]`` (one entry per verify pass)."""
    stats = getattr(got, "stats", None)
    if not isinstance(stats, dict) or "starts" not in stats or "accepted" not in stats:
        raise AssertionError(
            'the efficiency check reads result.stats["starts"] and ["accepted"] (per verify pass: '
            "(block, step) and decisions accepted), as spotref.generate reports: this result has none"
        )
    remaining = {}
    for b, k, _ in exact.stats["trajectory"]:
        remaining[b] = max(remaining.get(b, 0), k + 1)  # decisions in block b
    for (b, k), n in zip(got.stats["starts"], got.stats["accepted"]):
        want = 1 if k == 0 else min(d_eff + 1, remaining[b] - k)
        assert n == want, f"oracle round at block {b}, step {k}: accepted {n}, want {want}"


MAX_EXAMPLES = 100  # the default number of cases, everywhere (run_conformance, spotref conform)


def run_conformance(
    generate_fn,
    max_examples: int = MAX_EXAMPLES,
    database=None,
    strategy=None,
    progress=None,
    efficiency: bool = False,
    batch_invariance: bool = False,
    seed: int | None = None,
    replay_file=None,
    vocab=None,
    dtype=None,
    model=None,
    families=None,
    lookahead: bool = False,
    **settings,
) -> Counter:
    """Run the suite on ``generate_fn``; raises AssertionError (with the minimal case) on failure.

    The verdict is exactness: tokens identical to exact decoding and never more passes, whatever
    drafter ``generate_fn`` uses. efficiency (default False): also require that it drafts with the
    suite's drafter and accepts every round of the oracle drafter in full (it reads
    ``result.stats["starts"]`` and ``["accepted"]``, as ``spotref.generate`` reports them): a
    check of spotref's own decoder, not of exactness. batch_invariance (default False): the
    separate check for decoders that batch rows: every case has a verify width W and a model
    whose logits depend on the rows of a forward (``BatchSensitive``), so only a decoder that
    runs every pass as one forward of W rows, as exact decoding at width W, stays exact.
    lookahead (default False): every case, exact decoding too, with ``lookahead=True`` (docs/spec.md 3).

    ``max_examples``: an int >= 1 (else ``ValueError``). A ``generate_fn`` not callable, or whose
    result on a small case (``probe_case``) has no ``tokens`` and ``passes``, is a ``TypeError``.

    Needs Hypothesis (``pip install "spotref[conformance]"``). database: where Hypothesis keeps
    failing examples; None (default) keeps nothing (no ``.hypothesis/`` in the working
    directory); a path or an ``ExampleDatabase`` opts in. Other keyword arguments go to
    ``hypothesis.settings``; the first bug found alone is reported (``report_multiple_bugs=False``).

    Returns what was covered (``coverage``'s keys; "cases": the distinct cases checked): what
    happened, not what was asked ("decoded": cases with a token; "drafted", "drafter=NAME": some
    verify pass held a drafted row, read from ``result.stats["draft_nodes"]``). strategy: the
    cases (default ``cases()``); vocab, dtype, model, families: its knobs. progress: a callable
    given a line at every tenth of the cases and the verdict; default None. seed: an int makes the run
    reproducible (the same cases in the same order); None, a fresh random run. replay_file: where
    a failure writes its minimal case (``save_replay``; the exception's note and ``replay_file``
    attribute name it; ``replay_conformance`` reruns it); None (default), nowhere."""
    __tracebackhide__ = True  # pytest shows the user's frames and the verdict, not the kit's (docs/spec.md 5.1)
    check_arguments(generate_fn, max_examples)
    knobs = dict(vocab=vocab, dtype=dtype, model=model, families=families)
    strategy = chosen_strategy(strategy, batch_invariance, lookahead, **knobs)
    run_case(probe_case((families or FAMILIES)[0]), generate_fn)  # a wrong result named now, not after shrinking
    seen, database, failed = Counter(), example_database(database), []
    check = partial(check_case, generate_fn=generate_fn, efficiency=efficiency)
    conformance = hypothesis_test(check, seen, strategy, max_examples, database, progress, settings, failed)
    if seed is not None:
        conformance = hypothesis().seed(check_int("seed", seed, 0))(conformance)
    with replaying(replay_file, failed, efficiency), _storage(database is None), _no_local_constants():
        conformance()
    if progress:
        progress(f"conformance: passed, {seen['cases']} cases identical to exact decoding {happened(seen)}")
    return seen


def check_arguments(generate_fn, max_examples) -> None:
    """``max_examples`` an int >= 1 (``ValueError``), Hypothesis importable, ``generate_fn`` callable
    (``TypeError``): named before any case runs."""
    check_int("max_examples", max_examples, 1)
    hypothesis()
    if not callable(generate_fn):
        raise TypeError(f"generate_fn must be a callable like spotref.generate, got {type(generate_fn).__name__}")


def chosen_strategy(strategy, batch_invariance: bool, lookahead: bool = False, **knobs):
    """``strategy``, or the default ``cases`` with ``knobs`` (vocab, dtype, model; ``ValueError``
    when they come with a strategy of the caller's, or name a bad value); each case with
    ``lookahead=True`` when ``lookahead``."""
    if strategy is None:
        strategy = cases(batch=batch_invariance, **{k: v for k, v in knobs.items() if k != "families" or v is not None})
    elif any(v is not None for v in knobs.values()):
        raise ValueError(
            "vocab, dtype, model and families set the default strategy: give them to cases(), not with strategy"
        )
    on = lambda case: dataclasses.replace(case, kwargs={**case.kwargs, "lookahead": True})  # exact decoding's too
    return strategy.map(on) if lookahead else strategy


@contextlib.contextmanager
def replaying(replay_file, failed: list, efficiency: bool):
    """On an exception, the last failing case of ``failed`` (the minimal one: Hypothesis runs it
    last) written to ``replay_file`` (``save_replay``), named in the exception's note and its
    ``replay_file`` attribute; nothing written when ``replay_file`` is None or no case failed."""
    try:
        yield
    except Exception as e:
        if replay_file is not None and failed:
            e.replay_file = save_replay(replay_file, failed[-1][0], failed[-1][1], efficiency)
            e.add_note(f"the minimal case is in {e.replay_file}: replay_conformance(generate_fn, that file) reruns it")
        raise


def hypothesis_test(check, seen: Counter, strategy, max_examples: int, database, progress, settings: dict, failed):
    """The Hypothesis test of ``run_conformance``: ``check(case)`` on each case drawn, its
    coverage added to ``seen``; each failing case and its exception appended to ``failed``."""
    h = hypothesis()
    settings = {"report_multiple_bugs": False, **settings}
    health = [h.HealthCheck.too_slow, h.HealthCheck.data_too_large]

    @h.settings(max_examples=max_examples, deadline=None, database=database, suppress_health_check=health, **settings)
    @h.given(strategy)
    def conformance(case):
        __tracebackhide__ = True  # pytest shows the user's frames and the verdict, not the kit's (docs/spec.md 5.1)
        try:
            outcome = check(case)
        except Exception as e:
            failed.append((case, e))
            raise
        seen.update(coverage(case, outcome))
        if progress and seen["cases"] % max(max_examples // 10, 1) == 0:
            progress(f"conformance: {seen['cases']} / {max_examples} cases, each identical to exact decoding")

    return conformance


REPLAY_FILE = "conformance-replay.json"  # conformance_test's replay file, in the working directory


def conformance_test(generate_fn, replay_file=REPLAY_FILE, **kwargs):
    """A pytest test of ``generate_fn``, for your CI: in a test file,
    ``test_my_decoder = conformance_test(my_generate)`` (kwargs: ``run_conformance``'s, e.g.
    ``max_examples=200, seed=0``). A failure writes its minimal case to ``replay_file`` (default
    ``conformance-replay.json`` in the working directory; None: none), named in the report."""

    def test_conformance():
        try:
            run_conformance(generate_fn, replay_file=replay_file, **kwargs)
        except AssertionError as verdict:  # the verdict alone: the kit's frames say nothing of the decoder
            raise verdict.with_traceback(None) from None

    return test_conformance


# --- the replay file --------------------------------------------------------------------------

REPLAY_FORMAT = "spotref conformance replay"
REPLAY_VERSION = 1


def save_replay(path, case: Case, failure: BaseException, efficiency: bool = False) -> Path:
    """Write ``case`` and how it failed to the JSON file ``path`` (atomically); returns the path.

    The file holds the case (``case_to_dict``: the model, prompt, length, drafter and options,
    their seed included), ``failure`` (the message), ``first_difference`` (the first exact
    decision the decoder's tokens depart from: block, step, the decision's commits, the
    position, the exact token and the one got; null for a pass count or a raise) and
    ``efficiency`` (whether that check was asked for)."""
    doc = dict(
        format=REPLAY_FORMAT,
        version=REPLAY_VERSION,
        failure=f"{type(failure).__name__}: {failure}" if not isinstance(failure, AssertionError) else str(failure),
        first_difference=getattr(failure, "decision", None),
        efficiency=bool(efficiency),
        **case_to_dict(case),
    )
    return atomic_write_text(Path(path), json.dumps(doc, indent=1) + "\n")


def load_replay(path) -> tuple[Case, dict]:
    """(the case, the whole document) of a replay file ``save_replay`` wrote; ``ValueError``
    naming the file and what is wrong (missing, not JSON, not a replay file, a bad field)."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"replay file {str(path)!r}: no such file")
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"replay file {str(path)!r} is not JSON: {e}") from None
    if not isinstance(doc, dict) or doc.get("format") != REPLAY_FORMAT:
        raise ValueError(f"replay file {str(path)!r}: not a conformance replay file (no format {REPLAY_FORMAT!r})")
    if doc.get("version") != REPLAY_VERSION:
        raise ValueError(
            f"replay file {str(path)!r}: version {doc.get('version')!r}, this spotref reads {REPLAY_VERSION}"
        )
    try:
        return case_from_dict(doc, "replay file"), doc
    except ValueError as e:
        raise ValueError(f"{e} (in {str(path)!r})") from None


def replay_conformance(generate_fn, path, efficiency: bool | None = None) -> dict:
    """Rerun the one case of the replay file ``path`` on ``generate_fn`` (``check_case``):
    AssertionError when it still differs from exact decoding, else the outcome (passes, exact
    passes, tokens, drafted). efficiency: None, as the file says."""
    case, doc = load_replay(path)
    return check_case(case, generate_fn, doc["efficiency"] if efficiency is None else efficiency)


def example_database(database):
    """Hypothesis' example database for ``database``: a path opens a directory of examples."""
    if isinstance(database, (str, os.PathLike)):
        from hypothesis.database import DirectoryBasedExampleDatabase

        return DirectoryBasedExampleDatabase(os.fspath(database))
    return database


def happened(seen: Counter) -> str:
    """What the checked cases did, for the verdict line."""
    return f"({seen['decoded']} decoded a token, {seen['drafted']} drafted)"


@contextlib.contextmanager
def _storage(private: bool):
    """With ``private``, Hypothesis' other files (its cache of source constants) go to a
    temporary directory, not to ``.hypothesis/`` in the working directory."""
    if not private or os.environ.get("HYPOTHESIS_STORAGE_DIRECTORY"):
        yield
        return
    from hypothesis import configuration

    before = vars(configuration).get("__hypothesis_home_directory")
    with tempfile.TemporaryDirectory(prefix="spotref-hypothesis-") as tmp:
        configuration.set_hypothesis_home_dir(tmp)
        try:
            yield
        finally:
            configuration.set_hypothesis_home_dir(before)


@contextlib.contextmanager
def _no_local_constants():
    """Hypothesis draws some numbers from the constants in the source of the local modules the
    process has loaded, so one seed drew other cases after other imports; the kit's runs draw
    without them (an internal of Hypothesis: where it is not there, nothing is changed)."""
    try:
        from hypothesis.internal.conjecture import providers
        from hypothesis.internal.constants_ast import Constants
    except ImportError:
        yield
        return
    cache = getattr(getattr(providers, "CONSTANTS_CACHE", None), "cache", None)
    if not hasattr(providers, "_get_local_constants") or not hasattr(cache, "clear"):
        yield
        return
    cache.clear()  # the values it drew from before, the local constants among them
    empty = Constants()
    with mock.patch.object(providers, "_get_local_constants", lambda: empty):
        try:
            yield
        finally:
            cache.clear()


def coverage(case: Case, outcome: dict) -> list[str]:
    """The coverage keys of ``case`` given ``check_case``'s ``outcome`` (see ``run_conformance``)."""
    B, kw = case.block_size, case.kwargs
    T = kw["temperature"]
    if case.family not in BLOCK_CAUSAL:
        prompt = "canvas"  # no prompt token inside a block
    else:
        prompt = "partial-prompt-block" if len(case.prompt) % B else "whole-prompt-blocks"
    drafted = outcome["drafted"]
    happened = ["decoded"] if outcome["tokens"] else []
    if drafted is None:
        happened.append("drafting-unreported")
    elif drafted:
        happened += ["drafted", f"drafter={case.drafter}"]
    return [
        "cases",
        *happened,
        f"aim={case.aim or 'none'}",
        f"family={case.family}",
        "experts" if hasattr(case.config, "num_experts") else "dense",
        "T=0" if T == 0 else "T<=1" if T <= 1 else "T>1",
        f"precision={kw['precision']}",
        "budget>64" if kw["budget"] > 64 else "budget<=64",
        "rows" if kw.get("width") is None else "fixed-width",
        "threshold" if kw["threshold"] is not None else "one-position",
        prompt,
        "top-k/top-p" if kw["top_k"] or kw["top_p"] else "no-filter",
        f"confidence={kw['confidence']}",
        f"model={case.dtype or 'float32'}" if case.checkpoint is None else "model=checkpoint",
        "stop=one-id" if isinstance(kw.get("stop_ids"), numbers.Integral) else "stop=list",
        *(["fused-store"] if kw.get("fused_store") else []),
        *(["lookahead"] if kw.get("lookahead") else []),
        *(["carried"] if outcome.get("carried") else []),
    ]
