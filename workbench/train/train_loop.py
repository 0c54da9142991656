"""The training loop: set a run up (or resume it), step, evaluate, checkpoint, snapshot.

``train`` builds a run from its options: the corpus, the tokenizer (a trained BPE is saved in
the run), the model (from ``--seed``, or the weights ``--init`` names), AdamW, and the state
that a checkpoint keeps (step, training time, held-out history, the commands that trained it).
The same command resumes a run from ``runs/NAME/ckpt.pt`` exactly (every batch is a function of
the seed and the step), and refuses one that would change its data (``check_resume``). The loop
stops after ``--steps``, ``--until`` or ``--minutes`` of training time; a checkpoint is written
every ``--ckpt-every`` steps and at the end, each atomically.
"""

from __future__ import annotations

import functools
import json
import math
import shlex
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path

import torch

from spotref.configs import SDARConfig
from spotref.files import atomic_save, atomic_write_text
from spotref.load.bpe import EOS_TEXT, MASK_TEXT, BPETokenizer, ByteTokenizer, _tokenizers, tokenizer_from_json
from spotref.spec.sdar import SDARModel
from workbench.train.canvas_start import FOLD_DOCUMENTS
from workbench.train.train_canvas import canvas_heldout_loss, canvas_model, canvas_step_loss
from workbench.train.train_curriculum import adapt, recipe_batch
from workbench.train.train_data import batch_at, heldout_loss, make_corpus, streams, training_rows
from workbench.train.train_export import export, load_teacher, read_checkpoint, start_from
from workbench.train.train_moe import BLOCK_CAUSAL, balance_loss, block_causal_model
from workbench.train.train_objective import bd3_logits, bd3_loss, bd3_mask, weighted_loss
from workbench.train.train_options import TrainOptions, block_sizes, check_recipe, drill_from, drill_ops, stream_align


@dataclass
class Run:
    """A run in training: what the loop reads and updates."""

    options: TrainOptions
    model: SDARModel  # --family llada / dream: LLaDAModel / DreamModel
    opt: torch.optim.Optimizer
    tok: object
    data: object  # the token stream; --rows-per-doc: the training Rows (None: --fresh-problems)
    held: object  # the held-out token stream, or Rows
    state: dict  # what the checkpoint keeps besides the weights and the optimizer
    ckpt_path: Path
    teacher: object = None  # --distill: the block-causal teacher (load_teacher), eval mode, frozen


# --- setting a run up ------------------------------------------------------------------------


def train(options: TrainOptions) -> dict:
    """Train (or resume) the run ``options.name``; returns its final state dict."""
    torch.set_num_threads(options.threads)
    corpus = make_corpus(options)
    check_recipe(options)
    record = corpus.record()
    ckpt_path = Path(options.runs, options.name) / "ckpt.pt"
    ck = read_checkpoint(ckpt_path) if ckpt_path.exists() else None
    if ck is not None:
        check_resume(ck["state"], record, options)
        options = with_saved_rope_theta(options, ck["state"])
    ckpt_path.parent.mkdir(parents=True, exist_ok=True)
    train_docs = corpus.documents("train")[: options.corpus_limit]
    tok = make_tokenizer(options.tokenizer, train_docs, ckpt_path.parent, options.split_digits)
    teacher = load_teacher(options.distill, tok, options) if options.distill else None
    stream, held = streams(corpus, train_docs, tok, options)
    torch.manual_seed(options.seed)
    causal = options.family in BLOCK_CAUSAL
    model = block_causal_model(make_config(options, tok), options) if causal else canvas_model(options, tok)
    opt = torch.optim.AdamW(model.parameters(), lr=options.lr, betas=(0.9, 0.95), weight_decay=options.weight_decay)
    calibration = [tok.encode(d) for d in train_docs[:FOLD_DOCUMENTS]] if options.fold_norms else None
    state = start_or_resume(model, opt, ck, tok, options, ckpt_path, calibration)
    command = shlex.join([Path(sys.argv[0]).name, *sys.argv[1:]])  # as invoked, without this machine's path
    state.update(
        corpus=record,
        corpus_limit=options.corpus_limit,
        config=model.config.to_dict(),
        args=options.record(),
        train_tokens=len(stream),
        heldout_tokens=len(held),
        commands=state.get("commands", []) + [{"from_step": state["step"], "command": command}],
    )
    if options.rows_per_doc:
        stream, held = training_rows(corpus, train_docs, tok, options)
    _loop(Run(options, model, opt, tok, stream, held, state, ckpt_path, teacher))
    if options.export:
        export(model, tok, state, Path(options.export), options.name)
    return state


def start_or_resume(
    model: SDARModel, opt, ck: dict | None, tok, options: TrainOptions, ckpt_path: Path, calibration=None
) -> dict:
    """The run's state: the checkpoint's ``ck`` (its weights and optimizer loaded), or a new one
    (with ``--init``, from the weights it names, their lineage recorded; ``calibration``:
    ``--fold-norms``'s documents, token ids)."""
    if ck is not None:
        model.load_state_dict(ck["model"])
        opt.load_state_dict(ck["opt"])
        print(f"resumed {ckpt_path} at step {ck['state']['step']}", file=sys.stderr)
        return ck["state"]
    state = {"step": 0, "train_s": 0.0, "history": []}
    if options.init:
        state["init"] = start_from(model, options.init, tok, options.init_deepen, calibration)
        print(f"initialised from {options.init}", file=sys.stderr)
    return state


def data_options(record: dict, saved: dict) -> dict:
    """What a resumed run must keep, by what sets it: the corpus (name, seed, options, a file's
    SHA-256), the end-of-text padding and the digit splitting. A record without a name (runs
    from before the field) is stdlib's, with the run's --no-english."""
    o = TrainOptions.from_record(saved)
    file_digest = record.get("sha256") if record.get("name") == "file" else None
    return {
        "--corpus": record.get("name", "stdlib"),
        "--corpus-seed": record.get("seed"),
        "the corpus options": record.get("options", {"english": o.english}),
        "--corpus (the file's SHA-256)": file_digest,
        "--pad-eot": o.pad_eot,
        "--split-digits": o.split_digits,
        "--family": o.family,
        "--rows-per-doc": o.rows_per_doc,
        "--answer-only": o.answer_only,
        "--eot-weight": o.eot_weight,
        "--fresh-problems": o.fresh_problems,
        "--curriculum": o.curriculum,
        "--curriculum-lower": o.curriculum_lower,
        "--adaptive": o.adaptive,
        "--drill-share": o.drill_share,
        "--drill-ops": drill_ops(o),
        "--drill-from": drill_from(o),
        "--mask-results": o.mask_results,
        "--result-weight": o.result_weight,
        "--suffix-results": o.suffix_results,
        "--distill": o.distill,
        "--distill-weight": o.distill_weight if o.distill else None,
        "the --adapt-* options": [o.adapt_every, o.adapt_n, o.adapt_answers, o.adapt_equations] if o.adaptive else None,
    }


def check_resume(state: dict, corpus_record: dict, options: TrainOptions) -> None:
    """``ValueError`` naming the option when a resumed run would change its data."""
    old, new = data_options(state["corpus"], state["args"]), data_options(corpus_record, options.record())
    for name in old:
        if old[name] != new[name]:
            raise ValueError(
                f"{name}: the run {options.name} was trained with {old[name]!r}, not {new[name]!r}; "
                f"resume with the same data options or train under a new --name"
            )


def with_saved_rope_theta(options: TrainOptions, state: dict) -> TrainOptions:
    """A resumed run keeps the RoPE base it was trained with (its saved config's): without
    ``--rope-theta`` it is taken from there (so a changed default cannot move it), and a
    ``--rope-theta`` that differs is a ``ValueError``."""
    saved = (state.get("config") or {}).get("rope_theta")
    if saved is None or options.rope_theta == saved:
        return options
    if options.rope_theta is None:
        return replace(options, rope_theta=saved)
    raise ValueError(
        f"--rope-theta: the run {options.name} was trained with {saved!r}, not {options.rope_theta!r}; "
        f"resume with the same RoPE base or train under a new --name"
    )


def make_tokenizer(spec: str, train_texts, run_dir: Path, split_digits: bool = False):
    """The run's tokenizer; a trained BPE is saved in the run so that a resume reuses it."""
    saved = run_dir / "tokenizer.json"
    is_bpe = spec.startswith("bpe") and spec[3:].isdigit()
    if split_digits and not is_bpe:
        raise ValueError(
            f"--split-digits trains the BPE: it needs --tokenizer bpeN, got {spec!r} "
            f"(bytes already write digits singly; a tokenizer file keeps its own rules)"
        )
    if saved.exists():
        return tokenizer_from_json(saved.read_text())
    if spec == "bytes":
        tok = ByteTokenizer()
    elif is_bpe:
        tok = train_bpe(train_texts, int(spec[3:]), split_digits)
    elif Path(spec).is_file():
        tok = tokenizer_from_json(Path(spec).read_text())
    else:
        raise ValueError(f"--tokenizer must be 'bytes', 'bpeN' or a tokenizer JSON file, got {spec!r}")
    atomic_write_text(saved, tok.to_json())
    return tok


def train_bpe(texts, vocab_size: int, split_digits: bool = False) -> BPETokenizer:
    """A ``BPETokenizer`` trained on an iterable of str (deterministic for a given input);
    ``split_digits``: every digit its own token."""
    tk = _tokenizers()
    tok = tk.Tokenizer(tk.models.BPE())
    byte_level = tk.pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.pre_tokenizer = (
        tk.pre_tokenizers.Sequence([tk.pre_tokenizers.Digits(individual_digits=True), byte_level])
        if split_digits
        else byte_level
    )
    tok.decoder = tk.decoders.ByteLevel()
    trainer = tk.trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[EOS_TEXT, MASK_TEXT],
        show_progress=False,
        initial_alphabet=tk.pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(texts, trainer)
    return BPETokenizer(tok)


def make_config(options: TrainOptions, tok) -> SDARConfig:
    """The model's config: the options' shape, the tokenizer's vocabulary, EOS and MASK."""
    o = options
    block_sizes(o)
    return SDARConfig(
        vocab_size=tok.vocab_size,
        hidden_size=o.hidden,
        intermediate_size=o.intermediate,
        num_hidden_layers=o.layers,
        num_attention_heads=o.heads,
        num_key_value_heads=o.kv_heads,
        head_dim=o.head_dim,
        mask_token_id=tok.mask_id,
        block_size=o.block_size,
        tie_word_embeddings=not o.untied,
        eos_token_id=tok.eos_id,
        max_position_embeddings=4096,
        extra=o.served_extra(),
        **({} if o.rope_theta is None else {"rope_theta": o.rope_theta}),
    )


# --- the loop --------------------------------------------------------------------------------


def _loop(run: Run) -> None:
    """Step until ``--steps``, ``--until`` or ``--minutes``; block sizes in turn (``--mix-blocks``)."""
    o, state, model = run.options, run.state, run.model
    sizes, mask_of = block_sizes(o), functools.cache(bd3_mask)  # mask_of(L, B): (2L, 2L)
    bar = _progress(o, state["step"])
    t0, start_s = time.perf_counter(), state["train_s"]
    model.train()  # a new model is in eval mode; a mixture of experts routes its batch otherwise there
    balance = balance_loss(model, o)  # SDAR-MoE's load-balancing term (--moe ...,balance=C), or None
    while state["step"] < o.steps and not _stopped(o, state):
        step = state["step"]
        for g in run.opt.param_groups:
            g["lr"] = lr_at(step, o)
        loss = step_loss(run, step, sizes[step % len(sizes)], mask_of)
        loss = loss + balance.take() if balance else loss
        run.opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        run.opt.step()
        state["step"], state["train_s"] = step + 1, start_s + time.perf_counter() - t0
        bar.update(1)
        bar.set_postfix(loss=f"{loss.item():.3f}", refresh=False)
        _after_step(run, bar)
    if state["step"] % o.ckpt_every:  # the end, unless just saved
        save_checkpoint(run)
    bar.close()


def _stopped(options: TrainOptions, state: dict) -> bool:
    """Whether ``--minutes`` of training time have passed or ``--until`` is reached."""
    return (options.minutes is not None and state["train_s"] >= options.minutes * 60) or (
        options.until is not None and state["step"] >= options.until
    )


def step_loss(run: Run, step: int, B: int, mask_of) -> torch.Tensor:
    """The loss of ``step``'s batch at block size ``B`` (under bf16 autocast with ``--bf16``):
    windows of the token stream (``bd3_loss``), or ``--rows-per-doc``'s weighted rows; a
    whole-canvas family's (``--family llada`` / ``dream``): ``canvas_step_loss``."""
    o, model = run.options, run.model
    if o.family not in BLOCK_CAUSAL:
        return canvas_step_loss(run, step)
    if o.rows_per_doc:
        x_t, x, w = recipe_batch(run.data, run.tok, o, step, B, run.state.get("level"))
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=o.bf16):
            return weighted_loss(bd3_logits(model, x_t, x, mask_of(x.shape[1], B)), x, w)
    x_t, x, masked = batch_at(run.data, step, o.seed, o.batch, o.seq_len, B, run.tok.mask_id, stream_align(o))
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=o.bf16):
        return bd3_loss(bd3_logits(model, x_t, x, mask_of(o.seq_len, B)), x, masked, B, o.weighting)


def _after_step(run: Run, bar) -> None:
    """After a step: the adaptive curriculum's evaluation, the held-out loss, a snapshot and a
    checkpoint, each when due."""
    o, state = run.options, run.state
    step = state["step"]
    if o.adaptive and step % o.adapt_every == 0:
        adapt(run.model, run.tok, o, state)
        bar.write(f"step {step}  adaptive curriculum: {json.dumps(state['adaptive_evals'][-1])}")
    if step % o.eval_every == 0 or step == o.steps:
        _evaluate(run, bar)
    if o.keep_snapshots and snapshot_due(state, o.keep_snapshots):
        keep_snapshot(run.model, state, run.ckpt_path.parent)
    if step % o.ckpt_every == 0:
        save_checkpoint(run)


def lr_at(step: int, options: TrainOptions) -> float:
    """Linear warm-up, then cosine decay to 10% of ``--lr`` at ``--steps``."""
    lr, warmup = options.lr, options.warmup
    if step < warmup:
        return lr * (step + 1) / warmup
    frac = min(1.0, (step - warmup) / max(1, options.steps - warmup))
    return lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * frac)))


def _evaluate(run: Run, bar) -> None:
    """The held-out loss now, into the state's history and onto the progress bar."""
    state = run.state
    run.model.eval()
    held_out = heldout_loss if run.options.family in BLOCK_CAUSAL else canvas_heldout_loss
    loss = held_out(run.model, run.held, run.options, run.tok.mask_id)
    run.model.train()
    state["history"].append(
        {"step": state["step"], "train_s": round(state["train_s"], 1), "heldout_loss": round(loss, 4)}
    )
    bar.write(f"step {state['step']}  {state['train_s'] / 60:.1f} min  held-out masked CE {loss:.4f}")


def _progress(options: TrainOptions, initial: int):
    """The progress bar (tqdm, on stderr; ``--no-progress``: none shown)."""
    try:
        from tqdm import tqdm
    except ImportError:
        raise ImportError("training needs the 'tqdm' package: pip install 'spotref[cli]'") from None
    return tqdm(
        total=options.steps,
        initial=initial,
        disable=not options.progress,
        mininterval=20,
        desc=options.name,
        file=sys.stderr,
    )


# --- checkpoints and snapshots ---------------------------------------------------------------


def save_checkpoint(run: Run) -> None:
    """``runs/NAME/ckpt.pt``: the weights, the optimizer and the state, written atomically (a kill
    never leaves half a file)."""
    atomic_save({"model": run.model.state_dict(), "opt": run.opt.state_dict(), "state": run.state}, run.ckpt_path)


def snapshot_due(state: dict, minutes: float) -> bool:
    """Whether training time has crossed a multiple of ``minutes`` since the last snapshot."""
    period = minutes * 60
    return state["train_s"] // period > state.get("snapshot_s", 0.0) // period


def keep_snapshot(model, state: dict, run_dir: Path) -> Path:
    """``snapshots/step-NNNNNNN.pt`` in the run: the weights and the state (no optimizer),
    written atomically; ``export_run(..., checkpoint=)`` exports it."""
    path = run_dir / "snapshots" / f"step-{state['step']:07d}.pt"
    state["snapshot_s"] = state["train_s"]
    state["snapshots"] = state.get("snapshots", []) + [
        {"step": state["step"], "train_s": round(state["train_s"], 1), "file": f"snapshots/{path.name}"}
    ]
    atomic_save({"model": model.state_dict(), "state": state}, path)
    return path
