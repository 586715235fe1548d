"""Pictures of tokcost's results (the `plot` extra): roofline, journey, sweep, compare and plan charts.

Views, not models: every number drawn is one the engine computed (its priced stages, journey rows, sweep
points, estimates). matplotlib is imported only when a picture is drawn, so `import tokcost.plots` and every
command without --plot run without it; asking for a picture without it is one line naming the install.
The names below load on first use (PEP 562), so `tokcost.plots.canvas.check_path`, which every command with
--plot calls while parsing its flags, imports no chart module and nothing of the engine.

    from tokcost import plots
    plots.save(plots.estimate_figure(result, journey=True), "roofline.png")
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

_EXPORTS = {
    "FrontierPoint": "tokcost.plots.plan",
    "check_path": "tokcost.plots.canvas",
    "compare_figure": "tokcost.plots.compare",
    "estimate_figure": "tokcost.plots.estimate",
    "journey_figure": "tokcost.plots.journey",
    "kernel_points": "tokcost.plots.roofline",
    "plan_figure": "tokcost.plots.plan",
    "render": "tokcost.plots.canvas",
    "roofline_figure": "tokcost.plots.roofline",
    "save": "tokcost.plots.canvas",
    "sweep_figure": "tokcost.plots.sweep",
}
__all__ = [
    "FrontierPoint",
    "check_path",
    "compare_figure",
    "estimate_figure",
    "journey_figure",
    "kernel_points",
    "plan_figure",
    "render",
    "roofline_figure",
    "save",
    "sweep_figure",
]

if TYPE_CHECKING:  # what type checkers and editors see; at run time __getattr__ imports on demand
    from tokcost.plots.canvas import check_path, render, save
    from tokcost.plots.compare import compare_figure
    from tokcost.plots.estimate import estimate_figure
    from tokcost.plots.journey import journey_figure
    from tokcost.plots.plan import FrontierPoint, plan_figure
    from tokcost.plots.roofline import kernel_points, roofline_figure
    from tokcost.plots.sweep import sweep_figure


def __getattr__(name: str) -> Any:
    """Import an exported name from its module the first time it is asked for."""
    if name not in _EXPORTS:
        raise AttributeError(f"module 'tokcost.plots' has no attribute {name!r}")
    value = getattr(importlib.import_module(_EXPORTS[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_EXPORTS])
