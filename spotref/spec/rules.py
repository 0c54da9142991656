"""The target's decision at a state (docs/spec.md section 2): which masked positions to commit, with which tokens.

A decision is a pure function of the logits ``L[B, V]`` at the state and of the noise ``g_k``
of the state's step, so any decoder that reaches the same state reaches the same decision. It
is taken in a stated dtype ``D`` (docs/spec.md section 2), by default the logits' own
(``precision="auto"``), as SDAR's generate.py does (``probs = softmax(logits)`` in the model's
dtype; SDAR-8B is served in bf16). One formula for every ``D``, float64 included:

* the scores ``z = filter(L / T)`` (``filter(L)`` at T = 0) in ``D`` (the logits rounded to
  ``D`` first): MASK's logit at -inf before anything else, then top-k (every entry tied with the
  k-th kept, as SDAR's ``top_k_logits``) and top-p (``filter_top_k_top_p``, as SDAR's
  generate.py applies them);
* the probabilities ``p = softmax(z)`` in ``D``;
* the token: ``T == 0``: ``argmax_v p[v]``; ``T > 0``: the Gumbel-max draw
  ``argmax_v (log p[v] + g_k[v])`` with ``log`` in float64 (a draw from ``p``);
* its confidence ``c = p[x]``, a ``D`` number: the probability of the token under the filtered,
  renormalised distribution it was drawn from, as SDAR's ``x0_p``; ``confidence="unfiltered"``
  takes ``softmax(L / T)[x]`` instead, as lmdeploy's and SGLang's unmasking steps do (the two
  agree without top-k / top-p; docs/spec.md section 9 compares the decoders);
* one-position rule: the single most confident masked position;
  threshold rule: every masked position with ``c > tau``, else the single most confident.

In bf16 a confident model's probabilities mostly round to exactly 1, so the decision is usually
a tie: ties in confidence go to the lowest position, ties in tokens to the lowest id
(``torch.topk``'s order among ties is implementation-defined and never used).

The rule holds parameters only; the noise of a block is a ``spotref.spec.noise.BlockNoise`` that
whoever decides owns and passes in. Every other place that samples a coupled token, its
runner-up or a confidence (the view, the drafters, the recorders) calls ``scores``, ``sample``,
``runner_up`` and ``confidences`` here.

Families (docs/spec.md sections 2.2, 2.3): the formula above is SDAR's. LLaDA's generate.py and
Dream's ``sample_tokens`` draw, filter and measure confidence their own ways; each family's ways
are one ``Family`` of ``FAMILIES`` (its filter, its scores, its confidence, its noise), and
``DecisionRule.drawn`` is written once over them. The rest (D, MASK at -inf, the one-position and
threshold rules, the ties) is shared, so the ``Block``, the drafters and the recorders take any
family's rule unchanged.

All maths runs on the logits' device. A decision is a tuple of ``(position, token)`` pairs
sorted by position: the form of ``Draft.commits`` and of the state-equality check.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from functools import partial
from typing import Callable

import numpy as np
import torch

from spotref.spec.noise import BlockNoise, gumbel_of

Commits = tuple  # tuple[tuple[int, int], ...], sorted by position
DTYPES = {"float64": torch.float64, "float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
PRECISIONS = ("auto", *DTYPES)  # "auto": the logits' dtype
SERVED = ("decision_precision", "torch_dtype", "dtype")  # config keys naming the serving precision, first found
ALIASES = {"bf16": "bfloat16", "fp16": "float16", "half": "float16", "fp32": "float32", "float": "float32"}


def precision_name(value) -> str | None:
    """The canonical name of the precision a config's ``torch_dtype``, ``dtype`` or
    ``decision_precision`` names: a float dtype by its name or an alias (``"bf16"``,
    ``"torch.bfloat16"``, ``"half"``: ``ALIASES``) as ``DTYPES`` names it, ``"auto"`` as itself;
    None for anything else (a string naming no float type, a non-string)."""
    if not isinstance(value, str):
        return None
    name = value.removeprefix("torch.")
    name = ALIASES.get(name, name)
    return name if name in PRECISIONS else None


@dataclass
class DecisionRule:
    """Decision parameters of one generation; ``family`` names whose formula decides (``FAMILIES``)."""

    mask_id: int
    vocab_size: int
    block_size: int
    temperature: float = 0.0
    seed: int = 0
    top_k: int | None = None
    top_p: float | None = None
    threshold: float | None = None
    confidence: str | None = None  # the family's confidence measure; None: its default (the first)
    precision: str = "auto"  # the dtype decisions are taken in: see the module docstring
    family: str = "sdar"  # "sdar", "llada", "llada2" or "dream": see the module docstring

    def __post_init__(self):
        if self.family not in FAMILIES:
            raise ValueError(f"family must be one of {tuple(FAMILIES)}, got {self.family!r}")
        measures = FAMILIES[self.family].confidences
        self.confidence = measures[0] if self.confidence is None else self.confidence
        if self.confidence not in measures:
            raise ValueError(f"confidence must be one of {measures}, got {self.confidence!r}")
        if self.precision not in PRECISIONS:
            raise ValueError(f"precision must be one of {PRECISIONS}, got {self.precision!r}")
        FAMILIES[self.family].check(self)

    # --- the decision ---------------------------------------------------------------------

    def decide(self, logits: torch.Tensor, state: np.ndarray, noise: BlockNoise, step: int) -> Commits:
        """logits: (B, V) at ``state`` (B,), MASK where uncommitted, at ``step`` of the block whose
        noise is ``noise`` -> the decision's commits."""
        masked = np.flatnonzero(state == self.mask_id)
        if len(masked) == 0:
            return ()
        rows = logits[torch.as_tensor(masked, device=logits.device)]  # (M, V)
        x, c = self.drawn(rows, masked, noise, step)  # (M,), (M,)
        x, chosen = x.tolist(), self.chosen(c).tolist()
        return tuple((int(masked[i]), x[i]) for i in chosen)

    def drawn(self, logits: torch.Tensor, positions, noise: BlockNoise, step: int) -> tuple:
        """(tokens, their confidences) (M,), (M,) of rows ``logits: (M, V)`` at block ``positions``:
        one filter and one softmax of the rows, then the family's draw and confidence."""
        family = FAMILIES[self.family]
        z = self.filtered(logits)  # (M, V) in D
        p = torch.softmax(z, -1)  # (M, V) in D
        x = self.sample(family.score(self, z, p), positions, noise, step)
        return x, family.measure(self, logits, p, x)

    def chosen(self, c: torch.Tensor) -> torch.Tensor:
        """c (M,) float64, the confidences of the masked positions in ascending order -> the
        indices into them committed (step 4 of docs/spec.md section 2): every ``c > tau`` under
        the threshold rule, else the first maximum (the lowest position)."""
        if self.threshold is not None and bool((c > self.threshold).any()):  # exact comparison
            return torch.nonzero(c > self.threshold)[:, 0]
        return c.argmax()[None]  # first maximum: the lowest position

    # --- its parts, shared by the families ------------------------------------------------

    def dtype(self, logits: torch.Tensor) -> torch.dtype:
        """D: the dtype the rule decides ``logits`` in (``precision``, or the logits' own)."""
        if self.precision != "auto":
            return DTYPES[self.precision]
        if logits.dtype not in DTYPES.values():
            raise ValueError(
                f"logits of dtype {logits.dtype}: precision='auto' decides in "
                f"{', '.join(DTYPES)}; name one as precision"
            )
        return logits.dtype

    def block_noise(self, block: int) -> BlockNoise:
        """A fresh cache of the noise g_k of ``block`` under this rule's seed (LLaDA: its divisor)."""
        form = FAMILIES[self.family].noise
        form = gumbel_of if form is None else partial(form, temperature=self.temperature)
        return BlockNoise(self.seed, block, self.block_size, self.vocab_size, form)

    def rounded(self, logits: torch.Tensor) -> torch.Tensor:
        """logits: (M, V) -> L in D (a copy), with MASK at -inf."""
        z = logits.to(self.dtype(logits), copy=True)
        z[:, self.mask_id] = -torch.inf
        return z

    def scaled(self, logits: torch.Tensor) -> torch.Tensor:
        """logits: (M, V) -> L / T (L at T = 0, and for LLaDA, whose T enters the draw only) in
        D, with MASK at -inf."""
        z = self.rounded(logits)
        if not FAMILIES[self.family].divides:
            return refuse_overflow(z, logits, "logits", self.temperature)
        return refuse_overflow(
            z / self.temperature if self.temperature > 0 else z, logits, "logits / T", self.temperature
        )

    def filtered(self, logits: torch.Tensor) -> torch.Tensor:
        """logits: (M, V) -> z (M, V) in D: ``scaled`` with the family's top-k / top-p applied."""
        return FAMILIES[self.family].filter(self.scaled(logits), self.top_k, self.top_p)

    # --- the same numbers, for the drafters and the recorders -----------------------------

    def scores(self, logits: torch.Tensor) -> torch.Tensor:
        """logits: (M, V) -> (M, V) float64, what the step's noise perturbs in the draw."""
        return FAMILIES[self.family].score(self, self.filtered(logits), None)

    def perturbed(self, y: torch.Tensor, positions, noise: BlockNoise, step: int) -> torch.Tensor:
        """Scores y (M, V) perturbed by the step's noise at ``positions`` (a copy of y at T = 0,
        where ``noise`` is not read): ``y + g`` (LLaDA: ``y / d``)."""
        if self.temperature == 0:
            return y.clone()
        g = noise(step, y.device)[torch.as_tensor(positions, device=y.device)]
        return y / g if FAMILIES[self.family].noise else y + g

    def sample(self, y: torch.Tensor, positions, noise: BlockNoise, step: int) -> torch.Tensor:
        """Tokens (M,) of scores ``y: (M, V)`` at block ``positions`` under step's noise."""
        return self.perturbed(y, positions, noise, step).argmax(-1)

    def runner_up(self, y: torch.Tensor, positions, noise: BlockNoise, step: int):
        """(tokens, runner-up tokens) (M,): the best and second best of the perturbed scores."""
        y = self.perturbed(y, positions, noise, step)
        x = y.argmax(-1)
        y[torch.arange(len(x), device=y.device), x] = -torch.inf
        return x, y.argmax(-1)

    def tokens(self, logits: torch.Tensor, positions, noise: BlockNoise, step: int) -> torch.Tensor:
        """Sampled tokens (M,) of rows ``logits: (M, V)`` at block ``positions`` under step's noise."""
        return self.sample(self.scores(logits), positions, noise, step)

    def probs(self, logits: torch.Tensor) -> torch.Tensor:
        """(M, V) in D: the distribution confidences are read from (unfiltered: softmax(L / T))."""
        z = self.scaled(logits) if self.confidence == "unfiltered" else self.filtered(logits)
        return torch.softmax(z, -1)

    def confidences(self, logits: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """c (M,) float64: the family's confidence of tokens ``x`` (M,) at rows ``logits``."""
        return FAMILIES[self.family].measure(self, logits, torch.softmax(self.filtered(logits), -1), x)


def filter_top_k_top_p(z: torch.Tensor, top_k: int | None, top_p: float | None) -> torch.Tensor:
    """z: (M, V) scaled logits -> the same with filtered-out entries at -inf.

    top-k keeps the k largest entries and every entry tied with the k-th, as SDAR's
    ``top_k_logits``; top-p then keeps, of the survivors in descending order, every entry whose
    renormalised mass strictly before it is at most p (so at least one), as SDAR's generate.py
    applies them, in z's dtype; ties in the order go to the lower index."""
    if top_k is None and top_p is None:
        return z
    order = torch.sort(z, dim=-1, descending=True, stable=True).indices  # (M, V)
    keep = torch.ones_like(z, dtype=torch.bool)  # in sorted order
    if top_k is not None and top_k < z.shape[-1]:
        kth = z.gather(1, order[:, top_k - 1 : top_k])  # (M, 1)
        keep = z.gather(1, order) >= kth  # the top k and every tie with the k-th
    if top_p is not None:  # over the top-k survivors
        p = torch.softmax(z.gather(1, order).masked_fill(~keep, -torch.inf), -1)
        before = torch.cumsum(p, -1)[:, :-1]  # mass strictly before each entry
        keep[:, 1:] &= before <= top_p
    kept = torch.zeros_like(keep).scatter(1, order, keep)
    return z.masked_fill(~kept, -torch.inf)


def refuse_overflow(
    z: torch.Tensor, logits: torch.Tensor, what: str, temperature: float, fix: str = "decide in a wider precision"
) -> torch.Tensor:
    """z, the scores ``what`` made from ``logits``, as it is; ``ValueError`` where they overflowed."""
    if bool(torch.isposinf(z).any()) or bool(torch.isnan(z).any()):
        raise ValueError(f"{what} overflow {z.dtype} (T = {temperature}, largest logit {float(logits.max())}): {fix}")
    return z


PIECE = 2**14  # entries per pow call: a multiple of every vector width, below ATen's grain (2**15)


def divisor(u: torch.Tensor, temperature: float) -> torch.Tensor:
    """LLaDA's noise of uniforms u (B, V): ``(-log u) ** T`` float64, what ``exp(L)`` is divided by
    (generate.py's ``add_gumbel_noise``, its ``torch.rand_like`` replaced by u).

    The CPU's pow is vectorised but for the last few entries of each thread's share, which take
    the scalar pow, whose last bit can differ; so pow runs on pieces of a fixed size, each on
    one thread, and the bits do not depend on the thread count."""
    e = (-torch.log(u)).flatten()  # (B * V,)
    return torch.cat([piece**temperature for piece in e.split(PIECE)]).view(u.shape)


def dream_filter(z: torch.Tensor, top_k: int | None, top_p: float | None) -> torch.Tensor:
    """z: (M, V) scaled logits -> Dream's ``top_p_logits`` then ``top_k_logits``, the entries
    filtered out at -inf (Dream writes ``finfo(D).min``: the same probabilities, 0).

    top-p (only for p < 1): in descending order (ties: the lower id first), keep an entry while
    the softmax mass of the entries before it is at most p (the first always kept), in z's dtype;
    top-k then drops every entry below the k-th largest (ties with it kept)."""
    if top_p is not None and top_p < 1:
        ranked = torch.sort(z, dim=-1, descending=True, stable=True)
        before = torch.cumsum(torch.softmax(ranked.values, -1), -1)[:, :-1]  # (M, V - 1) mass up to each
        drop = torch.zeros_like(z, dtype=torch.bool)  # in sorted order
        drop[:, 1:] = before > top_p
        z = z.masked_fill(torch.zeros_like(drop).scatter(1, ranked.indices, drop), -torch.inf)
    if top_k is not None:
        kth = z.topk(min(top_k, z.shape[-1]), -1).values[:, -1:]  # (M, 1)
        z = z.masked_fill(z < kth, -torch.inf)
    return z


# --- the families: what each decoder does its own way (docs/spec.md sections 2.1-2.3) ---------


def gumbel_score(rule, z, p):
    """SDAR's and Dream's scores: ``log p`` in float64 (``p`` itself at T = 0, drawn without noise);
    ``p = softmax(z)`` in D, made here where the caller has none."""
    p = torch.softmax(z, -1) if p is None else p
    return p.double().log() if rule.temperature > 0 else p.double()


def exp_score(rule, L, p):
    """LLaDA's scores: ``exp(L)`` in float64, divided by ``(-log u) ** T`` in the draw (``L`` at T = 0)."""
    if rule.temperature == 0:
        return L.double()
    return refuse_overflow(
        L.double().exp(), L, "exp(logits)", rule.temperature, "LLaDA's draw needs logits below 709.78"
    )


def token_probability(rule, logits, p, x):
    """SDAR's and LLaDA's confidence ``p[x]``; SDAR's "unfiltered": ``softmax(L / T)[x]`` (equal
    to it without top-k / top-p)."""
    if rule.confidence == "unfiltered" and (rule.top_k, rule.top_p) != (None, None):
        p = torch.softmax(rule.scaled(logits), -1)
    return p.gather(1, x[:, None])[:, 0].double()


def dream_confidence(rule, logits, p, x):
    """Dream's confidence by ``alg``: "maskgit_plus" ``p[x]``, "topk_margin" the largest ``p``
    less the second largest, "entropy" ``sum_v p[v] * log(p[v] + 1e-10)`` (minus the entropy)."""
    if rule.confidence == "topk_margin":
        top = p.topk(2, -1).values  # (M, 2): the two largest, as Dream's sorted probabilities
        c = top[:, 0] - top[:, 1]
    elif rule.confidence == "entropy":
        c = torch.sum(p * torch.log(p + 1e-10), dim=-1)
    else:
        c = p.gather(1, x[:, None])[:, 0]
    if bool(torch.isnan(c).any()):  # float16: p + 1e-10 rounds to 0 where p is 0
        raise ValueError(f"{rule.confidence} confidence is NaN in {p.dtype}: decide in a wider precision")
    return c.double()


LLADA_MAX_TEMPERATURE = 20.0  # LLaDA's divisor (-log u) ** T stays above 0 in float64


def llada_check(rule) -> None:
    """LLaDA's draw: no top-k / top-p (generate.py has none), T at most ``LLADA_MAX_TEMPERATURE``."""
    if rule.top_k is not None or rule.top_p is not None:
        raise ValueError(
            f"LLaDA's rule draws from the whole vocabulary: top_k and top_p must be None, "
            f"got top_k={rule.top_k!r}, top_p={rule.top_p!r}"
        )
    if rule.temperature > LLADA_MAX_TEMPERATURE:
        raise ValueError(
            f"temperature {rule.temperature!r} is above {LLADA_MAX_TEMPERATURE:g}, the most LLaDA's draw takes: "
            f"its divisor (-log u) ** T underflows float64 to 0 above it (u within 2**-52 of 1), and "
            f"exp(L) / 0 is inf for a token and NaN for MASK"
        )


def dream_check(rule) -> None:
    """Dream's "entropy" confidence is refused in float16, where ``p + 1e-10`` rounds to 0 where
    ``p`` is 0 and the entropy is NaN at every decision (``dream_confidence``)."""
    if rule.confidence == "entropy" and rule.precision == "float16":
        raise ValueError(ENTROPY_FP16)


ENTROPY_FP16 = (
    "the entropy confidence is NaN in float16 (p + 1e-10 rounds to 0 where p is 0): "
    "decide in a wider precision (precision='float32'), or take another confidence"
)


@dataclass(frozen=True)
class Family:
    """What a family's decoder does its own way; the rest of the rule (D, MASK at -inf, the
    one-position and threshold rules, the ties) is shared."""

    confidences: tuple  # the confidence measures it takes, its default first
    divides: bool  # the scores are of L / T (SDAR, Dream), or of L (LLaDA: T enters the draw only)
    filter: Callable  # (z, top_k, top_p) -> z, the filtered-out entries at -inf
    score: Callable  # (rule, z, p = softmax(z) or None) -> (M, V) float64, what the noise perturbs
    measure: Callable  # (rule, logits, p, x) -> c (M,) float64, the tokens' confidences
    noise: Callable | None = None  # the noise of the uniforms (None: Gumbel, added; else divided by)
    check: Callable = lambda rule: None  # the family's own refusals of parameters


def no_filter(z, top_k, top_p):
    return z


def llada2_filter(z: torch.Tensor, top_k: int | None, top_p: float | None) -> torch.Tensor:
    """LLaDA2's ``_top_k_logits`` then ``_top_p_logits``: SDAR's two filters, but top-p skipped
    at ``p >= 1`` (its ``if p is None or p >= 1.0: return logits``)."""
    return filter_top_k_top_p(z, top_k, top_p if top_p is not None and top_p < 1 else None)


def llada2_check(rule) -> None:
    """LLaDA2 at T = 0 takes its greedy branch (argmax, ``softmax(L)[x]``) only without top-k /
    top-p; with them its generate samples and diffusers' pipeline ignores them: refused."""
    if rule.temperature == 0 and (rule.top_k is not None or rule.top_p is not None):
        raise ValueError(
            f"LLaDA2 at temperature 0 decides greedily from the whole vocabulary: top_k and top_p must be None "
            f"(its generate samples with them, diffusers' pipeline ignores them), got top_k={rule.top_k!r}, "
            f"top_p={rule.top_p!r}"
        )


FAMILIES = {
    # SDAR's generate.py: z = top_k_top_p(L / T), x = argmax(log p + g), c = p[x]
    "sdar": Family(("filtered", "unfiltered"), True, filter_top_k_top_p, gumbel_score, token_probability),
    # LLaDA's generate.py (remasking="low_confidence"): x = argmax(exp(L) / (-log u) ** T), c = softmax(L)[x]
    "llada": Family(
        ("low_confidence",), False, no_filter, exp_score, token_probability, noise=divisor, check=llada_check
    ),
    # LLaDA2's generate (and diffusers' LLaDA2Pipeline): z = top_p(top_k(L / T)) (top-p below 1 only),
    # x = argmax(log p + g), c = p[x]; in float32, the dtype its forward returns logits in
    "llada2": Family(("filtered",), True, llada2_filter, gumbel_score, token_probability, check=llada2_check),
    # Dream's sample_tokens: z = top_k(top_p(L / T)), x = argmax(log p + g), c by its alg
    "dream": Family(
        ("maskgit_plus", "topk_margin", "entropy"),
        True,
        dream_filter,
        gumbel_score,
        dream_confidence,
        check=dream_check,
    ),
}
REQUIRED = ("mask_id", "vocab_size", "block_size")


def for_family(family: str, **params) -> DecisionRule:
    """The decision rule of ``family`` ("sdar", "llada", "llada2" or "dream") with ``params``, the fields
    of ``DecisionRule``; ``confidence`` left out or None: the family's default."""
    if family not in FAMILIES:
        raise ValueError(f"family must be one of {tuple(FAMILIES)}, got {family!r}")
    unknown = sorted(set(params) - ({f.name for f in fields(DecisionRule)} - {"family"}))
    missing = [name for name in REQUIRED if name not in params]
    if unknown or missing:
        raise ValueError(f"decision parameters: unknown {unknown}, missing {missing}")
    return DecisionRule(**params, family=family)
