"""SPOT around transformers' ``Qwen3ForCausalLM``: the caller owns model, cache and loop.

SDAR is a Qwen3 trained for block diffusion, with Qwen3's weight names, so transformers'
``Qwen3ForCausalLM`` loads an SDAR checkpoint directory as it is. Decoding it needs two things
more: SDAR's block-causal 4D attention mask (a position sees every position of its own block and
of the blocks before it) and no logit shift (the logits at position i predict position i). This
file is the whole caller's side of spotref's step API (docs/spec.md section 7), with none of spotref's
model code:

1. prefill the complete prompt blocks into transformers' own ``DynamicCache``;
2. per block: ``blk = spec.block(index, state)``; until ``blk.done``: ``rows = blk.propose()``
   (R block states), one forward of the R rows, each over its own copy of the prefix cache and
   bidirectional within the block, then ``blk.accept(logits)``;
3. store the finished block in the cache with one more forward.

The tokens are those of exact decoding with this model whatever the drafter, provided the
forward is batch invariant (a row's logits do not depend on the other rows; check your hardware
with ``spotref audit``). ``tests/checkpoints/test_transformers_example.py`` checks identical tokens to
``spotref.generate`` on the same checkpoint in float32: on the CPUs tested, transformers' eager
forward and spotref's give bit-identical logits (docs/checkpoints.md). Where they do not, a near
tie may break differently between the two implementations (never between SPOT and exact
decoding of one model); compare both in float64 then.

    python examples/transformers_spot.py CHECKPOINT_DIR --prompt-ids 1,2,3 --new 32
"""

import argparse
import copy
import inspect
import json
from pathlib import Path

import numpy as np
import torch
import transformers

import spotref
import spotref.checks


def load(path, dtype=torch.float32):
    """A Qwen3ForCausalLM from an SDAR checkpoint directory -> (model, block_size, mask_id,
    precision): the last is the dtype the checkpoint is served in (its config's ``torch_dtype``),
    which SDAR's decoder decides in whatever ``dtype`` the weights are loaded in here."""
    c = json.loads((Path(path) / "config.json").read_text())
    cfg = transformers.Qwen3Config(
        **{
            k: v
            for k, v in c.items()  # SDAR's keys are Qwen3's
            if k not in ("model_type", "architectures", "auto_map")
        }
    )
    model = transformers.Qwen3ForCausalLM.from_pretrained(  # eager: SDAR's config says flex
        path, config=cfg, attn_implementation="eager", dtype=dtype
    )
    served = c.get("torch_dtype") or c.get("dtype") or "auto"
    return model.eval(), c["block_size"], c["mask_token_id"], served


def block_causal(start: int, L: int, B: int, N: int, dtype) -> torch.Tensor:
    """(N, 1, L, start + L) additive mask: query i sees key j iff block(j) <= block(i)."""
    q = (start + torch.arange(L)) // B
    k = torch.arange(start + L) // B
    mask = torch.where(k[None, :] <= q[:, None], 0.0, torch.finfo(dtype).min).to(dtype)
    return mask.expand(N, 1, L, start + L)


@torch.no_grad()
def forward(model, cache, ids: torch.Tensor, start: int, B: int) -> torch.Tensor:
    """ids (N, L) at positions start .. start + L - 1 over ``cache`` (which grows by L)
    -> logits (N, L, V), position i predicting position i."""
    N, L = ids.shape
    params = inspect.signature(model.forward).parameters  # transformers 5 renamed the cache
    cache_kw = "cache" if "cache" in params else "past_key_values"
    return model(
        input_ids=ids,
        attention_mask=block_causal(start, L, B, N, model.dtype),
        position_ids=torch.arange(start, start + L).expand(N, L),
        use_cache=True,
        **{cache_kw: cache},
    ).logits


def generate(
    model, prompt_ids, max_new_tokens: int, block_size: int, mask_id: int, stop_ids=(), **speculator_kwargs
) -> list:
    """SPOT: ``max_new_tokens`` after ``prompt_ids``, the tokens of exact decoding. With
    ``stop_ids`` (end-of-text), decoding ends with the block holding one and the output is cut
    after the first (SDAR's rule, as ``spotref.generate``).

    speculator_kwargs: ``spotref.Speculator``'s (temperature, seed, threshold, top_k, top_p,
    drafter, budget, depth, precision); ``drafter=None`` is exact decoding (one row per forward)."""
    B, prompt = block_size, list(prompt_ids)
    spec = spotref.Speculator(vocab_size=model.config.vocab_size, block_size=B, mask_id=mask_id, **speculator_kwargs)
    full = len(prompt) // B * B  # complete prompt blocks go into the cache
    cache = transformers.DynamicCache(config=model.config)
    if full:
        forward(model, cache, torch.tensor([prompt[:full]]), 0, B)
    out = []
    for index in range(full // B, -(-(len(prompt) + max_new_tokens) // B)):
        start, tail = index * B, prompt[index * B :]  # a prompt tail stays fixed in its block
        state = np.full(B, mask_id, dtype=np.int64)
        state[: len(tail)] = tail
        blk = spec.block(index, state)
        while not blk.done:
            rows = torch.from_numpy(blk.propose())  # (R, B) block states, row 0 the current
            per_row = copy.deepcopy(cache)  # the prefix K/V, once per row
            if start:
                per_row.batch_repeat_interleave(len(rows))
            blk.accept(forward(model, per_row, rows, start, B))  # logits (R, B, V)
        forward(model, cache, torch.from_numpy(blk.tokens)[None], start, B)  # store
        out += blk.tokens[len(tail) :].tolist()
        if set(stop_ids) & set(out):
            break
    out = out[:max_new_tokens]
    return out[: next((i + 1 for i, t in enumerate(out) if t in stop_ids), len(out))]


def checked(parse, check):
    """An argparse type: ``parse`` the text, then ``check`` it; a bad one is a usage error naming it."""

    def arg(text):
        try:
            return check(parse(text))
        except ValueError as e:
            raise argparse.ArgumentTypeError(str(e)) from None

    return arg


def positive(n: int) -> int:
    if n < 1:
        raise ValueError(f"must be at least 1, got {n}")
    return n


def arguments(argv=None) -> argparse.Namespace:
    """The command line, every value checked before the checkpoint is read."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("checkpoint", help="an SDAR checkpoint directory (config.json, safetensors)")
    ids = lambda text: [int(t) for t in text.split(",") if t]
    ap.add_argument("--prompt-ids", type=checked(ids, list), default=[1, 2, 3], help="comma-separated token ids")
    ap.add_argument("--new", type=checked(int, positive), default=32, help="tokens to generate")
    temperature = checked(float, lambda T: spotref.checks.check_temperature(T, name="T"))
    ap.add_argument("--temperature", type=temperature, default=0.0, help="0: argmax, else 1e-6 .. 3.4e38")
    ap.add_argument("--drafter", default="confidence", help='"confidence", "none", ...')
    return ap.parse_args(argv)


if __name__ == "__main__":
    args = arguments()
    model, B, mask_id, precision = load(args.checkpoint)
    eos = json.loads((Path(args.checkpoint) / "config.json").read_text()).get("eos_token_id")
    stops = [] if eos is None else [eos] if isinstance(eos, int) else list(eos)
    drafter = None if args.drafter == "none" else args.drafter
    print(
        generate(
            model,
            args.prompt_ids,
            args.new,
            B,
            mask_id,
            stop_ids=stops,
            temperature=args.temperature,
            drafter=drafter,
            precision=precision,
        )
    )  # cut after end-of-text
