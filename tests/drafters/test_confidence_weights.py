"""The confidence drafter's node probabilities from confidences of any sign (Dream's "entropy" is
minus an entropy, <= 0: ``c / sum(c)`` of such numbers gave NaN path probabilities and a refused
draft, found by the conformance suite's aimed cases)."""

import numpy as np

import spotref
from spotref.configs import DreamConfig
from spotref.conformance import run_case
from spotref.conformance_cases import Case
from spotref.drafters.confidence import one_position_options, weights


def test_weights_keep_probabilities_and_map_negative_confidences_to_their_exponential():
    c = np.array([0.5, 0.25, 0.0])
    assert np.array_equal(weights(c), c)  # probabilities and margins as they are
    neg = np.array([-0.1, -2.0, 1e-10, -5.0])  # minus entropies (1e-10: log(1 + 1e-10) at p = 1)
    w = weights(neg)
    assert np.all(w > 0) and w.max() == 1.0 and list(np.argsort(-w)) == list(np.argsort(-neg))
    opts = one_position_options(np.arange(4), neg, np.arange(4))
    p = [o[0] for o in opts]
    assert all(0.0 <= x <= 1.0 for x in p) and abs(sum(p) - 1) < 1e-12


def test_the_confidence_drafter_on_dream_entropy_is_exact_where_it_drafted_nan():
    """The conformance case that failed: Dream, "entropy", T = 0.05, top-p 0.75."""
    cfg = DreamConfig(
        vocab_size=222, hidden_size=32, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
        num_key_value_heads=1, max_position_embeddings=72, initializer_range=1.0, mask_token_id=0,
        tie_word_embeddings=False, pad_token_id=None, eos_token_id=None,
    )  # fmt: skip
    kw = dict(temperature=0.05, seed=0, threshold=None, top_k=None, top_p=0.75, confidence="entropy")
    kw |= dict(precision="auto", budget=11, depth=3, stop_ids=[1], width=None, block_length=16)
    prompt = [1, 1, 1, 1, 1, 1, 155, 220, 1, 1, 206, 1, 1, 1, 13]
    case = Case(cfg, 14226, prompt, 2, "confidence", kw, family="dream")
    exact, got, tokens, passes = run_case(case, spotref.generate)
    assert tokens == exact.tokens and passes <= exact.passes
