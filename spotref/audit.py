"""The exactness audit: does speculative decoding on this model, on this hardware, give the tokens
of exact decoding? (docs/spec.md section 4.)

SPOT is lossless only if a state's logits do not depend on which other states share its verify
batch. spotref's model runs a pass's rows each alone, or at a fixed width as one forward of one
shape (``spotref.spec.sdar``), so a row of a batched denoise is bit-identical to the same state run
alone (at that width); another model implementation (a serving engine's batched kernels, which may
pick another algorithm, tile shape or split-K for another batch size) may not be, and then a
near-tie can flip. The kernel path matters, so every report names it (``kernel_path``).
Two checks, both cheap next to a benchmark:

* ``audit``: exact decoding and speculative decoding side by side, same prompt, same settings;
  reports "identical" or the first divergence (block, step, position, both tokens);
* ``batch_invariance``: the direct cause, N random states of one block denoised as one batch
  and each alone, compared with ``torch.equal``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import torch

from spotref.api import check_width, generate
from spotref.conformance import first_divergence
from spotref.spec.decode import CANVAS_FAMILIES, family, padded

WHERE = re.compile(r"block (\d+), step (\d+), position (\d+): exact (\d+), got (\d+|nothing)")


@dataclass
class AuditReport:
    identical: bool
    where: str | None  # first_divergence's text, None when identical
    block: int | None = None
    step: int | None = None
    position: int | None = None  # in the block
    exact_token: int | None = None
    got_token: int | None = None  # None: the speculative output stopped before it
    exact_tokens: list | None = None
    spec_tokens: list | None = None
    exact_passes: int = 0
    spec_passes: int = 0
    drafter: str = ""

    def __str__(self) -> str:
        runs = (
            f"{len(self.exact_tokens or [])} tokens; exact {self.exact_passes} passes, "
            f"{self.drafter} {self.spec_passes} passes"
        )
        if self.identical:
            return f"identical ({runs})"
        return f"diverged at {self.where} ({runs})"


def audit(model, prompt_ids, max_new_tokens: int, drafter="confidence", **generate_kwargs) -> AuditReport:
    """Exact decoding beside speculative decoding with ``drafter``; the first divergence."""
    if drafter is None:
        raise ValueError("audit compares a drafter with exact decoding: drafter must not be None")
    exact = generate(model, prompt_ids, max_new_tokens, drafter=None, **generate_kwargs)
    spec = generate(model, prompt_ids, max_new_tokens, drafter=drafter, **generate_kwargs)
    bl = generate_kwargs.get("block_length") or model.block_size  # a canvas family's blocks, k from 0
    where = first_divergence(exact, spec.tokens, bl, len(list(prompt_ids)), family(model))
    report = AuditReport(
        where is None,
        where,
        exact_tokens=exact.tokens,
        spec_tokens=spec.tokens,
        exact_passes=exact.passes,
        spec_passes=spec.passes,
        drafter=drafter if isinstance(drafter, str) else type(drafter).__name__,
    )
    m = WHERE.match(where or "")
    if m:
        report.block, report.step, report.position, report.exact_token = map(int, m.groups()[:4])
        report.got_token = None if m.group(5) == "nothing" else int(m.group(5))
    return report


def kernel_path(device=None) -> str:
    """The kernels a forward runs on: the CPU capability level (``ATEN_CPU_CAPABILITY``) and the
    thread count, or the CUDA device's name."""
    device = torch.device(device or "cpu")
    if device.type == "cuda":
        return f"cuda {torch.cuda.get_device_name(device)}"
    return f"cpu {torch.backends.cpu.get_cpu_capability()}, {torch.get_num_threads()} threads"


@torch.no_grad()
def batch_invariance(
    model, prefix_len: int = 0, rows: int = 8, seed: int = 0, fused: bool = False, width: int | None = None
) -> dict:
    """Row i of one batched denoise vs the same state alone, bit for bit (a whole-canvas model:
    ``canvas_invariance``). ``width``: the pass runs at that fixed width (rows <= width, padded as a
    ``Block`` pads, ``spotref.spec.decode.padded``; ``SDARModel.denoise(..., one_forward=True)``); row i
    is then compared with the same state alone at that width and with the batch rolled by rows // 2.
    A random prefix of ``prefix_len`` tokens (complete blocks) is prefilled; ``rows`` random
    states of the next block (random tokens, about half MASK) are denoised together and one by
    one. ``fused``: the batch is a fused store pass (``store_and_denoise`` of a random finished
    block, then the states), each row compared with ``store`` then the row alone. Returns the
    number of rows, how many are bit-identical, the first row that is not, the largest absolute
    logit difference and the kernel path."""
    if family(model) in CANVAS_FAMILIES or family(model) == "llada2":
        return canvas_invariance(model, prefix_len, rows, seed, width)
    B, V, mask = model.block_size, model.config.vocab_size, model.mask_id
    if prefix_len % B:
        raise ValueError(f"prefix_len {prefix_len} must be a multiple of the block size {B}")
    width = check_width(width, rows)
    g = torch.Generator().manual_seed(seed)
    tokens = torch.randint(0, V, (prefix_len + (rows + 1) * B,), generator=g)
    tokens[tokens == mask] = (mask + 1) % V
    cache = model.prefill(tokens[:prefix_len])
    block, states = tokens[prefix_len : prefix_len + B], tokens[prefix_len + B :].view(rows, B)  # (N, B)
    states[torch.rand(rows, B, generator=g) < 0.5] = mask
    kw = {} if width is None else {"one_forward": True}

    def pass_of(s):  # s: (n, B) states -> the pass's rows: (width, B), or (n, B) rows alone
        return torch.from_numpy(padded(s.numpy(), width))

    def denoise(s):  # s: (n, B) -> logits (n, B, V)
        return model.denoise(cache, pass_of(s), **kw)[: len(s)]

    if fused:
        batched = model.store_and_denoise(cache, block, pass_of(states), **kw)[:rows]  # (N, B, V); cache grows
    else:
        batched = denoise(states)  # (N, B, V)
    shift = rows // 2
    rolled = None if width is None else denoise(states.roll(shift, 0)).roll(-shift, 0)
    others = [[denoise(states[i : i + 1])[0]] + ([] if rolled is None else [rolled[i]]) for i in range(rows)]
    return {
        **agreement(batched, others),
        "prefix_len": prefix_len,
        "block_size": B,
        "fused": fused,
        "width": width,
        "kernel_path": kernel_path(device_of(model)),
    }


def canvas_invariance(model, prefix_len: int, rows: int, seed: int, width: int | None) -> dict:
    """``batch_invariance`` for a whole-canvas family (LLaDA, Dream): ``rows`` random canvases of
    ``prefix_len`` + 2 blocks (about half MASK), run as one forward of the pass's rows (padded to
    ``width`` as a ``Block`` pads) vs each alone and the batch rolled by rows // 2. LLaDA2: windows
    of ``prefix_len`` + 1 block, the last block's logits (``model.window``), the same comparisons."""
    if prefix_len < 0:
        raise ValueError(f"prefix_len must be >= 0, got {prefix_len}")
    width, window = check_width(width, rows), family(model) == "llada2"  # LLaDA2: windows, last block decided
    if window and prefix_len % model.block_size:
        raise ValueError(f"prefix_len {prefix_len} must be a multiple of the block size {model.block_size}")
    L, V, mask = prefix_len + (1 if window else 2) * model.block_size, model.config.vocab_size, model.mask_id
    g = torch.Generator().manual_seed(seed)
    canvases = torch.randint(0, V, (rows, L), generator=g)  # (N, L)
    canvases[(torch.rand(rows, L, generator=g) < 0.5) | (canvases == mask)] = mask

    def forward(c):  # c: (n, L) -> logits (n, L or B, V) of one forward of the pass's rows
        ids = torch.from_numpy(padded(c.numpy(), width))
        return (model.window(ids, one_forward=width is not None) if window else model(ids))[: len(c)]

    batched, shift = forward(canvases), rows // 2
    others = [[forward(canvases[i : i + 1])[0]] for i in range(rows)]
    if width is not None:
        rolled = forward(canvases.roll(shift, 0)).roll(-shift, 0)
        others = [o + [rolled[i]] for i, o in enumerate(others)]
    return {**agreement(batched, others), "prefix_len": prefix_len, "block_size": model.block_size, "fused": False,
            "width": width, "kernel_path": kernel_path(device_of(model))}  # fmt: skip


def agreement(batched: torch.Tensor, others: list) -> dict:
    """Row i of ``batched`` against each tensor of ``others[i]``, bit for bit: the number of rows,
    how many agree, the first that does not, the largest absolute difference."""
    same = [all(torch.equal(batched[i], o) for o in row) for i, row in enumerate(others)]
    worst = max((batched[i].float() - o.float()).abs().max().item() for i, row in enumerate(others) for o in row)
    first_bad = next((i for i, ok in enumerate(same) if not ok), None)
    return {"rows": len(others), "equal_rows": sum(same), "first_bad_row": first_bad, "max_abs_diff": worst}


def device_of(model) -> torch.device:
    """The device a model's parameters live on."""
    return next(model.parameters()).device
