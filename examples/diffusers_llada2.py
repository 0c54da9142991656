"""diffusers' ``LLaDA2Pipeline`` driving a spotref model: an oracle for exact decoding at T = 0.

diffusers (0.39 and later) decodes LLaDA2 with ``LLaDA2Pipeline`` and a
``BlockRefinementScheduler``: per block of the window, a forward over the whole window so far,
then every masked position whose confidence passes the threshold, else the most confident one.
It calls ``model(x, attention_mask=..., position_ids=...).logits``; ``Window`` below is all it
needs of a spotref model (a LLaDA2 model, or any block-causal one: SDAR's, SDAR-MoE's): the
window's logits, block-causal from position 0, in float32. MASK's logit is set to -inf, as
spotref's rule does (docs/spec.md section 2: a trained model does not predict MASK; a random one
may). The pipeline's editing (LLaDA2.1) is off: ``editing_threshold=None``.

Run at T = 0 with one commit per step (``num_inference_steps = block_length``) and the threshold
rule, its tokens are spotref's exact decoding's (``spotref.generate(model, prompt, threshold=tau)``),
and so SPOT's, up to and including the first EOS; ``tests/exactness/test_llada2.py`` checks it.

    python examples/diffusers_llada2.py CHECKPOINT_DIR --prompt-ids 1,2,3 --new 32 --threshold 0.95
"""

import argparse
from pathlib import Path
from types import SimpleNamespace

import torch
from diffusers import BlockRefinementScheduler, LLaDA2Pipeline

import spotref


class Window(torch.nn.Module):
    """A spotref block-causal model as diffusers calls it: ``(x (N, L), attention_mask, position_ids)``
    -> ``.logits`` (N, L, V) float32, only the last block's filled (all the pipeline reads)."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    @property
    def device(self):  # what the pipeline places its tensors on
        return self.model.lm_head.weight.device

    def forward(self, x, attention_mask=None, position_ids=None):
        # its 2D mask: ones, then zeros on the tail past prompt + gen_length (still MASK, attended as in its generate)
        if attention_mask is not None and not bool((attention_mask.diff(dim=1) <= 0).all()):
            raise ValueError("a padded prompt: spotref decodes one prompt, unpadded")
        if position_ids is not None and not torch.equal(position_ids[0].cpu(), torch.arange(x.shape[1])):
            raise ValueError("positions other than 0 .. L - 1")
        B, m = self.model.block_size, self.model
        logits = torch.zeros(*x.shape, m.config.vocab_size)
        last = m.window(x) if hasattr(m, "window") else m.forward(x)[:, -B:]  # (N, B, V)
        logits[:, -B:] = last.float()
        logits[..., m.mask_id] = -torch.inf
        return SimpleNamespace(logits=logits)


def pipeline_tokens(model, prompt: list, new: int, threshold: float, eos: int | None) -> list:
    """diffusers' tokens for ``prompt`` at T = 0, one commit per step, cut after the first ``eos``."""
    B = model.block_size
    pipe = LLaDA2Pipeline(model=Window(model), scheduler=BlockRefinementScheduler(block_length=B))
    pipe.set_progress_bar_config(disable=True)
    out = pipe(
        input_ids=torch.tensor([prompt]),
        gen_length=new,
        block_length=B,
        num_inference_steps=B,  # one position per step unless the threshold passes more
        temperature=0.0,
        threshold=threshold,
        editing_threshold=None,
        minimal_topk=1,
        eos_early_stop=eos is not None,
        eos_token_id=eos,
        mask_token_id=model.mask_id,
        output_type="seq",
        use_chat_template=False,
    ).sequences[0]
    tokens = out.tolist()
    return tokens[: tokens.index(eos) + 1] if eos is not None and eos in tokens else tokens


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description="diffusers' LLaDA2Pipeline against spotref's exact decoding, T = 0")
    ap.add_argument("checkpoint", type=Path)
    ap.add_argument("--prompt-ids", required=True, help="comma-separated token ids")
    ap.add_argument("--new", type=int, default=32)
    ap.add_argument("--threshold", type=float, default=0.95)
    ap.add_argument("--block-size", type=int, default=None, help="where config.json has none (LLaDA2.0: 32)")
    ap.add_argument("--mask-id", type=int, default=None, help="where config.json has none (LLaDA2.0: 156895)")
    args = ap.parse_args(argv)
    given = {k: v for k, v in (("block_size", args.block_size), ("mask_token_id", args.mask_id)) if v is not None}
    model = spotref.from_pretrained(args.checkpoint, dtype="float32", **given)
    prompt = [int(t) for t in args.prompt_ids.split(",")]
    eos = model.config.eos_token_id if isinstance(model.config.eos_token_id, int) else None
    theirs = pipeline_tokens(model, prompt, args.new, args.threshold, eos)
    ours = spotref.generate(
        model, prompt, max_new_tokens=args.new, threshold=args.threshold, stop_ids=[eos] if eos else None
    )
    print(f"diffusers: {theirs}\nspotref:   {ours.tokens} ({ours.passes} passes)")
    print("identical" if theirs == ours.tokens else "DIFFERENT")


if __name__ == "__main__":
    main()
