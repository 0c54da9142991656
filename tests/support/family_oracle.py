"""The end-to-end oracle of the whole-canvas families: ``spotref.generate`` against the
transcription of the family's own generate code (``llada_transcription``, ``dream_transcription``)."""

import dream_transcription as dream
import llada_transcription as llada
import torch

import spotref


def assert_generate_is_transcription(model, prompt, max_new_tokens, *, block_length, dtype=None, **kwargs):
    """``spotref.generate(model, prompt, ...)`` gives the tokens of the family's transcription
    (``llada_transcription`` or ``dream_transcription``) run on ``model``, a whole-canvas model
    (docs/spec.md section 1). ``dtype``: the logits rounded to it for the transcription and
    decided in it by spotref (None: the model's own); ``kwargs``: ``spotref.generate``'s
    (temperature, seed, confidence, top_k, top_p, drafter, budget, width, ...)."""
    P, bl, mask_id = len(prompt), block_length, model.mask_id
    G = -(-max_new_tokens // bl) * bl  # whole blocks
    logits_of = model if dtype is None else (lambda ids: model(ids).to(dtype))
    ids = torch.tensor(prompt, dtype=torch.long).reshape(1, P)
    T, seed = kwargs.get("temperature", 0.0), kwargs.get("seed", 0)
    if model.family == "llada":
        x = llada.generate(logits_of, ids, gen_length=G, block_length=bl, mask_id=mask_id, temperature=T, seed=seed)
    else:
        alg = kwargs.get("confidence") or "maskgit_plus"
        top_k, top_p = kwargs.get("top_k"), kwargs.get("top_p")
        x = dream.generate(
            logits_of, ids, gen_length=G, block_length=bl, mask_id=mask_id, alg=alg, temperature=T,
            top_p=top_p, top_k=top_k, seed=seed,
        )  # fmt: skip
    want = x[0, P : P + max_new_tokens].tolist()
    precision = "auto" if dtype is None else str(dtype).removeprefix("torch.")
    got = spotref.generate(model, prompt, max_new_tokens, block_length=bl, precision=precision, **kwargs)
    assert got.tokens == want, (got.tokens, want)
