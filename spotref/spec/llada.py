"""LLaDA: a LLaMA-like transformer run as a masked diffusion LM over the whole canvas, in plain torch.

Written after reading LLaDA's modeling code (NVlabs/Fast-dLLM ``llada/model/modeling_llada.py``,
the model of ML-GSAI/LLaDA), for the configuration its checkpoints use (``block_type: "llama"``).
Each layer: RMSNorm, rotate-half RoPE applied in float32, grouped-query attention with NO mask
(every position attends to every position of the canvas: bidirectional), SwiGLU; no biases. Then
a final RMSNorm and the output projection (``ff_out``, or the embedding when ``weight_tying``).
The logit at position i predicts the token at position i (``logit_shift`` 0). There is no KV
cache: a pass runs the whole canvas (prompt, generated blocks, masked positions).

The checkpoint (config.json's ``model_type`` "llada"; LLaDA-8B: ``d_model`` 4096, 32 layers,
32 heads and 32 K/V heads, ``mlp_hidden_size`` 12288, ``vocab_size`` = ``embedding_size``
126464, ``rope_theta`` 500000, ``mask_token_id`` 126336, ``weight_tying`` false, bfloat16), with
D = d_model, d = D / n_heads, I = mlp_hidden_size (else mlp_ratio * D), V = vocab_size::

    model.transformer.wte.weight                  (V, D)
    model.transformer.blocks.N.attn_norm.weight   (D,)
    model.transformer.blocks.N.q_proj.weight      (D, D)
    model.transformer.blocks.N.k_proj.weight      (n_kv_heads * d, D)    v_proj the same
    model.transformer.blocks.N.attn_out.weight    (D, D)
    model.transformer.blocks.N.ff_norm.weight     (D,)
    model.transformer.blocks.N.ff_proj.weight     (I, D)                 the gate: silu(ff_proj x) * up_proj x
    model.transformer.blocks.N.up_proj.weight     (I, D)
    model.transformer.blocks.N.ff_out.weight      (D, I)
    model.transformer.ln_f.weight                 (D,)
    model.transformer.ff_out.weight               (V, D)                 absent when weight_tying

config.json is read as LLaDA's configuration class reads it: a key it lacks takes that class's
default (``OFFICIAL_DEFAULTS``, where it differs from ``LLaDAConfig``'s, whose defaults are
that class's otherwise), and the switches of the architecture (``ARCHITECTURE``: block type,
RoPE, norm, activation, biases, ...) must name what this module implements; anything else is
one ``ValueError`` naming the key. The sizes and MASK (``REQUIRED``), ``rope_theta`` and
``rms_norm_eps`` (``LLaDAConfig.STATED``) must be stated: they set the logits, and LLaDA-8B's
differ from the class's defaults.
"""

from __future__ import annotations

import contextlib
import functools

import torch
from torch import nn

from spotref.spec.sdar import RMSNorm, rope, silu_rows


class LLaDABlock(nn.Module):
    """One layer, LLaDA's "llama" block: x + attention(attn_norm(x)), then + SwiGLU(ff_norm(x))."""

    def __init__(self, cfg):
        super().__init__()
        D, d, I = cfg.d_model, cfg.head_dim, cfg.intermediate_size
        self.h, self.kvh, self.d = cfg.n_heads, cfg.kv_heads, d
        self.attn_norm = RMSNorm(D, cfg.rms_norm_eps)
        self.q_proj = nn.Linear(D, D, bias=False)
        self.k_proj = nn.Linear(D, self.kvh * d, bias=False)
        self.v_proj = nn.Linear(D, self.kvh * d, bias=False)
        self.attn_out = nn.Linear(D, D, bias=False)
        self.ff_norm = RMSNorm(D, cfg.rms_norm_eps)
        self.ff_proj = nn.Linear(D, I, bias=False)
        self.up_proj = nn.Linear(D, I, bias=False)
        self.ff_out = nn.Linear(I, D, bias=False)

    def forward(self, x, cos, sin):
        """x: (N, L, D); cos, sin: (L, d) float32 -> (N, L, D)."""
        x = x + self.attention(self.attn_norm(x), cos, sin)
        h = self.ff_norm(x)
        return x + self.ff_out(silu_rows(self.ff_proj(h)) * self.up_proj(h))

    def attention(self, x, cos, sin):
        """x: (N, L, D) normed -> attn_out(attention): (N, L, D). No mask: every position sees every
        position. Query head i reads K/V head i // g (g = n_heads / n_kv_heads).

        softmax(q k^T / sqrt(d)) v is computed by torch's ``scaled_dot_product_attention``, the call
        LLaDA's code makes: the same kernel gives the same bits (float32 and bfloat16 logits
        identical to LLaDA's modeling code on CPU, tests/checkpoints/test_llada.py)."""
        N, L, _ = x.shape
        q = self.q_proj(x).view(N, L, self.h, self.d).transpose(1, 2)  # (N, h, L, d)
        k = self.k_proj(x).view(N, L, self.kvh, self.d).transpose(1, 2)  # (N, kvh, L, d)
        v = self.v_proj(x).view(N, L, self.kvh, self.d).transpose(1, 2)  # (N, kvh, L, d)
        q, k = (rope(t.float(), cos, sin).to(t.dtype) for t in (q, k))  # RoPE in float32 (rope_full_precision)
        k, v = (t.repeat_interleave(self.h // self.kvh, dim=1) for t in (k, v))  # (N, h, L, d)
        with attention_kernel(q.dtype, q.device):
            y = nn.functional.scaled_dot_product_attention(q, k, v)  # (N, h, L, d), no mask, scale d^-1/2
        return self.attn_out(y.transpose(1, 2).reshape(N, L, self.h * self.d))  # (N, L, D)


def attention_kernel(dtype: torch.dtype, device: torch.device):
    """The kernel ``scaled_dot_product_attention`` runs: torch's choice (LLaDA's own), except bf16 on
    a CPU dispatched below AVX-512 (``ATEN_CPU_CAPABILITY=avx2`` on an AVX-512 machine), where the
    fused CPU kernel fails for longer sequences ("pack_vnni2 is only supported when avx512 is
    supported", torch 2.13): there every pass takes the math kernel, chosen by the dispatch level
    and dtype alone, so all passes of a decode run the same kernel."""
    if dtype == torch.bfloat16 and device.type == "cpu" and below_avx512():
        return torch.nn.attention.sdpa_kernel(torch.nn.attention.SDPBackend.MATH)
    return contextlib.nullcontext()


@functools.cache
def below_avx512() -> bool:
    """Whether this process's CPU kernels are dispatched below AVX-512 (torch reads the level once)."""
    return torch.backends.cpu.get_cpu_capability() != "AVX512"


class Transformer(nn.Module):
    """The ``model.transformer.`` part of the checkpoint: wte, blocks, ln_f and ff_out (the head,
    absent when weight_tying)."""

    def __init__(self, cfg):
        super().__init__()
        self.wte = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.blocks = nn.ModuleList(LLaDABlock(cfg) for _ in range(cfg.n_layers))
        self.ln_f = RMSNorm(cfg.d_model, cfg.rms_norm_eps)
        if not cfg.weight_tying:
            self.ff_out = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)


class LMBody(nn.Module):
    """LLaDAModelLM's ``model``: the ``model.`` prefix of the checkpoint, around the transformer."""

    def __init__(self, cfg):
        super().__init__()
        self.transformer = Transformer(cfg)


class LLaDAModel(nn.Module):
    """LLaDA as spotref's whole-canvas target: ``model(ids (N, L)) -> logits (N, L, V)``, one forward
    of the N rows. Random init follows torch's RNG (normal, std init_std; norms 1); a new model
    is in eval mode."""

    family = "llada"
    logit_shift = 0  # the logit at i predicts the token at i
    block_size = 32  # the default block_length of LLaDA's generate.py

    def __init__(self, config):
        super().__init__()
        self.config = config
        self.model = LMBody(config)
        self._init_weights()
        self.eval()

    def _init_weights(self):
        with torch.no_grad():
            for name, p in self.named_parameters():
                if name.endswith(("norm.weight", "ln_f.weight")):
                    p.fill_(1.0)
                else:
                    p.normal_(0.0, self.config.init_std)

    @property
    def mask_id(self) -> int:
        if self.config.mask_token_id is None:
            raise ValueError("the model's config has no mask_token_id: set config.mask_token_id")
        return self.config.mask_token_id

    def rotary(self, L: int, device):
        """cos, sin: (L, d) float32 for positions 0 .. L-1, as LLaDA computes them: a table of
        max(L, max_sequence_length) positions, sliced (a vectorised cos / sin may round the
        elements of a loop's tail apart, so the table's length is LLaDA's)."""
        d, n = self.config.head_dim, max(L, self.config.max_sequence_length)
        inv_freq = 1.0 / (self.config.rope_theta ** (torch.arange(0, d, 2, device=device, dtype=torch.float) / d))
        freqs = torch.outer(torch.arange(n, device=device, dtype=torch.float), inv_freq)  # (n, d/2)
        emb = torch.cat((freqs, freqs), dim=-1)  # (n, d)
        return emb.cos()[:L], emb.sin()[:L]

    def logits(self, ids: torch.Tensor) -> torch.Tensor:
        """ids: (N, L) -> logits (N, L, V), one forward of the N rows (gradients kept, for training)."""
        t = self.model.transformer
        cos, sin = self.rotary(ids.shape[1], ids.device)
        x = t.wte(ids)  # (N, L, D)
        for block in t.blocks:
            x = block(x, cos, sin)
        x = t.ln_f(x)
        return nn.functional.linear(x, t.wte.weight) if self.config.weight_tying else t.ff_out(x)

    @torch.no_grad()
    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        """ids: (N, L) token ids -> logits (N, L, V) of one bidirectional forward, as LLaDA returns them."""
        if ids.ndim != 2:
            raise ValueError(f"LLaDAModel takes ids of shape (N, L), got {tuple(ids.shape)}")
        return self.logits(ids.to(self.model.transformer.wte.weight.device))
