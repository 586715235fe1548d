"""The fit's rows on the engine itself: each row's work counted once, re-priced under any candidate profile values.

A row's work is what validate prices (engine/work.py): its deployment's kernels at every wave's prefill and over
its decode contexts, rates-free. A candidate is a set of values of the row's cell's parameters (`m.gemv`,
`c.gemm`, `m.wo.int4`, `m.attention`, `m.attention_mla`, `m.moe`, `step_us`, `launch_us`, `coll.nvlink`, `request_us`,
`rocm.compute`, ...); `candidate_profile` writes them into the cell's EngineProfile, roofline.expected_rates turns
that into Rates as for any estimate, and the engine prices the work (compiled.pass_seconds, mean_step_seconds):
the fit's prediction of a row is validate's, by construction (a test checks it row by row).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from tokcost.engine.compiled import mean_step_seconds, pass_seconds
from tokcost.engine.estimate import Deployment, decode_contexts
from tokcost.engine.features import Segment
from tokcost.engine.kernels import KV_ATTENTION
from tokcost.engine.roofline import (
    CollectiveRate,
    KernelRate,
    Rates,
    collective_rate,
    expected_rates,
    kernel_class,
    kernel_rate,
    matmul_path,
)  # fmt: skip
from tokcost.engine.work import RateTable, Work
from tokcost.eras import EngineFile, builtin_files
from tokcost.errors import SpecError
from tokcost.hardware.spec import GpuSpec
from tokcost.models.spec import ModelSpec
from tokcost.profiles import (
    CollectiveCosts,
    ComputeSide,
    EngineProfile,
    KernelEfficiency,
    MemorySide,
    PlatformGap,
    WeightOnly,
    kernel_family,
)  # fmt: skip
from tokcost.validation.cells import Cell, cell_of, version_of
from tokcost.validation.compare import WaveTimes, as_row_built, row_deployment, run_metric, waves_of, workload_of
from tokcost.validation.data import Row
from tokcost.validation.priors import EAGER_CELLS

CACHE_LIMIT = 50_000  # candidate rates (and kernel-class rates) kept before the caches start over
COST_KEYS = ("step_us", "seq_us", "launch_us", "kernel_us", "request_us", "coll.nvlink", "coll.pcie", "coll.network")
GAP_SIDES = ("memory", "compute", "attention", "step")


def is_cost(key: str) -> bool:
    """A host cost in us (a key without the cell's prefix)."""
    return key in COST_KEYS


@functools.cache
def _engine_files() -> dict[str, EngineFile]:
    """The built-in engine files, read once (each row's era is checked against its file's ranges)."""
    return builtin_files()


def row_cell(row: Row, gpu: GpuSpec) -> Cell:
    """The cell of a published row (cells.cell_of on its stated conditions and its GPU's platform); a version that
    the chosen era's own `versions` range does not cover is refused (the engine file is the source of the ranges)."""
    cell = cell_of(framework=row.framework, engine=row.engine, version=row.engine_version, graphs=row.graphs,
                   platform=gpu.platform)  # fmt: skip
    version = version_of(row.engine_version)
    if cell.engine != "generic" and version is not None:
        engine = _engine_files()[cell.engine]
        era = engine.eras[cell.era]
        if not era.eager and not era.versions.cover(version):
            raise SpecError(f"row {row.id}", f"{cell.engine} {row.engine_version} is in none of its eras' versions: "
                                             f"{engine.known()}", field="engine_version")  # fmt: skip
    split = _engine_files()[cell.engine].eras[cell.era].tensor_split_era if cell.engine != "generic" else None
    if split is not None and row.stage_gpus > 1:  # a split stage runs as that era (EngineProfile.for_layout)
        return Cell(cell.engine, split, cell.platform)
    return cell


@dataclass(frozen=True, slots=True)
class WaveWork:
    """One kind of wave: `count` waves of `batch` sequences; its prefill's work and its decode spans' work."""

    batch: int
    count: int
    prefill: Work
    decode: tuple[Work, ...]


@dataclass(frozen=True, slots=True)
class Case:
    """A used row with its work counted: what the fit needs to price it under any values of its cell."""

    row: Row
    gpu: GpuSpec
    cell: Cell
    profile: EngineProfile  # the cell's profile as shipped (its scheduler caps decide the waves)
    deployment: Deployment
    waves: tuple[WaveWork, ...]
    keys: tuple[str, ...]  # the cell's parameters its prediction reads (`m.gemv`, `step_us`, `rocm.compute`, ...)
    client: bool  # a client-side clock: the per-request cost is on its TTFT
    steps: int  # decode steps per scheduling decision (multi-step scheduling)
    work_s: float  # its main pass at the ceiling (a decode step, else its prefill): how much work a step is

    @property
    def higher_is_better(self) -> bool:
        """A rate (tokens/s), not a time."""
        return self.row.higher_is_better

    def time_error(self, predicted: float) -> float:
        """log(predicted time / measured time): positive when the prediction is too slow (rates inverted)."""
        ratio = math.log(predicted / self.row.value)
        return -ratio if self.row.higher_is_better else ratio


def parameter_keys(d: Deployment, cell: Cell, *, client: bool) -> tuple[str, ...]:
    """The parameters of its cell a deployment's prediction reads: kernel classes (as roofline.kernel_class
    picks them, both sides), host costs, the link classes of its collectives, the platform's gap."""
    if cell.engine == "generic":
        return ()
    keys = (
        {"step_us", "seq_us", "kernel_us"}
        | ({"request_us"} if client else set())
        | ({"launch_us"} if cell_key(cell) in EAGER_CELLS else set())
    )
    ceiling = d.rates("ceiling")
    for kind, fmt, *_ in d.compiled.kernel_keys:
        group = kernel_class(kind, matmul_path(kind, fmt, ceiling)[1])
        if group in KV_ATTENTION:  # paged GQA or MLA's latent cache: apart on the memory side
            keys |= {f"m.{group}", "c.attention"}
        elif group == "weight_only":
            keys |= {f"m.wo.{kernel_family(fmt)}", "c.gemm"}
        elif group == "gemv":
            keys |= {"m.gemv", "c.gemm"}
        if kind == "experts":
            keys |= {"m.moe", "c.moe"}
    for _, ranks, crosses in d.compiled.collective_keys:
        keys.add(f"coll.{d.links.path(ranks, d.layout, expected=True, crosses_nodes=crosses).link_class}")
    if cell.platform != "cuda":
        keys |= {f"{cell.platform}.{side}" for side in GAP_SIDES}
    return tuple(sorted(keys))


def cell_key(cell: Cell) -> tuple[str, str]:
    """(engine, era)."""
    return (cell.engine, cell.era)


def candidate_profile(base: EngineProfile, values: Mapping[str, float], platform: str) -> EngineProfile:
    """`base` with a cell's candidate values (short keys; a key not given keeps the base's value), built without
    validation: the fit's candidates stay in the schema's ranges by its priors, what it writes is validated."""
    k, c = base.kernels, base.collective_overhead_us
    m = k.memory
    wo = {f: values.get(f"m.wo.{f}", getattr(m.weight_only, f)) for f in WeightOnly.model_fields}
    memory = MemorySide.model_construct(gemv=values.get("m.gemv", m.gemv), weight_only=WeightOnly.model_construct(**wo),
                                        attention=values.get("m.attention", m.attention),
                                        attention_mla=values.get("m.attention_mla", m.attention_mla),
                                        moe=values.get("m.moe", m.moe))  # fmt: skip
    compute = ComputeSide.model_construct(gemm=values.get("c.gemm", k.compute.gemm),
                                          attention=values.get("c.attention", k.compute.attention),
                                          moe=values.get("c.moe", k.compute.moe))  # fmt: skip
    coll = CollectiveCosts.model_construct(
        **{n: values.get(f"coll.{n}", getattr(c, n)) for n in CollectiveCosts.model_fields}
    )
    update: dict[str, object] = {
        "kernels": KernelEfficiency.model_construct(memory=memory, compute=compute),
        "step_overhead_us": values.get("step_us", base.step_overhead_us),
        "sequence_overhead_us": values.get("seq_us", base.sequence_overhead_us),
        "launch_overhead_us": values.get("launch_us", base.launch_overhead_us),
        "kernel_overhead_us": values.get("kernel_us", base.kernel_overhead_us),
        "request_overhead_us": values.get("request_us", base.request_overhead_us),
        "collective_overhead_us": coll,
    }
    if platform != "cuda":
        gap = base.gap(platform)
        sides = {s: values.get(f"{platform}.{s}", getattr(gap, s)) for s in GAP_SIDES}
        platforms: dict[str, PlatformGap] = {str(k): v for k, v in base.platforms.items()}
        platforms[platform] = PlatformGap.model_construct(**sides, basis={}, band=gap.band)
        update["platforms"] = platforms
    return base.model_copy(update=update)


def prepare(
    rows: Sequence[Row], models: Mapping[str, ModelSpec], gpus: Mapping[str, GpuSpec],
    profiles: Mapping[tuple[str, str], EngineProfile],
) -> list[Case]:  # fmt: skip
    """Cases for the used rows among `rows`, each with its cell's waves (caps on running sequences included)."""
    cases = []
    for row in rows:
        if row.exclude is not None:
            continue
        model, gpu = models[row.model], gpus[row.gpu]
        cell = row_cell(row, gpu)
        profile = as_row_built(row, profiles[cell_key(cell)])  # its build's MoE kernels and memory rule
        d = row_deployment(row, model, gpu, profile)
        waves = []
        for wave in waves_of(row, model, gpu, profile, d):
            wl = workload_of(row, wave.batch)
            prefill = d.compiled.work([Segment(wave.batch, wl.cached_prefix_tokens, wl.computed_prompt_tokens)])
            contexts = decode_contexts(wl)
            decode = d.compiled.decode_work(wave.batch, *contexts) if contexts else ()
            waves.append(WaveWork(wave.batch, wave.count, prefill, decode))
        client = row.measured_at == "client"
        keys = parameter_keys(d, cell, client=client)
        table = RateTable.of(d.compiled.kernel_keys, d.compiled.collective_keys, d.rates("ceiling"), d.links, d.layout)
        first = waves[0]
        work_s = (mean_step_seconds(first.decode, table, overhead_s=0.0) if first.decode
                  else pass_seconds(first.prefill, table, schedule="fill", overhead_s=0.0))  # fmt: skip
        cases.append(Case(row, gpu, cell, profile, d, tuple(waves), keys, client, row.scheduler_steps or 1, work_s))
    return cases


class Pricer:
    """Prices cases under candidate values of their cells' parameters, keeping each candidate's Rates and tables."""

    def __init__(self) -> None:
        self._rates: dict[tuple, Rates] = {}
        self._tables: dict[tuple, RateTable] = {}
        self._kernels: dict[tuple, KernelRate] = {}
        self._collectives: dict[tuple, CollectiveRate] = {}

    def rates(self, case: Case, values: Mapping[str, float]) -> Rates:
        """The case's expected Rates under `values` (its cell's keys; a key missing keeps the profile's value)."""
        got = tuple(values.get(k) for k in case.keys)
        fused = case.deployment.precision.fused_attention
        # the keys' names too: two cases of one cell may read different keys at equal values (m.wo.int4 in one,
        # m.wo.int8 in the other), and must not share Rates
        tp = case.deployment.layout.tp  # the batch the era's CUDA graphs capture depends on it
        key = (case.gpu.name, case.deployment.precision.compute, case.cell, case.client, case.steps, fused, tp,
               case.keys, got, case.profile.moe_row_kernels)  # fmt: skip
        found = self._rates.get(key)
        if found is None:
            if len(self._rates) >= CACHE_LIMIT:
                for cache in (self._rates, self._tables, self._kernels, self._collectives):
                    cache.clear()
            mine = {k: v for k, v in zip(case.keys, got, strict=True) if v is not None}
            profile = candidate_profile(case.profile, mine, case.cell.platform)
            found = self._rates[key] = expected_rates(case.gpu, case.deployment.precision.compute, profile,
                                                      client_side=case.client, scheduler_steps=case.steps,
                                                      fused_attention=fused, tp=tp)  # fmt: skip
        return found

    def table(self, case: Case, rates: Rates) -> RateTable:
        """The case's kernel classes and collectives at their rates under `rates` (each class's rate kept: cases of
        other layouts share a kernel class's, cases of one GPU and node size a collective's)."""
        d = case.deployment
        c, gpn = d.compiled, d.layout.gpus_per_node
        key = (id(rates), c.kernel_keys, c.collective_keys, case.gpu.name, c.layout)
        found = self._tables.get(key)
        if found is None:
            kernels = []
            for k in c.kernel_keys:
                rate = self._kernels.get((id(rates), k))
                if rate is None:
                    rate = self._kernels[(id(rates), k)] = kernel_rate(k[0], k[1], rates, k[2], k[3])
                kernels.append(rate)
            collectives = []
            for op, ranks, crosses in c.collective_keys:
                where = (id(rates), case.gpu.name, gpn, op, ranks, crosses)
                path = self._collectives.get(where)
                if path is None:
                    path = self._collectives[where] = collective_rate(op, ranks, rates, d.links, d.layout,
                                                                      crosses_nodes=crosses)  # fmt: skip
                collectives.append(path)
            found = self._tables[key] = RateTable.priced(tuple(kernels), tuple(collectives), rates, d.layout)
        return found

    def predict(self, case: Case, values: Mapping[str, float]) -> float:
        """The row's metric under the values, wave by wave, as compare.run_metric reads it."""
        rates = self.rates(case, values)
        table = self.table(case, rates)
        times = []
        for w in case.waves:
            host = rates.host_s(w.batch, case.deployment.layout.dp)  # per pass of the wave's sequences
            ttft = pass_seconds(w.prefill, table, schedule="fill", overhead_s=host + rates.request_overhead_s)
            tpot = mean_step_seconds(w.decode, table, overhead_s=host) if w.decode else None
            times.append(WaveTimes(w.batch, w.count, ttft, tpot))
        return run_metric(case.row, times)
