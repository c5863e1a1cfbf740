"""The one way the benchmarks time a call: warm up, then the median of ``runs`` wall-clock timings."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable


def median_us(call: Callable[[], object], runs: int) -> float:
    for _ in range(max(3, runs // 10)):
        call()
    times = []
    for _ in range(runs):
        start = time.perf_counter_ns()
        call()
        times.append(time.perf_counter_ns() - start)
    return statistics.median(times) / 1000
