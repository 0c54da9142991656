"""A row of a pass through SDAR-MoE, against the same row among other rows (docs/spec.md section 4):
run by tests/exactness/test_moe.py under each CPU capability level (torch reads it once per
process). Prints one JSON line: the capability, the comparisons made and those that differed.

    python moe_worker.py            # spotref's per-row routing: no row may differ
    python moe_worker.py --naive    # experts grouped over the whole pass: rows differ
    python moe_worker.py --llada2 [--naive]   # the same on LLaDA2's body, windows from position 0
"""

import json
import sys

import torch

from spotref.configs import SDARMoEConfig
from spotref.configs_llada2 import LLaDA2Config
from spotref.spec.llada2 import LLaDA2Model, MoE
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


def llada2_grouped_over_the_pass(self, x):
    """LLaDA2's MoE as its ``moe_infer`` runs it: every row's tokens grouped per expert."""
    N, L, H = x.shape
    flat = x.reshape(N * L, H)
    w, experts = self.gate(flat)
    out = flat.new_zeros(*experts.shape, H)
    for e in torch.unique(experts).tolist():
        token, slot = torch.where(experts == e)
        out[token, slot] = self.experts[e](flat[token][None])[0]
    y = (out.float() * w[..., None]).sum(1).to(x.dtype).view(N, L, H)
    return y + self.shared_experts(x)


def llada2_model(dtype, hidden: int, inter: int, B: int) -> LLaDA2Model:
    torch.manual_seed(0)
    cfg = LLaDA2Config(
        vocab_size=61, hidden_size=hidden, intermediate_size=40, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, head_dim=16, mask_token_id=60, block_size=B, num_experts=8, n_group=4, topk_group=2,
        num_experts_per_tok=3, moe_intermediate_size=inter, first_k_dense_replace=1, initializer_range=0.5,
    )  # fmt: skip
    m = LLaDA2Model(cfg)
    m.model.layers[1].mlp.gate.expert_bias.normal_(0, 0.3, generator=torch.Generator().manual_seed(1))
    return m.to(dtype)


def llada2_windows(m, g, B):
    """Row 0's window among W windows of one prefix (others and moved last): (a, [b, ...]) at width W."""
    prefix = torch.randint(0, 61, (2 * B,), generator=g)

    def at(W):
        block = torch.randint(0, 61, (W, B), generator=g)
        rows = torch.cat([prefix.repeat(W, 1), block], 1)  # (W, 3B): the windows
        other = torch.cat([rows[:1], torch.cat([prefix.repeat(W - 1, 1), block[1:].flip(0)], 1)])
        other[1:, -B:] = torch.randint(0, 61, (W - 1, B), generator=g)
        moved = torch.cat([other[1:], rows[:1]])
        a = m.window(rows, one_forward=True)[0]
        return a, [m.window(other, one_forward=True)[0], m.window(moved, one_forward=True)[-1]]

    return at


def model(dtype, hidden: int, inter: int, B: int) -> SDARMoEModel:
    torch.manual_seed(0)
    cfg = SDARMoEConfig(
        vocab_size=61, hidden_size=hidden, intermediate_size=40, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, head_dim=16, mask_token_id=60, block_size=B, num_experts=8,
        num_experts_per_tok=2, moe_intermediate_size=inter, norm_topk_prob=True, initializer_range=0.5,
    )  # fmt: skip
    return SDARMoEModel(cfg).to(dtype)


def sdar_moe_states(m, g, B):
    """Row 0's block state among W states over one prefix cache (others and moved last)."""
    cache = m.prefill(torch.arange(2 * B) % 60)

    def at(W):
        rows = torch.randint(0, 61, (W, B), generator=g)
        other = torch.cat([rows[:1], torch.randint(0, 61, (W - 1, B), generator=g)])
        moved = torch.cat([other[1:], rows[:1]])  # the row last, among others
        a = m.denoise(cache, rows, one_forward=True)[0]
        return a, [m.denoise(cache, other, one_forward=True)[0], m.denoise(cache, moved, True)[-1]]

    return at


def sweep(build, passes) -> None:
    """Every thread count, dtype and size: ``passes(model, generator, B)(W)`` -> (row 0, its
    other readings) at widths 2 and 5, compared bit for bit; prints the JSON line."""
    checked, failures = 0, []
    for threads in (1, 2):
        torch.set_num_threads(threads)
        for dtype in (torch.float32, torch.bfloat16, torch.float16):
            for hidden, inter, B in ((32, 16, 4), (64, 40, 7)):
                m = build(dtype, hidden, inter, B)
                at = passes(m, torch.Generator().manual_seed(hidden + B), B)
                for W in (2, 5):
                    a, others = at(W)
                    for b in others:
                        checked += 1
                        if not torch.equal(a, b):
                            failures.append(dict(threads=threads, dtype=str(dtype), hidden=hidden, width=W))
    cap = torch.backends.cpu.get_cpu_capability()
    print(json.dumps(dict(capability=cap, checked=checked, failures=failures)))


def main() -> None:
    naive = "--naive" in sys.argv
    if "--llada2" in sys.argv:
        if naive:
            MoE.forward = llada2_grouped_over_the_pass
        return sweep(llada2_model, llada2_windows)
    if naive:
        SparseMoE.forward = grouped_over_the_pass
    sweep(model, sdar_moe_states)


if __name__ == "__main__":
    main()
