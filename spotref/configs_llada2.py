"""LLaDA2's configuration (``model_type`` "llada2_moe", LLaDA2.0 / 2.1-mini and flash), as its
config.json holds it: ``LLaDA2Config`` and how a config.json becomes one. The spec's model
(``spotref/spec/llada2.py``) reads its fields and nothing else of it."""

from __future__ import annotations

from dataclasses import dataclass

from spotref.configs import INT_MAX, SDARConfig, check_config, check_field, check_supported, sdar_config_fields
from spotref.spec.checks import check_int

LLADA2_IDENTITY = {"architectures": ["LLaDA2MoeModelLM"], "model_type": "llada2_moe"}  # config.json's

# The type of each LLaDA2 field config.json may hold (``configs.FIELD_TYPES`` has the shared ones).
LLADA2_TYPES = {
    "num_shared_experts": "int?",
    "n_group": "int",
    "topk_group": "int",
    "first_k_dense_replace": "int",
    "routed_scaling_factor": "positive",
    "partial_rotary_factor": "positive",
    "use_bias": "bool",
    "use_qkv_bias": "bool",
}

# What LLaDA2's modeling code implements of its configuration's switches: each key and the values it takes.
SWITCHES = {"score_function": ("sigmoid",), "norm_head": (False,), "use_sliding_window": (False,)}


@dataclass
class LLaDA2Config(SDARConfig):
    """LLaDA2-MoE's hyper-parameters, by their names in its config.json: ``SDARConfig``'s sizes
    (``head_dim``: ``hidden_size / num_attention_heads`` where absent, ``num_key_value_heads`` 0
    or absent: ``num_attention_heads``, as its configuration class reads them) and its own.
    Layers ``first_k_dense_replace`` and on are mixtures of experts (``spotref.spec.llada2``).

    ``STATED``: what its configuration class defaults to but its checkpoints set otherwise
    (LLaDA2.0-mini: ``rms_norm_eps`` 1e-6, ``rope_theta`` 600000, ``use_bias`` false, ...), and
    the routing; each is refused by name where a config.json lacks it."""

    STATED = {
        **{k: v for k, v in SDARConfig.STATED.items() if k not in ("head_dim", "num_key_value_heads")},
        "rms_norm_eps": "its class's default: 1e-05; LLaDA2.0-mini's config.json says 1e-06",
        "rope_theta": "its class's default: 10000.0; LLaDA2.0-mini's config.json says 600000",
        "use_bias": "its class's default: true; LLaDA2.0-mini's config.json says false",
        "partial_rotary_factor": "its class's default: 0.5",
        "num_experts": None,
        "num_experts_per_tok": None,
        "moe_intermediate_size": None,
        "num_shared_experts": None,
        "n_group": None,
        "topk_group": None,
        "routed_scaling_factor": None,
        "first_k_dense_replace": None,
    }

    NULLABLE = ("num_shared_experts",)  # stated as null: none

    use_bias: bool = False
    use_qkv_bias: bool = False
    partial_rotary_factor: float = 0.5
    num_experts: int = 8
    num_experts_per_tok: int = 2
    moe_intermediate_size: int = 32
    num_shared_experts: int | None = 1
    n_group: int = 2
    topk_group: int = 1
    routed_scaling_factor: float = 2.5
    first_k_dense_replace: int = 1

    def __post_init__(self):
        check_config(self)
        check_llada2_config(self)

    @classmethod
    def check_stated(cls, raw: dict) -> None:
        """``ConfigDict.check_stated``, a ``NULLABLE`` key stated as null counted as stated."""
        super().check_stated({**raw, **{k: 0 for k in cls.NULLABLE if k in raw and raw[k] is None}})


def check_llada2_config(c: LLaDA2Config) -> None:
    """LLaDA2's own fields: sizes and switches of their types, the groups dividing the experts
    (at least two per group: a group scores its two best), the groups kept and the experts per
    token within what is there, the rotary part of a head a positive even number of dims."""
    name = lambda f: f"LLaDA2Config.{f}"
    for f in ("num_experts", "moe_intermediate_size", "n_group"):
        check_int(name(f), getattr(c, f), 1, INT_MAX)
    check_int(name("first_k_dense_replace"), c.first_k_dense_replace, 0, INT_MAX)
    check_int(name("topk_group"), c.topk_group, 1, c.n_group)
    if c.num_shared_experts is not None:
        check_int(name("num_shared_experts"), c.num_shared_experts, 1, INT_MAX)
    if c.num_experts % c.n_group or c.num_experts // c.n_group < 2:
        raise ValueError(
            f"{name('n_group')} {c.n_group} must divide {name('num_experts')} {c.num_experts} into groups of at "
            f"least 2 (a group scores the sum of its two best experts)"
        )
    check_int(name("num_experts_per_tok"), c.num_experts_per_tok, 1, c.topk_group * (c.num_experts // c.n_group))
    for f in ("use_bias", "use_qkv_bias"):
        if not isinstance(getattr(c, f), bool):
            raise ValueError(f"{name(f)} must be true or false, got {getattr(c, f)!r}")
    for f in ("routed_scaling_factor", "partial_rotary_factor"):
        check_field(f, getattr(c, f), "positive", "LLaDA2Config")
    r = int(c.head_dim * c.partial_rotary_factor) if c.partial_rotary_factor <= 1 else 0
    if r < 2 or r % 2:
        raise ValueError(
            f"{name('partial_rotary_factor')} {c.partial_rotary_factor!r} of head_dim {c.head_dim} rotates {r} dims: "
            f"RoPE needs a positive even number, at most head_dim"
        )


def llada2_config_fields(raw: dict, block_size=None, mask_token_id=None) -> dict:
    """The checked fields of a ``llada2_moe`` config.json for ``LLaDA2Config.from_dict``, absent
    keys as its configuration class reads them; ``block_size`` and ``mask_token_id`` as SDAR's."""
    if raw.get("model_type", LLADA2_IDENTITY["model_type"]) != LLADA2_IDENTITY["model_type"]:
        raise ValueError(f"config.json's model_type is {raw['model_type']!r}, not 'llada2_moe'")
    for key, kind in LLADA2_TYPES.items():
        if key in raw:
            check_field(key, raw[key], kind)
    bad = [f"{k}={raw[k]!r}" for k, ok in SWITCHES.items() if k in raw and raw[k] not in ok]
    if bad:
        raise ValueError(f"config.json uses what spotref's LLaDA2 model does not implement: {', '.join(bad)}")
    check_supported(raw, "LLaDA2")
    d = dict(raw)
    heads = d.get("num_attention_heads")
    if not d.get("num_key_value_heads"):  # 0 or absent: one K/V head per query head
        d["num_key_value_heads"] = heads
    if d.get("head_dim") is None and isinstance(d.get("hidden_size"), int) and isinstance(heads, int) and heads > 0:
        d["head_dim"] = d["hidden_size"] // heads
    return sdar_config_fields(d, block_size, mask_token_id)
