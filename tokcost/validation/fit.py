"""Fitting "expected" = hardware x engine on the train sources only: GPU family fractions and engine profiles.

The model stays physical, every number on a bounded grid of physical values, none per row:
- per GPU family (the hardware): `bandwidth` and `compute`, fractions of the datasheet memory bandwidth and
  dense matmul peak (families: tokcost/validation/families.py);
- per engine (tokcost/profiles.py): an efficiency per kernel class relative to the family's fraction (dense GEMM
  by compute dtype, weight-only GEMM by kernel family, decode attention, MoE grouped GEMM, collective bandwidth),
  and fixed costs per forward pass (`step_us`), per request (`request_us`, on TTFT) and per collective
  (`collective_us`, on the link's own sourced latency).
The `generic` engine is the identity (no fitted term): the reference that makes the product identifiable, so a
family's fractions are what generic predicts and the named engines scale them. Each row is predicted by the engine
itself (cases.py): its work counted once, priced under each candidate's rates exactly as validate prices it.

Which numbers are free is decided before fitting, from the train rows alone: a parameter is fitted when at least
MIN_INFORMATIVE_ROWS train rows are informed by it (a change of PROBES from START moves their prediction by
INFORMATIVE_LOG_CHANGE or more); otherwise it stays at START (efficiency 1, no fixed cost), so an engine never
gets a number no train row speaks for. Objective: mean |log(predicted / measured)| over the train rows (symmetric
for rates and times; L1, so a few far-off rows pull the fit less than under squares). Search: coordinate descent
over the grids (coarse, then a fine pass around the best), sweeping until a sweep changes nothing.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from tokcost.validation.cases import COST_KEYS, FAMILY_PARAMS, Case, Pricer, is_cost, is_fraction, start_value
from tokcost.validation.data import split_of
from tokcost.validation.families import FAMILIES

__all__ = ["COST_KEYS", "FAMILY_PARAMS", "FitResult", "fit", "is_cost", "is_fraction", "start_value", "train_cases"]
MIN_INFORMATIVE_ROWS = 3
INFORMATIVE_LOG_CHANGE = 0.05
# A probe moves a parameter by a fifth of its plausible range: fractions and efficiencies x 0.8, costs up by a step.
PROBE_SCALE = 0.8
PROBE_ADD_US = {"step_us": 1000.0, "request_us": 10_000.0, "collective_us": 20.0}
# A family's fractions stay below the datasheet: DRAM refresh, page and protocol overheads keep even a plain copy
# under ~85-90% of the HBM peak ("even just copying memory struggles to break 85%" on A100-80GB, pytorch.org blog
# 2023-11-30 "Accelerating Generative AI Part 2"), and tensor cores lose clock under load. An engine's efficiency
# may still lift its own kernel's product up to the datasheet.
FRACTION_GRID = tuple(pct / 100 for pct in range(10, 91))  # 0.10 .. 0.90
EFFICIENCY_GRID = tuple(pct / 100 for pct in range(10, 201))  # 0.10 .. 2.00 of the family's fraction
COARSE_STEP = 5  # grid points between coarse candidates (0.05); then every point within +-4 of the best
COST_GRIDS_US: dict[str, tuple[float, ...]] = {
    "step_us": tuple(range(0, 100, 5))
    + tuple(range(100, 1000, 25))
    + tuple(range(1000, 10_000, 250))
    + tuple(range(10_000, 50_001, 2500)),  # 0-50 ms: graph-captured steps take tens of us, eager ones ms
    "request_us": tuple(range(0, 5000, 250)) + tuple(range(5000, 100_001, 2500)),  # 0-100 ms
    "collective_us": tuple(range(0, 100, 2)) + tuple(range(100, 1001, 25)),  # 0-1 ms
}
MAX_SWEEPS = 30
# Engine efficiencies are held to 1 by a weak prior: each costs PRIOR_ROWS train rows' worth of |log| error per
# unit of |log efficiency|. It decides what the product alone cannot: how a family's rate splits between the
# hardware and its engines (a family's fraction and every efficiency on it can trade against each other), so the
# fraction settles where the engines' efficiencies are smallest in |log|: the GPU's fraction is what the median
# engine reaches and `generic` (the identity) predicts a typical engine. It is too weak to hold an efficiency that
# more than a row of evidence moves.
PRIOR_ROWS = 0.5
# Not fitted whatever the rows say: the collectives' bandwidth stays the link's own nccl-tests efficiency (large
# messages run on NCCL/RCCL in every engine; a fitted share would absorb slow prefills, not the link).
FIXED_KEYS = frozenset({"collective"})


def grid(name: str) -> tuple[float, ...]:
    """The values a parameter may take."""
    if is_fraction(name):
        return FRACTION_GRID
    if is_cost(name):
        return tuple(float(v) for v in COST_GRIDS_US[name.rsplit(".", 1)[-1]])
    return EFFICIENCY_GRID


def probe(name: str, value: float) -> float:
    """The probe a parameter is moved by to see which rows it informs."""
    return value + PROBE_ADD_US[name.rsplit(".", 1)[-1]] if is_cost(name) else value * PROBE_SCALE


def train_cases(cases: Sequence[Case]) -> list[Case]:
    """The cases of the train split."""
    return [c for c in cases if split_of(c.row) == "train"]


def train_digest(cases: Sequence[Case]) -> str:
    """SHA-256 (first 12 hex digits) of what the fit reads from the train rows."""
    keys = ("id", "source_id", "model", "gpu", "gpus", "weights", "experts", "kv", "compute", "batch",
            "prompt_tokens", "output_tokens", "engine", "metric", "value")  # fmt: skip
    payload = [{k: getattr(c.row, k) for k in keys} for c in sorted(cases, key=lambda c: c.row.id)]
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode("utf-8")).hexdigest()[:12]


class Objective:
    """Mean |log(predicted / measured)| over the train cases, recomputing only the cases a parameter moves."""

    def __init__(self, cases: Sequence[Case], values: dict[str, float]) -> None:
        self.cases = list(cases)
        self.values = values
        self.pricer = Pricer(sorted(values))
        self.prior = PRIOR_ROWS / len(self.cases)  # per unit |log efficiency|, in mean |log error|
        self.members: dict[str, list[int]] = {}
        for i, c in enumerate(self.cases):
            for name in c.params:
                self.members.setdefault(name, []).append(i)
        self.errors = [self.error(c, values) for c in self.cases]

    def error(self, case: Case, values: Mapping[str, float]) -> float:
        """|log(predicted / measured)| of one case."""
        return abs(math.log(self.pricer.predict(case, values) / case.row.value))

    @property
    def error_loss(self) -> float:
        """The current mean |log error|."""
        return sum(self.errors) / len(self.errors)

    def penalty(self, name: str, value: float) -> float:
        """The prior's cost of one value: an engine efficiency away from 1 (fractions and costs are free)."""
        return 0.0 if is_fraction(name) or is_cost(name) else self.prior * abs(math.log(value))

    @property
    def loss(self) -> float:
        """Mean |log error| plus the prior."""
        return self.error_loss + sum(self.penalty(n, v) for n, v in self.values.items())

    def trial(self, name: str, value: float) -> float:
        """The loss with one parameter changed (nothing kept)."""
        trial = {**self.values, name: value}
        idx = self.members.get(name, [])
        delta = sum(self.error(self.cases[i], trial) - self.errors[i] for i in idx)
        return self.loss + delta / len(self.errors) + self.penalty(name, value) - self.penalty(name, self.values[name])

    def set(self, name: str, value: float) -> None:
        """Keep a new value."""
        self.values[name] = value
        for i in self.members.get(name, []):
            self.errors[i] = self.error(self.cases[i], self.values)

    def informed(self, name: str) -> int:
        """Train rows whose prediction the parameter's probe moves by INFORMATIVE_LOG_CHANGE or more."""
        now, moved = self.values, {**self.values, name: probe(name, self.values[name])}
        predict = self.pricer.predict
        return sum(
            abs(math.log(predict(self.cases[i], moved) / predict(self.cases[i], now))) >= INFORMATIVE_LOG_CHANGE
            for i in self.members.get(name, [])
        )


def _scan(obj: Objective, name: str) -> bool:
    """Move one parameter to its best grid value (coarse, then fine around it); True when it moved."""
    values = grid(name)
    best, best_loss = obj.values[name], obj.loss
    coarse = values if is_cost(name) else values[::COARSE_STEP]
    for candidate in coarse:
        loss = obj.trial(name, candidate)
        if loss < best_loss - 1e-12:  # ties keep the current value
            best, best_loss = candidate, loss
    if not is_cost(name):
        centre = min(range(len(values)), key=lambda i: abs(values[i] - best))
        for candidate in values[max(0, centre - COARSE_STEP + 1) : centre + COARSE_STEP]:
            loss = obj.trial(name, candidate)
            if loss < best_loss - 1e-12:
                best, best_loss = candidate, loss
    moved = best != obj.values[name]
    if moved:
        obj.set(name, best)
    return moved


@dataclass(frozen=True, slots=True)
class FitResult:
    """The fitted values, which were free and which fixed, and what the fit read."""

    values: dict[str, float]  # every parameter some train row reads: fitted, or fixed at its start
    free: tuple[str, ...]
    informed: dict[str, int]  # train rows each parameter informs (at the start)
    train_rows: int
    train_rows_by_engine: dict[str, int]
    train_rows_by_family: dict[str, int]
    train_sources_by_engine: dict[str, tuple[str, ...]]
    data_digest: str
    train_loss: float  # mean |log error| at the end
    sweeps: int

    def value(self, name: str) -> float:
        """A fitted (or fixed) value, or its start when no train row reads it."""
        return self.values.get(name, start_value(name))


def fit(cases: Sequence[Case]) -> FitResult:
    """Fit on the train split of `cases` only (see the module docstring)."""
    train = train_cases(cases)
    names = sorted({n for c in train for n in c.params})
    obj = Objective(train, {n: start_value(n) for n in names})
    informed = {n: obj.informed(n) for n in names}
    free = tuple(n for n in names if informed[n] >= MIN_INFORMATIVE_ROWS and n.rsplit(".", 1)[-1] not in FIXED_KEYS)
    # fractions first (the hardware), then each engine's efficiencies, then the fixed costs
    order = sorted(free, key=lambda n: (not is_fraction(n), is_cost(n), n))
    sweeps = 0
    for sweeps in range(1, MAX_SWEEPS + 1):  # noqa: B007 - the count is reported
        if not any([_scan(obj, n) for n in order]):
            break
    return FitResult(
        values=dict(obj.values),
        free=free,
        informed=informed,
        train_rows=len(train),
        train_rows_by_engine={e: sum(c.engine == e for c in train) for e in sorted({c.engine for c in train})},
        train_rows_by_family={f: sum(c.family == f for c in train) for f in FAMILIES},
        train_sources_by_engine={
            e: tuple(sorted({c.row.source_id for c in train if c.engine == e}))
            for e in sorted({c.engine for c in train})
        },
        data_digest=train_digest(train),
        train_loss=obj.error_loss,
        sweeps=sweeps,
    )
