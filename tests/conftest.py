"""Hypothesis profiles: ``dev`` (default, quick) and ``ci`` (more examples); pick with
HYPOTHESIS_PROFILE=ci. Torch calls are slow to start, so no deadlines anywhere."""

import os

import torch
from hypothesis import HealthCheck, settings

torch.set_num_threads(1)  # tiny models: threads only add contention on 2-core machines

settings.register_profile(
    "dev", max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)
settings.register_profile(
    "ci",
    max_examples=100,
    deadline=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "dev"))
