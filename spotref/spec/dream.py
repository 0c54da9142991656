"""Dream: a Qwen2 decoder run as a whole-canvas diffusion LM, in plain torch.

Qwen2 layers (RMSNorm, RoPE, grouped K/V heads, q/k/v projections WITH a bias, o_proj without,
SwiGLU) with bidirectional attention: every position attends to every position of the canvas
(no mask, no cache). Weight names are those of Dream's checkpoints (``model.embed_tokens.weight``,
``model.layers.N.self_attn.q_proj.bias``, ..., ``lm_head.weight``); config.json's ``model_type``
is ``Dream``. The head size is ``hidden_size / num_attention_heads`` (Dream's config has no
``head_dim``).

``model(ids)``: ids (N, L) -> logits (N, L, V), ONE forward of the N rows. The logits are
returned UNSHIFTED, as Dream's modeling code returns them: ``logits[:, i]`` predicts the token at
``i + 1``. The shift belongs to the decision (``logit_shift = 1``): the block's logits are read
from ``cat([logits[:, :1], logits[:, :-1]], 1)``.

Arithmetic follows Dream's attention as transformers' eager Qwen2 writes it: scores times
``d**-0.5``, the softmax in float32 and cast back, RMSNorm statistics in float32, RoPE's
cos/sin computed in float32 and cast to the model's dtype. Dream's own attention runs SDPA
without a mask; in float32 the two agree within 1e-6 (``tests/checkpoints/test_dream.py``).
Dream's config options its code ignores at inference (``use_sliding_window``, ``sliding_window``,
``attention_dropout``, ``use_cache``) are kept in ``config.extra`` and ignored here too.
"""

from __future__ import annotations

import torch
from torch import nn

from spotref.spec.sdar import MLP, RMSNorm, rope


class Attention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        H, h, kvh, d = cfg.hidden_size, cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
        self.h, self.kvh, self.d = h, kvh, d
        self.q_proj = nn.Linear(H, h * d, bias=True)
        self.k_proj = nn.Linear(H, kvh * d, bias=True)
        self.v_proj = nn.Linear(H, kvh * d, bias=True)
        self.o_proj = nn.Linear(h * d, H, bias=False)

    def forward(self, x, cos, sin):
        """x: (N, L, H); cos, sin: (L, d) -> (N, L, H). Bidirectional: no mask.
        Query heads g i .. g i + g - 1 share K/V head i."""
        N, L, _ = x.shape
        q = self.q_proj(x).view(N, L, self.h, self.d).transpose(1, 2)  # (N, h, L, d)
        k = self.k_proj(x).view(N, L, self.kvh, self.d).transpose(1, 2)  # (N, kvh, L, d)
        v = self.v_proj(x).view(N, L, self.kvh, self.d).transpose(1, 2)  # (N, kvh, L, d)
        q, k = rope(q, cos, sin), rope(k, cos, sin)
        g = self.h // self.kvh
        k, v = k.repeat_interleave(g, dim=1), v.repeat_interleave(g, dim=1)  # (N, h, L, d)
        att = torch.matmul(q, k.transpose(2, 3)) * self.d**-0.5  # (N, h, L, L)
        att = torch.softmax(att, dim=-1, dtype=torch.float32).to(q.dtype)
        y = torch.matmul(att, v)  # (N, h, L, d)
        return self.o_proj(y.transpose(1, 2).reshape(N, L, self.h * self.d))


class DecoderLayer(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.self_attn = Attention(cfg)
        self.mlp = MLP(cfg)  # SwiGLU: down(silu(gate(x)) * up(x)), no biases
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)

    def forward(self, x, cos, sin):  # x: (N, L, H) -> (N, L, H)
        x = x + self.self_attn(self.input_layernorm(x), cos, sin)
        return x + self.mlp(self.post_attention_layernorm(x))


class Backbone(nn.Module):
    """The ``model.`` part of the checkpoint: embeddings, layers, final norm."""

    def __init__(self, cfg):
        super().__init__()
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.layers = nn.ModuleList(DecoderLayer(cfg) for _ in range(cfg.num_hidden_layers))
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)


class DreamModel(nn.Module):
    """Dream diffusion LM over the whole canvas. Random init as Dream's (weights normal with std
    ``initializer_range``, biases zero, norms one); a new model is in eval mode."""

    family = "dream"
    logit_shift = 1  # logits[:, i] predicts the token at i + 1
    block_size = 32  # the default block_length of a decode

    def __init__(self, config):
        super().__init__()
        self.config = config
        self.model = Backbone(config)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        self._init_weights()
        if config.tie_word_embeddings:
            self.lm_head.weight = self.model.embed_tokens.weight
        self.eval()

    @torch.no_grad()
    def _init_weights(self):
        for name, p in self.named_parameters():
            if name.endswith("norm.weight"):
                p.fill_(1.0)
            elif name.endswith(".bias"):
                p.zero_()
            else:
                p.normal_(0.0, self.config.initializer_range)

    @property
    def mask_id(self) -> int:
        return self.config.mask_token_id

    def _rope(self, L: int, device):
        """cos, sin: (L, d) for positions 0 .. L - 1 (float32 maths, then the model's dtype)."""
        d = self.config.head_dim
        inv_freq = 1.0 / (self.config.rope_theta ** (torch.arange(0, d, 2, device=device).float() / d))  # (d/2,)
        freqs = torch.outer(torch.arange(L, device=device).float(), inv_freq)  # (L, d/2)
        emb = torch.cat((freqs, freqs), dim=-1)  # (L, d)
        dtype = self.lm_head.weight.dtype
        return emb.cos().to(dtype), emb.sin().to(dtype)

    def logits(self, ids: torch.Tensor) -> torch.Tensor:
        """ids: (N, L) -> logits (N, L, V), unshifted, gradients kept (for training)."""
        if ids.ndim != 2:
            raise ValueError(f"DreamModel takes ids of shape (N, L), got {tuple(ids.shape)}")
        ids = ids.to(self.lm_head.weight.device)
        cos, sin = self._rope(ids.shape[1], ids.device)
        x = self.model.embed_tokens(ids)  # (N, L, H)
        for layer in self.model.layers:
            x = layer(x, cos, sin)
        return self.lm_head(self.model.norm(x))  # (N, L, V)

    @torch.no_grad()
    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        """ids: (N, L) -> logits (N, L, V): one bidirectional forward of the N rows, unshifted."""
        return self.logits(ids)
