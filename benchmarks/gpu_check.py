"""GPU check: the fixed-width verify forward's cost curve, its row invariance, exactness, and
gsm-b32 decoded on the GPU. One prepared run of about 7 minutes on one H200 (docs/gpu.md).

Phases, each written to the JSON as soon as it ends (a timeout keeps what finished):

1. ``env``: the device, torch, dtype, and the cost of the portable noise (the (B, V) float64
   Gumbel noise computed on the CPU and moved to the GPU, spotref.spec.noise) at SDAR-8B's vocabulary.
2. ``curve``: an SDAR-8B-shaped model (the shape is ``SDAR_8B`` below: the real config's numbers,
   carried here; random bf16 weights made on the GPU), ``denoise(cache, states, one_forward=True)``
   (the pass at width N) for N in {1, 2, 4, 8, 16, 32, 64} block states, block sizes 4 and 32,
   prefixes 512 and 2048: median ms and t(N)/t(1); beside it the row-by-row pass (rows alone) at
   N = 1 and 8.
3. ``invariance``: ``spotref.audit.batch_invariance(..., width=W)``: each row of a pass at width
   W against the same state alone at W and the batch rolled by half, ``torch.equal``.
4. ``audit``: exact decoding vs SPOT (confidence drafter) at width 16 on the random model,
   T = 0 and 1, in the model's precision (bf16).
5. ``gsm``: the bundled gsm-b32 on the GPU (float32 weights, decided in bf16 as shipped), a few
   held-out problems, T in {0, 1}: exact decoding row by row (the fastest exact decoder: the
   baseline) and at each width; confidence, calibrated and SPOT at N = width in {4, 8, 16, 64}
   and ``budget="auto"`` at width 16: passes, tokens/s, identical to exact decoding at that width.
6. ``projection``: SDAR-8B throughput from measured numbers only: gsm-b32's measured passes at N
   times the measured SDAR-8B-shape pass cost at width N (prefix 512, B 32), against exact
   decoding's passes at t(1).
7. ``canvas``: the whole-canvas families at their real shapes (``LLADA_8B``, ``DREAM_7B``: the
   config.json numbers; random bf16 weights made on the GPU): a verify pass of N canvases of
   ``canvas_len`` tokens as one forward for N in {1, 2, 4, 8, 16}, and rows alone at N = 1 and 8;
   each row of a pass at width 8 against the row alone (``spotref.audit.batch_invariance``).

``--smoke`` runs the same code on a tiny config on the CPU in seconds (the test suite runs it).
Results go to ``--out`` (default ``$OUT/gpu_check.json`` when $OUT is set, else
``runs/gpu_check.json``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run from a checkout, installed or not

import torch  # noqa: E402

import spotref  # noqa: E402
from spotref.audit import audit, batch_invariance  # noqa: E402
from spotref.checkpoint import build_on_meta, resolve_device  # noqa: E402
from spotref.cli.argtypes import checked_by, guarded, positive_int, seed_int  # noqa: E402
from spotref.configs import DreamConfig, LLaDAConfig, SDARConfig  # noqa: E402
from spotref.files import atomic_write_text, check_writable  # noqa: E402
from spotref.load.targets import load_target  # noqa: E402
from spotref.spec.dream import DreamModel  # noqa: E402
from spotref.spec.llada import LLaDAModel  # noqa: E402
from spotref.spec.noise import gumbel  # noqa: E402
from spotref.spec.sdar import SDARModel  # noqa: E402

SDAR_8B = SDARConfig(
    vocab_size=151936,
    hidden_size=4096,
    intermediate_size=12288,
    num_hidden_layers=36,
    num_attention_heads=32,
    num_key_value_heads=8,
    head_dim=128,
    mask_token_id=151669,
    block_size=32,
    rope_theta=1_000_000.0,
    max_position_embeddings=32768,
    extra={"torch_dtype": "bfloat16"},
)  # JetLM/SDAR-8B-Chat's config.json numbers
SMOKE_CONFIG = SDARConfig(
    vocab_size=96,
    hidden_size=32,
    intermediate_size=64,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=8,
    mask_token_id=95,
    block_size=4,
    initializer_range=0.3,
)
LLADA_8B = dict(d_model=4096, n_heads=32, n_kv_heads=32, n_layers=32, mlp_hidden_size=12288, vocab_size=126464,
                embedding_size=126464, mask_token_id=126336, max_sequence_length=4096)  # GSAI-ML/LLaDA-8B  # fmt: skip
DREAM_7B = dict(hidden_size=3584, intermediate_size=18944, num_hidden_layers=28, num_attention_heads=28,
                num_key_value_heads=4, vocab_size=152064, mask_token_id=151666,
                max_position_embeddings=131072)  # Dream-org/Dream-v0-Instruct-7B  # fmt: skip
CANVAS_SMOKE = {"llada": dict(d_model=32, n_heads=4, n_kv_heads=2, n_layers=2, mlp_hidden_size=64, vocab_size=96,
                              embedding_size=96, mask_token_id=95, max_sequence_length=256),
                "dream": dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                              num_key_value_heads=2, vocab_size=96, mask_token_id=95, pad_token_id=94,
                              bos_token_id=94, eos_token_id=94)}  # fmt: skip
FULL = dict(
    nodes=(1, 2, 4, 8, 16, 32, 64),
    blocks=(4, 32),
    prefixes=(512, 2048),
    rows_nodes=(1, 8),
    inv=((4, 8), (32, 8), (32, 64)),
    inv_prefix=512,
    audit_prompt=64,
    audit_tokens=64,
    gsm_problems=2,
    gsm_tokens=256,
    widths=(4, 8, 16, 64),
    canvas_nodes=(1, 2, 4, 8, 16),
    canvas_len=512,
)
SMOKE = dict(
    nodes=(1, 2, 4),
    blocks=(4,),
    prefixes=(8, 16),
    rows_nodes=(1, 2),
    inv=((4, 4),),
    inv_prefix=8,
    audit_prompt=6,
    audit_tokens=8,
    gsm_problems=1,
    gsm_tokens=16,
    widths=(4,),
    canvas_nodes=(1, 2),
    canvas_len=24,
)
DRAFTERS = ("confidence", "calibrated", "spot")


PROG = "python benchmarks/gpu_check.py"


def device(text: str) -> str:
    """``--device``: a device this machine has (``resolve_device``: cpu or cuda[:k])."""
    resolve_device(text)
    return text


def parse(argv):
    p = argparse.ArgumentParser(prog=PROG, description=__doc__.splitlines()[0])
    p.add_argument("--smoke", action="store_true", help="tiny config, CPU, seconds (the test suite)")
    p.add_argument(
        "--device",
        type=checked_by(device, "device"),
        default="cuda" if torch.cuda.is_available() else "cpu",
        help="torch device (default: cuda when there is one, else cpu)",
    )
    p.add_argument("--out", default=None, help="JSON results path")
    p.add_argument("--reps", type=positive_int, default=5, help="timed repetitions per point (median)")
    p.add_argument("--seed", type=seed_int, default=0, help="the weights' and inputs' seed (default 0)")
    return p.parse_args(argv)


def default_out() -> Path:
    return Path(os.environ["OUT"]) / "gpu_check.json" if os.environ.get("OUT") else ROOT / "runs" / "gpu_check.json"


def sync(device):
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize()


def timed(fn, device, reps: int) -> float:
    """Median milliseconds of ``fn()`` after one warm-up call."""
    fn()
    times = []
    for _ in range(reps):
        sync(device)
        t = time.perf_counter()
        fn()
        sync(device)
        times.append((time.perf_counter() - t) * 1e3)
    return statistics.median(times)


def build_model(cfg: SDARConfig, device, dtype, seed: int) -> SDARModel:
    """Random weights made directly on ``device`` in ``dtype`` (normal, std initializer_range)."""
    model = build_on_meta(SDARModel, cfg).to(dtype).to_empty(device=device)
    g = torch.Generator(device=device).manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.fill_(1.0) if name.endswith("norm.weight") else p.normal_(0.0, cfg.initializer_range, generator=g)
    return model.eval()


def random_ids(shape, V: int, mask: int, g) -> torch.Tensor:
    ids = torch.randint(0, V, shape, generator=g)
    ids[ids == mask] = (mask + 1) % V
    return ids


def environment(args, dtype, cfg) -> dict:
    env = {
        "device": args.device,
        "torch": torch.__version__,
        "dtype": str(dtype),
        "smoke": args.smoke,
        "extension": spotref.EXTENSION,
    }
    if torch.device(args.device).type == "cuda":
        env.update(gpu=torch.cuda.get_device_name(), cuda=torch.version.cuda)
    B, V = 32, cfg.vocab_size
    env["noise_ms"] = {
        "cpu": timed(lambda: gumbel(1, 2, 3, B, V), "cpu", 3),
        "cpu_to_device": timed(lambda: gumbel(1, 2, 3, B, V).to(args.device), args.device, 3),
        "on_device": timed(lambda: gumbel(1, 2, 3, B, V, device=args.device), args.device, 3),
        "shape": [B, V],
    }
    if torch.device(args.device).type == "cuda":
        a, b = gumbel(1, 2, 3, B, V), gumbel(1, 2, 3, B, V, device=args.device).cpu()
        env["noise_ms"]["device_log_differs"] = int((a != b).sum())  # why the CPU defines it
    return env


def cost_curve(model, grid: dict, reps: int, g) -> list:
    """Rows {path, prefix, B, N, ms, ratio}: fixed width N, and the row-by-row pass."""
    rows, V, mask, dev = [], model.config.vocab_size, model.mask_id, model.lm_head.weight.device
    for prefix in grid["prefixes"]:
        for B in grid["blocks"]:
            model.config.block_size = B
            cache = model.prefill(random_ids((prefix,), V, mask, g).to(dev))
            for path, nodes in (("width", grid["nodes"]), ("rows", grid["rows_nodes"])):
                base = None
                for N in nodes:
                    states = random_ids((N, B), V, mask, g)
                    states[torch.rand(N, B, generator=g) < 0.5] = mask
                    ms = timed(lambda: model.denoise(cache, states, one_forward=path == "width"), dev, reps)
                    base = base or ms
                    rows.append(
                        {
                            "path": path,
                            "prefix": prefix,
                            "B": B,
                            "N": N,
                            "ms": round(ms, 3),
                            "ratio": round(ms / base, 3),
                        }
                    )

    return rows


def canvas_model(family: str, smoke: bool, device, dtype, seed: int):
    """A whole-canvas model of the family's real shape (tiny with ``smoke``), random weights made
    on ``device`` (norms 1, biases 0, the rest normal with std 0.02)."""
    cls, cfg_cls = (LLaDAModel, LLaDAConfig) if family == "llada" else (DreamModel, DreamConfig)
    fields = CANVAS_SMOKE[family] if smoke else (LLADA_8B if family == "llada" else DREAM_7B)
    model = build_on_meta(cls, cfg_cls(**fields)).to(dtype).to_empty(device=device)
    g = torch.Generator(device=device).manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name or "ln_f" in name:
                p.fill_(1.0)
            elif name.endswith("bias"):
                p.zero_()
            else:
                p.normal_(0.0, 0.02, generator=g)
    return model.eval()


def canvas_cost(args, grid: dict, dtype) -> dict:
    """Per family: {"curve": rows {path, N, L, ms, ratio}, "invariance": batch_invariance at the widest N}."""
    out, g = {}, torch.Generator().manual_seed(args.seed)
    for family in ("llada", "dream"):
        model = canvas_model(family, args.smoke, args.device, dtype, args.seed)
        W, L = max(grid["canvas_nodes"]), grid["canvas_len"]
        inv = batch_invariance(model, prefix_len=max(L - 2 * model.block_size, 0), rows=W, seed=args.seed, width=W)
        out[family] = {"curve": canvas_curve(model, grid, args, g), "invariance": inv}
        del model
        if torch.device(args.device).type == "cuda":
            torch.cuda.empty_cache()
    return out


def canvas_curve(model, grid: dict, args, g) -> list:
    """Rows {path, N, L, ms, ratio}: N canvases as one forward, and rows alone."""
    V, mask, L, rows = model.config.vocab_size, model.mask_id, grid["canvas_len"], []
    for path, nodes in (("width", grid["canvas_nodes"]), ("rows", grid["rows_nodes"])):
        base = None
        for N in nodes:
            ids = random_ids((N, L), V, mask, g).to(args.device)
            fn = (lambda: model(ids)) if path == "width" else (lambda: [model(ids[i : i + 1]) for i in range(N)])
            ms = timed(fn, args.device, args.reps)
            base = base or ms
            rows.append({"path": path, "N": N, "L": L, "ms": round(ms, 3), "ratio": round(ms / base, 3)})
    return rows


def invariance(model, grid: dict, seed: int) -> list:
    out = []
    for B, W in grid["inv"]:
        model.config.block_size = B
        out.append(batch_invariance(model, prefix_len=grid["inv_prefix"], rows=W, seed=seed, width=W))
    return out


def exactness(model, grid: dict, seed: int) -> dict:
    model.config.block_size = 32 if not model.config.vocab_size < 1000 else 4
    g = torch.Generator().manual_seed(seed)
    prompt = random_ids((grid["audit_prompt"],), model.config.vocab_size, model.mask_id, g).tolist()
    res = {}
    for T in (0.0, 1.0):
        r = audit(
            model,
            prompt,
            grid["audit_tokens"],
            drafter="confidence",
            temperature=T,
            seed=seed,
            budget=16,
            depth=8,
            width=16,
        )
        res[f"T={T:g}"] = {
            "identical": r.identical,
            "where": r.where,
            "exact_passes": r.exact_passes,
            "spot_passes": r.spec_passes,
        }
    res["identical"] = all(v["identical"] for v in res.values())
    return res


def run(model, prompt, n, stops, **kw) -> dict:
    r = spotref.generate(model, prompt, n, stop_ids=stops, **kw)
    return {"tokens": r.tokens, "passes": r.passes, "wall_s": r.stats["wall_s"]}


def gsm_speed(device, grid: dict) -> dict:
    """gsm-b32 on the device: rows summed over problems and T, per decoder and width."""
    target = load_target("gsm-b32")
    model, stops = target.model.to(device), target.stop_ids
    problems = [target.encode(p) for p, _ in target.heldout(grid["gsm_problems"], seed=1, split="test")]
    n = grid["gsm_tokens"]
    spotref.generate(model, problems[0], 32)  # warm-up
    totals = {}

    def add(key, r, ref=None):
        t = totals.setdefault(key, {"tokens": 0, "passes": 0, "wall_s": 0.0, "identical": True})
        t["tokens"] += len(r["tokens"])
        t["passes"] += r["passes"]
        t["wall_s"] += r["wall_s"]
        if ref is not None:
            t["identical"] &= r["tokens"] == ref["tokens"]

    for T in (0.0, 1.0):
        for prompt in problems:
            kw = dict(temperature=T, seed=3)
            rows = run(model, prompt, n, stops, **kw)
            add("exact rows", rows)
            for W in grid["widths"]:
                exact = run(model, prompt, n, stops, width=W, **kw)
                add(f"exact W={W}", exact, rows)  # identical to the row path: reported, not promised
                for d in DRAFTERS:
                    add(f"{d} N={W}", run(model, prompt, n, stops, drafter=d, budget=W, width=W, **kw), exact)
                if W == 16:
                    add(
                        "spot auto W=16",
                        run(model, prompt, n, stops, drafter="spot", budget="auto", width=W, **kw),
                        exact,
                    )
    base = totals["exact rows"]
    for t in totals.values():
        t["tok_per_s"] = round(t["tokens"] / t["wall_s"], 1)
        t["speedup_vs_exact_rows"] = round(t["tok_per_s"] / base["tok_per_s"], 3)
        t["pass_reduction"] = round(base["passes"] / t["passes"], 3)
        t["wall_s"] = round(t["wall_s"], 3)
    return {"problems": len(problems), "new_tokens": n, "temperatures": [0, 1], "runs": totals}


def projection(curve: list, gsm: dict, widths) -> dict:
    """SDAR-8B tokens/s ratio = (exact passes x t(1)) / (SPOT passes x t(W)), both measured."""
    t = {r["N"]: r["ms"] for r in curve if r["path"] == "width" and r["prefix"] == 512 and r["B"] == 32}
    runs = gsm.get("runs", {})
    exact = runs.get("exact rows")
    out = {}
    if not t or not exact:
        return {"skipped": "no curve at prefix 512, B 32, or no gsm run"}
    for W in widths:
        for d in DRAFTERS:
            r = runs.get(f"{d} N={W}")
            if r and W in t:
                out[f"{d} N={W}"] = round(exact["passes"] * t[1] / (r["passes"] * t[W]), 3)
    return {
        "t_ms": t,
        "speedup": out,
        "note": "pass costs of the SDAR-8B shape (prefix 512, B 32) "
        "times gsm-b32's measured passes; drafter and bookkeeping time not included",
    }


def main(argv=None) -> int:
    args = parse(argv)
    return guarded(PROG, lambda: check(args))


def check(args) -> int:
    """The phases in order, each saved to the JSON as it ends (``--out``, checked first)."""
    t0 = time.perf_counter()
    grid, cfg = (SMOKE, SMOKE_CONFIG) if args.smoke else (FULL, SDAR_8B)
    dtype = torch.float32 if args.smoke else torch.bfloat16
    out = check_writable(Path(args.out) if args.out else default_out())
    res = {}

    def save(phase, value):
        res[phase] = value
        res["wall_s"] = round(time.perf_counter() - t0, 1)
        atomic_write_text(out, json.dumps(res, indent=1, default=str) + "\n")  # directories created
        print(f"[{res['wall_s']:7.1f} s] {phase}: {json.dumps(value, default=str)[:1500]}", flush=True)

    save("env", environment(args, dtype, cfg))
    g = torch.Generator().manual_seed(args.seed)
    model = build_model(cfg, args.device, dtype, args.seed)
    save("curve", cost_curve(model, grid, args.reps, g))
    save("invariance", invariance(model, grid, args.seed))
    save("audit", exactness(model, grid, args.seed))
    del model
    if torch.device(args.device).type == "cuda":
        torch.cuda.empty_cache()
    save("gsm", gsm_speed(args.device, grid))
    save("projection", projection(res["curve"], res["gsm"], grid["widths"]))
    save("canvas", canvas_cost(args, grid, dtype))
    print(f"results: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
