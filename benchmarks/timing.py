"""The one way the benchmarks time a call: warm up, then the median of ``runs`` wall-clock timings; and for a
bundle against its peer, the two calls alternated round by round, so that a burst of load from another process
falls on both sides instead of on whichever happened to be running."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable


def _timed(call: Callable[[], object]) -> int:
    start = time.perf_counter_ns()
    call()
    return time.perf_counter_ns() - start


def median_us(call: Callable[[], object], runs: int) -> float:
    for _ in range(max(3, runs // 10)):
        call()
    return statistics.median(_timed(call) for _ in range(runs)) / 1000


def paired_us(ours: Callable[[], object], theirs: Callable[[], object], runs: int) -> tuple[float, float, float]:
    """(our median µs, their median µs, median of the rounds' their/our ratios): each round times both calls
    back to back, in alternating order."""
    for _ in range(max(3, runs // 10)):
        ours()
        theirs()
    mine, peer = [], []
    for round_ in range(runs):
        if round_ % 2:
            peer.append(_timed(theirs))
            mine.append(_timed(ours))
        else:
            mine.append(_timed(ours))
            peer.append(_timed(theirs))
    ratios = [p / m for m, p in zip(mine, peer)]
    return statistics.median(mine) / 1000, statistics.median(peer) / 1000, statistics.median(ratios)
