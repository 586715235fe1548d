"""A comparison as grouped bars: TTFT, TPOT, decode tokens/s and $/1M output tokens per (model, GPU).

A view of the estimates `tokcost compare` prints: per (model, GPU) pair two bars, ceiling (dark) and expected
(light). As in the table, a pair that does not fit in memory shows no cost, and a metric that does not apply
(TPOT with one output token, cost without a price) shows no bar.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from tokcost.engine.estimate import Estimate, Scenario
from tokcost.plots.canvas import EXPECTED_ALPHA, USD, colors, new_figure

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

MS = 1e3
# (panel title, y label, scenario attribute, scale, shown only when the pair fits)
METRICS = (
    ("TTFT", "time to first token (ms)", "ttft_s", MS, False),
    ("TPOT", "time per output token (ms)", "tpot_s", MS, False),
    ("decode tokens/s", "decode tokens/s (replica)", "decode_tokens_per_s", 1.0, False),
    (f"{USD}/1M output tokens", f"{USD}/1M output tokens", "usd_per_million_output_tokens", 1.0, True),
)


def pair_label(e: Estimate, formats: bool = False) -> str:
    """Model and GPUs of one bar group, and its weights/KV/compute where the groups' formats differ."""
    lay, p = e.layout, e.precision
    shown = f"\n{p.weights}/{p.kv}/{p.compute}" if formats else ""
    return f"{e.model.name}\n{lay.gpus}x {e.gpu.name}{shown}" + ("" if e.memory.fits else "\n(does not fit)")


def _value(s: Scenario, attr: str, scale: float) -> float | None:
    value = getattr(s, attr)
    return None if value is None else value * scale


def _number(value: float) -> str:
    return f"{value:,.0f}" if value >= 100 else f"{value:,.3g}"


def draw_metric(ax: Axes, results: Sequence[Estimate], attr: str, scale: float, needs_fit: bool) -> None:
    """Ceiling and expected bars of one metric, one group per (model, GPU)."""
    palette = colors([e.gpu.name for e in results])
    width = 0.38
    for i, e in enumerate(results):
        color = palette[e.gpu.name]
        for offset, scenario, alpha, name in ((-width / 2, e.ceiling, 1.0, "ceiling"),
                                              (width / 2, e.expected, EXPECTED_ALPHA, "expected")):  # fmt: skip
            value = None if needs_fit and not e.memory.fits else _value(scenario, attr, scale)
            if value is None:
                ax.annotate("n/a", (i + offset, 0), ha="center", va="bottom", fontsize=7, color="0.4")
                continue
            ax.bar(i + offset, value, width, color=color, alpha=alpha, edgecolor="black", lw=0.4,
                   label=name if i == 0 else None)  # fmt: skip
            ax.annotate(_number(value), (i + offset, value), xytext=(0, 2), textcoords="offset points",
                        ha="center", fontsize=7)  # fmt: skip
    several = len({(e.precision.weights, e.precision.kv, e.precision.compute) for e in results}) > 1
    ax.set_xticks(range(len(results)), [pair_label(e, several) for e in results], fontsize=8)
    ax.grid(True, axis="y", alpha=0.25)
    ax.margins(y=0.15)


def compare_figure(results: Sequence[Estimate]) -> Figure:
    """Stacked panels of grouped bars: TTFT, TPOT, tokens/s, $/1M output tokens (dark: ceiling, light: expected)."""
    fig = new_figure(max(9.0, 1.3 * len(results) + 2), 11)
    for ax, (name, ylabel, attr, scale, needs_fit) in zip(fig.subplots(4, 1, sharex=True), METRICS, strict=True):
        draw_metric(ax, results, attr, scale, needs_fit)
        ax.set_title(name, fontsize=10, loc="left")
        ax.set_ylabel(ylabel, fontsize=9)
    from matplotlib.patches import Patch

    fig.legend(handles=[Patch(color="0.3", label="ceiling (datasheet)"),
                        Patch(color="0.3", alpha=EXPECTED_ALPHA, label="expected")],
               loc="outside upper right", fontsize=8, frameon=False)  # fmt: skip
    wl = results[0].workload
    fig.suptitle(f"batch {wl.batch} · prompt {wl.prompt_tokens:,} · output {wl.output_tokens:,}", fontsize=9, x=0.01,
                 ha="left")  # fmt: skip
    return fig
