"""The picture of one estimate: its roofline chart, and with the journey the bars of its stages beside it."""

from __future__ import annotations

from typing import TYPE_CHECKING

from tokcost.engine.estimate import Estimate
from tokcost.plots.canvas import new_figure
from tokcost.plots.journey import draw_journeys, legend
from tokcost.plots.labels import stage_palette, title
from tokcost.plots.roofline import draw_roofline, roofline_figure

if TYPE_CHECKING:
    from matplotlib.figure import Figure


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
