"""A gallery of lossy decoders the conformance suite must catch, and correct ones it must pass.

Each lossy decoder is ``spotref.generate`` with one detail changed the way an implementer
plausibly gets it wrong (issue 50): a comparison at a boundary, a tie-break, a precision, the
noise's key, the walk, the stop rule, the geometry. ``LOSSY`` are caught by the default run
(``run_conformance``), ``BATCH_LOSSY`` by the batch-invariance check; ``CORRECT`` are written
differently (or draft with a drafter of their own) and must never be flagged.
tests/exactness/test_mutants.py runs them; benchmarks/mutant_gallery.py times each catch.
"""

from __future__ import annotations

import contextlib
from dataclasses import replace
from functools import partial
from unittest import mock

import numpy as np
import torch

import spotref
from spotref.spec import decode, rules
from spotref.spec.noise import BlockNoise

# --- the decision rule, written out -----------------------------------------------------------


def decide(rule, logits, state, noise, step, over=torch.gt, highest=False):
    """``DecisionRule.decide`` written out, with the threshold's comparison ``over`` and the
    fallback's tie-break (lowest position, or ``highest``) as parameters."""
    masked = np.flatnonzero(state == rule.mask_id)
    if len(masked) == 0:
        return ()
    x, c = rule.drawn(logits[torch.as_tensor(masked)], masked, noise, step)
    if rule.threshold is not None and bool(over(c, rule.threshold).any()):
        chosen = torch.nonzero(over(c, rule.threshold))[:, 0].tolist()
    else:
        best = c.max()
        chosen = [int(torch.nonzero(c == best)[-1 if highest else 0, 0])]
    return tuple((int(masked[i]), int(x[i])) for i in chosen)


def decide_in_d(rule, logits, state, noise, step):
    """``decide`` with ``c > tau`` as torch compares the confidences in D with the Python float
    tau: tau rounded to D first (the spec compares exactly)."""
    D = rule.dtype(logits)
    return decide(rule, logits, state, noise, step, over=lambda c, t: c.to(D) > t)


def filters(z, top_k, top_p, k_ties=True, p_within=torch.le, dream=False):
    """SDAR's (or Dream's) top-k / top-p written out: ``k_ties`` keeps every entry tied with
    the k-th, ``p_within(mass before, p)`` keeps an entry under top-p."""
    order = torch.sort(z, dim=-1, descending=True, stable=True).indices
    ranked = z.gather(1, order)
    keep = torch.ones_like(z, dtype=torch.bool)
    if dream and top_p is not None and top_p < 1:  # Dream: top-p first, then top-k of the rest
        keep[:, 1:] = p_within(torch.cumsum(torch.softmax(ranked, -1), -1)[:, :-1], top_p)
    if top_k is not None and top_k < z.shape[-1]:
        survivors = ranked.masked_fill(~keep, -torch.inf)
        kth = survivors[:, top_k - 1 : top_k]
        keep &= survivors >= kth if k_ties else torch.arange(z.shape[-1]) < top_k
    if not dream and top_p is not None:
        p = torch.softmax(ranked.masked_fill(~keep, -torch.inf), -1)
        keep[:, 1:] &= p_within(torch.cumsum(p, -1)[:, :-1], top_p)
    return z.masked_fill(~torch.zeros_like(keep).scatter(1, order, keep), -torch.inf)


def deciding(**how):
    """``decide`` with ``how`` as a method (a ``partial`` would not bind the rule)."""
    return lambda rule, *args: decide(rule, *args, **how)


def patched(*patches, base=None):
    """``spotref.generate`` (or ``base``) run under ``patches``: (object, attribute, value) each."""

    def generate_fn(model, prompt, n, **kw):
        with contextlib.ExitStack() as stack:
            for obj, name, value in patches:  # a dict (rules.FAMILIES): its entry
                patch = (
                    mock.patch.dict(obj, {name: value})
                    if isinstance(obj, dict)
                    else mock.patch.object(obj, name, value)
                )
                stack.enter_context(patch)
            return (base or spotref.generate)(model, prompt, n, **kw)

    return generate_fn


def llada2_filters(z, top_k, top_p, **variant):
    """LLaDA2's top-k / top-p written out: SDAR's, top-p skipped at p >= 1."""
    return filters(z, top_k, top_p if top_p is not None and top_p < 1 else None, **variant)


def decoder(decide_fn=decide, **variant):
    """spotref.generate with the rule's decision and filters replaced by the written-out ones."""
    written = {"sdar": partial(filters, **variant), "dream": partial(filters, dream=True, **variant)}
    return patched(
        (rules.DecisionRule, "decide", decide_fn),
        *family_patches(filter={**written, "llada2": partial(llada2_filters, **variant)}),
    )


def family_patches(**changes):
    """Patches of ``rules.FAMILIES``: ``changes`` maps a ``Family`` field to {family: value}."""
    names = {name for values in changes.values() for name in values}
    return [
        (rules.FAMILIES, name, replace(rules.FAMILIES[name], **{k: v[name] for k, v in changes.items() if name in v}))
        for name in sorted(names)
    ]


# --- the rule's numbers -----------------------------------------------------------------------

DRAWN = rules.DecisionRule.drawn


def redrawn(change):
    """The rule's ``drawn`` with ``change(rule, logits, x, c) -> (x, c)`` applied after it."""

    def drawn(rule, logits, positions, noise, step):
        return change(rule, logits, *DRAWN(rule, logits, positions, noise, step))

    return (rules.DecisionRule, "drawn", drawn)


def raw_argmax(rule, logits, x, c):
    """T = 0: the token is the argmax of the raw logits (MASK excluded), not of p in D."""
    if rule.temperature > 0:
        return x, c
    raw = logits.double().clone()
    raw[:, rule.mask_id] = -torch.inf
    x = raw.argmax(-1)
    return x, rule.probs(logits).gather(1, x[:, None])[:, 0].double()


def unfiltered(rule, logits, x, c):
    """The confidence under softmax(L / T), whatever ``confidence`` asks (SDAR's rule)."""
    if rule.family != "sdar":
        return x, c
    return x, torch.softmax(rule.scaled(logits), -1).gather(1, x[:, None])[:, 0].double()


def float32_for_bf16(dtype):
    def patched_dtype(rule, logits):
        d = dtype(rule, logits)
        return torch.float32 if d == torch.bfloat16 else d

    return patched_dtype


class PerOpTorch:
    """torch as the rule sees it, but softmax is exp(z - max) / sum, each operation rounded to
    z's dtype (``torch.softmax`` rounds once)."""

    def __getattr__(self, name):
        return getattr(torch, name)

    @staticmethod
    def softmax(z, dim=-1):
        e = torch.exp(z - z.max(dim, keepdim=True).values)
        return e / e.sum(dim, keepdim=True)


def log_in_the_rules_dtype(rule, z, p):
    """The draw over ``log p`` taken in D (bf16, say), not float64 (SDAR's, LLaDA2's and Dream's rules)."""
    p = torch.softmax(z, -1) if p is None else p
    return p.log().double() if rule.temperature > 0 else p.double()


def log_softmax_in_float64(rule, logits, positions, noise, step):
    """The draw over ``log_softmax(z)`` in float64, not the log of ``p`` rounded to D (SDAR's rule)."""
    p = torch.softmax(rule.filtered(logits), -1)
    y = torch.log_softmax(rule.filtered(logits).double(), -1) if rule.temperature > 0 else p.double()
    x = rule.sample(y, positions, noise, step)
    unfiltered = rule.confidence == "unfiltered" and (rule.top_k, rule.top_p) != (None, None)
    q = torch.softmax(rule.scaled(logits), -1) if unfiltered else p
    return x, q.gather(1, x[:, None])[:, 0].double()


FILTERED = rules.DecisionRule.filtered


def filter_before_temperature(rule, logits):
    """z = filter(L) / T: the filter on the unscaled logits (SDAR's and Dream's)."""
    if rule.family == "llada":  # no filter, no division
        return FILTERED(rule, logits)
    z = rules.DecisionRule.rounded(rule, logits)
    f = rules.dream_filter if rule.family == "dream" else rules.filter_top_k_top_p
    z = f(z, rule.top_k, rule.top_p)
    return z / rule.temperature if rule.temperature > 0 else z


def no_top_p_above(t):
    """T >= t: a fast path that applies top-k and forgets top-p (SDAR's and Dream's filters)."""

    def fast_filtered(rule, logits):
        fast = rule.temperature >= t and rule.top_p is not None
        return FILTERED(replace(rule, top_p=None) if fast else rule, logits)

    return (rules.DecisionRule, "filtered", fast_filtered)


# --- the noise's key --------------------------------------------------------------------------


def noise_keyed(key):
    """``BlockNoise`` whose (seed, block, step) is ``key(seed, block, step, B)``'s."""

    class Keyed(BlockNoise):
        def __call__(self, step, device="cpu"):
            seed, block, k = key(self.seed, self.block, step, self.shape[0])
            return BlockNoise(seed, block, *self.shape, self.form)(k, device)

    return (rules, "BlockNoise", Keyed)


# --- the walk ---------------------------------------------------------------------------------


def child_commits(tree, row: int, child: int):
    """The commits from ``states[row]`` to ``states[child]`` when child is one step below, else None."""
    if int(tree.steps[child]) != int(tree.steps[row]) + 1:
        return None
    a, b = tree.states[row], tree.states[child]
    diff = np.flatnonzero(a != b)
    if len(diff) == 0 or not all(a[j] == tree.mask_id for j in diff):
        return None
    return tuple((int(j), int(b[j])) for j in diff)


def walked(decide_at, bonus_at=None):
    """``decode.accept`` with the walk's decision ``decide_at(rule, tree, logits, noise, row,
    d)`` (d: the target's own) and the bonus decision ``bonus_at(rule, tree, logits, noise,
    last)`` (default: the target's own at the last accepted row)."""

    def accept(rule, core, tree, logits, noise):
        decided = {}

        def target(row):
            return rule.decide(logits[row], tree.states[row], noise, int(tree.steps[row]))

        def walk_decide(row):
            decided[row] = decide_at(rule, tree, logits, noise, row, target(row))
            return decided[row]

        path, bonus = core.walk(tree, walk_decide)
        last = path[-1]
        if bonus_at is not None:
            bonus = decided[last] = bonus_at(rule, tree, logits, noise, last)
        taken = [decided[r] for r in path if decided[r]]
        return decode.apply(tree.states[last], bonus), int(tree.steps[last]) + 1, logits[last].clone(), taken

    return (decode, "accept", accept)


def first_edge_trusted(rule, tree, logits, noise, row, d):
    """At the root, the first drafted child is taken as the target's decision."""
    drafted = child_commits(tree, 0, 1) if row == 0 and len(tree) > 1 else None
    return drafted or d


def position_only(rule, tree, logits, noise, row, d):
    """A drafted child committing the decision's positions is accepted, whatever its tokens."""
    positions = sorted(p for p, _ in d)
    for child in range(row + 1, len(tree)):
        commits = child_commits(tree, row, child)
        if commits and sorted(p for p, _ in commits) == positions:
            return commits
    return d


def noise_of_the_pass(rule, tree, logits, noise, row, d):
    """Every row of a pass decided with the noise of the pass's first step."""
    return rule.decide(logits[row], tree.states[row], noise, int(tree.steps[0]))


def bonus_from_last_row(rule, tree, logits, noise, last):
    """The bonus decision read from the logits of the tree's last row (often a rejected one)."""
    return rule.decide(logits[len(tree) - 1], tree.states[last], noise, int(tree.steps[last]))


# --- the outer loop ---------------------------------------------------------------------------


def stop_excluded(model, prompt, n, stop_ids=None, **kw):
    """The stop id itself left out of the output."""
    got = spotref.generate(model, prompt, n, stop_ids=stop_ids, **kw)
    stops = {stop_ids} if isinstance(stop_ids, int) else set(stop_ids or ())
    tokens = got.tokens[:-1] if got.tokens and got.tokens[-1] in stops else got.tokens
    return replace(got, tokens=tokens)


def no_stop_at_block_end(model, prompt, n, stop_ids=None, **kw):
    """Decodes every block, then cuts at the stop id: the same tokens, more passes."""
    got = spotref.generate(model, prompt, n, **kw)
    stops = {stop_ids} if isinstance(stop_ids, int) else set(stop_ids or ())
    cut = next((i + 1 for i, t in enumerate(got.tokens) if t in stops), len(got.tokens))
    return replace(got, tokens=got.tokens[:cut])


def whole_blocks(model, prompt, n, block_length=None, **kw):
    """max_new_tokens rounded up to the end of its last block: no cut inside it."""
    B = block_length or model.block_size
    P = len(prompt) if decode.family(model) == "sdar" else 0
    return spotref.generate(model, prompt, -(-(P + n) // B) * B - P, block_length=block_length, **kw)


def empty_prefill_counted(model, prompt, n, **kw):
    """SDAR: a prefill pass counted when the prompt holds no whole block (none ran)."""
    got = spotref.generate(model, prompt, n, **kw)
    bumped = decode.family(model) == "sdar" and len(prompt) < model.block_size and n > 0
    return replace(got, passes=got.passes + bumped)


def ignores_width(model, prompt, n, width=None, **kw):
    """Runs every pass's rows alone, whatever the width asked: batch-dependent logits."""
    return spotref.generate(model, prompt, n, **kw)


def wrong_above_budget(limit, lossy):
    """``lossy`` for budgets above ``limit``, spotref.generate below."""

    def generate_fn(model, prompt, n, budget=16, **kw):
        return (lossy if budget > limit else spotref.generate)(model, prompt, n, budget=budget, **kw)

    return generate_fn


class UnshiftedBinding(decode.CanvasBinding):
    """Dream's logit shift ignored: position i read from the logits at i."""

    def __init__(self, *args, **kw):
        super().__init__(*args, **kw)
        self.shift = 0


def llada_gumbel_on_l_over_t(rule, z, p):
    """LLaDA's token as a Gumbel-max over ``L / T`` rounded to D (equal to its ``exp(L) / (-log u)
    ** T`` in exact arithmetic), not its float64 quotient; the noise is then Gumbel, added."""
    return (z / rule.temperature).double() if rule.temperature > 0 else z.double()


def dream_top_p_at_one(z, top_k, top_p):
    """Dream's filters with top-p applied at p = 1 too (Dream skips it unless p < 1)."""
    if top_p is not None and top_p >= 1:
        z = rules.filter_top_k_top_p(z, None, top_p)
    return rules.dream_filter(z, top_k, top_p)


def sdar_top_p_skipped_at_one(z, top_k, top_p):
    """SDAR's filters with top-p skipped at p = 1 (SDAR's generate.py does; spotref's rule applies it)."""
    return rules.filter_top_k_top_p(z, top_k, None if top_p is not None and top_p >= 1 else top_p)


STEP_OFF = noise_keyed(lambda s, b, k, B: (s, b, k + 1))

LOSSY = {
    "threshold >= for >": decoder(deciding(over=torch.ge)),
    "ties to the highest position": decoder(deciding(highest=True)),
    "top-p < for <=": decoder(p_within=torch.lt),
    "top-k drops ties with the k-th": decoder(k_ties=False),
    "T = 0 as the argmax of the raw logits": patched(redrawn(raw_argmax)),
    "confidence unfiltered under top-k / top-p": patched(redrawn(unfiltered)),
    "float32 for bf16": patched((rules.DecisionRule, "dtype", float32_for_bf16(rules.DecisionRule.dtype))),
    "softmax rounded per operation": patched((rules, "torch", PerOpTorch())),
    "filtering before the temperature": patched((rules.DecisionRule, "filtered", filter_before_temperature)),
    "fast path wrong for T >= 0.5 (no top-p)": patched(no_top_p_above(0.5)),
    "noise per pass": patched(walked(noise_of_the_pass)),
    "step counter off by one": patched(STEP_OFF),
    "step counter not reset per block": patched(noise_keyed(lambda s, b, k, B: (s, b, k + b * B))),
    "32-bit seed": patched(noise_keyed(lambda s, b, k, B: (s & 0xFFFFFFFF, b, k))),
    "block index from a hard-coded block size of 32": patched(noise_keyed(lambda s, b, k, B: (s, b * B // 32, k))),
    "trusting the first drafted edge": patched(walked(first_edge_trusted)),
    "accepting on position only": patched(walked(position_only)),
    "bonus decision from a rejected row's logits": patched(walked(lambda *a: a[-1], bonus_from_last_row)),
    "wrong only for budgets > 64": wrong_above_budget(64, patched(STEP_OFF)),
    "no stop at block end": no_stop_at_block_end,
    "stop id left out": stop_excluded,
    "no cut at max_new_tokens": whole_blocks,
    "an empty prompt's prefill counted as a pass": empty_prefill_counted,
    "Dream's logit shift ignored": patched((decode, "CanvasBinding", UnshiftedBinding)),
    # issue 63: the "draw" aim (a seed where a ruled-out reading flips a token) and "top-p-one"
    "log p from the unrounded softmax (log_softmax in float64)": patched(
        (rules.DecisionRule, "drawn", log_softmax_in_float64)
    ),
    "Dream's top-p applied at p = 1": patched(*family_patches(filter={"dream": dream_top_p_at_one})),
    "log p in the rule's dtype, not float64": patched(
        *family_patches(score=dict.fromkeys(("sdar", "dream", "llada2"), log_in_the_rules_dtype))
    ),
}

BATCH_LOSSY = {"ignoring width (rows alone)": ignores_width}

# Lossy, caught by the default run at some seeds only (benchmarks/mutant_gallery.py --only runs
# them; docs/reliability.md gives each one's rate at seeds 0-4): not in LOSSY, whose test runs
# each at one fixed seed.
CANDIDATES = {
    "threshold rounded to the dtype (a D tensor against tau)": decoder(decide_in_d),
    "LLaDA's draw as a Gumbel-max on L / T in D": patched(
        *family_patches(score={"llada": llada_gumbel_on_l_over_t}, noise={"llada": None})
    ),
    "SDAR's top-p skipped at p = 1": patched(*family_patches(filter={"sdar": sdar_top_p_skipped_at_one})),
}


# --- correct decoders written differently -----------------------------------------------------


def own_drafter(model, prompt, n, drafter=None, **kw):
    """Correct, but drafts with the confidence-chain drafter whatever the suite offers."""
    return spotref.generate(model, prompt, n, drafter="confidence-chain", **kw)


def no_drafter(model, prompt, n, drafter=None, budget=None, depth=None, **kw):
    """Correct: exact decoding, one row per pass (at the width asked), whatever the suite offers."""
    return spotref.generate(model, prompt, n, **kw)


CORRECT = {
    "written-out rule and filters": decoder(),
    "drafts with its own drafter": own_drafter,
    "exact decoding, no drafter": no_drafter,
}
