"""The conformance suite's cases: tiny models of each family, generation requests, the knobs that
narrow them and their JSON form (the replay file). Hypothesis draws them and aims them at the
boundaries where implementations differ in ``conformance_draws``; ``spotref.conformance`` runs them."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import numbers
import os
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace

import torch

from spotref.api import DecodeOptions, serving_precision
from spotref.api import weights_dtype as api_weights_dtype
from spotref.checkpoint import from_pretrained
from spotref.configs import DreamConfig, LLaDAConfig, SDARConfig, SDARMoEConfig
from spotref.configs_llada2 import LLaDA2Config
from spotref.spec.checks import check_int
from spotref.spec.decode import BLOCK_CAUSAL
from spotref.spec.decode import family as model_family
from spotref.spec.dream import DreamModel
from spotref.spec.llada import LLaDAModel
from spotref.spec.llada2 import LLaDA2Model
from spotref.spec.sdar import SDARModel
from spotref.spec.sdar_moe import SDARMoEModel

BLOCK_SIZES = (1, 2, 3, 4, 5, 7, 8, 9, 16, 32)
INIT_RANGES = (0.02, 0.3, 1.0)  # 1e-4 gives near-tie models: every flipped last bit shows
MAX_TEMPERATURE = 3.0  # T = 0, or continuous in [0.05, MAX_TEMPERATURE]
MAX_BUDGET = 256
DRAFTERS = ("confidence", "confidence-chain", "random", "oracle", "wrong", "near-miss", "spot")
FAMILIES = ("sdar", "llada", "dream", "llada2")  # the families the kit draws (SDAR's cases SDAR-MoE in some)
MODELS = {"sdar": SDARModel, "llada": LLaDAModel, "dream": DreamModel, "llada2": LLaDA2Model}
CONFIGS = {"sdar": SDARConfig, "llada": LLaDAConfig, "dream": DreamConfig, "llada2": LLaDA2Config}
EXPERT_BIAS = 0.3  # a toy LLaDA2's routing bias (selection only), drawn N(0, this) from its weights seed
MODEL_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
VOCAB = (8, 300)  # the toy models' vocabulary sizes, drawn in [8, 300] (``cases(vocab=...)``)
MAX_VOCAB = 2**20  # the largest vocabulary a toy model may be given


@dataclass
class Case:
    """One conformance example: a tiny model of ``family`` and one generation request."""

    config: SDARConfig | LLaDAConfig | DreamConfig  # SDARMoEConfig, LLaDA2Config: SDARConfig's
    weights_seed: int
    prompt: list
    max_new_tokens: int
    drafter: str
    kwargs: dict = field(default_factory=dict)  # generate's options (``DecodeOptions``) but ``NOT_CASE``: the
    # ``OPTIONS`` and some of ``OPTIONS_MAY`` (stop_ids, width, fused_store; block_length: a canvas family's)
    family: str = "sdar"
    batch_sensitive: bool = False  # the model's logits depend on a forward's row count (``BatchSensitive``)
    dtype: str | None = None  # the model's dtype (``MODEL_DTYPES``); None: float32, a checkpoint's its own
    checkpoint: str | None = None  # a checkpoint directory: the model ``from_pretrained`` reads (config: its own)
    aim: str | None = None  # the boundary ``aimed`` set (one of ``AIMS``), None: none was set

    def model(self) -> SDARModel | LLaDAModel | DreamModel:
        if self.checkpoint is not None:
            model = pretrained(self.checkpoint, self.dtype)
        else:
            with cpu_seeded(self.weights_seed):
                model = model_class(self.family, self.config)(self.config).eval()
                biased(model)
            model = model.to(MODEL_DTYPES[self.dtype or "float32"])
        return BatchSensitive(model) if self.batch_sensitive else model

    @property
    def block_size(self) -> int:
        """The block length decoded in: a block-causal family's (SDAR's, LLaDA2's) own block size, a
        canvas family's block_length."""
        return self.config.block_size if self.family in BLOCK_CAUSAL else self.kwargs["block_length"]


@contextlib.contextmanager
def cpu_seeded(seed: int):
    """The CPU generator seeded with ``seed`` inside, its state restored after: what
    ``torch.random.fork_rng`` with ``torch.manual_seed`` does for the CPU, without seeding every
    accelerator's generator too (a queued call and its traceback each time where none is started:
    6% of a kit case)."""
    state = torch.random.get_rng_state()
    torch.random.default_generator.manual_seed(seed)
    try:
        yield
    finally:
        torch.random.set_rng_state(state)


def model_class(family: str, config):
    """The model class of a toy ``config`` of ``family``: SDAR-MoE's for an ``SDARMoEConfig``."""
    return SDARMoEModel if isinstance(config, SDARMoEConfig) else MODELS[family]


def biased(model) -> None:
    """A toy LLaDA2's routing biases drawn (in place, from the current seed), so that selection
    differs from the weights' order as in its checkpoints; any other model as it is."""
    with torch.no_grad():
        for name, buffer in model.named_buffers():
            if name.endswith("expert_bias"):
                buffer.normal_(0, EXPERT_BIAS)


def config_class(family: str, d: dict):
    """The config class of a toy model's config ``d`` (JSON) of ``family``: SDAR-MoE's where it
    names experts."""
    return SDARMoEConfig if family == "sdar" and "num_experts" in d else CONFIGS[family]


class BatchSensitive:
    """``model`` made loudly batch-dependent, for the batch-invariance check: a forward of R rows
    (SDAR: a ``denoise`` of R rows with ``one_forward``, else R forwards of one row; a canvas
    family: a call of R canvases) adds a fixed pattern of R (standard normal, times ``scale``) to
    its logits. A decoder that runs every pass of width W as one forward of W rows, as exact
    decoding at width W does (docs/spec.md section 4), sees the pattern of W; one that ignores
    ``width`` sees another, and its decisions differ. Everything else is ``model``'s."""

    def __init__(self, model, scale: float = 1.0):
        self.model, self.scale = model, scale

    def __getattr__(self, name):
        return getattr(self.__dict__["model"], name)

    def loud(self, logits: torch.Tensor, rows: int) -> torch.Tensor:
        """logits (N, ..., V) of a forward of ``rows`` rows, plus the pattern of ``rows``."""
        g = torch.Generator().manual_seed(rows)
        pattern = torch.randn(logits.shape[1:], generator=g, dtype=torch.float64) * self.scale
        return logits + pattern.to(logits.dtype)

    def denoise(self, cache, states, one_forward: bool = False):
        return self.loud(self.model.denoise(cache, states, one_forward), len(states) if one_forward else 1)

    def store_and_denoise(self, cache, block, states, one_forward: bool = False):
        self.model.store(cache, block)
        return self.denoise(cache, states, one_forward)

    def __call__(self, ids):
        return self.loud(self.model(ids), len(ids))


def decided_in(config, dtype: str) -> tuple:
    """(the dtype ``precision=None`` decides in, the one ``"auto"`` does) for a model of
    ``config`` whose weights are ``dtype``: its serving precision (docs/spec.md section 2),
    "auto" being the logits', the model's dtype."""
    served = serving_precision(SimpleNamespace(config=config))
    return (dtype if served == "auto" else served), dtype


def weights_dtype(model) -> str:
    """The name of ``model``'s weights' dtype ("float32", "bfloat16", ...)."""
    return str(api_weights_dtype(model)).removeprefix("torch.")


def checkpoint_block_sizes(model, block_sizes) -> list:
    """The block lengths a checkpoint's cases decode in: SDAR's own; a canvas family's, those of
    ``block_sizes`` whose canvases (prompt <= B, 2B + 5 tokens rounded up) fit its positions."""
    if model_family(model) not in FAMILIES:
        raise ValueError(f"model: a {model_family(model)} checkpoint; the kit draws {', '.join(FAMILIES)} cases")
    if model_family(model) in BLOCK_CAUSAL:
        return [model.block_size]
    cfg = model.config
    positions = getattr(cfg, "max_sequence_length", None) or getattr(cfg, "max_position_embeddings", None)
    fit = [b for b in block_sizes if positions is None or 4 * b + 8 <= positions]
    if not fit:
        raise ValueError(f"model: no block length of {tuple(block_sizes)} fits its {positions} positions")
    return fit


@functools.lru_cache(maxsize=2)
def pretrained(path: str, dtype: str | None):
    """``spotref.from_pretrained(path)`` in ``dtype`` (None: the checkpoint's own), loaded once per
    process: a decoder under test must not change it."""
    return from_pretrained(path, dtype=MODEL_DTYPES[dtype] if dtype else None)


def checked_knobs(vocab, dtype, model, block_sizes, drafters=DRAFTERS, families=FAMILIES) -> tuple:
    """``cases``' knobs as it uses them: (vocab (lo, hi), dtypes (a tuple of names, or (None,):
    a checkpoint's own), model (an absolute directory, or None), the block sizes drawn from (a
    checkpoint's: ``checkpoint_block_sizes``)); ``ValueError`` naming a bad one:
    a vocabulary outside [3, ``MAX_VOCAB``] (or given with a checkpoint, which has its own), a
    dtype not in ``MODEL_DTYPES``, a model directory that is not a checkpoint, drafters not of
    ``DRAFTERS``, families not of ``FAMILIES`` (or narrowed with a checkpoint, which has its own)."""
    if isinstance(families, str) or not families or not set(families) <= set(FAMILIES):
        raise ValueError(f"families must be a non-empty sequence of {FAMILIES}, got {families!r}")
    if model is not None and tuple(families) != tuple(FAMILIES):
        raise ValueError("families: a checkpoint (model) has its own family; give one or the other")
    if vocab is not None and model is not None:
        raise ValueError("vocab: a checkpoint (model) has its own vocabulary; give one or the other")
    lo, hi = vocab_range(VOCAB if vocab is None else vocab)
    names = [dtype] if dtype is None or isinstance(dtype, str) else list(dtype)
    if not names or not all(n is None or n in MODEL_DTYPES for n in names) or (None in names and len(names) > 1):
        raise ValueError(f"dtype must be one of {tuple(MODEL_DTYPES)} or a sequence of them, got {dtype!r}")
    path, sizes = None, block_sizes
    if model is not None:
        if not isinstance(model, (str, os.PathLike)) or not Path(model).is_dir():
            raise ValueError(f"model must be a checkpoint directory, got {model!r}")
        path = str(Path(model).resolve())
        sizes = checkpoint_block_sizes(pretrained(path, names[0]), block_sizes)  # it loads, and some length fits
    if isinstance(drafters, str) or not drafters or not set(drafters) <= set(DRAFTERS):
        raise ValueError(f"drafters must be a non-empty sequence of {DRAFTERS}, got {drafters!r}")
    return (lo, hi), tuple(n or "float32" for n in names) if model is None else tuple(names), path, sizes


def vocab_range(vocab) -> tuple:
    """``vocab``, an int or (lo, hi), as (lo, hi) in [3, ``MAX_VOCAB``]; ``ValueError`` otherwise."""
    pair = (
        (vocab, vocab)
        if isinstance(vocab, numbers.Integral)
        else tuple(vocab)
        if isinstance(vocab, (tuple, list))
        else ()
    )
    if len(pair) != 2 or not all(isinstance(v, numbers.Integral) and not isinstance(v, bool) for v in pair):
        raise ValueError(f"vocab must be an int or a (lo, hi) pair of ints, got {vocab!r}")
    lo, hi = (check_int("vocab", v, 3, MAX_VOCAB) for v in pair)
    if lo > hi:
        raise ValueError(f"vocab: the range ({lo}, {hi}) is empty (lo > hi)")
    return lo, hi


def tiny_config(family: str, V: int, mask_id: int, B: int, hidden, layers, heads, kv, tied, init):
    """A tiny model's config of ``family``: every canvas (prompt <= B, max_new_tokens <= 2B + 5
    rounded up to blocks of B) within its positions."""
    if family == "llada":
        return LLaDAConfig(
            vocab_size=V,
            d_model=hidden,
            n_heads=heads,
            n_kv_heads=kv,
            n_layers=layers,
            mlp_hidden_size=32,
            max_sequence_length=4 * B + 8,
            weight_tying=tied,
            mask_token_id=mask_id,
            init_std=init,
        )
    qwen = dict(  # the fields SDAR's and Dream's configs share, Qwen's names
        vocab_size=V,
        hidden_size=hidden,
        intermediate_size=32,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv,
        tie_word_embeddings=tied,
        initializer_range=init,
        mask_token_id=mask_id,
    )
    if family == "dream":  # no pad, eos or bos id: a tiny vocabulary holds none of Dream's
        return DreamConfig(**qwen, max_position_embeddings=4 * B + 8, pad_token_id=None)
    if family == "llada2":  # its routing: ``conformance_draws.routing`` draws others
        return LLaDA2Config(**qwen, head_dim=8, block_size=B, **LLADA2_ROUTING, first_k_dense_replace=layers - 1)
    return SDARConfig(**qwen, head_dim=8, block_size=B)


LLADA2_ROUTING = dict(num_experts=4, n_group=2, topk_group=1, num_experts_per_tok=2, moe_intermediate_size=16)


# --- a case as JSON (the replay file) ---------------------------------------------------------

OPTIONS = ("temperature", "seed", "threshold", "top_k", "top_p", "confidence", "precision", "budget", "depth")
NOT_CASE = ("drafter", "core", "trace")  # generate's options no case holds (its drafter: ``Case.drafter``)
OPTIONS_MAY = tuple(DecodeOptions().kwargs(leave_out=OPTIONS + NOT_CASE))  # a case's other keywords


def case_to_dict(case: Case) -> dict:
    """``case`` as plain JSON values: the model (a toy model's family, config, weights seed and
    dtype, or a checkpoint directory), the prompt, the length, the drafter and the options."""
    model = {"family": case.family, "dtype": case.dtype, "batch_sensitive": case.batch_sensitive}
    if case.checkpoint is not None:
        model["checkpoint"] = case.checkpoint
    else:
        model.update(config=case.config.to_dict(), weights_seed=case.weights_seed)
    options = {k: list(v) if isinstance(v, (list, tuple)) else v for k, v in case.kwargs.items()}
    return dict(
        model=model,
        prompt=[int(t) for t in case.prompt],
        max_new_tokens=case.max_new_tokens,
        drafter=case.drafter,
        options=options,
    )


def case_from_dict(d: dict, where: str = "case") -> Case:
    """The case ``case_to_dict`` wrote; ``ValueError`` naming the first field that is missing or
    of the wrong kind (``where``: the name of ``d`` in the message). The options' values are
    checked as ``spotref.generate`` checks them, when the case runs."""
    model, options = field_of(d, "model", dict, where), field_of(d, "options", dict, where)
    family = field_of(model, "family", str, f"{where}.model")
    if family not in FAMILIES:
        raise ValueError(f"{where}.model.family must be one of {FAMILIES}, got {family!r}")
    dtype = model.get("dtype")
    if dtype is not None and dtype not in MODEL_DTYPES:
        raise ValueError(f"{where}.model.dtype must be null or one of {tuple(MODEL_DTYPES)}, got {dtype!r}")
    drafter = field_of(d, "drafter", str, where)
    if drafter not in DRAFTERS:
        raise ValueError(f"{where}.drafter must be one of {DRAFTERS}, got {drafter!r}")
    unknown = sorted(set(options) - set(OPTIONS) - set(OPTIONS_MAY))
    missing = [k for k in OPTIONS if k not in options]
    if unknown or missing:
        raise ValueError(f"{where}.options: unknown {unknown}, missing {missing}")
    prompt = field_of(d, "prompt", list, where)
    if not all(isinstance(t, int) and not isinstance(t, bool) for t in prompt):
        raise ValueError(f"{where}.prompt must be a list of token ids, got {prompt!r}")
    n = check_int(f"{where}.max_new_tokens", d.get("max_new_tokens"), 0)
    batch = bool(field_of(model, "batch_sensitive", bool, f"{where}.model"))
    case = Case(None, 0, prompt, n, drafter, dict(options), family, batch, dtype)
    if "checkpoint" in model:
        path = field_of(model, "checkpoint", str, f"{where}.model")
        if not Path(path).is_dir():
            raise ValueError(f"{where}.model.checkpoint: no checkpoint directory {path!r}")
        return dataclasses.replace(case, config=pretrained(path, dtype).config, checkpoint=path)
    config = field_of(model, "config", dict, f"{where}.model")
    try:
        config = config_class(family, config).from_dict(config)
    except (TypeError, ValueError) as e:
        raise ValueError(f"{where}.model.config: {e}") from None
    weights = check_int(f"{where}.model.weights_seed", model.get("weights_seed"), 0, 2**64 - 1)
    return dataclasses.replace(case, config=config, weights_seed=weights)


def field_of(d: dict, name: str, kind: type, where: str):
    """``d[name]``, a ``kind``; ``ValueError`` naming ``where.name`` otherwise."""
    value = d.get(name) if isinstance(d, dict) else None
    if not isinstance(value, kind):
        raise ValueError(f"{where}.{name} must be a JSON {kind.__name__}, got {value!r}")
    return value
