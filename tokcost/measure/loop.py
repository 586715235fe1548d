"""The measured decode loop: prefill a random prompt, then greedy-decode, timing both.

Prefill time is the time to first token (TTFT); decode time / (output_tokens - 1) is the time
per output token (TPOT). Greedy argmax stays on the device and positions advance as a device
tensor, so the token loop never waits on the host. On CUDA: CUDA events, warm-up first, and
one decode step captured as a CUDA graph and replayed (the launch overhead a serving engine
removes); on the CPU: wall clock. Medians over repeats are reported, as gpt-fast's
generate script reports them, so that tokens/s x weight bytes gives achieved bytes/s.
"""

from __future__ import annotations

import gc
import math
import platform
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

import torch
from torch import Tensor

from tokcost.errors import MeasureError
from tokcost.measure.model import Decoder, build_model, weight_bytes
from tokcost.models.spec import ModelSpec

TORCH_DTYPES: dict[str, torch.dtype] = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
MODES = ("graph", "eager", "compile")


class PowerSampler(Protocol):
    """Anything that averages power between start() and stop() (see tokcost.measure.nvml)."""

    def start(self) -> None: ...

    def stop(self) -> float | None: ...


@dataclass(frozen=True)
class LoopResult:
    """Measured prefill and decode times of one (batch, prompt, output) shape."""

    device_name: str
    dtype: str
    batch: int
    prompt_tokens: int
    output_tokens: int
    mode: str  # the mode actually used ("graph" falls back to "eager" on the CPU)
    threads: int | None  # CPU threads; None on CUDA
    ttft_s: float  # median prefill time (prompt in, first token out)
    tpot_s: float  # median decode time per output token
    decode_tokens_per_s: float  # batch / tpot_s
    ttft_s_all: list[float]
    tpot_s_all: list[float]
    weight_bytes_measured: int  # bytes of all parameters of the built model
    kv_cache_bytes: int  # bytes of the preallocated static KV cache
    context_tokens: int  # cache length every decode step attends over (prompt + output, masked)
    avg_power_w: float | None = None
    joules_per_output_token: float | None = None
    notes: list[str] = field(default_factory=list)


def _next_token(model: Decoder, tokens: Tensor, input_pos: Tensor) -> Tensor:
    """Greedy next token [B, 1] after tokens [B, S] at positions input_pos [S]."""
    return model(tokens, input_pos).argmax(dim=-1)


class DecodeRunner:
    """Prefill plus greedy decode over static buffers; `decode` never syncs with the host."""

    def __init__(self, model: Decoder, prompt: Tensor, output_tokens: int, mode: str) -> None:
        batch, self.prompt_len = prompt.shape
        if batch > model.max_batch or self.prompt_len + output_tokens > model.max_seq:
            raise MeasureError(
                f"batch {batch} x {self.prompt_len} + {output_tokens} tokens exceeds the cache "
                f"({model.max_batch} x {model.max_seq})"
            )
        self.model, self.mode, self.steps = model, mode, output_tokens - 1
        device = prompt.device
        self.prompt = prompt
        self.prompt_pos = torch.arange(self.prompt_len, device=device)  # [P]
        self.seq = torch.zeros(batch, model.max_seq, dtype=torch.long, device=device)  # [B, T] all tokens
        self.seq[:, : self.prompt_len] = prompt
        self.tok = torch.zeros(batch, 1, dtype=torch.long, device=device)  # [B, 1] last token
        self.pos = torch.zeros(1, dtype=torch.long, device=device)  # [1] its position
        self.graph: torch.cuda.CUDAGraph | None = None
        self.next_fn: Callable[[Tensor, Tensor], Tensor] = model
        if mode == "compile":  # the decode step only; prefill stays eager
            self.next_fn = torch.compile(model, mode="reduce-overhead" if device.type == "cuda" else None)

    def step(self) -> None:
        """One greedy decode step, in place: tok and pos advance and the new token lands in seq."""
        nxt = self.next_fn(self.tok, self.pos).argmax(dim=-1)  # [B, 1]
        self.pos.add_(1)
        self.seq.index_copy_(1, self.pos, nxt)
        self.tok.copy_(nxt)

    def prefill(self) -> None:
        """Run the prompt (overwriting the cache from position 0) and emit the first token."""
        first = _next_token(self.model, self.prompt, self.prompt_pos)  # [B, 1]
        self.seq[:, self.prompt_len : self.prompt_len + 1] = first
        self.tok.copy_(first)
        self.pos.fill_(self.prompt_len)

    def decode(self) -> None:
        """The remaining output_tokens - 1 steps: graph replays or eager calls."""
        for _ in range(self.steps):
            if self.graph is not None:
                self.graph.replay()
            else:
                self.step()

    def capture(self, warm_steps: int = 3) -> None:
        """Record one decode step as a CUDA graph, after warm-up steps on a side stream."""
        self.prefill()
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(warm_steps):
                self.step()
        torch.cuda.current_stream().wait_stream(side)
        self.prefill()  # positions back to the prompt end before recording
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            self.step()
        self.graph = graph

    def generated(self) -> Tensor:
        """The output tokens of the last run: [B, output_tokens]."""
        return self.seq[:, self.prompt_len : self.prompt_len + self.steps + 1]


def random_prompt(spec: ModelSpec, batch: int, prompt_tokens: int, device: torch.device, seed: int) -> Tensor:
    """Uniform random token ids [B, P] from a seeded generator."""
    gen = torch.Generator(device=device).manual_seed(seed)
    return torch.randint(0, spec.vocab_size, (batch, prompt_tokens), generator=gen, device=device)


@torch.inference_mode()
def generate(model: Decoder, prompt: Tensor, output_tokens: int, mode: str = "eager") -> Tensor:
    """Greedy-decode output_tokens tokens after prompt [B, P]: [B, output_tokens]."""
    if mode == "graph" and prompt.device.type != "cuda":
        mode = "eager"
    gen = DecodeRunner(model, prompt, output_tokens, mode)
    if mode == "graph":
        gen.capture()
    gen.prefill()
    gen.decode()
    return gen.generated().clone()


def _resolve(device: str, dtype: str, mode: str) -> tuple[torch.device, str, list[str]]:
    """Check device, dtype and mode; returns the device, the mode that will run, and notes."""
    if dtype not in TORCH_DTYPES:
        raise MeasureError(f"dtype {dtype!r} cannot be measured; use one of {', '.join(TORCH_DTYPES)}")
    if mode not in MODES:
        raise MeasureError(f"mode {mode!r} is unknown; use one of {', '.join(MODES)}")
    try:
        dev = torch.device(device)
    except RuntimeError:
        raise MeasureError(f"device {device!r} is not supported; use cuda or cpu") from None
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise MeasureError("CUDA is not available here (torch built without CUDA, or no GPU); use --device cpu")
        return (torch.device("cuda", torch.cuda.current_device()) if dev.index is None else dev), mode, []
    if dev.type != "cpu":
        raise MeasureError(f"device {device!r} is not supported; use cuda or cpu")
    if mode == "graph":
        return dev, "eager", ["CUDA graphs need a GPU: the CPU runs the decode step eagerly"]
    return dev, mode, []


def _device_name(device: torch.device) -> str:
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
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


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
    mode: str = "graph",
    threads: int | None = None,
    on_progress: Callable[[str], None] | None = None,
    power_sampler: PowerSampler | None = None,
    seed: int = 0,
) -> LoopResult:
    """Build `spec` with random weights and time prefill and greedy decode: medians over `repeats`."""
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
        return _measure(
            spec,
            dev,
            dtype=dtype,
            batch=batch,
            prompt_tokens=prompt_tokens,
            output_tokens=output_tokens,
            repeats=repeats,
            warmup=warmup,
            mode=used_mode,
            progress=on_progress or (lambda _msg: None),
            power_sampler=power_sampler,
            seed=seed,
            notes=notes,
        )
    except torch.cuda.OutOfMemoryError as exc:
        reason = str(exc).splitlines()[0]
    finally:
        torch.set_num_threads(previous_threads)
    _free_cuda()
    weights_bytes = spec.params_total * TORCH_DTYPES[dtype].itemsize
    need_bytes = weights_bytes + spec.kv_bytes_per_token(dtype) * (prompt_tokens + output_tokens) * batch
    raise MeasureError(
        f"out of memory on {_device_name(dev)}: {spec.name} needs about {need_bytes / 1e9:.1f} GB of weights "
        f"and KV cache at batch {batch}; measure fewer layers (--layers) or a smaller batch ({reason})"
    )


def _free_cuda() -> None:
    """Release cached CUDA memory after an out-of-memory error."""
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


@torch.inference_mode()
def _measure(
    spec: ModelSpec,
    dev: torch.device,
    *,
    dtype: str,
    batch: int,
    prompt_tokens: int,
    output_tokens: int,
    repeats: int,
    warmup: int,
    mode: str,
    progress: Callable[[str], None],
    power_sampler: PowerSampler | None,
    seed: int,
    notes: list[str],
) -> LoopResult:
    """Build, warm up and time; see measure_decode."""
    max_seq = prompt_tokens + output_tokens
    progress(f"building {spec.name} ({spec.layers} layers, {dtype}) on {dev}")
    model = build_model(spec, dtype=TORCH_DTYPES[dtype], device=dev, max_batch=batch, max_seq=max_seq, seed=seed)
    gen = DecodeRunner(model, random_prompt(spec, batch, prompt_tokens, dev, seed), output_tokens, mode)
    if mode == "graph":
        progress("capturing one decode step as a CUDA graph")
        gen.capture()
    if mode == "compile":
        progress("compiling the decode step (torch.compile)")
        warmup = max(warmup, 2)  # the first calls compile, and reduce-overhead records its graphs
    for i in range(warmup):
        progress(f"warm-up {i + 1}/{warmup}")
        gen.prefill()
        gen.decode()
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)
    ttft_all, decode_all = [], []
    if power_sampler is not None:
        power_sampler.start()
    for i in range(repeats):
        ttft_all.append(_timed(dev, gen.prefill))
        decode_all.append(_timed(dev, gen.decode))
        progress(f"run {i + 1}/{repeats}: ttft {ttft_all[-1] * 1e3:.2f} ms, decode {decode_all[-1] * 1e3:.2f} ms")
    avg_power_w = power_sampler.stop() if power_sampler is not None else None
    steps = output_tokens - 1
    tpot_all = [t / steps for t in decode_all]
    tpot_s = statistics.median(tpot_all)
    if not all(math.isfinite(t) and t > 0 for t in ttft_all + tpot_all):
        raise MeasureError(f"the timer returned a non-positive time: {ttft_all + tpot_all}")
    notes = (
        notes
        + model.notes
        + [f"decode attends over the whole static cache of {max_seq} tokens (later positions masked)"]
    )
    if power_sampler is not None and avg_power_w is None:
        notes.append("power was not sampled (NVML unavailable)")
    elif avg_power_w is not None:
        notes.append("power is averaged over all timed repeats, prefill included")
    joules = avg_power_w * statistics.median(decode_all) / (batch * steps) if avg_power_w is not None else None
    return LoopResult(
        device_name=_device_name(dev),
        dtype=dtype,
        batch=batch,
        prompt_tokens=prompt_tokens,
        output_tokens=output_tokens,
        mode=mode,
        threads=torch.get_num_threads() if dev.type == "cpu" else None,
        ttft_s=statistics.median(ttft_all),
        tpot_s=tpot_s,
        decode_tokens_per_s=batch / tpot_s,
        ttft_s_all=ttft_all,
        tpot_s_all=tpot_all,
        weight_bytes_measured=weight_bytes(model),
        kv_cache_bytes=model.kv_cache_bytes(),
        context_tokens=max_seq,
        avg_power_w=avg_power_w,
        joules_per_output_token=joules,
        notes=notes,
    )
