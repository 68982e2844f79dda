"""Timing helpers shared by the benchmark scripts."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable


def median_seconds(call: Callable[[], object], repeats: int) -> float:
    """The median wall time of ``repeats`` calls of ``call``, after one warm-up call
    (first-call allocations and anything computed once per model are no one's cost)."""
    call()
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        call()
        times.append(time.perf_counter() - started)
    return statistics.median(times)
