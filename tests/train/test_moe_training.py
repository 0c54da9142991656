"""``python -m workbench train-target --moe ...`` (issue 64): SDAR-MoE and LLaDA2 runs, upcycled
from a dense SDAR model (``workbench.train.moe_start``), trained with SDAR's objective, exported
as bundled targets."""

import pytest
import torch

from spotref.configs import SDARConfig, SDARMoEConfig
from spotref.configs_llada2 import LLaDA2Config
from spotref.load.targets import load_target
from spotref.spec.llada2 import LLaDA2Model
from spotref.spec.sdar import SDARModel
from spotref.spec.sdar_moe import SDARMoEModel
from workbench.train.moe_start import moe_from_sdar
from workbench.train.train_export import read_checkpoint
from workbench.train.train_loop import train
from workbench.train.train_moe import BalanceLoss, parse_moe
from workbench.train.train_options import TrainOptions

pytest.importorskip("tokenizers")
pytest.importorskip("tqdm")

SIZES = dict(vocab_size=70, hidden_size=32, intermediate_size=64, num_hidden_layers=3, num_attention_heads=4)
SIZES.update(num_key_value_heads=2, head_dim=8, mask_token_id=69, block_size=4, eos_token_id=0)


def dense() -> SDARModel:
    torch.manual_seed(0)
    return SDARModel(SDARConfig(**SIZES, initializer_range=0.1))


def test_an_upcycled_llada2_computes_what_the_dense_model_computes():
    """Shared expert = the dense MLP, routed experts' outputs zero at the start: the logits of an
    SDAR window, block-causal from position 0 (float32, within rounding of the fused QKV product)."""
    source = dense()
    cfg = LLaDA2Config(**SIZES, num_experts=8, n_group=4, topk_group=2, num_experts_per_tok=2, moe_intermediate_size=16)
    cfg.num_shared_experts, cfg.partial_rotary_factor, cfg.first_k_dense_replace = 4, 1.0, 1
    model = LLaDA2Model(cfg)
    model.load_state_dict(moe_from_sdar(source, model))
    ids = torch.randint(0, 69, (2, 12), generator=torch.Generator().manual_seed(1))
    assert float((model.forward(ids) - source.forward(ids)).abs().max()) < 1e-5


def test_an_upcycled_sdar_moe_starts_near_the_dense_model_and_routes():
    """Every expert a copy of the dense MLP within 1% noise, the weights of a token's experts summing
    to 1: the logits within the noise's effect of the dense model's; the router sends tokens to each expert."""
    source = dense()
    model = SDARMoEModel(SDARMoEConfig(**SIZES, num_experts=4, num_experts_per_tok=2, moe_intermediate_size=64))
    model.load_state_dict(moe_from_sdar(source, model))
    ids = torch.randint(0, 69, (2, 12), generator=torch.Generator().manual_seed(1))
    gap = float((model.forward(ids) - source.forward(ids)).abs().max())
    assert 0 < gap < 0.05
    _, experts = model.model.layers[1].mlp.route(model.model.embed_tokens(ids[0]))
    assert len(torch.unique(experts)) == 4


def test_upcycling_refuses_a_shape_it_cannot_start_from():
    cfg = LLaDA2Config(**SIZES, num_experts=8, n_group=4, topk_group=2, num_experts_per_tok=2, moe_intermediate_size=16)
    with pytest.raises(ValueError, match="partial_rotary_factor 1"):
        moe_from_sdar(dense(), LLaDA2Model(cfg))


@pytest.mark.parametrize(
    "text, message",
    [("experts=4,top=2", "needs experts=, top= and size="), ("experts=4,top=x,size=8", "top must be a int"),
     ("experts=4,top=2,size=8,wide=3", "'wide=3'"), ("experts=4,experts=4,top=1,size=8", "KEY once")],
)  # fmt: skip
def test_a_bad_moe_option_is_named(text, message):
    with pytest.raises(Exception, match=message):
        parse_moe(text)


def argv(tmp_path, *extra) -> list:
    return [
        "--name", "moe", "--runs", str(tmp_path / "runs"), "--corpus", "gsm", "--corpus-size", "40",
        "--corpus-level", "0", "--tokenizer", "bpe300", "--seq-len", "64", "--block-size", "8",
        "--hidden", "32", "--intermediate", "64", "--layers", "2", "--heads", "2", "--kv-heads", "1",
        "--head-dim", "16", "--batch", "2", "--lr", "3e-3", "--warmup", "2", "--no-progress", *extra,
    ]  # fmt: skip


@pytest.mark.parametrize(
    "family, moe, cls",
    [("sdar", "experts=4,top=2,size=16,dense=1", SDARMoEModel),
     ("llada2", "experts=4,top=2,size=16,dense=1,shared=4,groups=2,kept=1,scale=1.0", LLaDA2Model)],
)  # fmt: skip
def test_a_moe_run_trains_resumes_exactly_and_exports_a_target(tmp_path, family, moe, cls):
    """4 steps then 2 (the same command) == 6 straight; the export loads as a bundled target of the family."""
    extra = ("--family", family, "--moe", moe, "--steps", "6", "--eval-every", "3", "--ckpt-every", "2")
    straight = train(TrainOptions.from_argv(argv(tmp_path / "a", *extra, "--export", str(tmp_path / "out"))))
    train(TrainOptions.from_argv(argv(tmp_path / "b", *extra, "--until", "4")))
    train(TrainOptions.from_argv(argv(tmp_path / "b", *extra)))
    a = read_checkpoint(tmp_path / "a" / "runs" / "moe" / "ckpt.pt")["model"]
    b = read_checkpoint(tmp_path / "b" / "runs" / "moe" / "ckpt.pt")["model"]
    assert straight["step"] == 6 and all(torch.equal(a[k], b[k]) for k in a)
    target = load_target(tmp_path / "out" / "moe.json")
    assert type(target.model) is cls and target.model.block_size == 8


def test_moe_is_refused_where_it_does_not_apply(tmp_path):
    with pytest.raises(ValueError, match="needs --moe"):
        train(TrainOptions.from_argv(argv(tmp_path, "--family", "llada2", "--steps", "1")))
    with pytest.raises(ValueError, match="LLaDA2's"):
        train(TrainOptions.from_argv(argv(tmp_path, "--moe", "experts=4,top=2,size=8,groups=2", "--steps", "1")))
    moe = "experts=4,top=2,size=16,shared=4,groups=2,kept=1,balance=0.01"
    with pytest.raises(ValueError, match="SDAR-MoE's"):
        train(TrainOptions.from_argv(argv(tmp_path, "--family", "llada2", "--moe", moe, "--steps", "1")))


def moe_model() -> SDARMoEModel:
    torch.manual_seed(0)
    return SDARMoEModel(SDARMoEConfig(**SIZES, num_experts=4, num_experts_per_tok=2, moe_intermediate_size=16)).train()


def test_the_balance_loss_is_one_when_even_more_when_skewed_and_nothing_in_eval():
    model, ids = moe_model(), torch.randint(0, 69, (2, 12), generator=torch.Generator().manual_seed(1))
    moe, h = model.model.layers[1].mlp, model.model.embed_tokens(ids)
    loss = BalanceLoss(model, 1.0)
    moe.gate.weight.data.zero_()  # every probability 1/4: E * sum_e f_e / E = 1
    moe(h)
    assert float(loss.take()) == pytest.approx(1.0)
    mean = h.flatten(0, 1).mean(0).detach()
    moe.gate.weight.data[0] = mean / mean.norm() * 30  # expert 0 takes most tokens
    moe(h)
    assert float(loss.take()) > 1.1
    moe.eval()(h)
    assert loss.take() == 0


def test_training_on_the_balance_loss_evens_the_routing():
    """Gradient steps on the balance term alone move the most-used expert's share of slots down."""
    model, ids = moe_model(), torch.randint(0, 69, (4, 16), generator=torch.Generator().manual_seed(2))
    mean = model.model.embed_tokens(ids).flatten(0, 1).mean(0).detach()
    model.model.layers[1].mlp.gate.weight.data[0] = mean / mean.norm() * 30  # expert 0 takes most tokens
    loss, opt = BalanceLoss(model, 1.0), torch.optim.SGD(model.parameters(), lr=0.5)

    def top_share() -> float:
        with torch.no_grad():
            _, experts = model.model.layers[1].mlp.route(model.model.embed_tokens(ids).flatten(0, 1))
        return float(torch.bincount(experts.flatten(), minlength=4).max() / experts.numel())

    before = top_share()
    for _ in range(20):
        model.model.layers[1].mlp(model.model.embed_tokens(ids))  # one sparse layer's training forward
        opt.zero_grad()
        loss.take().backward()
        opt.step()
    assert before > 0.35 and top_share() < before - 0.1, (before, top_share())
