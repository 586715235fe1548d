"""estimate(): TTFT, TPOT, throughput, memory and cost of a workload, as "ceiling" and "expected".

TTFT = prefill time. TPOT = mean decode step over the output as the context grows (steps j = 1..O-1 each
attend over P + j tokens). E2E = TTFT + (O - 1) x TPOT. Decode tokens/s = B / TPOT.
"""

from __future__ import annotations

from dataclasses import dataclass

from tokcost.engine.memory import MemoryReport, memory_report
from tokcost.engine.roofline import Bound, PassCost, Rates, ceiling_rates, expected_rates, price_pass
from tokcost.engine.traffic import decode_counts, prefill_counts
from tokcost.engine.workload import Precision, Workload, is_weight_only, resolve_precision
from tokcost.hardware.spec import GpuSpec
from tokcost.models.spec import ModelSpec

SECONDS_PER_HOUR = 3600
PER_MILLION = 1e6
CRITICAL_BATCH_SEARCH_LIMIT = 1 << 24


def usd_per_million_tokens(price_per_hour_usd: float | None, gpus: int, seconds: float, tokens: float) -> float | None:
    """$ per GPU-hour x GPUs / 3600 x the seconds `tokens` tokens take x 1e6; None without a price."""
    if price_per_hour_usd is None:
        return None
    return price_per_hour_usd * gpus / SECONDS_PER_HOUR * seconds / tokens * PER_MILLION


@dataclass(frozen=True, slots=True)
class Scenario:
    """Times, rates and costs under one set of rates (datasheet peaks, or achievable fractions)."""

    ttft_s: float
    tpot_s: float
    e2e_s: float
    decode_tokens_per_s: float
    prefill_bound: Bound
    decode_bound: Bound
    usd_per_million_input_tokens: float | None
    usd_per_million_output_tokens: float | None
    joules_per_output_token: float | None
    prefill: PassCost
    decode_step: PassCost  # the step at the mean decode context, for the breakdown


@dataclass(frozen=True, slots=True)
class Estimate:
    """Everything `tokcost estimate` reports for one (model, GPU, workload)."""

    model: ModelSpec
    gpu: GpuSpec
    workload: Workload
    precision: Precision
    price_per_hour_usd: float | None
    memory: MemoryReport
    mean_decode_context: float
    critical_batch: int | None
    ceiling: Scenario
    expected: Scenario


def decode_step(
    model: ModelSpec, wl: Workload, p: Precision, rates: Rates, context: float, batch: int | None = None
) -> PassCost:
    return price_pass(decode_counts(model, p, batch or wl.batch, context, wl.gpus), wl.gpus, rates)


def mean_decode_seconds(model: ModelSpec, wl: Workload, p: Precision, rates: Rates) -> float:
    """Mean step time over contexts P+1 .. P+O-1, summed exactly: piecewise linear in the context."""
    first, last = wl.prompt_tokens + 1, wl.prompt_tokens + max(wl.output_tokens - 1, 1)
    window = model.sliding_window.window_tokens if model.sliding_window else None
    spans = [(first, last)]
    if window and first < window <= last:  # attention reads grow until the window, then stay flat
        spans = [(first, window - 1), (window, last)]
    total = 0.0
    while spans:
        a, b = spans.pop()
        lo, hi = decode_step(model, wl, p, rates, a), decode_step(model, wl, p, rates, b)
        same_side = all(x.bound == y.bound for x, y in zip(lo.components, hi.components, strict=True))
        if same_side:
            # each component is one linear function of c on [a, b]: the sum is the count x the middle value
            total += (b - a + 1) * decode_step(model, wl, p, rates, (a + b) / 2).seconds
        elif b - a < 2:  # one or two steps on either side of a flip: add them as they are
            total += lo.seconds + (hi.seconds if b > a else 0.0)
        else:
            mid = (a + b) // 2
            spans += [(a, mid), (mid + 1, b)]
    return total / (last - first + 1)


def critical_batch(model: ModelSpec, wl: Workload, p: Precision, rates: Rates, context: float) -> int | None:
    """Smallest batch whose decode step at `context` is compute-bound (total FLOP time > byte time); None if never."""

    def compute_bound(batch: int) -> bool:
        return decode_step(model, wl, p, rates, context, batch).bound == "compute"

    if not compute_bound(CRITICAL_BATCH_SEARCH_LIMIT):
        return None
    lo, hi = 0, CRITICAL_BATCH_SEARCH_LIMIT  # compute_bound(hi) holds; find the first batch where it does
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if compute_bound(mid) else (mid, hi)
    return hi


def _scenario(
    model: ModelSpec, gpu: GpuSpec, wl: Workload, p: Precision, rates: Rates, price: float | None
) -> Scenario:
    prefill = price_pass(
        prefill_counts(model, p, wl.batch, wl.prompt_tokens, wl.cached_prefix_tokens, wl.gpus),
        wl.gpus,
        rates,
        extra_overhead_s=rates.request_overhead_s,  # the request's fixed cost lands on its first token
    )
    tpot = mean_decode_seconds(model, wl, p, rates)
    ttft = prefill.seconds
    mean_context = wl.prompt_tokens + wl.output_tokens / 2
    return Scenario(
        ttft_s=ttft,
        tpot_s=tpot,
        e2e_s=ttft + (wl.output_tokens - 1) * tpot,
        decode_tokens_per_s=wl.batch / tpot,
        prefill_bound=prefill.bound,
        decode_bound=decode_step(model, wl, p, rates, mean_context).bound,
        # input tokens are priced by prefill time, output tokens by decode time, both per GPU-hour x GPUs
        # input tokens are priced by prefill time, output tokens by decode time, both per GPU-hour x GPUs
        usd_per_million_input_tokens=usd_per_million_tokens(price, wl.gpus, ttft, wl.batch * wl.prompt_tokens),
        usd_per_million_output_tokens=usd_per_million_tokens(price, wl.gpus, tpot, wl.batch),
        # board power (TDP) for the whole step: an upper bound on energy per token
        joules_per_output_token=gpu.tdp_w * wl.gpus * tpot / wl.batch if gpu.tdp_w else None,
        prefill=prefill,
        decode_step=decode_step(model, wl, p, rates, mean_context),
    )


def estimate(model: ModelSpec, gpu: GpuSpec, workload: Workload) -> Estimate:
    """Ceiling (datasheet) and expected (achievable) performance, memory and cost of `workload`."""
    p = resolve_precision(model, workload)
    ceiling = ceiling_rates(gpu, p.compute)
    expected = expected_rates(gpu, p.compute, weight_only_quant=is_weight_only(p))
    price = workload.price_per_hour_usd if workload.price_per_hour_usd is not None else gpu.price_per_hour_usd
    mean_context = workload.prompt_tokens + workload.output_tokens / 2
    return Estimate(
        model=model,
        gpu=gpu,
        workload=workload,
        precision=p,
        price_per_hour_usd=price,
        memory=memory_report(model, gpu, workload, p),
        mean_decode_context=mean_context,
        critical_batch=critical_batch(model, workload, p, ceiling, mean_context),
        ceiling=_scenario(model, gpu, workload, p, ceiling, price),
        expected=_scenario(model, gpu, workload, p, expected, price),
    )
