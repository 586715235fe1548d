"""One token's journey as stacked bars: the time of each stage of the prefill and of one decode step.

A view of tokcost.engine.journey: each segment is a journey row's time (ceiling and expected), so each bar
adds up to the pass time `estimate` prints (TTFT's prefill; the decode step at the mean context). Rows that
take under MIN_SHARE of their pass in both scenarios are stacked together as one "other stages" segment;
host-side rows with no GPU time (tokenize, detokenize) have no height and are left out.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tokcost.engine.estimate import Estimate
from tokcost.engine.journey import JourneyRow, journey
from tokcost.plots.canvas import new_figure
from tokcost.plots.labels import OTHER, stage_label, stage_palette, title

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

MIN_SHARE = 0.01
MS = 1e3  # bars are in milliseconds


def segments(rows: list[JourneyRow]) -> list[tuple[str, float, float]]:
    """(label, ceiling s, expected s) per row with time, small rows merged into one segment at the end."""
    total_c = sum(r.ceiling_s for r in rows) or 1.0
    total_x = sum(r.expected_s for r in rows) or 1.0
    blocks = len({r.block for r in rows if r.block})
    out, other_c, other_x, merged = [], 0.0, 0.0, 0
    for r in rows:
        if r.ceiling_s <= 0 and r.expected_s <= 0:
            continue
        if r.ceiling_s / total_c < MIN_SHARE and r.expected_s / total_x < MIN_SHARE:
            other_c, other_x, merged = other_c + r.ceiling_s, other_x + r.expected_s, merged + 1
            continue
        out.append((stage_label(r.name, r.block, blocks), r.ceiling_s, r.expected_s))
    if merged:
        out.append((OTHER, other_c, other_x))
    return out


def draw_journey(ax: Axes, rows: list[JourneyRow], heading: str, palette: dict[str, Any]) -> None:
    """Two stacked bars, ceiling and expected, of the rows' times in ms, each topped by its total."""
    bottoms = [0.0, 0.0]
    for label, ceiling_s, expected_s in segments(rows):
        heights = [ceiling_s * MS, expected_s * MS]
        ax.bar([0, 1], heights, bottom=bottoms, color=palette[label], width=0.6, edgecolor="white", lw=0.5)
        bottoms = [b + h for b, h in zip(bottoms, heights, strict=True)]
    for x, total in enumerate(bottoms):
        ax.annotate(f"{total:,.3g} ms", (x, total), xytext=(0, 3), textcoords="offset points", ha="center",
                    fontsize=8)  # fmt: skip
    ax.set_xticks([0, 1], ["ceiling", "expected"])
    ax.set_ylabel("time (ms)")
    ax.set_title(heading, fontsize=10, loc="left")
    ax.set_ylim(0, max(bottoms) * 1.12 if max(bottoms) > 0 else 1)
    ax.grid(True, axis="y", alpha=0.25)


def draw_journeys(prefill_ax: Axes, decode_ax: Axes | None, e: Estimate, palette: dict[str, Any]) -> list[str]:
    """The prefill's bars and (with a decode step) the decode step's; returns the labels drawn."""
    j = journey(e)
    wl = e.workload
    draw_journey(prefill_ax, j.prefill, f"prefill of {wl.batch} x {wl.computed_prompt_tokens:,} tokens (TTFT)", palette)
    if decode_ax is not None and j.decode is not None:
        context = f"{e.mean_decode_context:,.0f}" if e.mean_decode_context is not None else "?"
        draw_journey(decode_ax, j.decode, f"one decode step at {context} cached tokens", palette)
    drawn = [label for rows in (j.decode or [], j.prefill) for label, _, _ in segments(rows)]
    return list(dict.fromkeys(drawn))


def legend(fig: Figure, palette: dict[str, Any], labels: list[str]) -> None:
    """The colours of the stages drawn, top of the stack first, right of the bars."""
    from matplotlib.patches import Patch

    handles = [Patch(color=palette[name], label=name) for name in reversed(labels)]
    fig.legend(handles=handles, loc="outside right center", fontsize=8, frameon=False)


def journey_figure(e: Estimate) -> Figure:
    """The journey of `e`: the prefill and one decode step, stage by stage, ceiling and expected."""
    decoding = e.ceiling.decode_step is not None
    fig = new_figure(11 if decoding else 8, 6)
    axes = fig.subplots(1, 2 if decoding else 1, squeeze=False)[0]
    palette = stage_palette(e)
    legend(fig, palette, draw_journeys(axes[0], axes[1] if decoding else None, e, palette))
    fig.suptitle("One token's journey: time per stage\n" + title(e), fontsize=9, x=0.01, ha="left")
    return fig
