"""The corpora the bundled targets were trained on and the held-out problems they are measured
on: Python's own text (``stdlib_corpus``), grade-school math word problems (``gsm``), and the
records that name them (``corpora``). The repository's, not installed: the training tools and the
reports use them, and ``heldout`` draws the held-out prompts the installed ``Target.heldout``
ships (``spotref/load/targets/heldout-*.json.gz``).
"""
