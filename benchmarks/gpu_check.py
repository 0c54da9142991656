"""GPU check: verify-forward cost curve, batch invariance and exactness of spotref on a GPU.

One prepared script, sized to finish in about 8 minutes on one H200 (docs/gpu.md):

1. An SDAR-8B-shaped model: the real config (../shared/sdar-8b-chat/config.json), random bf16
   weights made on the GPU (no checkpoint needed; the cost of a forward does not depend on the
   values).
2. Cost curve: the verify forward ``model.denoise(cache, states)`` for N in {1, 2, 4, 8, 16, 32,
   64} tree nodes x block size B in {4, 16, 32}, over prefixes of 512 and 2048 cached tokens;
   median milliseconds and t(N) / t(1). Two matmul variants: ``bmm`` (spotref.models.linear as
   shipped: one product per row, batch invariant by construction on CPU) and ``linear``
   (``F.linear`` over the flattened rows, the usual fast path, batch invariance not promised).
3. Batch-invariance audit: row i of a batched denoise vs the same state alone (torch.equal),
   for both variants, and ``spotref.audit`` (exact vs SPOT tokens) on the random model.
4. Exact vs SPOT tokens/s on a bundled target, once ``spotref.load.targets`` exists.

Results go to ``--out`` (JSON; default ``$OUT/gpu_check.json`` when $OUT is set, else
benchmarks/results/gpu_check.json) and a summary to stdout. ``--budget-s`` stops the timing
grid early (results so far are kept, ``truncated`` says so). ``--smoke`` runs the same code on
a tiny config, on CPU, in seconds: the test suite runs it so the GPU run cannot die on a typo.
"""
from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))              # run from a checkout, installed or not

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import spotref  # noqa: E402
import spotref.models as models  # noqa: E402
from spotref.audit import audit, batch_invariance  # noqa: E402
from spotref.checkpoint import build_on_meta, config_fields  # noqa: E402
from spotref.load.files import atomic_write_text  # noqa: E402
from spotref.load.targets import list_targets, load_target  # noqa: E402
from spotref.models import SDARConfig, SDARModel  # noqa: E402

REAL_CONFIG = ROOT.parent / "shared" / "sdar-8b-chat" / "config.json"
FULL = dict(nodes=(1, 2, 4, 8, 16, 32, 64), blocks=(4, 16, 32), prefixes=(512, 2048),
            inv_blocks=(4, 32), inv_rows=(4, 16, 64), inv_prefix=512,
            audit_block=32, audit_prompt=64, audit_tokens=64)
SMOKE = dict(nodes=(1, 2, 4), blocks=(4,), prefixes=(8, 16), inv_blocks=(4,), inv_rows=(2, 4),
             inv_prefix=8, audit_block=4, audit_prompt=6, audit_tokens=8)
SMOKE_CONFIG = SDARConfig(vocab_size=96, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                          num_attention_heads=4, num_key_value_heads=2, head_dim=8,
                          mask_token_id=95, block_size=4, initializer_range=0.3)


def parse(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--smoke", action="store_true", help="tiny config, seconds, for CI on CPU")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--dtype", default=None, help="default: bfloat16 (float32 with --smoke)")
    p.add_argument("--config", default=str(REAL_CONFIG), help="config.json of the model shape")
    p.add_argument("--out", default=None, help="JSON results path")
    p.add_argument("--reps", type=int, default=3, help="timed repetitions per point (median)")
    p.add_argument("--budget-s", type=float, default=420.0, help="stop the timing grid after this")
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args(argv)


def default_out(smoke: bool) -> Path:
    if os.environ.get("OUT"):
        return Path(os.environ["OUT"]) / "gpu_check.json"
    return ROOT / "benchmarks" / "results" / ("gpu_check_smoke.json" if smoke else "gpu_check.json")


def build_model(cfg: SDARConfig, device, dtype, seed: int) -> SDARModel:
    """Random weights made directly on ``device`` in ``dtype`` (normal, std initializer_range)."""
    model = build_on_meta(SDARModel, cfg).to(dtype).to_empty(device=device)
    g = torch.Generator(device=device).manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.fill_(1.0)
            else:
                p.normal_(0.0, cfg.initializer_range, generator=g)
    if cfg.tie_word_embeddings:
        model.lm_head.weight = model.model.embed_tokens.weight
    return model.eval()


def flat_linear(x, w):
    """F.linear over all rows at once: the usual kernel, whose choice may depend on N."""
    return F.linear(x, w)


@contextlib.contextmanager
def variant(name: str):
    """``bmm``: spotref.models.linear as shipped; ``linear``: F.linear patched in."""
    shipped = models.linear
    models.linear = {"bmm": shipped, "linear": flat_linear}[name]
    try:
        yield
    finally:
        models.linear = shipped


def sync(device):
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize()


def random_ids(n: int, V: int, mask: int, g) -> torch.Tensor:
    ids = torch.randint(0, V, (n,), generator=g)
    ids[ids == mask] = (mask + 1) % V
    return ids


def time_verify(model, cache, N: int, reps: int, g) -> float:
    """Median ms of one denoise over N random states (about half MASK)."""
    B, V, mask = model.block_size, model.config.vocab_size, model.mask_id
    states = random_ids(N * B, V, mask, g).view(N, B)
    states[torch.rand(N, B, generator=g) < 0.5] = mask
    states = states.to(model.lm_head.weight.device)
    dev = model.lm_head.weight.device
    model.denoise(cache, states)                            # warm-up (kernel selection, caches)
    times = []
    for _ in range(reps):
        sync(dev)
        t = time.perf_counter()
        model.denoise(cache, states)
        sync(dev)
        times.append((time.perf_counter() - t) * 1e3)
    return statistics.median(times)


def cost_curve(model, grid: dict, reps: int, deadline: float, g) -> tuple[list, bool]:
    """Rows {variant, prefix, B, N, ms, ratio}; stops (truncated) past the deadline."""
    rows, V, mask = [], model.config.vocab_size, model.mask_id
    for name in ("bmm", "linear"):
        with variant(name):
            for prefix in grid["prefixes"]:
                for B in grid["blocks"]:
                    model.config.block_size = B
                    cache = model.prefill(random_ids(prefix, V, mask, g))
                    base = None
                    for N in grid["nodes"]:
                        if time.perf_counter() > deadline:
                            return rows, True
                        ms = oom_safe(lambda: time_verify(model, cache, N, reps, g))
                        base = base or ms
                        rows.append({"variant": name, "prefix": prefix, "B": B, "N": N, "ms": ms,
                                     "ratio": None if ms is None or not base else ms / base})
                    del cache
    return rows, False


def oom_safe(fn):
    try:
        return fn()
    except torch.cuda.OutOfMemoryError:
        torch.cuda.empty_cache()
        return None


def invariance(model, grid: dict, seed: int) -> list:
    out = []
    for name in ("bmm", "linear"):
        with variant(name):
            for B in grid["inv_blocks"]:
                model.config.block_size = B
                for rows in grid["inv_rows"]:
                    r = batch_invariance(model, prefix_len=grid["inv_prefix"], rows=rows, seed=seed)
                    out.append({"variant": name, **r})
    return out


def exactness(model, grid: dict, seed: int) -> dict:
    """spotref.audit on the random model (shipped bmm variant), T = 0 and T = 1."""
    model.config.block_size = grid["audit_block"]
    g = torch.Generator().manual_seed(seed)
    prompt = random_ids(grid["audit_prompt"], model.config.vocab_size, model.mask_id, g).tolist()
    res = {}
    for T in (0.0, 1.0):
        r = audit(model, prompt, grid["audit_tokens"], drafter="confidence", temperature=T, seed=seed,
                  budget=16, depth=8)
        res[f"T={T}"] = {"identical": r.identical, "where": r.where, "exact_passes": r.exact_passes,
                         "spot_passes": r.spec_passes}
    res["identical"] = all(v["identical"] for v in res.values())
    return res


def target_speed(device, dtype) -> dict:
    """Exact vs SPOT tokens/s on the first bundled target."""
    names = list(list_targets())
    if not names:
        return {"skipped": "spotref.load.targets lists no target"}
    target = load_target(names[0])
    model = getattr(target, "model", target).to(device=device, dtype=dtype).eval()
    prompt = target.tokenizer.encode("def fibonacci(n):\n    ")
    res = {"target": names[0]}
    for label, drafter in [("exact", None), ("confidence", "confidence"), ("spot", "spot")]:
        spotref.generate(model, prompt, 16, drafter=drafter)             # warm-up
        r = spotref.generate(model, prompt, 128, drafter=drafter)
        res[label] = {"tokens": len(r.tokens), "passes": r.passes, "wall_s": r.stats["wall_s"],
                      "tok_per_s": len(r.tokens) / max(r.stats["wall_s"], 1e-9), "out": r.tokens}
    for label in res:
        if isinstance(res[label], dict) and label != "exact":
            res[label]["identical"] = res[label].pop("out") == res["exact"]["out"]
            res[label]["speedup"] = res[label]["tok_per_s"] / res["exact"]["tok_per_s"]
    res["exact"].pop("out")
    return res


def environment(args, cfg: SDARConfig, dtype) -> dict:
    env = {"device": args.device, "torch": torch.__version__, "dtype": str(dtype), "smoke": args.smoke,
           "config": {k: getattr(cfg, k) for k in ("vocab_size", "hidden_size", "intermediate_size",
                                                   "num_hidden_layers", "num_attention_heads",
                                                   "num_key_value_heads", "head_dim")}}
    if torch.device(args.device).type == "cuda":
        env.update(gpu=torch.cuda.get_device_name(), cuda=torch.version.cuda,
                   tf32_matmul=torch.backends.cuda.matmul.allow_tf32,
                   bf16_reduced_precision_reduction=torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction)
    return env


def summary(res: dict) -> str:
    lines = [f"device: {res['env'].get('gpu', res['env']['device'])}, dtype {res['env']['dtype']}"]
    for r in res["timing"]:
        if r["N"] == 1:
            lines.append(f"{r['variant']:6s} prefix {r['prefix']:5d} B {r['B']:3d}: t(1) = "
                         f"{r['ms'] if r['ms'] is None else round(r['ms'], 2)} ms; t(N)/t(1):")
        lines[-1] += f" N={r['N']}:{'OOM' if r['ratio'] is None else format(r['ratio'], '.2f')}"
    for r in res["invariance"]:
        lines.append(f"batch invariance {r['variant']:6s} B {r['block_size']:3d} rows {r['rows']:3d}: "
                     f"{r['equal_rows']}/{r['rows']} bit-identical, max |diff| {r['max_abs_diff']:.3g}")
    lines.append(f"audit (exact vs SPOT tokens): {res['audit']}")
    lines.append(f"targets: {res['targets']}")
    if res.get("truncated"):
        lines.append("timing grid TRUNCATED by --budget-s")
    return "\n".join(lines)


def main(argv=None) -> int:
    args = parse(argv)
    t0 = time.perf_counter()
    grid = SMOKE if args.smoke else FULL
    dtype = getattr(torch, args.dtype or ("float32" if args.smoke else "bfloat16"))
    cfg = SMOKE_CONFIG if args.smoke else SDARConfig.from_dict(config_fields(json.loads(Path(args.config).read_text())))
    torch.manual_seed(args.seed)
    g = torch.Generator().manual_seed(args.seed)
    model = build_model(dataclasses.replace(cfg), args.device, dtype, args.seed)
    res = {"env": environment(args, cfg, dtype)}
    res["build_s"] = time.perf_counter() - t0
    res["timing"], res["truncated"] = cost_curve(model, grid, args.reps, t0 + args.budget_s, g)
    res["invariance"] = invariance(model, grid, args.seed)
    res["audit"] = exactness(model, grid, args.seed)
    del model
    res["targets"] = target_speed(args.device, dtype) if not args.smoke else {"skipped": "smoke run"}
    res["wall_s"] = time.perf_counter() - t0
    out = Path(args.out) if args.out else default_out(args.smoke)

    atomic_write_text(out, json.dumps(res, indent=1, default=str) + "\n")      # directories created
    print(summary(res))
    print(f"results: {out} ({res['wall_s']:.1f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
