"""Every drafter: ``confidence`` / ``confidence-chain`` (training-free), ``calibrated`` (a static
rank graph), ``spot`` (the trained order model), with tree growth (``grow``) and what they read
(``inputs``). Names resolve through the one registry, ``spotref.names.DRAFTERS``."""
