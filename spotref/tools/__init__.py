"""Tools around the specification: the ``spotref`` command (``cli``), the demo, training (targets
and drafters), corpora, trajectories, the benchmark, quality, stability and cost-model reports.
Tools import the spec; the spec never imports a tool."""
