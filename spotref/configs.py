"""Each family's configuration, as its config.json holds it: ``SDARConfig``, ``LLaDAConfig``,
``DreamConfig`` (dataclasses whose construction checks every field, a bad one a ``ValueError``
naming ``Config.field``), and how a config.json becomes one: the keys it must state, the
defaults its own code reads for absent keys, the architecture switches the spec's forward
implements, the JSON type of each field. The spec's models (``spotref/spec/sdar.py``, ``llada.py``,
``dream.py``) read a config's fields and nothing else of it."""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass, field
from pathlib import Path

from spotref.checks import check_real
from spotref.spec.checks import check_int
from spotref.spec.rules import ALIASES, PRECISIONS, SERVED, precision_name

# ---- SDAR ---------------------------------------------------------------------------------


class ConfigDict:
    """config.json as a dataclass: ``from_dict`` takes the fields by name and keeps every other
    key in ``extra``; ``to_dict`` gives them back (SDARConfig, LLaDAConfig, DreamConfig).

    ``STATED``: the keys a config.json must state, each with the format's own default for the
    message (or None): each sets the model's logits, and a checkpoint in use may differ from any
    default, so a reader refuses their absence by name (``check_stated``) instead of assuming one."""

    STATED: dict = {}

    @classmethod
    def from_dict(cls, d: dict):
        """The config of ``d``'s fields, every other key in ``extra``; the serving precision's keys
        (``torch_dtype``, ``dtype``, ``decision_precision``) under their canonical names, so
        ``"bf16"`` is read, served and written back as ``"bfloat16"``."""
        names = {f.name for f in dataclasses.fields(cls)} - {"extra"}
        known = {k: v for k, v in d.items() if k in names}
        return cls(**known, extra=canonical_served({k: v for k, v in d.items() if k not in names}))

    @classmethod
    def check_stated(cls, raw: dict) -> None:
        """``ValueError`` naming every key of ``STATED`` that config.json ``raw`` lacks (or holds as null)."""
        missing = [k for k in cls.STATED if raw.get(k) is None]
        if missing:
            named = ", ".join(k if cls.STATED[k] is None else f"{k} ({cls.STATED[k]})" for k in missing)
            raise ValueError(
                f"config.json has no {named}: {'each sets' if len(missing) > 1 else 'it sets'} the model's "
                f"logits and a checkpoint may differ from any default, so spotref assumes none; add "
                f"{'them' if len(missing) > 1 else 'it'} to config.json"
            )

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        return {**d.pop("extra"), **d}


@dataclass
class SDARConfig(ConfigDict):
    """Model hyper-parameters; field names as in SDAR's ``config.json``. Construction checks
    every field (``spotref.checks.check_config``): a bad one raises ``ValueError`` naming it.

    Defaults: the sizes are a tiny test model's; the others are transformers' ``Qwen3Config``'s
    (``rms_norm_eps`` 1e-6, ``rope_theta`` 10000, ``max_position_embeddings`` 32768). A
    config.json is read with every key of ``STATED`` present (``check_stated``): a missing size,
    head size, norm epsilon or RoPE base is refused by name, never defaulted."""

    STATED = {
        "vocab_size": None,
        "hidden_size": None,
        "intermediate_size": None,
        "num_hidden_layers": None,
        "num_attention_heads": None,
        "num_key_value_heads": None,
        "head_dim": "Qwen3's default: 128",
        "rms_norm_eps": "Qwen3's default: 1e-06",
        "rope_theta": "transformers' Qwen3 default: 10000.0; SDAR-8B's config.json says 1000000.0",
    }

    vocab_size: int = 300
    hidden_size: int = 64
    intermediate_size: int = 128
    num_hidden_layers: int = 2
    num_attention_heads: int = 4
    num_key_value_heads: int = 2
    head_dim: int = 16
    mask_token_id: int | None = None
    block_size: int | None = None
    rms_norm_eps: float = 1e-6
    rope_theta: float = 10000.0  # Qwen3Config's (and transformers 5's default rope_parameters)
    tie_word_embeddings: bool = False
    initializer_range: float = 0.02
    max_position_embeddings: int = 32768
    bos_token_id: int | None = None
    eos_token_id: int | list[int] | None = None
    extra: dict = field(default_factory=dict, repr=False)

    def __post_init__(self):
        check_config(self)

    @classmethod
    def from_json(cls, path) -> "SDARConfig":
        """The config of a config.json file; ``STATED``'s keys must be in it (``rope_theta`` may be
        in ``rope_parameters``, as transformers 5 writes it)."""
        try:
            raw = with_rope_theta(json.loads(Path(path).read_text()))
        except RecursionError:  # arrays or objects nested thousands deep
            raise ValueError(f"cannot read config.json {str(path)!r}: its JSON nests too deep to be a config") from None
        cls.check_stated(raw)
        return cls.from_dict(raw)


INT_MAX = 2**31 - 1  # every int field of the config fits an int32


CONFIG_SIZES = (
    "vocab_size",
    "hidden_size",
    "intermediate_size",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "head_dim",
    "max_position_embeddings",
)


CONFIG_REALS = ("rms_norm_eps", "rope_theta", "initializer_range")
FLOAT32_MAX = 3.4028234663852886e38  # the forward computes these in float32: beyond it, inf


def check_config(c) -> None:
    """An ``SDARConfig``: every field of its type and range, and the fields consistent (RoPE's
    pairs, grouped heads, token ids inside the vocabulary); the message names ``SDARConfig.field``."""
    for name in CONFIG_SIZES:
        check_int(f"SDARConfig.{name}", getattr(c, name), 1, INT_MAX)
    for name in CONFIG_REALS:
        value = getattr(c, name)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= FLOAT32_MAX:
            raise ValueError(
                f"SDARConfig.{name} must be a positive finite number, got {value!r:.60} (at most "
                f"{FLOAT32_MAX:.4g}: the forward computes it in float32)"
            )
        setattr(c, name, float(value))  # an int of 31 digits is no tensor scalar: the forward takes floats
    if not c.rms_norm_eps < 1:
        raise ValueError(
            f"SDARConfig.rms_norm_eps must be below 1 (an epsilon: a mean square's), got {c.rms_norm_eps!r}"
        )
    if c.head_dim % 2:
        raise ValueError(f"SDARConfig.head_dim must be even (RoPE rotates pairs), got {c.head_dim}")
    if not c.rope_theta > 1:
        raise ValueError(f"SDARConfig.rope_theta must be above 1 (the RoPE base), got {c.rope_theta!r}")
    for name in ("bos_token_id", "eos_token_id"):
        _check_config_ids(name, getattr(c, name), c.vocab_size)
    if c.num_attention_heads % c.num_key_value_heads:
        raise ValueError(
            f"SDARConfig.num_attention_heads ({c.num_attention_heads}) must be a "
            f"multiple of num_key_value_heads ({c.num_key_value_heads})"
        )
    if c.mask_token_id is not None:
        _check_config_mask(c.mask_token_id, c.vocab_size)
    if c.block_size is not None:
        check_int("SDARConfig.block_size", c.block_size, 1, INT_MAX)
    if not isinstance(c.tie_word_embeddings, bool):
        raise ValueError(f"SDARConfig.tie_word_embeddings must be True or False, got {c.tie_word_embeddings!r}")


def _check_config_ids(name, ids, vocab_size) -> None:
    """``bos_token_id`` / ``eos_token_id``: None, a token id or a list of them."""
    for t in ids if isinstance(ids, list) else [ids]:
        if t is not None and (isinstance(t, bool) or not isinstance(t, int) or not 0 <= t < vocab_size):
            raise ValueError(f"SDARConfig.{name} {ids!r} is not a token id of the vocabulary [0, {vocab_size})")


def _check_config_mask(mask_id, vocab_size) -> None:
    """MASK: a token of the vocabulary, which must hold another token besides."""
    check_int("SDARConfig.mask_token_id", mask_id, 0, INT_MAX)
    if mask_id >= vocab_size:
        raise ValueError(f"SDARConfig.mask_token_id {mask_id} is outside the vocabulary [0, {vocab_size})")
    if vocab_size == 1:
        raise ValueError("SDARConfig.vocab_size 1 holds only MASK: a decoder could commit nothing")


def sdar_config_fields(raw: dict, block_size=None, mask_token_id=None) -> dict:
    """The checked fields of a config.json for ``SDARConfig.from_dict``; arguments override the
    config's fields."""
    check_field_types(raw)
    check_supported(raw)
    d = with_rope_theta(raw)
    for name, value, flag in (
        ("block_size", block_size, "block_size= (CLI: --block-length)"),
        ("mask_token_id", mask_token_id, "mask_token_id= (CLI: --mask-id)"),
    ):
        if value is not None:
            check_field(name, value, "int", f"{name}= argument")
            d[name] = value
        if d.get(name) is None:
            raise ValueError(f"config.json has no {name}: pass {flag}")
    return d


def with_rope_theta(raw: dict) -> dict:
    """A copy of a config.json, with ``rope_theta`` taken from ``rope_parameters`` where only
    that holds it (transformers 5 writes it there)."""
    d = dict(raw)
    rope = raw.get("rope_parameters") or {}
    if "rope_theta" not in d and "rope_theta" in rope:
        d["rope_theta"] = rope["rope_theta"]
    return d


# The type of each config.json field spotref reads: a wrong one fails here, naming the field,
# not later as an IndexError deep in a forward. "int?" may also be null.
FIELD_TYPES = {
    "num_experts": "int",  # SDAR-MoE's (Qwen3-MoE's)
    "num_experts_per_tok": "int",
    "moe_intermediate_size": "int",
    "decoder_sparse_step": "int",
    "norm_topk_prob": "bool",
    "vocab_size": "int",
    "hidden_size": "int",
    "intermediate_size": "int",
    "num_hidden_layers": "int",
    "num_attention_heads": "int",
    "num_key_value_heads": "int",
    "head_dim": "int",
    "max_position_embeddings": "int",
    "mask_token_id": "int?",
    "block_size": "int?",
    "bos_token_id": "int?",
    "eos_token_id": "ids?",
    "rms_norm_eps": "positive",
    "rope_theta": "positive",
    "initializer_range": "real",
    "tie_word_embeddings": "bool",
    "rope_parameters": "dict?",
    "hidden_act": "str",
    "torch_dtype": "str?",
    "dtype": "str?",
    "decision_precision": "precision?",
}


KIND_NAMES = {
    "int": "an integer",
    "int?": "an integer or null",
    "ids?": "a token id, a list of ids or null",
    "positive": "a positive finite number",
    "real": "a finite number",
    "bool": "true or false",
    "dict?": "a JSON object or null",
    "str": "a string",
    "str?": "a string or null",
    "precision?": f"one of {', '.join(PRECISIONS)} (or an alias: {', '.join(ALIASES)}) or null",
}


def check_field_types(raw: dict) -> None:
    """Every known field of a config.json has the JSON type spotref needs (``ValueError`` naming it)."""
    for name, kind in FIELD_TYPES.items():
        if name in raw:
            check_field(name, raw[name], kind)
    rope = raw.get("rope_parameters") or {}
    if "rope_theta" in rope:
        check_field("rope_parameters.rope_theta", rope["rope_theta"], "positive")


def check_field(name: str, value, kind: str, where: str = "config.json") -> None:
    is_int = lambda v: isinstance(v, int) and not isinstance(v, bool)
    is_real = lambda v: (is_int(v) or isinstance(v, float)) and math.isfinite(v)
    if value is None and kind.endswith("?"):
        return
    ok = {
        "int": is_int,
        "int?": is_int,
        "real": is_real,
        "bool": lambda v: isinstance(v, bool),
        "positive": lambda v: is_real(v) and v > 0,
        "dict?": lambda v: isinstance(v, dict),
        "str": lambda v: isinstance(v, str),
        "str?": lambda v: isinstance(v, str),
        "precision?": lambda v: precision_name(v) is not None,
        "ids?": lambda v: is_int(v) or (isinstance(v, list) and all(map(is_int, v))),
    }[kind](value)
    if not ok:
        raise ValueError(f"{where}: {name} must be {KIND_NAMES[kind]}, got {value!r}")


def check_supported(raw: dict, model: str = "SDAR") -> None:
    """Reject Qwen3 options the model does not implement, rather than load them wrongly (Dream's
    model: those but attention_bias and use_sliding_window, which Dream's config has not)."""
    sdar = model == "SDAR"
    bad = ["attention_bias=true"] if sdar and raw.get("attention_bias") else []
    if raw.get("rope_scaling"):
        bad.append(f"rope_scaling={raw['rope_scaling']!r}")
    if (raw.get("rope_parameters") or {}).get("rope_type", "default") != "default":
        bad.append(f"rope_parameters={raw['rope_parameters']!r}")
    if sdar and raw.get("use_sliding_window"):
        bad.append("use_sliding_window=true")
    if raw.get("hidden_act", "silu") != "silu":
        bad.append(f"hidden_act={raw['hidden_act']!r}")
    if bad:
        raise ValueError(f"config.json uses what spotref's {model} model does not support: {', '.join(bad)}")


def canonical_served(extra: dict) -> dict:
    """A copy of a config's other keys with each serving-precision key (``rules.SERVED``) that
    names a precision under its canonical name (``precision_name``): read once, so the model is
    served in it (``api.serving_precision``) and ``save_pretrained`` writes it back loadable.
    A value naming no precision is kept as it is (it serves as "auto", docs/spec.md section 2)."""
    return {k: (precision_name(v) or v) if k in SERVED else v for k, v in extra.items()}


SDAR_IDENTITY = {"architectures": ["SDARForCausalLM"], "model_type": "sdar"}  # config.json's


# ---- SDAR-MoE -----------------------------------------------------------------------------

SDAR_MOE_IDENTITY = {"architectures": ["SDARMoeForCausalLM"], "model_type": "sdar_moe"}  # config.json's


@dataclass
class SDARMoEConfig(SDARConfig):
    """SDAR over a Qwen3-MoE body (``model_type`` "sdar_moe", SDAR-30B-A3B): ``SDARConfig``'s
    fields and Qwen3-MoE's, by their names in its config.json. Layer i is sparse (a mixture of
    ``num_experts`` experts, ``num_experts_per_tok`` per token, each of ``moe_intermediate_size``)
    unless it is in ``mlp_only_layers`` or ``(i + 1) % decoder_sparse_step != 0``; a dense layer's
    MLP is ``intermediate_size`` wide. The experts, their number per token and ``norm_topk_prob``
    are stated in a config.json (``STATED``); ``decoder_sparse_step`` and ``mlp_only_layers``
    default to Qwen3-MoE's (every layer sparse): a checkpoint that differs has other tensors,
    which the reader refuses by name."""

    STATED = {
        **SDARConfig.STATED,
        "num_experts": None,
        "num_experts_per_tok": None,
        "moe_intermediate_size": None,
        "norm_topk_prob": "Qwen3-MoE's default: false; SDAR-30B-A3B's config.json says true",
    }

    num_experts: int = 4
    num_experts_per_tok: int = 2
    moe_intermediate_size: int = 32
    norm_topk_prob: bool = True
    decoder_sparse_step: int = 1
    mlp_only_layers: list = field(default_factory=list)

    def __post_init__(self):
        check_config(self)
        check_moe_config(self)

    def sparse(self, layer: int) -> bool:
        """Whether layer ``layer`` (from 0) is a mixture of experts (Qwen3-MoE's rule)."""
        return layer not in self.mlp_only_layers and (layer + 1) % self.decoder_sparse_step == 0


def check_moe_config(c: SDARMoEConfig) -> None:
    """The Qwen3-MoE fields of an ``SDARMoEConfig``: sizes, top-k within the experts, the
    switches' types, ``mlp_only_layers`` layer indices; the message names the field."""
    for name in ("num_experts", "moe_intermediate_size", "decoder_sparse_step"):
        check_int(f"SDARMoEConfig.{name}", getattr(c, name), 1, INT_MAX)
    check_int("SDARMoEConfig.num_experts_per_tok", c.num_experts_per_tok, 1, c.num_experts)
    if not isinstance(c.norm_topk_prob, bool):
        raise ValueError(f"SDARMoEConfig.norm_topk_prob must be true or false, got {c.norm_topk_prob!r}")
    layers = c.mlp_only_layers
    if not isinstance(layers, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in layers):
        raise ValueError(f"SDARMoEConfig.mlp_only_layers must be a list of layer indices, got {layers!r:.80}")
    bad = [i for i in layers if not 0 <= i < c.num_hidden_layers]
    if bad:
        raise ValueError(f"SDARMoEConfig.mlp_only_layers {bad} are not layers of [0, {c.num_hidden_layers})")


def sdar_moe_config_fields(raw: dict, block_size=None, mask_token_id=None) -> dict:
    """The checked fields of an ``sdar_moe`` config.json for ``SDARMoEConfig.from_dict``."""
    if raw.get("model_type", SDAR_MOE_IDENTITY["model_type"]) != SDAR_MOE_IDENTITY["model_type"]:
        raise ValueError(f"config.json's model_type is {raw['model_type']!r}, not 'sdar_moe'")
    return sdar_config_fields(raw, block_size, mask_token_id)


# ---- LLaDA --------------------------------------------------------------------------------

LLADA_IDENTITY = {"architectures": ["LLaDAModelLM"], "model_type": "llada"}  # config.json's, as LLaDA's code writes it


# The architecture switches of LLaDA's configuration: each key and the values this module
# implements (the first is what ``LLaDAConfig.to_dict`` writes).
ARCHITECTURE = {
    "block_type": ("llama",),
    "rope": (True,),
    "alibi": (False,),
    "layer_norm_type": ("rms",),
    "layer_norm_with_affine": (True,),
    "bias_for_layer_norm": (False, None),
    "attention_layer_norm": (False,),
    "activation_type": ("silu",),
    "include_bias": (False,),
    "include_qkv_bias": (False, None),
    "block_group_size": (1,),
    "multi_query_attention": (None,),
    "input_emb_norm": (False,),
    "scale_logits": (False,),
    "rope_full_precision": (True,),
}


# LLaDA's configuration class's defaults for keys a config.json may lack, where they differ from
# LLaDAConfig's (a config written by that class holds every key; LLaDA-8B's does).
OFFICIAL_DEFAULTS = {
    "block_type": "sequential",
    "rope": False,
    "layer_norm_type": "default",
    "activation_type": "swiglu",
    "embedding_size": 50304,
    "weight_tying": True,
}


REQUIRED = ("vocab_size", "d_model", "n_heads", "n_layers", "mask_token_id")  # no default spotref could use


@dataclass
class LLaDAConfig(ConfigDict):
    """Model hyper-parameters; field names as in LLaDA's ``config.json``. Construction checks every
    field and the switches kept in ``extra`` (``check_llada_config``): a bad one raises
    ``ValueError`` naming it."""

    vocab_size: int = 300
    embedding_size: int | None = None  # rows of wte and ff_out; None: vocab_size
    d_model: int = 64
    n_heads: int = 4
    n_kv_heads: int | None = None  # None: n_heads
    n_layers: int = 2
    mlp_hidden_size: int | None = None  # None: mlp_ratio * d_model
    mlp_ratio: int = 4
    rms_norm_eps: float = 1e-5
    rope_theta: float = 10000.0
    max_sequence_length: int = 1024
    weight_tying: bool = False
    mask_token_id: int | None = None
    init_std: float = 0.02  # random init: normal(0, init_std)
    extra: dict = field(default_factory=dict, repr=False)

    # read with these present (``REQUIRED`` too): LLaDA's class has defaults, LLaDA-8B others
    STATED = {
        "rms_norm_eps": "LLaDA's default: 1e-05",
        "rope_theta": "LLaDA's default: 10000.0; LLaDA-8B's config.json says 500000.0",
    }

    def __post_init__(self):
        check_llada_config(self)

    def to_dict(self) -> dict:
        """config.json's keys: the switches (as read, else the implemented value), ``extra``, the fields."""
        return {**{k: v[0] for k, v in ARCHITECTURE.items()}, **super().to_dict()}

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads

    @property
    def kv_heads(self) -> int:
        return self.n_kv_heads if self.n_kv_heads is not None else self.n_heads

    @property
    def intermediate_size(self) -> int:
        return self.mlp_hidden_size if self.mlp_hidden_size is not None else self.mlp_ratio * self.d_model

    @property
    def max_position_embeddings(self) -> int:
        """The positions a canvas may hold: LLaDA's ``max_sequence_length``."""
        return self.max_sequence_length


def check_llada_config(c: LLaDAConfig) -> None:
    """Every field of its type and range, the fields consistent, the switches implemented."""
    for name in ("vocab_size", "d_model", "n_heads", "n_layers", "mlp_ratio", "max_sequence_length"):
        check_int(f"LLaDAConfig.{name}", getattr(c, name), 1, INT_MAX)
    for name in ("embedding_size", "n_kv_heads", "mlp_hidden_size"):
        if getattr(c, name) is not None:
            check_int(f"LLaDAConfig.{name}", getattr(c, name), 1, INT_MAX)
    c.rms_norm_eps = check_real("LLaDAConfig.rms_norm_eps", c.rms_norm_eps, 0.0, 1.0, open_lo=True, open_hi=True)
    c.rope_theta = check_real("LLaDAConfig.rope_theta", c.rope_theta, 1.0, FLOAT32_MAX, open_lo=True)
    check_real("LLaDAConfig.init_std", c.init_std, 0.0)
    if not isinstance(c.weight_tying, bool):
        raise ValueError(f"LLaDAConfig.weight_tying must be True or False, got {c.weight_tying!r}")
    if c.d_model % c.n_heads or c.head_dim % 2:
        raise ValueError(
            f"LLaDAConfig.d_model ({c.d_model}) must be n_heads ({c.n_heads}) times an even head size (RoPE pairs)"
        )
    if c.n_heads % c.kv_heads:
        raise ValueError(f"LLaDAConfig.n_heads ({c.n_heads}) must be a multiple of n_kv_heads ({c.kv_heads})")
    if c.embedding_size not in (None, c.vocab_size):
        raise ValueError(
            f"LLaDAConfig.embedding_size ({c.embedding_size}) differs from vocab_size ({c.vocab_size}): "
            "spotref decides over every logit, so they must be equal (as in LLaDA-8B)"
        )
    if c.mask_token_id is not None:
        check_int("LLaDAConfig.mask_token_id", c.mask_token_id, 0, c.vocab_size - 1)
        if c.vocab_size == 1:
            raise ValueError("LLaDAConfig.vocab_size 1 holds only MASK: a decoder could commit nothing")
    bad = [f"{k}={c.extra[k]!r}" for k, ok in ARCHITECTURE.items() if k in c.extra and not implemented(c.extra[k], ok)]
    if bad:
        raise ValueError(f"LLaDA config uses what spotref's LLaDA model does not implement: {', '.join(bad)}")


def implemented(value, values: tuple) -> bool:
    """``value`` is one of ``values``, of the same type (``1`` is not ``True``)."""
    return any(type(value) is type(v) and value == v for v in values)


def llada_config_fields(raw: dict) -> dict:
    """A config.json's fields for ``LLaDAConfig.from_dict``: absent keys as LLaDA's code reads them."""
    if raw.get("model_type", "llada") != "llada":
        raise ValueError(
            f"config.json's model_type is {raw['model_type']!r}, not 'llada' (spotref.from_pretrained reads any family)"
        )
    missing = [k for k in REQUIRED if raw.get(k) is None]
    if missing:
        hint = " (LLaDA's is 126336)" if missing == ["mask_token_id"] else ""
        raise ValueError(f"config.json has no {', '.join(missing)}{hint}")
    for name in SERVED:  # the serving precision, checked as SDAR's and Dream's (a typo is not the default)
        if name in raw:
            check_field(name, raw[name], FIELD_TYPES[name])
    return {**OFFICIAL_DEFAULTS, **raw}


# ---- Dream --------------------------------------------------------------------------------

DREAM_IDENTITY = {"architectures": ["DreamModel"], "model_type": "Dream"}  # what config.json names


@dataclass
class DreamConfig(ConfigDict):
    """Model hyper-parameters; names and defaults as in Dream's ``configuration_dream.py``, so a
    config.json that omits a key reads as Dream's code reads it, but for ``STATED``'s, which must
    be there. Construction checks every field: a bad one raises ``ValueError`` naming
    ``DreamConfig.field``."""

    vocab_size: int = 151936
    hidden_size: int = 4096
    intermediate_size: int = 22016
    num_hidden_layers: int = 32
    num_attention_heads: int = 32
    num_key_value_heads: int = 32
    max_position_embeddings: int = 32768
    rms_norm_eps: float = 1e-6
    rope_theta: float = 10000.0
    tie_word_embeddings: bool = False
    initializer_range: float = 0.02
    mask_token_id: int = 151666
    pad_token_id: int | None = 151643
    bos_token_id: int | None = None
    eos_token_id: int | list[int] | None = None
    extra: dict = field(default_factory=dict, repr=False)

    # read with these present: Dream's defaults, but they set the logits and a checkpoint may differ
    STATED = {
        "rms_norm_eps": "Dream's default: 1e-06",
        "rope_theta": "Dream's default: 10000.0; Dream-v0-Instruct-7B's config.json says 1000000.0",
    }

    def __post_init__(self):
        check_dream_config(self)

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_attention_heads


DREAM_SIZES = tuple(n for n in CONFIG_SIZES if n != "head_dim")  # SDAR's, but the head size (Dream derives it)


def check_dream_config(c: DreamConfig) -> None:
    """Every field of its type and range, and the fields consistent (whole heads, RoPE's pairs,
    grouped K/V heads, token ids inside the vocabulary)."""
    for name in DREAM_SIZES:
        check_int(f"DreamConfig.{name}", getattr(c, name), 1, INT_MAX)
    c.rms_norm_eps = check_real("DreamConfig.rms_norm_eps", c.rms_norm_eps, 0, 1, open_lo=True, open_hi=True)
    check_real("DreamConfig.initializer_range", c.initializer_range, lo=0, open_lo=True)
    c.rope_theta = check_real("DreamConfig.rope_theta", c.rope_theta, 1, FLOAT32_MAX, open_lo=True)
    h, kvh = c.num_attention_heads, c.num_key_value_heads
    if c.hidden_size % h or c.head_dim % 2:
        raise ValueError(
            f"DreamConfig.hidden_size ({c.hidden_size}) must be num_attention_heads ({h}) times an "
            f"even head size (RoPE rotates pairs)"
        )
    if h % kvh:
        raise ValueError(f"DreamConfig.num_attention_heads ({h}) must be a multiple of num_key_value_heads ({kvh})")
    check_int("DreamConfig.mask_token_id", c.mask_token_id, 0, c.vocab_size - 1)
    if c.vocab_size == 1:
        raise ValueError("DreamConfig.vocab_size 1 holds only MASK: a decoder could commit nothing")
    for name in ("pad_token_id", "bos_token_id", "eos_token_id"):
        ids = getattr(c, name)
        for t in ids if isinstance(ids, list) else [ids]:
            if t is not None:
                check_int(f"DreamConfig.{name}", t, 0, c.vocab_size - 1)
    if not isinstance(c.tie_word_embeddings, bool):
        raise ValueError(f"DreamConfig.tie_word_embeddings must be True or False, got {c.tie_word_embeddings!r}")


def dream_config_fields(raw: dict) -> dict:
    """The checked fields of a Dream config.json for ``DreamConfig.from_dict``."""
    if raw.get("model_type", DREAM_IDENTITY["model_type"]) != DREAM_IDENTITY["model_type"]:
        raise ValueError(f"config.json's model_type is {raw['model_type']!r}, not a Dream checkpoint ('Dream')")
    check_field_types(raw)
    check_supported(raw, "Dream")
    return with_rope_theta(raw)


CONFIGS = {"sdar": SDARConfig, "llada": LLaDAConfig, "dream": DreamConfig}  # a model's family -> its config class
