"""``spotref generate`` and ``spotref audit``: model, tokenizer, prompt and drafter from the
command line, each bad value turned into one ``ValueError`` that names it.

Each command's ``run_*`` builds its options once (``GenerateOptions``, ``AuditOptions``); the
functions below it take that object, never the parsed namespace.

``--model`` is a checkpoint directory (``SDARModel.from_pretrained`` + ``load_tokenizer``) or,
when no such directory exists, the name of a bundled target (``spotref.load_target``).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import dataclass, fields, replace
from pathlib import Path

import torch

import spotref
from spotref.api import DecodeOptions, OptionError, check_canvas
from spotref.audit import audit, batch_invariance, device_of, kernel_path
from spotref.checkpoint import (
    CONFIG,
    checkpoint_dir,
    read_json,
    read_llada2,
    read_sdar,
    read_sdar_moe,
    resolve_device,
    resolve_dtype,
)
from spotref.checks import check_length
from spotref.cli.argtypes import (
    add_threads,
    checked_by,
    int_range,
    model_name,
    nonneg_int,
    positive_int,
    real_range,
    seed_int,
    temperature_arg,
    token_ids,
    tool_main,
)
from spotref.cli.options import Options
from spotref.configs import CONFIGS, with_rope_theta
from spotref.configs_llada2 import LLADA2_IDENTITY, LLaDA2Config, llada2_config_fields
from spotref.files import check_writable
from spotref.load.targets import MODELS, Shape, load_target, target_shape
from spotref.load.tokenizer import IM_END, chat_format, load_tokenizer
from spotref.names import DRAFTERS, resolve_drafter
from spotref.spec.decode import BLOCK_CAUSAL, CANVAS_FAMILIES, family

MAX_BATCH_ROWS = 4096  # a batched denoise of R rows holds R full activations


def budget_arg(text: str) -> int | str:
    """``--budget``: a node budget N >= 1, or ``auto``."""
    try:
        return "auto" if text == "auto" else positive_int(text)
    except argparse.ArgumentTypeError as e:
        raise argparse.ArgumentTypeError(f"must be auto or {str(e).removeprefix('must be ')}") from None


def _device(text: str) -> str:
    """``--device``: a torch device this machine has (``resolve_device``), checked as parsed."""
    resolve_device(text)
    return text


def _dtype(text: str) -> str:
    """``--dtype``: bfloat16, float16 or float32 (``resolve_dtype``), checked as parsed."""
    resolve_dtype(text)
    return text


device_arg, dtype_arg = checked_by(_device, "device"), checked_by(_dtype, "dtype")


def add_generate(p) -> None:
    add_model_args(p, max_new_tokens=128, drafters="none (exact decoding), " + DRAFTER_NAMES)
    p.add_argument(
        "--trace",
        metavar="FILE",
        help="write the decode's trace (every round, docs/spec.md section 8) to FILE; spotref show FILE draws it",
    )


def add_audit(p) -> None:
    add_model_args(p, max_new_tokens=64, drafters="the drafter set beside exact decoding: " + DRAFTER_NAMES)
    p.add_argument(
        "--batch-rows",
        type=int_range(0, MAX_BATCH_ROWS),
        default=8,
        help=f"batch-invariance check rows, at most {MAX_BATCH_ROWS} (0: skip the check)",
    )


CANVAS_TYPES = {"llada": "llada", "Dream": "dream"}  # config.json model_type -> family, the whole-canvas ones
CONFIDENCES = ("filtered", "unfiltered", "low_confidence", "maskgit_plus", "topk_margin", "entropy")
DRAFTER_NAMES = "confidence, confidence-chain, calibrated, spot, a bundled drafter name or a drafter .pt path"


def add_model_args(p, max_new_tokens: int, drafters: str) -> None:
    """The arguments of both sub-commands (generate and audit)."""
    p.add_argument("--model", required=True, type=model_name, help="checkpoint directory, or a bundled target name")
    add_prompt_args(p)
    p.add_argument(
        "--max-new-tokens",
        type=nonneg_int,
        default=max_new_tokens,
        help=f"tokens to generate (default {max_new_tokens})",
    )
    p.add_argument(
        "--block-length", type=positive_int, help="block size B (default: the config's; LLaDA and Dream: 32)"
    )
    p.add_argument("--mask-id", type=nonneg_int, default=None, help="MASK token id (default: the config's)")
    add_rule_args(p)
    p.add_argument("--drafter", default="confidence", help=f"{drafters} (default confidence)")
    p.add_argument(
        "--budget",
        type=budget_arg,
        default=16,
        help="tree node budget N (root included), or auto: the cost model's N on this machine (default 16)",
    )
    p.add_argument(
        "--width",
        type=int,
        help="run every pass as one forward of this many rows, padded (>= --budget; default: each row alone)",
    )
    p.add_argument(
        "--precision",
        choices=("auto", "float64", "float32", "bfloat16", "float16"),
        help="the dtype the rule decides in (default: the model's serving precision: its config's "
        "decision_precision, else torch_dtype (or dtype), when that names a float type above; "
        "else the logits' dtype)",
    )
    p.add_argument("--depth", type=nonneg_int, default=8, help="tree depth cap D (default 8)")
    p.add_argument(
        "--lookahead",
        action="store_true",
        help="a block that ends on a drafted state carries the next block's first pass (docs/spec.md 3)",
    )
    p.add_argument("--no-stop", action="store_true", help="ignore the stop ids (EOS)")
    p.add_argument("--device", type=device_arg, default="cpu", help="torch device: cpu, cuda, cuda:1, ...")
    add_threads(p)
    p.add_argument(
        "--dtype", type=dtype_arg, default=None, help="bfloat16, float16, float32 (default: the checkpoint's)"
    )


def add_rule_args(p) -> None:
    """The decision rule's parameters, each checked as parsed (the API's ranges)."""
    p.add_argument(
        "--temperature",
        type=temperature_arg,
        default=0.0,
        help="sampling temperature T (0: argmax, else 1e-6 .. 3.4e38)",
    )
    p.add_argument("--top-k", type=positive_int, default=None, help="keep the k most likely tokens")
    p.add_argument("--top-p", type=real_range(0.0, 1.0, open_lo=True), default=None, help="nucleus filter p in (0, 1]")
    p.add_argument(
        "--confidence",
        choices=CONFIDENCES,
        help="the family's confidence (default: its own): SDAR: filtered (the sampled token's probability "
        "under the top-k/top-p filtered distribution, SDAR's generate.py) or unfiltered (under softmax(L / T), "
        "lmdeploy, SGLang); LLaDA: low_confidence; Dream: maskgit_plus, topk_margin or entropy",
    )
    p.add_argument(
        "--threshold",
        type=real_range(0.0, 1.0, open_lo=True, open_hi=True),
        help="threshold rule tau in (0, 1) (default: one position)",
    )
    p.add_argument("--seed", type=seed_int, default=0, help="noise seed, in [0, 2**64 - 1]")


def add_prompt_args(p) -> None:
    """The prompt (text or token ids) and its chat format."""
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--prompt", help="prompt text")
    src.add_argument("--prompt-ids", type=token_ids, help="prompt as comma-separated token ids")
    fmt = p.add_mutually_exclusive_group()
    fmt.add_argument(
        "--chat",
        action="store_true",
        help="wrap --prompt in the Qwen3 chat format, as the user's turn: the default for a bundled "
        "target trained on chat turns (gsm-b32, gsm-b16); a checkpoint directory with a chat tokenizer "
        "takes it only with --chat",
    )
    fmt.add_argument(
        "--raw", action="store_true", help="send --prompt as it is, without a chat-trained target's chat format"
    )
    p.add_argument("--system", default=None, help="system message (in the chat format: not with --raw)")
    p.add_argument("--no-think", action="store_true", help="an empty <think> block (in the chat format)")


@dataclass(frozen=True)
class ModelOptions(Options):
    """The options ``spotref generate`` and ``spotref audit`` share (``add_model_args``)."""

    model: str  # --model, a checkpoint directory or a bundled target's name
    prompt: str | None  # --prompt text; None: --prompt-ids
    prompt_ids: list[int] | None  # --prompt-ids, parsed (``argtypes.token_ids``); None: --prompt
    chat: bool  # wrap --prompt in the chat format (``chat_prompt``)
    raw: bool  # --prompt as it is, also for a chat-trained target
    system: str | None  # --system message (in the chat format)
    no_think: bool
    max_new_tokens: int
    block_length: int | None  # block size B; None: the config's (LLaDA and Dream: 32)
    mask_id: int | None  # MASK token id; None: the config's
    temperature: float
    top_k: int | None
    top_p: float | None
    confidence: str | None  # the family's confidence (``CONFIDENCES``); None: its own
    threshold: float | None  # threshold rule tau; None: one position a step
    seed: int
    drafter: str  # as given: none, a drafter name, a bundled drafter or a .pt path (``drafter_arg``)
    budget: int | str  # tree node budget N, or "auto"
    width: int | None  # rows of every pass, padded; None: each row alone
    precision: str | None  # the dtype the rule decides in; None: the model's serving precision
    depth: int  # tree depth cap D
    lookahead: bool  # a block ending on a drafted state carries the next block's first pass
    no_stop: bool
    device: str
    threads: int
    dtype: str | None  # the model's dtype; None: the checkpoint's


@dataclass(frozen=True)
class GenerateOptions(ModelOptions):
    """The options of ``spotref generate`` (``add_generate``), built once by ``run_generate``."""

    trace: str | None  # --trace FILE; None: no trace


@dataclass(frozen=True)
class AuditOptions(ModelOptions):
    """The options of ``spotref audit`` (``add_audit``): generate's and ``--batch-rows``, built
    once by ``run_audit``."""

    batch_rows: int  # batch-invariance check rows; 0: skip the check


def load_model_and_tokenizer(spec: str, block_size=None, mask_token_id=None, dtype=None, device=None):
    """``--model``'s (model, tokenizer or None), loaded: a checkpoint directory first, then a
    bundled target (``spotref.names.resolve_model`` is another thing: the API's model argument)."""
    path = Path(spec)
    if path.is_dir():
        return directory_model(path, block_size, mask_token_id, dtype, device), directory_tokenizer(path)
    if path.exists():
        raise ValueError(f"--model {spec!r} is a file, not a checkpoint directory")
    if "/" in spec or "\\" in spec or spec.startswith((".", "~")):
        raise ValueError(f"--model {spec!r}: no such checkpoint directory")
    try:
        target = load_target(spec)
    except (KeyError, ValueError, FileNotFoundError) as e:
        raise ValueError(
            f"--model {spec!r}: no such checkpoint directory or bundled target ({str(e).strip(chr(39))})"
        ) from None
    tok = ChatText(target) if getattr(target, "chat", False) else getattr(target, "tokenizer", None)
    return target_model(target, block_size, mask_token_id, dtype, device), tok


def directory_model(path: Path, block_size, mask_token_id, dtype, device):
    """A checkpoint directory's model, of any family (``spotref.from_pretrained`` by config.json's
    ``model_type``); a directory that names no other family reads as SDAR. ``--mask-id`` is SDAR's
    only: LLaDA's and Dream's configs name their MASK."""
    model_type = read_config_type(path)
    if model_type in CANVAS_TYPES:
        if mask_token_id is not None:
            raise ValueError(f"--mask-id: a {model_type} checkpoint names its MASK in config.json")
        return spotref.from_pretrained(path, dtype=dtype, device=device)
    root = checkpoint_dir(path)
    raw = read_json(root / CONFIG, "the model config")
    read = {"sdar_moe": read_sdar_moe, "llada2_moe": read_llada2}.get(model_type, read_sdar)  # SDAR's options
    return read(root, raw, dtype=dtype, device=device, block_size=block_size, mask_token_id=mask_token_id)


def check_options(spec: str, decode: DecodeOptions, flags: dict | None = None) -> tuple:
    """(--model's ``Shape`` or None, the decode options checked): every option checked
    (``DecodeOptions.check``) before any weight loads, against --model ``spec``'s metadata
    (``model_shape``: a bundled target's ``NAME.json``, a directory's config.json) where it can
    be read, else alone. A bad one is a ``ValueError`` naming its flag (``flags``: option -> flag
    where it is not --OPTION): ``--block-length 100000 (--model gsm-llada): block_length must be ...``
    (it was refused after an 8B model had loaded)."""
    shape = model_shape(spec, decode.block_length)
    try:
        return shape, decode.check(shape)
    except OptionError as e:
        flag = (flags or {}).get(e.option, "--" + e.option.replace("_", "-"))
        value, where = getattr(decode, e.option), "" if shape is None else f" (--model {spec})"
        shown = f"{value:g}" if isinstance(value, float) else value  # as typed: --temperature 25
        raise ValueError(f"{flag} {shown}{where}: {e}") from None


def check_positions(options: ModelOptions, shape, block_length: int) -> None:
    """--max-new-tokens against the model's positions, and a canvas family's whole canvas in
    blocks of ``block_length`` (checked: ``check_options``), read from its metadata ``shape``
    before any weight loads. The prompt's length counts where --prompt-ids give it; --prompt text
    counts as none here."""
    o = options
    P = 0 if o.prompt_ids is None else len(o.prompt_ids)
    try:
        check_length(P, o.max_new_tokens, shape.config.max_position_embeddings)
        check_canvas(shape, P, o.max_new_tokens, block_length)
    except ValueError as e:
        canvas = str(e).startswith("the canvas") and o.block_length is not None
        flag = f"--block-length {o.block_length}" if canvas else f"--max-new-tokens {o.max_new_tokens}"
        text = "" if o.prompt_ids is not None else " (--prompt text counted as 0 tokens until it is encoded)"
        raise ValueError(f"{flag} (--model {o.model}): {e}{text}") from None


def model_shape(spec: str, block_length=None):
    """--model's ``Shape`` (config, family, block size) from its metadata alone, no weight read;
    SDAR's block size is --block-length where given (the CLI's override). None where it cannot
    be told: the loader then names why."""
    path = Path(spec)
    shape = directory_shape(path) if path.is_dir() else target_shape(spec)
    if shape is not None and shape.family in BLOCK_CAUSAL and block_length is not None:
        shape = replace(shape, block_size=block_length)
    return shape if shape is not None and shape.block_size is not None else None


def directory_shape(path: Path):
    """A checkpoint directory's ``Shape`` from its config.json (None where it cannot be read)."""
    model_type = read_config_type(path)
    if model_type == LLADA2_IDENTITY["model_type"]:
        return llada2_shape(path)
    family_name = CANVAS_TYPES.get(model_type, "sdar")
    cls = MODELS[family_name]
    try:
        cfg = CONFIGS[family_name].from_dict(with_rope_theta(json.loads((path / "config.json").read_text())))
    except (OSError, ValueError, TypeError, KeyError, AttributeError, RecursionError):
        return None
    block_size = cfg.block_size if family_name == "sdar" else cls.block_size
    return Shape(cfg, family_name, block_size) if cfg.mask_token_id is not None else None


def llada2_shape(path: Path):
    """A LLaDA2 directory's ``Shape`` (None where config.json does not say its block size and MASK)."""
    try:
        cfg = LLaDA2Config.from_dict(llada2_config_fields(json.loads((path / "config.json").read_text())))
    except (OSError, ValueError, TypeError, KeyError, AttributeError, RecursionError):
        return None
    return Shape(cfg, "llada2", cfg.block_size)


def read_config_type(path: Path):
    """config.json's ``model_type`` (None where it cannot be read: the reader then names why)."""
    try:
        return json.loads((path / "config.json").read_text()).get("model_type")
    except (OSError, ValueError, AttributeError, RecursionError):
        return None


class ChatText:
    """The tokenizer of a bundled target trained on chat-formatted text, with the target's
    ``encode_chat`` (``Target.encode_chat``): ``--prompt`` goes in that format unless ``--raw``."""

    def __init__(self, target):
        self.tok, self.encode_chat = target.tokenizer, target.encode_chat

    def __getattr__(self, name):
        return getattr(self.tok, name)


def directory_tokenizer(path: Path):
    has = any((path / f).is_file() for f in ("tokenizer.json", "vocab.json"))
    return load_tokenizer(path) if has else None


def target_model(target, block_size, mask_token_id, dtype, device):
    model = getattr(target, "model", target)
    model = model.to(device=resolve_device(device), dtype=resolve_dtype(dtype) if dtype else None)
    if block_size is not None:
        model.config.block_size = block_size
    if mask_token_id is not None:
        model.config.mask_token_id = mask_token_id
    return model.eval()


def check_pair(model, tok) -> None:
    """The tokenizer must fit the model: its ids inside the vocabulary, the same MASK id."""
    if tok is None:
        return
    V = model.config.vocab_size
    if getattr(tok, "vocab_size", 0) > V:
        raise ValueError(f"the tokenizer has {tok.vocab_size} tokens but the model's vocabulary is {V}")
    mask = getattr(tok, "mask_id", None)
    if mask is not None and mask != model.mask_id:
        raise ValueError(
            f"the tokenizer's MASK token is id {mask} but the model's mask_token_id is "
            f"{model.mask_id} (pass --mask-id {mask}?)"
        )


def prompt_ids(options: ModelOptions, tok) -> list:
    """The prompt's token ids: --prompt-ids as given, else --prompt encoded, in the chat format
    where ``chat_prompt`` says so."""
    o = options
    if o.prompt_ids is not None:
        return list(o.prompt_ids)
    if tok is None:
        raise ValueError(f"--model {o.model!r} has no tokenizer files: use --prompt-ids")
    if not chat_prompt(o, tok):
        refuse_chat_options(o, "needs --chat (it only changes the chat format)")
        return tok.encode(o.prompt)
    if "<|im_start|>" in o.prompt and not o.chat:
        print("note: --prompt holds chat markup and is wrapped once more; --raw sends it as it is", file=sys.stderr)
    msgs = ([{"role": "system", "content": o.system}] if o.system else []) + [{"role": "user", "content": o.prompt}]
    return tok.encode(chat_format(msgs, enable_thinking=False if o.no_think else None))


def chat_prompt(options: ModelOptions, tok) -> bool:
    """Whether --prompt goes in the chat format, as the user's turn: with --chat, and by default
    for a bundled target trained on chat turns (its tokenizer a ``ChatText``); never with --raw.
    ``ValueError`` for --chat on a model without a chat format."""
    if options.chat and not hasattr(tok, "encode_chat"):
        raise ValueError(
            f"--chat: --model {options.model!r} has no chat format (a bundled target is "
            f"trained on plain text): leave out --chat"
        )
    return options.chat or (isinstance(tok, ChatText) and not options.raw)


def drafter_arg(name: str):
    """None for exact decoding ("none", "exact"); a registered name (``DRAFTERS``) as it is, which
    ``generate`` resolves for the model; else the drafter ``names.resolve_drafter`` gives for a
    bundled drafter's name or a ``.pt`` path, loaded before the model so a bad one is named first."""
    if name in ("none", "exact"):
        return None
    if name in DRAFTERS:
        return name
    try:
        return resolve_drafter(name, model=None)  # not a registered name: the model is not read
    except ValueError as e:  # resolve_drafter's own message names the drafter; load_drafter's names the file
        raise ValueError(f"--{e}" if str(e).startswith("drafter ") else f"--drafter {name!r}: {e}") from None


def check_chat_args(options: ModelOptions) -> None:
    """What can be told before the model loads: --chat and --raw only apply to --prompt text,
    and --system and --no-think only to a prompt in the chat format (not --prompt-ids, not --raw)."""
    o = options
    if o.prompt is None and (o.chat or o.raw):
        flag, what = ("--chat", "wraps --prompt text") if o.chat else ("--raw", "sends --prompt text as it is")
        raise ValueError(f"{flag} {what}: it does not apply to --prompt-ids")
    if o.raw:
        refuse_chat_options(o, "only changes the chat format, which --raw leaves out")
    elif o.prompt is None:
        refuse_chat_options(o, "needs --chat (it only changes the chat format)")


def refuse_chat_options(options: ModelOptions, why: str) -> None:
    """``ValueError`` naming --system or --no-think, when given, and ``why`` it does not apply."""
    for flag, given in (("--system", options.system is not None), ("--no-think", options.no_think)):
        if given:
            raise ValueError(f"{flag} {why}")


def decode_options(options: ModelOptions) -> DecodeOptions:
    """The API's decode options from the command line's: each option of the same name as
    parsed (--temperature ... --block-length), the drafter as ``drafter_arg`` gives it, a trace
    with generate's --trace FILE; the stop ids come with the tokenizer (``setup``)."""
    values = {f.name: getattr(options, f.name) for f in fields(options)}
    trace = getattr(options, "trace", None) is not None
    return DecodeOptions.of({**values, "drafter": drafter_arg(options.drafter), "trace": trace})


def setup(options: ModelOptions):
    """(model, tokenizer, prompt ids, decode options) from the options, each decode option
    checked before the model loads (``check_options``)."""
    o = options
    check_chat_args(o)
    torch.set_num_threads(o.threads)
    decode = decode_options(o)
    shape, checked = check_options(o.model, decode)
    if shape is not None:
        check_positions(o, shape, checked.block_length)
    if getattr(o, "trace", None) is not None:
        check_writable(o.trace)  # --trace FILE: before the model loads, not after the decode
    model, tok = load_model_and_tokenizer(o.model, o.block_length, o.mask_id, o.dtype, o.device)
    check_pair(model, tok)
    ids = prompt_ids(o, tok)
    stops = [] if o.no_stop or tok is None else [s for s in getattr(tok, "stop_ids", [tok.eos_id])]
    return model, tok, ids, replace(decode, stop_ids=stops)


def show(tok, tokens, stops) -> str:
    """The output as text (ids without a tokenizer), without its stop token, and for a bundled
    chat target without the turn's closing ``<|im_end|>``, which it writes as text."""
    if tokens and tokens[-1] in stops:
        tokens = tokens[:-1]
    if tok is None:
        return " ".join(map(str, tokens))
    text = tok.decode(tokens)
    return text.removesuffix(IM_END) if isinstance(tok, ChatText) else text


def run_generate(args) -> int:
    options = GenerateOptions.from_namespace(args)
    model, tok, ids, decode = setup(options)
    t = time.perf_counter()
    res = spotref.generate(model, ids, options.max_new_tokens, **decode.kwargs())
    wall = time.perf_counter() - t
    print(show(tok, res.tokens, decode.stop_ids))
    if options.trace is not None:
        trace = res.trace if tok is None else res.trace.with_pieces(tok.decode)
        print(f"trace: {trace.save(options.trace)}", file=sys.stderr)
    print(
        f"{len(res.tokens)} tokens, {res.passes} passes, {res.stats['rounds']} rounds, "
        + (f"{res.stats['carried']} first passes carried, " if options.lookahead else "")
        + f"{len(res.tokens) / max(wall, 1e-9):.1f} tokens/s (drafter {options.drafter})",
        file=sys.stderr,
    )
    return 0


def run_audit(args) -> int:
    """Exact vs speculative decoding; exit 0 when identical, 1 at the first divergence."""
    options = AuditOptions.from_namespace(args)
    model, tok, ids, decode = setup(options)
    print(f"kernels: {kernel_path(device_of(model))}")
    if decode.drafter is None:
        raise ValueError("--drafter none: the audit compares a drafter with exact decoding")
    report = audit(model, ids, options.max_new_tokens, **decode.kwargs())  # every argument checked first
    if options.batch_rows:
        print_batch_invariance(model, ids, options)
    print(f"audit: {report}")
    return 0 if report.identical else 1


def print_batch_invariance(model, ids: list, options: AuditOptions) -> None:
    """How many rows of a batched denoise (``--batch-rows``, at most ``--width``) are
    bit-identical to the row alone."""
    o = options
    inv = batch_invariance(
        model,
        prefix_len=len(ids) if family(model) in CANVAS_FAMILIES else len(ids) // model.block_size * model.block_size,
        rows=o.batch_rows if o.width is None else min(o.batch_rows, o.width),
        seed=o.seed,
        width=o.width,
    )
    print(
        f"batch invariance: {inv['equal_rows']}/{inv['rows']} rows of a batched denoise "
        f"bit-identical to the row alone (max |diff| {inv['max_abs_diff']:.3g})"
    )


def main(argv=None) -> int:
    """``python -m spotref.cli.generate``: ``spotref generate`` (it exited 0 doing nothing), its
    usage and errors naming the module that was run (they said ``spotref generate``)."""
    return tool_main("python -m spotref.cli.generate", __doc__, add_generate, run_generate, argv)


if __name__ == "__main__":
    sys.exit(main())
