"""The cost of one verify pass of N states in each family on this CPU: SDAR's block-causal pass
(N block states over a prefix KV cache) beside a whole-canvas pass (N canvases, LLaDA and Dream),
at gsm-b32's shape (4 layers, hidden 192, vocabulary 1024), random bf16 weights, one thread.
Each pass is timed rows alone (N forwards) and as one forward of N rows (a fixed width); the
median of repeated passes; ratios from one run.

    python benchmarks/canvas_cost.py --out runs/canvas-cost.json      # about 2 minutes
"""

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout

import torch  # noqa: E402

from spotref.cli.argtypes import guarded, int_list, positive_int  # noqa: E402
from spotref.configs import (
    DreamConfig,  # noqa: E402
    LLaDAConfig,  # noqa: E402
    SDARConfig,  # noqa: E402
)
from spotref.files import atomic_write_text, check_writable  # noqa: E402
from spotref.spec.dream import DreamModel  # noqa: E402
from spotref.spec.llada import LLaDAModel  # noqa: E402
from spotref.spec.sdar import SDARModel  # noqa: E402
from workbench.bench.timing import median_ms  # noqa: E402

V, H, I, LAYERS, HEADS, KV, B = 1024, 192, 512, 4, 6, 2, 32  # gsm-b32's shape


def models() -> dict:
    torch.manual_seed(0)
    sdar = SDARModel(SDARConfig(vocab_size=V, hidden_size=H, intermediate_size=I, num_hidden_layers=LAYERS,
                                num_attention_heads=HEADS, num_key_value_heads=KV, head_dim=H // HEADS,
                                mask_token_id=1, block_size=B))  # fmt: skip
    llada = LLaDAModel(LLaDAConfig(d_model=H, n_heads=HEADS, n_kv_heads=KV, n_layers=LAYERS, mlp_hidden_size=I,
                                   vocab_size=V, embedding_size=V, mask_token_id=1,
                                   max_sequence_length=4096))  # fmt: skip
    dream = DreamModel(DreamConfig(hidden_size=H, intermediate_size=I, num_hidden_layers=LAYERS,
                                   num_attention_heads=HEADS, num_key_value_heads=KV, vocab_size=V, mask_token_id=1,
                                   pad_token_id=0, bos_token_id=0, eos_token_id=0,
                                   max_position_embeddings=4096))  # fmt: skip
    return {name: m.to(torch.bfloat16).eval() for name, m in (("sdar", sdar), ("llada", llada), ("dream", dream))}


def pass_fn(name: str, model, N: int, P: int, G: int, one_forward: bool):
    """A verify pass of N states: SDAR over a cache of P tokens (the prompt and the generated
    blocks before the current one), a canvas family over P + G tokens."""
    g = torch.Generator().manual_seed(N)
    if name == "sdar":
        cache = model.prefill(torch.randint(2, V, (P,), generator=g))
        states = torch.randint(2, V, (N, B), generator=g)
        if one_forward:
            return lambda: model.denoise(cache, states, one_forward=True)
        return lambda: [model.denoise(cache, states[i : i + 1]) for i in range(N)]
    canvases = torch.randint(2, V, (N, P + G), generator=g)
    if one_forward:
        return lambda: model(canvases)
    return lambda: [model(canvases[i : i + 1]) for i in range(N)]


PROG = "python benchmarks/canvas_cost.py"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog=PROG, description=__doc__.splitlines()[0])
    p.add_argument("--out", default="runs/canvas-cost.json", help="the JSON results file")
    p.add_argument("--prompt", type=positive_int, default=96, help="P: the context before the current block")
    p.add_argument("--gen", type=positive_int, default=256, help="G: the generated region of a canvas")
    p.add_argument("--budgets", type=int_list(1), default=[1, 4, 16, 64], help="N: states per verify pass")
    p.add_argument("--reps", type=positive_int, default=5, help="timed passes per cell (the median)")
    a = p.parse_args(argv)
    return guarded(PROG, lambda: measure(a))


def measure(a) -> int:
    """Every family's pass costs, printed as a table and written to ``--out`` (checked first)."""
    out = check_writable(a.out)
    torch.set_num_threads(1)
    rows, budgets = [], a.budgets
    with torch.no_grad():
        for name, model in models().items():
            for one_forward in (False, True):
                t = {N: median_ms(pass_fn(name, model, N, a.prompt, a.gen, one_forward), a.reps) for N in budgets}
                rows.append({"family": name, "one_forward": one_forward, "ms": t})
                print(f"{name:6s} {'one forward' if one_forward else 'rows alone'}: "
                      + ", ".join(f"t({N}) {t[N]:.1f} ms" for N in budgets), flush=True)  # fmt: skip
    print("\n| family | pass | " + " | ".join(f"t({N}) ms" for N in budgets) + " | t(16) / t(1) | t(1) / SDAR's t(1) |")
    print("|---" * (len(budgets) + 4) + "|")
    base = {r["one_forward"]: r["ms"][budgets[0]] for r in rows if r["family"] == "sdar"}
    for r in rows:
        t, kind = r["ms"], "one forward" if r["one_forward"] else "rows alone"
        ratio = t[16] / t[budgets[0]] if 16 in t else float("nan")
        cells = " | ".join(f"{t[N]:.1f}" for N in budgets)
        print(f"| {r['family']} | {kind} | {cells} | {ratio:.2f} | {t[budgets[0]] / base[r['one_forward']]:.2f} |")
    atomic_write_text(out, json.dumps({"args": vars(a), "rows": rows}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
