"""SPOT-Sets with a light calibration: a set drafter adapted to a new target from at most 32 of
its prompts (``spotref calibrate-sets``, ``calibrate``: only the set head's output layer and
scale change, ``fit``), and the table that measures it (``table``)."""
