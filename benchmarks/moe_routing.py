"""How a mixture-of-experts target routes: each expert's share of the tokens, per sparse layer.

Decodes the target's first held-out problems exactly (T = 0, its default precision) and counts,
over every pass the decoder runs, the token-expert assignments of each router (a token routed to
k experts counts once at each). An expert's share is its assignments over the tokens routed in
that layer: with k experts per token the shares sum to k. Issue 64's bar for a bundled MoE
target: every expert between 5% and 60%.

    python benchmarks/moe_routing.py gsm-moe [--problems 20] [--new-tokens 160]

Prints a table; docs/results-families.md records a run. Nothing is written.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout
import spotref  # noqa: E402
from spotref.cli.argtypes import guarded, positive_int  # noqa: E402
from spotref.cli.report import table  # noqa: E402
from spotref.load.targets import TARGETS_DIR, list_targets, load_target  # noqa: E402
from spotref.spec.llada2 import Gate  # noqa: E402
from spotref.spec.sdar_moe import SparseMoE  # noqa: E402
from workbench.bench import quality_math  # noqa: E402

PROG = "python benchmarks/moe_routing.py"


def routers(model) -> list:
    """(layer index, the module whose call returns (weights, experts)) of each sparse layer."""
    out = []
    for i, layer in enumerate(model.model.layers):
        mlp = layer.mlp
        if isinstance(mlp, SparseMoE):
            out.append((i, mlp, "route", mlp.gate.out_features))
        elif hasattr(mlp, "gate") and isinstance(mlp.gate, Gate):
            out.append((i, mlp.gate, "forward", mlp.gate.weight.shape[0]))
    return out


def counted(model) -> dict:
    """Wraps every router of ``model`` to count its assignments; returns {layer: counts (E,)}."""
    counts = {}
    for i, module, name, E in routers(model):
        counts[i] = torch.zeros(E)
        real = getattr(module, name)

        def wrapped(x, real=real, c=counts[i]):
            w, e = real(x)
            c.index_add_(0, e.flatten().cpu(), torch.ones(e.numel()))
            return w, e

        setattr(module, name, wrapped)
    return counts


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog=PROG, description=__doc__.splitlines()[0])
    ap.add_argument("target", help="a bundled mixture-of-experts target")
    ap.add_argument("--problems", type=positive_int, default=20)
    ap.add_argument("--new-tokens", type=positive_int, default=160)
    ap.add_argument("--targets-dir", default=TARGETS_DIR, help="read the target from here (default: bundled)")
    args = ap.parse_args(argv)
    if args.target not in list_targets(args.targets_dir):
        ap.error(f"unknown target {args.target!r} in {args.targets_dir}: {', '.join(list_targets(args.targets_dir))}")
    return guarded(PROG, lambda: measure(args))


def measure(args) -> int:
    target = load_target(args.target, args.targets_dir)
    if not routers(target.model):
        raise ValueError(f"{args.target} has no mixture-of-experts layer")
    counts = counted(target.model)
    for p in quality_math.problems_of(target, args.problems):
        spotref.generate(target.model, target.encode(p.prompt), args.new_tokens, stop_ids=target.stop_ids)
    rows = []
    for i, c in counts.items():
        tokens = c.sum() / routed_k(target.model, i)  # each token routed routed_k times
        share = c / tokens
        rows.append([i, int(tokens), f"{float(share.min()):.1%}", f"{float(share.max()):.1%}",
                     " ".join(f"{float(s):.0%}" for s in share)])  # fmt: skip
    print(table(["layer", "tokens", "least", "most", "each expert's share"], rows))
    return 0


def routed_k(model, layer: int) -> int:
    """Experts per token of ``layer``'s router."""
    mlp = model.model.layers[layer].mlp
    return mlp.k if isinstance(mlp, SparseMoE) else mlp.gate.k


if __name__ == "__main__":
    raise SystemExit(main())
