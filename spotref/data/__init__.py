"""The corpora the bundled targets were trained on and the held-out problems they are measured
on: Python's own text (``stdlib_corpus``), grade-school math word problems (``gsm``), and the
records that name them (``corpora``). Used by the tools and ``Target.heldout``; ``import spotref``
and ``spotref.generate`` never load them.
"""
