"""SDAR-MoE: SDAR's block diffusion over a Qwen3-MoE body (``model_type`` "sdar_moe", as
SDAR-30B-A3B), in plain torch.

Everything but a sparse layer's MLP is SDAR's (``spotref.spec.sdar``): the cache, the passes,
the block-causal mask, the decoders. A sparse layer (``SDARMoEConfig.sparse``) replaces the MLP
by a mixture of experts, Qwen3-MoE's (transformers' ``Qwen3MoeSparseMoeBlock``):

* the router: ``gate(x)`` (E logits per token, in the hidden dtype), softmax in float32, the
  top ``k`` experts (``torch.topk``), their probabilities divided by their sum where
  ``norm_topk_prob``, cast to the hidden dtype;
* each expert Qwen3's SwiGLU MLP (``sdar.MLP``) of ``moe_intermediate_size``; a token's output is the sum over its
  ``k`` experts of weight times expert output, added in ascending expert order into zeros.

Weights carry the checkpoint's names: ``model.layers.N.mlp.gate.weight`` (E, H) and
``model.layers.N.mlp.experts.J.{gate,up,down}_proj.weight``, one set per expert.

**Batch invariance under routing** (docs/spec.md section 4). An expert's matmul runs over the
tokens routed to it. Grouped over the whole pass (every row's tokens, as an engine's fused MoE
does), its shape, and with it the kernel's blocking and the bits of every row's result, depends
on what the other rows route where. Here a pass never groups across rows: each row routes and
runs its experts over its own tokens only (``SparseMoE.row``), so every expert call a row makes
has the shape and the bytes it has in the row alone, at any width. The router's matmul and
``silu`` run per row too. ``tests/exactness/test_moe.py`` shows the grouping over the pass
differs and the per-row grouping does not, under every CPU capability level.
"""

from __future__ import annotations

import torch
from torch import nn

from spotref.spec.sdar import MLP, SDARModel


class SparseMoE(nn.Module):
    """Qwen3-MoE's mixture of experts, run row by row (module docstring)."""

    def __init__(self, cfg):
        super().__init__()
        self.k, self.norm_topk_prob = cfg.num_experts_per_tok, cfg.norm_topk_prob
        self.gate = nn.Linear(cfg.hidden_size, cfg.num_experts, bias=False)
        self.experts = nn.ModuleList(MLP(cfg, cfg.moe_intermediate_size) for _ in range(cfg.num_experts))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: (N, L, H) -> (N, L, H), each row's experts over its own tokens (in training, every
        token of the batch at once: no decision is taken there)."""
        return self.row(x.flatten(0, 1)).view(x.shape) if self.training else torch.stack([self.row(r) for r in x])

    def route(self, x: torch.Tensor) -> tuple:
        """x: (T, H) -> (weights (T, k) in x's dtype, experts (T, k)): softmax in float32, top k,
        renormalised where ``norm_topk_prob``."""
        probs = torch.softmax(self.gate(x).float(), dim=-1)  # (T, E)
        weights, experts = torch.topk(probs, self.k, dim=-1)
        if self.norm_topk_prob:
            weights = weights / weights.sum(-1, keepdim=True)
        return weights.to(x.dtype), experts

    def row(self, x: torch.Tensor) -> torch.Tensor:
        """x: (L, H), one row's tokens -> (L, H): each expert hit, in ascending order, over the
        tokens routed to it (its slot order, then token order), added into zeros."""
        weights, experts = self.route(x)
        out = torch.zeros_like(x)
        for e in torch.unique(experts).tolist():  # sorted
            slot, token = torch.where(experts.T == e)  # (m,) each: k-slot major, as transformers
            y = self.experts[e](x[token][None])[0] * weights[token, slot, None]  # the row's tokens routed to e
            out.index_add_(0, token, y.to(out.dtype))
        return out


class SDARMoEModel(SDARModel):
    """SDAR-MoE: ``SDARModel`` whose sparse layers' MLPs are ``SparseMoE``; decided, cached and
    passed exactly as SDAR (its family is "sdar"). Written as config.json's ``sdar_moe``."""

    checkpoint_type = "sdar_moe"

    @staticmethod
    def mlp_for(cfg, layer: int) -> nn.Module:
        return SparseMoE(cfg) if cfg.sparse(layer) else SDARModel.mlp_for(cfg, layer)
