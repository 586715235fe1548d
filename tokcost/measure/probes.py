"""Micro-benchmarks of what a device achieves: copy bandwidth, streaming-read bandwidth, matmul rate.

Decode is a stream of weight reads (one GEMV per matrix per token), so the achievable bandwidth,
not the datasheet's, sets its floor; `calibrate` turns these numbers into a calibrated GPU spec.
Each probe works on buffers far larger than the last-level cache (H100/H200 L2: 50-60 MB; server
CPUs: up to a few hundred MB, hence 256 MiB on the CPU), warms up first and reports the median.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Literal

import torch

from tokcost.errors import MeasureError
from tokcost.measure import clock

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
            t0 = clock.now()
            fn()
            times.append(clock.now() - t0)
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


# ---- the loop's own matmuls (calibration that predicts the loop) ------------------------------------

_TINY = 16  # width of the near-zero linears whose time is the per-call cost, subtracted from the real ones
_PREFILL_FLOPS_CAP = {"cuda": 1e15, "cpu": 2e10}  # FLOPs per timed prefill GEMM pass (rows capped on a CPU)


def last_level_cache_bytes(device: torch.device | str) -> int | None:
    """The L2 of a GPU, or the largest CPU cache sysfs lists (the L3 on servers); None when unknown."""
    dev = torch.device(device)
    if dev.type == "cuda":
        return int(torch.cuda.get_device_properties(dev).L2_cache_size)
    from tokcost.measure.flush import cpu_cache_bytes

    sizes = cpu_cache_bytes()
    return max(sizes.values()) if sizes else None


@dataclass(frozen=True)
class ExpertStack:
    """One MoE layer's routed experts as the loop multiplies them: F.grouped_mm over the experts tokens chose.

    Timed per expert as separate F.linear calls they ran at 0.9-1.1 TB/s on an H200 (2026-12-04, qwen3-30b-a3b),
    while the loop's step less its skeleton's implied about 2 TB/s for its reads: the probe runs the loop's kernel.
    """

    gate: torch.Tensor  # [E, I, hidden]
    up: torch.Tensor  # [E, I, hidden]
    down: torch.Tensor  # [E, hidden, I]
    touched: int  # distinct experts the step's tokens are routed to (the first `touched` of the stack)
    slots: int  # token-expert pairs (tokens x top-k), spread over the touched experts

    @property
    def nbytes(self) -> int:
        """Bytes the step reads: the touched experts' three matrices."""
        return self.touched * sum(w[0].numel() * w.element_size() for w in (self.gate, self.up, self.down))

    def calls(self) -> list[Callable[[], object]]:
        """The three grouped matmuls of one decode step (gate, up, down), on constant inputs."""
        e, inter, hidden = self.gate.shape
        counts = [self.slots // self.touched + (i < self.slots % self.touched) for i in range(self.touched)]
        offs = torch.tensor(counts + [0] * (e - self.touched), device=self.gate.device).cumsum(0, dtype=torch.int32)
        xs = torch.ones(self.slots, hidden, dtype=self.gate.dtype, device=self.gate.device)
        act = torch.ones(self.slots, inter, dtype=self.gate.dtype, device=self.gate.device)
        grouped = torch.nn.functional.grouped_mm
        return [partial(grouped, xs, self.gate.transpose(-2, -1), offs=offs),
                partial(grouped, xs, self.up.transpose(-2, -1), offs=offs),
                partial(grouped, act, self.down.transpose(-2, -1), offs=offs)]  # fmt: skip

    def tiny(self) -> ExpertStack:
        """The same groups at near-zero width: the per-call cost the skeleton's step already holds."""
        zeros = torch.zeros(self.gate.shape[0], _TINY, _TINY, dtype=self.gate.dtype, device=self.gate.device)
        return ExpertStack(zeros, zeros, zeros, self.touched, self.slots)


def _pass_seconds(
    dev: torch.device, weights: list[torch.Tensor], rows: int, repeats: int, stacks: Sequence[ExpertStack] = ()
) -> list[float]:  # fmt: skip
    """Seconds per pass of F.linear(x [rows, 1, in], W) over `weights` and each stack's grouped matmuls."""
    inputs = {w.shape[1]: torch.ones(rows, 1, w.shape[1], dtype=w.dtype, device=dev) for w in weights}
    calls: list[Callable[[], object]] = [partial(torch.nn.functional.linear, inputs[w.shape[1]], w) for w in weights]
    calls += [call for stack in stacks for call in stack.calls()]

    def one_pass() -> None:
        for call in calls:
            call()

    return _median_seconds(dev, _replayed(one_pass) if dev.type == "cuda" else one_pass, repeats, warmup=1)


def _replayed(fn: Callable[[], object]) -> Callable[[], object]:
    """fn captured as a CUDA graph, replayed: GPU time alone, as the loop's captured step runs its kernels.

    Launched from Python, a pass of near-zero linears is host-bound (about 10 us a call) while the real pass
    is GPU-bound with its launches hidden; subtracting the one from the other counted launch time twice and
    put the stream rate above HBM (7.2 TB/s on an H200 of 4.8, 2026-12-04).
    """
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # cuBLAS picks its kernels and workspace before the capture
        fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    return graph.replay


def _net_of_calls(
    dev: torch.device, weights: list[torch.Tensor], rows: int, repeats: int, stacks: Sequence[ExpertStack] = ()
) -> tuple[float, float, float]:  # fmt: skip
    """(seconds of a pass, of the same calls at near-zero width, the pass net of them): the call cost is in the
    skeleton's step time; where it is nearly all of the pass (net under a tenth), the pass whole."""
    real = statistics.median(_pass_seconds(dev, weights, rows, repeats, stacks))
    tiny_w = torch.zeros(_TINY, _TINY, dtype=(weights or [stacks[0].gate])[0].dtype, device=dev)
    tiny = statistics.median(_pass_seconds(dev, [tiny_w] * len(weights), rows, repeats, [s.tiny() for s in stacks]))
    return real, tiny, real - tiny if real - tiny > 0.1 * real else real


def linear_stream_rate(
    dev: torch.device, weights: list[torch.Tensor], rows: int, repeats: int, stacks: Sequence[ExpertStack] = ()
) -> dict:  # fmt: skip
    """Bytes/s of the weight stream at M = rows: (real pass - the same calls at near-zero width) / bytes."""
    nbytes = sum(w.numel() * w.element_size() for w in weights) + sum(s.nbytes for s in stacks)
    real, tiny, net = _net_of_calls(dev, weights, rows, repeats, stacks)
    return {"bytes_per_s": nbytes / net, "bytes": nbytes, "seconds": real, "call_seconds": tiny,
            "matrices": len(weights) + 3 * sum(s.touched for s in stacks), "grouped_layers": len(stacks),
            "rows": rows}  # fmt: skip


def linear_compute_rate(dev: torch.device, weights: list[torch.Tensor], rows: int, repeats: int) -> dict:
    """FLOP/s of the prefill's GEMMs: 2 x rows x weight elements per pass / its time net of the per-call cost (the
    same calls at near-zero width, which the skeleton's step time carries), as the weight stream's is."""
    params = sum(w.numel() for w in weights)
    rows = min(rows, max(256, int(_PREFILL_FLOPS_CAP[dev.type] / (2 * params))))  # >= 256: a GEMM, not a GEMV
    real, tiny, net = _net_of_calls(dev, weights, rows, repeats)
    return {"flops_per_s": 2 * rows * params / net, "rows": rows, "seconds": real, "call_seconds": tiny,
            "matrices": len(weights)}  # fmt: skip


def decode_reads(model, batch: int, experts_per_layer: float | None) -> tuple[list[torch.Tensor], list[ExpertStack]]:
    """The weight matrices one decode step multiplies by, in order, and its grouped expert stacks (routed experts:
    the distinct ones read; where the loop runs one matmul per expert, those matrices instead)."""
    from tokcost.measure.moe import Experts

    out: list[torch.Tensor] = []
    stacks: list[ExpertStack] = []
    for block in model.layers:
        out += [m.weight for m in block.attention.modules() if isinstance(m, torch.nn.Linear)]
        mlp = block.mlp
        out += [m.weight for m in mlp.modules() if isinstance(m, torch.nn.Linear)]
        if isinstance(mlp, Experts):
            touched = round(experts_per_layer) if experts_per_layer is not None else mlp.n_experts
            if mlp.grouped:
                stacks.append(ExpertStack(mlp.w_gate, mlp.w_up, mlp.w_down, touched, max(batch * mlp.top_k, touched)))
            else:
                out += [w[e] for e in range(touched) for w in (mlp.w_gate, mlp.w_up, mlp.w_down)]
    return [*out, model.output.weight], stacks


def loop_rates(model, batch: int, prompt_tokens: int, experts_per_layer: float | None, repeats: int = 5) -> dict:
    """The built model's own linears: weight-stream bytes/s at M = batch, GEMM FLOP/s at the prefill's rows."""
    dev = model.output.weight.device
    weights, stacks = decode_reads(model, batch, experts_per_layer)
    stream = linear_stream_rate(dev, weights, batch, repeats, stacks)
    block = [m.weight for m in model.layers[0].modules() if isinstance(m, torch.nn.Linear)]
    compute = linear_compute_rate(dev, block, batch * prompt_tokens, max(3, repeats // 2))
    return {"stream": stream, "compute": compute}


_WORKING_SET_FLOOR = {"cuda": 2 * _GIB, "cpu": 256 * _MIB}  # a probe pass long enough to time well
_CACHE_MULTIPLE = 8  # the working set is at least this many last-level caches


def layer_matrices(spec, device: torch.device, dtype: torch.dtype, min_bytes: int | None) -> list[torch.Tensor]:
    """The spec's per-layer weight matrices (the loop's linear shapes): one layer, or repeated to min_bytes."""
    layer = _probe_layer(spec)
    shapes = [tuple(p.shape[-2:]) for p in layer.parameters() if p.dim() >= 2
              for _ in range(p.shape[0] if p.dim() == 3 else 1)]  # fmt: skip
    out: list[torch.Tensor] = []
    total = 0
    while (total < min_bytes) if min_bytes is not None else len(out) < len(shapes):
        rows, cols = shapes[len(out) % len(shapes)]
        out.append(torch.empty(rows, cols, dtype=dtype, device=device).uniform_(-0.02, 0.02))
        total += rows * cols * dtype.itemsize
    return out


def _probe_layer(spec) -> torch.nn.Module:
    """The layer whose shapes the probes use, on the meta device: the first with routed experts, if any."""
    from tokcost.measure.model import Decoder

    first = spec.moe.dense_layers if spec.moe is not None else 0
    with torch.device("meta"):
        return Decoder(spec.truncated(min(first + 1, spec.layers))).layers[-1]


def layer_reads(spec, device: torch.device, dtype: torch.dtype, batch: int,
                min_bytes: int) -> tuple[list[torch.Tensor], list[ExpertStack]]:  # fmt: skip
    """One layer's decode reads at `batch` tokens, repeated to min_bytes: its 2-D matrices, and its routed experts
    as a grouped stack of the experts `batch` tokens touch under uniform routing (the engine's count)."""
    from tokcost.engine.features import expected_distinct_experts
    from tokcost.measure.moe import Experts, grouped_mm_error

    layer = _probe_layer(spec)
    moe = layer.mlp if isinstance(layer.mlp, Experts) and grouped_mm_error(device, dtype) is None else None
    if moe is None:
        return layer_matrices(spec, device, dtype, min_bytes), []
    shapes = [tuple(p.shape) for p in layer.parameters() if p.dim() == 2]
    touched = max(1, round(expected_distinct_experts(moe.n_experts, moe.top_k, batch)))
    weights: list[torch.Tensor] = []
    stacks: list[ExpertStack] = []
    total = 0
    while total < min_bytes:
        weights += [torch.empty(r, c, dtype=dtype, device=device).uniform_(-0.02, 0.02) for r, c in shapes]
        gate, up, down = (torch.empty(touched, *w.shape[1:], dtype=dtype, device=device).uniform_(-0.02, 0.02)
                          for w in (moe.w_gate, moe.w_up, moe.w_down))  # fmt: skip
        stacks.append(ExpertStack(gate, up, down, touched, max(batch * moe.top_k, touched)))
        total = sum(w.numel() * w.element_size() for w in weights) + sum(x.nbytes for x in stacks)
    return weights, stacks


def calibrate_rates(spec, device: str, dtype: str, batch: int, prompt_tokens: int, repeats: int | None = None) -> dict:
    """The loop's stream rate over a working set of >= 8 last-level caches, and its prefill GEMM rate."""
    dev, tdtype = _setup(device, dtype)
    cache = last_level_cache_bytes(dev)
    working = max(_CACHE_MULTIPLE * (cache or 0), _WORKING_SET_FLOOR[dev.type])
    with torch.inference_mode():
        weights, stacks = layer_reads(spec, dev, tdtype, batch, working)
        stream = linear_stream_rate(dev, weights, batch, repeats or _REPEATS[dev.type], stacks)
        compute = linear_compute_rate(dev, layer_matrices(spec, dev, tdtype, None), batch * prompt_tokens, 3)
    return {"stream": stream, "compute": compute, "cache_bytes": cache, "working_set_bytes": working}
