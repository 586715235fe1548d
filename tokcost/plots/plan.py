"""A plan's configurations as cost against tail latency: the Pareto frontier, and the chosen one marked.

`tokcost plan --plot FILE` draws it (cli/plan_cmd.frontier_points). The data shape is small, so that the plan's
rows map onto it in one line each: one FrontierPoint per configuration searched, with its $/1M output tokens
and its p90 TPOT and TTFT in seconds (None where the configuration cannot serve the load), whether it meets
the SLOs, and whether it is the one the plan chose. Two panels, $/1M against p90 TPOT and against p90 TTFT;
in each, the configurations no other one beats on both axes (cheaper and faster) are joined as the frontier.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from tokcost.plots.canvas import USD, new_figure

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

MS = 1e3


@dataclass(frozen=True, slots=True)
class FrontierPoint:
    """One configuration a plan searched: its label, cost and p90 latencies (None: cannot serve the load)."""

    label: str  # e.g. "4x h100-sxm TP4 fp8 chunk 2048"
    usd_per_million_output_tokens: float | None
    tpot_p90_s: float | None
    ttft_p90_s: float | None
    meets_slo: bool = True
    chosen: bool = False


def frontier(points: Sequence[tuple[float, float]]) -> list[tuple[float, float]]:
    """The (latency, cost) pairs no other pair beats on both: sorted by latency, cost falling."""
    out: list[tuple[float, float]] = []
    for latency, cost in sorted(points):
        if not out or cost < out[-1][1]:
            out.append((latency, cost))
    return out


def _usable(points: Sequence[FrontierPoint], attr: str) -> list[tuple[FrontierPoint, float, float]]:
    """(point, p90 latency in ms, $/1M) of each configuration that has both."""
    out = []
    for p in points:
        latency, cost = getattr(p, attr), p.usd_per_million_output_tokens
        if latency is not None and cost is not None:
            out.append((p, latency * MS, cost))
    return out


def draw_panel(ax: Axes, points: Sequence[FrontierPoint], attr: str, what: str) -> None:
    """Every configuration as a dot (grey: misses an SLO), the frontier as a line, the chosen one as a star."""
    usable = _usable(points, attr)
    for meets, color in ((False, "0.7"), (True, "tab:blue")):
        group = [(x, y) for p, x, y in usable if p.meets_slo == meets]
        ax.plot([x for x, _ in group], [y for _, y in group], marker="o", ls="none", color=color, ms=5,
                label="meets the SLOs" if meets else "misses an SLO")  # fmt: skip
    edge = frontier([(x, y) for p, x, y in usable if p.meets_slo])
    if edge:
        ax.plot([x for x, _ in edge], [y for _, y in edge], color="tab:blue", lw=1.2, label="Pareto frontier")
    for p, x, y in usable:
        if p.chosen:
            ax.plot([x], [y], marker="*", ms=16, color="tab:orange", mec="black", ls="none", label=f"chosen: {p.label}")
    ax.set_xlabel(f"p90 {what} (ms)")
    ax.set_ylabel(f"{USD}/1M output tokens")
    ax.set_yscale("log")
    ax.grid(True, alpha=0.25)


def plan_figure(points: Sequence[FrontierPoint], heading: str = "") -> Figure:
    """$/1M output tokens against p90 TPOT and against p90 TTFT, frontier joined, the chosen plan starred."""
    fig = new_figure(12, 5.5)
    tpot, ttft = fig.subplots(1, 2)
    draw_panel(tpot, points, "tpot_p90_s", "TPOT")
    draw_panel(ttft, points, "ttft_p90_s", "TTFT")
    tpot.legend(fontsize=8, frameon=False)
    fig.suptitle(heading or "Configurations searched: cost against tail latency", fontsize=9, x=0.01, ha="left")
    return fig
