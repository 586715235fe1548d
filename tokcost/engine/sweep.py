"""sweep(): TPOT, tokens/s, cost and memory over a grid of batch sizes and prompt lengths.

Lighter than estimate() per point (no prefill breakdown); the per-context limits (max batch, critical
batches) are computed once per context, not once per point.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import asdict, dataclass

from tokcost.engine.estimate import (
    critical_batch_compute,
    critical_batch_kv,
    decode_contexts,
    deployment,
    deployment_warnings,
    mean_decode_seconds,
    usd_per_million_tokens,
)
from tokcost.engine.memory import gpu_bytes, memory_report
from tokcost.engine.workload import Workload
from tokcost.hardware.spec import GpuSpec, Link
from tokcost.models.spec import ModelSpec
from tokcost.profiles import GENERIC, EngineProfile


@dataclass(frozen=True, slots=True)
class SweepPoint:
    """One (batch, prompt) point: expected decode figures, the ceiling for reference, and memory."""

    model: str
    gpu: str
    gpus: int
    weights: str  # the resolved precision: weight format, KV format and compute dtype
    kv_dtype: str
    compute_dtype: str
    batch: int
    prompt_tokens: int
    output_tokens: int
    tpot_s: float
    decode_tokens_per_s: float
    ceiling_tpot_s: float
    ceiling_decode_tokens_per_s: float
    usd_per_million_output_tokens: float | None
    used_bytes_per_gpu: int
    kv_cache_bytes_per_gpu: int
    capacity_bytes_per_gpu: int
    fits: bool
    max_batch: int
    critical_batch_compute: int | None
    critical_batch_kv: int | None
    decode_bound: str

    def as_dict(self) -> dict[str, object]:
        """Stable keys for JSON and CSV."""
        return asdict(self)


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
    """sweep()'s points one at a time, prompts outermost: memory bounded by one context's state, not the grid."""
    for prompt in prompts:
        at_context = base.model_copy(update={"prompt_tokens": prompt, "batch": 1})
        d = deployment(model, gpu, at_context, network, engine)
        ceiling, expected = d.rates("ceiling"), d.rates("expected")
        first, last = decode_contexts(at_context) or (prompt, prompt)
        mean_context = (first + last) / 2
        limits = memory_report(model, gpu, at_context, d.precision, d.layout)
        compute = critical_batch_compute(d, ceiling)
        kv = critical_batch_kv(d, ceiling, mean_context)
        price = base.price_per_hour_usd if base.price_per_hour_usd is not None else gpu.price_per_hour_usd
        for batch in batches:
            wl = at_context.model_copy(update={"batch": batch})
            tpot = mean_decode_seconds(d, expected, batch=batch, first=first, last=last)
            ceiling_tpot = mean_decode_seconds(d, ceiling, batch=batch, first=first, last=last)
            used = gpu_bytes(model, gpu, d.precision, d.layout, wl, batch, wl.computed_prompt_tokens, wl.total_tokens)
            yield SweepPoint(
                model=model.name,
                gpu=gpu.name,
                gpus=d.layout.gpus,
                weights=d.precision.weights,
                kv_dtype=d.precision.kv,
                compute_dtype=d.precision.compute,
                batch=batch,
                prompt_tokens=prompt,
                output_tokens=wl.output_tokens,
                tpot_s=tpot,
                decode_tokens_per_s=batch / tpot,
                ceiling_tpot_s=ceiling_tpot,
                ceiling_decode_tokens_per_s=batch / ceiling_tpot,
                usd_per_million_output_tokens=usd_per_million_tokens(price, d.layout.gpus, tpot, batch),
                used_bytes_per_gpu=round(used.total),
                kv_cache_bytes_per_gpu=round(used.kv),
                capacity_bytes_per_gpu=round(gpu.memory_bytes),
                fits=used.total <= gpu.memory_bytes,
                max_batch=limits.max_batch,
                critical_batch_compute=compute,
                critical_batch_kv=kv,
                decode_bound=d.decode(ceiling, batch=batch, cached=mean_context).bound,
            )


def sweep_warnings(
    model: ModelSpec,
    gpu: GpuSpec,
    base: Workload,
    *,
    prompts: list[int],
    network: Link | None = None,
    engine: EngineProfile = GENERIC,
) -> list[str]:
    """The deployment's warnings at each swept context (a point that does not fit says so in its own row)."""
    out: list[str] = []
    for prompt in prompts:
        wl = base.model_copy(update={"prompt_tokens": prompt, "batch": 1})
        d = deployment(model, gpu, wl, network, engine)
        memory = memory_report(model, gpu, wl, d.precision, d.layout)
        out += [w for w in deployment_warnings(d, wl, memory) if not w.startswith("does not fit")]
    return list(dict.fromkeys(out))
