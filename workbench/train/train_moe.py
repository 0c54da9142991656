"""Mixture-of-experts runs (issue 64): ``--moe`` turns a block-causal run into SDAR-MoE's body
(``--family sdar``) or gives LLaDA2's its experts (``--family llada2``, which needs it).

``--moe experts=E,top=K,size=I[,dense=D][,shared=S,groups=G,kept=g,scale=R][,balance=C]``:
E experts of width I, K per token, the first D layers dense (SDAR-MoE: ``mlp_only_layers``
0 .. D-1; LLaDA2: ``first_k_dense_replace``); LLaDA2 only: S shared experts (their MLP S * I
wide), its router's G groups of which g are kept, its ``routed_scaling_factor`` R; SDAR-MoE
only: C times the load-balancing loss added to the objective (``BalanceLoss``). Both train
with SDAR's objective (BD3-LM's blocks); ``--init`` a dense SDAR target upcycles it
(``moe_start.moe_from_sdar``)."""

from __future__ import annotations

import argparse

import torch

from spotref.configs import SDARConfig, SDARMoEConfig
from spotref.configs_llada2 import LLaDA2Config
from spotref.spec.llada2 import LLaDA2Model
from spotref.spec.sdar import SDARModel
from spotref.spec.sdar_moe import SDARMoEModel, SparseMoE

BLOCK_CAUSAL = ("sdar", "llada2")  # trained with BD3-LM's objective; the others are whole-canvas
KEYS = {"experts": int, "top": int, "size": int, "dense": int, "shared": int, "groups": int, "kept": int}
KEYS.update(scale=float, balance=float)
LLADA2_ONLY = ("shared", "groups", "kept", "scale")
SDAR_ONLY = ("balance",)


def parse_moe(text: str) -> dict:
    """``--moe``'s ``key=value,...`` -> {key: value}; ``argparse.ArgumentTypeError`` naming a bad one."""
    out = {}
    for item in str(text).split(","):
        key, eq, value = item.partition("=")
        if not eq or key not in KEYS or key in out:
            raise argparse.ArgumentTypeError(f"{item!r}: want KEY=VALUE, KEY once each of {', '.join(KEYS)}")
        try:
            out[key] = KEYS[key](value)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{item!r}: {key} must be a {KEYS[key].__name__}") from None
    if not {"experts", "top", "size"} <= out.keys():
        raise argparse.ArgumentTypeError(f"{text!r}: --moe needs experts=, top= and size=")
    return out


def moe_arg(text: str) -> str:
    """``--moe``'s type: the text, checked (``parse_moe``), kept as given (a run records strings)."""
    parse_moe(text)
    return text


HELP = (
    "experts=E,top=K,size=I[,dense=D][,shared=S,groups=G,kept=g,scale=R][,balance=C]: a mixture of experts, E "
    "experts of width I, K per token, the first D layers dense; LLaDA2 (--family llada2) only: S shared experts, "
    "G router groups of which g are kept, the routed weights' scale R; SDAR-MoE only: C times the load-balancing "
    "loss added. --init an SDAR target upcycles it"
)


def add_moe_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument("--moe", type=moe_arg, default=None, metavar="SPEC", help=HELP)


def check_moe(o) -> None:
    """``ValueError`` naming what ``--moe`` cannot be given with: a whole-canvas family, LLaDA2
    without it, LLaDA2's own keys on an SDAR run."""
    if o.family not in BLOCK_CAUSAL and o.moe:
        raise ValueError(f"--moe applies to --family sdar or llada2 (block-causal), not {o.family}")
    if o.family == "llada2" and not o.moe:
        raise ValueError("--family llada2 is a mixture of experts: it needs --moe experts=E,top=K,size=I,...")
    if o.family == "sdar" and o.moe and set(parse_moe(o.moe)) & set(LLADA2_ONLY):
        raise ValueError(f"--moe: {', '.join(LLADA2_ONLY)} are LLaDA2's (--family llada2)")
    if o.family == "llada2" and set(parse_moe(o.moe)) & set(SDAR_ONLY):
        raise ValueError(f"--moe: {', '.join(SDAR_ONLY)} is SDAR-MoE's (--family sdar)")


def block_causal_model(cfg, o) -> SDARModel:
    """The run's block-causal model from its SDAR config ``cfg`` (``make_config``): SDAR, SDAR-MoE or LLaDA2."""
    if not o.moe:
        return SDARModel(cfg)
    m, base = parse_moe(o.moe), cfg.to_dict()
    dense = m.get("dense", 0)
    if o.family == "sdar":
        fields = dict(num_experts=m["experts"], num_experts_per_tok=m["top"], moe_intermediate_size=m["size"])
        return SDARMoEModel(SDARMoEConfig.from_dict({**base, **fields, "mlp_only_layers": list(range(dense))}))
    fields = dict(num_experts=m["experts"], num_experts_per_tok=m["top"], moe_intermediate_size=m["size"])
    fields.update(num_shared_experts=m.get("shared"), n_group=m.get("groups", 1), topk_group=m.get("kept", 1))
    fields.update(routed_scaling_factor=m.get("scale", 1.0), first_k_dense_replace=dense, partial_rotary_factor=1.0)
    return LLaDA2Model(LLaDA2Config.from_dict({**base, **fields, "use_bias": False, "use_qkv_bias": False}))


def config_model(config: dict):
    """The block-causal model class and config class a saved config names: LLaDA2's by its fields
    (``n_group``), SDAR-MoE's (``num_experts``), else SDAR's."""
    if "n_group" in config:
        return LLaDA2Model, LLaDA2Config
    return (SDARMoEModel, SDARMoEConfig) if "num_experts" in config else (SDARModel, SDARConfig)


class BalanceLoss:
    """Switch Transformer's load-balancing loss over SDAR-MoE's routers, as Qwen3-MoE trains
    with: per sparse layer, E * sum_e f_e * P_e, f_e the share of the batch's top-k slots routed
    to expert e, P_e its mean router probability; ``take`` returns C times their sum over the
    training forwards since the last call. Evaluation forwards add nothing."""

    def __init__(self, model, coef: float):
        self.coef, self.terms = coef, []
        for moe in (m for m in model.modules() if isinstance(m, SparseMoE)):
            moe.gate.register_forward_hook(self.hook(moe.k))

    def hook(self, k: int):
        def add(gate, _inputs, logits):  # logits: (T, E)
            if gate.training:
                probs = torch.softmax(logits.float(), dim=-1)
                E = probs.shape[-1]
                slots = torch.nn.functional.one_hot(torch.topk(probs, k, dim=-1).indices, E).float()  # (T, k, E)
                self.terms.append(E * (slots.mean((0, 1)) * probs.mean(0)).sum())

        return add

    def take(self) -> torch.Tensor | float:
        total, self.terms = sum(self.terms), []
        return self.coef * total


def balance_loss(model, o) -> BalanceLoss | None:
    """The run's ``BalanceLoss`` (``--moe ...,balance=C``), None without one."""
    C = parse_moe(o.moe).get("balance") if o.moe else None
    return BalanceLoss(model, C) if C else None
