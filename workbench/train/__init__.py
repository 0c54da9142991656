"""Training the bundled targets (``python -m workbench train-target``): BD3-LM for SDAR, the canvas
objective for LLaDA and Dream, curricula, distillation, export into spotref/load/targets/."""
