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

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from tokcost import fmt
from tokcost.plots.canvas import USD, new_figure

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

    from tokcost.serving.search import Plan

MS = 1e3
# where a point's label may sit, in points from it (x, y, horizontal alignment), tried in this order
LABEL_SPOTS = (
    (4, 3, "left"),
    (-4, -9, "right"),
    (4, -9, "left"),
    (-4, 3, "right"),
    (4, 11, "left"),
    (-4, -17, "right"),
    (4, -17, "left"),
    (-4, 11, "right"),
)  # a line farther out last
LABEL_POINTS = 6.5  # a point label's font size
CHAR_W, LINE_H = 0.0105, 0.026  # a 6.5-point character's width and a line's height, as shares of a panel's axes
LABELLED = 30  # a plan of up to this many points labels every one; a bigger one this many (the frontier always)
DOT = 0.006  # half a marker's width, as a share of a panel


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


Box = tuple[float, float, float, float]  # left, bottom, right, top, in shares of a panel's axes


@dataclass(frozen=True)
class Geometry:
    """A panel's scale for placing labels, in shares of its axes: where a data point sits, a typographic point's
    width and height, a label's width and a line's height. The default is an estimate for the plan figure's panels;
    draw_panel measures its own panel with matplotlib's renderer once the layout is done."""

    point_u: float = 0.002
    point_v: float = 0.002
    line_h: float = LINE_H
    where: Callable[[float, float], tuple[float, float]] | None = None  # data -> axes shares (None: 5% margins)
    width: Callable[[str], float] = lambda text: CHAR_W * len(text)


def _box(u: float, v: float, width: float, spot: tuple[int, int, str], g: Geometry) -> Box:
    """A label's box at a point (u, v) placed at `spot` (points of offset)."""
    dx, dy, align = spot
    left = u + dx * g.point_u - (width if align == "right" else 0.0)
    bottom = v + dy * g.point_v
    return left, bottom, left + width, bottom + g.line_h


def _overlap(box: Box, placed: Sequence[Box]) -> float:
    """The area `box` shares with the boxes placed before it."""
    return sum(max(0.0, min(box[2], o[2]) - max(box[0], o[0])) * max(0.0, min(box[3], o[3]) - max(box[1], o[1]))
               for o in placed)  # fmt: skip


def _gap(box: Box, dot: tuple[float, float]) -> float:
    """How far a dot lies from a label's box (0 inside it), in shares of the panel."""
    u, v = dot
    return math.hypot(max(box[0] - u, 0.0, u - box[2]), max(box[1] - v, 0.0, v - box[3]))


def label_spots(
    usable: Sequence[tuple[FrontierPoint, float, float]],
    edge: set[tuple[float, float]],
    log_y: bool,
    geometry: Geometry | None = None,
) -> list[tuple[FrontierPoint, float, float, tuple[int, int, str]]]:
    """The points labelled and where each label sits: the frontier's and the chosen point's first, then the rest
    cheapest first, each at the first of LABEL_SPOTS whose box stays inside the panel and overlaps no dot and no
    label placed before it. Up to LABELLED points every one is labelled (where no spot is free, at the one that
    overlaps least); past that only the frontier, the chosen point and those with a free spot, LABELLED in all, so
    that a search of every GPU stays readable. Boxes are in shares of the panel (x linear, y log where the axis is;
    5% margins)."""
    if not usable:
        return []
    xs = [x for _, x, _ in usable]
    ys = [math.log(y) if log_y else y for _, _, y in usable]
    x0, xw = min(xs), (max(xs) - min(xs)) or 1.0
    y0, yw = min(ys), (max(ys) - min(ys)) or 1.0
    every = len(usable) <= LABELLED

    g = geometry or Geometry()

    def spot(x: float, y: float) -> tuple[float, float]:  # a point's place in the panel
        if g.where is not None:
            return g.where(x, y)
        return 0.05 + 0.9 * (x - x0) / xw, 0.05 + 0.9 * ((math.log(y) if log_y else y) - y0) / yw

    # every dot is in the way too, as a small box around it (a 5-point marker)
    dots = [spot(x, y) for _, x, y in usable]
    placed: list[Box] = [(u - DOT, v - DOT, u + DOT, v + DOT) for u, v in dots]
    out = []
    for p, x, y in sorted(usable, key=lambda item: (not ((item[1], item[2]) in edge or item[0].chosen), item[2])):
        must = every or (x, y) in edge or p.chosen
        if not must and len(out) >= LABELLED:
            break
        u, v = spot(x, y)
        boxes = [_box(u, v, g.width(p.label), spot, g) for spot in LABEL_SPOTS]
        inside = [i for i, b in enumerate(boxes) if b[0] >= 0 and b[2] <= 1 and b[1] >= 0 and b[3] <= 1] or list(
            range(4)
        )
        shared = {i: _overlap(boxes[i], placed) for i in inside}
        others = [d for d in dots if d != (u, v)]
        # a label nearer another dot than its own reads as that dot's (an audit found two TP labels swapped)
        astray = {i: any(_gap(boxes[i], d) < _gap(boxes[i], (u, v)) for d in others) for i in inside}
        best = min(inside, key=lambda i: (shared[i] > 0, astray[i], shared[i]))  # free and near its own dot first
        if shared[best] > 0 and not must:
            continue
        placed.append(boxes[best])
        out.append((p, x, y, LABEL_SPOTS[best]))
    return out


def draw_panel(ax: Axes, points: Sequence[FrontierPoint], attr: str, what: str, slo_s: float | None = None) -> None:
    """Every configuration as a dot (grey: misses an SLO; label_panel labels them once the figure is laid out), the
    frontier as a line, the chosen one as a star, the SLO as a dashed line."""
    from matplotlib.ticker import (  # noqa: PLC0415  only when drawing
        FuncFormatter,
        LogLocator,
        NullFormatter,
        ScalarFormatter,
    )

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
    log_y = bool(usable) and all(y > 0 for _, _, y in usable)
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
    if log_y:  # costs span decades; a zero price (--price 0) stays linear
        ax.set_yscale("log")
        # within one decade matplotlib labels the minor ticks itself (3x10^1 beside $10): dollars there too; past
        # one, ticks at 1, 2 and 5 of each decade ($20, $50, $100, ...), where one $100 tick was all a $28-$800 axis had
        ys = [y for _, _, y in usable]
        if max(ys) < 10 * min(ys):
            ax.yaxis.set_minor_formatter(money)
        else:
            ax.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
            ax.yaxis.set_minor_formatter(NullFormatter())
    ax.yaxis.set_major_formatter(money)

    class Grouped(ScalarFormatter):  # its decimals follow the ticks' spacing (2.5 ms apart reads 192.5), grouped
        def __call__(self, x: float, pos: int | None = None) -> str:  # by thousands as tokcost prints (14,000)
            return _thousands(super().__call__(x, pos))

    ticks = Grouped(useOffset=False)
    ticks.set_scientific(False)
    ax.xaxis.set_major_formatter(ticks)
    ax.grid(True, alpha=0.25)


def measured(ax: Axes) -> Geometry:
    """The panel's own geometry, from matplotlib's renderer: where each data point lands (the axes' limits, the SLO
    line's included, and their scale), a point's size and each label's width against the panel's. The audit of
    2026-12-05 found labels from the estimate drawn on each other and beside the wrong dots."""
    renderer = ax.figure.canvas.get_renderer()  # type: ignore[attr-defined]
    panel = ax.get_window_extent(renderer)
    to_axes = ax.transAxes.inverted()

    def where(x: float, y: float) -> tuple[float, float]:
        u, v = to_axes.transform(ax.transData.transform((x, y)))
        return float(u), float(v)

    def extent(text: str) -> tuple[float, float]:
        probe = ax.text(0, 0, text, fontsize=LABEL_POINTS)
        box = probe.get_window_extent(renderer)
        probe.remove()
        return box.width / panel.width, box.height / panel.height

    point = ax.figure.dpi / 72  # pixels per typographic point
    return Geometry(point / panel.width, point / panel.height, extent("Ag")[1], where, lambda text: extent(text)[0])


def label_panel(ax: Axes, points: Sequence[FrontierPoint], attr: str) -> None:
    """Each point's label on a drawn panel, clear of the dots and of each other at the panel's measured geometry
    (call once the figure's layout is done)."""
    usable = _usable(points, attr)
    edge = frontier([(x, y) for p, x, y in usable if p.meets_slo])
    log_y = bool(usable) and all(y > 0 for _, _, y in usable)
    for p, x, y, (dx, dy, align) in label_spots(usable, set(edge), log_y, measured(ax)):
        ax.annotate(p.label, (x, y), xytext=(dx, dy), textcoords="offset points", fontsize=LABEL_POINTS,
                    color="0.25", ha=align)  # fmt: skip


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
    from matplotlib.backends.backend_agg import FigureCanvasAgg  # noqa: PLC0415  only when drawing

    FigureCanvasAgg(fig)  # a renderer to measure labels with (savefig still picks its own by the file's format)
    fig.draw_without_rendering()  # the constrained layout first: the panels' final sizes
    label_panel(tpot, points, "tpot_p90_s")
    label_panel(ttft, points, "ttft_p90_s")
    return fig


def plan_slos(plan: Plan) -> dict[str, float]:
    """The p90 TPOT and TTFT SLOs of a plan, drawn on the panels whose axis they share."""
    return {slo.metric: slo.seconds for slo in plan.slos if slo.percentile == "p90" and slo.metric in ("tpot", "ttft")}
