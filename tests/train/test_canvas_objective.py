"""The whole-canvas objective (LLaDA's SFT, Dream's shift): the masking's distribution and the loss."""

import math

import numpy as np
import pytest
import torch

from workbench.train.train_objective import canvas_loss, canvas_noise


def test_each_answer_position_is_masked_with_the_rows_rate_t_uniform_in_eps_1():
    rng, N, L, eps = np.random.default_rng(0), 4000, 200, 0.1
    x = np.arange(N * L).reshape(N, L) % 50
    prompt = rng.integers(0, 100, N)
    x_t, masked, t = canvas_noise(x, prompt, 99, rng, eps)
    n = L - prompt  # answer positions per row
    assert t.min() >= eps and t.max() < 1
    assert abs(t.mean() - (1 + eps) / 2) < 0.01 and abs(t.var() - (1 - eps) ** 2 / 12) < 0.005  # U(eps, 1)
    z = (masked.sum(-1) - n * t) / np.sqrt(n * t * (1 - t))  # per row: Binomial(n, t), standardised
    assert abs(z.mean()) < 0.06 and abs(z.std() - 1) < 0.06
    assert (x_t[masked] == 99).all() and (x_t[~masked] == x[~masked]).all()


def test_the_prompt_is_never_masked_and_every_row_has_a_masked_position():
    rng, N, L = np.random.default_rng(1), 500, 12
    x = np.zeros((N, L), dtype=np.int64)
    prompt = rng.integers(0, L, N)
    _, masked, _ = canvas_noise(x, prompt, 7, rng, eps=1e-3)
    assert not (masked & (np.arange(L) < prompt[:, None])).any()
    assert masked.any(-1).all()
    mask = rng.random((N, L)) < 0.5  # a prompt mask, anywhere
    mask[:, -1] = False
    _, masked, _ = canvas_noise(x, mask, 7, rng)
    assert not (masked & mask).any() and masked.any(-1).all()
    with pytest.raises(ValueError, match="no answer position"):
        canvas_noise(x[:1], np.array([L]), 7, rng)
    with pytest.raises(ValueError, match="prompt must be lengths"):
        canvas_noise(x, np.zeros(3), 7, rng)


def tiny_case():
    """Two rows of L = 3 over V = 2: logits, tokens, masks, rates and answers."""
    logits = torch.tensor([[[0.0, 1.0], [2.0, 0.0], [0.0, 0.0]], [[1.0, 1.0], [0.0, 3.0], [1.0, -1.0]]])
    x = torch.tensor([[1, 0, 1], [0, 1, 0]])
    masked = torch.tensor([[False, True, True], [False, False, True]])
    t = torch.tensor([0.5, 0.25])
    answer = torch.tensor([[False, True, True], [False, True, True]])
    return logits, x, masked, t, answer


def ce(row, token):
    """-log softmax(row)[token], by hand."""
    return -(row[token] - math.log(sum(math.exp(v) for v in row)))


def test_the_loss_is_llada_sft_by_hand():
    logits, x, masked, t, answer = tiny_case()
    row0 = (ce([2.0, 0.0], 0) + ce([0.0, 0.0], 1)) / 0.5 / 2  # two masked, answer length 2
    row1 = ce([1.0, -1.0], 0) / 0.25 / 2
    got = canvas_loss(logits, x, masked, t, 0, answer)
    assert got.item() == pytest.approx((row0 + row1) / 2, rel=1e-6)
    whole = canvas_loss(logits, x, masked, t)  # no answer given: every position, L = 3
    assert whole.item() == pytest.approx((row0 * 2 / 3 + row1 * 2 / 3) / 2, rel=1e-6)


def test_the_shift_predicts_position_i_from_the_logits_at_i_minus_1():
    logits, x, masked, t, answer = tiny_case()
    row0 = (ce([0.0, 1.0], 0) + ce([2.0, 0.0], 1)) / 0.5 / 2  # positions 1, 2 from logits 0, 1
    row1 = ce([0.0, 3.0], 0) / 0.25 / 2
    got = canvas_loss(logits, x, masked, t, 1, answer)
    assert got.item() == pytest.approx((row0 + row1) / 2, rel=1e-6)
    assert got.item() != pytest.approx(canvas_loss(logits, x, masked, t, 0, answer).item(), rel=1e-3)
    with pytest.raises(ValueError, match="shift must be 0 or 1"):
        canvas_loss(logits, x, masked, t, 2, answer)


def test_a_decode_state_row_is_a_clean_prefix_one_partly_masked_block_and_masks_after_it():
    from workbench.train.train_objective import decode_noise

    rng, B, L = np.random.default_rng(2), 8, 64
    for _ in range(300):
        P, n_text = int(rng.integers(0, 20)), int(rng.integers(1, 30))
        x = rng.integers(0, 50, (1, L))
        x_t, masked, t, answer = decode_noise(x, np.array([P]), np.array([n_text]), B, 99, rng, [None])
        lo = int(np.flatnonzero(answer[0])[0])
        hi = lo + int(answer[0].sum())
        assert (lo - P) % B == 0 and lo - P < n_text and hi == min(lo + B, L)  # a block within the text
        assert (x_t[0, :lo] == x[0, :lo]).all() and (x_t[0, hi:] == 99).all()  # clean before, masked after
        assert (masked[0] == answer[0] & (x_t[0] == 99)).all() and 1 <= masked.sum() <= hi - lo
        assert t[0] == masked.sum() / (hi - lo)


def test_a_decode_state_cut_at_a_result_masks_from_its_first_digit_on_and_nothing_before():
    from workbench.train.train_objective import decode_noise

    x = np.arange(40)[None] + 100
    x_t, masked, t, answer = decode_noise(x, np.array([5]), np.array([30]), 8, 99, np.random.default_rng(0), [11])
    # answer offset 11 is position 16, in the block [13, 21): clean to 15, masked from 16 on
    assert (x_t[0, :16] == x[0, :16]).all() and (x_t[0, 16:] == 99).all()
    assert np.flatnonzero(masked[0]).tolist() == list(range(16, 21)) and t[0] == 5 / 8
    assert np.flatnonzero(answer[0]).tolist() == list(range(13, 21))
