"""Held-out prompts and recorded trajectories, shared by the drafter trainer and the reports.

``prompts_for`` turns a target's held-out texts into prompts (token ids); ``recorded`` records
exact decoding on them (``spotref.record.trajectories``) and caches the trajectories under
``--data-dir``, keyed by the target's weights, the split, the rule and the sizes; what it records
is a ``TrajectorySpec``, which each command builds from its options. Read by
``spotref.train.train_drafter``, ``bench_run``, ``costmodel`` and ``stability``.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from pathlib import Path

from spotref.api import serving_precision
from spotref.load.drafters import model_fingerprint
from spotref.load.tokenizer import ASSISTANT
from spotref.record import trajectories as tj


def prompts_for(target, n: int, split: str, tokens: int) -> list:
    """``n`` held-out prompts of ``split`` (``target.heldout``, seed 1 for ``"test"``, 0 for
    ``"train"``), as token ids. A question (it has an answer) or a chat turn (it ends with the
    assistant header) is taken whole; any other text is a text to continue, cut to ``tokens``
    tokens, and one shorter than that is left out with a warning that counts them (the shipped
    drafters were trained on what is left: 110 of the 120 training prompts, every test prompt)."""
    out, short = [], 0
    for text, answer in target.heldout(n, seed=1 if split == "test" else 0, split=split):
        ids = target.encode(text)
        if answer is not None or text.endswith(ASSISTANT):
            out.append(ids)
        elif len(ids) >= tokens:
            out.append(ids[:tokens])
        else:
            short += 1
    if short:
        warnings.warn(
            f"{target.name}: {short} of {n} {split} prompts are shorter than {tokens} "
            f"tokens and were left out ({len(out)} used)",
            stacklevel=2,
        )
    return out


@dataclass(frozen=True)
class TrajectorySpec:
    """What ``recorded`` records and where it caches it, from a command's options
    (``train_drafter.trajectory_spec``, ``stability.trajectory_spec``)."""

    data_dir: str  # --data-dir, the trajectory cache
    prompts: int  # training prompts per temperature
    test_prompts: int  # held-out prompts per temperature (and threshold)
    set_prompts: int  # training prompts per temperature and threshold (the set head's)
    prompt_tokens: int  # tokens per prompt (a text to continue is cut to this)
    new_tokens: int  # new tokens recorded per prompt
    seeds: int  # noise seeds per prompt at T > 0


def recorded(target, spec: TrajectorySpec, split: str, T: float, threshold: float | None = None) -> tj.Trajectories:
    """Trajectories of ``split`` at temperature T (threshold rule at ``threshold``), cached under --data-dir."""
    if threshold is None:
        n, rule = (spec.prompts if split == "train" else spec.test_prompts), ""
    else:
        n, rule = (spec.set_prompts if split == "train" else spec.test_prompts), f"-tau{threshold:g}"
    precision = serving_precision(target.model)  # the rule the trajectories are decided by
    path = Path(
        spec.data_dir,
        f"{target.name}-{model_fingerprint(target.model)}-{split}-T{T:g}{rule}-n{n}"
        f"-p{spec.prompt_tokens}-g{spec.new_tokens}-{precision}-v{tj.FORMAT}.pt",
    )
    if path.exists():
        try:
            return tj.Trajectories.load(path)
        except ValueError as e:  # a truncated cache is a miss, not a dead end
            warnings.warn(f"{e}; recording it again")
    seeds = range(spec.seeds) if T > 0 else (0,)
    ds = tj.record(
        target.model,
        prompts_for(target, n, split, spec.prompt_tokens),
        spec.new_tokens,
        T,
        seeds,
        target.stop_ids,
        desc=f"record {split} T={T:g}{rule}",
        threshold=threshold,
    )
    ds.save(path)  # atomic, parent directories created
    return ds
