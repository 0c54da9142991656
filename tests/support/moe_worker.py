"""A row of a pass through SDAR-MoE, against the same row among other rows (docs/spec.md section 4):
run by tests/exactness/test_moe.py under each CPU capability level (torch reads it once per
process). Prints one JSON line: the capability, the comparisons made and those that differed.

    python moe_worker.py            # spotref's per-row routing: no row may differ
    python moe_worker.py --naive    # experts grouped over the whole pass: rows differ
"""

import json
import sys

import torch

from spotref.configs import SDARMoEConfig
from spotref.spec.sdar_moe import SDARMoEModel, SparseMoE


def grouped_over_the_pass(self, x):
    """The MoE with every row's tokens grouped per expert (an engine's fused MoE): the naive way."""
    N, L, H = x.shape
    flat = x.reshape(N * L, H)
    weights, experts = self.route(flat)
    out = torch.zeros_like(flat)
    for e in torch.unique(experts).tolist():
        slot, token = torch.where(experts.T == e)
        out.index_add_(0, token, (self.experts[e](flat[token]) * weights[token, slot, None]).to(out.dtype))
    return out.view(N, L, H)


def model(dtype, hidden: int, inter: int, B: int) -> SDARMoEModel:
    torch.manual_seed(0)
    cfg = SDARMoEConfig(
        vocab_size=61, hidden_size=hidden, intermediate_size=40, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, head_dim=16, mask_token_id=60, block_size=B, num_experts=8,
        num_experts_per_tok=2, moe_intermediate_size=inter, norm_topk_prob=True, initializer_range=0.5,
    )  # fmt: skip
    return SDARMoEModel(cfg).to(dtype)


def main() -> None:
    if "--naive" in sys.argv:
        SparseMoE.forward = grouped_over_the_pass
    checked, failures = 0, []
    for threads in (1, 2):
        torch.set_num_threads(threads)
        for dtype in (torch.float32, torch.bfloat16, torch.float16):
            for hidden, inter, B in ((32, 16, 4), (64, 40, 7)):
                m = model(dtype, hidden, inter, B)
                cache = m.prefill(torch.arange(2 * B) % 60)
                g = torch.Generator().manual_seed(hidden + B)
                for W in (2, 5):
                    rows = torch.randint(0, 61, (W, B), generator=g)
                    other = torch.cat([rows[:1], torch.randint(0, 61, (W - 1, B), generator=g)])
                    moved = torch.cat([other[1:], rows[:1]])  # the row last, among others
                    a = m.denoise(cache, rows, one_forward=True)[0]
                    for b in (m.denoise(cache, other, one_forward=True)[0], m.denoise(cache, moved, True)[-1]):
                        checked += 1
                        if not torch.equal(a, b):
                            failures.append(dict(threads=threads, dtype=str(dtype), hidden=hidden, width=W))
    cap = torch.backends.cpu.get_cpu_capability()
    print(json.dumps(dict(capability=cap, checked=checked, failures=failures)))


if __name__ == "__main__":
    main()
