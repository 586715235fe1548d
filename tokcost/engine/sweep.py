"""sweep(): TPOT, tokens/s, cost and memory over a grid of batch sizes and prompt lengths.

Lighter than estimate() per point (no prefill breakdown); the per-context limits (max batch, critical
batch) are computed once per context, not once per point.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from tokcost.engine.estimate import critical_batch, decode_step, mean_decode_seconds, usd_per_million_tokens
from tokcost.engine.memory import memory_report, per_gpu_bytes
from tokcost.engine.roofline import ceiling_rates, expected_rates
from tokcost.engine.workload import Workload, is_weight_only, resolve_precision
from tokcost.hardware.spec import GpuSpec
from tokcost.models.spec import ModelSpec


@dataclass(frozen=True, slots=True)
class SweepPoint:
    """One (batch, prompt) point: expected decode figures, the ceiling for reference, and memory."""

    model: str
    gpu: str
    gpus: int
    batch: int
    prompt_tokens: int
    output_tokens: int
    tpot_s: float
    decode_tokens_per_s: float
    ceiling_tpot_s: float
    ceiling_decode_tokens_per_s: float
    usd_per_million_output_tokens: float | None
    memory_bytes: float
    fits: bool
    max_batch: int
    critical_batch: int | None
    decode_bound: str

    def as_dict(self) -> dict[str, object]:
        """Stable keys for JSON and CSV."""
        return asdict(self)


def sweep(model: ModelSpec, gpu: GpuSpec, base: Workload, batches: list[int], prompts: list[int]) -> list[SweepPoint]:
    """Every (prompt, batch) combination of `base`'s workload, prompts outermost."""
    points = []
    for prompt in prompts:
        at_context = base.model_copy(update={"prompt_tokens": prompt, "batch": 1})
        p = resolve_precision(model, at_context)
        ceiling = ceiling_rates(gpu, p.compute)
        expected = expected_rates(gpu, p.compute, weight_only_quant=is_weight_only(p))
        mean_context = prompt + base.output_tokens / 2
        limits = memory_report(model, gpu, at_context, p)
        critical = critical_batch(model, at_context, p, ceiling, mean_context)
        price = base.price_per_hour_usd if base.price_per_hour_usd is not None else gpu.price_per_hour_usd
        for batch in batches:
            wl = at_context.model_copy(update={"batch": batch})
            tpot = mean_decode_seconds(model, wl, p, expected)
            ceiling_tpot = mean_decode_seconds(model, wl, p, ceiling)
            used = sum(per_gpu_bytes(model, gpu, p, wl.gpus, batch, wl.computed_prompt_tokens, wl.total_tokens))
            points.append(SweepPoint(
                model=model.name, gpu=gpu.name, gpus=wl.gpus, batch=batch, prompt_tokens=prompt,
                output_tokens=wl.output_tokens, tpot_s=tpot, decode_tokens_per_s=batch / tpot,
                ceiling_tpot_s=ceiling_tpot, ceiling_decode_tokens_per_s=batch / ceiling_tpot,
                usd_per_million_output_tokens=usd_per_million_tokens(price, wl.gpus, tpot, batch),
                memory_bytes=used * wl.gpus, fits=used <= gpu.memory_bytes, max_batch=limits.max_batch,
                critical_batch=critical,
                decode_bound=decode_step(model, wl, p, ceiling, mean_context).bound,  # same rates as critical
            ))  # fmt: skip
    return points
