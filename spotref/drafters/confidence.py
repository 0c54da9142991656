"""Built-in drafters. ``confidence`` is training-free: the order of the stale confidences.

FreeDave's observation: the previous pass's most confident masked position is usually the next
one committed. The confidence drafter ranks the masked positions by stale confidence and gives
each the probability ``c_j / sum(c)`` of being next (one-position rule), or predicts the commit
set ``{j : c_j > tau}`` (threshold rule) with two neighbouring sets as alternatives; ``grow``
turns these guesses into a best-first tree. Tokens are coupled-noise matched: the stale
distribution sampled with the noise of the step the commit would be taken at.
"""

from __future__ import annotations

import numpy as np

from spotref.drafters.grow import grow

SET_PROBS = (0.8, 0.1, 0.1)  # threshold rule: predicted set, one fewer, one more


class ConfidenceDrafter:
    """``drafter(view) -> Draft`` over stale-confidence ranks; ``chain=True`` keeps one branch."""

    name = "confidence"

    def __init__(self, chain: bool = False):
        self.chain = chain

    def __call__(self, view):
        conf = view.stale_confidence()  # (B,) float64

        def options(state, step):
            masked = ranked(np.flatnonzero(state == view.mask_id), conf)
            tokens = view.coupled_tokens(step)
            if view.threshold is None:
                opts = one_position_options(masked, conf, tokens)
            else:
                opts = threshold_options(masked, conf, tokens, view.threshold)
            return opts[:1] if self.chain else opts

        return grow(view, options)


def ranked(masked: np.ndarray, score) -> np.ndarray:
    """The positions ``masked`` by descending ``score`` (B,) (ties: the lower position first):
    the training-free commit order, and the order every drafter ranks candidates in."""
    return masked[np.argsort(-np.asarray(score)[masked], kind="stable")]


def one_position_options(masked, conf, tokens):
    """[(prob, ((j, x_j),))] for each masked j in descending confidence."""
    w = weights(conf[masked])
    p = w / max(w.sum(), 1e-300)
    return [(float(pj), ((int(j), int(tokens[j])),)) for pj, j in zip(p, masked)]


def weights(c: np.ndarray) -> np.ndarray:
    """Nonnegative weights of confidences ``c``: as they are where every one is >= 0 (a
    probability, a margin), else ``exp(c - max c)`` (Dream's "entropy" is minus an entropy, <= 0,
    and ``c / sum(c)`` of such numbers is no probability)."""
    c = np.asarray(c, dtype=np.float64)
    return c if len(c) == 0 or c.min() >= 0 else np.exp(c - c.max())


def threshold_options(masked, conf, tokens, tau):
    """The predicted commit set {c > tau} (else the top one), then one fewer and one more."""
    n = max(int((conf[masked] > tau).sum()), 1)
    sizes = [n, n - 1, n + 1]
    return [
        (prob, tuple(sorted((int(j), int(tokens[j])) for j in masked[:k])))
        for prob, k in zip(SET_PROBS, sizes)
        if 1 <= k <= len(masked)
    ]
