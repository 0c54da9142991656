"""Training a SPOT drafter for a target (``spotref train-drafter``: recorded trajectories, the order
model, the SPOT-Sets head). The bundled targets themselves were trained by the repository's
workbench (``python -m workbench train-target``), which is not installed."""
