"""SDAR-MoE (issue 64): its forward against transformers' Qwen3-MoE, its checkpoint layout, a row's
logits independent of the other rows under expert routing (docs/spec.md section 4, under every CPU
capability level), and SPOT identical to exact decoding on it."""

import json
import os
import subprocess
import sys
from pathlib import Path
from unittest import mock

import pytest
import torch
from safetensors import safe_open

import spotref
from spotref.configs import SDARConfig, SDARMoEConfig
from spotref.conformance import spot_drafter
from spotref.spec.sdar_moe import SDARMoEModel, SparseMoE

SUPPORT = Path(__file__).resolve().parents[1] / "support"
sys.path.insert(0, str(SUPPORT))
from test_batch_invariance import capability_levels  # noqa: E402


def moe_config(**kw) -> SDARMoEConfig:
    sizes = dict(vocab_size=50, hidden_size=32, intermediate_size=48, num_hidden_layers=3, num_attention_heads=4)
    sizes.update(num_key_value_heads=2, head_dim=8, mask_token_id=49, block_size=4, num_experts=6)
    sizes.update(num_experts_per_tok=2, moe_intermediate_size=16, mlp_only_layers=[1], initializer_range=0.3)
    return SDARMoEConfig(**{**sizes, **kw})


def moe_model(seed: int = 0, **kw) -> SDARMoEModel:
    torch.manual_seed(seed)
    return SDARMoEModel(moe_config(**kw))


def fused_experts(state: dict, cfg: SDARMoEConfig) -> dict:
    """The checkpoint's per-expert tensors as transformers 5 holds them (gate and up stacked)."""
    out = {k: v for k, v in state.items() if ".mlp.experts." not in k}
    for i in filter(cfg.sparse, range(cfg.num_hidden_layers)):
        p = f"model.layers.{i}.mlp.experts"
        each = range(cfg.num_experts)
        out[f"{p}.gate_up_proj"] = torch.stack(
            [torch.cat((state[f"{p}.{e}.gate_proj.weight"], state[f"{p}.{e}.up_proj.weight"])) for e in each]
        )
        out[f"{p}.down_proj"] = torch.stack([state[f"{p}.{e}.down_proj.weight"] for e in each])
    return out


def qwen3_moe(transformers, m: SDARMoEModel):
    """transformers' Qwen3MoeForCausalLM (eager attention) with ``m``'s sizes and weights."""
    c = m.config
    hc = transformers.Qwen3MoeConfig(
        **{k: getattr(c, k) for k in ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers")},
        **{k: getattr(c, k) for k in ("num_attention_heads", "num_key_value_heads", "head_dim", "num_experts")},
        **{k: getattr(c, k) for k in ("num_experts_per_tok", "moe_intermediate_size", "norm_topk_prob")},
        **{k: getattr(c, k) for k in ("decoder_sparse_step", "mlp_only_layers", "rms_norm_eps", "rope_theta")},
        tie_word_embeddings=False,
        attention_bias=False,
    )
    hc._attn_implementation = "eager"
    hf = transformers.Qwen3MoeForCausalLM(hc).eval()
    hf.load_state_dict(fused_experts(m.state_dict(), c), strict=True)
    return hf


@pytest.mark.parametrize("norm", [True, False])
def test_the_forward_is_transformers_qwen3_moe_with_sdars_mask(norm):
    transformers = pytest.importorskip("transformers")
    m = moe_model(norm_topk_prob=norm)
    c, hf = m.config, qwen3_moe(transformers, m)
    x = torch.randint(0, 49, (1, 13), generator=torch.Generator().manual_seed(1))
    block = torch.arange(13) // c.block_size
    mask = torch.where(block[None, :] <= block[:, None], 0.0, torch.finfo(torch.float32).min)[None, None]
    with torch.no_grad():
        theirs = hf(input_ids=x, attention_mask=mask).logits
    assert float((theirs - m(x)).abs().max()) < 1e-5


@pytest.mark.parametrize("T, threshold", [(0.0, None), (1.0, None), (1.0, 0.6)])
def test_exact_decoding_is_sdars_decoder_on_transformers_qwen3_moe(T, threshold):
    """spotref.reference (SDAR's generate.py, recomputing the whole sequence under the block mask)
    driving transformers' Qwen3-MoE gives spotref's tokens, decided in float32."""
    transformers = pytest.importorskip("transformers")
    from spotref import reference

    m = moe_model(seed=3, initializer_range=0.6)
    hf = qwen3_moe(transformers, m)
    B = m.config.block_size

    def logits_fn(x):
        block = torch.arange(x.shape[1]) // B
        mask = torch.where(block[None, :] <= block[:, None], 0.0, torch.finfo(torch.float32).min)[None, None]
        with torch.no_grad():
            return hf(input_ids=x, attention_mask=mask).logits

    kw = dict(temperature=T, seed=11, threshold=threshold, precision="float32")
    theirs = reference.generate(logits_fn, [1, 2, 3, 4, 5], 14, block_size=B, mask_id=49, vocab_size=50, **kw)
    assert list(theirs) == spotref.generate(m, [1, 2, 3, 4, 5], 14, **kw).tokens


def test_a_checkpoint_of_the_real_layout_reads_back_bit_for_bit(tmp_path):
    from workbench.checkpoint_writer import save_pretrained

    m = moe_model()
    save_pretrained(m, tmp_path / "ck")
    cfg = json.loads((tmp_path / "ck" / "config.json").read_text())
    assert cfg["model_type"] == "sdar_moe" and cfg["num_experts"] == 6 and cfg["mlp_only_layers"] == [1]
    with safe_open(tmp_path / "ck" / "model.safetensors", "pt") as f:
        names = set(f.keys())
    assert "model.layers.0.mlp.experts.5.down_proj.weight" in names and "model.layers.0.mlp.gate.weight" in names
    assert not any(n.startswith("model.layers.1.mlp.experts") for n in names)  # a dense layer: Qwen3's MLP
    back = spotref.from_pretrained(tmp_path / "ck")
    assert isinstance(back, SDARMoEModel)
    x = torch.randint(0, 49, (2, 8))
    assert torch.equal(back(x), m(x))
    del cfg["norm_topk_prob"]
    (tmp_path / "ck" / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ValueError, match="no norm_topk_prob"):
        spotref.from_pretrained(tmp_path / "ck")


@pytest.mark.parametrize(
    "change, message",
    [
        (dict(num_experts_per_tok=7), "num_experts_per_tok"),
        (dict(mlp_only_layers=[3]), "mlp_only_layers"),
        (dict(norm_topk_prob=1), "norm_topk_prob"),
        (dict(decoder_sparse_step=0), "decoder_sparse_step"),
    ],
)
def test_a_bad_moe_field_is_refused_by_name(change, message):
    with pytest.raises(ValueError, match=message):
        moe_config(**change)


def moe_report(level: str, *args: str) -> dict:
    env = {**os.environ, "ATEN_CPU_CAPABILITY": level, "OMP_NUM_THREADS": "2"}
    run = [sys.executable, str(SUPPORT / "moe_worker.py"), *args]
    out = subprocess.run(run, env=env, cwd=SUPPORT, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.slow
@pytest.mark.parametrize("level", capability_levels())
def test_a_rows_logits_do_not_depend_on_the_other_rows_under_routing(level):
    report = moe_report(level)
    assert report["capability"].lower() == level and report["checked"] == 48
    assert report["failures"] == [], report["failures"][:3]


@pytest.mark.slow
@pytest.mark.parametrize("level", capability_levels())
def test_experts_grouped_over_the_pass_make_rows_depend_on_each_other(level):
    """The check can fail: an expert's matmul over every row's tokens changes a row's float32 bits."""
    report = moe_report(level, "--naive")
    assert any(f["dtype"] == "torch.float32" for f in report["failures"]), report


def test_a_rows_logits_do_not_depend_on_the_other_rows_in_this_process():
    """The fast tier's check (the slow tier runs every capability level, dtype and thread count)."""
    m = moe_model(seed=3, initializer_range=0.6)
    cache = m.prefill(torch.arange(4))
    g = torch.Generator().manual_seed(0)
    for _ in range(3):
        rows = torch.randint(0, 50, (5, 4), generator=g)
        other = torch.cat([rows[:1], torch.randint(0, 50, (4, 4), generator=g)])
        assert torch.equal(m.denoise(cache, rows, one_forward=True)[0], m.denoise(cache, other, one_forward=True)[0])


@pytest.mark.parametrize("T", [0.0, 1.0])
@pytest.mark.parametrize("threshold", [None, 0.5])
@pytest.mark.parametrize("width", [None, 6])
def test_spot_is_exact_on_sdar_moe(T, threshold, width):
    m = moe_model(seed=3, initializer_range=0.6)
    kw = dict(temperature=T, threshold=threshold, seed=11, width=width)
    exact = spotref.generate(m, [1, 2, 3, 4, 5], 14, **kw)
    for drafter in ("confidence-chain", spot_drafter(0)(4)):
        got = spotref.generate(m, [1, 2, 3, 4, 5], 14, drafter=drafter, budget=6, depth=3, **kw)
        assert got.tokens == exact.tokens and got.passes <= exact.passes


def test_every_expert_of_the_test_model_is_routed_to():
    """The tests above exercise routing: the tiny model sends tokens to every expert."""
    m, seen = moe_model(seed=3, initializer_range=0.6), set()
    route = SparseMoE.route

    def recording(self, x):
        weights, experts = route(self, x)
        seen.update(experts.flatten().tolist())
        return weights, experts

    SparseMoE.route = recording
    try:
        spotref.generate(m, [1, 2, 3, 4, 5], 14, temperature=1.0)
    finally:
        SparseMoE.route = route
    assert seen == set(range(6))


def test_spotref_generate_reads_an_sdar_moe_directory(tmp_path, capsys):
    """The command read every SDAR-layout directory as dense SDAR and named the experts unexpected."""
    from spotref.cli import main as spotref_cli
    from workbench.checkpoint_writer import save_pretrained

    m = moe_model(seed=3, initializer_range=0.6)
    save_pretrained(m, tmp_path / "ck")
    for drafter in ("none", "confidence"):
        argv = ["generate", "--model", str(tmp_path / "ck"), "--prompt-ids", "1,2,3,4,5", "--max-new-tokens", "14"]
        assert spotref_cli.main([*argv, "--drafter", drafter]) == 0
        out = capsys.readouterr().out.split("\n")[0]
        assert out.split() == [str(t) for t in spotref.generate(m, [1, 2, 3, 4, 5], 14).tokens], out


def as_moe(case):
    """A kit case on toy SDAR as SDAR-MoE of the same sizes (experts, k and norm_topk_prob from the
    weights seed); any other case as it is."""
    import dataclasses

    if type(case.config) is not SDARConfig or case.checkpoint is not None:  # SDAR-MoE drawn already: as it is
        return case
    c, m = case.config, case.weights_seed
    E = 2 + m % 5
    moe = dict(num_experts=E, num_experts_per_tok=1 + m // 5 % E, moe_intermediate_size=16, norm_topk_prob=m % 2 == 0)
    fields = {f.name: getattr(c, f.name) for f in dataclasses.fields(c)}
    return dataclasses.replace(case, config=SDARMoEConfig(**fields, **moe))


@pytest.mark.slow
@pytest.mark.parametrize("seed", [0])
def test_the_kits_cases_on_sdar_moe_are_identical_to_exact_decoding(seed):
    """The conformance kit's SDAR cases (aimed, every drafter, rule, width and precision), each on
    SDAR-MoE of its sizes: SPOT identical to exact decoding under expert routing, at every budget
    (the default run draws SDAR-MoE's cases at budgets up to ``MOE_MAX_BUDGET``; these up to 256)."""
    from spotref.conformance import cases, run_conformance

    strategy = cases(families=("sdar",)).map(as_moe)
    routed, row = [], SparseMoE.row
    with mock.patch.object(SparseMoE, "row", lambda self, x: routed.append(1) or row(self, x)):
        seen = run_conformance(spotref.generate, max_examples=40, seed=seed, strategy=strategy)
    assert seen["cases"] == 40 and seen["drafted"] > 12 and len(routed) > 600, (seen, len(routed))


def test_a_replay_file_of_an_sdar_moe_case_rebuilds_its_experts():
    from spotref.conformance import Case, tiny_config
    from spotref.conformance_cases import case_from_dict, case_to_dict

    cfg = tiny_config("sdar", 40, 39, 4, hidden=16, layers=2, heads=2, kv=1, tied=False, init=0.3)
    kw = dict(temperature=1.0, seed=5, threshold=None, top_k=None, top_p=None, precision=None, budget=4, depth=2)
    case = as_moe(Case(cfg, 3, [1, 2, 3, 4], 6, "confidence", {**kw, "confidence": "filtered"}, "sdar"))
    back = case_from_dict(json.loads(json.dumps(case_to_dict(case))))
    assert isinstance(back.model(), SDARMoEModel) and back.config == case.config
    x = torch.randint(0, 39, (1, 8))
    assert torch.equal(back.model()(x), case.model()(x))
