"""The measured decode loop: build the model, prefill a random prompt, greedy-decode, time every step.

Prefill time is the time to first token (TTFT); the mean decode step is the time per output token
(TPOT). CUDA events on a GPU, wall clock on the CPU; warm-up first. Medians and spreads over repeats
are reported, as gpt-fast's generate script reports them, so that tokens/s x bytes per step gives
achieved bytes/s. Energy comes from the GPU's energy counter around the decode phases only. After the
timed runs, one untimed pass counts what the loop read (distinct experts of an MoE), and optional probes
time the model's own linears (calibration: see probes.loop_rates).
"""

from __future__ import annotations

import math
import platform
import statistics
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch

from tokcost.errors import MeasureError
from tokcost.measure import clock
from tokcost.measure.faults import OutOfMemory, first_line, is_oom, release
from tokcost.measure.model import Decoder, build_model, decode_read_bytes, weight_bytes
from tokcost.measure.runner import BUCKET_TOKENS, MODES, DecodeRunner, random_prompt
from tokcost.measure.shard import Shard
from tokcost.measure.stats import Spread, spread
from tokcost.models.spec import ModelSpec

TORCH_DTYPES: dict[str, torch.dtype] = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


class EnergyMeter(Protocol):
    """Energy over one phase: start() then stop() -> joules, or None (see tokcost.measure.nvml)."""

    def start(self) -> None: ...

    def stop(self) -> float | None: ...


@dataclass(frozen=True)
class LoopResult:
    """Measured prefill and decode of one (batch, prompt, output) shape, and what the loop read."""

    device_name: str
    dtype: str
    batch: int
    prompt_tokens: int
    output_tokens: int
    mode: str  # the mode that ran
    threads: int | None  # CPU threads per rank; None on CUDA
    tp: int  # tensor-parallel ranks
    ttft: Spread  # prefill time over repeats
    tpot: Spread  # mean decode step per repeat, over repeats
    step: Spread  # every decode step of every repeat
    weight_bytes_measured: int  # all parameters of the built model (this rank)
    kv_cache_bytes: int  # the preallocated cache (this rank)
    context_tokens: int  # cache length: prompt + output
    decode_contexts: list[int]  # slots per sequence each decode step read (full-attention layers)
    weight_read_bytes: float  # weight bytes one decode step read (this rank), counted from the model
    kv_read_bytes: float  # KV bytes the mean decode step read (this rank)
    experts_per_layer: float | None  # distinct experts one decode step read per MoE layer
    collective_s_per_step: dict[str, float] | None  # in-loop collective time per decode step (eager TP)
    loop_rates: dict[str, Any] | None = None  # the model's own linears timed (calibration)
    flush_s_per_step: float | None = None  # cache flushes inside each step (a skeleton's; see flush.py)
    joules_per_output_token: float | None = None
    avg_power_w: float | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def ttft_s(self) -> float:
        """Median prefill time."""
        return self.ttft.median

    @property
    def tpot_s(self) -> float:
        """Median time per output token."""
        return self.tpot.median

    @property
    def decode_tokens_per_s(self) -> float:
        """Sequences x steps per second at the median TPOT (all ranks together make one token per sequence)."""
        return self.batch / self.tpot_s


def _resolve(device: str, dtype: str, mode: str) -> tuple[torch.device, str, list[str]]:
    """Check device, dtype and mode; returns the device, the mode that will run, and notes."""
    if dtype not in TORCH_DTYPES:
        raise MeasureError(f"dtype {dtype!r} cannot be measured; use one of {', '.join(TORCH_DTYPES)}")
    if mode not in (*MODES, "auto"):
        raise MeasureError(f"mode {mode!r} is unknown; use one of auto, {', '.join(MODES)}")
    try:
        dev = torch.device(device)
    except RuntimeError:
        raise MeasureError(f"device {device!r} is not supported; use cuda or cpu") from None
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise MeasureError("CUDA is not available here (torch built without CUDA, or no GPU); use --device cpu")
        dev = torch.device("cuda", torch.cuda.current_device()) if dev.index is None else dev
        return dev, ("compile" if mode == "auto" else mode), []
    if dev.type != "cpu":
        raise MeasureError(f"device {device!r} is not supported; use cuda or cpu")
    if mode == "graph":
        return dev, "eager", ["CUDA graphs need a GPU: the CPU runs the decode step eagerly"]
    return dev, ("eager" if mode == "auto" else mode), []


def device_name(device: torch.device) -> str:
    """The GPU's name from CUDA, or the CPU model from /proc/cpuinfo."""
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "cpu"


def _timed(device: torch.device, fn: Callable[[], None]) -> float:
    """Seconds one call of fn takes: CUDA events on a GPU, wall clock on the CPU."""
    if device.type == "cuda":
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / 1e3  # elapsed_time is in milliseconds
    t0 = clock.now()
    fn()
    return clock.now() - t0


def measure_decode(
    spec: ModelSpec,
    *,
    device: str,
    dtype: str,
    batch: int,
    prompt_tokens: int,
    output_tokens: int,
    repeats: int = 5,
    warmup: int = 1,
    mode: str = "auto",
    threads: int | None = None,
    shard: Shard | None = None,
    on_progress: Callable[[str], None] | None = None,
    energy: EnergyMeter | None = None,
    calibrate: bool = False,
    flush_like: ModelSpec | None = None,
    seed: int = 0,
) -> LoopResult:
    """Build `spec` (or this rank's slice) with random weights and time prefill and greedy decode."""
    if batch < 1 or prompt_tokens < 1 or output_tokens < 2 or repeats < 1 or warmup < 0:
        raise MeasureError(
            "need batch >= 1, prompt_tokens >= 1, output_tokens >= 2 (TPOT is decode time / (output - 1)), "
            f"repeats >= 1, warmup >= 0; got {batch}, {prompt_tokens}, {output_tokens}, {repeats}, {warmup}"
        )
    dev, used_mode, notes = _resolve(device, dtype, mode)
    if prompt_tokens + output_tokens > spec.max_context:
        notes.append(f"prompt + output ({prompt_tokens + output_tokens}) exceeds max_context ({spec.max_context})")
    previous_threads = torch.get_num_threads()
    if dev.type == "cpu" and threads is not None:
        torch.set_num_threads(threads)
    try:
        with torch.inference_mode():
            return _measure(spec, dev, dtype=dtype, batch=batch, prompt_tokens=prompt_tokens,
                            output_tokens=output_tokens, repeats=repeats, warmup=warmup, mode=used_mode,
                            shard=shard or Shard(), progress=on_progress or (lambda _msg: None), energy=energy,
                            calibrate=calibrate, flush_like=flush_like, seed=seed, notes=notes)  # fmt: skip
    except Exception as exc:
        if not is_oom(exc):
            raise
        release()
        raise OutOfMemory(f"out of memory on {device_name(dev)} at batch {batch}: {first_line(exc)}") from None
    finally:
        torch.set_num_threads(previous_threads)


def _moe_dispatch(model: Decoder, dev: torch.device, dtype: str, mode: str, notes: list[str]) -> str:
    """Grouped expert matmuls where the device runs them; else per-expert matmuls, eagerly."""
    experts = model.experts()
    if not experts:
        return mode
    from tokcost.measure.moe import grouped_mm_error

    why = grouped_mm_error(dev, TORCH_DTYPES[dtype])
    if why is None:
        return mode
    for e in experts:
        e.grouped = False
    notes.append(f"grouped expert matmuls do not run here ({why}): one matmul per routed expert")
    if mode != "eager":
        notes.append("per-expert matmuls need the counts on the host: the decode step runs eagerly")
    return "eager"


def _measure(
    spec: ModelSpec, dev: torch.device, *, dtype: str, batch: int, prompt_tokens: int, output_tokens: int,
    repeats: int, warmup: int, mode: str, shard: Shard, progress: Callable[[str], None],
    energy: EnergyMeter | None, calibrate: bool, flush_like: ModelSpec | None, seed: int, notes: list[str],
) -> LoopResult:  # fmt: skip
    """Build, warm up, time, count; see measure_decode."""
    max_seq = prompt_tokens + output_tokens
    progress(f"building {spec.name} ({spec.layers} layers, {dtype}) on {dev}")
    model = build_model(spec, dtype=TORCH_DTYPES[dtype], device=dev, max_batch=batch, max_seq=max_seq, seed=seed,
                        shard=shard)  # fmt: skip
    mode = _moe_dispatch(model, dev, dtype, mode, notes)
    flush = _flush_like(model, flush_like, dev, dtype, shard) if flush_like is not None and mode == "eager" else None
    gen = DecodeRunner(model, random_prompt(spec.vocab_size, batch, prompt_tokens, dev, seed), output_tokens, mode)
    if dev.type == "cuda" and mode != "eager":
        progress(f"capturing the decode step per KV bucket ({mode})")
        gen.capture()
    for i in range(max(warmup, 2 if mode == "compile" else 0)):
        progress(f"warm-up {i + 1}")
        gen.prefill()
        gen.decode()
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)
    shard.reset()
    time_collectives = dev.type == "cpu" and mode == "eager"
    ttft_all, tpot_all, steps_all, joules = [], [], [], []
    for i in range(repeats):
        ttft_all.append(_timed(dev, gen.prefill))  # the prefill's collectives are not the decode step's
        if energy is not None:
            energy.start()
        if flush is not None:
            flush.counting = True
        shard.timed = time_collectives  # per decode step: the collectives of the decode steps alone
        step_s = gen.timed_decode(dev)
        shard.timed = False
        if flush is not None:
            flush.counting = False
        if energy is not None:
            joules.append(energy.stop())
        steps_all += step_s
        tpot_all.append(statistics.fmean(step_s))
        progress(f"run {i + 1}/{repeats}: ttft {ttft_all[-1] * 1e3:.2f} ms, tpot {tpot_all[-1] * 1e3:.3f} ms")
    shard.timed = False
    steps = output_tokens - 1
    collectives = {k: v / (repeats * steps) for k, v in shard.seconds.items()} if shard.calls["all_reduce"] else None
    if not all(math.isfinite(t) and t > 0 for t in ttft_all + steps_all):
        raise MeasureError(f"the timer returned a non-positive time: {min(ttft_all + steps_all)}")
    flush_s = flush.seconds / (repeats * (output_tokens - 1)) if flush is not None else None
    experts = _count_experts(model, gen)
    rates = None
    if calibrate:
        from tokcost.measure.probes import loop_rates

        progress("probe: the model's own linears")
        rates = loop_rates(model, batch, prompt_tokens, experts)
    joules_per_token = sum(joules) / (batch * steps * repeats) if joules and None not in joules else None
    if energy is not None and joules_per_token is None:
        notes.append("energy was not read (NVML unavailable)")
    kv_reads = gen.kv_read_bytes()
    if mode != "eager":
        notes.append(
            f"the {mode} step attends over KV buckets of {BUCKET_TOKENS} slots (the loop counts the extra reads)"
        )
    return LoopResult(
        device_name=device_name(dev), dtype=dtype, batch=batch, prompt_tokens=prompt_tokens,
        output_tokens=output_tokens, mode=mode, threads=torch.get_num_threads() if dev.type == "cpu" else None,
        tp=shard.world, ttft=spread(ttft_all), tpot=spread(tpot_all), step=spread(steps_all),
        weight_bytes_measured=weight_bytes(model), kv_cache_bytes=model.kv_cache_bytes(), context_tokens=max_seq,
        decode_contexts=gen.contexts(), weight_read_bytes=decode_read_bytes(model, batch, experts),
        kv_read_bytes=statistics.fmean(kv_reads), experts_per_layer=experts, collective_s_per_step=collectives,
        loop_rates=rates, flush_s_per_step=flush_s,
        joules_per_output_token=joules_per_token,
        avg_power_w=sum(joules) / sum(steps_all) if joules_per_token is not None else None,
        notes=notes + model.notes,
    )  # fmt: skip


def _count_experts(model: Decoder, gen: DecodeRunner) -> float | None:
    """Distinct experts per MoE layer per decode step, from one untimed eager pass with counting on."""
    experts = model.experts()
    if not experts:
        return None
    graphs, gen.graphs, bucketed, gen.bucketed = gen.graphs, {}, gen.bucketed, False
    next_fn, gen.next_fn = gen.next_fn, model.next_token
    gen.prefill()
    for e in experts:
        e.count_reads, e.reads = True, []
    gen.decode()
    counts = [n for e in experts for n in e.reads]
    for e in experts:
        e.count_reads, e.reads = False, []
    gen.graphs, gen.bucketed, gen.next_fn = graphs, bucketed, next_fn
    return statistics.fmean(counts)


def _flush_like(model: Decoder, real_spec: ModelSpec, dev: torch.device, dtype: str, shard: Shard) -> Any:
    """On the CPU (eager), flush caches before each linear as the real model's linears would (see flush.py)."""
    from tokcost.measure.flush import CacheFlush, attach, cpu_cache_bytes

    caches = cpu_cache_bytes()
    if dev.type != "cpu" or 2 not in caches:
        return None
    with torch.device("meta"):
        real = Decoder(real_spec, Shard(shard.rank, shard.world))
    # the ring is as large as the real weight stream (its cache footprint), at most twice the last-level cache
    linears = [m.weight for m in real.modules() if isinstance(m, torch.nn.Linear)]
    stream = sum(w.numel() for w in linears) * model.output.weight.element_size()
    flush = CacheFlush(TORCH_DTYPES[dtype], caches[2], min(stream, 2 * max(caches.values())))
    attach(model, real, flush)
    return flush
