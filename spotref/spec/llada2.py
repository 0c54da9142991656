"""LLaDA2: LLaDA2.0 / 2.1's mixture-of-experts body (``model_type`` "llada2_moe"), in plain torch.

The layers are its public ``modeling_llada2_moe.py``'s, read, not copied:

* attention: one fused ``query_key_value`` projection (no bias unless ``use_qkv_bias``) split
  into h query, kvh key and kvh value heads of ``head_dim``; per-head RMSNorm of q and k
  (``query_layernorm``, ``key_layernorm``); rotary embedding on the first
  ``rope_dim = head_dim * partial_rotary_factor`` dims of each head only (rotate-half over
  those, the rest passed through); output projection ``dense`` (a bias if ``use_bias``);
* layers ``0 .. first_k_dense_replace - 1``: a SwiGLU MLP of ``intermediate_size``; the others a
  mixture of experts (``MoE``): ``num_experts`` routed SwiGLU experts of
  ``moe_intermediate_size`` plus, where ``num_shared_experts``, one shared SwiGLU of
  ``moe_intermediate_size * num_shared_experts`` added to every token;
* the router (``Gate``), in float32 whatever the model's dtype: ``s = sigmoid(x W^T)`` (E
  scores); the experts are *selected* on ``s + expert_bias`` (a stored buffer, E values), within
  groups: the E experts form ``n_group`` groups, a group scores the sum of its two best, the best
  ``topk_group`` groups stay, and of their experts the top ``num_experts_per_tok`` are taken;
  the *weights* are the selected experts' ``s`` without the bias, divided by their sum (plus
  1e-20) when more than one is taken, times ``routed_scaling_factor``; a token's output is the
  weighted sum, in float32 in the order of its selection, of its experts' outputs, cast back;
* the head's logits are returned in float32 (``logits.float()``, as its forward does): LLaDA2's
  decisions are taken in float32 of the model's (bf16) logits.

Weights carry the checkpoint's names: ``model.word_embeddings.weight``,
``model.layers.N.attention.{query_key_value,query_layernorm,key_layernorm,dense}``,
``model.layers.N.mlp.gate.{weight,expert_bias}``, ``model.layers.N.mlp.experts.J.{gate,up,down}_proj``,
``model.layers.N.mlp.shared_experts.*``, ``model.norm.weight``, ``lm_head.weight``.

Attention is block-causal over blocks of ``block_size`` from position 0, as its ``generate``
builds it, and everything else (the passes, batch invariance) is SDAR's (``spotref.spec.sdar``).
Its own decoder (docs/spec.md section 1.1) recomputes the whole prefix every pass, no cache:
``forward(ids)`` over the window of blocks so far. Its ``moe_infer`` groups every token of the
batch by expert; here each row routes and runs its experts over its own tokens only
(``MoE.row``), as SDAR-MoE's (``spotref.spec.sdar_moe``), so a row's logits do not depend on the
other rows of its pass (docs/spec.md section 4).
"""

from __future__ import annotations

import torch
from torch import nn

from spotref.spec.sdar import MLP, Attention, Backbone, DecoderLayer, RMSNorm, SDARModel, rope


def partial_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x: (N, h, L, d); cos, sin: (L, r), r <= d -> rotate-half RoPE on x's first r dims, the rest as is."""
    r = cos.shape[-1]
    return torch.cat((rope(x[..., :r], cos, sin), x[..., r:]), dim=-1)


class FusedAttention(Attention):
    """LLaDA2's attention: fused q/k/v, per-head norms, partial rotary, ``dense`` out
    (``Attention.attend``'s batch-invariant product, block-causal mask and prefix handling)."""

    def __init__(self, cfg):
        nn.Module.__init__(self)
        h, kvh, d, H = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim, cfg.hidden_size
        self.h, self.kvh, self.d = h, kvh, d
        self.query_key_value = nn.Linear(H, (h + 2 * kvh) * d, bias=cfg.use_qkv_bias)
        self.query_layernorm = RMSNorm(d, cfg.rms_norm_eps)
        self.key_layernorm = RMSNorm(d, cfg.rms_norm_eps)
        self.dense = nn.Linear(h * d, H, bias=cfg.use_bias)

    def o_proj(self, y):  # what ``Attention.attend`` projects its output with
        return self.dense(y)

    def project(self, x, cos, sin):
        """x: (N, L, H) -> q (N, h, L, d), k and v (N, kvh, L, d), q/k normed then rotated on their first r dims."""
        N, L, _ = x.shape
        qkv = self.query_key_value(x).view(N, L, self.h + 2 * self.kvh, self.d)  # (N, L, h + 2 kvh, d)
        q, k, v = qkv.split((self.h, self.kvh, self.kvh), 2)
        q = self.query_layernorm(q.transpose(1, 2))
        k = self.key_layernorm(k.transpose(1, 2))
        return partial_rope(q, cos, sin), partial_rope(k, cos, sin), v.transpose(1, 2).contiguous()


class Gate(nn.Module):
    """LLaDA2's router (module docstring): sigmoid scores in float32, grouped top-k selection
    on the scores plus ``expert_bias``, weights from the scores alone."""

    def __init__(self, cfg):
        super().__init__()
        self.k, self.groups, self.kept = cfg.num_experts_per_tok, cfg.n_group, cfg.topk_group
        self.scale = cfg.routed_scaling_factor
        self.weight = nn.Parameter(torch.empty(cfg.num_experts, cfg.hidden_size))
        self.register_buffer("expert_bias", torch.zeros(cfg.num_experts))

    def forward(self, x: torch.Tensor) -> tuple:
        """x: (T, H) -> (weights (T, k) float32, experts (T, k)), experts in selection order."""
        s = torch.sigmoid(nn.functional.linear(x.float(), self.weight.float()))  # (T, E)
        experts = self.select(s + self.expert_bias.float())
        w = s.gather(1, experts)  # (T, k): the scores, not the biased ones
        if self.k > 1:
            w = w / (w.sum(-1, keepdim=True) + 1e-20)
        return w * self.scale, experts

    def select(self, biased: torch.Tensor) -> torch.Tensor:
        """biased: (T, E) -> (T, k) the experts of the best ``topk_group`` groups' top k."""
        T, E = biased.shape
        grouped = biased.view(T, self.groups, E // self.groups)  # (T, G, E / G)
        best = grouped.topk(2, dim=-1).values.sum(-1).topk(self.kept, dim=-1, sorted=False).indices  # (T, kept)
        keep = torch.zeros(T, self.groups, dtype=torch.bool, device=biased.device).scatter(1, best, True)
        allowed = keep[:, :, None].expand(T, self.groups, E // self.groups).reshape(T, E)
        return biased.masked_fill(~allowed, -torch.inf).topk(self.k, dim=-1).indices


class MoE(nn.Module):
    """LLaDA2's mixture of experts (module docstring), run row by row."""

    def __init__(self, cfg):
        super().__init__()
        self.gate = Gate(cfg)
        self.experts = nn.ModuleList(MLP(cfg, cfg.moe_intermediate_size) for _ in range(cfg.num_experts))
        if cfg.num_shared_experts:
            self.shared_experts = MLP(cfg, cfg.moe_intermediate_size * cfg.num_shared_experts)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: (N, L, H) -> (N, L, H), each row's experts over its own tokens, plus the shared expert
        (in training, every token of the batch at once: no decision is taken there)."""
        y = self.row(x.flatten(0, 1)).view(x.shape) if self.training else torch.stack([self.row(r) for r in x])
        return y + self.shared_experts(x) if hasattr(self, "shared_experts") else y

    def row(self, x: torch.Tensor) -> torch.Tensor:
        """x: (L, H), one row's tokens -> (L, H): each expert hit, in ascending order, over the
        row's tokens routed to it; the k outputs of a token weighted and summed in float32."""
        w, experts = self.gate(x)  # (L, k) each
        out = x.new_zeros(*experts.shape, x.shape[-1])  # (L, k, H): each token's k expert outputs
        for e in torch.unique(experts).tolist():  # sorted
            token, slot = torch.where(experts == e)
            out[token, slot] = self.experts[e](x[token][None])[0]
        return (out.float() * w[..., None]).sum(1).to(x.dtype)


class Layers(Backbone):
    """The ``model.`` part of the checkpoint under LLaDA2's names (``word_embeddings``)."""

    def __init__(self, cfg, mlp_for):
        nn.Module.__init__(self)
        self.word_embeddings = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.layers = nn.ModuleList(Layer(cfg, mlp_for(cfg, i)) for i in range(cfg.num_hidden_layers))
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)

    def embed_tokens(self, ids):  # what ``SDARModel._run`` embeds with
        return self.word_embeddings(ids)


class Layer(DecoderLayer):
    """A decoder layer under LLaDA2's names (``attention``)."""

    def __init__(self, cfg, mlp: nn.Module):
        nn.Module.__init__(self)
        self.attention = FusedAttention(cfg)
        self.mlp = mlp
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)

    def self_attn(self, *args):  # what ``DecoderLayer.forward`` attends with
        return self.attention(*args)


class FloatHead(nn.Linear):
    """``lm_head``: its logits returned in float32, as LLaDA2's forward returns ``logits.float()``."""

    def forward(self, x):
        return super().forward(x).float()


class LLaDA2Model(SDARModel):
    """LLaDA2: ``SDARModel``'s passes over LLaDA2's layers (module docstring). Its family is
    "llada2": decided by its own rule (``rules.FAMILIES``) over the whole prefix each pass
    (``decode.WindowBinding``). Random init as SDAR's; ``expert_bias`` starts at zero."""

    checkpoint_type = "llada2_moe"
    family = "llada2"
    Body, Head = Layers, FloatHead

    def embeddings(self) -> nn.Embedding:
        return self.model.word_embeddings

    @staticmethod
    def mlp_for(cfg, layer: int) -> nn.Module:
        return MoE(cfg) if layer >= cfg.first_k_dense_replace else MLP(cfg)

    @property
    def rotary_dim(self) -> int:
        return int(self.config.head_dim * self.config.partial_rotary_factor)

    @torch.no_grad()
    def window(self, ids: torch.Tensor, one_forward: bool = False) -> torch.Tensor:
        """ids: (N, L), L a multiple of B, each row a window from position 0 whose last block is
        the one being decided -> that block's logits (N, B, V) float32, from a block-causal pass
        over the whole window: each row alone, or the N rows as ONE forward (``one_forward``)."""
        B = self.block_size
        assert ids.ndim == 2 and ids.shape[1] % B == 0 and ids.shape[1], f"window ids {tuple(ids.shape)}"
        ids = ids.to(self.lm_head.weight.device)
        if one_forward:
            return self.lm_head(self._run(ids, None)[0][:, -B:])
        return torch.cat([self.lm_head(self._run(ids[i : i + 1], None)[0][:, -B:]) for i in range(len(ids))])
