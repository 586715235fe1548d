"""A plan's configurations as cost against tail latency: the Pareto frontier, the SLOs, and the chosen one marked.

`tokcost plan --plot FILE` (and `tokcost.plan(...).plot(FILE)`) draws it from frontier_points(plan): one
FrontierPoint per configuration searched, with the cost plans rank by ($/hour of the fleet that serves the
load), its p90 TPOT and TTFT in seconds (None where it cannot serve the load), whether it meets the SLOs, and
whether it is the one the plan chose (the cheapest that meets them, so always on the frontier). Two panels,
$/hour against p90 TPOT and against p90 TTFT, each point labelled with its GPU, layout and weights; in each, the
configurations no other one beats on both axes (cheaper and faster) are joined as the frontier, and a p90 SLO
on that axis is a dashed line.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from tokcost import fmt
from tokcost.plots.canvas import USD, new_figure

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

    from tokcost.serving.search import Plan

MS = 1e3
LABELLED = 12  # points labelled by name at most (the cheapest first), so a big search stays readable


@dataclass(frozen=True, slots=True)
class FrontierPoint:
    """One configuration a plan searched: its label, $/hour and p90 latencies (None: cannot serve the load)."""

    label: str  # e.g. "h100-sxm TP4 fp8"
    usd_per_hour: float | None
    tpot_p90_s: float | None
    ttft_p90_s: float | None
    meets_slo: bool = True
    chosen: bool = False


def frontier_points(plan: Plan) -> list[FrontierPoint]:
    """One point per configuration planned (expected), the cheapest that meets every SLO chosen."""
    from tokcost.serving.search import primary_cost, short_label  # noqa: PLC0415  (views import the model lazily)

    chosen = next((r for r in plan.rows if r.expected.meets_slo), None)
    return [
        FrontierPoint(short_label(row), primary_cost(row.expected), (row.expected.tpot_s or {}).get("p90"),
                      (row.expected.ttft_s or {}).get("p90"), meets_slo=row.expected.meets_slo, chosen=row is chosen)
        for row in plan.rows
    ]  # fmt: skip


def frontier(points: Sequence[tuple[float, float]]) -> list[tuple[float, float]]:
    """The (latency, cost) pairs no other pair beats on both: sorted by latency, cost falling."""
    out: list[tuple[float, float]] = []
    for latency, cost in sorted(points):
        if not out or cost < out[-1][1]:
            out.append((latency, cost))
    return out


def _usable(points: Sequence[FrontierPoint], attr: str) -> list[tuple[FrontierPoint, float, float]]:
    """(point, p90 latency in ms, $/hour) of each configuration that has both."""
    out = []
    for p in points:
        latency, cost = getattr(p, attr), p.usd_per_hour
        if latency is not None and cost is not None:
            out.append((p, latency * MS, cost))
    return out


def draw_panel(ax: Axes, points: Sequence[FrontierPoint], attr: str, what: str, slo_s: float | None = None) -> None:
    """Every configuration as a labelled dot (grey: misses an SLO), the frontier as a line, the chosen one as a
    star, the SLO as a dashed line."""
    from matplotlib.ticker import FuncFormatter, NullFormatter, ScalarFormatter  # noqa: PLC0415  only when drawing

    usable = _usable(points, attr)
    for meets, color in ((False, "0.7"), (True, "tab:blue")):
        group = [(x, y) for p, x, y in usable if p.meets_slo == meets]
        if not group:  # no entry in the legend for a kind no point is
            continue
        ax.plot([x for x, _ in group], [y for _, y in group], marker="o", ls="none", color=color, ms=5,
                label="meets the SLOs" if meets else "misses an SLO")  # fmt: skip
    edge = frontier([(x, y) for p, x, y in usable if p.meets_slo])
    if edge:
        ax.plot([x for x, _ in edge], [y for _, y in edge], color="tab:blue", lw=1.2, label="Pareto frontier")
    for p, x, y in sorted(usable, key=lambda item: item[2])[:LABELLED]:
        ax.annotate(p.label, (x, y), xytext=(4, 3), textcoords="offset points", fontsize=6.5, color="0.25")
    for p, x, y in usable:
        if p.chosen:
            ax.plot([x], [y], marker="*", ms=16, color="tab:orange", mec="black", ls="none", label=f"chosen: {p.label}")
    if slo_s is not None:
        ax.axvline(slo_s * MS, color="tab:red", ls="--", lw=1, label=f"p90 {what} SLO {fmt.ms(slo_s)}")
    ax.set_xlabel(f"p90 {what} (ms)")
    ax.set_ylabel(f"fleet {USD}/hour")
    if not usable:  # no configuration has both a price and a p90 (every one refused, or none priced)
        ax.text(0.5, 0.5, f"no configuration has a {USD}/hour and a p90 {what}", transform=ax.transAxes,
                ha="center", va="center", fontsize=9, color="0.4")  # fmt: skip
    money = FuncFormatter(lambda v, _: f"{USD}{v:,.0f}" if v >= 1 else f"{USD}{v:.2f}")
    if usable and all(y > 0 for _, _, y in usable):  # costs span decades; a zero price (--price 0) stays linear
        ax.set_yscale("log")
        # within one decade matplotlib labels the minor ticks itself (3x10^1 beside $10): dollars there too, and none
        # where the major ticks are enough
        ys = [y for _, _, y in usable]
        ax.yaxis.set_minor_formatter(money if max(ys) < 10 * min(ys) else NullFormatter())
    ax.yaxis.set_major_formatter(money)

    class Grouped(ScalarFormatter):  # its decimals follow the ticks' spacing (2.5 ms apart reads 192.5), grouped
        def __call__(self, x: float, pos: int | None = None) -> str:  # by thousands as tokcost prints (14,000)
            return _thousands(super().__call__(x, pos))

    ticks = Grouped(useOffset=False)
    ticks.set_scientific(False)
    ax.xaxis.set_major_formatter(ticks)
    ax.grid(True, alpha=0.25)


def _thousands(label: str) -> str:
    """A tick's label with its whole part grouped by thousands (14000 -> 14,000; 192.5 and -0.5 as they are)."""
    whole, dot, rest = label.partition(".")
    sign, digits = (whole[:1], whole[1:]) if whole[:1] in ("-", "\N{MINUS SIGN}") else ("", whole)
    return f"{sign}{int(digits):,}{dot}{rest}" if digits.isdigit() else label


def plan_figure(points: Sequence[FrontierPoint], heading: str = "", slos: Mapping[str, float] | None = None) -> Figure:
    """$/hour against p90 TPOT and against p90 TTFT, frontier joined, SLOs dashed, the chosen plan starred."""
    fig = new_figure(12, 5.5)
    tpot, ttft = fig.subplots(1, 2)
    draw_panel(tpot, points, "tpot_p90_s", "TPOT", (slos or {}).get("tpot"))
    draw_panel(ttft, points, "ttft_p90_s", "TTFT", (slos or {}).get("ttft"))
    for ax in (tpot, ttft):
        if ax.get_legend_handles_labels()[0]:  # a panel with nothing drawn has no legend to show
            ax.legend(fontsize=8, frameon=False)
    fig.suptitle(heading or "Configurations searched: the fleet's cost against tail latency", fontsize=9, x=0.01,
                 ha="left")  # fmt: skip
    return fig


def plan_slos(plan: Plan) -> dict[str, float]:
    """The p90 TPOT and TTFT SLOs of a plan, drawn on the panels whose axis they share."""
    return {slo.metric: slo.seconds for slo in plan.slos if slo.percentile == "p90" and slo.metric in ("tpot", "ttft")}
