"""The block-diffusion training objective, the corpus, and a tiny end-to-end training run."""
import argparse

import numpy as np
import pytest
import torch

from spotref.models import SDARConfig, SDARModel
from spotref.tools.corpus import build_corpus, is_heldout, whitespace_share
from spotref.tools.train import (
    add_arguments,
    batch_at,
    bd3_logits,
    bd3_mask,
    noise_blocks,
    train,
)

pytest.importorskip("tokenizers")
pytest.importorskip("safetensors")
pytest.importorskip("tqdm")


def tiny_model(B=4, V=40, mask_id=39):
    torch.manual_seed(0)
    cfg = SDARConfig(vocab_size=V, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                     num_attention_heads=4, num_key_value_heads=2, head_dim=8,
                     mask_token_id=mask_id, block_size=B, initializer_range=0.2)
    return SDARModel(cfg).eval()


def test_bd3_mask_matches_its_definition():
    L, B = 12, 4
    m = bd3_mask(L, B) == 0
    for i in range(2 * L):
        for j in range(2 * L):
            bi, bj = i % L // B, j % L // B
            if i < L:      # noised query: its own noised block, clean blocks before it
                want = bi == bj if j < L else bj < bi
            else:          # clean query: clean blocks up to its own
                want = j >= L and bj <= bi
            assert m[i, j] == want, f"query {i}, key {j}"


def test_noise_masks_between_1_and_B_per_block():
    x = np.arange(2 * 32).reshape(2, 32) % 7
    x_t, masked = noise_blocks(x, 8, 99, np.random.default_rng(0))
    k = masked.reshape(2, 4, 8).sum(-1)
    assert ((k >= 1) & (k <= 8)).all(), k
    assert (x_t[masked] == 99).all() and (x_t[~masked] == x[~masked]).all()


def test_clean_input_gives_the_decoding_model_logits():
    """x_t = x: noised block i sees itself and clean blocks < i, i.e. block-causal attention."""
    model = tiny_model()
    x = torch.randint(0, 39, (3, 12))
    with torch.no_grad():
        got = bd3_logits(model, x, x, bd3_mask(12, 4))
    torch.testing.assert_close(got, model(x), rtol=1e-4, atol=1e-5)


def test_noised_block_logits_equal_a_decoding_pass():
    """Training sees what decoding sees: block i noised over the clean prefix's cache."""
    model, B = tiny_model(), 4
    x = torch.randint(0, 39, (1, 12))
    x_t, _ = noise_blocks(x.numpy(), B, 39, np.random.default_rng(1))
    x_t = torch.from_numpy(x_t)
    with torch.no_grad():
        train_logits = bd3_logits(model, x_t, x, bd3_mask(12, B))[0]              # (L, V)
    for i in range(3):
        cache = model.prefill(x[0, : i * B])
        dec = model.denoise(cache, x_t[:, i * B:(i + 1) * B])[0]                  # (B, V)
        torch.testing.assert_close(train_logits[i * B:(i + 1) * B], dec, rtol=1e-4, atol=1e-5)


def test_batches_are_a_pure_function_of_seed_and_step():
    stream = np.arange(1000, dtype=np.uint16) % 50
    a, b = batch_at(stream, 7, 0, 4, 16, 8, 60), batch_at(stream, 7, 0, 4, 16, 8, 60)
    c = batch_at(stream, 8, 0, 4, 16, 8, 60)
    assert all(torch.equal(u, v) for u, v in zip(a, b))
    assert not torch.equal(a[1], c[1])


def test_corpus_split_is_by_document_and_reproducible():
    c = build_corpus()
    train, held = {d.name for d in c.train}, {d.name for d in c.heldout}
    assert train and held and not train & held
    assert all(is_heldout(n, 0.05) for n in held)
    assert not any("site-packages" in n or "/test/" in n for n in train | held)
    assert c.describe()["sha256"] == build_corpus().describe()["sha256"]
    assert 0.2 < whitespace_share(c.heldout[0].text) < 0.6


def args_for(tmp_path, *extra):
    p = argparse.ArgumentParser()
    add_arguments(p)
    return p.parse_args(["--name", "tiny", "--runs", str(tmp_path / "runs"), "--corpus-limit", "3",
                         "--tokenizer", "bpe300", "--hidden", "32", "--intermediate", "64",
                         "--layers", "1", "--heads", "2", "--kv-heads", "1", "--head-dim", "16",
                         "--seq-len", "32", "--block-size", "8", "--batch", "2",
                         "--eval-every", "10", "--ckpt-every", "5", "--no-progress", *extra])


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("train")
    state = train(args_for(tmp, "--steps", "20", "--export", str(tmp / "targets")))
    return tmp, state


def test_tiny_training_exports_a_loadable_target(tiny_run):
    from spotref.load.targets import list_targets, load_target
    tmp, state = tiny_run
    assert state["step"] == 20 and state["history"][-1]["heldout_loss"] < state["history"][0]["heldout_loss"] + 1
    assert list_targets(tmp / "targets") == ["tiny"]
    target = load_target("tiny", directory=tmp / "targets")
    assert target.model.config.block_size == 8 and target.meta["training"]["steps"] == 20
    assert target.tokenizer.decode(target.tokenizer.encode("def f(x):")) == "def f(x):"


def test_resuming_gives_the_same_weights(tiny_run, tmp_path):
    """10 steps, stop, 10 more (same command) == 20 steps straight."""
    _, state = tiny_run
    train(args_for(tmp_path, "--steps", "20", "--until", "10"))
    resumed = train(args_for(tmp_path, "--steps", "20"))
    straight = tiny_run[0] / "runs" / "tiny" / "ckpt.pt"
    a = torch.load(straight, weights_only=False)["model"]
    b = torch.load(tmp_path / "runs" / "tiny" / "ckpt.pt", weights_only=False)["model"]
    assert resumed["step"] == 20
    assert all(torch.equal(a[k], b[k]) for k in a), "resumed weights differ"
