"""LLaDA2 (issue 64): its forward against LLaDA2's own modeling code (fixtures recorded by
tests/support/record_llada2.py), its exact decoding against diffusers' LLaDA2Pipeline at T = 0,
its checkpoint layout, a row's logits independent of the other rows under its routing (every CPU
capability level), and SPOT identical to exact decoding on it."""

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

import spotref
from spotref.configs_llada2 import LLaDA2Config
from spotref.conformance import oracle_drafter, spot_drafter, wrong_drafter
from spotref.spec.llada2 import LLaDA2Model

HERE = Path(__file__).resolve().parents[1]
FIXTURES = HERE / "fixtures" / "llada2"
EXAMPLE = HERE.parent / "examples" / "diffusers_llada2.py"
sys.path.insert(0, str(HERE / "support"))
from test_batch_invariance import capability_levels  # noqa: E402


def llada2_config(**kw) -> LLaDA2Config:
    sizes = dict(vocab_size=64, hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4)
    sizes.update(num_key_value_heads=2, head_dim=8, mask_token_id=63, block_size=4, num_experts=8, n_group=4)
    sizes.update(topk_group=2, num_experts_per_tok=2, moe_intermediate_size=16, first_k_dense_replace=1)
    sizes.update(eos_token_id=1, initializer_range=0.3)
    return LLaDA2Config(**{**sizes, **kw})


def llada2_model(seed: int = 0, sharp: float = 1.0, **kw) -> LLaDA2Model:
    """A random LLaDA2 with a nonzero ``expert_bias``; ``sharp`` scales the head (confident logits)."""
    torch.manual_seed(seed)
    m = LLaDA2Model(llada2_config(**kw))
    with torch.no_grad():
        m.lm_head.weight.mul_(sharp)
        for layer in m.model.layers:
            if hasattr(layer.mlp, "gate"):
                layer.mlp.gate.expert_bias.normal_(0, 0.3)
    return m


def example():
    spec = importlib.util.spec_from_file_location("diffusers_llada2", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("name", sorted(p.name for p in FIXTURES.iterdir()))
def test_the_forward_is_llada2s_own_modeling_code(name):
    """spotref reads the recorded checkpoint and gives LLaDA2's own logits within 1e-5 (float32);
    the same weights without the routing bias give other logits: the check can fail."""
    model = spotref.from_pretrained(FIXTURES / name)
    recorded = load_file(str(FIXTURES / name / "logits.safetensors"))
    ours = model.forward(recorded["ids"])
    assert ours.dtype == torch.float32 and ours.shape == recorded["logits"].shape
    assert float((ours - recorded["logits"]).abs().max()) < 1e-5
    for layer in model.model.layers:
        if hasattr(layer.mlp, "gate"):
            layer.mlp.gate.expert_bias.zero_()
    assert float((model.forward(recorded["ids"]) - recorded["logits"]).abs().max()) > 1e-3


@pytest.mark.parametrize("name", sorted(p.name for p in FIXTURES.iterdir()))
def test_exact_decoding_is_llada2s_own_generate_at_t0(name):
    """LLaDA2's own ``generate`` (recorded: T = 0, thresholds 0.95 and 0.5, EOS early stop, MASK's
    logit at -inf as spotref's rule has it) and spotref's exact decoding: the same tokens."""
    model = spotref.from_pretrained(FIXTURES / name)
    runs = json.loads((FIXTURES / name / "generate.json").read_text())
    assert len(runs) == 6
    for run in runs:
        got = spotref.generate(model, run["prompt"], 12, threshold=run["threshold"], stop_ids=[1]).tokens
        assert got == run["tokens"], run


def test_exact_decoding_is_diffusers_llada2_pipeline_at_t0():
    """diffusers' LLaDA2Pipeline (BlockRefinementScheduler, one commit per step, the threshold rule,
    EOS early stop) driving the model through examples/diffusers_llada2.py's adapter gives
    spotref's exact decoding's tokens: prompts inside a block, ending one, spanning two; block
    sizes 4 and 8; flat and confident models; thresholds 0.95 and 0.3. 0 differences."""
    pipeline_tokens, differ, runs = example().pipeline_tokens, [], 0
    for seed, B in ((0, 4), (1, 8)):
        for sharp in (1.0, 8.0):
            m = llada2_model(seed, sharp, block_size=B)
            for tau in (0.95, 0.3):
                for prompt in ([5, 6, 7], [9] * B, list(range(2, 2 + B + 3))):
                    theirs = pipeline_tokens(m, prompt, 3 * B, tau, 1)
                    ours = spotref.generate(m, prompt, max_new_tokens=3 * B, threshold=tau, stop_ids=[1]).tokens
                    runs += 1
                    if ours != theirs:
                        differ.append((seed, B, sharp, tau, prompt, ours, theirs))
    assert runs == 24 and differ == []


def test_a_checkpoint_of_the_real_layout_reads_back_bit_for_bit(tmp_path):
    """save_pretrained writes LLaDA2's layout (names, model_type); from_pretrained reads it back with
    the same logits, bit for bit (its tensors aligned: ``checkpoint.aligned``), tied head included."""
    from workbench.checkpoint_writer import save_pretrained

    for tied in (False, True):
        m = llada2_model(2, tie_word_embeddings=tied)
        save_pretrained(m, tmp_path / str(tied))
        cfg = json.loads((tmp_path / str(tied) / "config.json").read_text())
        assert cfg["model_type"] == "llada2_moe" and cfg["architectures"] == ["LLaDA2MoeModelLM"]
        back = spotref.from_pretrained(tmp_path / str(tied))
        assert type(back) is LLaDA2Model and back.config.tie_word_embeddings is tied
        names = set(back.state_dict())
        assert (
            "model.layers.1.mlp.gate.expert_bias" in names and "model.layers.1.mlp.experts.7.down_proj.weight" in names
        )
        ids = torch.randint(0, 63, (2, 12), generator=torch.Generator().manual_seed(0))
        assert torch.equal(m.window(ids), back.window(ids))


@pytest.mark.parametrize(
    "change, message",
    [
        (dict(n_group=3), "n_group 3 must divide"),
        (dict(n_group=8), "groups of at least 2"),
        (dict(topk_group=5), "topk_group"),
        (dict(num_experts_per_tok=5), "num_experts_per_tok"),
        (dict(num_shared_experts=0), "num_shared_experts"),
        (dict(partial_rotary_factor=0.1), "rotates 0 dims"),
        (dict(routed_scaling_factor=-1.0), "routed_scaling_factor"),
        (dict(use_bias=1), "use_bias must be true or false"),
    ],
)
def test_a_bad_llada2_field_is_refused_by_name(change, message):
    with pytest.raises(ValueError, match=message):
        llada2_config(**change)


@pytest.mark.parametrize(
    "edit, message",
    [
        (lambda c: c.pop("rope_theta"), "no rope_theta .*600000"),
        (lambda c: c.pop("use_bias"), "no use_bias"),
        (lambda c: c.update(score_function="softmax"), "score_function='softmax'"),
        (lambda c: c.update(norm_head=True), "norm_head=True"),
        (lambda c: c.update(model_type="llada"), "not 'llada2_moe'"),
    ],
)
def test_a_config_json_lacking_or_switching_what_llada2_reads_is_refused(tmp_path, edit, message):
    from workbench.checkpoint_writer import save_pretrained

    save_pretrained(llada2_model(), tmp_path)
    cfg = json.loads((tmp_path / "config.json").read_text())
    edit(cfg)
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ValueError, match=message):
        spotref.checkpoint.READERS["llada2_moe"](tmp_path, cfg)


def llada2_report(level: str, *args: str) -> dict:
    env = {**os.environ, "ATEN_CPU_CAPABILITY": level}
    cmd = [sys.executable, str(HERE / "support" / "moe_worker.py"), "--llada2", *args]
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.slow
@pytest.mark.parametrize("level", capability_levels())
def test_a_windows_logits_do_not_depend_on_the_other_rows_under_llada2s_routing(level):
    """Row 0's logits among other rows and moved last, float32 / bf16 / fp16, widths 2 and 5, 1 and 2 threads."""
    report = llada2_report(level)
    assert report["checked"] == 48 and report["failures"] == []


@pytest.mark.slow
@pytest.mark.parametrize("level", capability_levels())
def test_llada2s_own_grouping_over_the_batch_makes_rows_depend_on_each_other(level):
    """Its ``moe_infer`` grouping (every row's tokens per expert) changes row 0's float32 logits."""
    report = llada2_report(level, "--naive")
    assert any(f["dtype"] == "torch.float32" for f in report["failures"])


def test_a_windows_logits_do_not_depend_on_the_other_rows_in_this_process():
    m = llada2_model(3, num_experts_per_tok=3)
    g = torch.Generator().manual_seed(0)
    rows = torch.randint(0, 63, (5, 12), generator=g)
    rows[:, :8] = rows[0, :8]  # one prefix, five candidate blocks
    other = rows.clone()
    other[1:, 8:] = torch.randint(0, 63, (4, 4), generator=g)
    a = m.window(rows, one_forward=True)[0]
    assert torch.equal(a, m.window(other, one_forward=True)[0])
    assert torch.equal(a, m.window(torch.cat([other[1:], rows[:1]]), one_forward=True)[-1])


@pytest.mark.parametrize("T, threshold, filters", [(0.0, None, {}), (0.0, 0.5, {}), (1.0, None, {}), (1.0, 0.5, {}),
                                                   (0.8, 0.3, dict(top_k=6, top_p=0.9))])  # fmt: skip
@pytest.mark.parametrize("width", [None, 6])
def test_spot_is_exact_on_llada2(T, threshold, filters, width):
    m = llada2_model(5, sharp=4.0)  # every expert routed to (test_every_expert_...)
    opts = dict(max_new_tokens=14, temperature=T, threshold=threshold, seed=3, stop_ids=[1], **filters)
    exact = spotref.generate(m, [5, 6, 7], **opts)
    hostile = (wrong_drafter(exact, 64, 63), oracle_drafter(exact))
    for drafter in (spot_drafter(0)(4), "confidence", "confidence-chain", *hostile):
        spot = spotref.generate(m, [5, 6, 7], drafter=drafter, budget=6, width=width, **opts)
        assert spot.tokens == exact.tokens


def test_llada2_at_t0_refuses_top_k_and_top_p():
    with pytest.raises(ValueError, match="LLaDA2 at temperature 0 decides greedily"):
        spotref.generate(llada2_model(), [5], max_new_tokens=4, top_k=5)


def test_exact_decoding_counts_one_pass_per_decision_and_none_to_store():
    """LLaDA2's generate runs one forward per step over the window: no prefill, no store pass."""
    m = llada2_model(5)
    r = spotref.generate(m, [5, 6, 7], max_new_tokens=9)  # blocks: 1 + 4 + 4 positions to fill
    assert r.passes == 9 and len(r.tokens) == 9


def test_every_expert_of_the_test_model_is_routed_to():
    """The model test_spot_is_exact_on_llada2 decodes routes to every expert (its selection biased, grouped)."""
    m = llada2_model(5, sharp=4.0)
    hits = torch.zeros(8)
    gate = m.model.layers[1].mlp.gate
    real = gate.forward

    def counted(x):
        w, e = real(x)
        hits.index_add_(0, e.flatten(), torch.ones(e.numel()))
        return w, e

    gate.forward = counted
    spotref.generate(m, [5, 6, 7], max_new_tokens=14, temperature=1.0, seed=3)
    assert bool((hits > 0).all())


def test_spotref_generate_reads_a_llada2_directory(tmp_path, capsys):
    from spotref.cli.main import main
    from workbench.checkpoint_writer import save_pretrained

    m = llada2_model(7)
    save_pretrained(m, tmp_path)
    main(
        [
            "generate",
            "--model",
            str(tmp_path),
            "--prompt-ids",
            "5,6,7",
            "--max-new-tokens",
            "6",
            "--drafter",
            "confidence",
        ]
    )
    out = capsys.readouterr().out
    want = spotref.generate(m, [5, 6, 7], max_new_tokens=6).tokens
    assert str(want) in out or " ".join(map(str, want)) in out


def test_the_kit_draws_its_cases_on_a_llada2_checkpoint():
    from spotref.conformance import run_conformance

    seen = run_conformance(spotref.generate, max_examples=6, model=FIXTURES / "grouped", seed=1)
    assert seen["family=llada2"] == seen["cases"] == 6 and seen["model=checkpoint"] == 6, seen


def test_audit_checks_llada2s_windows_at_a_width(capsys):
    """``spotref audit``'s batch check runs LLaDA2's own pass (``window``), not SDAR's cached one."""
    from spotref.audit import batch_invariance
    from spotref.cli.main import main

    m = llada2_model(8)
    calls = []
    m.window = (lambda real: lambda ids, one_forward=False: calls.append(one_forward) or real(ids, one_forward))(
        m.window
    )
    report = batch_invariance(m, prefix_len=8, rows=3, seed=0, width=4)
    assert report["equal_rows"] == report["rows"] == 3 and True in calls
    assert main(["audit", "--model", str(FIXTURES / "grouped"), "--prompt-ids", "5,6,7", "--max-new-tokens", "8",
                 "--width", "4", "--budget", "4"]) in (0, None)  # fmt: skip
    assert "4/4 rows of a batched denoise bit-identical" in capsys.readouterr().out
