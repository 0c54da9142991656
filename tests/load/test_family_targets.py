"""Targets of the whole-canvas families (LLaDA, Dream): save_target / load_target round trips, the
metadata's family, and canvas_from_sdar's start from an SDAR target's weights."""

import json

import pytest
import torch

import spotref
from spotref import names
from spotref.checkpoint import stored_tensors
from spotref.configs import DreamConfig, LLaDAConfig
from spotref.conformance import spot_drafter
from spotref.load.bpe import ByteTokenizer
from spotref.load.targets import list_targets, load_target
from spotref.spec.dream import DreamModel
from spotref.spec.llada import LLaDAModel
from workbench.target_writer import save_target
from workbench.train.canvas_start import DROPPED, canvas_from_sdar, counterparts

pytest.importorskip("safetensors")
V, MASK = 258, 257  # ByteTokenizer's vocabulary and MASK id
HEAD = {"llada": "model.transformer.ff_out.weight", "dream": "lm_head.weight"}  # absent from the file when tied


def tiny(family: str, tied: bool):
    torch.manual_seed(3)
    if family == "llada":
        cfg = LLaDAConfig(d_model=32, n_heads=4, n_kv_heads=2, n_layers=2, mlp_hidden_size=48, vocab_size=V,
                          mask_token_id=MASK, max_sequence_length=128, weight_tying=tied)  # fmt: skip
        return LLaDAModel(cfg)
    cfg = DreamConfig(hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=2, vocab_size=V, mask_token_id=MASK, pad_token_id=None, eos_token_id=256,
                      max_position_embeddings=128, tie_word_embeddings=tied)  # fmt: skip
    model = DreamModel(cfg)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith(".bias"):
                p.normal_(0.0, 0.1)  # biases that a round trip must keep
    return model


@pytest.mark.parametrize("tied", [False, True], ids=["untied", "tied"])
@pytest.mark.parametrize("family, cls", [("llada", LLaDAModel), ("dream", DreamModel)])
def test_a_canvas_target_is_saved_and_loaded_back_with_the_same_logits(tmp_path, family, cls, tied):
    model = tiny(family, tied)
    save_target(model, ByteTokenizer(), {"name": "t", "config": None}, tmp_path, "t")
    meta = json.loads((tmp_path / "t.json").read_text())
    assert meta["family"] == family and meta["config"] == model.config.to_dict()
    assert list_targets(tmp_path) == ["t"]
    target = load_target("t", directory=tmp_path)
    assert type(target.model) is cls and not target.model.training and target.model.block_size == 32
    assert target.model.config.to_dict() == model.config.to_dict() and target.model.mask_id == MASK
    ids = torch.tensor([[5, 6, 7, MASK, MASK, MASK], [9, 8, MASK, 7, MASK, 6]])
    assert torch.equal(target.model(ids), model.half().float()(ids))  # the weights are stored in float16
    from safetensors.torch import load_file

    stored = load_file(tmp_path / "t.safetensors")
    assert set(stored) == set(stored_tensors(model)) and (tied == (HEAD[family] not in stored))
    if tied and family == "dream":
        assert target.model.lm_head.weight is target.model.model.embed_tokens.weight  # tied again


def test_an_sdar_target_records_no_family_and_a_bad_family_is_refused_by_name(tmp_path):
    from helpers import tiny_model

    save_target(tiny_model(V=V, B=4, mask_id=MASK), ByteTokenizer(), {"name": "s"}, tmp_path, "s")
    meta = json.loads((tmp_path / "s.json").read_text())
    assert "family" not in meta and type(load_target("s", directory=tmp_path).model).__name__ == "SDARModel"
    for bad in ("gpt", 3):
        (tmp_path / "s.json").write_text(json.dumps({**meta, "family": bad}))
        with pytest.raises(ValueError, match="'family' must be"):
            load_target("s", directory=tmp_path)


@pytest.fixture(scope="module")
def gsm():
    return load_target("gsm-b32")


def test_an_sdar_target_exported_again_is_the_shipped_one_byte_for_byte(gsm, tmp_path):
    from spotref.load.targets import TARGETS_DIR

    save_target(gsm.model, gsm.tokenizer, dict(gsm.meta), tmp_path, "gsm-b32")
    for suffix in (".json", ".safetensors", ".tokenizer.json"):
        assert (tmp_path / f"gsm-b32{suffix}").read_bytes() == (TARGETS_DIR / f"gsm-b32{suffix}").read_bytes()


@pytest.mark.parametrize("family", ["llada", "dream"])
def test_canvas_from_sdar_copies_every_tensor_with_a_counterpart(gsm, family):
    model = canvas_from_sdar(gsm.model, family)
    src, dst, sc = gsm.model.state_dict(), model.state_dict(), gsm.model.config
    pairs = counterparts(family, sc.num_hidden_layers, sc.tie_word_embeddings)
    assert all(torch.equal(src[s], dst[d]) for s, d in pairs.items())
    left = set(src) - set(pairs) - {"lm_head.weight"}  # the tied head: copied as the embedding
    assert left and all(k.endswith(DROPPED) for k in left)  # only the q/k norms have no counterpart
    biases = [k for k in dst if k.endswith(".bias")]
    assert set(dst) - set(pairs.values()) == set(biases) | ({"lm_head.weight"} if family == "dream" else set())
    assert all(not dst[k].any() for k in biases) and (family == "llada") == (not biases)
    assert (model.config.vocab_size, model.mask_id) == (sc.vocab_size, sc.mask_token_id)
    assert model.config.max_position_embeddings == sc.max_position_embeddings
    assert spotref.api.serving_precision(model) == spotref.api.serving_precision(gsm.model) == "bfloat16"
    if family == "dream":
        assert model.lm_head.weight is model.model.embed_tokens.weight  # tied as SDAR's
    else:
        assert model.config.weight_tying and not hasattr(model.model.transformer, "ff_out")


@pytest.mark.slow
@pytest.mark.parametrize("family", ["llada", "dream"])
def test_a_canvas_target_from_gsm_b32_generates_and_spot_is_exact(gsm, tmp_path, family):
    save_target(canvas_from_sdar(gsm.model, family), gsm.tokenizer, {"name": "c", "corpus": gsm.meta["corpus"]},
                tmp_path, "c")  # fmt: skip
    target = names.target("c", tmp_path)
    assert target.model.family == family and target.chat
    prompt = target.encode_chat("Ella has 62 shells and finds 20 more. How many shells does she have?")
    kw = dict(stop_ids=target.stop_ids, block_length=16, temperature=1.0, seed=4)
    exact = spotref.generate(target, prompt, 32, **kw)
    assert len(exact.tokens) == 32 or exact.tokens[-1] in target.stop_ids
    for drafter in ("confidence", spot_drafter(2)(16)):
        assert spotref.generate(target, prompt, 32, drafter=drafter, budget=8, **kw).tokens == exact.tokens
    with pytest.raises(ValueError, match="family must be 'llada' or 'dream'"):
        canvas_from_sdar(gsm.model, "sdar")
    with pytest.raises(ValueError, match="must be an SDARModel"):
        canvas_from_sdar(target.model, "llada")


@pytest.mark.parametrize("family", ["llada", "dream"])
def test_a_canvas_model_has_a_fingerprint_of_its_embedding_and_no_shipped_drafter(family):
    """A drafter is matched to a model by a fingerprint of its architecture and embedding: every
    family's embedding (LLaDA's ``wte`` too), so looking one up never fails on a canvas model."""
    from spotref.load.drafters import find_checkpoint, model_fingerprint

    model = tiny(family, tied=True)
    before = model_fingerprint(model)
    assert model_fingerprint(tiny(family, tied=True)) == before  # a pure function of the model
    with torch.no_grad():
        next(m for m in model.modules() if isinstance(m, torch.nn.Embedding)).weight[0, 0] += 1.0
    assert model_fingerprint(model) != before and find_checkpoint(model) is None


def folded_norm_residual(gsm, docs, scales, factor: float) -> float:
    """Sum over layer 0's query heads and the tokens of ``docs`` of ||factor c q - q / rms(q)||^2,
    q / rms(q) read from SDAR's own q_norm (its output over its weight), c from ``scales``."""
    seen = []
    attn = gsm.model.model.layers[0].self_attn
    hook = attn.q_norm.register_forward_hook(lambda m, i, o: seen.append((i[0].float(), (o / m.weight).float())))
    try:
        with torch.no_grad():
            for d in docs:
                gsm.model(torch.tensor([d]))
    finally:
        hook.remove()
    c = scales["q0"].view(1, 1, -1, 1) * factor  # (1, 1, heads, 1)
    return sum(((c * q - unit) ** 2).sum().item() for q, unit in seen)


def gsm_documents(gsm, n: int, split: str = "train") -> list:
    from workbench.data import gsm as corpus

    return [gsm.tokenizer.encode(p.document) for p in corpus.problems(n, 0, split, corpus.LEVELS[3])]


def test_folded_norm_scales_are_the_least_squares_ones_of_sdar_own_norm(gsm):
    from workbench.train.canvas_start import head_scales

    docs = gsm_documents(gsm, 6)
    scales = head_scales(gsm.model, docs)
    heads = gsm.model.config.num_attention_heads, gsm.model.config.num_key_value_heads
    assert all(scales[f"{k}{i}"].shape == (heads[k == "k"],) for i in range(4) for k in "qk")
    best = folded_norm_residual(gsm, docs, scales, 1.0)
    assert all(folded_norm_residual(gsm, docs, scales, f) > best for f in (0.98, 1.02))
    with pytest.raises(ValueError, match="calibration must be non-empty lists of token ids"):
        head_scales(gsm.model, [[1, 2, gsm.model.config.vocab_size]])
    with pytest.raises(ValueError, match="calibration must be non-empty"):
        head_scales(gsm.model, [])


@pytest.mark.slow
@pytest.mark.parametrize("family", ["llada", "dream"])
def test_folded_norms_scale_each_head_of_the_projections_and_start_far_better(gsm, family):
    """canvas_from_sdar(calibration=...): query / key rows scaled by c_h w, everything else as
    dropped; on held-out documents, 30% of each answer masked, its masked cross-entropy far below
    the dropped start's (LLaDA: 15.1 -> 2.7 nats; Dream, which reads position i - 1: 12.9 -> 9.1)."""
    from workbench.train.canvas_start import head_scales

    docs = gsm_documents(gsm, 16)
    dropped, folded = canvas_from_sdar(gsm.model, family), canvas_from_sdar(gsm.model, family, docs)
    scales, a, b = head_scales(gsm.model, docs), dropped.state_dict(), folded.state_dict()
    layer = "model.transformer.blocks.1." if family == "llada" else "model.layers.1.self_attn."
    w = gsm.model.model.layers[1].self_attn.k_norm.weight.float()
    rows = (scales["k1"].view(-1, 1) * w.view(1, -1)).reshape(-1, 1)
    assert torch.allclose(b[layer + "k_proj.weight"].float(), a[layer + "k_proj.weight"].float() * rows, rtol=1e-3)
    changed = {k for k in a if not torch.equal(a[k], b[k])}
    assert changed and all(k.endswith(("q_proj.weight", "k_proj.weight")) for k in changed)
    ce = {name: masked_ce(m, gsm, family) for name, m in (("dropped", dropped), ("folded", folded))}
    assert ce["folded"] < (0.5 if family == "llada" else 0.85) * ce["dropped"], ce


def masked_ce(model, gsm, family) -> float:
    """Mean cross-entropy of ``model`` on 30% of the answer positions of 8 held-out documents, masked."""
    from workbench.data import gsm as corpus

    g, total, n = torch.Generator().manual_seed(0), 0.0, 0
    for p in corpus.problems(8, 0, "heldout", corpus.LEVELS[3]):
        ids = torch.tensor([gsm.tokenizer.encode(p.document)])  # (1, L)
        start = len(gsm.tokenizer.encode(p.prompt))
        masked = torch.zeros_like(ids, dtype=torch.bool)
        masked[0, start:] = torch.rand(ids.shape[1] - start, generator=g) < 0.3
        with torch.no_grad():
            z = model(ids.masked_fill(masked, gsm.tokenizer.mask_id)).float()  # (1, L, V)
        if family == "dream":  # position i is read at i - 1
            z = torch.cat([z[:, :1], z[:, :-1]], 1)
        total += torch.nn.functional.cross_entropy(z[masked], ids[masked], reduction="sum").item()
        n += int(masked.sum())
    return total / n
