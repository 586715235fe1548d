"""What the fit writes into the engine files: each era's values, whether each was fitted or fell back, its band.

Every era of every engine file gets every parameter: its own fitted value where its rows identified it, else its
engine's pooled value, else every engine's (never for decode attention: its kernel family's; an era of its own
decode family, priors.ATTENTION_BY_ERA, takes nothing from its engine either), else its prior centre
(space.py), each labelled in `basis` (fitted, engine, all engines, prior). Hand-kept keys (summary, versions,
scheduler defaults, notes, sources) are never touched. The generated keys are written in one order so that a refit
on the same rows rewrites nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tokcost.profiles import WEIGHT_ONLY_FAMILIES, Band
from tokcost.validation.cases import COST_KEYS, GAP_SIDES
from tokcost.validation.folds import DIGITS
from tokcost.validation.priors import EAGER_CELLS, cost_prior, own_family, unpooled
from tokcost.validation.space import Space, param_prior

EFFICIENCY_KEYS = ("m.gemv", "m.attention", "m.attention_mla", "m.moe", "c.gemm", "c.attention", "c.moe")
CUDA_ONLY = frozenset({"tensorrt-llm", "generic"})  # engines with no ROCm build
GENERATED = ("kernels", "step_overhead_us", "sequence_overhead_us", "launch_overhead_us", "kernel_overhead_us",
             "request_overhead_us", "collective_overhead_us", "platforms", "basis", "band")  # fmt: skip
FIELD_OF_COST = {"step_us": "step_overhead_us", "seq_us": "sequence_overhead_us", "launch_us": "launch_overhead_us",
                 "kernel_us": "kernel_overhead_us", "request_us": "request_overhead_us"}  # fmt: skip


def _round(value: float) -> float:
    return float(f"{value:.{DIGITS}g}")


def resolved(space: Space, values: Mapping[str, float], engine: str, era: str, key: str) -> tuple[float, str]:
    """(value, basis) of one era's parameter: its own, its engine's, every engine's, or its prior centre."""
    free = set(space.free)
    if key in COST_KEYS:
        name = f"{engine}.{era}.{key}"
        if name in free:
            return values[name], "fitted"
        return (values[name] if name in values else cost_prior(engine, era, key).centre), "prior"
    chain = [(f"{engine}.{era}.{key}", "fitted")]
    if not own_family(engine, era, key):  # an era of its own kernel family takes nothing of its engine's other eras
        chain.append((f"{engine}.{key}", "engine"))
        chain += [] if unpooled(engine, key) else [(f"all.{key}", "all engines")]  # nor other engines' kernels
    for name, label in chain:
        if name in free:
            return values[name], label
    return param_prior(engine, era, key).centre, "prior"


def era_values(space: Space, values: Mapping[str, float], engine: str, era: str) -> dict[str, tuple[float, str]]:
    """Every parameter of one era, by key, with its basis."""
    if engine == "generic":
        return {}
    families = sorted({p.key.removeprefix("m.wo.") for p in space.params.values() if p.key.startswith("m.wo.")})
    keys = list(EFFICIENCY_KEYS) + [f"m.wo.{f}" for f in families if f in WEIGHT_ONLY_FAMILIES]
    keys += ["step_us", "seq_us", "kernel_us", "request_us", "coll.nvlink", "coll.pcie", "coll.network"]
    keys += ["launch_us"] if (engine, era) in EAGER_CELLS else []
    keys += [] if engine in CUDA_ONLY else [f"rocm.{side}" for side in GAP_SIDES]
    return {k: resolved(space, values, engine, era, k) for k in keys}


def era_fields(found: Mapping[str, tuple[float, str]], band: Band | None, rocm_band: Band | None) -> dict[str, Any]:
    """The generated keys of one era's YAML, from its values and bands."""
    v = {k: _round(value) for k, (value, _) in found.items()}
    memory = {"gemv": v.get("m.gemv", 1.0)}
    wo = {k.removeprefix("m.wo."): x for k, x in v.items() if k.startswith("m.wo.")}
    if wo:
        memory["weight_only"] = wo  # type: ignore[assignment]
    memory.update(
        attention=v.get("m.attention", 1.0), attention_mla=v.get("m.attention_mla", 1.0), moe=v.get("m.moe", 1.0)
    )
    compute = {"gemm": v.get("c.gemm", 1.0), "attention": v.get("c.attention", 1.0), "moe": v.get("c.moe", 1.0)}
    out: dict[str, Any] = {"kernels": {"memory": memory, "compute": compute}} if found else {}
    for key, field in FIELD_OF_COST.items():
        if key in v:
            out[field] = v[key]
    if "coll.nvlink" in v:
        out["collective_overhead_us"] = {c: v[f"coll.{c}"] for c in ("nvlink", "pcie", "network")}
    if "rocm.memory" in v:
        gap: dict[str, Any] = {s: v[f"rocm.{s}"] for s in GAP_SIDES}
        gap["basis"] = {f"rocm.{s}": found[f"rocm.{s}"][1] for s in GAP_SIDES}
        if rocm_band is not None:
            gap["band"] = rocm_band.model_dump()
        out["platforms"] = {"rocm": gap}
    if found:
        out["basis"] = {k: basis for k, (_, basis) in sorted(found.items()) if not k.startswith("rocm.")}
    if band is not None:
        out["band"] = band.model_dump()
    return out


def write_era(era: dict[str, Any], fields: Mapping[str, Any]) -> dict[str, Any]:
    """The era's YAML mapping with its generated keys replaced (hand keys kept, in their places)."""
    kept = {k: v for k, v in era.items() if k not in GENERATED}
    head: dict[str, Any] = {k: kept.pop(k) for k in ("summary", "versions", "eager") if k in kept}
    return {**head, **{k: fields[k] for k in GENERATED if k in fields}, **kept}
