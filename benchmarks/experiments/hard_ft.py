"""Issue 65 experiment (a research script, run from the repository root as
`python benchmarks/experiments/hard_ft.py gsm-b32 1500 3e-4 16`).

Fine-tune gsm-b32's order model with half of each batch drawn from the
states SPOT's rounds start at (simulated on the training trajectories), the deployment
distribution; compare offline commits per round on held-out trajectories."""

import copy
import sys
import time

import numpy as np
import torch

sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[2]))  # a checkout
sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[1]))  # order_gap
from order_gap import rounds  # noqa: E402

from spotref.drafters.spot import SpotDrafter
from spotref.load.drafters import ORDER_DIR, load_order_model
from spotref.load.targets import load_target
from spotref.record import trajectories as tj
from spotref.record.prompts import TrajectorySpec, recorded
from spotref.train.train_drafter import batch, loss_fn

torch.set_num_threads(1)
name, STEPS, LR, NSTART = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4])
target = load_target(name)
model, header = load_order_model(ORDER_DIR / f"{name}.pt")
spec = TrajectorySpec("runs/drafter-data", 80, 16, 0, 64, 128, 1)
train = {T: recorded(target, spec, "train", T) for T in (0.0, 1.0)}
test = {T: recorded(target, spec, "test", T) for T in (0.0, 1.0)}


def starts(spot, ds, N=NSTART, D=32):
    """The row indices SPOT's rounds start at along ``ds``."""
    return np.array([i for i, _, _, _ in rounds(spot, ds, N, D, limit=10**9)])


def simulate(spot, ds, N, D=32, limit=400):
    """Mean commits per round of ``spot`` (``order_gap.rounds``)."""
    return float(np.mean([min(got + 1, len(r.fut_sets())) for _, r, _, got in rounds(spot, ds, N, D, limit)]))


t0 = time.time()
base = SpotDrafter(model, header)
hard = {T: starts(base, ds) for T, ds in train.items()}
print({T: len(v) for T, v in hard.items()}, f"round starts ({time.time() - t0:.0f}s)", flush=True)
new = copy.deepcopy(model)
opt = torch.optim.AdamW(new.parameters(), lr=LR, weight_decay=0.01)
rng = np.random.default_rng(0)
parts = list(train.items())
for step in range(STEPS):
    lr = LR * min(1.0, (step + 1) / 50) * 0.5 * (1 + np.cos(np.pi * step / STEPS))
    for g in opt.param_groups:
        g["lr"] = lr
    T, ds = parts[step % 2]
    rows, depths = tj.teacher_sample(ds, 64, 12, rng)
    h = rng.choice(hard[T], 32)  # half the batch: round starts, teacher-forced depths as the rest
    left = ds.arrays["fut_when"][h].max(1).astype(np.int64) + 1
    hd = (rng.random(32) ** 2 * np.minimum(left, 13)).astype(np.int64)
    rows, depths = np.concatenate([rows[:32], h]), np.concatenate([depths[:32], hd])
    new.train()
    loss, acc = loss_fn(new, *batch(ds, rows, depths))
    opt.zero_grad()
    loss.backward()
    torch.nn.utils.clip_grad_norm_(new.parameters(), 1.0)
    opt.step()
    if step % 250 == 0:
        print(f"step {step} loss {loss.item():.3f} acc {acc.item():.3f} ({time.time() - t0:.0f}s)", flush=True)
new.eval()
tuned = SpotDrafter(new, header)
for T, ds in test.items():
    for N in (4, 8, 16, 64):
        a, b = simulate(base, ds, N), simulate(tuned, ds, N)
        print(f"T={T:g} N={N}: shipped {a:.3f}  round-start tuned {b:.3f} ({time.time() - t0:.0f}s)", flush=True)
