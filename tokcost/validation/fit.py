"""Fitting "expected": achievable fractions of peak and a per-step overhead, per GPU family, on train rows only.

The model stays physical: bandwidth and compute as fractions of the datasheet peaks, a fixed overhead per
forward pass (launches, sampling, scheduling), and a separate bandwidth fraction for weight-only quantized
kernels (int8/int4 weights dequantized inside a 16-bit matmul), which published numbers show far below bf16.
Four numbers per family, no per-row term. Search: coordinate descent over fixed grids, minimizing the mean
absolute log error |log(predicted / measured)| (symmetric for rates and times; L1, so a few far-off rows
pull the fit less than under squares). Predictions go through the engine's own functions.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from tokcost.engine.estimate import mean_decode_seconds
from tokcost.engine.roofline import expected_rates, price_pass
from tokcost.engine.traffic import prefill_counts
from tokcost.engine.workload import Precision, Workload, resolve_precision
from tokcost.hardware.spec import Achievable, GpuSpec
from tokcost.models.spec import ModelSpec
from tokcost.units import WEIGHT_ONLY_DTYPES
from tokcost.validation.compare import predict_metric, workload_of
from tokcost.validation.data import Row, split_of

# GPU families sharing one set of fractions (same memory system generation and kernel libraries). Built-in
# specs outside every family (b200, mi300x) keep their hand-set values: no published row covers them.
FAMILIES: dict[str, tuple[str, ...]] = {
    "hopper": ("h100-sxm", "h100-pcie", "h100-nvl", "h200"),
    "ampere": ("a100-40gb-sxm", "a100-80gb-pcie", "a100-80gb-sxm", "a10", "a10g"),
    "ada": ("l40s", "l4", "rtx-4090"),
}
# A family fits its own four numbers only with at least this many train rows (two per parameter);
# a smaller family takes the pooled fit over every train row.
MIN_FAMILY_ROWS = 8
# The hand-set values the specs carried before any fit; the search starts from them.
STARTING = Achievable(bandwidth=0.8, compute=0.7, step_overhead_us=20.0)
FRACTIONS_PCT = range(10, 101)  # fractions 0.10 .. 1.00 in steps of 0.01
COARSE_STEP_PCT = 5
OVERHEAD_GRID_US = tuple(range(0, 100, 5)) + tuple(range(100, 1000, 25)) + tuple(range(1000, 10_001, 100))
MAX_SWEEPS = 20
PROFILE_OVERHEADS_US = (0, 50, 100, 200, 300, 500, 750, 1000, 1500, 2000, 2500, 3000, 4000, 5000)


def family_of(gpu: str) -> str | None:
    """The family a built-in GPU belongs to, or None."""
    return next((name for name, members in FAMILIES.items() if gpu in members), None)


@dataclass(frozen=True, slots=True)
class Case:
    """A row with its specs resolved: what the engine needs to price it under any achievable fractions."""

    row: Row
    model: ModelSpec
    gpu: GpuSpec
    workload: Workload
    precision: Precision
    weight_only: bool  # priced with weight_only_quant_bandwidth, as estimate() decides


def prepare(rows: Sequence[Row], models: Mapping[str, ModelSpec], gpus: Mapping[str, GpuSpec]) -> list[Case]:
    """Cases for the used rows among `rows`."""
    cases = []
    for row in rows:
        if row.exclude is not None:
            continue
        model, wl = models[row.model], workload_of(row)
        p = resolve_precision(model, wl)
        weight_only = p.weights in WEIGHT_ONLY_DTYPES or p.experts in WEIGHT_ONLY_DTYPES  # as estimate()
        cases.append(Case(row, model, gpus[row.gpu], wl, p, weight_only))
    return cases


@dataclass
class Predictor:
    """Predicts rows under candidate fractions; caches TTFT and TPOT without overhead (the overhead just adds)."""

    cache: dict[tuple[str, float, float, float | None], tuple[float, float]] = field(default_factory=dict)

    def base_times(self, case: Case, ach: Achievable) -> tuple[float, float]:
        """(TTFT, TPOT) in seconds with zero step overhead, through the engine's rates and passes."""
        quant = ach.weight_only_quant_bandwidth if case.weight_only else None
        key = (case.row.id, ach.bandwidth, ach.compute, quant)
        if key not in self.cache:
            gpu = case.gpu.model_copy(update={"achievable": ach.model_copy(update={"step_overhead_us": 0.0})})
            rates = expected_rates(gpu, case.precision.compute, weight_only_quant=case.weight_only)
            wl, p = case.workload, case.precision
            counts = prefill_counts(case.model, p, wl.batch, wl.prompt_tokens, wl.cached_prefix_tokens, wl.gpus)
            ttft = price_pass(counts, wl.gpus, rates).seconds
            self.cache[key] = (ttft, mean_decode_seconds(case.model, wl, p, rates))
        return self.cache[key]

    def predict(self, case: Case, ach: Achievable) -> float:
        """The row's metric: every forward pass (prefill, each decode step) pays the overhead once."""
        ttft, tpot = self.base_times(case, ach)
        overhead_s = ach.step_overhead_us * 1e-6
        return predict_metric(case.row, ttft + overhead_s, tpot + overhead_s)

    def loss(self, cases: Sequence[Case], ach: Achievable) -> float:
        """Mean |log(predicted / measured)|."""
        return sum(abs(math.log(self.predict(c, ach) / c.row.value)) for c in cases) / len(cases)


def _grids(name: str) -> list[list[float]]:
    """Values to scan for one parameter: the overhead grid, or the coarse fraction grid (refined afterwards)."""
    if name == "step_overhead_us":
        return [[float(v) for v in OVERHEAD_GRID_US]]
    return [[pct / 100 for pct in FRACTIONS_PCT if pct % COARSE_STEP_PCT == 0]]


def _scan(predictor: Predictor, cases: Sequence[Case], ach: Achievable, name: str, fine: bool) -> Achievable:
    """The best value of one parameter, the others held (fractions: coarse, then if `fine` +-0.04 by 0.01)."""
    best, best_loss = ach, predictor.loss(cases, ach)

    def try_all(values: list[float]) -> None:
        nonlocal best, best_loss
        for value in values:
            trial = best.model_copy(update={name: value})
            trial_loss = predictor.loss(cases, trial)
            if trial_loss < best_loss - 1e-12:  # ties keep the current value
                best, best_loss = trial, trial_loss

    for grid in _grids(name):
        try_all(grid)
    if fine and name != "step_overhead_us":
        centre = round(getattr(best, name) * 100)
        try_all([pct / 100 for pct in FRACTIONS_PCT if abs(pct - centre) < COARSE_STEP_PCT])
    return best


def _descend(
    predictor: Predictor, cases: Sequence[Case], ach: Achievable, names: Sequence[str], fine: bool = True
) -> Achievable:
    """Coordinate descent over `names` until a full sweep changes nothing."""
    for _ in range(MAX_SWEEPS):
        before = ach
        for name in names:
            ach = _scan(predictor, cases, ach, name, fine)
        if ach == before:
            break
    return ach


def coordinate_search(predictor: Predictor, cases: Sequence[Case], start: Achievable) -> Achievable:
    """Best fractions and overhead: fractions profiled at each of a few overheads, then a joint descent.

    Bandwidth and overhead trade off along a valley (a slower stream or a longer pause per step), where plain
    coordinate descent stalls; a coarse profile over the overhead first finds the valley floor.
    """
    fractions = ["bandwidth", "compute"]
    if any(c.weight_only for c in cases):
        fractions.insert(1, "weight_only_quant_bandwidth")
        if start.weight_only_quant_bandwidth is None:
            start = start.model_copy(update={"weight_only_quant_bandwidth": start.bandwidth})
    profile = [
        _descend(predictor, cases, start.model_copy(update={"step_overhead_us": float(us)}), fractions, fine=False)
        for us in PROFILE_OVERHEADS_US
    ]
    best = min(profile, key=lambda ach: predictor.loss(cases, ach))
    return _descend(predictor, cases, best, [*fractions, "step_overhead_us"])


@dataclass(frozen=True, slots=True)
class FamilyFit:
    """The fitted fractions of one family and where they came from."""

    family: str
    achievable: Achievable
    train_rows: int
    own: bool  # fitted on the family's own rows (else: the pooled fit)


@dataclass(frozen=True, slots=True)
class FitResult:
    """Per-family fits, the pooled fit they fall back to, and a digest of the data fitted."""

    families: tuple[FamilyFit, ...]
    pooled: Achievable
    train_rows: int
    data_digest: str

    def achievable_of(self, gpu: str) -> Achievable | None:
        """The fitted fractions for a built-in GPU, None outside every family."""
        family = family_of(gpu)
        return next((f.achievable for f in self.families if f.family == family), None)


def train_digest(cases: Sequence[Case]) -> str:
    """SHA-256 (first 12 hex digits) of what the fit reads from the train rows."""
    keys = ("id", "model", "gpu", "gpus", "weights", "kv", "compute", "batch", "prompt_tokens", "output_tokens",
            "framework", "metric", "value")  # fmt: skip
    payload = [{k: getattr(c.row, k) for k in keys} for c in sorted(cases, key=lambda c: c.row.id)]
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode("utf-8")).hexdigest()[:12]


def fit(cases: Sequence[Case]) -> FitResult:
    """Fit on the train split of `cases` only: pooled first, then each family with enough rows from there."""
    train = [c for c in cases if split_of(c.row) == "train"]
    predictor = Predictor()
    pooled = coordinate_search(predictor, train, STARTING)
    families = []
    for family in FAMILIES:
        members = [c for c in train if family_of(c.row.gpu) == family]
        own = len(members) >= MIN_FAMILY_ROWS
        ach = coordinate_search(predictor, members, pooled) if own else pooled
        families.append(FamilyFit(family, ach, len(members), own))
    return FitResult(tuple(families), pooled, len(train), train_digest(train))


def with_achievable(gpus: Mapping[str, GpuSpec], result: FitResult) -> dict[str, GpuSpec]:
    """The GPU specs with their fitted fractions in place (GPUs outside every family unchanged)."""
    out = {}
    for name, gpu in gpus.items():
        ach = result.achievable_of(name)
        out[name] = gpu if ach is None else gpu.model_copy(update={"achievable": ach})
    return out
