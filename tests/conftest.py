"""Hypothesis profiles and the two test tiers.

Profiles: ``dev`` (default, quick) and ``ci`` (more examples); pick with HYPOTHESIS_PROFILE=ci.
Every example count in the tests follows the profile: a test that draws more or fewer cases than
the default asks for ``helpers.examples(scale)``, ``scale`` times the profile's count (under ci,
the count the test asked for before the profiles set them). Torch calls are slow to start, so no
deadlines anywhere.

Tiers: ``python -m pytest -m "not slow"`` is the fast tier (under 2 minutes on 2 cores), the whole
``python -m pytest`` both. A test is marked ``slow`` where it is defined (``@pytest.mark.slow``, or
``marks=`` on one parametrization) when it takes about a second or more on its own: a subprocess,
a training or calibration run (or a test on its trained fixture), a shipped target or drafter
loaded and decoded, a benchmark table or figure, a statistical or timing check, or a thorough
conformance run whose brief version stays fast. ``SLOW`` below lists the slow tests of files that
import nothing of pytest. The fast tier still checks exactness on every decoder path: the
conformance suite briefly on both cores, each family, T = 0 and T > 0, and the whole mutant gallery
(tests/exactness/test_conformance.py, test_mutants.py).
"""

import os

import pytest
import torch
from hypothesis import HealthCheck, settings
from hypothesis.internal.conjecture import providers

torch.set_num_threads(1)  # tiny models: threads only add contention on 2-core machines
os.environ.setdefault("OMP_NUM_THREADS", "1")  # and in the processes the tests start, unless they ask for more
# A thread waiting for work sleeps: spinning ones, beside the other workers, slowed a subprocess of
# two threads (test_batch_invariance.py) 10 to 20-fold.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

# Hypothesis draws some numbers from the constants in the source of the local modules loaded so
# far, which the tests run before in this worker decide: a seeded run (the conformance
# runs at seed 0, the mutant gallery's seeds) drew other cases in another test order, and its
# coverage, catches and time (10 to 45 seconds for 150 cases) changed with them. With no module's
# constants a seed draws the same cases whatever ran before.
if hasattr(providers, "_get_local_constants"):
    providers._get_local_constants = lambda: providers._local_constants  # the pool stays empty

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

SLOW = (  # slow tests of files without ``import pytest`` (node ids without the parametrization)
    "tests/docs/test_architecture.py::test_import_api_loads_the_spec_only",  # a subprocess
    "tests/docs/test_architecture.py::test_exact_decoding_loads_no_drafter_and_a_named_drafter_loads_its_module",
    "tests/bench/test_context_equations.py::test_the_table_runs_on_a_bundled_math_target",
    "tests/bench/test_equation_drills.py::test_the_table_runs_on_a_bundled_math_target",
    "tests/bench/test_length_commits.py::test_the_table_runs_on_a_bundled_math_target",
)


def pytest_configure(config):
    config.addinivalue_line(
        "markers", 'slow: about a second or more on its own; the fast tier, -m "not slow", runs without it'
    )


@pytest.hookimpl(tryfirst=True)  # before -m "not slow" deselects
def pytest_collection_modifyitems(config, items):
    """Marks the tests ``SLOW`` names; a name its collected file does not define is an error."""
    modules = {item.nodeid.split("::")[0]: item.module for item in items if getattr(item, "module", None)}
    for item in items:
        if item.nodeid.split("[")[0] in SLOW:
            item.add_marker(pytest.mark.slow)
    for name in SLOW:
        path, test = name.split("::")
        if path in modules and not hasattr(modules[path], test):
            raise pytest.UsageError(f"tests/conftest.py: SLOW names {name}, which {path} does not define")
