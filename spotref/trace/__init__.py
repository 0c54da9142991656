"""Traces of a decode: every round of every block, written down, saved, read back and replayed
(docs/spec.md section 8). ``record.Recorder`` is the observer a ``Block`` tells of its rounds;
``fmt.Trace`` the versioned JSON document; ``replay.replay`` takes the rule's step 4 again on a
trace. ``spotref show`` (``spotref/cli/show.py``) draws it."""
