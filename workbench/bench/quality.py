"""Quality report of a target at T = 0 on held-out prompts: is it good enough to benchmark on?

``python -m workbench quality stdlib-b32 [--prompts 64] [--new-tokens 128] [--write-meta]``
(or ``python -m workbench.bench.quality``)

A math target (its corpus is ``gsm``) gets the math report instead (``workbench.bench.quality_math``:
answers by number of steps, equations, stability without end-of-text fill; ``--prompts`` held-out
problems, default 500). The rest of this docstring is the code report.

Prompts (``heldout_prompts``): ``--prompts`` held-out code texts from a random line start
(seed 0, the same text for every target), cut to ``--prompt-tokens`` tokens. Decoding:
``spotref.generate`` at T = 0, one-position rule, EOS as stop id. Numbers, over all generated
blocks (aligned at absolute positions; the prompt length is a multiple of every block size):

* ``repeat_blocks``: share of blocks whose tokens are one token repeated (with a byte
  tokenizer: one byte repeated);
* ``one_char_blocks``: share of blocks whose text is >= 75% one character (the prototype's
  whitespace-collapse criterion, stricter for a BPE whose tokens are several characters);
* ``loop_blocks`` (reported, not part of the bar): share of blocks in a loop of period 1 or 2
  tokens (``ids[i] == ids[i - 2]`` at >= 75% of positions), e.g. ``name_name_name_``, which both
  criteria above let through;
* ``whitespace_share`` of the generated text vs ``corpus_whitespace_share`` (held-out text);
* ``token_stability``: at every commit after a block's first, whether the token of the
  *previous* pass (stale logits, MASK excluded, argmax) at the committed position equals the
  committed token (docs/spec.md section 3), overall and on blocks that are not one-character blocks.
  Measured through ``spotref.generate`` with a recording drafter that proposes no node but the
  root: the drafter sees each round's stale logits, the run is exact decoding, and the
  trajectory (``stats["trajectory"]``) gives the commits.

The bar (``passes_bar``): at most 10% ``repeat_blocks`` and at most 10% ``one_char_blocks``, and
whitespace within 10 points of the corpus's.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import torch

import spotref
from spotref.cli.argtypes import add_threads, positive_int, tool_main
from spotref.cli.options import Options
from spotref.cli.report import solution_room
from spotref.files import atomic_write_text, check_writable
from spotref.load.targets import TARGETS_DIR, load_target
from spotref.spec.draft import Draft
from workbench.bench import quality_math
from workbench.bench.corpus import build_corpus, heldout_code, whitespace_share


def heldout_prompts(n: int, seed: int = 0) -> list[str]:
    """The report's (and the demo's) prompts: ``n`` texts of 4000 characters from held-out code
    documents of more than 3000 (``corpus.heldout_code``)."""
    return heldout_code(n, seed, chars=4000, longer_than=3000)


class StaleRecorder:
    """A drafter that drafts nothing (exact decoding) and records the stale argmax tokens."""

    def __init__(self):
        self.stale = {}  # (block, step) -> (B,) stale tokens

    def __call__(self, view) -> Draft:
        z = view.stale_logits.double().clone()
        z[:, view.mask_id] = -torch.inf
        self.stale[(view.block, view.step)] = z.argmax(-1).cpu().numpy()
        return Draft.root()


def short_loop(ids) -> bool:
    return len(ids) > 2 and sum(ids[i] == ids[i - 2] for i in range(2, len(ids))) >= 0.75 * (len(ids) - 2)


def one_char(text: str) -> bool:
    return bool(text) and Counter(text).most_common(1)[0][1] >= 0.75 * len(text)


def generate_one(target, prompt: list[int], new_tokens: int):
    rec = StaleRecorder()
    res = spotref.generate(target.model, prompt, new_tokens, temperature=0.0, drafter=rec, stop_ids=target.stop_ids)
    return res, rec


def block_stats(target, prompt, res, rec) -> list[dict]:
    """Per generated block: its tokens, text, degeneracy and stale-token agreement."""
    B, tok = target.model.block_size, target.tokenizer
    assert len(prompt) % B == 0, f"prompt length {len(prompt)} is not a multiple of B = {B}"
    first = len(prompt) // B
    agree = {}
    for block, step, commits in res.stats["trajectory"]:
        if step > 0:
            for pos, t in commits:
                agree.setdefault(block, []).append(int(rec.stale[(block, step)][pos] == t))
    out = []
    for i in range(0, len(res.tokens), B):
        ids = res.tokens[i : i + B]
        text = tok.decode(ids)
        out.append(
            {
                "ids": ids,
                "text": text,
                "repeat": len(set(ids)) == 1 and len(ids) > 1,
                "one_char": one_char(text),
                "loop": short_loop(ids),
                "agree": agree.get(first + i // B, []),
            }
        )
    return out


def report(target, prompts_text: list[str], prompt_tokens: int, new_tokens: int) -> dict:
    blocks, texts, samples, passes, t0 = [], [], [], 0, time.perf_counter()
    for n, text in enumerate(prompts_text):
        prompt = target.tokenizer.encode(text)[:prompt_tokens]
        if len(prompt) < prompt_tokens:
            raise ValueError(f"held-out prompt {n} has only {len(prompt)} tokens, want {prompt_tokens}")
        res, rec = generate_one(target, prompt, new_tokens)
        bs = block_stats(target, prompt, res, rec)
        blocks += bs
        texts.append(target.tokenizer.decode(res.tokens))
        passes += res.passes
        if n < 4:
            samples.append({"prompt_tail": target.tokenizer.decode(prompt)[-240:], "generated": texts[-1]})
    gen = "".join(texts)
    corpus_ws = whitespace_share("".join(d.text for d in build_corpus().heldout))
    all_agree = [a for b in blocks for a in b["agree"]]
    good_agree = [a for b in blocks if not b["one_char"] for a in b["agree"]]
    return {
        "target": target.name,
        "prompts": len(prompts_text),
        "prompt_tokens": prompt_tokens,
        "new_tokens": new_tokens,
        "temperature": 0.0,
        "blocks": len(blocks),
        "passes": passes,
        "repeat_blocks": _share([b["repeat"] for b in blocks]),
        "one_char_blocks": _share([b["one_char"] for b in blocks]),
        "loop_blocks": _share([b["loop"] for b in blocks]),
        "whitespace_share": round(whitespace_share(gen), 4),
        "corpus_whitespace_share": round(corpus_ws, 4),
        "distinct_tokens": len({t for b in blocks for t in b["ids"]}),
        "token_stability": _share(all_agree),
        "token_stability_nondegenerate": _share(good_agree),
        "wall_s": round(time.perf_counter() - t0, 1),
        "samples": samples,
    }


def _share(flags) -> float | None:
    return round(sum(flags) / len(flags), 4) if flags else None


def passes_bar(r: dict) -> bool:
    """At most 10% degenerate blocks (both criteria); whitespace within 10 points of the corpus."""
    return (
        r["repeat_blocks"] <= 0.10
        and r["one_char_blocks"] <= 0.10
        and abs(r["whitespace_share"] - r["corpus_whitespace_share"]) <= 0.10
    )


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The options of ``python -m workbench quality`` / ``python -m workbench.bench.quality``."""
    p.add_argument("target", help="a bundled target name, or the path of a target's NAME.json")
    p.add_argument(
        "--prompts", type=positive_int, default=None, help="held-out prompts (default 64; a math target: 500)"
    )
    p.add_argument(
        "--prompt-tokens", type=positive_int, default=64, help="tokens per prompt, a multiple of the block size"
    )
    p.add_argument(
        "--new-tokens", type=positive_int, default=None, help="new tokens per prompt (default 128; a math target: 256)"
    )
    p.add_argument("--targets-dir", default=None, help="load the target from this directory (default: bundled)")
    add_threads(p)
    p.add_argument("--write-meta", action="store_true", help="store the numbers in the target's NAME.json")
    p.add_argument(
        "--update-shipped", action="store_true", help="allow --write-meta to replace a bundled target's NAME.json"
    )


@dataclass(frozen=True)
class QualityOptions(Options):
    """The options of ``python -m workbench quality`` / ``python -m workbench.bench.quality``."""

    target: str  # a bundled target name, or the path of a target's NAME.json
    prompts: int | None  # --prompts (None: 64; a math target: 500)
    prompt_tokens: int  # a multiple of the block size
    new_tokens: int | None  # --new-tokens (None: 128; a math target: 256)
    targets_dir: str | None  # None: the bundled targets
    threads: int  # torch CPU threads
    write_meta: bool  # store the numbers in the target's NAME.json
    update_shipped: bool  # allow --write-meta to replace a bundled target's NAME.json


def run(args: argparse.Namespace) -> int:
    """Print the report as JSON; exit status 0 when the target meets the bar, else 1."""
    options = QualityOptions.from_namespace(args)
    torch.set_num_threads(options.threads)
    if options.write_meta:  # refused before the work, not after
        check_writable(meta_path(options))
    target = load_target(options.target, options.targets_dir or TARGETS_DIR)
    r = target_report(target, options)
    print(json.dumps(r, indent=1))
    if options.write_meta:
        write_meta(meta_path(options), r)
    return 0 if r["meets_bar"] else 1


def target_report(target, options: QualityOptions) -> dict:
    """The math report for a math target (its corpus is gsm), else the code report; with ``meets_bar``."""
    o = options
    if (target.meta.get("corpus") or {}).get("name") == "gsm":
        return quality_math.report(target, o.prompts or 500, o.new_tokens or solution_room(target.model))
    check_prompt_tokens(o.prompt_tokens, target)
    r = report(target, heldout_prompts(o.prompts or 64), o.prompt_tokens, o.new_tokens or 128)
    r["meets_bar"] = passes_bar(r)
    return r


def check_prompt_tokens(prompt_tokens: int, target) -> None:
    """The code report aligns blocks at absolute positions: ``--prompt-tokens`` must be a multiple
    of the target's block size (``ValueError`` naming both, before any prompt is decoded)."""
    B = target.model.block_size
    if prompt_tokens % B:
        raise ValueError(
            f"--prompt-tokens {prompt_tokens} is not a multiple of {target.name}'s block size {B} "
            f"(the report aligns blocks at absolute positions): use {max(B, prompt_tokens // B * B)}"
        )


def write_meta(path: Path, r: dict) -> None:
    """The report stored in the target's NAME.json at ``path``: its numbers and its samples."""
    meta = json.loads(path.read_text())
    meta["quality"] = {k: v for k, v in r.items() if k != "samples"}
    meta["quality_samples"] = r["samples"]
    atomic_write_text(path, json.dumps(meta, indent=1) + "\n")


def meta_path(options: QualityOptions) -> Path:
    """The NAME.json that --write-meta writes."""
    o = options
    return Path(o.target) if o.target.endswith(".json") else Path(o.targets_dir or TARGETS_DIR) / f"{o.target}.json"


def main(argv=None) -> int:
    return tool_main("python -m workbench.bench.quality", __doc__, add_arguments, run, argv)


if __name__ == "__main__":
    sys.exit(main())
