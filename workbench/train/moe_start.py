"""Upcycling: a dense SDAR target's weights as the start of a mixture-of-experts run (issue 64).

``moe_from_sdar(source, model)`` gives the state dict of ``model`` (an ``SDARMoEModel`` or a
``LLaDA2Model`` of the source's shape) that computes what ``source`` computes, or nearly:

* SDAR-MoE: attention, norms, embeddings and head as they are; in a sparse layer every expert a
  copy of the dense MLP, each perturbed by relative noise of ``NOISE`` (so the experts, and with
  them the router's gradient, can part: identical experts give the router none), the router
  drawn small. With ``norm_topk_prob`` the weights of a token's experts sum to 1, so the layer is
  the dense MLP up to that noise.
* LLaDA2: q/k/v stacked into ``query_key_value``, ``q_norm`` / ``k_norm`` / ``o_proj`` renamed
  (``partial_rotary_factor`` must be 1: SDAR rotates the whole head); the first
  ``first_k_dense_replace`` layers keep the dense MLP; in a mixture layer the shared expert is
  the dense MLP (``moe_intermediate_size * num_shared_experts`` must be its width) and every
  routed expert starts with a zero ``down_proj``, so the layer is exactly the dense MLP and the
  routed experts learn what they add; the router drawn small, its ``expert_bias`` zero.
"""

from __future__ import annotations

import torch

from spotref.spec.llada2 import LLaDA2Model
from spotref.spec.sdar import SDARModel
from spotref.spec.sdar_moe import SDARMoEModel

NOISE = 0.01  # an expert copy's relative perturbation
ROUTER_STD = 0.02
PROJECTIONS = ("gate_proj", "up_proj", "down_proj")


def moe_from_sdar(source: SDARModel, model, seed: int = 0) -> dict:
    """``model``'s state dict started from the dense ``source`` (module docstring)."""
    g = torch.Generator().manual_seed(seed)
    dense = {k: v.detach().float().clone() for k, v in source.state_dict().items()}
    if isinstance(model, LLaDA2Model):
        return llada2_from(dense, model, g)
    if isinstance(model, SDARMoEModel):
        return sdar_moe_from(dense, model, g)
    raise ValueError(f"--init: an SDAR target starts an SDAR-MoE or LLaDA2 run, not a {type(model).__name__}")


def sdar_moe_from(dense: dict, model: SDARMoEModel, g: torch.Generator) -> dict:
    cfg, out = model.config, {}
    for name, t in dense.items():
        layer = int(name.split(".")[2]) if name.startswith("model.layers.") else None
        if layer is None or ".mlp." not in name or not cfg.sparse(layer):
            out[name] = t
    for i in filter(cfg.sparse, range(cfg.num_hidden_layers)):
        p = f"model.layers.{i}.mlp"
        out[f"{p}.gate.weight"] = torch.randn(cfg.num_experts, cfg.hidden_size, generator=g) * ROUTER_STD
        for e in range(cfg.num_experts):
            for proj in PROJECTIONS:
                w = dense[f"{p}.{proj}.weight"]
                out[f"{p}.experts.{e}.{proj}.weight"] = w * (1 + NOISE * torch.randn(w.shape, generator=g))
    return fitted(out, model)


def llada2_from(dense: dict, model: LLaDA2Model, g: torch.Generator) -> dict:
    cfg, out = model.config, {}
    if cfg.partial_rotary_factor != 1:
        raise ValueError("--init an SDAR target: the LLaDA2 run must rotate whole heads (partial_rotary_factor 1)")
    if cfg.num_shared_experts is None or cfg.moe_intermediate_size * cfg.num_shared_experts != cfg.intermediate_size:
        raise ValueError("--init an SDAR target: the shared expert must be the dense MLP's width (--intermediate)")
    for name, t in dense.items():
        new = name.replace("embed_tokens", "word_embeddings").replace("self_attn.", "attention.")
        new = new.replace("q_norm", "query_layernorm").replace("k_norm", "key_layernorm").replace("o_proj", "dense")
        if ".q_proj." in name or ".k_proj." in name or ".v_proj." in name:
            continue
        layer = int(name.split(".")[2]) if name.startswith("model.layers.") else None
        if layer is not None and ".mlp." in name and layer >= cfg.first_k_dense_replace:
            new = new.replace(".mlp.", ".mlp.shared_experts.")
        out[new] = t
    for i in range(cfg.num_hidden_layers):
        a = f"model.layers.{i}.self_attn"
        out[f"model.layers.{i}.attention.query_key_value.weight"] = torch.cat(
            [dense[f"{a}.{x}_proj.weight"] for x in "qkv"]
        )
        if i < cfg.first_k_dense_replace:
            continue
        p = f"model.layers.{i}.mlp"
        out[f"{p}.gate.weight"] = torch.randn(cfg.num_experts, cfg.hidden_size, generator=g) * ROUTER_STD
        out[f"{p}.gate.expert_bias"] = torch.zeros(cfg.num_experts)
        for e in range(cfg.num_experts):
            for proj in PROJECTIONS:
                shape = model.state_dict()[f"{p}.experts.{e}.{proj}.weight"].shape
                init = torch.zeros(shape) if proj == "down_proj" else torch.randn(shape, generator=g) * 0.02
                out[f"{p}.experts.{e}.{proj}.weight"] = init
    return fitted(out, model)


def fitted(weights: dict, model) -> dict:
    """``weights`` in ``model``'s dtypes, every name of its state dict present and no other."""
    want = model.state_dict()
    missing, extra = sorted(set(want) - set(weights)), sorted(set(weights) - set(want))
    if missing or extra:
        raise ValueError(f"upcycling: missing {missing[:4]}, unexpected {extra[:4]}")
    return {k: weights[k].to(want[k].dtype) for k in want}
