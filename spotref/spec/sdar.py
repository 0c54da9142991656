"""SDAR: a Qwen3 decoder run as a block-diffusion LM, in plain torch.

Qwen3 layers (RMSNorm, RoPE, GQA, per-head q/k RMSNorm before RoPE, SwiGLU, no biases) with
block-causal attention: a token sees every token of earlier blocks and every token of its own
block, nothing later. The logit at position i predicts the token at position i (no shift).
Weights carry the names of the Hugging Face checkpoints (``model.layers.N.self_attn.q_proj.weight``).

The decoders need three operations, all on a prefix KV cache of complete blocks:

* ``prefill(ids)``: the complete prompt blocks, into a new cache;
* ``denoise(cache, states[, one_forward])``: N candidate states of the current block, logits
  ``[N, B, V]``; every row attends to the shared prefix and to its own block only;
* ``store(cache, block)``: append a finished block's K/V.

Batch invariance (docs/spec.md section 4): a row's logits must not depend on the other rows of its
pass. Two ways to run a pass give that:

* rows alone (``denoise(cache, states)``): each row runs as a forward of its own (``_run`` called
  per row), so row i of ``denoise(cache, states)`` is computed by the same kernel calls on the
  same bytes as ``denoise(cache, states[i:i + 1])``. Invariant by construction, on any device and
  any row count, but a pass of N rows costs N forwards.
* one forward (``denoise(cache, states, one_forward=True)``): the N rows (a pass at the fixed width
  N: the ``Block`` pads its states to the width) run as ONE forward: every matmul over all the
  rows' tokens at once, attention over the shared prefix cache without a copy per row (scores
  against the prefix and against the row's own block, one softmax over both). At a fixed shape
  every kernel's choice is fixed, so a row's logits do not depend on what the other rows hold.
  Where a row sits needs one more step: an elementwise kernel with a transcendental runs the last
  ``n mod 32`` floats of its buffer, and of each thread's share of it, on a scalar path with
  another ``exp`` (AVX-512, AVX2), so ``silu`` runs row by row (``silu_rows``): every row's buffer
  is split as the row alone's. (RMSNorm's ``rsqrt`` is a division and a square root, correctly
  rounded on both paths; softmax runs within a row.) Measured bit-identical on CPU under every
  capability level this machine has, 1 and 2 threads (``tests/exactness/test_batch_invariance.py``,
  whose worker fails on a flattened ``silu``); ``benchmarks/gpu_check.py`` checks the same on a
  GPU (docs/gpu.md). Logits are not identical across widths, so every pass of one decode, exact
  decoding's included, runs at one width.

Both run the same layer code; rows alone is a forward of one row, row by row.
"""

from __future__ import annotations

import torch
from torch import nn


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x):  # x: (..., dim); statistics in float32 as in Qwen3
        h = x.float() if x.dtype in (torch.float16, torch.bfloat16) else x
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * h.to(x.dtype)


def rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x: (N, h, L, d); cos, sin: (L, d). Rotate-half RoPE, as Qwen3."""
    x1, x2 = x.chunk(2, dim=-1)
    return x * cos + torch.cat((-x2, x1), dim=-1) * sin


def silu_rows(x: torch.Tensor) -> torch.Tensor:
    """x: (N, L, I) -> silu(x), one kernel call per row, so a row's floats take the vector or the
    scalar path as they do in the row alone (see the module docstring)."""
    return torch.stack([nn.functional.silu(row) for row in x])


class Attention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        h, kvh, d, H = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim, cfg.hidden_size
        self.h, self.kvh, self.d = h, kvh, d
        self.q_proj = nn.Linear(H, h * d, bias=False)
        self.k_proj = nn.Linear(H, kvh * d, bias=False)
        self.v_proj = nn.Linear(H, kvh * d, bias=False)
        self.o_proj = nn.Linear(h * d, H, bias=False)
        self.q_norm = RMSNorm(d, cfg.rms_norm_eps)
        self.k_norm = RMSNorm(d, cfg.rms_norm_eps)

    def forward(self, x, cos, sin, mask, past):
        """x: (N, L, H); mask: (L, L) additive, among the new tokens (the cache is always visible);
        past: (k, v) each (kvh, P, d), shared by every row, or None.

        Returns the output (N, L, H) and this call's new (k, v), each (N, kvh, L, d)."""
        q, k, v = self.project(x, cos, sin)
        return self.attend(q, k, v, past, mask), (k, v)

    def project(self, x, cos, sin):
        """x: (N, L, H) -> q (N, h, L, d), k and v (N, kvh, L, d), q/k normed then rotated."""
        N, L, _ = x.shape
        q = self.q_norm(self.q_proj(x).view(N, L, self.h, self.d)).transpose(1, 2)
        k = self.k_norm(self.k_proj(x).view(N, L, self.kvh, self.d)).transpose(1, 2)
        v = self.v_proj(x).view(N, L, self.kvh, self.d).transpose(1, 2)
        return rope(q, cos, sin), rope(k, cos, sin), v.contiguous()

    def attend(self, q, k, v, past, mask):
        """q: (N, h, L, d); k, v: (N, kvh, L, d) the rows' own; past: the shared prefix or None
        -> o_proj(attention): (N, L, H). Query heads g i .. g i + g - 1 share K/V head i.

        One row attends over the prefix and its block concatenated, one product each way, as
        transformers' eager attention does (bit-identical logits on the CPUs tested). Several
        rows never copy the prefix: scores against it and against each row's own block, one
        softmax over both, the two weighted sums added."""
        N, _, L, d = q.shape
        kvh, g = self.kvh, self.h // self.kvh
        P = 0 if past is None else past[0].shape[1]
        if N == 1 and P:
            k, v = (torch.cat((p[None], new), 2) for p, new in zip(past, (k, v)))
            past, P = None, 0
        qg = q.reshape(N, kvh, g * L, d)  # (N, kvh, gL, d)
        s = [torch.matmul(qg, k.transpose(2, 3))]  # (N, kvh, gL, S)
        S = s[0].shape[-1]
        if P:  # one product per K/V head
            flat = qg.transpose(0, 1).reshape(kvh, N * g * L, d)  # (kvh, N gL, d)
            s.insert(0, torch.bmm(flat, past[0].transpose(1, 2)).view(kvh, N, g * L, P).transpose(0, 1))
        mask = torch.cat((mask.new_zeros(L, S + P - L), mask), 1)  # (L, P + S)
        att = torch.cat(s, -1).view(N, kvh, g, L, P + S) * d**-0.5 + mask  # as Qwen3: times d^-1/2
        att = torch.softmax(att, dim=-1).view(N, kvh, g * L, P + S)
        y = torch.matmul(att[..., P:], v)  # (N, kvh, gL, d)
        if P:
            a = att[..., :P].transpose(0, 1).reshape(kvh, N * g * L, P)
            y = torch.bmm(a, past[1]).view(kvh, N, g * L, d).transpose(0, 1) + y
        y = y.reshape(N, self.h, L, d).transpose(1, 2).reshape(N, L, self.h * d)  # (N, L, h d)
        return self.o_proj(y)


class MLP(nn.Module):
    def __init__(self, cfg, intermediate_size: int | None = None):  # None: the config's (an expert's is its own)
        super().__init__()
        H, I = cfg.hidden_size, intermediate_size or cfg.intermediate_size
        self.gate_proj = nn.Linear(H, I, bias=False)
        self.up_proj = nn.Linear(H, I, bias=False)
        self.down_proj = nn.Linear(I, H, bias=False)

    def forward(self, x):  # SwiGLU; x: (N, L, H)
        return self.down_proj(silu_rows(self.gate_proj(x)) * self.up_proj(x))


class DecoderLayer(nn.Module):
    def __init__(self, cfg, mlp: nn.Module):
        super().__init__()
        self.self_attn = Attention(cfg)
        self.mlp = mlp
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)

    def forward(self, x, cos, sin, mask, past):
        a, kv = self.self_attn(self.input_layernorm(x), cos, sin, mask, past)
        x = x + a
        return x + self.mlp(self.post_attention_layernorm(x)), kv


class Backbone(nn.Module):
    """The ``model.`` part of the checkpoint: embeddings, layers, final norm."""

    def __init__(self, cfg, mlp_for=None):
        super().__init__()
        mlp_for = mlp_for or (lambda cfg, i: MLP(cfg))
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.layers = nn.ModuleList(DecoderLayer(cfg, mlp_for(cfg, i)) for i in range(cfg.num_hidden_layers))
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)


class KVCache:
    """K/V of the complete blocks before the current one: per layer (kvh, P, d)."""

    def __init__(self, layers):
        self.layers = layers  # list of (k, v)

    @property
    def length(self) -> int:
        return self.layers[0][0].shape[1] if self.layers else 0

    def append(self, new):  # new: per layer (k, v) each (1, kvh, B, d)
        self.layers = [
            (torch.cat((k, nk[0]), 1), torch.cat((v, nv[0]), 1)) for (k, v), (nk, nv) in zip(self.layers, new)
        ]


class SDARModel(nn.Module):
    """SDAR block-diffusion LM. Random init follows torch's RNG (normal, std initializer_range);
    a new model is in eval mode, ready to decode (training code calls ``.train()`` itself)."""

    Body, Head = Backbone, nn.Linear  # the ``model.`` part and the head (LLaDA2: its names, float32 logits)

    def __init__(self, config):
        super().__init__()
        self.config = config
        self.model = self.Body(config, self.mlp_for)
        self.lm_head = self.Head(config.hidden_size, config.vocab_size, bias=False)
        self._init_weights()
        if config.tie_word_embeddings:
            self.lm_head.weight = self.embeddings().weight
        self.eval()

    def embeddings(self) -> nn.Embedding:
        """The token embedding the head is tied to (LLaDA2 names it ``word_embeddings``)."""
        return self.model.embed_tokens

    @staticmethod
    def mlp_for(cfg, layer: int) -> nn.Module:
        """Layer ``layer``'s MLP (SDAR: Qwen3's SwiGLU; ``SDARMoEModel``: experts where sparse)."""
        return MLP(cfg)

    def _init_weights(self):
        for name, p in self.named_parameters():
            with torch.no_grad():
                if name.endswith("norm.weight"):
                    p.fill_(1.0)
                else:
                    p.normal_(0.0, self.config.initializer_range)

    @property
    def block_size(self) -> int:
        if self.config.block_size is None:
            raise ValueError("the model's config has no block_size: set config.block_size")
        return self.config.block_size

    @property
    def mask_id(self) -> int:
        if self.config.mask_token_id is None:
            raise ValueError("the model's config has no mask_token_id: set config.mask_token_id")
        return self.config.mask_token_id

    @property
    def rotary_dim(self) -> int:
        """The dims of a head RoPE rotates (SDAR: all of them; LLaDA2: a part)."""
        return self.config.head_dim

    def _rope(self, start: int, L: int, device):
        """cos, sin: (L, r) for absolute positions start .. start + L - 1, r = ``rotary_dim`` (float32 maths)."""
        d = self.rotary_dim
        inv_freq = 1.0 / (self.config.rope_theta ** (torch.arange(0, d, 2, device=device).float() / d))
        pos = torch.arange(start, start + L, device=device).float()
        freqs = torch.outer(pos, inv_freq)  # (L, d/2)
        emb = torch.cat((freqs, freqs), dim=-1)  # (L, d)
        dtype = self.lm_head.weight.dtype
        return emb.cos().to(dtype), emb.sin().to(dtype)

    def _mask(self, start: int, L: int, device):
        """Additive block-causal mask (L, L) among tokens start .. start + L - 1."""
        B = self.block_size
        blk = (start + torch.arange(L, device=device)) // B
        visible = blk[None, :] <= blk[:, None]  # (L, L)
        zero = torch.zeros((), dtype=self.lm_head.weight.dtype, device=device)
        return torch.where(visible, zero, torch.finfo(zero.dtype).min)

    def _run(self, ids: torch.Tensor, cache: KVCache | None):
        """ids: (N, L) at absolute positions P .. P + L - 1 after the cache -> hidden (N, L, H) and
        the rows' new K/V (per layer (k, v) each (N, kvh, L, d)), in ONE forward of all rows."""
        N, L = ids.shape
        P = cache.length if cache is not None else 0
        cos, sin = self._rope(P, L, ids.device)
        mask = self._mask(P, L, ids.device)
        x, new = self.model.embed_tokens(ids), []  # (N, L, H)
        for i, layer in enumerate(self.model.layers):
            x, kv = layer(x, cos, sin, mask, cache.layers[i] if cache is not None else None)
            new.append(kv)
        return self.model.norm(x), new

    def _rows(self, ids: torch.Tensor, cache: KVCache | None) -> torch.Tensor:
        """ids: (N, L) -> logits (N, L, V), each row a forward of its own."""
        return torch.cat([self.lm_head(self._run(ids[i : i + 1], cache)[0]) for i in range(len(ids))])

    def _one_forward(self, ids: torch.Tensor, cache: KVCache | None) -> torch.Tensor:
        """ids: (N, L) -> logits (N, L, V) from ONE forward of the N rows."""
        return self.lm_head(self._run(ids, cache)[0])  # the lm_head over every row: one shape

    @torch.no_grad()
    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        """Full block-causal pass without cache: (N, L) -> logits (N, L, V), row by row."""
        return self._rows(input_ids, None)

    @torch.no_grad()
    def prefill(self, ids: torch.Tensor) -> KVCache:
        """ids: (P,) with P a multiple of B (complete prompt blocks) -> a new cache."""
        assert ids.ndim == 1 and len(ids) % self.block_size == 0, f"prefill ids {tuple(ids.shape)}"
        dev = self.lm_head.weight.device
        if len(ids) == 0:
            return KVCache(
                [
                    (
                        torch.zeros(
                            self.config.num_key_value_heads,
                            0,
                            self.config.head_dim,
                            dtype=self.lm_head.weight.dtype,
                            device=dev,
                        ),
                    )
                    * 2
                    for _ in self.model.layers
                ]
            )
        _, new = self._run(ids[None].to(dev), None)
        return KVCache([(k[0], v[0]) for k, v in new])

    @torch.no_grad()
    def denoise(self, cache: KVCache, states: torch.Tensor, one_forward: bool = False) -> torch.Tensor:
        """states: (N, B) candidate states of the current block -> logits (N, B, V).

        one_forward: False runs each row alone; True runs the N rows as ONE forward, a pass at
        the fixed width N (see the module docstring: only passes of one width agree bit for bit)."""
        assert states.ndim == 2 and states.shape[1] == self.block_size, (
            f"denoise states {tuple(states.shape)}, want (N, {self.block_size})"
        )
        states = states.to(self.lm_head.weight.device)
        return self._one_forward(states, cache) if one_forward else self._rows(states, cache)

    @torch.no_grad()
    def store_and_denoise(
        self, cache: KVCache, block: torch.Tensor, states: torch.Tensor, one_forward: bool = False
    ) -> torch.Tensor:
        """The fused store: SDAR's store pass of ``block`` (B,), then the denoise pass of
        ``states`` (N, B) of the next block, in one call: two forwards (the store's K/V feed the
        denoise's attention), counted by the decoder as one pass, as an engine that overlaps them
        would. Appends the block's K/V to the cache and returns logits (N, B, V), bit for bit
        ``store(cache, block)`` then ``denoise(cache, states, one_forward)``."""
        B = self.block_size
        assert block.shape == (B,) and states.ndim == 2 and states.shape[1] == B, (
            f"store_and_denoise block {tuple(block.shape)}, states {tuple(states.shape)}"
        )
        self.store(cache, block)
        return self.denoise(cache, states, one_forward)

    @torch.no_grad()
    def store(self, cache: KVCache, block: torch.Tensor) -> None:
        """block: (B,) a finished block; appends its K/V to the cache (one row, as every decoder)."""
        assert block.shape == (self.block_size,), f"store block {tuple(block.shape)}"
        _, new = self._run(block[None].to(self.lm_head.weight.device), cache)
        cache.append(new)
