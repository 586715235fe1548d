"""A fast predictor for the fit: each row's kernels counted once, then priced under any candidate values in us.

estimate() rebuilds every kernel of every pass each time it prices a row; the fit prices each train row tens of
thousands of times. Here the work is counted once per row (tokcost.engine.stages, as estimate() counts it: every
wave's prefill, and its decode steps as spans of contexts over which each kernel's FLOPs and bytes are linear),
and a candidate set of values only changes the rates: the GPU family's fractions, the engine's efficiency per
kernel class, capped at the datasheet as price_stage caps them, and the fixed costs. The mean decode step over a
span is exact where estimate() sums exactly (the mean of the larger of two linear functions, in closed form).
A test checks this predictor against compare_rows() row by row.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from tokcost.engine.estimate import decode_contexts, deployment
from tokcost.engine.roofline import ceiling_rates, kernel_rates, matmul_dtype
from tokcost.engine.stages import Segment, Stage, pipeline_stages
from tokcost.engine.workload import same_tensor_rate
from tokcost.formats import get as get_format
from tokcost.hardware.spec import GpuSpec
from tokcost.models.spec import ModelSpec
from tokcost.profiles import EngineProfile, kernel_family
from tokcost.units import US
from tokcost.validation.compare import WaveTimes, run_metric, waves_of, workload_of
from tokcost.validation.data import Row
from tokcost.validation.families import family_of

GENERIC_ENGINE = "generic"  # kernels at the identity: the reference of the hardware x engine product


@dataclass(frozen=True, slots=True)
class Term:
    """One kernel over one span of contexts: FLOPs and bytes at the span's two ends (equal for a single pass)."""

    count: int
    key: str  # the engine parameter that scales it ("dense.bf16", "wo.int4", "attention"), "" for none
    experts: bool  # a routed-expert GEMM: the MoE efficiency multiplies its GEMM class's
    peak_flops_per_s: float
    flops: tuple[float, float]
    bytes: tuple[float, float]


@dataclass(frozen=True, slots=True)
class Collective:
    """One collective stage: its op, group and payload, and the link's rates (expected and datasheet)."""

    count: int
    op: str
    ranks: int
    payload_bytes: float
    latency_s: float
    bytes_per_s: float  # at the link's own efficiency
    peak_bytes_per_s: float


@dataclass(frozen=True, slots=True)
class Span:
    """A pass, or a span of decode steps (weight: its share of the steps)."""

    weight: float
    terms: tuple[Term, ...]
    collectives: tuple[Collective, ...]
    # the terms grouped by the efficiency they read: (key, experts, ((count, F0, F1, B0, B1), ...)), FLOPs over
    # their peak FLOP/s and bytes over the HBM peak: seconds at the datasheet, to divide by the fractions
    groups: tuple[tuple[str, bool, tuple[tuple[int, float, float, float, float], ...]], ...] = ()


def _grouped(terms: tuple[Term, ...], peak_bytes_per_s: float) -> tuple:
    groups: dict[tuple[str, bool], list[tuple[int, float, float, float, float]]] = {}
    for t in terms:
        groups.setdefault((t.key, t.experts), []).append(
            (t.count, t.flops[0] / t.peak_flops_per_s, t.flops[1] / t.peak_flops_per_s,
             t.bytes[0] / peak_bytes_per_s, t.bytes[1] / peak_bytes_per_s)
        )  # fmt: skip
    return tuple((key, experts, tuple(items)) for (key, experts), items in groups.items())


@dataclass(frozen=True, slots=True)
class WaveWork:
    """One kind of wave: `count` waves of `batch` sequences; its prefill and its decode spans."""

    batch: int
    count: int
    prefill: Span
    decode: tuple[Span, ...]


@dataclass(frozen=True, slots=True)
class Case:
    """A used row with its work counted: what the fit needs to price it under any values."""

    row: Row
    gpu: GpuSpec
    family: str
    engine: str
    waves: tuple[WaveWork, ...]
    peak_bytes_per_s: float

    @property
    def keys(self) -> frozenset[str]:
        """The engine parameters (without the engine's name) this row's kernels read."""
        spans = [s for w in self.waves for s in (w.prefill, *w.decode)]
        keys = {t.key for s in spans for t in s.terms if t.key} | {"step_us"}
        if any(t.experts for s in spans for t in s.terms):
            keys.add("moe")
        if any(s.collectives for s in spans):
            keys |= {"collective", "collective_us"}
        return frozenset(keys | {"request_us"})


def kernel_key(stage: Stage, compute_dtype: str, dequantizing: bool) -> str:
    """The efficiency a kernel reads, as roofline.kernel_efficiency chooses it (weight-only by kernel family)."""
    if stage.kind == "attention":
        return "attention"
    if stage.kind not in ("matmul", "experts"):
        return ""
    if dequantizing:
        return f"wo.{kernel_family(stage.weight_format)}"
    native = get_format(stage.weight_format).native_compute if stage.weight_format else None
    dtype = compute_dtype if native is None or same_tensor_rate(native, compute_dtype) else native
    return f"dense.{'bf16' if dtype == 'fp16' else dtype}"


def _span(model: ModelSpec, d, segments_a: list[Segment], segments_b: list[Segment], weight: float) -> Span:
    """The kernels of a pass at two ends of a span (one pipeline stage: published rows run pp = 1)."""
    ceiling = ceiling_rates(d.gpu, d.precision.compute)
    (at_a,), (at_b,) = (pipeline_stages(model, d.precision, d.layout, segs) for segs in (segments_a, segments_b))
    terms, collectives = [], []
    for sa, sb in zip(at_a, at_b, strict=True):
        if sa.collective is not None:
            path, top = (d.links.path(sa.ranks, d.layout, expected=e) for e in (True, False))
            assert path.nodes == 1, "the fast predictor prices collectives inside one node"
            collectives.append(Collective(sa.count, sa.collective, sa.ranks, sa.payload_bytes, path.latency_s,
                                          path.bytes_per_s, top.bytes_per_s))  # fmt: skip
            continue
        _, dequantizing = matmul_dtype(sa, ceiling)
        peak = kernel_rates(sa, ceiling)[0]  # the kernel's own peak, as price_stage prices it
        key = kernel_key(sa, d.precision.compute, dequantizing)
        terms.append(Term(sa.count, key, sa.kind == "experts", peak, (sa.flops, sb.flops), (sa.bytes, sb.bytes)))
    return Span(weight, tuple(terms), tuple(collectives), _grouped(tuple(terms), d.gpu.bandwidth_bytes_per_s))


def _decode_spans(model: ModelSpec, d, batch: int, first: int, last: int) -> tuple[Span, ...]:
    """Decode steps first..last as spans over which every kernel's work is linear (split at a sliding window)."""
    window = model.sliding_window.window_tokens if model.sliding_window else None
    bounds = [(first, last)]
    if window and first < window <= last:
        bounds = [(first, window - 1), (window, last)]
    steps = last - first + 1
    return tuple(
        _span(model, d, [Segment(batch, a, 1)], [Segment(batch, b, 1)], (b - a + 1) / steps) for a, b in bounds
    )


def prepare(
    rows: list[Row], models: Mapping[str, ModelSpec], gpus: Mapping[str, GpuSpec], engines: Mapping[str, EngineProfile]
) -> list[Case]:
    """Cases for the used rows among `rows`, each priced with its own engine (caps on running sequences included)."""
    cases = []
    for row in rows:
        if row.exclude is not None:
            continue
        model, gpu = models[row.model], gpus[row.gpu]
        assert row.pp == 1, "published rows run one pipeline stage"
        waves = []
        for wave in waves_of(row, model, gpu, engines[row.engine]):
            wl = workload_of(row, wave.batch)
            d = deployment(model, gpu, wl)
            prefill = [Segment(wave.batch, wl.cached_prefix_tokens, wl.prompt_tokens - wl.cached_prefix_tokens)]
            contexts = decode_contexts(wl)
            decode = _decode_spans(model, d, wave.batch, *contexts) if contexts else ()
            waves.append(WaveWork(wave.batch, wave.count, _span(model, d, prefill, prefill, 1.0), decode))
        family = family_of(row.gpu)
        assert family is not None, f"{row.gpu}: no family"
        cases.append(Case(row, gpu, family, row.engine, tuple(waves), gpu.bandwidth_bytes_per_s))
    return cases


def _mean_max(x: tuple[float, float], y: tuple[float, float]) -> float:
    """Mean over t in [0, 1] of max(x(t), y(t)) for linear x and y: (x + y)/2 + |x - y|/2, |.| in closed form."""
    d0, d1 = x[0] - y[0], x[1] - y[1]
    if d0 * d1 >= 0:
        spread = abs(d0 + d1) / 2
    else:
        spread = (d0 * d0 + d1 * d1) / (2 * (abs(d0) + abs(d1)))
    return (x[0] + x[1] + y[0] + y[1]) / 4 + spread / 2


def _collective_s(c: Collective, efficiency: float, overhead_s: float) -> float:
    """One collective as collectives.py prices it, at the engine's share of the link's rate, plus its overhead."""
    bw = min(c.bytes_per_s * efficiency, c.peak_bytes_per_s)
    n, s, a = c.ranks, c.payload_bytes, c.latency_s
    if c.op == "all-reduce":
        seconds = min(
            a + (n - 1) * s / bw, 2 * a + 2 * (n - 1) / n * s / bw, 2 * (n - 1) * a + 2 * (n - 1) / n * s / bw
        )
    else:  # all-to-all inside a node, or send/recv
        seconds = a + s / bw
    return seconds + overhead_s


class Values:
    """Candidate values: `gpu.<family>.bandwidth|compute`, `<engine>.<key>` efficiencies and `<engine>.*_us` costs."""

    def __init__(self, values: Mapping[str, float]) -> None:
        self.values = dict(values)

    def get(self, name: str, default: float) -> float:
        """A value, or `default` when it is not set (a parameter no row informs)."""
        return self.values.get(name, default)


def pass_seconds(span: Span, case: Case, v: Values) -> float:
    """One pass (or the mean step of a span) under the values, without the fixed step cost."""
    bw = v.get(f"gpu.{case.family}.bandwidth", 1.0)
    compute = v.get(f"gpu.{case.family}.compute", 1.0)
    generic = case.engine == GENERIC_ENGINE
    moe = 1.0 if generic else v.get(f"{case.engine}.moe", 1.0)
    total = 0.0
    for key, experts, items in span.groups:
        eff = 1.0  # norms, lookups, KV writes, sampling: the GPU's fractions alone
        if key and not generic:
            eff = v.get(f"{case.engine}.{key}", 1.0) * (moe if experts else 1.0)
        x, y = min(compute * eff, 1.0), min(bw * eff, 1.0)  # fractions of the datasheet, capped at it
        for count, f0, f1, b0, b1 in items:  # _mean_max, inlined: the fit spends its time here
            c0, c1, m0, m1 = f0 / x, f1 / x, b0 / y, b1 / y
            d0, d1 = c0 - m0, c1 - m1
            if d0 * d1 >= 0:
                spread = abs(d0 + d1) / 2
            else:
                spread = (d0 * d0 + d1 * d1) / (2 * (abs(d0) + abs(d1)))
            total += count * ((c0 + c1 + m0 + m1) / 4 + spread / 2)
    if span.collectives:
        eff = 1.0 if generic else v.get(f"{case.engine}.collective", 1.0)
        overhead = v.get(f"{case.engine}.collective_us", 0.0) * US
        total += sum(c.count * _collective_s(c, eff, overhead) for c in span.collectives)
    return total


def predict(case: Case, v: Values) -> float:
    """The row's metric under the values, wave by wave, as compare.run_metric reads it."""
    step = v.get(f"{case.engine}.step_us", 0.0) * US
    request = v.get(f"{case.engine}.request_us", 0.0) * US
    times = []
    for w in case.waves:
        ttft = pass_seconds(w.prefill, case, v) + step + request
        tpot = sum(s.weight * pass_seconds(s, case, v) for s in w.decode) + step if w.decode else None
        times.append(WaveTimes(w.batch, w.count, ttft, tpot))
    return run_metric(case.row, times)
