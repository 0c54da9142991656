"""Recorded exact decoding: held-out prompts of a target (``prompts``) and the trajectories of
exact decoding on them (``trajectories``), which the drafter trainer learns from and the bench
and reports measure."""
