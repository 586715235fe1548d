"""Pictures of tokcost's results (the `plot` extra): roofline, journey, sweep, compare and plan charts.

Views, not models: every number drawn is one the engine computed (its priced stages, journey rows, sweep
points, estimates). matplotlib is imported only when a picture is drawn, so `import tokcost.plots` and every
command without --plot run without it; asking for a picture without it is one line naming the install.

    from tokcost import plots
    plots.save(plots.estimate_figure(result, journey=True), "roofline.png")
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tokcost.engine.estimate import Estimate
from tokcost.plots.canvas import check_path, new_figure, render, save
from tokcost.plots.compare import compare_figure
from tokcost.plots.journey import draw_journeys, journey_figure, legend
from tokcost.plots.labels import stage_palette, title
from tokcost.plots.plan import FrontierPoint, plan_figure
from tokcost.plots.roofline import draw_roofline, kernel_points, roofline_figure
from tokcost.plots.sweep import sweep_figure

if TYPE_CHECKING:
    from matplotlib.figure import Figure

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


def estimate_figure(e: Estimate, *, journey: bool = False) -> Figure:
    """What `estimate --plot` draws: the roofline chart, and with `journey` the journey's bars beside it."""
    if not journey:
        return roofline_figure(e)
    decoding = e.ceiling.decode_step is not None
    fig = new_figure(18, 7)
    grid = fig.add_gridspec(1, 4 if decoding else 3, width_ratios=[3.2, 0.01, 1, 1][: 4 if decoding else 3])
    roof, palette = fig.add_subplot(grid[0, 0]), stage_palette(e)
    draw_roofline(roof, e, palette)
    roof.set_title(f"Roofline of {e.gpu.name}: the stages of prefill and of one decode step", loc="left", fontsize=10)
    prefill = fig.add_subplot(grid[0, 2])
    decode = fig.add_subplot(grid[0, 3]) if decoding else None
    legend(fig, palette, draw_journeys(prefill, decode, e, palette))
    fig.suptitle(title(e), fontsize=9, x=0.01, ha="left")
    return fig
