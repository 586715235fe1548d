"""The fit's parameters: each cell's efficiencies, host costs and platform gaps, their hierarchy, priors and gate.

Names: an era's parameter is `<engine>.<era>.<key>` (`vllm.v1.m.gemv`, `vllm.eager.launch_us`,
`vllm.v0.rocm.compute`); an efficiency or a gap also has an engine-level parent (`vllm.m.gemv`) whose parent is the
all-engines value (`all.m.gemv`), whose prior centre is 1. A host cost has no parent: its era's prior centre.
Shrinkage: an era's value is drawn towards its engine's, an engine's towards all engines' (Laplace, SHRINK_SCALE).
Decode attention (`m.attention`, `m.attention_mla`: priors.UNPOOLED) has no all-engines value: the engines run
different kernel families for it, so an engine's value is drawn towards its family's prior centre
(priors.engine_efficiency_prior), and an engine whose rows do not identify it takes that centre, never other
engines' rows; so is an engine's dequantizing GEMV where it is a kernel of its own (priors.WEIGHT_ONLY_BY_ENGINE:
torch.compile's int4 is PyTorch's tinygemm). An era whose decode kernels are a family of their own
(priors.ATTENTION_BY_ERA: vLLM before V1) has no parent for it either: its value is drawn towards its family's
centre, never towards its engine's other eras. A free value that one left-out source moves past issue 19's limit
is sent back the same way (folds.fit_folds).

The gate, decided on the rows a fit may read before any value moves: a parameter is free only when the rows it
informs (a probe, x 0.8 on a share or + PROBE_US on a cost, moves their prediction by 5% or more) come from at least
3 sources (so that every leave-one-source-out fold still has 2, and fits it too: folds.py) and span at least 2x in
work per step (the ceiling time of the row's step: its bytes over the bandwidth when memory-bound); an engine's or
all engines' value pools its children's rows. A parameter that is not free takes its parent's value (an era's: its
engine's, ...) or its prior centre, and is labelled "prior". After the fit, a free value whose spread (fit.spreads:
the objective's curvature with its own prior pull left out) exceeds LOOSE_SPREAD is demoted the same way and the fit
rerun (fit.fit_identified): the gate counts rows and sources, the curvature sees a direction they leave flat.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from tokcost.validation.cases import Case, Pricer, is_cost
from tokcost.validation.priors import (
    ATTENTION_BY_ERA,
    BANDWIDTH_PRODUCT,
    COST_SCALE,
    GEMM_PRODUCT,
    SHRINK_SCALE,
    Prior,
    cost_prior,
    engine_efficiency_prior,
    own_family,
    unpooled,
)  # fmt: skip

# host costs the rows cannot tell apart from the others: the per-sequence cost moves only the large-batch rows, where
# the per-step cost, decode attention and the KV capacity move too (fitted on vLLM V0's rows it took 41 us, and
# 100 us, its prior's edge, without ALCF's): it stays at its sourced prior and says "prior"
# The per-kernel gap on the GPU is a graph replay's, fixed by a published microbenchmark (priors.KERNEL_GAP), not by
# serving rows: free, it traded against TensorRT-LLM's GEMV share (4.4 us and 0.97 on one fit, 1.5 and 0.90 on the
# next, as the llama.cpp rows changed), so it stays at its sourced prior too
PRIOR_ONLY = frozenset({"seq_us", "kernel_us"})
MIN_SOURCES = 3  # free on the full fit: still 2 sources in every leave-one-source-out fold (identified there too)
FOLD_MIN_SOURCES = 2  # a fold keeps a full-fit parameter free while 2 of its sources remain
MIN_WORK_SPREAD = 2.0
# and once fitted, pinned: a free value whose spread with its own prior pull left out (fit.spreads: one standard
# deviation in log, from the objective's curvature) exceeds a factor 2 is a direction the rows leave flat, alone or
# traded against another parameter (TensorRT-LLM's per-kernel gap against its step cost once each attention kernel
# carried a fixed time); it goes back to its parent's value or prior centre and says so
LOOSE_SPREAD = math.log(2.0)
INFORMATIVE_LOG_CHANGE = 0.05
PROBE_SCALE = 0.8
PROBE_US = {"step_us": 1000.0, "seq_us": 20.0, "launch_us": 10.0, "kernel_us": 2.0, "request_us": 10_000.0,
            "coll.nvlink": 20.0, "coll.pcie": 50.0, "coll.network": 50.0}  # fmt: skip


@dataclass(frozen=True, slots=True)
class Param:
    """One parameter: its prior, its parent (None: its prior centre), its Laplace scale around the parent."""

    name: str
    key: str  # without the cell: `m.gemv`, `step_us`, `rocm.compute`
    prior: Prior
    parent: str | None
    scale: float
    level: str  # era, engine, all


def _gap_key(key: str) -> str:
    """`rocm.compute` -> `gap.compute` (the prior's key)."""
    return "gap." + key.split(".", 1)[1]


def param_prior(engine: str, era: str, key: str) -> Prior:
    """The range and centre of one era's parameter (an efficiency's by its era's or its engine's kernel family where
    it has one)."""
    if is_cost(key):
        return cost_prior(engine, era, key)
    if own_family(engine, era, key):
        return ATTENTION_BY_ERA[(engine, era)]
    return engine_efficiency_prior(engine, key if key.startswith(("m.", "c.")) else _gap_key(key))


class Space:
    """Every parameter some case reads, its hierarchy and priors; which are free; how a case reads them."""

    def __init__(self, cases: Sequence[Case]) -> None:
        self.params: dict[str, Param] = {}
        for case in cases:
            engine, era = case.cell.engine, case.cell.era
            for key in case.keys:
                self._add(engine, era, key)
        self.case_names = [tuple(f"{c.cell.engine}.{c.cell.era}.{k}" for k in c.keys) for c in cases]
        self.children: dict[str, list[str]] = {}
        for p in self.params.values():
            if p.parent is not None:
                self.children.setdefault(p.parent, []).append(p.name)
        self.free: tuple[str, ...] = ()
        self.loose: tuple[str, ...] = ()  # gated free, then found not pinned by the rows (LOOSE_SPREAD)
        self.unstable: tuple[str, ...] = ()  # gated free, then moved past issue 19's limit by one source (folds.py)
        self.informed: dict[str, list[int]] = {}

    def _add(self, engine: str, era: str, key: str) -> None:
        name = f"{engine}.{era}.{key}"
        if name in self.params:
            return
        prior = param_prior(engine, era, key)
        if is_cost(key):
            self.params[name] = Param(name, key, prior, None, COST_SCALE, "era")
            return
        if own_family(engine, era, key):  # its kernel family's figure is its parent, not its engine's other eras
            self.params[name] = Param(name, key, prior, None, SHRINK_SCALE, "era")
            return
        self.params[name] = Param(name, key, prior, f"{engine}.{key}", SHRINK_SCALE, "era")
        pool = None if unpooled(engine, key) else f"all.{key}"  # unpooled: the engine's family prior is its parent
        self.params.setdefault(f"{engine}.{key}", Param(f"{engine}.{key}", key, prior, pool, SHRINK_SCALE, "engine"))
        if pool is None:
            return
        self.params.setdefault(f"all.{key}", Param(f"all.{key}", key, prior, None, SHRINK_SCALE, "all"))

    def centres(self) -> dict[str, float]:
        """Every parameter at its prior centre."""
        return {n: p.prior.centre for n, p in self.params.items()}

    def case_values(self, i: int, case: Case, values: dict[str, float]) -> dict[str, float]:
        """A case's short keys -> values."""
        return {k: values[n] for k, n in zip(case.keys, self.case_names[i], strict=True)}

    def gate(self, cases: Sequence[Case], pricer: Pricer, *, min_sources: int = MIN_SOURCES,
             within: Sequence[str] | None = None) -> None:  # fmt: skip
        """Decide which parameters are free (see the module docstring), from `cases` at the prior centres."""
        values = self.centres()
        informed: dict[str, list[int]] = {n: [] for n in self.params}
        for i, case in enumerate(cases):
            base = self.case_values(i, case, values)
            now = pricer.predict(case, base)
            for key, name in zip(case.keys, self.case_names[i], strict=True):
                moved = {**base, key: base[key] + PROBE_US[key] if is_cost(key) else base[key] * PROBE_SCALE}
                if abs(math.log(pricer.predict(case, moved) / now)) >= INFORMATIVE_LOG_CHANGE:
                    informed[name].append(i)
        for level in ("engine", "all"):  # a parent pools its children's rows
            for name, p in self.params.items():
                if p.level == level:
                    informed[name] = sorted({i for child in self.children.get(name, []) for i in informed[child]})
        self.informed = informed
        allowed = set(self.params if within is None else within) - {n for n, p in self.params.items()
                                                                      if p.key in PRIOR_ONLY}  # fmt: skip
        self.free = tuple(n for n in self.params
                          if n in allowed and identified([cases[i] for i in informed[n]], min_sources))  # fmt: skip
        self.loose = ()

    def demote(self, names: Sequence[str], *, unstable: bool = False) -> None:
        """Take `names` out of the free parameters: each takes its parent's value or its prior centre. `unstable`:
        one source moved them far (folds.fit_folds), else the rows leave them flat."""
        if unstable:
            self.unstable = tuple(sorted({*self.unstable, *names}))
        else:
            self.loose = tuple(sorted({*self.loose, *names}))
        self.free = tuple(n for n in self.free if n not in {*self.loose, *self.unstable})

    def resolve(self, z: dict[str, float]) -> tuple[dict[str, float], dict[str, str | None]]:
        """(every parameter's value, the free variable it equals or None) for log-values `z` of the free ones."""
        values: dict[str, float] = {}
        var: dict[str, str | None] = {}
        for level in ("all", "engine", "era"):
            for name, p in self.params.items():
                if p.level != level:
                    continue
                if name in z:
                    values[name], var[name] = math.exp(z[name]), name
                elif p.parent is not None:
                    values[name], var[name] = values[p.parent], var[p.parent]
                else:
                    values[name], var[name] = p.prior.centre, None
        return values, var

    def products(self, cases: Sequence[Case]) -> list[tuple[str, float, tuple[float, float]]]:
        """(an era's GEMV or GEMM parameter, a GPU's sustained share, the product's range) for each GPU the era ran
        on: the hinge that keeps what its kernels reach on the datasheet physical."""
        out: dict[tuple[str, float], tuple[float, float]] = {}
        for i, case in enumerate(cases):
            hw, dtype = case.gpu.hardware, case.deployment.precision.compute
            gemm = hw.gemm_for(dtype) or hw.gemm_for("bf16")
            for key, name in zip(case.keys, self.case_names[i], strict=True):
                if key == "m.gemv":
                    out[(name, hw.copy_bandwidth.fraction)] = BANDWIDTH_PRODUCT
                elif key == "c.gemm" and gemm is not None:
                    out[(name, gemm.fraction)] = GEMM_PRODUCT
        return [(name, share, span) for (name, share), span in out.items()]


def identified(cases: Sequence[Case], min_sources: int = MIN_SOURCES) -> bool:
    """Rows from at least `min_sources` sources spanning at least MIN_WORK_SPREAD in work per step."""
    if len({c.row.source_id for c in cases}) < min_sources:
        return False
    work = [c.work_s for c in cases]
    return max(work) >= MIN_WORK_SPREAD * min(work)
