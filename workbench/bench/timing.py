"""The benchmarks' one timing rule: the median of repeated calls after a warm-up."""

from __future__ import annotations

import statistics
import time


def median_ms(fn, reps: int) -> float:
    """The median wall time of ``reps`` calls of ``fn`` in milliseconds, after one untimed call."""
    fn()  # warm-up: first-call allocations and kernel choices are not timed
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times) * 1e3
