"""``spotref demo``: exact decoding and SPOT side by side, outputs checked identical.

Runs on the default bundled target when one ships (``spotref.list_targets()``), else on a
random SDAR model (acceptance numbers from random weights say little: they only show the
machinery). Prints one table: passes, commits per denoise/verify pass, tokens/s and ratios,
all measured in this one process.
"""
from __future__ import annotations

import random

import torch

import spotref
from spotref.models import SDARConfig, SDARModel


def progress(iterable, desc: str, total: int | None = None):
    """A tqdm bar when tqdm is installed, else the iterable itself (no progress shown)."""
    try:
        from tqdm.auto import tqdm
        return tqdm(iterable, desc=desc, total=total, leave=False)
    except ImportError:
        return iterable


def table(header: list[str], rows: list[list]) -> str:
    """A plain-text table (markdown pipe syntax, so it pastes into docs)."""
    cells = [header] + [[f"{c:.3g}" if isinstance(c, float) else str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    line = lambda r: "| " + " | ".join(c.rjust(w) for c, w in zip(r, widths)) + " |"
    return "\n".join([line(cells[0]), "|" + "|".join("-" * (w + 2) for w in widths) + "|"]
                     + [line(r) for r in cells[1:]])


def random_setup(n_prompts: int, seed: int):
    """A random SDAR (block 32) and random prompts: the demo before any target is trained."""
    cfg = SDARConfig(vocab_size=512, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                     num_attention_heads=4, num_key_value_heads=2, head_dim=32,
                     mask_token_id=511, block_size=32, initializer_range=0.5)
    torch.manual_seed(seed)
    rng = random.Random(seed)
    prompts = [[rng.randrange(511) for _ in range(rng.randrange(8, 48))] for _ in range(n_prompts)]
    return "random SDAR (untrained)", SDARModel(cfg).eval(), prompts, None


def target_setup(name: str, n_prompts: int):
    from spotref.targets import load_target
    target = load_target(name)
    from spotref.quality import heldout_prompts
    return name, target.model, [target.encode(t) for t in heldout_prompts(n_prompts)], target.stop_ids


def setup(args):
    try:
        from spotref.targets import DEFAULT_TARGET, list_targets
        if args.model == "default" and DEFAULT_TARGET in list_targets():
            return target_setup(DEFAULT_TARGET, args.prompts)
        if args.model not in ("default", "random"):
            return target_setup(args.model, args.prompts)
    except ImportError:
        pass
    return random_setup(args.prompts, args.seed)


def best_drafter(model) -> str:
    """"spot" when a trained order model matches this target, else "confidence"."""
    from spotref.spot import find_checkpoint
    return "spot" if find_checkpoint(model) is not None else "confidence"


def demo(args) -> int:
    name, model, prompts, stops = setup(args)
    drafter = args.drafter or best_drafter(model)
    kw = dict(temperature=args.temperature, seed=args.seed, stop_ids=stops, fused_store=args.fused_store)
    budgets = {f"{drafter} N={b}": b for b in args.budgets}
    name_of, drafter = drafter, spotref.api.resolve_drafter(drafter, model)        # looked up once
    if args.budget_auto:
        n = spotref.api.auto_budget(model, drafter, args.depth, args.temperature)
        budgets[f"{name_of} auto (N={n})"] = n
    runs = {"exact": [], **{key: [] for key in budgets}}
    for prompt in progress(prompts, "prompts"):
        exact = spotref.generate(model, prompt, args.gen_length, **kw)
        runs["exact"].append(exact)
        for key, b in budgets.items():
            spot = spotref.generate(model, prompt, args.gen_length, drafter=drafter, budget=b,
                                    depth=args.depth, **kw)
            if spot.tokens != exact.tokens:
                raise SystemExit(f"spotref demo: OUTPUT DIFFERS from exact decoding ({key}) on prompt {prompt[:8]}")
            runs[key].append(spot)
    print(f"\nmodel: {name}; {len(prompts)} prompts x {args.gen_length} new tokens, T = {args.temperature}, "
          f"depth cap {args.depth}{', fused store' if args.fused_store else ''}; "
          f"every output identical to exact decoding: yes\n")
    print(table(["decoder", "tokens", "passes", "passes/token", "commits/pass", "tokens/s",
                 "fewer passes", "speed-up"], summary_rows(runs)))
    return 0


def summary_rows(runs: dict) -> list[list]:
    """One row per decoder: totals over its results; ratios against the "exact" row."""
    rows = []
    for key, results in runs.items():
        tokens = sum(len(r.tokens) for r in results)
        passes = sum(r.passes for r in results)
        secs = sum(r.stats["wall_s"] for r in results)
        commits = sum(sum(r.stats["committed"]) for r in results)
        steps = sum(len(r.stats["committed"]) for r in results)      # denoise/verify passes
        rows.append([key, tokens, passes, passes / max(tokens, 1), commits / max(steps, 1),
                     tokens / max(secs, 1e-9)])
    base = rows[0]
    return [r + [base[2] / max(r[2], 1), r[5] / max(base[5], 1e-9)] for r in rows]
