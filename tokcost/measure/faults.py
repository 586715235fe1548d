"""Faults of a measurement: out of memory on the CPU or GPU, and the memory a device has free.

torch reports a failed allocation three ways: `torch.OutOfMemoryError` (CUDA), a RuntimeError from the
CPU allocator ("DefaultCPUAllocator: can't allocate memory"), and Python's MemoryError. All three become
OutOfMemory, one line, so a session keeps the batches it finished.
"""

from __future__ import annotations

import gc
import os
import re

import torch

from tokcost.errors import MeasureError

_OOM_TEXT = ("out of memory", "can't allocate memory", "cannot allocate memory", "defaultcpuallocator")


class OutOfMemory(MeasureError):
    """An allocation failed while measuring."""


def is_oom(exc: BaseException) -> bool:
    """Whether `exc` is a failed allocation (CUDA, the CPU allocator or Python)."""
    if isinstance(exc, (MemoryError, torch.OutOfMemoryError)):
        return True
    return isinstance(exc, RuntimeError) and any(t in str(exc).lower() for t in _OOM_TEXT)


def first_line(exc: BaseException) -> str:
    """The first line of an exception's message, without torch's advice paragraphs."""
    text = str(exc).strip().splitlines()
    if not text:
        return type(exc).__name__
    return re.sub(r"^\[enforce fail at [^\]]*\] (err == 0\. )?", "", text[0])[:300]  # c10's source location


def release() -> None:
    """Return what a failed run held: Python garbage and CUDA's cached blocks."""
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def host_available_bytes() -> float | None:
    """MemAvailable from /proc/meminfo (Linux), or None."""
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return float(line.split()[1]) * 1024  # kB
    except OSError:
        return None
    return None


def host_total_bytes() -> float | None:
    """Physical memory in bytes (sysconf), or None."""
    try:
        return float(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        return None


def cgroup_available_bytes() -> float | None:
    """memory.max - memory.current of this process's cgroup (v2), the limit a container enforces; or None."""
    try:
        with open("/proc/self/cgroup", encoding="ascii") as f:
            path = next((line.strip().split("::", 1)[1] for line in f if line.startswith("0::")), None)
        if path is None:
            return None
        root = os.path.join("/sys/fs/cgroup", path.lstrip("/"))
        with open(os.path.join(root, "memory.max"), encoding="ascii") as f:
            limit = f.read().strip()
        if limit == "max":
            return None
        with open(os.path.join(root, "memory.current"), encoding="ascii") as f:
            return max(float(limit) - float(f.read().strip()), 0.0)
    except (OSError, ValueError):
        return None


def free_bytes(device: torch.device) -> float | None:
    """What an allocation can still get: free GPU memory, or host RAM available on the CPU."""
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        return float(free)
    known = [b for b in (host_available_bytes(), cgroup_available_bytes()) if b is not None]
    return min(known) if known else None
