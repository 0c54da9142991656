"""Training: the bundled targets (``spotref train-target``) and the SPOT drafters
(``spotref train-drafter``: recorded trajectories, the order model, the SPOT-Sets head)."""
