"""A whole-canvas model (LLaDA, Dream) started from an SDAR model's weights: the start of a canvas
target's training (as Dream was started from an autoregressive model, Qwen2.5).

``canvas_from_sdar(sdar_model, family)`` builds the family's model of the same shape (hidden size,
layers, query and K/V heads, head size, MLP size, vocabulary, MASK id, positions, RoPE base,
RMSNorm epsilon, tied head, serving precision) and copies every tensor that has a counterpart.
Per layer N (SDAR's names under ``model.layers.N.``)::

    SDAR                            LLaDA (model.transformer.blocks.N.)   Dream (model.layers.N.)
    input_layernorm.weight          attn_norm.weight                      input_layernorm.weight
    self_attn.q_proj.weight         q_proj.weight                         self_attn.q_proj.weight
    self_attn.k_proj.weight         k_proj.weight                         self_attn.k_proj.weight
    self_attn.v_proj.weight         v_proj.weight                         self_attn.v_proj.weight
    self_attn.o_proj.weight         attn_out.weight                       self_attn.o_proj.weight
    self_attn.q_norm.weight         (dropped: LLaDA has no q/k norm)      (dropped: Dream has none)
    self_attn.k_norm.weight         (dropped)                             (dropped)
    post_attention_layernorm.weight ff_norm.weight                        post_attention_layernorm.weight
    mlp.gate_proj.weight            ff_proj.weight                        mlp.gate_proj.weight
    mlp.up_proj.weight              up_proj.weight                        mlp.up_proj.weight
    mlp.down_proj.weight            ff_out.weight                         mlp.down_proj.weight

and ``model.embed_tokens.weight`` -> ``model.transformer.wte.weight`` (LLaDA) / the same name
(Dream), ``model.norm.weight`` -> ``model.transformer.ln_f.weight`` / the same, ``lm_head.weight``
-> ``model.transformer.ff_out.weight`` / the same (a tied head stays tied: LLaDA's
``weight_tying``, Dream's ``tie_word_embeddings``). Dream's q/k/v biases (SDAR has none) are zero.

It is a starting point, not the same function: the q/k norms are gone and attention becomes
bidirectional over the whole canvas, so the model is trained before it is served. Dropped, the
norms leave every attention score off by each head's query and key scale; ``calibration``
(documents the SDAR model reads) folds them in instead (``fold_qk_norms``): SDAR's norm is
``w * q / rms(q)`` per head, a token's own ``rms(q)`` has no counterpart in LLaDA or Dream, so the
fold keeps ``w`` and replaces ``1 / rms(q)`` by one scale per layer and head, the least-squares
``c = E[rms] / E[rms^2]`` over the calibration tokens (``c q`` nearest ``q / rms(q)``):
``W_q[h] <- c_h diag(w) W_q[h]``, the same for keys. It lives with
the trainers because nothing but a training run starts from it; the result is saved as a target
with ``workbench.target_writer.save_target``.
"""

from __future__ import annotations

import torch

from spotref.configs import DreamConfig, LLaDAConfig
from spotref.spec.decode import CANVAS_FAMILIES
from spotref.spec.dream import DreamModel
from spotref.spec.llada import LLaDAModel
from spotref.spec.rules import SERVED
from spotref.spec.sdar import SDARModel

# SDAR's name inside model.layers.N. -> (LLaDA's inside model.transformer.blocks.N., Dream's inside model.layers.N.)
LAYER_NAMES = {
    "input_layernorm.weight": ("attn_norm.weight", "input_layernorm.weight"),
    "self_attn.q_proj.weight": ("q_proj.weight", "self_attn.q_proj.weight"),
    "self_attn.k_proj.weight": ("k_proj.weight", "self_attn.k_proj.weight"),
    "self_attn.v_proj.weight": ("v_proj.weight", "self_attn.v_proj.weight"),
    "self_attn.o_proj.weight": ("attn_out.weight", "self_attn.o_proj.weight"),
    "post_attention_layernorm.weight": ("ff_norm.weight", "post_attention_layernorm.weight"),
    "mlp.gate_proj.weight": ("ff_proj.weight", "mlp.gate_proj.weight"),
    "mlp.up_proj.weight": ("up_proj.weight", "mlp.up_proj.weight"),
    "mlp.down_proj.weight": ("ff_out.weight", "mlp.down_proj.weight"),
}
TOP_NAMES = {  # SDAR's name -> (LLaDA's, Dream's)
    "model.embed_tokens.weight": ("model.transformer.wte.weight", "model.embed_tokens.weight"),
    "model.norm.weight": ("model.transformer.ln_f.weight", "model.norm.weight"),
    "lm_head.weight": ("model.transformer.ff_out.weight", "lm_head.weight"),
}
DROPPED = ("self_attn.q_norm.weight", "self_attn.k_norm.weight")  # SDAR's q/k RMSNorms: no counterpart
FOLD_DOCUMENTS = 64  # train-target --fold-norms: the first training documents the norms are folded over


def counterparts(family: str, n_layers: int, tied: bool) -> dict[str, str]:
    """{SDAR name: the family's name} for every tensor copied (a tied head: through the embedding)."""
    i = CANVAS_FAMILIES.index(family)
    layer = "model.transformer.blocks" if family == "llada" else "model.layers"
    names = {k: v[i] for k, v in TOP_NAMES.items() if not (tied and k == "lm_head.weight")}
    for n in range(n_layers):
        names.update({f"model.layers.{n}.{k}": f"{layer}.{n}.{v[i]}" for k, v in LAYER_NAMES.items()})
    return names


def canvas_config(cfg, family: str) -> LLaDAConfig | DreamConfig:
    """The family's config of the same shape as the SDARConfig ``cfg`` (``ValueError`` where the
    family cannot hold it: its head size is hidden / heads)."""
    if cfg.head_dim * cfg.num_attention_heads != cfg.hidden_size:
        raise ValueError(
            f"canvas_from_sdar: the SDAR head size {cfg.head_dim} times {cfg.num_attention_heads} heads is not "
            f"the hidden size {cfg.hidden_size}; LLaDA and Dream take head size = hidden / heads"
        )
    served = {k: cfg.extra[k] for k in SERVED if k in cfg.extra}  # the serving precision (torch_dtype)
    if family == "llada":
        return LLaDAConfig(
            vocab_size=cfg.vocab_size, d_model=cfg.hidden_size, n_heads=cfg.num_attention_heads,
            n_kv_heads=cfg.num_key_value_heads, n_layers=cfg.num_hidden_layers, mlp_hidden_size=cfg.intermediate_size,
            rms_norm_eps=cfg.rms_norm_eps, rope_theta=cfg.rope_theta, max_sequence_length=cfg.max_position_embeddings,
            weight_tying=cfg.tie_word_embeddings, mask_token_id=cfg.mask_token_id, init_std=cfg.initializer_range,
            extra={**served, "eos_token_id": cfg.eos_token_id},
        )  # fmt: skip
    return DreamConfig(
        vocab_size=cfg.vocab_size, hidden_size=cfg.hidden_size, intermediate_size=cfg.intermediate_size,
        num_hidden_layers=cfg.num_hidden_layers, num_attention_heads=cfg.num_attention_heads,
        num_key_value_heads=cfg.num_key_value_heads, max_position_embeddings=cfg.max_position_embeddings,
        rms_norm_eps=cfg.rms_norm_eps, rope_theta=cfg.rope_theta, tie_word_embeddings=cfg.tie_word_embeddings,
        initializer_range=cfg.initializer_range, mask_token_id=cfg.mask_token_id, pad_token_id=None,
        bos_token_id=cfg.bos_token_id, eos_token_id=cfg.eos_token_id, extra=served,
    )  # fmt: skip


@torch.no_grad()
def canvas_from_sdar(sdar_model: SDARModel, family: str, calibration=None) -> LLaDAModel | DreamModel:
    """The ``family`` ("llada" or "dream") model of ``sdar_model``'s shape with its weights: every
    tensor with a counterpart copied (the module docstring's table), SDAR's q/k norms dropped
    (``calibration`` None) or folded into the projections (``calibration``: a list of token-id
    lists, ``fold_qk_norms``), Dream's q/k/v biases zero. In the SDAR model's dtype, eval mode;
    ``sdar_model`` is unchanged."""
    if family not in CANVAS_FAMILIES:
        raise ValueError(f"canvas_from_sdar: family must be 'llada' or 'dream', got {family!r}")
    if getattr(sdar_model, "family", "sdar") != "sdar" or not isinstance(sdar_model, SDARModel):
        raise ValueError(f"canvas_from_sdar: sdar_model must be an SDARModel, got {type(sdar_model).__name__}")
    cfg = sdar_model.config
    model = (LLaDAModel if family == "llada" else DreamModel)(canvas_config(cfg, family))
    model.to(next(sdar_model.parameters()).dtype)
    src, dst = sdar_model.state_dict(), model.state_dict()
    for s, d in counterparts(family, cfg.num_hidden_layers, cfg.tie_word_embeddings).items():
        dst[d].copy_(src[s])
    for name, t in dst.items():
        if name.endswith(".bias"):  # Dream's q/k/v biases
            t.zero_()
    if calibration is not None:
        fold_qk_norms(model, sdar_model, head_scales(sdar_model, calibration))
    return model.eval()


@torch.no_grad()
def head_scales(sdar_model: SDARModel, calibration) -> dict[str, torch.Tensor]:
    """{"q{i}" / "k{i}": (heads,) float32 c = E[rms] / E[rms^2]} of layer i's query / key heads
    over every token of ``calibration`` (token-id lists, each cut to the model's positions) as
    ``sdar_model`` reads it, rms the head's root mean square before its norm (with the norm's
    epsilon): the scale c that brings ``c q`` nearest ``q / rms(q)`` in squares over those tokens."""
    cfg = sdar_model.config
    docs = [list(d)[: cfg.max_position_embeddings] for d in calibration]
    if not docs or not all(docs) or not all(isinstance(t, int) and 0 <= t < cfg.vocab_size for d in docs for t in d):
        raise ValueError(f"canvas_from_sdar: calibration must be non-empty lists of token ids in [0, {cfg.vocab_size})")
    sums, hooks = {}, []
    for i, layer in enumerate(sdar_model.model.layers):
        for kind, heads in (("q", cfg.num_attention_heads), ("k", cfg.num_key_value_heads)):
            hooks.append(
                getattr(layer.self_attn, f"{kind}_proj").register_forward_hook(rms_sums(sums, f"{kind}{i}", heads, cfg))
            )
    try:
        for d in docs:
            sdar_model(torch.tensor([d]))
    finally:
        for h in hooks:
            h.remove()
    return {name: s / s2 for name, (s, s2) in sums.items()}


def rms_sums(sums: dict, name: str, heads: int, cfg):
    """A forward hook adding a projection's per-head sum of rms and of rms^2 to ``sums[name]``."""

    def hook(module, inputs, out):  # out: (1, L, heads * head_dim)
        r = out.float().view(*out.shape[:-1], heads, cfg.head_dim).pow(2).mean(-1).add(cfg.rms_norm_eps).sqrt()
        s, s2 = sums.get(name, (0.0, 0.0))
        sums[name] = (s + r.sum((0, 1)), s2 + r.pow(2).sum((0, 1)))  # (heads,) each

    return hook


@torch.no_grad()
def fold_qk_norms(model, sdar_model: SDARModel, scales: dict) -> None:
    """Each layer's query / key projection of ``model`` (its family's, copied from SDAR's) scaled
    row by row: head h's rows by ``scales[...][h]`` times SDAR's q / k norm weight."""
    sd, cfg = model.state_dict(), sdar_model.config
    names = counterparts(model.family, cfg.num_hidden_layers, cfg.tie_word_embeddings)  # SDAR's -> the family's
    for i, layer in enumerate(sdar_model.model.layers):
        for kind in ("q", "k"):
            c = scales[f"{kind}{i}"]  # (heads,)
            w = getattr(layer.self_attn, f"{kind}_norm").weight.float()  # (head_dim,)
            W = sd[names[f"model.layers.{i}.self_attn.{kind}_proj.weight"]]  # (heads * head_dim, D)
            rows = (c.view(-1, 1) * w.view(1, -1)).reshape(-1, 1)  # (heads * head_dim, 1)
            W.copy_((W.float() * rows).to(W.dtype))
