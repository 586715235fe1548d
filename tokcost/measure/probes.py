"""Micro-benchmarks of what a device achieves: copy bandwidth, streaming-read bandwidth, matmul rate.

Decode is a stream of weight reads (one GEMV per matrix per token), so the achievable bandwidth,
not the datasheet's, sets its floor; `calibrate` turns these numbers into a calibrated GPU spec.
Each probe works on buffers far larger than the last-level cache (H100/H200 L2: 50-60 MB; server
CPUs: up to a few hundred MB, hence 256 MiB on the CPU), warms up first and reports the median.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import torch

from tokcost.errors import MeasureError

_DTYPES: dict[str, torch.dtype] = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
_MIB = 2**20
_GIB = 2**30

# Default sizes: far above the last-level cache, yet a probe takes well under a second.
_COPY_BYTES = {"cuda": 2 * _GIB, "cpu": 256 * _MIB}  # per buffer; a copy reads one and writes the other
_STREAM_BYTES = {"cuda": 2 * _GIB, "cpu": 256 * _MIB}  # the GEMV's weight matrix
_MATMUL_N = {"cuda": 8192, "cpu": 1024}  # 2 n^3 FLOPs: 1.1 TFLOP on a GPU, 2.1 GFLOP on a CPU
_REPEATS = {"cuda": 20, "cpu": 5}


@dataclass(frozen=True)
class ProbeResult:
    """One probe: the rate achieved (bytes/s or FLOP/s) and what was moved or computed per run."""

    name: str
    unit: Literal["bytes_per_s", "flops_per_s"]
    value: float  # achieved rate, in `unit`
    work: float  # bytes moved or FLOPs done per run
    size: str  # what ran, for people
    device: str
    dtype: str
    repeats: int
    median_s: float
    seconds_all: list[float]

    @property
    def bytes_per_s(self) -> float | None:
        """Achieved bandwidth, for the bandwidth probes."""
        return self.value if self.unit == "bytes_per_s" else None

    @property
    def flops_per_s(self) -> float | None:
        """Achieved FLOP rate, for the matmul probe."""
        return self.value if self.unit == "flops_per_s" else None


def _setup(device: torch.device | str, dtype: str) -> tuple[torch.device, torch.dtype]:
    """Resolve and check the device and dtype."""
    if dtype not in _DTYPES:
        raise MeasureError(f"dtype {dtype!r} cannot be probed; use one of {', '.join(_DTYPES)}")
    dev = torch.device(device)
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise MeasureError("CUDA is not available here; probe --device cpu")
    if dev.type not in ("cuda", "cpu"):
        raise MeasureError(f"device {device!r} is not supported; use cuda or cpu")
    return dev, _DTYPES[dtype]


def _median_seconds(dev: torch.device, fn: Callable[[], object], repeats: int, warmup: int = 2) -> list[float]:
    """Seconds per call of fn, `repeats` times after `warmup` calls: CUDA events or wall clock."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) / 1e3)  # milliseconds to seconds
        else:
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
    if not all(math.isfinite(t) and t > 0 for t in times):
        raise MeasureError(f"the timer returned a non-positive time: {times}")
    return times


def _result(
    name: str,
    unit: Literal["bytes_per_s", "flops_per_s"],
    work: float,
    size: str,
    dev: torch.device,
    dtype: str,
    times: list[float],
) -> ProbeResult:
    """Package a probe's timings; the rate uses the median time."""
    median_s = statistics.median(times)
    return ProbeResult(
        name=name,
        unit=unit,
        value=work / median_s,
        work=work,
        size=size,
        device=str(dev),
        dtype=dtype,
        repeats=len(times),
        median_s=median_s,
        seconds_all=times,
    )


@torch.inference_mode()
def probe_copy(
    device: torch.device | str, dtype: str = "bf16", size_bytes: int | None = None, repeats: int | None = None
) -> ProbeResult:
    """Device-to-device copy of a buffer far above the cache: (bytes read + bytes written) / time."""
    dev, tdtype = _setup(device, dtype)
    size_bytes = size_bytes or _COPY_BYTES[dev.type]
    n = size_bytes // tdtype.itemsize
    src = torch.ones(n, dtype=tdtype, device=dev)  # written, so pages are real (not the shared zero page)
    dst = torch.empty_like(src)
    times = _median_seconds(dev, lambda: dst.copy_(src), repeats or _REPEATS[dev.type])
    work = 2 * n * tdtype.itemsize  # one read and one write of every element
    return _result("copy", "bytes_per_s", work, f"{n * tdtype.itemsize / _MIB:.0f} MiB copied", dev, dtype, times)


@torch.inference_mode()
def probe_stream(
    device: torch.device | str, dtype: str = "bf16", size_bytes: int | None = None, repeats: int | None = None
) -> ProbeResult:
    """Streaming read as decode sees it: a GEMV y = W @ x over a W far above the cache; bytes = W bytes."""
    dev, tdtype = _setup(device, dtype)
    size_bytes = size_bytes or _STREAM_BYTES[dev.type]
    cols = 8192  # a row is 16 KiB in bf16: long contiguous reads, as in a Linear layer's weight
    rows = max(1, size_bytes // (cols * tdtype.itemsize))
    gen = torch.Generator(device=dev).manual_seed(0)
    weight = torch.empty(rows, cols, dtype=tdtype, device=dev).uniform_(-1, 1, generator=gen)  # [R, C]
    x = torch.ones(cols, dtype=tdtype, device=dev)  # [C]
    y = torch.empty(rows, dtype=tdtype, device=dev)  # [R]
    times = _median_seconds(dev, lambda: torch.mv(weight, x, out=y), repeats or _REPEATS[dev.type])
    work = weight.numel() * tdtype.itemsize  # x and y are under 0.1% of W
    return _result(
        "stream",
        "bytes_per_s",
        work,
        f"GEMV over a {rows} x {cols} matrix ({work / _MIB:.0f} MiB)",
        dev,
        dtype,
        times,
    )


@torch.inference_mode()
def probe_matmul(
    device: torch.device | str, dtype: str = "bf16", n: int | None = None, repeats: int | None = None
) -> ProbeResult:
    """A large square GEMM C = A @ B: 2 n^3 FLOPs (a multiply and an add per term) / time."""
    dev, tdtype = _setup(device, dtype)
    n = n or _MATMUL_N[dev.type]
    gen = torch.Generator(device=dev).manual_seed(0)
    a = torch.empty(n, n, dtype=tdtype, device=dev).uniform_(-1, 1, generator=gen)  # [n, n]
    b = torch.empty(n, n, dtype=tdtype, device=dev).uniform_(-1, 1, generator=gen)  # [n, n]
    c = torch.empty(n, n, dtype=tdtype, device=dev)
    times = _median_seconds(dev, lambda: torch.mm(a, b, out=c), repeats or _REPEATS[dev.type])
    return _result("matmul", "flops_per_s", 2 * n**3, f"{n} x {n} x {n} GEMM", dev, dtype, times)
