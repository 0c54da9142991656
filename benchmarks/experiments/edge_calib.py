"""Issue 65 experiment (a research script, run from the repository root as
`python benchmarks/experiments/edge_calib.py gsm-b32`).

Does calibrating SPOT's edge probabilities (isotonic, fit on training
trajectories) change the tree and the offline commits per round at N = 4..64?"""

import sys
import time

import numpy as np

sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[2]))  # a checkout
sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[1]))  # order_gap
from order_gap import rounds  # noqa: E402

from spotref.drafters.spot import SpotDrafter
from spotref.load.drafters import ORDER_DIR, load_order_model
from spotref.load.targets import load_target
from spotref.record import trajectories as tj
from spotref.record.prompts import TrajectorySpec, recorded

name = sys.argv[1] if len(sys.argv) > 1 else "gsm-b32"
NTRAIN = int(sys.argv[2]) if len(sys.argv) > 2 else 80
target = load_target(name)
model, header = load_order_model(ORDER_DIR / f"{name}.pt")
spec = TrajectorySpec("runs/drafter-data", NTRAIN, 16, 0, 64, 128, 1)


class Logged(SpotDrafter):
    def __init__(self, model, header, f=None):
        super().__init__(model, header)
        self.f = f

    def options(self, inp, states, steps, marks, limit):
        out = super().options(inp, states, steps, marks, limit)
        if self.f is None:
            return out
        return [[(float(self.f(v)), cs) for v, cs in opts] for opts in out]


def edges(spot, ds, N=64, D=32, limit=600):
    """(edge prob, child reached) for every node whose parent was reached."""
    xs, ys = [], []
    for _, r, tree, _ in rounds(spot, ds, N, D, limit):
        hit = tj.reached(tree, r)
        for k in range(1, len(tree.parents)):
            p = tree.parents[k]
            if hit[p] and tree.probs[p] > 0:
                xs.append(tree.probs[k] / tree.probs[p])
                ys.append(hit[k])
    return np.array(xs), np.array(ys, dtype=float)


def isotonic(x, y, bins=40):
    """A monotone map fit by pooling adjacent violators over quantile bins of x."""
    order = np.argsort(x)
    x, y = x[order], y[order]
    cuts = np.array_split(np.arange(len(x)), bins)
    bx = [x[c].mean() for c in cuts if len(c)]
    by = [y[c].mean() for c in cuts if len(c)]
    bw = [len(c) for c in cuts if len(c)]
    vals, ws, xsb = [], [], []
    for a, b, w in zip(bx, by, bw):
        vals.append(b)
        ws.append(w)
        xsb.append([a])
        while len(vals) > 1 and vals[-2] > vals[-1]:
            v = (vals[-2] * ws[-2] + vals[-1] * ws[-1]) / (ws[-2] + ws[-1])
            w2 = ws[-2] + ws[-1]
            xx = xsb[-2] + xsb[-1]
            vals[-2:], ws[-2:], xsb[-2:] = [v], [w2], [xx]
    kx = np.array([np.mean(g) for g in xsb])
    ky = np.clip(np.array(vals), 1e-6, 1)
    return lambda v: float(np.interp(v, kx, ky)), list(zip(kx.round(4).tolist(), ky.round(4).tolist()))


def simulate(spot, ds, N, D=32, limit=400):
    """Mean commits per round of ``spot`` and of the oracle order (``order_gap.rounds``)."""
    got, orc = [], []
    for _, r, _, g in rounds(spot, ds, N, D, limit):
        n = len(r.fut_sets())
        got.append(min(g + 1, n)), orc.append(min(r.accepted_prefix(min(N - 1, D)) + 1, n))
    return np.mean(got), np.mean(orc)


for T in (0.0, 1.0):
    t0 = time.time()
    train = recorded(target, spec, "train", T)
    test = recorded(target, spec, "test", T)
    base = Logged(model, header)
    x, y = edges(base, train)
    f, table = isotonic(x, y)
    print(f"T={T:g}: {len(x)} edges; fit {table}", flush=True)
    cal = Logged(model, header, f)
    for N in (4, 8, 16, 64):
        a, o = simulate(base, test, N)
        b, _ = simulate(cal, test, N)
        print(
            f"T={T:g} N={N}: spot {a:.3f}  calibrated-edges {b:.3f}  oracle {o:.3f}  ({time.time() - t0:.0f}s)",
            flush=True,
        )
