"""estimate(): TTFT, TPOT, throughput, memory and cost of a workload, as "ceiling" and "expected".

TTFT = the prefill pass (from an empty pipeline) plus the per-request overhead. Decode step j = 1..O-1 runs
the output token j with P + j - 1 tokens already cached; TPOT is their mean, summed exactly (the step time
is piecewise linear in the context). E2E = TTFT + (O - 1) x TPOT; decode tokens/s = B / TPOT. With one
output token there is no decode step: TPOT is undefined (None), not zero.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import cached_property

from tokcost.engine.band import band_of
from tokcost.engine.collectives import Links, links_of
from tokcost.engine.compiled import BoundPass, CompiledPass, Rate, Row
from tokcost.engine.forms import Form
from tokcost.engine.kernels import KV_ATTENTION
from tokcost.engine.layout import Layout, kv_replication, layout_problem
from tokcost.engine.memory import MemoryReport, engine_reserve, memory_report
from tokcost.engine.passcost import Bound, PassCost
from tokcost.engine.roofline import (
    KernelRate,
    Rates,
    ceiling_rates,
    expected_rates,
    kernel_sides,
)
from tokcost.engine.stages import Segment
from tokcost.engine.workload import Precision, Workload, resolve_precision
from tokcost.errors import UsageError
from tokcost.hardware.spec import GpuSpec, Link
from tokcost.models.spec import DEFAULTED_NOTE, ModelSpec
from tokcost.profiles import GENERIC, Band, EngineProfile

SECONDS_PER_HOUR = 3600
PER_MILLION = 1e6
CRITICAL_BATCH_SEARCH_LIMIT = 1 << 24
BOUND_CACHE = 8  # bound passes a deployment keeps (one per rates object it prices under)


def usd_per_million_tokens(price_per_hour_usd: float | None, gpus: int, seconds: float, tokens: float) -> float | None:
    """$ per GPU-hour x GPUs / 3600 x the seconds `tokens` tokens take x 1e6; None without a price."""
    if price_per_hour_usd is None:
        return None
    return price_per_hour_usd * gpus / SECONDS_PER_HOUR * seconds / tokens * PER_MILLION


@dataclass(frozen=True)
class Deployment:
    """Everything a pass is priced against: the model, GPU, precision, layout and links."""

    model: ModelSpec
    gpu: GpuSpec
    precision: Precision
    layout: Layout
    links: Links
    engine: EngineProfile = GENERIC

    @cached_property
    def compiled(self) -> CompiledPass:
        """The deployment's kernels, counted once."""
        return CompiledPass(self.model, self.precision, self.layout)

    @cached_property
    def _scenarios(self) -> dict[str, Rates]:
        return {}

    @cached_property
    def _bound(self) -> dict[int, BoundPass]:
        return {}

    def rates(self, scenario: str) -> Rates:
        """Datasheet peaks ("ceiling") or this GPU's sustained rates x its serving engine era ("expected")."""
        found = self._scenarios.get(scenario)
        if found is None:
            if scenario == "ceiling":
                found = ceiling_rates(self.gpu, self.precision.compute)
            else:
                found = expected_rates(self.gpu, self.precision.compute, self.engine,
                                       fused_attention=self.precision.fused_attention, tp=self.layout.tp)  # fmt: skip
            self._scenarios[scenario] = found
        return found

    def bound(self, rates: Rates) -> BoundPass:
        """The compiled pass under `rates` (kept while these rates are in use: the cache holds them)."""
        found = self._bound.get(id(rates))
        if found is None or found.rates is not rates:
            if len(self._bound) >= BOUND_CACHE:
                self._bound.clear()
            found = self._bound[id(rates)] = self.compiled.bind(rates, self.links)
        return found

    def decode(self, rates: Rates, *, batch: float, cached: float) -> PassCost:
        """One decode step: `batch` sequences holding `cached` tokens each emit one token (steady pipeline)."""
        return self.bound(rates).cost([Segment(batch, cached, 1)], schedule="steady")

    def prefill(self, rates: Rates, *, batch: float, prompt: int, cached: int) -> PassCost:
        """Prefill of `batch` prompts (a cached prefix read, not recomputed), from an empty pipeline."""
        segments = [Segment(batch, cached, prompt - cached)]
        return self.bound(rates).cost(segments, schedule="fill", extra_overhead_s=rates.request_overhead_s)


def deployment(
    model: ModelSpec, gpu: GpuSpec, workload: Workload, network: Link | None = None, engine: EngineProfile = GENERIC
) -> Deployment:
    """The deployment a workload asks for; a layout the model cannot run is refused with the valid choices."""
    layout = Layout(
        workload.tp,
        workload.pp,
        workload.ep,
        workload.dp,
        workload.gpus_per_node or gpu.gpus_per_node,
        workload.redundant_experts,
    )
    problem = layout_problem(model, layout)
    if problem:
        raise UsageError(problem)
    engine = engine.for_layout(layout.stage_gpus)  # a split stage may run as another era (llama.cpp's row split: eager)
    # the era's LM head: split by vocabulary or whole on every rank, and its logits gathered or sampled per rank
    share, holds = engine_reserve(engine, gpu, layout.tp, layout.pp)  # what its KV budget leaves out of each GPU
    layout = replace(layout, vocab_split=engine.vocab_parallel, logits_gathered=engine.logits_gather,
                     reserve_of_free=engine.kv_cache_budget == "free", reserve_share=share,
                     reserve_holds_workspace=holds)  # fmt: skip
    return Deployment(model, gpu, resolve_precision(model, workload, gpu), layout, links_of(gpu, network), engine)


def decode_contexts(wl: Workload) -> tuple[int, int] | None:
    """Cached tokens at the first and last decode step (P .. P + O - 2); None with a single output token."""
    if wl.output_tokens < 2:
        return None
    return wl.prompt_tokens, wl.prompt_tokens + wl.output_tokens - 2


def mean_decode_seconds(d: Deployment, rates: Rates, *, batch: float, first: int, last: int) -> float:
    """Mean step time over cached contexts first..last, summed exactly (compiled.py, series.py)."""
    return d.bound(rates).decode_mean(batch=batch, first=first, last=last)


def ttft_seconds(bound: BoundPass, rates: Rates, *, batch: int, cached: int, computed: int) -> float:
    """TTFT of `batch` prompts: their pass from an empty pipeline (a cached prefix read, `computed` tokens each
    computed) plus the per-request cost (a client's HTTP and tokenization, where the engine era has one)."""
    return bound.seconds([Segment(batch, cached, computed)], schedule="fill", extra_overhead_s=rates.request_overhead_s)


def times(d: Deployment, wl: Workload, rates: Rates) -> tuple[float, float | None]:
    """(TTFT, TPOT) of `wl` under `rates`: the prefill from an empty pipeline plus the per-request cost, and the
    mean decode step (None with one output token)."""
    bound = d.bound(rates)
    ttft = ttft_seconds(
        bound, rates, batch=wl.batch, cached=wl.cached_prefix_tokens, computed=wl.computed_prompt_tokens
    )
    contexts = decode_contexts(wl)
    return ttft, bound.decode_mean(batch=wl.batch, first=contexts[0], last=contexts[1]) if contexts else None


def _first_batch(test: Callable[[int], bool], limit: int = CRITICAL_BATCH_SEARCH_LIMIT) -> int | None:
    """The smallest batch in 1..limit where `test` holds (test monotone false-then-true); None if never."""
    if not test(limit):
        return None
    lo, hi = 0, limit
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if test(mid) else (mid, hi)
    return hi


def _slowest_rows(
    d: Deployment, rates: Rates, batch: int, cached: float
) -> tuple[list[float], tuple[tuple[Row, Rate], ...]]:
    """A decode step's features and the rows of its slowest pipeline stage."""
    bound = d.bound(rates)
    x = d.compiled.vector([Segment(batch, cached, 1)])
    return x, bound.stages[bound.slowest(x) if len(bound.stages) > 1 else 0]


def matmul_sides(d: Deployment, rates: Rates, batch: int) -> tuple[float, float]:
    """(FLOP time, byte time) of a decode step's weight matmuls at `batch`, summed over its slowest stage."""
    x, rows = _slowest_rows(d, rates, batch, 1)
    compute = memory = 0.0
    for row, rate in rows:
        if row.stage.kind in ("matmul", "experts") and isinstance(rate, KernelRate):
            compute_s, memory_s = kernel_sides(row.flops(x), row.weight_bytes(x), row.other_bytes(x), rate)
            compute += row.stage.count * compute_s
            memory += row.stage.count * memory_s
    return compute, memory


def critical_batch_compute(d: Deployment, rates: Rates) -> int | None:
    """Smallest batch whose weight matmuls spend longer on FLOPs than on bytes (independent of context)."""

    def compute_bound(batch: int) -> bool:
        compute, memory = matmul_sides(d, rates, batch)
        return compute > memory

    return _first_batch(compute_bound)


def sequence_and_weight_bytes(d: Deployment, rates: Rates, batch: int, cached: float) -> tuple[float, float]:
    """(bytes the sequences read: KV, and a state layer's state; weight bytes) of a decode step at `batch` and
    `cached` tokens, summed over its slowest stage."""
    x, rows = _slowest_rows(d, rates, batch, cached)
    per_sequence = [row for row, _ in rows if row.stage.kind in (*KV_ATTENTION, "state")]

    def read(row: Row) -> float:  # an attention row's cache read is its kv_bytes (its scores and queries are not)
        if row.stage.kind in KV_ATTENTION:
            return Form.of(row.stage.kv_bytes)(x)
        return Form.of(row.stage.bytes_read)(x) - row.weight_bytes(x)

    kv = sum(row.stage.count * read(row) for row in per_sequence)
    return kv, sum(row.stage.count * row.weight_bytes(x) for row, _ in rows)


def critical_batch_kv(d: Deployment, rates: Rates, cached: float) -> int | None:
    """Smallest batch whose per-sequence reads at `cached` tokens (KV, and a state layer's state) outweigh the
    weights it reads (batching stops being free)."""

    def kv_heavier(batch: int) -> bool:
        kv, weights = sequence_and_weight_bytes(d, rates, batch, cached)
        return kv >= weights

    return _first_batch(kv_heavier)


@dataclass(frozen=True, slots=True)
class Scenario:
    """Times, rates and costs under one set of rates (datasheet peaks, or sustained rates x the engine era)."""

    ttft_s: float
    tpot_s: float | None
    e2e_s: float
    decode_tokens_per_s: float | None
    prefill_bound: Bound
    decode_bound: Bound | None
    usd_per_million_input_tokens: float | None
    usd_per_million_output_tokens: float | None
    joules_per_output_token: float | None
    prefill: PassCost
    decode_step: PassCost | None  # the step at the mean decode context, for the breakdown


@dataclass(frozen=True, slots=True)
class Estimate:
    """Everything `tokcost estimate` reports for one (model, GPU, workload)."""

    model: ModelSpec
    gpu: GpuSpec
    workload: Workload
    deployment: Deployment
    price_per_hour_usd: float | None
    memory: MemoryReport
    mean_decode_context: float | None
    critical_batch_compute: int | None
    critical_batch_kv: int | None
    ceiling: Scenario
    expected: Scenario
    warnings: tuple[str, ...]

    @property
    def precision(self) -> Precision:
        """The resolved dtypes."""
        return self.deployment.precision

    @property
    def layout(self) -> Layout:
        """The replica's parallel layout."""
        return self.deployment.layout

    @property
    def band(self) -> Band:
        """The 80% band around expected: its engine era's on this GPU's platform (engine/band.py)."""
        return band_of(self.deployment.engine, self.gpu.platform)


def _scenario(d: Deployment, wl: Workload, rates: Rates, price: float | None) -> Scenario:
    prefill = d.prefill(rates, batch=wl.batch, prompt=wl.prompt_tokens, cached=wl.cached_prefix_tokens)
    (ttft, tpot), gpus = times(d, wl, rates), d.layout.gpus
    contexts = decode_contexts(wl)
    step = d.decode(rates, batch=wl.batch, cached=sum(contexts) / 2) if contexts else None
    return Scenario(
        ttft_s=ttft,
        tpot_s=tpot,
        e2e_s=ttft + (wl.output_tokens - 1) * (tpot or 0.0),
        decode_tokens_per_s=wl.batch / tpot if tpot else None,
        prefill_bound=prefill.bound,
        decode_bound=step.bound if step else None,
        # input tokens are priced by prefill time, output tokens by decode time, both per GPU-hour x GPUs
        usd_per_million_input_tokens=usd_per_million_tokens(price, gpus, ttft, wl.batch * wl.prompt_tokens),
        usd_per_million_output_tokens=usd_per_million_tokens(price, gpus, tpot, wl.batch) if tpot else None,
        # board power (TDP) for the whole step: an upper bound on energy per token
        joules_per_output_token=d.gpu.tdp_w * gpus * tpot / wl.batch if d.gpu.tdp_w and tpot else None,
        prefill=prefill,
        decode_step=step,
    )


def deployment_warnings(d: Deployment, wl: Workload, memory: MemoryReport | None) -> tuple[str, ...]:
    """What the reader should know before trusting the numbers: context, counts, fit (unless `memory` is None: each
    point says it), memory, replication."""
    m, g, out = d.model, d.gpu, []
    if wl.total_tokens > m.max_context:
        out.append(f"prompt + output ({wl.total_tokens:,}) exceeds {m.name}'s max_context ({m.max_context:,})")
    defaulted = next((n for n in m.notes.split("; ") if n.startswith(DEFAULTED_NOTE)), None)
    if defaulted:  # an HF config that leaves a shape key out: the count rests on its class's default
        out.append(f"{m.name}: {defaulted}")
    mismatch = m.params_mismatch
    if mismatch is not None and abs(mismatch) > 0.02:
        out.append(f"{m.name}'s stated params_total differs from its shapes by {mismatch:+.1%}")
    if memory is not None and not memory.fits:
        need = f"needs {memory.min_gpus} GPUs ({memory.min_layout})" if memory.min_gpus else "fits no layout searched"
        lay = d.layout
        if memory.min_gpus and memory.min_gpus <= lay.gpus:  # the plain layouts searched hold it on as many GPUs
            extra = [what for what, on in (("redundant experts", lay.redundant_experts), ("expert parallelism",
                     lay.ep > 1), ("data-parallel attention", lay.dp > 1)) if on]  # fmt: skip
            listed = " and ".join([", ".join(extra[:-1]), extra[-1]] if len(extra) > 2 else extra)
            need += f", without this layout's {listed}" if extra else ""
        out.append(
            f"does not fit: {memory.per_gpu.total / 1e9:,.2f} GB on the fullest GPU of "
            f"{memory.capacity_bytes_per_gpu / 1e9:,.2f} GB; {need}"
        )
    if wl.compute_dtype and wl.compute_dtype != d.precision.compute:  # resolve_precision found no matmul at it
        c = wl.compute_dtype
        out.append(f"--compute-dtype {c} changes nothing here: 16-bit weights multiply at the 16-bit peak (an {c} "
                   f"matmul needs weights in a format that runs at {c}: --weights); priced and shown at "
                   f"{d.precision.compute}")  # fmt: skip
    stated = m.compute_dtype  # the checkpoint's stated compute (FP8 W8A8), which resolve_precision left: no peak here
    if stated and not wl.compute_dtype and wl.weights_dtype is None and d.precision.compute != stated:
        out.append(f"{m.name}'s compute_dtype {stated}: {g.name} has no {stated} peak, so its matmuls run at "
                   f"{d.precision.compute} (weights dequantized inside the matmul, as engines run such a checkpoint "
                   "there)")  # fmt: skip
    replicas = kv_replication(m, d.layout.tp)
    if replicas > 1 and not m.mla:
        out.append(f"TP {d.layout.tp} exceeds {m.kv_heads} KV heads: each KV head is replicated on {replicas} GPUs")
    if d.layout.stage_gpus > 1 and d.engine.tensor_parallel_note:
        out.append(f"{d.engine.label}: {d.engine.tensor_parallel_note}")
    graphs = d.engine.graph_note(wl.batch, gpu_name=g.name, memory_bytes=g.memory_bytes, tp=d.layout.tp, dp=d.layout.dp)
    if graphs:
        out.append(graphs)
    if g.sustained is None:  # expected rests on stated anchors, not on what this GPU was measured to sustain
        out.append(f"expected for {g.name}: {g.expected_provenance_at(d.precision.compute)}")
    if g.memory_runtime_mib is None:
        out.append(f"memory of {g.name}: {g.memory_basis}")
    return tuple(out)


def estimate(
    model: ModelSpec,
    gpu: GpuSpec,
    workload: Workload,
    network: Link | None = None,
    engine: EngineProfile = GENERIC,
) -> Estimate:
    """Ceiling (datasheet) and expected (sustained x `engine`) performance, memory and cost of `workload`."""
    d = deployment(model, gpu, workload, network, engine)
    ceiling = d.rates("ceiling")
    price = workload.price_per_hour_usd if workload.price_per_hour_usd is not None else gpu.price_per_hour_usd
    contexts = decode_contexts(workload)
    mean_context = sum(contexts) / 2 if contexts else None
    memory = memory_report(model, gpu, workload, d.precision, d.layout,
                           lambda tp, pp: engine_reserve(d.engine, gpu, tp, pp))  # fmt: skip
    return Estimate(
        model=model,
        gpu=gpu,
        workload=workload,
        deployment=d,
        price_per_hour_usd=price,
        memory=memory,
        mean_decode_context=mean_context,
        critical_batch_compute=critical_batch_compute(d, ceiling),
        critical_batch_kv=critical_batch_kv(
            d, ceiling, mean_context if mean_context is not None else workload.prompt_tokens
        ),
        ceiling=_scenario(d, workload, ceiling, price),
        expected=_scenario(d, workload, d.rates("expected"), price),
        warnings=deployment_warnings(d, workload, memory),
    )
