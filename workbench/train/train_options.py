"""The options of ``python -m workbench train-target``: the command line, and the one typed object built from it.

``add_arguments`` builds the command line in groups (the run and its tokenizer, the corpus, the
gsm recipe, the curriculum, the model, the optimisation, the outputs), in the order ``--help``
lists them. ``TrainOptions.from_namespace`` turns the parsed namespace, once, into a frozen
``TrainOptions``: the rest of the training code reads that object, never the namespace.
``TrainOptions.from_record`` rebuilds it from the arguments a run saved (with the defaults of
options added since), and ``record`` gives back what a run saves. The checks that need more than
one option (``check_recipe``, ``check_export``, ``block_sizes``) raise ``ValueError`` naming the
option, before any training.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import re
from dataclasses import dataclass, field
from pathlib import Path

from spotref.cli.argtypes import (
    add_threads,
    int_list,
    nonneg_int,
    nonneg_real,
    positive_int,
    positive_real,
    real_range,
    seed_int,
)
from spotref.files import check_writable
from spotref.spec.decode import FAMILIES  # --family
from workbench.data import gsm
from workbench.train.train_moe import BLOCK_CAUSAL, add_moe_argument, check_moe

GSM_DEFAULTS = {"corpus_seed": 0, "corpus_size": 40000, "corpus_level": 3}
DRILLS = {"range": gsm.drill, "problems": gsm.equation_drill}  # --drill-from
CANVAS_REFUSES = {  # what a whole-canvas family refuses: options of BD3-LM's blocks and of SDAR's recipe
    "--pad-eot": "pad_eot",
    "--mix-blocks": "mix_blocks",
    "--weighting": "weighting",
    "--eot-weight": "eot_weight",
    "--mask-results": "mask_results",
    "--result-weight": "result_weight",
    "--adaptive": "adaptive",
    "--init-deepen": "init_deepen",
}
DRILL_OP_NAMES = {"add": "+", "sub": "-", "mul": "*", "div": "/"}


# --- the command line -----------------------------------------------------------------------


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The options of ``python -m workbench train-target`` / ``python -m workbench.train.train_target``."""
    for group in (
        add_run_arguments,
        add_corpus_arguments,
        add_recipe_arguments,
        add_curriculum_arguments,
        add_model_arguments,
        add_optimizer_arguments,
        add_output_arguments,
    ):
        group(p)


def add_run_arguments(p: argparse.ArgumentParser) -> None:
    """The run's name and directory, and its tokenizer."""
    p.add_argument("--name", required=True, help="run and target name, e.g. stdlib-b32")
    p.add_argument("--runs", default="runs", help="directory of run checkpoints")
    p.add_argument(
        "--tokenizer",
        default="bpe2048",
        help="'bytes', 'bpeN' (train an N-token BPE on the train split) or a tokenizer JSON",
    )
    p.add_argument(
        "--split-digits", action="store_true", help="train the BPE (--tokenizer bpeN) with every digit its own token"
    )


def add_corpus_arguments(p: argparse.ArgumentParser) -> None:
    """What is trained on (``workbench.data.corpora``) and how documents are packed."""
    p.add_argument(
        "--corpus",
        type=corpus_arg,
        default="stdlib",
        help="stdlib (Python's own text, the default), gsm (grade-school math word problems, "
        "workbench.data.gsm) or the path of a text file of documents (one per line, or "
        'JSON lines with a "text" field)',
    )
    p.add_argument("--corpus-seed", type=seed_int, default=None, help="gsm: the seed of the problems (default 0)")
    p.add_argument(
        "--corpus-size", type=positive_int, default=None, help="gsm: how many training problems (default 40000)"
    )
    p.add_argument(
        "--corpus-level",
        type=int,
        choices=sorted(gsm.LEVELS),
        default=None,
        help="gsm: the difficulty level (default 3; workbench.data.gsm.LEVELS)",
    )
    p.add_argument(
        "--pad-eot",
        action="store_true",
        help="follow every document with end-of-text up to the end of its block and start "
        "windows at block boundaries (SDAR's chat data)",
    )


def add_recipe_arguments(p: argparse.ArgumentParser) -> None:
    """The gsm recipe: one document per row, answer-only masks, fresh problems, drills, results."""
    p.add_argument(
        "--rows-per-doc",
        action="store_true",
        help="one document per training row at position 0, end-of-text padded to the end of its "
        "block and cut at --seq-len (for gsm: one problem per row)",
    )
    p.add_argument(
        "--answer-only",
        action="store_true",
        help="--rows-per-doc: mask only the answer, after the assistant header "
        "'<|im_start|>assistant\\n' (k ~ U{1..n} of the n answer positions of each block)",
    )
    p.add_argument(
        "--eot-weight",
        type=nonneg_real,
        default=1.0,
        help="--rows-per-doc: loss weight of the end-of-text padding after a document (recipe: 0.3)",
    )
    add_problem_arguments(p)


def add_problem_arguments(p: argparse.ArgumentParser) -> None:
    """The recipe's problems: drawn afresh, and the drills mixed in."""
    p.add_argument(
        "--fresh-problems",
        action="store_true",
        help="--rows-per-doc --corpus gsm: draw each step's problems afresh from (--corpus-seed, step), "
        "deterministically, instead of from --corpus-size fixed ones",
    )
    p.add_argument(
        "--drill-share",
        type=real_range(0.0, 1.0),
        default=0.0,
        help="--fresh-problems: share of rows that are arithmetic drills (gsm.drill), default 0",
    )
    p.add_argument(
        "--drill-ops",
        type=drill_ops_arg,
        default=None,
        metavar="OP,...",
        help="--drill-share: the drills' operators (add, sub, mul, div), drawn uniformly from the "
        "list (repeat one to draw it more often), e.g. sub,sub,div,div,add,mul; "
        "default add,sub,add,sub,mul,div",
    )
    p.add_argument(
        "--drill-from",
        choices=sorted(DRILLS),
        default=None,
        help="--drill-share: the drills' operands drawn uniformly in the level's limits (range, "
        "the default) or an equation of a fresh training problem (problems: the sizes "
        "the solutions write)",
    )
    add_result_arguments(p)


def add_result_arguments(p: argparse.ArgumentParser) -> None:
    """What the recipe does to the written results, and the canvas families' decoding states."""
    p.add_argument(
        "--mask-results",
        type=real_range(0.0, 1.0),
        default=0.0,
        help="--rows-per-doc: share of rows whose written results (after '= ' and '#### ') "
        "are all masked, on top of the k ~ U{1..n} masks, default 0",
    )
    p.add_argument(
        "--suffix-results",
        type=real_range(0.0, 1.0),
        default=0.0,
        help="--rows-per-doc: share of rows in which each block holding a written result is masked "
        "from one of its results' first digit to the block end, and nothing before (the state "
        "in which the decoder places a result's length); --family llada / dream: share of the "
        "--decode-states rows masked from one result's first digit on, nothing before it. Default 0",
    )
    p.add_argument(
        "--decode-states",
        type=real_range(0.0, 1.0),
        default=0.0,
        help="--family llada / dream: share of rows drawn as semi-autoregressive decoding sees "
        "them: one block of --block-size (from the prompt's end) partly masked, k ~ U{1..n}, "
        "every position before it clean, every one after it masked, the loss on that block; "
        "with --suffix-results, that share of them masked from a written result on. Default 0",
    )
    p.add_argument(
        "--distill",
        default=None,
        metavar="TEACHER",
        help="--family llada / dream with --decode-states: distil a block-causal teacher (a bundled "
        "SDAR target such as gsm-b32, its NAME.json, or a checkpoint directory) into the "
        "decoding-state rows: the loss adds --distill-weight x KL(teacher || student) on each "
        "such row's masked block positions, the teacher's decoding-time distributions there",
    )
    p.add_argument(
        "--distill-weight",
        type=nonneg_real,
        default=1.0,
        help="--distill: the weight W of the KL term (default 1)",
    )
    p.add_argument(
        "--result-weight",
        type=positive_real,
        default=1.0,
        help="--rows-per-doc: loss weight of the written results and of the 2 tokens after each "
        "(their places fix the result's length; the decoder mostly commits them first), default 1",
    )


def add_curriculum_arguments(p: argparse.ArgumentParser) -> None:
    """The gsm level by step (``--curriculum``) or by held-out decoding (``--adaptive``)."""
    p.add_argument(
        "--curriculum",
        type=curriculum_arg,
        default=None,
        metavar="LEVEL@STEP,...",
        help="--fresh-problems: the gsm level from each step, e.g. 0@0,1@4000,2@12000 (workbench.data.gsm.LEVELS)",
    )
    p.add_argument(
        "--adaptive",
        type=adaptive_arg,
        default=None,
        metavar="LEVEL,...",
        help="--fresh-problems: train the gsm levels in this order (e.g. 0,1,2,3), moving on when "
        "held-out decoding meets --adapt-answers and --adapt-equations",
    )
    p.add_argument("--adapt-every", type=positive_int, default=500, help="--adaptive: evaluate every this many steps")
    p.add_argument("--adapt-n", type=positive_int, default=40, help="--adaptive: held-out problems per evaluation")
    p.add_argument(
        "--adapt-answers", type=real_range(0.0, 1.0), default=0.6, help="--adaptive: share of right answers to move on"
    )
    p.add_argument(
        "--adapt-equations",
        type=real_range(0.0, 1.0),
        default=0.9,
        help="--adaptive: share of right equations to move on",
    )
    p.add_argument(
        "--curriculum-lower",
        type=real_range(0.0, 1.0),
        default=0.4,
        help="--curriculum / --adaptive: share of rows from lower levels once it has moved on",
    )


def add_model_arguments(p: argparse.ArgumentParser) -> None:
    """The model's family and shape, its block sizes, and the weights it may start from."""
    p.add_argument(
        "--family",
        choices=FAMILIES,
        default="sdar",
        help="sdar (block-causal, BD3-LM's objective, the default; with --moe SDAR-MoE), llada2 (block-causal, "
        "needs --moe), or a whole-canvas family: llada or "
        "dream (bidirectional over the whole row, LLaDA's SFT objective; dream's logits shifted); "
        "llada and dream train on --rows-per-doc rows",
    )
    p.add_argument(
        "--rope-theta",
        type=positive_real,
        default=None,
        help="RoPE base (default: the family config's, 1e4 as Qwen3's; a resumed run: the one it was trained with)",
    )
    p.add_argument("--block-size", type=positive_int, default=32, help="block size B")
    p.add_argument(
        "--served-dtype",
        choices=("float32", "bfloat16", "float16"),
        default=None,
        help="the serving precision written in the exported config (torch_dtype), in which the "
        "target is decided by default (docs/spec.md 2.1; default: none written, float32)",
    )
    p.add_argument(
        "--mix-blocks",
        type=int_list(1),
        default=None,
        help="comma list of block sizes, one drawn per step (e.g. 16,32): one model for all",
    )
    p.add_argument(
        "--init",
        default=None,
        help="start from these weights (fine-tuning): a run checkpoint (runs/NAME/ckpt.pt), or a "
        "target (a bundled name such as gsm-b32, or a NAME.json); its tokenizer must be the run's",
    )
    p.add_argument(
        "--init-deepen",
        action="store_true",
        help="--init weights with fewer layers than --layers: they fill the first layers, the "
        "added ones start as the identity (output projections zero), so the model starts "
        "where the weights were",
    )
    p.add_argument(
        "--fold-norms",
        action="store_true",
        help="--family llada / dream with --init an SDAR target: fold its q/k norms into the query "
        "and key projections (each head scaled by its least-squares RMS over the first "
        "64 training documents) instead of dropping them: a far better start",
    )
    p.add_argument("--seq-len", type=positive_int, default=256, help="training window L (tokens)")
    p.add_argument("--hidden", type=positive_int, default=256, help="hidden size")
    p.add_argument("--layers", type=positive_int, default=4, help="decoder layers")
    p.add_argument("--heads", type=positive_int, default=4, help="attention heads")
    p.add_argument("--kv-heads", type=positive_int, default=2, help="key/value heads (GQA)")
    p.add_argument("--head-dim", type=positive_int, default=64, help="dimension per head")
    p.add_argument("--intermediate", type=positive_int, default=704, help="SwiGLU intermediate size")
    p.add_argument("--untied", action="store_true", help="separate lm_head (default: tied to embeddings)")
    add_moe_argument(p)


def add_optimizer_arguments(p: argparse.ArgumentParser) -> None:
    """Batches, steps, the learning-rate schedule, AdamW, the loss weighting, threads and precision."""
    p.add_argument("--batch", type=positive_int, default=8, help="sequences per step")
    p.add_argument("--steps", type=positive_int, default=4000, help="total steps (the cosine schedule's length)")
    p.add_argument("--minutes", type=positive_real, default=None, help="stop (resumably) after this much training time")
    p.add_argument("--until", type=positive_int, default=None, help="stop (resumably) at this step")
    p.add_argument("--lr", type=positive_real, default=2e-3, help="peak learning rate")
    p.add_argument("--warmup", type=nonneg_int, default=100, help="linear warm-up steps")
    p.add_argument("--weight-decay", type=nonneg_real, default=0.1, help="AdamW weight decay")
    p.add_argument(
        "--weighting",
        choices=("tokens", "elbo"),
        default="tokens",
        help="loss weighting: tokens (mean over masked tokens) or elbo (1 / t per block)",
    )
    p.add_argument("--seed", type=seed_int, default=0, help="data and init seed")
    add_threads(p)
    p.add_argument(
        "--bf16",
        action="store_true",
        help="bf16 autocast (faster only on CPUs with native bf16; 10x slower on this one)",
    )


def add_output_arguments(p: argparse.ArgumentParser) -> None:
    """Evaluation, checkpoints, snapshots, the export and the progress bar; also ``--corpus-limit``
    and ``--no-english``, which have always come last (the order of ``--help`` and of the saved
    arguments is kept)."""
    p.add_argument("--eval-every", type=positive_int, default=250, help="held-out loss every this many steps")
    p.add_argument("--ckpt-every", type=positive_int, default=250, help="checkpoint every this many steps")
    p.add_argument(
        "--keep-snapshots",
        type=positive_real,
        default=None,
        metavar="MIN",
        help="keep the weights every MIN minutes of training in runs/NAME/snapshots/",
    )
    p.add_argument(
        "--corpus-limit", type=positive_int, default=None, help="use only the first N train documents (tests)"
    )
    p.add_argument("--no-english", dest="english", action="store_false", help="leave out the pydoc topics")
    p.add_argument(
        "--export",
        default=None,
        help="after training, write the target into this directory (the bundled targets "
        "directory only with --update-shipped)",
    )
    p.add_argument(
        "--update-shipped",
        action="store_true",
        help="allow --export to replace a target shipped in spotref/load/targets/",
    )
    p.add_argument("--no-progress", dest="progress", action="store_false", help="no progress bar")


def corpus_arg(text: str) -> str:
    """``--corpus``: a registered corpus name or an existing file."""
    if text in ("stdlib", "gsm") or Path(text).is_file():
        return text
    raise argparse.ArgumentTypeError(f"must be stdlib, gsm or a text file of documents, got {text!r}")


def drill_ops_arg(text: str) -> str:
    """``--drill-ops add,sub,sub,...``: the drills' operators by name, as a string of + - * /."""
    names = [t.strip() for t in text.split(",")]
    if not text.strip() or any(n not in DRILL_OP_NAMES for n in names):
        raise argparse.ArgumentTypeError(
            f"must be a comma-separated list of add, sub, mul, div (e.g. sub,sub,div,div,add,mul), got {text!r}"
        )
    return "".join(DRILL_OP_NAMES[n] for n in names)


def curriculum_arg(text: str) -> str:
    """``--curriculum LEVEL@STEP,...``: gsm levels from steps, the first at step 0."""
    try:
        sched = parse_curriculum(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be LEVEL@STEP,... (e.g. 0@0,1@4000), got {text!r}") from None
    if sched[0][0] != 0 or len({s for s, _ in sched}) < len(sched):
        raise argparse.ArgumentTypeError(f"must start at step 0 and name each step once, got {text!r}")
    bad = [lvl for _, lvl in sched if lvl not in gsm.LEVELS]
    if bad:
        raise argparse.ArgumentTypeError(f"must name levels in {sorted(gsm.LEVELS)}, got {bad[0]} in {text!r}")
    return text


def parse_curriculum(text: str) -> list[tuple[int, int]]:
    """``"0@0,1@4000"`` -> ``[(0, 0), (4000, 1)]``: (first step, level), by step."""
    out = []
    for part in text.split(","):
        level, step = part.split("@")
        out.append((int(step), int(level)))
        if out[-1][0] < 0:
            raise ValueError(text)
    return sorted(out)


def adaptive_arg(text: str) -> str:
    """``--adaptive LEVEL,...``: distinct gsm levels, in the order to train them."""
    try:
        levels = [int(v) for v in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a comma list of levels (e.g. 0,1,2,3), got {text!r}") from None
    if len(set(levels)) < len(levels) or any(v not in gsm.LEVELS for v in levels):
        raise argparse.ArgumentTypeError(f"must name distinct levels in {sorted(gsm.LEVELS)}, got {text!r}")
    return text


# --- the options object ---------------------------------------------------------------------


@dataclass(frozen=True)
class TrainOptions:
    """One run's options, named as ``add_arguments`` names them (``--seq-len``: ``seq_len``;
    ``--no-english``, ``--no-progress``: ``english``, ``progress``), built once per command.

    ``extra``: the other entries of the namespace it was built from (the ``spotref`` command
    adds ``command`` and ``argv``), kept for the record; ``order``: the order of that namespace's
    entries, which ``record`` keeps."""

    name: str
    runs: str
    tokenizer: str
    split_digits: bool
    corpus: str
    corpus_seed: int | None
    corpus_size: int | None
    corpus_level: int | None
    pad_eot: bool
    rows_per_doc: bool
    answer_only: bool
    eot_weight: float
    fresh_problems: bool
    drill_share: float
    drill_ops: str | None  # + - * / as drill_ops_arg gives them; None: gsm.DRILL_OPS
    drill_from: str | None  # a key of DRILLS; None: "range"
    mask_results: float
    suffix_results: float
    decode_states: float
    distill: str | None  # --distill TEACHER (train_export.load_teacher)
    distill_weight: float
    result_weight: float
    curriculum: str | None  # LEVEL@STEP,... (parse_curriculum)
    adaptive: str | None  # LEVEL,... (adaptive_levels)
    adapt_every: int
    adapt_n: int
    adapt_answers: float
    adapt_equations: float
    curriculum_lower: float
    family: str  # a name of FAMILIES
    rope_theta: float | None
    block_size: int
    served_dtype: str | None  # the exported config's torch_dtype (None: none)
    mix_blocks: list[int] | str | None  # a comma string in runs from before int_list
    init: str | None
    init_deepen: bool
    fold_norms: bool  # --fold-norms: canvas_from_sdar's calibration from the first FOLD_DOCUMENTS
    seq_len: int
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    untied: bool
    moe: str | None  # --moe (workbench.train.train_moe)
    batch: int
    steps: int
    minutes: float | None
    until: int | None
    lr: float
    warmup: int
    weight_decay: float
    weighting: str  # "tokens" or "elbo"
    seed: int
    threads: int
    bf16: bool
    eval_every: int
    ckpt_every: int
    keep_snapshots: float | None
    corpus_limit: int | None
    english: bool
    export: str | None
    update_shipped: bool
    progress: bool
    extra: dict = field(default_factory=dict, repr=False)
    order: tuple = field(default=(), repr=False)

    @classmethod
    def from_namespace(cls, args: argparse.Namespace) -> TrainOptions:
        """The options of a parsed command line (``add_arguments``)."""
        return cls.from_values(vars(args))

    @classmethod
    def from_argv(cls, argv: list[str]) -> TrainOptions:
        """The options of a command line, as ``python -m workbench.train.train_target`` parses it."""
        p = argparse.ArgumentParser()
        add_arguments(p)
        return cls.from_namespace(p.parse_args(argv))

    @classmethod
    def from_record(cls, saved: dict) -> TrainOptions:
        """A run's saved options (``record``), with the defaults of options added since it was trained."""
        return cls.from_values({**default_options(saved.get("name", "run")).record(), **saved})

    @classmethod
    def from_values(cls, values: dict) -> TrainOptions:
        """Options by name; ``values`` must name every option (the other entries go to ``extra``)."""
        return cls(
            **{k: values[k] for k in OPTIONS},
            extra={k: v for k, v in values.items() if k not in OPTIONS},
            order=tuple(values),
        )

    def served_extra(self) -> dict:
        """The model config's extra keys for ``--served-dtype``: ``{"torch_dtype": ...}``, or none."""
        return {} if self.served_dtype is None else {"torch_dtype": self.served_dtype}

    def record(self) -> dict:
        """What a run saves of its options (its state's ``args``): the entries of the namespace
        they were built from, in its order, with the options' values."""
        return {k: self.extra[k] if k in self.extra else getattr(self, k) for k in self.order}


OPTIONS = tuple(f.name for f in dataclasses.fields(TrainOptions) if f.name not in ("extra", "order"))


def default_options(name: str = "run") -> TrainOptions:
    """Every option at its default, for a run named ``name``: the defaults are written once, in
    ``add_arguments``; a saved run's options (``from_record``) and the recipe checks read them here."""
    return TrainOptions.from_argv(["--name", name])


# --- checks and derived values ----------------------------------------------------------------


def check_recipe(options: TrainOptions) -> None:
    """``ValueError`` naming an option of the gsm recipe that does not apply, or block sizes that
    do not divide ``--seq-len`` (``block_sizes``: refused before the run directory and its
    tokenizer are written; a --block-size of 100000 left runs/NAME/tokenizer.json)."""
    o, rows, default = options, options.rows_per_doc, default_options()
    block_sizes(o)
    needs_rows = [
        ("--answer-only", o.answer_only),
        ("--eot-weight", o.eot_weight != default.eot_weight),
        ("--fresh-problems", o.fresh_problems),
    ]
    for name, given in needs_rows:
        if given and not rows:
            raise ValueError(f"{name} applies to --rows-per-doc only")
    if rows and o.weighting != "tokens":
        raise ValueError("--rows-per-doc weights the loss per token: it needs --weighting tokens")
    if o.fresh_problems and o.corpus != "gsm":
        raise ValueError("--fresh-problems applies to --corpus gsm only")
    if o.drill_share and not o.fresh_problems:
        raise ValueError("--drill-share mixes drills into fresh problems: it needs --fresh-problems")
    if o.drill_ops and not o.drill_share:
        raise ValueError("--drill-ops sets the operators of the drills: it needs --drill-share")
    if o.drill_from and not o.drill_share:
        raise ValueError("--drill-from sets where the drills' numbers come from: it needs --drill-share")
    if o.result_weight != 1.0 and not rows:
        raise ValueError("--result-weight weights the results of one-document rows: it needs --rows-per-doc")
    if o.mask_results and not rows:
        raise ValueError("--mask-results masks the results of one-document rows: it needs --rows-per-doc")
    if o.suffix_results and not rows:
        raise ValueError("--suffix-results masks the blocks of one-document rows: it needs --rows-per-doc")
    if o.init_deepen and not o.init:
        raise ValueError("--init-deepen deepens the --init weights: it needs --init")
    if o.fold_norms and (o.family in BLOCK_CAUSAL or not o.init):
        raise ValueError("--fold-norms folds the q/k norms of an SDAR --init into a --family llada / dream run")
    if o.curriculum and not o.fresh_problems:
        raise ValueError("--curriculum draws its problems afresh: it needs --fresh-problems")
    if o.adaptive and not o.fresh_problems:
        raise ValueError("--adaptive draws its problems afresh: it needs --fresh-problems")
    if o.adaptive and o.curriculum:
        raise ValueError("--adaptive replaces --curriculum's fixed schedule: give one of them")
    if o.curriculum_lower != default.curriculum_lower and not (o.curriculum or o.adaptive):
        raise ValueError("--curriculum-lower applies to --curriculum or --adaptive only")
    check_moe(o)
    if o.family not in BLOCK_CAUSAL:
        check_canvas(o, default)
    elif o.decode_states:
        raise ValueError("--decode-states applies to --family llada / dream only (SDAR's blocks are its recipe)")
    check_distill(o, default)


def check_distill(options: TrainOptions, default: TrainOptions) -> None:
    """``ValueError`` naming what ``--distill`` / ``--distill-weight`` cannot be given with."""
    o = options
    if not (isinstance(o.distill_weight, (int, float)) and math.isfinite(o.distill_weight) and o.distill_weight >= 0):
        raise ValueError(f"--distill-weight must be a finite number >= 0, got {o.distill_weight!r}")
    if o.distill is None:
        if o.distill_weight != default.distill_weight:
            raise ValueError("--distill-weight weights the --distill term: it needs --distill")
        return
    if o.family in BLOCK_CAUSAL:
        raise ValueError(
            "--distill applies to --family llada / dream only (a canvas student of a block-causal teacher)"
        )
    if not o.decode_states:
        raise ValueError(f"--family {o.family}: --distill teaches the --decode-states rows: it needs --decode-states")


def check_canvas(options: TrainOptions, default: TrainOptions) -> None:
    """``ValueError`` naming what a whole-canvas family (``--family llada`` / ``dream``) cannot train with."""
    o = options
    if not o.rows_per_doc:
        raise ValueError(f"--family {o.family} trains on one-document rows: it needs --rows-per-doc")
    for name, key in CANVAS_REFUSES.items():
        if getattr(o, key) != getattr(default, key):
            raise ValueError(f"{name} applies to --family sdar only (BD3-LM's blocks and its recipe)")
    if o.suffix_results and not o.decode_states:
        raise ValueError(
            f"--family {o.family}: --suffix-results cuts the --decode-states rows: it needs --decode-states"
        )
    if o.head_dim * o.heads != o.hidden:
        raise ValueError(
            f"--family {o.family}: the head size is --hidden / --heads, so --head-dim must be "
            f"{o.hidden} / {o.heads}, got {o.head_dim}"
        )


def check_export(name: str | None, export: str | None) -> None:
    """--name is a plain name; --export's three files are writable (a shipped target only with
    --update-shipped: ``spotref.files.check_writable``), checked before any training."""
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", name or ""):
        raise ValueError(
            f"--name {name!r} must be a plain name (letters, digits, '.', '_', '-'; "
            f"no path): it names runs/NAME and the exported files"
        )
    if export:
        for suffix in (".safetensors", ".json", ".tokenizer.json"):
            check_writable(Path(export) / f"{name}{suffix}")


def block_sizes(options: TrainOptions) -> list[int]:
    """The block sizes trained on, in turn (``--mix-blocks``, else ``--block-size`` alone)."""
    mix, L = options.mix_blocks, options.seq_len
    sizes = ([int(b) for b in mix.split(",")] if isinstance(mix, str) else list(mix)) if mix else [options.block_size]
    for B in sizes + [options.block_size]:
        if B < 1 or L % B:
            raise ValueError(f"--seq-len {L} must be a multiple of every block size, got {B}")
    return sizes


def row_align(options: TrainOptions) -> int:
    """Rows end at a multiple of every block size trained on (their least common multiple)."""
    return math.lcm(*block_sizes(options), options.block_size)


def stream_align(options: TrainOptions) -> int:
    """Where windows may start: anywhere (1), or with ``--pad-eot`` at multiples of every
    block size trained on (their least common multiple)."""
    return row_align(options) if options.pad_eot else 1


def corpus_seed(options: TrainOptions) -> int:
    """``--corpus-seed``, or the gsm corpus's default."""
    return GSM_DEFAULTS["corpus_seed"] if options.corpus_seed is None else options.corpus_seed


def corpus_level(options: TrainOptions) -> int:
    """``--corpus-level``, or the gsm corpus's default."""
    return GSM_DEFAULTS["corpus_level"] if options.corpus_level is None else options.corpus_level


def drill_ops(options: TrainOptions) -> str:
    """``--drill-ops``, or the default mix (``gsm.DRILL_OPS``)."""
    return options.drill_ops or gsm.DRILL_OPS


def drill_from(options: TrainOptions) -> str:
    """``--drill-from``, or ``range`` (the default)."""
    return options.drill_from or "range"


def adaptive_levels(options: TrainOptions) -> list[int]:
    """``--adaptive``'s levels, in the order to train them."""
    return [int(v) for v in str(options.adaptive).split(",")]
