"""Caches as the real decode step leaves them, for the skeleton that measures the CPU's per-step overhead.

In the real loop every linear streams its weights through the caches, so the small ops between linears
(norms, RoPE, attention over the cache, the allocator, the interpreter itself) find L1 and L2 flushed and
run slower than in a skeleton whose weights all stay in L1. On a 2-core EPYC the non-matmul ops of a
214 MB model took about twice their skeleton time (torch profiler, one thread). So on the CPU the skeleton
runs with a flush before each linear: a streaming read of as many bytes as the real linear reads (at most
the L2's size, through a ring as large as the real weight stream, at most twice the last-level cache, so
L3 is worn as the stream wears it), and the flushes' own time, taken where they run, is subtracted. What
remains is the step overhead in the cache state the real loop leaves. Eager CPU runs only; routed experts
(grouped matmuls, not nn.Linear) get no flush.
"""

from __future__ import annotations

import os

import torch
from torch import nn

from tokcost.measure import clock

_ROW = 512  # elements per ring row: 1 KiB in bf16


def cpu_cache_bytes() -> dict[int, int]:
    """Size of each cache level of CPU 0 (data and unified caches), from sysfs; empty when unknown."""
    base = "/sys/devices/system/cpu/cpu0/cache"
    out: dict[int, int] = {}
    try:
        for entry in sorted(e for e in os.listdir(base) if e.startswith("index")):
            with open(f"{base}/{entry}/type", encoding="ascii") as f:
                if f.read().strip() == "Instruction":
                    continue
            with open(f"{base}/{entry}/level", encoding="ascii") as f:
                level = int(f.read())
            with open(f"{base}/{entry}/size", encoding="ascii") as f:
                text = f.read().strip()
            size = int(text.rstrip("KMG")) * {"K": 2**10, "M": 2**20, "G": 2**30}.get(text[-1], 1)
            out[level] = max(out.get(level, 0), size)
    except (OSError, ValueError):
        return {}
    return out


class CacheFlush:
    """Streaming reads through a ring as large as the real weight stream (at most 2 x LLC), each one timed.

    The time of each flush is taken where it runs (not replayed apart: back to back, reads prefetch across
    calls and come out faster than between the ops they are meant to disturb), and summed while `counting`.
    """

    def __init__(self, dtype: torch.dtype, l2_bytes: int, ring_bytes: int) -> None:
        self.l2_bytes = l2_bytes
        rows = max(ring_bytes // (_ROW * dtype.itemsize), 1)
        self.ring = torch.empty(rows, _ROW, dtype=dtype).uniform_(-1, 1)  # [R, 512]
        self.x = torch.ones(_ROW, dtype=dtype)
        self.next_row = 0
        self.counting = False
        self.seconds = 0.0  # time spent flushing while counting

    def __call__(self, nbytes: int) -> None:
        """Read min(nbytes, L2) bytes of the ring, continuing where the last read stopped."""
        t0 = clock.now()
        rows = max(min(nbytes, self.l2_bytes) // (_ROW * self.ring.element_size()), 1)
        if self.next_row + rows > self.ring.shape[0]:
            self.next_row = 0
        torch.mv(self.ring[self.next_row : self.next_row + rows], self.x)
        self.next_row += rows
        if self.counting:
            self.seconds += clock.now() - t0


def attach(skeleton: nn.Module, real: nn.Module, flush: CacheFlush) -> list:
    """Flush before each of the skeleton's linears as much as the same-named linear of the real model reads."""
    real_bytes = {name: m.weight.numel() * m.weight.element_size() for name, m in real.named_modules()
                  if isinstance(m, nn.Linear)}  # fmt: skip
    handles = []
    for name, module in skeleton.named_modules():
        if isinstance(module, nn.Linear) and name in real_bytes:
            nbytes = real_bytes[name]
            handles.append(module.register_forward_pre_hook(lambda _m, _a, n=nbytes: flush(n)))
    return handles
