"""Train a bundled target: an ``SDARModel`` with the block-diffusion objective of SDAR / BD3-LM.

One training sequence ``x`` of ``L`` tokens (``L`` a multiple of the block size ``B``) becomes
the input ``concat(x_t, x)`` of length ``2L`` (Arriola et al., BD3-LM, 2025):

* ``x_t``: the noised copy; in every block exactly ``k ~ U{1..B}`` positions, chosen uniformly,
  are replaced by MASK (mask rate ``t = k / B``);
* attention (``bd3_mask``): noised block i sees noised block i (bidirectionally) and the *clean*
  blocks < i; clean block i sees clean blocks <= i (the block-causal mask of decoding); both
  copies carry the same RoPE positions 0..L-1;
* loss: cross-entropy of the logits at the masked positions of ``x_t`` against the clean token
  at the same position (no shift). ``--weighting tokens`` (default) averages over all masked
  tokens; ``--weighting elbo`` weights each block by ``1 / t`` as the MDLM / BD3-LM ELBO does,
  which with exactly ``k`` masks per block is the mean over blocks of each block's masked mean.

So one training forward teaches every block, at a random mask rate, what a decoding pass sees:
a partially masked current block over a clean prefix.

Usage (background, resumable; checkpoints in ``runs/NAME/``)::

    nice -n 19 python -m workbench.train.train_target --name stdlib-b32 --block-size 32 --minutes 40

A run stops after ``--steps`` or ``--minutes`` of training time, whichever comes first; the same
command resumes it from ``runs/NAME/ckpt.pt``. ``--export DIR`` then writes the target
(``NAME.safetensors``, ``NAME.json``, ``NAME.tokenizer.json``) for ``spotref.load_target``.

Data (``workbench.data.corpora``): ``--corpus`` names what is trained on: ``stdlib`` (Python's own
text, the default), ``gsm`` (grade-school math word problems from ``workbench.data.gsm``, drawn
with ``--corpus-seed`` at ``--corpus-level``, ``--corpus-size`` of them) or a text file of
documents. The exported metadata records the corpus (name, seed, options), so
``Target.heldout`` draws held-out prompts of the same domain. ``--pad-eot`` packs documents as
SDAR's chat data: each followed by end-of-text up to the end of its block, every window
starting at a block boundary. ``--split-digits`` trains the BPE with every digit its own token.
``--keep-snapshots MIN`` keeps the weights every MIN minutes of training under
``runs/NAME/snapshots/`` (``export_run(..., checkpoint=)`` exports one), for a learning curve.

The gsm recipe (options, all off by default; the exported metadata records them under
``training.recipe``): ``--rows-per-doc`` makes every training row one document at position 0,
end-of-text padded to the end of its block (cut at ``--seq-len``), as decoding sees a prompt;
``--answer-only`` masks only what follows the assistant header ``<|im_start|>assistant\\n`` of a
chat document (k ~ U{1..n} of the n such positions of each block; a document without the header
is all answer), the end-of-text padding weighted ``--eot-weight`` in the loss;
``--fresh-problems`` (``--corpus gsm``) draws each step's problems afresh from
(``--corpus-seed``, step), never a held-out one, instead of from ``--corpus-size`` fixed ones;
``--curriculum LEVEL@STEP,...`` (e.g. ``0@0,1@4000,2@12000``) sets the level of those problems
by step, a share ``--curriculum-lower`` of the rows from the schedule's lower levels once it has
moved on; ``--adaptive LEVEL,...`` (e.g. ``0,1,2,3``) moves instead to the next level when, every
``--adapt-every`` steps, exact decoding (T = 0) of ``--adapt-n`` held-out problems of the current
level gets ``--adapt-answers`` of the answers and ``--adapt-equations`` of the equations right
(the level and the evaluations are in the checkpoint, so a resume is exact); ``--drill-share P``
makes a share P of those rows arithmetic drills (``gsm.drill``: "What is a op b?", addition and
subtraction twice as often, or as ``--drill-ops sub,sub,div,div,add,mul`` weights them) at the
row's level, their operands drawn in the level's limits or, with ``--drill-from problems``, an
equation the problems themselves write (``gsm.equation_drill``); ``--mask-results P`` masks, in a share P of the
rows, every written result (the digits after ``= `` and after ``#### ``) on top of the
k ~ U{1..n} draw, so those rows train the arithmetic rather than copying a result written
elsewhere in the block; ``--result-weight W`` weights the loss of the results and of the 2 tokens
after each by W (at T = 0 the decoder mostly commits the word after a result before the result's
last digit, so where the model puts it fixes how many digits the result gets); ``--suffix-results
P`` masks, in a share P of the rows, each block that holds a result from one result's first digit
to the block end and nothing before it (the state in which the decoder places that length). The held-out loss
then uses rows of held-out documents, masked the same way (without ``--mask-results``).
"""

# The command alone lives here; its parts, by concern, in the modules beside it:
# train_options (the command line, TrainOptions), train_objective (BD3-LM's mask, noise, loss),
# train_data (streams, rows, the corpus, the held-out loss), train_curriculum (fresh problems,
# drills, levels), train_loop (setup, resume, the loop, checkpoints, snapshots) and train_export
# (export, export_run, average_run, --init and the lineage of weights).
from __future__ import annotations

import argparse
import sys

from spotref.cli.argtypes import guarded, plain, run_allowed
from workbench.train.train_loop import train
from workbench.train.train_options import TrainOptions, add_arguments, check_export


def main(argv=None) -> int:
    """``python -m workbench.train.train_target``: parse the options, then ``run``."""
    p = argparse.ArgumentParser(prog="python -m workbench.train.train_target", description=plain(__doc__))
    add_arguments(p)
    args = p.parse_args(argv)
    return guarded(p.prog, lambda: run_allowed(run, args))


def run(args: argparse.Namespace) -> int:
    """Entry point of ``python -m workbench train-target``: the options built once from the parsed command
    line, the outputs checked, then the run trained (``workbench.train.train_loop.train``)."""
    options = TrainOptions.from_namespace(args)
    check_export(options.name, options.export)
    train(options)
    return 0


if __name__ == "__main__":
    sys.exit(main())
