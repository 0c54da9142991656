"""A trace replayed through the decision rule (docs/spec.md section 8).

Each recorded decision holds every masked position with the token drawn there and its
confidence: steps 1-3 of the rule (docs/spec.md section 2). ``replay`` rebuilds the decode's
rule from the trace and takes step 4 again (``DecisionRule.chosen``: the threshold test or the
first maximum) on those confidences, block by block from the recorded start, checking on the
way that each decision stands at the state and step the previous ones lead to. The commits must
be the recorded ones, and the tokens they give the decode's output.
"""

from __future__ import annotations

import torch

from spotref.spec.rules import for_family
from spotref.trace.fmt import RULE_FIELDS, cut


def rule_of(decode: dict):
    """The decode's decision rule, from the trace's fields."""
    params = {k: decode["rule"][k] for k in RULE_FIELDS if k in decode["rule"]}
    return for_family(
        decode["family"],
        mask_id=decode["mask_id"],
        vocab_size=decode["vocab_size"],
        block_size=decode["block_length"],
        **params,
    )


def replay(decode: dict) -> list:
    """The generated tokens of ``decode`` (a trace's decode, checked) with every commit chosen
    again by the rule; ``ValueError`` naming the first decision the rule does not take."""
    rule, out = rule_of(decode), []
    for b, block in enumerate(decode["blocks"]):
        state, step = list(block["start"]), 0
        for r, round_ in enumerate(block["rounds"]):
            for k, d in enumerate(round_["decisions"]):
                where = f"block {b}, round {r}, decision {k}"
                masked = [j for j, t in enumerate(state) if t == rule.mask_id]
                if d["step"] != step or d["masked"] != masked:
                    raise ValueError(
                        f"{where}: recorded at step {d['step']}, masked {d['masked']}; the decisions "
                        f"before it lead to step {step}, masked {masked}"
                    )
                chosen = rule.chosen(torch.tensor(d["confidences"], dtype=torch.float64)).tolist()
                commits = [[masked[i], d["tokens"][i]] for i in chosen]
                if commits != [c[:2] for c in d["commits"]]:
                    raise ValueError(f"{where}: the rule commits {commits}, the trace {[c[:2] for c in d['commits']]}")
                for j, x in commits:
                    state[j] = x
                step += 1
        out += [state[j] for j, t in enumerate(block["start"]) if t == rule.mask_id]
    return cut(out, decode)
