"""Real checkpoints: the SDAR format (docs/spec.md section 1), ``SDARModel.from_pretrained``'s
reader; the steps every family's reader shares (``load_checkpoint``, ``assign_weights``,
``stored_tensors``); and ``from_pretrained``, which reads any family's checkpoint directory by
its config.json's ``model_type`` (``READERS``). The writer, ``save_pretrained``, is the
repository's (``workbench.checkpoint_writer``): the tests build their checkpoints with it.

A checkpoint directory holds ``config.json`` and either ``model.safetensors`` or the shards
listed by ``model.safetensors.index.json`` (the official SDAR layout: 4 shards for SDAR-8B).
Weight names are Qwen3's (``model.layers.N.self_attn.q_proj.weight``, ...). ``lm_head.weight``
is used when present, else the head is tied to ``model.embed_tokens.weight`` (docs/spec.md section 1).

Everything is checked before a byte of weights is read: the config (block size and mask id
supplied by the caller when the config lacks them; no unsupported Qwen3 feature), the shard
files, then every tensor's name, shape and stored dtype against the model the config
describes. A problem raises one ``ValueError`` that names it: the missing, unexpected and
wrong-shaped tensors, the missing shard files, the unsupported dtype.

The model is built on the ``meta`` device (no random init of 8B parameters) and its tensors are
then assigned straight from the files, cast to the requested dtype on the requested device.

Dream's checkpoints (``spotref.spec.dream``) share the layout and the checks: ``load_checkpoint``
with Dream's config fields.
"""

from __future__ import annotations

import inspect
import json
from pathlib import Path

import torch
from torch.overrides import TorchFunctionMode

from spotref.checks import check_path
from spotref.configs import (
    DreamConfig,
    LLaDAConfig,
    SDARConfig,
    SDARMoEConfig,
    dream_config_fields,
    llada_config_fields,
    sdar_config_fields,
    sdar_moe_config_fields,
)
from spotref.configs_llada2 import LLaDA2Config, llada2_config_fields
from spotref.spec.dream import DreamModel
from spotref.spec.llada import LLaDAModel
from spotref.spec.llada2 import LLaDA2Model
from spotref.spec.sdar import SDARModel
from spotref.spec.sdar_moe import SDARMoEModel

CONFIG, SINGLE, INDEX = "config.json", "model.safetensors", "model.safetensors.index.json"
DTYPES = {
    "float32": torch.float32,
    "fp32": torch.float32,
    "float": torch.float32,
    "bfloat16": torch.bfloat16,
    "bf16": torch.bfloat16,
    "float16": torch.float16,
    "fp16": torch.float16,
    "half": torch.float16,
}
STORED_DTYPES = {"F32", "F16", "BF16", "F64"}  # safetensors dtype codes we can cast from
IGNORED_SUFFIXES = ("rotary_emb.inv_freq",)  # buffers some exporters save; recomputed here


def read_sdar(root: Path, raw: dict, dtype=None, device=None, block_size=None, mask_token_id=None):
    """The SDARModel of the checkpoint directory ``root`` (config.json ``raw``); ``block_size`` and
    ``mask_token_id`` override (or supply) the config's."""
    fields = sdar_config_fields(raw, block_size, mask_token_id)
    return load_checkpoint(SDARModel, SDARConfig, root, raw, fields, dtype, device)


def read_sdar_moe(root: Path, raw: dict, dtype=None, device=None, block_size=None, mask_token_id=None):
    """The SDARMoEModel of ``root`` (``model_type`` "sdar_moe": SDAR-30B-A3B's layout, one tensor
    per expert and projection); ``block_size`` and ``mask_token_id`` as ``read_sdar``'s."""
    fields = sdar_moe_config_fields(raw, block_size, mask_token_id)
    return load_checkpoint(SDARMoEModel, SDARMoEConfig, root, raw, fields, dtype, device)


def read_llada2(root: Path, raw: dict, dtype=None, device=None, block_size=None, mask_token_id=None):
    """The LLaDA2Model of ``root`` (``model_type`` "llada2_moe": LLaDA2.0's layout, one tensor per
    expert and projection, each router's ``expert_bias``); ``block_size`` (its generate's
    ``block_length``, 32 for LLaDA2.0) and ``mask_token_id`` (156895 for LLaDA2.0) as
    ``read_sdar``'s. Its head is tied only where config.json's ``tie_word_embeddings`` says so."""
    fields = llada2_config_fields(raw, block_size, mask_token_id)
    model = load_checkpoint(LLaDA2Model, LLaDA2Config, root, raw, fields, dtype, device, tie=False)
    if model.config.tie_word_embeddings:
        model.lm_head.weight = model.embeddings().weight
    return model


def read_llada(root: Path, raw: dict, dtype=None, device=None):
    """The LLaDAModel of ``root`` (config.json + model.safetensors, or the shards of
    model.safetensors.index.json). dtype: default the config's torch_dtype, else float32. Its
    tying is its config's ``weight_tying``, not read from the files."""
    return load_checkpoint(LLaDAModel, LLaDAConfig, root, raw, llada_config_fields(raw), dtype, device, tie=False)


def read_dream(root: Path, raw: dict, dtype=None, device=None):
    """The DreamModel of ``root``. dtype None: the config's ``torch_dtype`` (or ``dtype``, as
    transformers 5 writes it)."""
    return load_checkpoint(DreamModel, DreamConfig, root, raw, dream_config_fields(raw), dtype, device)


def load_checkpoint(cls, config_class, root: Path, raw: dict, fields: dict, dtype=None, device=None, tie=True):
    """``cls`` built from the checked config ``fields`` of ``raw`` (config.json) with the weights of
    ``root``. ``tie``: a model with ``model.embed_tokens`` and ``lm_head`` (SDAR, Dream), tied
    when the files hold no ``lm_head.weight``."""
    cfg = make_config(config_class, fields)
    dtype, device = resolve_dtype(dtype, raw), resolve_device(device)
    files = weight_files(root)  # {name: shard path}
    shapes = stored_shapes(files)  # {name: (shape, stored dtype)}
    if tie:
        cfg.tie_word_embeddings = "lm_head.weight" not in shapes
    model = assign_weights(build_on_meta(cls, cfg), files, shapes, root, dtype, device)
    if tie and cfg.tie_word_embeddings:
        model.lm_head.weight = model.model.embed_tokens.weight
    return model.eval()


def assign_weights(model, files: dict, shapes: dict, root: Path, dtype, device):
    """The meta-built ``model`` with the checkpoint's tensors: names, shapes and stored dtypes
    checked against it first (one error for all), then each tensor read, cast to ``dtype`` on
    ``device`` and assigned in place of the meta one. Returns ``model``."""
    check_tensors(model, shapes, root)
    model.load_state_dict(read_tensors(files, dtype, device), strict=False, assign=True)
    return model


# config.json's model_type -> the reader of that family's layout
READERS = {
    "sdar": read_sdar,
    "sdar_moe": read_sdar_moe,
    "llada": read_llada,
    "llada2_moe": read_llada2,
    "Dream": read_dream,
}


def from_pretrained(path, dtype=None, device=None, model_type=None, **options):
    """The model of the checkpoint directory ``path``, of any family: config.json's
    ``model_type`` picks the reader (``READERS``); ``model_type="sdar"`` reads a Qwen3-layout
    directory whose config names another as SDAR. ``options``: that reader's own arguments
    (SDAR's ``block_size``, ``mask_token_id``)."""
    root = checkpoint_dir(path)
    raw = read_json(root / CONFIG, "the model config")
    model_type = raw.get("model_type") if model_type is None else model_type
    if not isinstance(model_type, str) or model_type not in READERS:
        raise ValueError(
            f"config.json in {str(root)!r} has model_type {model_type!r:.80}: spotref reads "
            f"{', '.join(map(repr, READERS))} (a Qwen3-layout directory: from_pretrained(path, model_type='sdar'))"
        )
    reader = READERS[model_type]
    unknown = sorted(set(options) - set(inspect.signature(reader).parameters))
    if unknown:
        raise ValueError(f"from_pretrained: a {model_type} checkpoint takes no {', '.join(unknown)}")
    return reader(root, raw, dtype=dtype, device=device, **options)


class _SkipInit(TorchFunctionMode):
    """Random init is a no-op on meta tensors, but its meta kernels import torch._dynamo (seconds)."""

    INIT = {"normal_", "uniform_", "kaiming_uniform_", "kaiming_normal_", "trunc_normal_", "xavier_uniform_"}
    INIT |= {"xavier_normal_", "fill_", "zero_", "ones_", "zeros_"}  # torch.nn.init's in-place functions

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if getattr(func, "__name__", "") in self.INIT:
            return args[0] if args else kwargs["tensor"]
        return func(*args, **(kwargs or {}))


def build_on_meta(cls, cfg):
    """``cls(cfg)`` with every tensor on the meta device and no random init (no memory, no time)."""
    with torch.device("meta"), _SkipInit():
        return cls(cfg)


def checkpoint_dir(path) -> Path:
    root = Path(check_path("the checkpoint directory", path))
    if not root.exists():
        raise ValueError(f"checkpoint directory {str(root)!r} does not exist")
    if not root.is_dir():
        raise ValueError(f"{str(root)!r} is not a checkpoint directory (config.json + safetensors)")
    if not (root / CONFIG).is_file():
        raise ValueError(f"checkpoint directory {str(root)!r} has no config.json")
    return root


def read_json(path: Path, what: str) -> dict:
    """The JSON object in ``path``; a ValueError naming ``what`` and the file otherwise."""
    try:
        d = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"cannot read {what} {str(path)!r}: {e}") from None
    except RecursionError:  # arrays or objects nested thousands deep
        raise ValueError(f"cannot read {what} {str(path)!r}: its JSON nests too deep to be a config") from None
    if not isinstance(d, dict):
        raise ValueError(f"{what} {str(path)!r} is not a JSON object (got {type(d).__name__})")
    return d


def make_config(config_class, fields: dict):
    """``config_class.from_dict(fields)`` (an ``SDARConfig``, a ``LLaDAConfig``), every key of its
    ``STATED`` present, its errors named as the checkpoint's."""
    try:
        config_class.check_stated(fields)
        return config_class.from_dict(fields)
    except (TypeError, ValueError) as e:
        raise ValueError(f"checkpoint config: {e}") from None


def resolve_dtype(dtype, raw: dict | None = None) -> torch.dtype:
    """torch.dtype or name; None: the config's ``torch_dtype`` (or ``dtype``), else float32."""
    if dtype is None and raw is not None:
        dtype = raw.get("torch_dtype") or raw.get("dtype")
        if dtype is not None and str(dtype).removeprefix("torch.") not in DTYPES:
            dtype = None  # an odd stored dtype: fall back
    if dtype is None:
        return torch.float32
    if isinstance(dtype, torch.dtype) and dtype in DTYPES.values():
        return dtype
    name = str(dtype).removeprefix("torch.")
    if isinstance(dtype, str) and name in DTYPES:
        return DTYPES[name]
    raise ValueError(f"unsupported dtype {dtype!r}: use one of bfloat16, float16, float32")


def resolve_device(device) -> torch.device:
    try:
        dev = torch.device("cpu" if device is None else device)
    except (RuntimeError, TypeError) as e:
        raise ValueError(f"bad device {device!r}: {e}") from None
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device {device!r} requested but CUDA is not available on this machine")
    if dev.type == "cuda" and (dev.index or 0) >= torch.cuda.device_count():
        raise ValueError(f"device {device!r}: this machine has {torch.cuda.device_count()} CUDA device(s)")
    if dev.type not in ("cpu", "cuda"):
        raise ValueError(f"device {device!r}: spotref runs on cpu or cuda")
    if dev.type == "cpu" and dev.index not in (None, 0):  # torch parses "cpu:9"; nothing can be put there
        raise ValueError(f"device {device!r}: the CPU is one device, cpu (or cpu:0)")
    return dev


def weight_files(root: Path) -> dict:
    """{tensor name: shard path}, from the index or the single file; shard files must exist."""
    if (root / INDEX).is_file():
        index = read_json(root / INDEX, "the weight index")
        wmap = index.get("weight_map")
        if not isinstance(wmap, dict) or not wmap:
            raise ValueError(f"{INDEX} in {str(root)!r} has no weight_map")
        for name, f in wmap.items():
            check_shard_name(root, name, f)
        missing = sorted({f for f in wmap.values() if not (root / f).is_file()})
        if missing:
            raise ValueError(
                f"checkpoint {str(root)!r}: {len(missing)} shard file(s) listed in "
                f"{INDEX} are missing: {listing(missing)}"
            )
        return {name: root / f for name, f in wmap.items()}
    if (root / SINGLE).is_file():
        return {name: root / SINGLE for name in safetensor_keys(root / SINGLE)}
    others = sorted(p.name for p in root.glob("*.bin")) + sorted(p.name for p in root.glob("*.pt"))
    hint = f" (found {listing(others)}: only safetensors is supported)" if others else ""
    raise ValueError(f"checkpoint directory {str(root)!r} has neither {SINGLE} nor {INDEX}{hint}")


def check_shard_name(root: Path, tensor: str, shard) -> None:
    """A shard named in the index must be a plain file name inside the checkpoint directory: no
    absolute path, no ``..``, no symlink leading outside (an index must not read other files)."""
    where = f"{INDEX} in {str(root)!r}: the shard {shard!r} of {tensor}"
    if not isinstance(shard, str) or not shard:
        raise ValueError(f"{where} must be a file name (a non-empty string)")
    p = Path(shard)
    if p.is_absolute() or ".." in p.parts or "\\" in shard or ":" in shard:
        raise ValueError(f"{where} is outside the checkpoint directory (absolute or '..' path): refused")
    real, base = (root / p).resolve(), root.resolve()
    if base not in real.parents:
        raise ValueError(f"{where} resolves outside the checkpoint directory ({real}): refused")


def _safe_open(path: Path, device="cpu"):
    try:
        from safetensors import safe_open
    except ImportError:
        raise ImportError(
            "loading checkpoints needs the 'safetensors' package: "
            "pip install 'spotref[hf]' (or pip install safetensors)"
        ) from None
    try:
        return safe_open(str(path), framework="pt", device=str(device))
    except Exception as e:  # safetensors raises its own error types for bad headers
        raise ValueError(f"cannot read safetensors file {str(path)!r}: {e}") from None


def safetensor_keys(path: Path) -> list:
    with _safe_open(path) as f:
        return list(f.keys())


def stored_shapes(files: dict) -> dict:
    """{name: (shape tuple, safetensors dtype code)} read from the file headers only."""
    out, by_file = {}, {}
    for name, path in files.items():
        by_file.setdefault(path, []).append(name)
    for path, names in by_file.items():
        with _safe_open(path) as f:
            present = set(f.keys())
            absent = [n for n in names if n not in present]
            if absent:
                raise ValueError(
                    f"{len(absent)} tensor(s) listed in {INDEX} are not in {path.name}: {listing(sorted(absent))}"
                )
            for n in names:
                s = f.get_slice(n)
                out[n] = (tuple(s.get_shape()), s.get_dtype())
    return out


def check_tensors(model, shapes: dict, root: Path) -> None:
    """Names, shapes and stored dtypes of the files against the model; one error for all."""
    want = {n: tuple(p.shape) for n, p in stored_tensors(model).items()}
    have = {n: v for n, v in shapes.items() if not n.endswith(IGNORED_SUFFIXES)}
    missing = sorted(set(want) - set(have))
    unexpected = sorted(set(have) - set(want))
    wrong = [
        f"{n} {have[n][0]} (config.json wants {want[n]})"
        for n in sorted(set(want) & set(have))
        if have[n][0] != want[n]
    ]
    dtypes = [f"{n} {have[n][1]}" for n in sorted(have) if have[n][1] not in STORED_DTYPES]
    problems = [
        f"{k} {len(v)} tensor(s): {listing(v)}"
        for k, v in (
            ("missing", missing),
            ("unexpected", unexpected),
            ("wrong-shaped", wrong),
            ("unsupported stored dtype (want F32/F16/BF16) in", dtypes),
        )
        if v
    ]
    if problems:
        raise ValueError(f"checkpoint {str(root)!r} does not match its config.json: " + "; ".join(problems))


def read_tensors(files: dict, dtype: torch.dtype, device: torch.device) -> dict:
    """Every tensor, cast to ``dtype`` on ``device`` (one shard open at a time)."""
    state, by_file = {}, {}
    for name, path in files.items():
        if not name.endswith(IGNORED_SUFFIXES):
            by_file.setdefault(path, []).append(name)
    for path, names in by_file.items():
        with _safe_open(path, device) as f:
            for n in names:
                state[n] = aligned(f.get_tensor(n).to(dtype))
                if not torch.isfinite(state[n]).all():
                    raise ValueError(
                        f"checkpoint tensor {n} in {path.name} holds non-finite values "
                        f"(NaN or inf, as {str(dtype).removeprefix('torch.')}): a broken "
                        f"or overflowing checkpoint would decode garbage"
                    )
    return state


ALIGN = 64  # bytes: torch's CPU allocator's alignment


def aligned(t: torch.Tensor) -> torch.Tensor:
    """``t``, or a copy of it where its data is not ``ALIGN``-byte aligned (a tensor read from a
    file sits at its offset there): a kernel's bits can depend on its operand's alignment (a
    one-token expert matmul gave other logits from a weight 8 bytes off), so a checkpoint read
    back decodes exactly as the model that was saved."""
    return t if t.data_ptr() % ALIGN == 0 else t.clone()


def stored_tensors(model) -> dict:
    """{name: tensor} of what a checkpoint stores: the state dict with a tied tensor once, under
    its first name (a head tied to the embedding is not stored: SDAR's ``lm_head.weight``)."""
    out, seen = {}, set()
    for n, t in model.state_dict(keep_vars=True).items():
        if id(t) not in seen:
            seen.add(id(t))
            out[n] = t
    return out


def listing(items, n: int = 6) -> str:
    items = [str(i) for i in items]
    more = f" and {len(items) - n} more" if len(items) > n else ""
    return ", ".join(items[:n]) + more
