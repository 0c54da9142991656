"""``spotref demo``: exact decoding and SPOT side by side, outputs checked identical.

Runs on the default bundled target when one ships (``spotref.list_targets()``), else on a
random SDAR model (acceptance numbers from random weights say little: they only show the
machinery). On a target it first shows ``--show`` of its held-out prompts: the prompt, the
expected answer where the domain has one (a math target's ``#### N``), the output, and each SPOT
run's verdict (identical to exact decoding, and its passes against exact decoding's). Then one
table: passes, commits per denoise/verify pass, tokens/s and ratios, all measured in this one
process, and passes again on answer blocks alone (the blocks before the one holding
end-of-text, ``report.answer_blocks``), so that end-of-text fill carries no number.
"""

from __future__ import annotations

import random
import re
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch

import spotref
from spotref import names
from spotref.api import DecodeOptions
from spotref.cli.argtypes import (
    add_threads,
    int_list,
    model_name,
    nonneg_int,
    positive_int,
    seed_int,
    temperature_arg,
    tool_main,
)
from spotref.cli.generate import check_options
from spotref.cli.options import Options
from spotref.cli.report import CANVAS_SOLUTION_ROOM, SOLUTION_ROOM, answer_blocks, progress, solution_room, table
from spotref.configs import SDARConfig
from spotref.drafters.budget import verify_times
from spotref.files import check_writable
from spotref.load.drafters import find_checkpoint
from spotref.load.targets import DEFAULT_TARGET, list_targets
from spotref.load.tokenizer import final_answer
from spotref.names import resolve_drafter
from spotref.spec.sdar import SDARModel

MATH_LENGTH, TEXT_LENGTH = SOLUTION_ROOM, 64  # --gen-length's defaults: room for a whole solution


def gen_length(options: DemoOptions, env: Setup) -> int:
    """``--gen-length``, or its default for this target: a math target (one whose held-out
    prompts have answers) gets room for a whole solution and its ``#### N`` line."""
    if options.gen_length is not None:
        return options.gen_length
    return solution_room(env.model) if env.answers and env.answers[0] is not None else TEXT_LENGTH


def add_arguments(p):
    p.add_argument("--prompts", type=positive_int, default=4, help="number of held-out prompts (>= 1)")
    add_threads(p)
    p.add_argument(
        "--gen-length",
        type=positive_int,
        default=None,
        help=f"most new tokens per prompt (default {MATH_LENGTH} on a math target, whose "
        f"solutions stop at end-of-text, {CANVAS_SOLUTION_ROOM} on a whole-canvas one, else {TEXT_LENGTH})",
    )
    p.add_argument("--temperature", type=temperature_arg, default=0.0, help="sampling temperature T (0: argmax)")
    p.add_argument("--budgets", type=int_list(1), default=[16], help="comma list of node budgets N (default 16)")
    p.add_argument(
        "--no-auto",
        dest="budget_auto",
        action="store_false",
        help="skip the budget='auto' row (the cost model's N for this machine)",
    )
    p.add_argument("--depth", type=nonneg_int, default=8, help="tree depth cap D")
    p.add_argument("--seed", type=seed_int, default=0, help="noise seed, in [0, 2**64 - 1]")
    p.add_argument(
        "--drafter",
        default=None,
        help="drafter name or a drafter .pt path (default: spot when the target ships one, else confidence)",
    )
    p.add_argument(
        "--width",
        type=int,
        default=None,
        help="run every pass, exact decoding's too, as one forward of this many rows "
        "(padded; >= every budget); default: each row alone",
    )
    p.add_argument(
        "--fused-store",
        action="store_true",
        help="store each finished block inside the next block's first pass (one pass fewer per block)",
    )
    p.add_argument("--lookahead", action="store_true", help="carry each next block's first pass (docs/spec.md 3)")
    p.add_argument(
        "--model",
        default="default",
        type=model_name,
        help="bundled target name, a target's metadata file PATH/NAME.json, 'default' (the default "
        "target, else random) or 'random'",
    )
    p.add_argument(
        "--show",
        type=nonneg_int,
        default=1,
        help="prompts shown in full with their outputs (a target's only; default 1)",
    )
    p.add_argument(
        "--trace",
        default=None,
        metavar="DIR",
        help="write each prompt's trace, exact decoding and every SPOT run side by side, to DIR/prompt-K.json "
        "(docs/spec.md section 8; spotref show draws it)",
    )


@dataclass(frozen=True)
class DemoOptions(Options):
    """The options of ``spotref demo`` (``add_arguments``), built once by ``run``."""

    prompts: int  # held-out prompts
    threads: int
    gen_length: int | None  # None: gen_length() picks by target
    temperature: float
    budgets: list[int]  # node budgets N, one SPOT row each
    budget_auto: bool  # False with --no-auto
    depth: int  # tree depth cap D
    seed: int
    drafter: str | None  # None: best_drafter()
    width: int | None  # rows of every pass; None: each row alone
    fused_store: bool
    lookahead: bool
    model: str  # a bundled target, "default" or "random"
    show: int  # prompts shown in full
    trace: str | None  # --trace DIR; None: no traces


@dataclass(frozen=True)
class Setup:
    """What the demo runs on: a model, its prompts (token ids) and, for a target, their texts,
    expected answers (None where the domain has none), stop ids and detokenizer."""

    name: str
    model: SDARModel
    prompts: list[list[int]]
    stops: list[int] | None
    texts: list[str] | None
    answers: list | None
    decode: Callable | None


def random_setup(n_prompts: int, seed: int) -> Setup:
    """A random SDAR (block 32) and random prompts: the demo before any target is trained."""
    cfg = SDARConfig(
        vocab_size=512,
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=32,
        mask_token_id=511,
        block_size=32,
        initializer_range=0.5,
    )
    torch.manual_seed(seed)
    rng = random.Random(seed)
    prompts = [[rng.randrange(511) for _ in range(rng.randrange(8, 48))] for _ in range(n_prompts)]
    return Setup(
        name="random SDAR (untrained)",
        model=SDARModel(cfg).eval(),
        prompts=prompts,
        stops=None,
        texts=None,
        answers=None,
        decode=None,
    )


def target_setup(name: str, n_prompts: int) -> Setup:
    """A bundled target and its own held-out prompts (``Target.heldout``, seed 0), taken whole."""
    target = names.target(name)
    held = target.heldout(n_prompts, seed=0)
    return Setup(
        name=name,
        model=target.model,
        prompts=[target.encode(t) for t, _ in held],
        stops=target.stop_ids,
        texts=[t for t, _ in held],
        answers=[a for _, a in held],
        decode=target.tokenizer.decode,
    )


def setup(options: DemoOptions) -> Setup:
    """``--model``'s target (the default one when it ships) or the random model."""
    if options.model == "default" and DEFAULT_TARGET in list_targets():
        return target_setup(DEFAULT_TARGET, options.prompts)
    if options.model not in ("default", "random"):
        return target_setup(options.model, options.prompts)
    return random_setup(options.prompts, options.seed)


def best_drafter(model) -> str:
    """ "spot" when a trained order model matches this target, else "confidence"."""
    return "spot" if find_checkpoint(model) is not None else "confidence"


SHOWN = 600  # characters of a prompt or output shown


def clip(text: str, n: int = SHOWN) -> str:
    """The last ``n`` characters of a prompt (where its question is), marked when cut."""
    return text if len(text) <= n else "..." + text[-n:]


def show(env: Setup, i: int, runs: dict, widths: dict | None = None) -> None:
    """Prompt ``i``: its text, the expected answer, the output and every SPOT run's verdict (a run
    at another width than exact decoding's, ``widths``: against exact decoding at its width,
    checked as it decoded)."""
    exact, widths = runs["exact"][i], widths or {}
    text = env.decode([t for t in exact.tokens if t not in (env.stops or ())])
    print(f"\n--- held-out prompt {i + 1} ---\n{clip(env.texts[i])}")
    if env.answers[i] is not None:
        got = final_answer(text)  # the number after "####"
        verdict = "no answer" if got is None else ("right" if got == env.answers[i] else "wrong")
        print(f"--- expected answer: {env.answers[i]}; the model's: {'-' if got is None else got} ({verdict})")
    print(f"--- output (exact decoding, {exact.passes} passes) ---\n{text[:SHOWN]}")
    for key, results in runs.items():
        if key == "exact":
            continue
        if widths.get(key) == widths.get("exact"):
            same = "identical" if results[i].tokens == exact.tokens else "DIFFERENT"
        else:
            same = f"identical{at_width(widths, key)}"
        print(f"--- {key}: {same}, {results[i].passes} passes")


def at_width(widths: dict, key: str) -> str:
    """ " to exact decoding at width W" where run ``key`` decoded at another width than exact decoding."""
    return "" if widths[key] == widths["exact"] else f" to exact decoding at {way(widths[key])}"


def way(width) -> str:
    return "rows alone" if width is None else f"width {width}"


def run(args) -> int:
    """The ``spotref demo`` entry point: its options built once, then ``demo``."""
    return demo(DemoOptions.from_namespace(args))


def demo(o: DemoOptions) -> int:
    """Exact decoding and every SPOT budget on each prompt, checked identical; then the table."""
    torch.set_num_threads(o.threads)
    check_options(o.model, decode_options(o), flags={"budget": "--budgets"})  # before the model loads
    check_trace_dir(o.trace)
    env = setup(o)
    name, model, prompts, stops = env.name, env.model, env.prompts, env.stops
    length = gen_length(o, env)
    drafter = o.drafter or best_drafter(model)
    kw = dict(temperature=o.temperature, seed=o.seed, stop_ids=stops, fused_store=o.fused_store, width=o.width)
    kw["lookahead"] = o.lookahead
    name_of, drafter = drafter, resolve_drafter(drafter, model)  # looked up once
    budgets = {f"{name_of} N={b}": (drafter, b, o.width) for b in o.budgets}
    if o.budget_auto:  # the cost model's N (and, without --width, its way to verify) for these settings
        auto = spotref.Speculator.for_model(
            model, drafter=drafter, budget="auto", depth=o.depth, temperature=o.temperature, seed=o.seed, width=o.width
        )
        shown = "" if auto.width == o.width else f", {way(auto.width)}"
        budgets[f"{name_of} auto (N={auto.budget}{shown})"] = (auto.round_drafter, auto.budget, auto.width)  # reused
    runs = {"exact": [], **{key: [] for key in budgets}}
    widths = {"exact": o.width, **{key: w for key, (_, _, w) in budgets.items()}}
    kw["trace"] = o.trace is not None
    for prompt in progress(prompts, "prompts"):
        exact = {o.width: spotref.generate(model, prompt, length, **kw)}
        runs["exact"].append(exact[o.width])
        for key, (d, b, w) in budgets.items():
            spot = spotref.generate(model, prompt, length, drafter=d, budget=b, depth=o.depth, **{**kw, "width": w})
            if w not in exact:  # the decode SPOT at width w is identical to
                exact[w] = spotref.generate(model, prompt, length, **{**kw, "width": w})
            if spot.tokens != exact[w].tokens:
                raise SystemExit(f"spotref demo: OUTPUT DIFFERS from exact decoding at {way(w)} ({key}), {prompt[:8]}")
            runs[key].append(spot)
        if o.trace is not None:
            save_trace(o.trace, len(runs["exact"]), {key: results[-1] for key, results in runs.items()}, env)
    for i in range(min(o.show, len(prompts)) if env.decode else 0):
        show(env, i, runs, widths)
    others = sorted({way(w) for w in widths.values() if w != o.width})
    print(
        f"\nmodel: {name}; {len(prompts)} prompt{'s' * (len(prompts) != 1)} x at most {length} new tokens, "
        f"T = {o.temperature}, "
        f"depth cap {o.depth}{', fused store' if o.fused_store else ''}{', lookahead' if o.lookahead else ''}; "
        f"every output identical to exact decoding: yes"
        + (f" (at {way(o.width)}; the auto row's to exact decoding at {', '.join(others)})" if others else "")
        + "\n"
    )
    print(table(COLUMNS, summary_rows(runs)))
    print(f"\n{LEGEND}")
    print("\n" + textwrap.fill(why(model, o).strip(), 100))
    return 0


def decode_options(o: DemoOptions) -> DecodeOptions:
    """The decode options every run of the demo shares, its largest budget (each fits the width)
    and a drafter (its own default stands for None: every SPOT row drafts)."""
    drafter, budget = o.drafter or "confidence", max(o.budgets)
    return DecodeOptions(
        o.temperature,
        o.seed,
        drafter=drafter,
        budget=budget,
        depth=o.depth,
        width=o.width,
        fused_store=o.fused_store,
        lookahead=o.lookahead,
    )


def check_trace_dir(directory: str | None) -> None:
    """``--trace DIR``: ``ValueError`` before the model loads when DIR is empty, a file, or a
    directory that cannot be written, or holds a directory named as a trace file."""
    if directory is None:
        return
    if not directory:
        raise ValueError("--trace must name a directory (prompt-K.json go into it), got ''")
    path = Path(directory)
    if path.exists() and not path.is_dir():
        raise ValueError(f"--trace {path}: not a directory (prompt-K.json go into it)")
    written = [p.name for p in path.glob("prompt-*.json") if re.fullmatch(r"prompt-[1-9][0-9]*\.json", p.name)]
    for name in ["prompt-1.json", *written]:
        check_writable(path / name)


def save_trace(directory: str, k: int, results: dict, env: Setup) -> None:
    """Prompt ``k``'s decodes, exact decoding first, as one trace ``directory/prompt-K.json``
    (each decode labelled as the table's rows), with the tokens' text where the target has it."""
    trace = None
    for key, res in results.items():
        res.trace.decodes[0]["label"] = key
        trace = res.trace if trace is None else trace + res.trace
    trace = trace if env.decode is None else trace.with_pieces(env.decode)
    print(f"trace: {trace.save(Path(directory) / f'prompt-{k}.json')}")


def why(model, options: DemoOptions) -> str:
    """Why fewer passes are or are not more tokens per second here: the measured verify curve."""
    t = verify_times(model, width=options.width)  # the cost model's own timings
    N = max(n for n in t if n <= max(options.budgets))
    path = "rows alone" if options.width is None else f"width {options.width}"
    return (
        f"\nA verify pass of N states costs t(N) / t(1) = {t[N] / t[1]:.2f} at N = {N} on this "
        f"machine ({path}; t(1) = {t[1] * 1e3:.1f} ms): SPOT gains tokens/s only where its pass "
        f'reduction exceeds that ratio plus the drafter\'s time; budget="auto" picks the N with '
        f"the most expected commits per second from this curve and from one forward at each width. "
        f"A model of a real size pays little more for several states than for one, on a CPU too: "
        f"docs/results-cpu-shapes.md replays the bundled gsm-b32 target's passes at SDAR-1.7B's cost."
    )


LEGEND = textwrap.fill(
    "passes: every forward of the model (SDAR: the prompt's prefill, the denoise / verify passes, one store "
    "per block, so exact decoding takes more than one per token; a whole-canvas model: the verify passes "
    "alone, one canvas per row); commits/pass: positions decided per "
    "denoise / verify pass; fewer passes: exact decoding's passes over this row's; speed-up: this row's "
    "tokens/s over exact decoding's (wall time in this process: a few prompts make it noisy); answer "
    "columns: the blocks before the one holding end-of-text, whose fill after the answer is left out.",
    100,
)

COLUMNS = [
    "decoder",
    "tokens",
    "passes",
    "passes/token",
    "commits/pass",
    "tokens/s",
    "fewer passes",
    "speed-up",
    "answer tokens",
    "answer passes/token",
    "answer fewer passes",
]


def summary_rows(runs: dict) -> list[list]:
    """One row per decoder (``COLUMNS``): totals over its results; ratios against the "exact" row."""
    rows = []
    for key, results in runs.items():
        tokens = sum(len(r.tokens) for r in results)
        passes = sum(r.passes for r in results)
        secs = sum(r.stats["wall_s"] for r in results)
        commits = sum(sum(r.stats["committed"]) for r in results)
        steps = sum(len(r.stats["committed"]) for r in results)  # denoise/verify passes
        answer = [answer_blocks(r) for r in results]  # (tokens, passes) each
        rows.append(
            [
                key,
                tokens,
                passes,
                passes / max(tokens, 1),
                commits / max(steps, 1),
                tokens / max(secs, 1e-9),
                sum(t for t, _ in answer),
                sum(p for _, p in answer),
            ]
        )
    base = rows[0]
    return [
        r[:6] + [base[2] / max(r[2], 1), r[5] / max(base[5], 1e-9), r[6], r[7] / max(r[6], 1), base[7] / max(r[7], 1)]
        for r in rows
    ]


def main(argv=None) -> int:
    """``python -m spotref.cli.demo``: the same as ``spotref demo``."""
    return tool_main("python -m spotref.cli.demo", __doc__, add_arguments, run, argv)


if __name__ == "__main__":
    raise SystemExit(main())
