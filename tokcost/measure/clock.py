"""The clock CPU runs are timed with: wall time, or this thread's CPU time for benchmarks on a shared machine.

On a CPU shared with other work, wall time counts the periods the scheduler gives the core to someone else;
at one thread (torch runs every op in the calling thread) the thread's CPU time does not, so it stands in
for what a quiet machine would show. Memory-bandwidth and cache contention still count. GPUs use CUDA events.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator

_now: Callable[[], float] = time.perf_counter


def now() -> float:
    """Seconds on the current CPU clock (wall time unless thread_cpu_clock is active)."""
    return _now()


@contextlib.contextmanager
def thread_cpu_clock() -> Iterator[None]:
    """Time CPU runs by this thread's CPU time inside the block (meaningful at one thread only)."""
    global _now
    previous, _now = _now, time.thread_time
    try:
        yield
    finally:
        _now = previous
