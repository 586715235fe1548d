"""The fit's rows on the engine itself: each row's work counted once, re-priced under any candidate values.

A row's work is what estimate() and validate price (engine/work.py): its deployment's kernels at every wave's
prefill and over its decode contexts, rates-free. A candidate set of values is a hardware x engine profile: the
GPU family's fractions (`gpu.<family>.bandwidth|compute`, an `achievable:` block) and the engine's efficiencies
and fixed costs (`<engine>.dense.bf16`, `<engine>.wo.int4`, `<engine>.attention`, `<engine>.moe`,
`<engine>.step_us`, ...: an EngineProfile). roofline.expected_rates turns them into Rates, as for any estimate,
and the engine prices the work under them (compiled.pass_seconds, mean_step_seconds): the fit's prediction of a
row is validate's, by construction. Rates and each kernel class's rate are cached per candidate.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from tokcost.engine.compiled import mean_step_seconds, pass_seconds
from tokcost.engine.estimate import Deployment, decode_contexts
from tokcost.engine.features import Segment
from tokcost.engine.roofline import (
    CollectiveRate,
    KernelRate,
    Rates,
    collective_rate,
    efficiency_key,
    expected_rates,
    kernel_rate,
    matmul_dtype,
)
from tokcost.engine.work import RateTable, Work
from tokcost.hardware.spec import Achievable, GpuSpec
from tokcost.models.spec import ModelSpec
from tokcost.profiles import EngineProfile, KernelEfficiency, kernel_family
from tokcost.validation.compare import WaveTimes, row_deployment, run_metric, waves_of, workload_of
from tokcost.validation.data import Row
from tokcost.validation.families import family_of

GENERIC_ENGINE = "generic"  # kernels at the identity: the reference of the hardware x engine product
FAMILY_PARAMS = ("bandwidth", "compute")
COST_KEYS = ("step_us", "request_us", "collective_us")
# Starting values: the specs' earlier hand-set fractions (0.8 of bandwidth, 0.7 of compute), efficiencies 1, no cost.
START_FRACTIONS = {"bandwidth": 0.8, "compute": 0.7}
CACHE_LIMIT = 50_000  # candidate rates (and kernel-class rates) kept before the caches start over
BARE, IDENTITY = Achievable(), KernelEfficiency()  # every other field at its default


def is_fraction(name: str) -> bool:
    """A family's fraction (bounded by 1) rather than an engine's efficiency or cost."""
    return name.startswith("gpu.")


def is_cost(name: str) -> bool:
    """A fixed cost in us."""
    return name.rsplit(".", 1)[-1] in COST_KEYS


def start_value(name: str) -> float:
    """Where every parameter starts (and where a fixed one stays)."""
    if is_fraction(name):
        return START_FRACTIONS[name.rsplit(".", 1)[-1]]
    return 0.0 if is_cost(name) else 1.0


def kernels_of(values: Mapping[str, float], *, validate: bool = True) -> KernelEfficiency:
    """An engine's efficiencies from its values by key (`dense.bf16`, `wo.int4`, `attention`, `moe`, ...)."""
    kernels: dict = {"dense_gemm": {}, "weight_only_gemm": {}}
    for key, value in sorted(values.items()):
        if key in COST_KEYS or value == 1.0:
            continue
        kind, _, dtype = key.partition(".")
        if kind == "dense":
            kernels["dense_gemm"][dtype] = value
        elif kind == "wo":
            kernels["weight_only_gemm"][dtype] = value
        else:
            kernels[{"attention": "decode_attention", "moe": "moe_grouped_gemm"}.get(kind, kind)] = value
    # the fit's candidates come from its grids, inside the ranges; what it writes is validated
    return KernelEfficiency.model_validate(kernels) if validate else IDENTITY.model_copy(update=kernels)


def engine_values(values: Mapping[str, float], engine: str) -> dict[str, float]:
    """The values of one engine's parameters, by key without the engine's name."""
    return {n[len(engine) + 1 :]: v for n, v in values.items() if n.startswith(f"{engine}.")}


def candidate_profile(base: EngineProfile, values: Mapping[str, float], *, validate: bool = True) -> EngineProfile:
    """`base` with an engine's candidate efficiencies and fixed costs (its values by key)."""
    return base.model_copy(
        update={
            "kernels": kernels_of(values, validate=validate),
            "step_overhead_us": values.get("step_us", 0.0),
            "request_overhead_us": values.get("request_us", 0.0),
            "collective_overhead_us": values.get("collective_us", 0.0),
        }
    )


@dataclass(frozen=True, slots=True)
class WaveWork:
    """One kind of wave: `count` waves of `batch` sequences; its prefill's work and its decode spans' work."""

    batch: int
    count: int
    prefill: Work
    decode: tuple[Work, ...]


@dataclass(frozen=True, slots=True)
class Case:
    """A used row with its work counted: what the fit needs to price it under any values."""

    row: Row
    gpu: GpuSpec
    family: str
    engine: str
    profile: EngineProfile  # the engine's profile as shipped (its name, notes and caps)
    deployment: Deployment
    waves: tuple[WaveWork, ...]
    keys: frozenset[str]  # the engine parameters (without the engine's name) this row's kernels read
    params: tuple[str, ...] = ()  # every parameter its prediction reads: its family's fractions, its engine's terms
    starts: tuple[float, ...] = ()  # where each of them starts

    @staticmethod
    def of(row: Row, gpu: GpuSpec, profile: EngineProfile, d: Deployment, waves: tuple[WaveWork, ...]) -> Case:
        """A case and the parameters it reads (generic reads only its costs: its kernels are the identity)."""
        family, engine, keys = family_of(row.gpu), row.engine, parameter_keys(d)
        assert family is not None, f"{row.gpu}: no family"
        read = sorted(keys) if engine != GENERIC_ENGINE else sorted(k for k in keys if k in COST_KEYS)
        params = tuple([f"gpu.{family}.{p}" for p in FAMILY_PARAMS] + [f"{engine}.{k}" for k in read])
        return Case(row, gpu, family, engine, profile, d, waves, keys, params, tuple(map(start_value, params)))


def _parameter_key(group: str, name: str) -> str:
    """The fit's name for an efficiency: `dense.<dtype>` (fp16 shares bf16's), `wo.<kernel family>`, `attention`."""
    if group == "dense":
        return f"dense.{'bf16' if name == 'fp16' else name}"
    return f"wo.{kernel_family(name)}" if group == "weight_only" else group


def parameter_keys(d: Deployment) -> frozenset[str]:
    """The engine parameters a deployment's kernels read (as roofline.kernel_efficiency picks them), and its costs."""
    ceiling, keys = d.rates("ceiling"), {"step_us", "request_us"}
    if d.compiled.collective_keys:  # the engine's share of the link and its cost per collective
        keys |= {"collective", "collective_us"}
    for kind, fmt in d.compiled.kernel_keys:
        found = efficiency_key(kind, fmt, ceiling.compute_dtype, matmul_dtype(kind, fmt, ceiling)[1])
        if found is not None:
            keys.add(_parameter_key(*found))
        if kind == "experts":
            keys.add("moe")
    return frozenset(keys)


def prepare(
    rows: Sequence[Row], models: Mapping[str, ModelSpec], gpus: Mapping[str, GpuSpec],
    engines: Mapping[str, EngineProfile],
) -> list[Case]:  # fmt: skip
    """Cases for the used rows among `rows`, each with its own engine's waves (caps on running sequences included)."""
    cases = []
    for row in rows:
        if row.exclude is not None:
            continue
        model, gpu, profile = models[row.model], gpus[row.gpu], engines[row.engine]
        d = row_deployment(row, model, gpu, profile)
        waves = []
        for wave in waves_of(row, model, gpu, profile, d):
            wl = workload_of(row, wave.batch)
            prefill = d.compiled.work([Segment(wave.batch, wl.cached_prefix_tokens, wl.computed_prompt_tokens)])
            contexts = decode_contexts(wl)
            decode = d.compiled.decode_work(wave.batch, *contexts) if contexts else ()
            waves.append(WaveWork(wave.batch, wave.count, prefill, decode))
        cases.append(Case.of(row, gpu, profile, d, tuple(waves)))
    return cases


class Pricer:
    """Prices cases under candidate values, keeping each candidate's Rates and rate tables.

    `names`: every parameter the values may hold. Then the cases of one GPU and engine share one Rates per
    candidate (their family's and engine's values, each case reading its own kernels' share); without it each
    case's Rates holds the parameters it reads.
    """

    def __init__(self, names: Sequence[str] = ()) -> None:
        self.names = tuple(names)
        self._rates: dict[tuple, Rates] = {}
        self._tables: dict[tuple, RateTable] = {}
        self._kernels: dict[tuple, KernelRate] = {}
        self._collectives: dict[tuple, CollectiveRate] = {}
        self._params: dict[tuple[str, str], tuple[tuple[str, ...], tuple[float, ...]]] = {}

    def _read(self, case: Case) -> tuple[tuple[str, ...], tuple[float, ...]]:
        """The parameters a case's Rates are built from, and their starts."""
        found = self._params.get((case.family, case.engine))
        if found is None:
            mine = [n for n in self.names if n.startswith((f"gpu.{case.family}.", f"{case.engine}."))]
            if case.engine == GENERIC_ENGINE:  # the identity: its kernels never read a value
                mine = [n for n in mine if is_fraction(n) or is_cost(n)]
            params = tuple(sorted(set(mine) | set(case.params)))
            found = self._params[(case.family, case.engine)] = (params, tuple(map(start_value, params)))
        return found

    def rates(self, case: Case, values: Mapping[str, float]) -> Rates:
        """The case's expected Rates under the values (the parameters it reads; the rest at their start)."""
        params, starts = self._read(case) if self.names else (case.params, case.starts)
        got = tuple(map(values.get, params, starts))
        key = (case.gpu.name, case.deployment.precision.compute, case.engine, params, got)
        found = self._rates.get(key)
        if found is None:
            if len(self._rates) >= CACHE_LIMIT:
                self._rates.clear()
                for cache in (self._tables, self._kernels, self._collectives):
                    cache.clear()
            found = self._rates[key] = candidate_rates(case, dict(zip(params, got, strict=True)))
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
                    rate = self._kernels[(id(rates), k)] = kernel_rate(*k, rates)
                kernels.append(rate)
            collectives = []
            for op, ranks, crosses in c.collective_keys:
                where = (id(rates), case.gpu.name, gpn, op, ranks, crosses)
                path = self._collectives.get(where)
                if path is None:
                    path = self._collectives[where] = collective_rate(op, ranks, rates, d.links, d.layout,
                                                                      crosses_nodes=crosses)  # fmt: skip
                collectives.append(path)
            found = self._tables[key] = RateTable(tuple(kernels), tuple(collectives))
        return found

    def predict(self, case: Case, values: Mapping[str, float]) -> float:
        """The row's metric under the values, wave by wave, as compare.run_metric reads it."""
        rates = self.rates(case, values)
        table, step = self.table(case, rates), rates.step_overhead_s
        times = []
        for w in case.waves:
            ttft = pass_seconds(w.prefill, table, schedule="fill", overhead_s=step + rates.request_overhead_s)
            tpot = mean_step_seconds(w.decode, table, overhead_s=step) if w.decode else None
            times.append(WaveTimes(w.batch, w.count, ttft, tpot))
        return run_metric(case.row, times)


def candidate_rates(case: Case, values: Mapping[str, float]) -> Rates:
    """The case's expected Rates from candidate values of its parameters, through roofline.expected_rates."""
    fractions = {p: values[f"gpu.{case.family}.{p}"] for p in FAMILY_PARAMS}
    ach = BARE.model_copy(update=fractions)  # the two fractions alone, as the fit writes them
    profile = candidate_profile(case.profile, engine_values(values, case.engine), validate=False)
    return expected_rates(case.gpu, case.deployment.precision.compute, profile, ach)
