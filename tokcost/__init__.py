"""tokcost: roofline cost model for LLM inference, and a decode loop that checks it.

    from tokcost import load_model, load_gpu, Workload, estimate
    result = estimate(model=load_model("llama-3.1-8b"), gpu=load_gpu("h100-sxm"), workload=Workload(batch=8))
    result.expected.tpot_s, result.to_dict(), result.plot("roofline.png")

The names below load on first use, so `import tokcost` (and the CLI's start-up) stays light.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

_EXPORTS = {
    "load_model": "tokcost.models.library",
    "load_gpu": "tokcost.hardware.library",
    "load_network": "tokcost.hardware.library",
    "load_engine": "tokcost.profiles",
    "Workload": "tokcost.engine.workload",
    "ModelSpec": "tokcost.models.spec",
    "GpuSpec": "tokcost.hardware.spec",
    "estimate": "tokcost.api",
    "compare": "tokcost.api",
    "sweep": "tokcost.api",
    "iter_sweep": "tokcost.api",
    "plan": "tokcost.api",
    "EstimateResult": "tokcost.api",
    "PlanResult": "tokcost.api",
    "ComparisonResult": "tokcost.api",
    "SweepResult": "tokcost.api",
    "TokcostError": "tokcost.errors",
}
__all__ = [
    "ComparisonResult",
    "EstimateResult",
    "GpuSpec",
    "ModelSpec",
    "PlanResult",
    "SweepResult",
    "TokcostError",
    "Workload",
    "__version__",
    "compare",
    "estimate",
    "iter_sweep",
    "load_engine",
    "load_gpu",
    "load_model",
    "load_network",
    "plan",
    "sweep",
]

if TYPE_CHECKING:  # what type checkers and editors see; at run time __getattr__ imports on demand
    from tokcost.api import (
        ComparisonResult,
        EstimateResult,
        PlanResult,
        SweepResult,
        compare,
        estimate,
        iter_sweep,
        plan,
        sweep,
    )
    from tokcost.engine.workload import Workload
    from tokcost.errors import TokcostError
    from tokcost.hardware.library import load_gpu, load_network
    from tokcost.hardware.spec import GpuSpec
    from tokcost.models.library import load_model
    from tokcost.models.spec import ModelSpec
    from tokcost.profiles import load_engine


def __getattr__(name: str) -> Any:
    """Import an exported name from its module the first time it is asked for (PEP 562)."""
    if name not in _EXPORTS:
        raise AttributeError(f"module 'tokcost' has no attribute {name!r}")
    value = getattr(importlib.import_module(_EXPORTS[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_EXPORTS])
