"""What a run leaves: the exported target, weight averages, and the lineage of every set of weights.

``export`` writes a target (its float16 weights and tokenizer, each stored once, and the metadata
``NAME.json`` that ``spotref.load_target`` reads first: ``save_target``), each file atomically;
``export_run`` exports a run's checkpoint (or one of its snapshots) without training further,
at any block size it was trained on; ``average_run`` averages a run's weights with others'.
``start_from`` loads the weights ``--init`` names; each of these records where the weights came
from (``lineage``: the checkpoint, its step, the commands that trained it, and in turn what it
started from or averaged), so an export names its whole history.
"""

from __future__ import annotations

import dataclasses
import pickle
from dataclasses import asdict
from pathlib import Path

import torch

from spotref.checkpoint import from_pretrained
from spotref.configs import SDARConfig
from spotref.files import atomic_save, atomic_write_text, check_writable, not_saved_by_torch, shipped_writes
from spotref.load.bpe import tokenizer_from_json
from spotref.load.targets import load_target
from spotref.spec.llada2 import LLaDA2Model
from spotref.spec.sdar import SDARModel
from spotref.spec.sdar_moe import SDARMoEModel
from workbench.data import gsm
from workbench.data.corpora import CORPORA, open_corpus
from workbench.target_writer import save_target
from workbench.train.canvas_start import canvas_from_sdar
from workbench.train.moe_start import moe_from_sdar
from workbench.train.train_canvas import canvas_heldout_loss, canvas_model
from workbench.train.train_data import ANSWER_HEADER, encode_rows, heldout_loss, make_corpus, token_stream
from workbench.train.train_moe import BLOCK_CAUSAL, config_model
from workbench.train.train_options import (
    TrainOptions,
    adaptive_levels,
    block_sizes,
    check_export,
    corpus_level,
    drill_from,
    drill_ops,
    parse_curriculum,
    stream_align,
)

# --- where weights come from (--init, averages) ----------------------------------------------


def read_checkpoint(path) -> dict:
    """A run checkpoint or snapshot (``runs/NAME/ckpt.pt``, ``snapshots/step-N.pt``: a dict with
    "model" and "state"), read with ``torch.load(weights_only=True)``: a file from elsewhere loads
    only tensors and plain data (dict, list, tuple, str, int, float, bool, None), which is all a
    checkpoint holds, and never runs code as it loads. Anything else: ``ValueError`` naming it."""
    why = not_saved_by_torch(path)
    if why is not None:  # torch.load would call it a refused unpickling
        raise ValueError(f"{path} is not a spotref run checkpoint: {why}")
    try:
        ck = torch.load(path, weights_only=True)
    except pickle.UnpicklingError as e:  # what torch's allow-list refused, e.g. "GLOBAL posix.system"
        why = next((line.strip() for line in str(e).splitlines() if "GLOBAL" in line), "")
        raise ValueError(
            f"{path}: refused, not loaded: it holds objects other than tensors and plain data, "
            f"which could run code as they load{f' ({why})' if why else ''}"
        ) from None
    except Exception as e:  # a missing, truncated or foreign file: torch's and zipfile's own errors
        raise ValueError(f"cannot read the checkpoint {path}: {type(e).__name__}: {e}") from None
    if not isinstance(ck, dict) or not {"model", "state"} <= ck.keys():
        raise ValueError(f"{path} is not a spotref run checkpoint (a dict with 'model' and 'state')")
    return ck


def start_from(model: SDARModel, spec: str, tok, deepen: bool = False, calibration=None) -> dict:
    """``--init``: load the weights ``spec`` names into ``model``; returns their lineage.

    ``spec``: a run checkpoint (``runs/NAME/ckpt.pt``), or a target, bundled by name or the path
    of its ``NAME.json`` (its float16 weights, as the target loads them). The tokenizer the weights
    were trained with (the run's ``tokenizer.json`` beside the checkpoint, or the target's) must be
    this run's, and the weights must fit this run's model: else ``ValueError`` naming the option.
    ``deepen`` (``--init-deepen``): weights with fewer layers fill the model's first layers
    (``deepened``). ``calibration`` (``--fold-norms``: token-id lists): an SDAR target starting a
    canvas run has its q/k norms folded in over them (``canvas_from_sdar``), else ``ValueError``."""
    if spec.endswith(".pt") and calibration is not None:
        raise ValueError(f"--fold-norms folds an SDAR target's q/k norms: --init {spec} is a run checkpoint")
    if spec.endswith(".pt"):
        init = read_checkpoint(spec)
        weights, record = init["model"], lineage(spec, init["state"])
        run = Path(spec).parent.parent if Path(spec).parent.name == "snapshots" else Path(spec).parent
        saved = run / "tokenizer.json"  # a snapshot's tokenizer is its run's
        theirs = saved.read_text() if saved.exists() else None
    else:
        target = load_target(spec)
        weights, record = family_weights(target.model, model, calibration), target_lineage(spec, target.meta)
        if calibration is not None:
            record["folded_norms_over_documents"] = len(calibration)
        theirs = target.tokenizer.to_json()
    if theirs is not None and tokenizer_from_json(theirs).to_json() != tok.to_json():
        raise ValueError(
            f"--init {spec} was trained with another tokenizer than this run's "
            f"(--tokenizer): pass the tokenizer it was trained with"
        )
    if deepen:
        weights, record["deepened_from_layers"] = deepened(model, weights, spec), layer_count(weights)
    try:
        model.load_state_dict(weights)
    except RuntimeError as e:
        raise ValueError(
            f"--init {spec}: its weights do not fit this run's model (--hidden, --layers, "
            f"--heads, --kv-heads, --head-dim, --intermediate): {str(e).splitlines()[-1].strip()}"
        ) from None
    return record


def load_teacher(spec: str, tok, options: TrainOptions) -> SDARModel:
    """``--distill``: the block-causal teacher ``spec`` names (a bundled target, its ``NAME.json``,
    or a checkpoint directory), in eval mode, float32, its weights frozen. It must be an SDAR model
    (block-causal) with this run's vocabulary and MASK id (and, a target, its tokenizer), and
    ``--seq-len`` a multiple of its block size: else ``ValueError`` naming ``--distill``."""
    teacher, theirs = read_teacher(spec)
    if not isinstance(teacher, SDARModel):
        raise ValueError(
            f"--distill {spec} is a {getattr(teacher, 'family', type(teacher).__name__)} model: the teacher "
            f"must be block-causal (an SDAR target such as gsm-b32)"
        )
    cfg = teacher.config
    if cfg.vocab_size != tok.vocab_size or cfg.mask_token_id != tok.mask_id:
        raise ValueError(
            f"--distill {spec}: its vocabulary ({cfg.vocab_size}) and MASK id ({cfg.mask_token_id}) must be "
            f"this run's ({tok.vocab_size}, {tok.mask_id})"
        )
    if theirs is not None and tokenizer_from_json(theirs).to_json() != tok.to_json():
        raise ValueError(f"--distill {spec} was trained with another tokenizer than this run's (--tokenizer)")
    if options.seq_len % teacher.block_size:
        raise ValueError(
            f"--distill {spec}: --seq-len {options.seq_len} must be a multiple of its block size {teacher.block_size}"
        )
    return teacher.float().eval().requires_grad_(False)


def read_teacher(spec: str):
    """``spec``'s model and its tokenizer JSON (None for a checkpoint directory); ``ValueError``
    naming ``--distill`` when it names none."""
    try:
        if Path(spec).is_dir():
            return from_pretrained(spec), None
        target = load_target(spec)
    except (ValueError, OSError) as e:
        raise ValueError(f"--distill {spec}: {e}") from None
    return target.model, target.tokenizer.to_json()


def family_weights(source, model, calibration=None) -> dict:
    """The weights of the target model ``source`` for ``model``: its own, or, for a LLaDA or Dream
    run started from an SDAR target, those of ``canvas_from_sdar`` (the q/k norms dropped, or
    folded in over ``calibration``)."""
    family = getattr(model, "family", "sdar")
    if isinstance(model, (SDARMoEModel, LLaDA2Model)) and type(source) is SDARModel:
        return moe_from_sdar(source, model)
    if family == getattr(source, "family", "sdar"):
        if calibration is not None:
            raise ValueError(
                f"--fold-norms folds an SDAR target's q/k norms into a canvas run: --init is a {family} target"
            )
        return source.state_dict()
    if isinstance(source, SDARModel):
        return canvas_from_sdar(source, family, calibration).state_dict()
    raise ValueError(f"--init: a {source.family} target cannot start a {family} run")


def layer_count(weights: dict) -> int:
    """Decoder layers in a state dict (``model.layers.i.*``)."""
    return len({k.split(".")[2] for k in weights if k.startswith("model.layers.")})


ZEROED = ("self_attn.o_proj.weight", "mlp.down_proj.weight")  # what writes a layer's output


def deepened(model: SDARModel, weights: dict, spec: str) -> dict:
    """``weights`` with ``model``'s extra layers on top, each the identity: its own fresh weights
    with the output projections (``ZEROED``) zero, so both residual branches add nothing and the
    deeper model computes what ``weights`` did."""
    have, want = layer_count(weights), model.config.num_hidden_layers
    if have >= want:
        raise ValueError(
            f"--init-deepen: --init {spec} has {have} layers, --layers asks {want}: "
            f"deepening needs more layers than the weights have"
        )
    out = dict(weights)
    for k, v in model.state_dict().items():
        if k.startswith("model.layers.") and int(k.split(".")[2]) >= have:
            out[k] = torch.zeros_like(v) if k.endswith(ZEROED) else v.clone()
    return out


def provenance(record: dict) -> dict:
    """What weights came from, as a lineage, a run's state or a target's training record carries
    it: ``init`` (what training started from) and ``average`` (what was averaged), where present."""
    return {k: record[k] for k in ("init", "average") if record.get(k)}


def run_tokenizer(run_dir) -> object:
    """The tokenizer a run trained with (its ``tokenizer.json``)."""
    return tokenizer_from_json((Path(run_dir) / "tokenizer.json").read_text())


def target_lineage(spec: str, meta: dict) -> dict:
    """The lineage of a target's weights (its metadata's training record, and their SHA-256)."""
    t = meta.get("training", {})
    return {
        "checkpoint": str(spec),
        "sha256": meta["weights"]["sha256"],
        "step": t.get("steps"),
        "train_minutes": t.get("train_minutes"),
        "commands": t.get("commands", []),
        **provenance(t),
    }


def lineage(path, init_state: dict) -> dict:
    """What ``--init`` started from: the checkpoint, its step and training time, the commands
    that trained it and, in turn, what it started from (so an export names its whole history)."""
    return {
        "checkpoint": str(path),
        "step": init_state["step"],
        "train_minutes": round(init_state.get("train_s", 0.0) / 60, 1),
        "commands": init_state.get("commands", []),
        **provenance(init_state),
    }


# --- exports ---------------------------------------------------------------------------------


def export(model: SDARModel, tok, state: dict, out_dir: Path, name: str) -> Path:
    """The run as a target ``NAME`` in ``out_dir`` (``spotref.load.targets.save_target``), with
    its training record in the metadata."""
    return save_target(model, tok, metadata(model, state, name), Path(out_dir), name)


HELDOUT_NOTES = (  # by whether the model is a whole-canvas family's
    "token-mean masked CE in nats/token, k ~ U{1..B} per block, fixed windows and masks",
    "LLaDA's SFT loss (masked CE / t over the answer length, mean over rows), t ~ U(eps, 1), fixed rows and masks",
)


def metadata(model: SDARModel, state: dict, name: str) -> dict:
    """A target's ``NAME.json`` but for its files (``save_target`` fills "weights" and
    "tokenizer"): its config, corpus, training record and held-out losses (``state``: the run's,
    its last held-out loss the target's)."""
    hist = state["history"]
    return {
        "name": name,
        "config": model.config.to_dict(),
        "parameters": sum(p.numel() for p in model.parameters()),
        "weights": None,
        "tokenizer": None,
        "corpus": state["corpus"],
        "training": training_record(state),
        "heldout_loss": hist[-1]["heldout_loss"] if hist else None,
        "heldout_loss_note": HELDOUT_NOTES[getattr(model, "family", "sdar") not in BLOCK_CAUSAL],
        "history": hist,
    }


def training_record(state: dict) -> dict:
    """The metadata's ``training``: the commands, steps and time, the objective, the data recipe,
    the adaptive curriculum's evaluations and the weights' provenance, and the run's arguments."""
    return {
        "commands": state.get("commands", []),
        "steps": state["step"],
        "train_minutes": round(state["train_s"] / 60, 1),
        "train_tokens": state["train_tokens"],
        "torch": torch.__version__,
        "objective": "BD3-LM: concat(x_t, x), k ~ U{1..B} masks per block, masked CE",
        "pad_eot": bool(state["args"].get("pad_eot", False)),
        "recipe": recipe(state["args"]),
        **({"adaptive_evals": state["adaptive_evals"]} if state.get("adaptive_evals") else {}),
        **provenance(state),
        "args": {k: v for k, v in state["args"].items() if k not in ("export", "progress")},
    }


def recipe(saved: dict) -> dict:
    """The data recipe of a run's arguments (defaults for options older runs lack), for the metadata."""
    o = TrainOptions.from_record(saved)
    sched = parse_curriculum(o.curriculum) if o.curriculum else None
    adaptive = adaptive_levels(o) if o.adaptive else None
    levels = sorted({lvl for _, lvl in sched}) if sched else adaptive or ([corpus_level(o)] if o.fresh_problems else [])
    return {
        "rows_per_doc": o.rows_per_doc,
        "answer_only": o.answer_only,
        "answer_header": ANSWER_HEADER if o.answer_only else None,
        "eot_weight": o.eot_weight,
        "fresh_problems": o.fresh_problems,
        "curriculum": [[step, lvl] for step, lvl in sched] if sched else None,
        "curriculum_lower": o.curriculum_lower if sched or adaptive else None,
        "adaptive": {
            "levels": adaptive,
            "every": o.adapt_every,
            "n": o.adapt_n,
            "answers": o.adapt_answers,
            "equations": o.adapt_equations,
            "heldout": "the first n held-out problems of workbench.data.gsm (seed 0), T = 0",
        }
        if adaptive
        else None,
        "levels": {str(lvl): asdict(gsm.LEVELS[lvl]) for lvl in levels},
        "rope_theta": o.rope_theta,
        "drill_share": o.drill_share,
        "drill_ops": drill_ops(o),
        "drill_from": drill_from(o),
        "mask_results": o.mask_results,
        "result_weight": o.result_weight,
        "suffix_results": o.suffix_results,
        "distill": {"teacher": o.distill, "weight": o.distill_weight} if o.distill else None,
    }


def average_run(run_dir: Path, others: list[str], out_dir: Path) -> Path:
    """Weight averaging: the mean of a run's last checkpoint and ``others`` (run checkpoints or
    targets, as ``--init`` takes them: the run's tokenizer and model shape, else ``ValueError``),
    written as ``out_dir/ckpt.pt`` beside the run's tokenizer. It keeps the run's state (its data
    and lineage) and records each input's lineage under ``average``, which an export and a later
    ``--init`` carry; ``export_run`` and ``--init`` take it as any run. Not the run's own
    directory nor one holding another run's checkpoint, and without the run's optimizer state (a
    resume would start it afresh)."""
    run_dir, out_dir = Path(run_dir), Path(out_dir)
    if out_dir.resolve() == run_dir.resolve():
        raise ValueError(f"average_run: out_dir {out_dir} is the run's own directory; write the average elsewhere")
    if (out_dir / "ckpt.pt").exists():
        raise ValueError(
            f"average_run: out_dir {out_dir} already holds a run checkpoint (ckpt.pt); "
            f"write the average to a new directory"
        )
    check_writable(out_dir / "ckpt.pt")
    ck = read_checkpoint(run_dir / "ckpt.pt")
    tok = run_tokenizer(run_dir)
    model = SDARModel(SDARConfig.from_dict(ck["state"]["config"]))
    total = {k: v.float().clone() for k, v in ck["model"].items()}  # the running sum
    records = [lineage(run_dir / "ckpt.pt", ck["state"])]
    for spec in others:
        records.append(start_from(model, str(spec), tok))
        for k, v in model.state_dict().items():
            total[k] += v.float()
    ck["model"] = {k: (total[k] / len(records)).to(v.dtype) for k, v in ck["model"].items()}
    ck["state"] = {**ck["state"], "average": records}
    ck.pop("opt", None)  # the run's moments, not the mean's
    out_dir.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out_dir / "tokenizer.json", tok.to_json())
    atomic_save(ck, out_dir / "ckpt.pt")
    return out_dir / "ckpt.pt"


def export_run(
    run_dir: Path,
    out_dir: Path,
    name: str,
    block_size: int | None = None,
    checkpoint: Path | None = None,
    update_shipped: bool = False,
    served_dtype: str | None = None,
) -> Path:
    """Export a run's last checkpoint (or ``checkpoint``, e.g. one of its snapshots) without
    training further, at ``block_size`` (default: the run's ``--block-size``; a ``--mix-blocks``
    run may be exported at any of its sizes). The held-out loss is measured afresh at the
    exported block size, on the run's own corpus. ``served_dtype`` (default: the run's
    ``--served-dtype``) is the exported config's torch_dtype. A bundled target is replaced only with
    ``update_shipped=True``; the outputs are checked before the work."""
    with shipped_writes(update_shipped):
        check_export(name, str(out_dir))
    ck = read_checkpoint(checkpoint or Path(run_dir) / "ckpt.pt")
    state, options = ck["state"], TrainOptions.from_record(ck["state"]["args"])
    init = options.init
    if init and "init" not in state and init.endswith(".pt") and Path(init).is_file():  # a run from before the record
        state = {**state, "init": lineage(init, read_checkpoint(init)["state"])}
    options = dataclasses.replace(
        options, block_size=block_size or options.block_size, served_dtype=served_dtype or options.served_dtype
    )
    if options.block_size not in block_sizes(options):
        raise ValueError(f"the run was trained on block sizes {block_sizes(options)}, not {options.block_size}")
    tok = run_tokenizer(run_dir)
    model = run_model(state["config"], options, tok)
    model.load_state_dict(ck["model"])
    model.eval()
    held_out = heldout_loss if options.family in BLOCK_CAUSAL else canvas_heldout_loss
    loss = round(held_out(model, heldout_of(state, tok, options), options, tok.mask_id), 4)
    state = {
        **state,
        "history": state["history"]
        + [
            {
                "step": state["step"],
                "train_s": round(state["train_s"], 1),
                "heldout_loss": loss,
                "block_size": options.block_size,
            }
        ],
    }
    with shipped_writes(update_shipped):
        return export(model, tok, state, Path(out_dir), name)


def run_model(config: dict, options: TrainOptions, tok):
    """The run's model (no weights yet) from its saved config: an SDAR model at
    ``options.block_size``, or the whole-canvas family's (``--served-dtype`` written as exported)."""
    if options.family in BLOCK_CAUSAL:
        cls, config_class = config_model(config)
        return cls(config_class.from_dict({**config, **options.served_extra(), "block_size": options.block_size}))
    model = canvas_model(options, tok)
    cfg = type(model.config).from_dict({**config, **options.served_extra()})
    return type(model)(cfg)


def heldout_of(state: dict, tok, options: TrainOptions):
    """A run's held-out data, as its training measured the held-out loss: its corpus's held-out
    documents as rows (``--rows-per-doc``) or one token stream."""
    corpus = open_corpus(state["corpus"], CORPORA) if "name" in state["corpus"] else make_corpus(options)
    docs = corpus.documents("heldout")
    return encode_rows(docs, tok, options) if options.rows_per_doc else token_stream(docs, tok, stream_align(options))
