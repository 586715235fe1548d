"""Worker processes for pure work that takes seconds an item (plan's sizings); measure starts its own ranks.

`pure_map(fn, *iterables, workers=n)` is `list(map(fn, ...))`, in `workers` processes when more than one: fork on
Linux (no re-import), elsewhere the default start (a worker imports tokcost, and the caller's script). The items
must be picklable and `fn` pure, so the result is the same either way. Where no worker starts (a sandbox without
processes) the same work runs in this one; an error in the work is raised as it would be here.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")


def pure_map(fn: Callable[..., T], *iterables: Iterable[Any], workers: int,
             progress: Callable[[int], None] | None = None) -> list[T]:  # fmt: skip
    """`list(map(fn, *iterables))`, in `workers` processes when more than one (module docstring); `progress(done)`
    after each item, in order (what it shows is the caller's: the work stays pure)."""
    if workers <= 1:
        return _counted(map(fn, *iterables), progress)
    import multiprocessing  # noqa: PLC0415  only work that takes workers
    from concurrent.futures import ProcessPoolExecutor  # noqa: PLC0415
    from concurrent.futures.process import BrokenProcessPool  # noqa: PLC0415

    context = multiprocessing.get_context("fork" if sys.platform.startswith("linux") else None)
    pool = ProcessPoolExecutor(workers, mp_context=context, initializer=_quiet_worker)
    try:
        try:  # a worker starts here, or no process can be had (a sandbox): then the same work in this one
            pool.submit(int).result()
        except (OSError, BrokenProcessPool):
            return _counted(map(fn, *iterables), progress)
        return _counted(pool.map(fn, *iterables, chunksize=1), progress)
    finally:  # Ctrl-C: what is queued is dropped, an item under way ends
        pool.shutdown(wait=True, cancel_futures=True)


def _counted(results: Iterable[T], progress: Callable[[int], None] | None) -> list[T]:
    out: list[T] = []
    for item in results:
        out.append(item)
        if progress is not None:
            progress(len(out))
    return out


def asked(jobs: int, tasks: int) -> int:
    """Workers for `tasks` items when the user asked for `jobs`: that many, never more than the items, and none
    from a daemonic process (a multiprocessing.Pool's worker may start no children)."""
    return 1 if _daemonic() else max(1, min(jobs, tasks))


def by_default(tasks: int) -> int:
    """Workers for `tasks` items when the user asked for none: one per usable CPU, on Linux and from a process of
    one thread only (the start forks, and a fork of a threaded host, a notebook's kernel, can deadlock; elsewhere a
    worker starts by importing the caller's script), and none from a daemonic process."""
    if _daemonic() or not sys.platform.startswith("linux") or threading.active_count() > 1:
        return 1
    return max(1, min(usable_cpus(), tasks))


def usable_cpus() -> int:
    """CPUs this process may use: its affinity set, capped by a cgroup v2 CPU quota (a container's limit, which
    the affinity set does not show)."""
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    try:
        quota, period = Path("/sys/fs/cgroup/cpu.max").read_text(encoding="ascii").split()[:2]
        if quota != "max":
            cpus = min(cpus, max(1, int(int(quota) / int(period))))
    except (OSError, ValueError):  # no cgroup v2 file (not Linux, or v1): the affinity set alone
        pass
    return cpus


def _daemonic() -> bool:
    """Whether this process is a daemon (no children allowed); multiprocessing only if something loaded it."""
    process = sys.modules.get("multiprocessing.process")
    return bool(process is not None and process.current_process().daemon)


def _quiet_worker() -> None:
    """A worker leaves Ctrl-C to the process that started it, ends on SIGTERM without the CLI's handler (which
    turns it into KeyboardInterrupt and a traceback in each worker as the pool shuts down), and on Linux gets that
    SIGTERM when its parent dies (killed with -9, or out of memory), so that no worker waits on for work forever."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    if sys.platform.startswith("linux"):
        try:
            import ctypes  # noqa: PLC0415

            ctypes.CDLL(None).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG = 1
        except (OSError, AttributeError):  # no prctl to be had: the worker lives as long as its pool
            pass
