"""SPOT-Sets with a light calibration: a set drafter adapted to a new target from at most 32 of
its prompts (``spotref calibrate-sets``, ``calibrate``: only output layers change, the set head's
and the next-commit rows, ``fit``), and the table that measures it (``table``)."""
