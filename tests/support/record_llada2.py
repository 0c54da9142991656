"""Record LLaDA2's own forward on tiny models as test fixtures (issue 64), run by hand once:

    python tests/support/record_llada2.py DIR [--out tests/fixtures/llada2]

DIR holds LLaDA2's public ``modeling_llada2_moe.py`` and ``configuration_llada2_moe.py`` (the remote
code shipped with inclusionAI's checkpoints; one copy is in repository sajadn/Megatron-Bridge,
modeling file SHA-256 40cc29d5...dcc5). Nothing of it is kept here: this script imports it, with
shims for what transformers 5 no longer has (``modeling_attn_mask_utils``, whose 4D mask here
passes through as the additive block mask LLaDA2's generate builds; RoPE's "default" init, its
formula; ``is_torch_fx_available``), builds each tiny model with spotref's weights (random, a
nonzero ``expert_bias``), runs its eager forward in float32 on windows under the block-causal
mask, and writes per model a checkpoint directory (spotref's writer), ``logits.safetensors``
(the windows' ids and LLaDA2's logits) and ``generate.json`` (its own ``generate``'s tokens at
T = 0, ``generations``). ``tests/exactness/test_llada2.py`` compares spotref's forward with the
logits (1e-5) and its exact decoding with the tokens (0 differences)."""

import argparse
import importlib.util
import json
import sys
import types
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from spotref.configs_llada2 import LLaDA2Config  # noqa: E402
from spotref.spec.llada2 import LLaDA2Model  # noqa: E402

MODELS = {  # name -> LLaDA2Config fields (sizes, routing), each a different corner
    "grouped": dict(num_experts=8, n_group=4, topk_group=2, num_experts_per_tok=3, first_k_dense_replace=1),
    "one-group-no-shared": dict(
        num_experts=6, n_group=1, topk_group=1, num_experts_per_tok=2, first_k_dense_replace=0, num_shared_experts=None
    ),
    "top-1-biased": dict(
        num_experts=8,
        n_group=2,
        topk_group=1,
        num_experts_per_tok=1,
        first_k_dense_replace=1,
        partial_rotary_factor=1.0,
        use_bias=True,
        use_qkv_bias=True,
        routed_scaling_factor=1.0,
    ),  # fmt: skip
}
SIZES = dict(
    vocab_size=80, hidden_size=32, intermediate_size=48, num_hidden_layers=3, num_attention_heads=4,
    num_key_value_heads=2, head_dim=8, mask_token_id=79, block_size=4, moe_intermediate_size=16,
    initializer_range=0.3, rms_norm_eps=1e-6, rope_theta=600000.0, eos_token_id=1,
)  # fmt: skip


def shims() -> None:
    """What LLaDA2's modeling code imports that transformers 5 dropped."""
    masks = types.ModuleType("transformers.modeling_attn_mask_utils")
    masks._prepare_4d_causal_attention_mask = lambda mask, *args, **kw: mask  # the additive 4D block mask as is
    masks._prepare_4d_causal_attention_mask_for_sdpa = masks._prepare_4d_causal_attention_mask
    sys.modules[masks.__name__] = masks
    import transformers.utils.import_utils as iu
    from transformers import modeling_rope_utils

    iu.is_torch_fx_available = lambda: False

    def default_rope(config, device=None, *args, **kw):  # transformers 4's default: base ** (-2i / dim)
        dim = int(config.head_dim * getattr(config, "partial_rotary_factor", 1.0))
        i = torch.arange(0, dim, 2, dtype=torch.int64).to(device=device, dtype=torch.float)
        return 1.0 / (config.rope_theta ** (i / dim)), 1.0

    modeling_rope_utils.ROPE_INIT_FUNCTIONS["default"] = default_rope


def load_theirs(folder: Path):
    """LLaDA2's modeling module from ``folder``, imported as a package (it imports its config relatively)."""
    pkg = types.ModuleType("llada2_remote")
    pkg.__path__ = [str(folder)]
    sys.modules["llada2_remote"] = pkg
    out = []
    for name in ("configuration_llada2_moe", "modeling_llada2_moe"):
        spec = importlib.util.spec_from_file_location(f"llada2_remote.{name}", folder / f"{name}.py")
        mod = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = mod
        spec.loader.exec_module(mod)
        out.append(mod)
    return out


def block_mask(L: int, B: int) -> torch.Tensor:
    """(1, 1, L, L) additive float32: 0 where a block sees a block, -inf elsewhere, as its generate builds it."""
    blocks = torch.arange(L) // B
    return torch.where(blocks[None, :] <= blocks[:, None], 0.0, float("-inf"))[None, None]


def theirs_of(conf_mod, model_mod, ours: LLaDA2Model):
    c = ours.config
    fields = {k: getattr(c, k) for k in (*SIZES, "use_bias", "use_qkv_bias", "partial_rotary_factor", "num_experts")}
    fields.update({k: getattr(c, k) for k in ("num_experts_per_tok", "n_group", "topk_group", "routed_scaling_factor")})
    fields.update(num_shared_experts=c.num_shared_experts, first_k_dense_replace=c.first_k_dense_replace)
    fields = {k: v for k, v in fields.items() if k not in ("mask_token_id", "block_size")}
    cfg = conf_mod.LLaDA2MoeConfig(**fields, tie_word_embeddings=False, pad_token_id=0)
    cfg._attn_implementation, cfg.use_cache = "eager", False  # no cache: transformers 5 has no legacy one
    m = model_mod.LLaDA2MoeModelLM(cfg).eval()
    missing, unexpected = m.load_state_dict(ours.state_dict(), strict=False)
    assert not missing and not unexpected, (missing, unexpected)
    return m


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dir", type=Path)
    ap.add_argument("--out", type=Path, default=ROOT / "tests" / "fixtures" / "llada2")
    args = ap.parse_args(argv)
    shims()
    conf_mod, model_mod = load_theirs(args.dir)
    from safetensors.torch import save_file

    from workbench.checkpoint_writer import save_pretrained

    for i, (name, routing) in enumerate(MODELS.items()):
        torch.manual_seed(i)
        ours = LLaDA2Model(LLaDA2Config(**{**SIZES, **routing}))
        for layer in ours.model.layers:
            if hasattr(layer.mlp, "gate"):
                layer.mlp.gate.expert_bias.normal_(0, 0.3)
        theirs = theirs_of(conf_mod, model_mod, ours)
        ids = torch.randint(0, 79, (3, 3 * SIZES["block_size"]))
        ids[:, -3:] = 79  # MASK in the last block, as a window being decided
        with torch.no_grad():
            L = ids.shape[1]
            mask = block_mask(L, SIZES["block_size"]).expand(len(ids), 1, L, L)
            run = theirs(ids, attention_mask=mask, position_ids=torch.arange(L)[None], use_cache=False)
            logits = run.logits
        save_pretrained(ours, args.out / name)
        save_file({"ids": ids, "logits": logits.float().contiguous()}, str(args.out / name / "logits.safetensors"))
        runs = generations(theirs)
        (args.out / name / "generate.json").write_text(json.dumps(runs, indent=1) + "\n")
        print(name, tuple(logits.shape), float((ours.forward(ids) - logits).abs().max()), len(runs), "generations")


PROMPTS = ([5, 6, 7], [9, 10, 11, 12, 13], list(range(20, 29)))  # inside a block, across one, ending one


def generations(theirs) -> list:
    """LLaDA2's own ``generate`` (T = 0, ``steps == block_length``: one commit per step unless the
    threshold passes more, EOS early stop) on ``PROMPTS`` at two thresholds, MASK's logit set to
    -inf first, as spotref's rule does (a random model predicts MASK; a trained one does not):
    [{prompt, threshold, new tokens (EOS included, as it returns them)}]."""
    real, B, mask = theirs.forward, SIZES["block_size"], SIZES["mask_token_id"]

    def forward(*args, **kw):
        out = real(*args, **kw)
        out.logits[..., mask] = -torch.inf
        return out

    theirs.forward, runs = forward, []
    for tau in (0.95, 0.5):
        for prompt in PROMPTS:
            kw = dict(block_length=B, steps=B, gen_length=12, threshold=tau, eos_early_stop=True)
            out = theirs.generate(
                torch.tensor([prompt]), temperature=0.0, eos_id=SIZES["eos_token_id"], mask_id=mask, **kw
            )
            runs.append({"prompt": prompt, "threshold": tau, "tokens": out[0, len(prompt) :].tolist()})
    theirs.forward = real
    return runs


if __name__ == "__main__":
    main()
