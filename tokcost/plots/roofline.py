"""The roofline chart of a GPU with the kernels of one estimate placed on it.

Williams, Waterman, Patterson, "Roofline: an insightful visual performance model", CACM 2009. The lines are
the GPU's: the HBM bandwidth slope and one flat roof per dense compute peak its spec lists (dtypes with the
same peak share a roof), each meeting the slope at its ridge point; dashed, the same for "expected" at the
compute dtype of the estimate. The points are the engine's own priced stages of the prefill and of the decode
step (a view, not a model): x = the stage's FLOPs over its HBM bytes, y = its FLOPs over the time the engine
priced it at, under ceiling (filled) and expected (hollow). Stages with no FLOPs (lookups, KV writes) and
collectives have no place on the chart and are named under it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tokcost.engine.estimate import Estimate
from tokcost.engine.journey import paired
from tokcost.engine.roofline import PassCost
from tokcost.hardware.spec import GpuSpec
from tokcost.plots.canvas import EXPECTED_ALPHA, new_figure
from tokcost.plots.labels import stage_label, stage_palette, title

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

TERA = 1e12  # the y axis is in TFLOP/s
MARKERS = {"prefill": "s", "decode step": "o"}
CLUSTER_MIN_SHARE = 0.01  # stages named beside a shared spot take at least 1% of their pass


@dataclass(frozen=True, slots=True)
class KernelPoint:
    """One priced stage on the chart: where it sits, and the share of its pass it takes (ceiling)."""

    phase: str  # "prefill" or "decode step"
    name: str
    intensity_flop_per_byte: float
    ceiling_flops_per_s: float
    expected_flops_per_s: float
    share: float


def _phases(e: Estimate) -> list[tuple[str, PassCost, PassCost]]:
    out = [("prefill", e.ceiling.prefill, e.expected.prefill)]
    if e.ceiling.decode_step is not None and e.expected.decode_step is not None:
        out.append(("decode step", e.ceiling.decode_step, e.expected.decode_step))
    return out


def kernel_points(e: Estimate) -> tuple[list[KernelPoint], list[str]]:
    """The chart's points (stages with FLOPs, bytes and time), and the names of the stages left off."""
    points, left_off = [], []
    for phase, ceiling, expected in _phases(e):
        blocks = len({p.stage.block for p in ceiling.stages if p.stage.block})
        for c, x in paired(ceiling, expected):  # each scenario's slowest pipeline stage, kernel by kernel
            if c is None or x is None:  # a kernel of the other scenario's slowest stage only
                continue
            st, label = c.stage, stage_label(c.stage.name, c.stage.block, blocks)
            if c.collective is not None or st.flops <= 0 or st.bytes <= 0 or c.seconds <= 0 or x.seconds <= 0:
                left_off.append(label)
                continue
            work = st.count * st.flops
            share = c.seconds / ceiling.stage_seconds if ceiling.stage_seconds else 0.0
            points.append(KernelPoint(phase, label, st.flops / st.bytes, work / c.seconds, work / x.seconds, share))
    return points, list(dict.fromkeys(left_off))


def roofs(gpu: GpuSpec) -> list[tuple[str, float]]:
    """(label, FLOP/s) of each distinct dense peak the GPU lists, lowest first; equal peaks share a label."""
    by_rate: dict[float, list[str]] = {}
    for dtype in gpu.peak_tflops:
        rate = gpu.peak_flops_per_s(dtype)
        if rate is not None:
            by_rate.setdefault(rate, []).append(dtype)
    return [("/".join(dtypes), rate) for rate, dtypes in sorted(by_rate.items())]


def _line_label(ax: Axes, x: float, y: float, text: str, **style: Any) -> None:
    ax.annotate(text, (x, y), xytext=(-4, 3), textcoords="offset points", ha="right", va="bottom", **style)


def draw_roofline(ax: Axes, e: Estimate, palette: dict[str, Any] | None = None) -> None:
    """The GPU's roofs and slope, the expected roof, and the estimate's stages, on log-log axes."""
    points, left_off = kernel_points(e)
    ceiling, expected = e.deployment.rates("ceiling"), e.deployment.rates("expected")
    bandwidth = e.gpu.bandwidth_bytes_per_s
    peaks = roofs(e.gpu)
    ridges = [rate / bandwidth for _, rate in peaks]  # where each roof meets the slope
    xs = [p.intensity_flop_per_byte for p in points]
    x_lo = min([*xs, min(ridges)]) / 4
    x_hi = max([*xs, max(ridges)]) * 300  # room right of the points for the roofs' labels
    top = peaks[-1][1]
    ax.plot([x_lo, max(ridges)], [bandwidth * x_lo / TERA, top / TERA], color="black", lw=1.6)
    _line_label(ax, x_lo * 40, bandwidth * x_lo * 40 / TERA, f"HBM {bandwidth / 1e12:,.2f} TB/s")
    for (dtypes, rate), ridge in zip(peaks, ridges, strict=True):
        ax.plot([ridge, x_hi], [rate / TERA, rate / TERA], color="black", lw=1.2)
        _line_label(ax, x_hi, rate / TERA, f"{dtypes} {rate / TERA:,.1f} TFLOP/s, ridge {ridge:,.0f} FLOP/B",
                    fontsize=8)  # fmt: skip
        ax.plot([ridge], [rate / TERA], marker="D", color="black", ms=4)
    x_ridge = expected.flops_per_s / expected.bytes_per_s
    ax.plot([x_lo, x_ridge, x_hi], [expected.bytes_per_s * x_lo / TERA, expected.flops_per_s / TERA,
            expected.flops_per_s / TERA], color="0.45", lw=1.2, ls="--")  # fmt: skip
    ax.plot([x_ridge], [expected.flops_per_s / TERA], marker="D", color="0.45", ms=4)
    ax.annotate(f"expected at {ceiling.compute_dtype}: {expected.bytes_per_s / 1e12:,.2f} TB/s, "
                f"{expected.flops_per_s / TERA:,.0f} TFLOP/s, ridge {x_ridge:,.0f} FLOP/B",
                (x_lo * 1.5, expected.bytes_per_s * x_lo * 1.5 / TERA), xytext=(4, -14), textcoords="offset points",
                fontsize=8, color="0.35")  # fmt: skip
    palette = palette or stage_palette(e)
    for p in sorted(points, key=lambda p: -p.share):  # the biggest first: smaller markers stay visible on top
        color, marker, size = palette[p.name], MARKERS[p.phase], 5 + 14 * p.share**0.5
        x = p.intensity_flop_per_byte
        ax.plot([x, x], [p.ceiling_flops_per_s / TERA, p.expected_flops_per_s / TERA], color=color, lw=0.8,
                alpha=EXPECTED_ALPHA)  # fmt: skip
        ax.plot([x], [p.ceiling_flops_per_s / TERA], marker=marker, color=color, ms=size, ls="none", mec="black",
                mew=0.4)  # fmt: skip
        ax.plot([x], [p.expected_flops_per_s / TERA], marker=marker, ms=size, ls="none", mfc="none", mec=color,
                mew=1.2)  # fmt: skip
    _label_clusters(ax, points)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(x_lo, x_hi)
    ax.set_xlabel("arithmetic intensity (FLOP/B)")
    ax.set_ylabel("achieved rate (TFLOP/s)")
    ax.grid(True, which="major", alpha=0.25)
    drawn = {p.name for p in points}
    _legend(ax, {name: color for name, color in palette.items() if name in drawn})  # the biggest stages first
    if left_off:
        ax.text(0.0, -0.13, "not on the chart (no FLOPs, or a collective): " + ", ".join(left_off),
                transform=ax.transAxes, fontsize=7, color="0.35", va="top", wrap=True)  # fmt: skip


def _near(a: KernelPoint, b: KernelPoint, tolerance: float = 0.03) -> bool:
    """Within 3% on both axes: the markers overlap."""
    return (abs(math.log(a.intensity_flop_per_byte / b.intensity_flop_per_byte)) < tolerance
            and abs(math.log(a.ceiling_flops_per_s / b.ceiling_flops_per_s)) < tolerance)  # fmt: skip


def _label_clusters(ax: Axes, points: list[KernelPoint]) -> None:
    """Name the stages that sit on one spot (decode's matmuls all share one intensity at a small batch)."""
    spots: list[list[KernelPoint]] = []
    for p in sorted(points, key=lambda p: -p.share):
        home = next((s for s in spots if _near(s[0], p)), None)
        if home is None:
            spots.append([p])
        else:
            home.append(p)
    for members in spots:
        shown = [p for p in members if p.share >= CLUSTER_MIN_SHARE]
        if len(members) < 2 or not shown:
            continue
        phases = {p.phase: [q.name for q in shown if q.phase == p.phase] for p in shown}
        text = "\n".join(f"{phase}: {', '.join(names)}" for phase, names in phases.items())
        ax.annotate(text, (members[0].intensity_flop_per_byte, members[0].ceiling_flops_per_s / TERA),
                    xytext=(10, 4), textcoords="offset points", fontsize=7, color="0.2", va="bottom")  # fmt: skip


def _legend(ax: Axes, palette: dict[str, Any]) -> None:
    from matplotlib.lines import Line2D

    handles = [Line2D([], [], color=c, marker="o", ls="none", ms=7, label=name) for name, c in palette.items()]
    handles += [
        Line2D([], [], color="0.3", marker="s", ls="none", label="prefill"),
        Line2D([], [], color="0.3", marker="o", ls="none", label="decode step"),
        Line2D([], [], color="0.3", marker="o", ls="none", mfc="0.3", label="filled: ceiling (datasheet)"),
        Line2D([], [], color="0.3", marker="o", ls="none", mfc="none", label="hollow: expected"),
    ]
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False)


def roofline_figure(e: Estimate) -> Figure:
    """The roofline chart of `e` alone."""
    fig = new_figure(12, 6.5)
    ax = fig.add_subplot()
    draw_roofline(ax, e)
    ax.set_title(f"Roofline of {e.gpu.name}: the stages of prefill and of one decode step", loc="left")
    fig.suptitle(title(e), fontsize=9, x=0.01, ha="left")
    return fig
