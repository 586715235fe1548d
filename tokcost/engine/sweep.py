"""sweep(): TPOT, tokens/s, cost and memory over a grid of batch sizes and prompt lengths, streamed.

One deployment and its kernels are compiled once for the whole grid (its layout and formats do not change with
the lengths); each batch's decode steps are kept as functions of the context (decode.py), so a point is the exact
mean over its contexts of a few kernels that read the cache. The per-context limits (max batch, critical batch
for KV) are computed once per prompt, the compute critical batch (independent of context) once. iter_sweep
yields the points in prompt-major order as they are computed, in bounded memory.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, fields

from tokcost.engine.decode import DecodeLines
from tokcost.engine.estimate import (
    critical_batch_compute,
    critical_batch_kv,
    decode_contexts,
    deployment,
    deployment_warnings,
    ttft_seconds,
    usd_per_million_tokens,
)
from tokcost.engine.memory import ReplicaMemory
from tokcost.engine.workload import Workload
from tokcost.hardware.spec import GpuSpec, Link
from tokcost.models.spec import ModelSpec
from tokcost.profiles import GENERIC, EngineProfile

# Decode lines kept per batch when every prompt revisits the same batches (each is a few kernels' folded forms).
MAX_CACHED_BATCHES = 4096


@dataclass(frozen=True, slots=True)
class SweepPoint:
    """One (batch, prompt) point: expected decode figures, the ceiling for reference, and memory."""

    model: str
    gpu: str
    gpus: int
    layout: str  # the parallel layout as compare labels it: "TP 8", "TP 8 x EP 8 (+8 redundant experts)"
    expected_engine: str  # the engine profile expected's figures are for (compare's key)
    weights: str  # the resolved precision: weight format, KV format and compute dtype
    kv_dtype: str
    compute_dtype: str
    flash_attention: bool  # fused attention (False: scores written out and read back, llama-bench's -fa 0)
    batch: int
    prompt_tokens: int
    cached_prefix_tokens: int  # of the prompt, served from a prefix cache (read, not recomputed)
    output_tokens: int
    ttft_s: float  # the batch's prefill from an empty pipeline plus the per-request cost, as estimate's
    tpot_s: float
    decode_tokens_per_s: float
    ceiling_ttft_s: float
    ceiling_tpot_s: float
    ceiling_decode_tokens_per_s: float
    usd_per_million_input_tokens: float | None
    usd_per_million_output_tokens: float | None
    used_bytes_per_gpu: int
    kv_cache_bytes_per_gpu: int
    state_bytes_per_gpu: int  # linear-attention and state-space layers' state (0 without such layers)
    capacity_bytes_per_gpu: int
    fits: bool
    max_batch: int
    critical_batch_compute: int | None
    critical_batch_kv: int | None
    decode_bound: str

    def as_dict(self) -> dict[str, object]:
        """Stable keys for JSON and CSV."""
        return {name: getattr(self, name) for name in POINT_FIELDS}


POINT_FIELDS = tuple(f.name for f in fields(SweepPoint))


def _workload(base: Workload, **update: int) -> Workload:
    """`base` with new lengths or batch, validated (the same ranges as the CLI's)."""
    return Workload.model_validate({**base.model_dump(exclude={"gpus"}), **update})


def iter_sweep(
    model: ModelSpec,
    gpu: GpuSpec,
    base: Workload,
    *,
    batches: list[int],
    prompts: list[int],
    network: Link | None = None,
    engine: EngineProfile = GENERIC,
) -> Iterator[SweepPoint]:
    """Every (prompt, batch) combination of `base`'s workload, prompts outermost, one point at a time."""
    for batch in dict.fromkeys(batches):  # each batch in range before any work
        _workload(base, batch=batch)
    d = deployment(model, gpu, _workload(base, batch=1), network, engine)
    ceiling, expected = d.rates("ceiling"), d.rates("expected")
    on_ceiling, on_expected = d.bound(ceiling), d.bound(expected)
    compute = critical_batch_compute(d, ceiling)
    memory = ReplicaMemory(model, gpu, d.precision, d.layout)
    price = base.price_per_hour_usd if base.price_per_hour_usd is not None else gpu.price_per_hour_usd
    cache: dict[int, tuple[DecodeLines, DecodeLines]] | None = {} if len(batches) <= MAX_CACHED_BATCHES else None
    gpus, capacity, layout = d.layout.gpus, round(gpu.memory_bytes), d.layout.label()
    for prompt in prompts:
        at_context = _workload(base, prompt_tokens=prompt, batch=1)
        first, last = decode_contexts(at_context) or (prompt, prompt)
        mean_context = (first + last) / 2
        max_batch = memory.max_batch(at_context)
        kv = critical_batch_kv(d, ceiling, mean_context)
        computed, total, prefix = at_context.computed_prompt_tokens, at_context.total_tokens, base.cached_prefix_tokens
        for batch in batches:
            lines = cache.get(batch) if cache is not None else None
            if lines is None:
                lines = (DecodeLines(on_expected, batch), DecodeLines(on_ceiling, batch))
                if cache is not None:
                    cache[batch] = lines
            tpot, ceiling_tpot = lines[0].mean(first, last), lines[1].mean(first, last)
            ttft = ttft_seconds(on_expected, expected, batch=batch, cached=prefix, computed=computed)
            ceiling_ttft = ttft_seconds(on_ceiling, ceiling, batch=batch, cached=prefix, computed=computed)
            used = memory.gpu_bytes(batch, computed, total, prefix)
            fits = used.total <= gpu.memory_bytes
            yield SweepPoint(
                model=model.name,
                gpu=gpu.name,
                gpus=gpus,
                layout=layout,
                expected_engine=engine.label,
                weights=d.precision.weights,
                kv_dtype=d.precision.kv,
                compute_dtype=d.precision.compute,
                flash_attention=d.precision.fused_attention,
                batch=batch,
                prompt_tokens=prompt,
                cached_prefix_tokens=prefix,
                output_tokens=base.output_tokens,
                ttft_s=ttft,
                tpot_s=tpot,
                decode_tokens_per_s=batch / tpot,
                ceiling_ttft_s=ceiling_ttft,
                ceiling_tpot_s=ceiling_tpot,
                ceiling_decode_tokens_per_s=batch / ceiling_tpot,
                # input tokens priced by prefill time, output tokens by decode time, as estimate prices them
                # no cost for a point memory cannot hold (as estimate and compare)
                usd_per_million_input_tokens=usd_per_million_tokens(price, gpus, ttft, batch * prompt)
                if fits
                else None,
                usd_per_million_output_tokens=usd_per_million_tokens(price, gpus, tpot, batch) if fits else None,
                used_bytes_per_gpu=round(used.total),
                kv_cache_bytes_per_gpu=round(used.kv),
                state_bytes_per_gpu=round(used.state),
                capacity_bytes_per_gpu=capacity,
                fits=fits,
                max_batch=max_batch,
                critical_batch_compute=compute,
                critical_batch_kv=kv,
                decode_bound=lines[0].at(mean_context)[1],  # expected, as the point's TPOT
            )


def sweep(
    model: ModelSpec,
    gpu: GpuSpec,
    base: Workload,
    *,
    batches: list[int],
    prompts: list[int],
    network: Link | None = None,
    engine: EngineProfile = GENERIC,
) -> list[SweepPoint]:
    """Every (prompt, batch) combination of `base`'s workload, prompts outermost (needs two or more output tokens)."""
    return list(iter_sweep(model, gpu, base, batches=batches, prompts=prompts, network=network, engine=engine))


def sweep_warnings(
    model: ModelSpec,
    gpu: GpuSpec,
    base: Workload,
    *,
    prompts: list[int],
    network: Link | None = None,
    engine: EngineProfile = GENERIC,
    batches: Sequence[int] = (),
) -> list[str]:
    """The deployment's warnings at each swept context (a point that does not fit says so in its own row), and at
    the largest swept batch where it passes the engine's CUDA-graph cap."""
    d = deployment(model, gpu, _workload(base, batch=1), network, engine)
    out: list[str] = []
    for prompt in prompts:
        out += deployment_warnings(d, _workload(base, prompt_tokens=prompt, batch=1), None)
    graphs = engine.graph_note(max(batches), gpu_name=gpu.name, memory_bytes=gpu.memory_bytes,
                               tp=d.layout.tp, dp=d.layout.dp) if batches else None  # fmt: skip
    return list(dict.fromkeys(out + ([graphs] if graphs else [])))
