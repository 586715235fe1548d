"""A sweep as four panels: TPOT, tokens/s per GPU, memory per GPU and $/1M output tokens.

A view of tokcost.engine.sweep's points: one line per prompt length (TPOT, tokens/s and cost against batch)
or per batch (memory against context, when the sweep has several contexts; else against batch), expected
solid and ceiling dashed. The critical batches the sweep reports are marked on the time and rate panels; the
GPU's memory capacity is the horizontal line of the memory panel, and points that do not fit are crossed.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from tokcost.engine.sweep import SweepPoint
from tokcost.plots.canvas import USD, colors, new_figure

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

MS, GB = 1e3, 1e9


def _by(points: Sequence[SweepPoint], key: str) -> dict[int, list[SweepPoint]]:
    groups: dict[int, list[SweepPoint]] = {}
    for p in points:
        groups.setdefault(getattr(p, key), []).append(p)
    return groups


def _mark_critical(ax: Axes, series: list[SweepPoint], color: Any, seen: set[tuple[int, str]]) -> None:
    """Vertical lines at the critical batches of one prompt length, inside the swept range, each once."""
    lo, hi = series[0].batch, series[-1].batch
    marks = [(series[0].critical_batch_compute, "matmuls compute-bound", ":"),
             (series[0].critical_batch_kv, "KV reads > weight reads", "-.")]  # fmt: skip
    for batch, what, style in marks:
        if batch is not None and lo <= batch <= hi and (batch, what) not in seen:
            seen.add((batch, what))
            ax.axvline(batch, color=color, ls=style, lw=1)
            ax.annotate(f"critical batch {batch:,}: {what}", (batch, 1), xycoords=("data", "axes fraction"),
                        xytext=(3, -3), textcoords="offset points", rotation=90, va="top", fontsize=7,
                        color=color)  # fmt: skip


def _against_batch(ax: Axes, points: Sequence[SweepPoint], palette: dict[str, Any], attr: str, ceiling: str | None,
                   scale: float, critical: bool) -> None:  # fmt: skip
    seen: set[tuple[int, str]] = set()  # the compute-bound batch does not depend on the context: one line
    for prompt, series in _by(points, "prompt_tokens").items():
        # a point without the value (the cost of a batch that does not fit: no price for it) is left out, not its
        # whole series
        series = [p for p in sorted(series, key=lambda p: p.batch) if getattr(p, attr) is not None]
        if not series:
            continue
        color, batches = palette[f"prompt {prompt:,}"], [p.batch for p in series]
        values = [getattr(p, attr) for p in series]
        per = [p.gpus if attr == "decode_tokens_per_s" else 1 for p in series]  # tokens/s per GPU of the replica
        ax.plot(batches, [v * scale / n for v, n in zip(values, per, strict=True)], color=color, marker="o", ms=3,
                label=f"prompt {prompt:,} (expected)")  # fmt: skip
        if ceiling is not None:
            top = [getattr(p, ceiling) * scale / n for p, n in zip(series, per, strict=True)]
            ax.plot(batches, top, color=color, ls="--", lw=1, label=f"prompt {prompt:,} (ceiling)")
        for p, v, n in zip(series, values, per, strict=True):
            if not p.fits:
                ax.plot([p.batch], [v * scale / n], marker="x", color="red", ms=7, ls="none")
        if critical:
            _mark_critical(ax, series, color, seen)
    _log2_axis(ax)
    ax.set_xlabel("batch (concurrent sequences)")
    ax.grid(True, alpha=0.25)


def _log2_axis(ax: Axes) -> None:
    """A base-2 log x axis labelled with plain numbers (1, 4, 16, ...), not powers."""
    from matplotlib.ticker import FuncFormatter

    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:,.0f}"))


def _memory(ax: Axes, points: Sequence[SweepPoint], capacity_bytes_per_gpu: float | None) -> None:
    contexts = sorted({p.prompt_tokens for p in points})
    key, other, xlabel = (("batch", "prompt_tokens", "prompt tokens (context)") if len(contexts) > 1
                          else ("prompt_tokens", "batch", "batch (concurrent sequences)"))  # fmt: skip
    groups = _by(points, key)
    palette = colors([f"{key.split('_')[0]} {k:,}" for k in groups])
    for k, series in groups.items():
        series = sorted(series, key=lambda p: getattr(p, other))
        label = f"{key.split('_')[0]} {k:,}"
        xs = [getattr(p, other) for p in series]
        ax.plot(xs, [p.used_bytes_per_gpu / GB for p in series], color=palette[label], marker="o", ms=3, label=label)
        ax.plot(xs, [p.kv_cache_bytes_per_gpu / GB for p in series], color=palette[label], ls=":", marker=".",
                label=f"{label}: KV cache")  # fmt: skip
        for p in series:
            if not p.fits:
                ax.plot([getattr(p, other)], [p.used_bytes_per_gpu / GB], marker="x", color="red", ms=7, ls="none")
    if capacity_bytes_per_gpu is None and points:
        capacity_bytes_per_gpu = points[0].capacity_bytes_per_gpu
    if capacity_bytes_per_gpu is not None:
        ax.axhline(capacity_bytes_per_gpu / GB, color="black", lw=1.2)
        ax.annotate(f"capacity {capacity_bytes_per_gpu / GB:,.1f} GB", (0, capacity_bytes_per_gpu / GB),
                    xycoords=("axes fraction", "data"), xytext=(3, 3), textcoords="offset points",
                    fontsize=8)  # fmt: skip
    _log2_axis(ax)
    ax.set_xlabel(xlabel)
    ax.set_ylabel("memory per GPU (GB)")
    ax.set_title("KV cache (dotted) and all it holds: weights + KV + workspace + reserve", fontsize=9, loc="left")
    ax.grid(True, alpha=0.25)
    ax.legend(fontsize=7, frameon=False)


def sweep_figure(points: Sequence[SweepPoint], *, capacity_bytes_per_gpu: float | None = None) -> Figure:
    """TPOT, tokens/s per GPU, memory per GPU and $/1M output tokens of a sweep (red crosses: does not fit)."""
    first = points[0]
    palette = colors([f"prompt {p.prompt_tokens:,}" for p in points])
    fig = new_figure(12, 8)
    (tpot, rate), (memory, cost) = fig.subplots(2, 2)
    _against_batch(tpot, points, palette, "tpot_s", "ceiling_tpot_s", MS, critical=True)
    tpot.set_yscale("log")
    tpot.set_ylabel("TPOT (ms)")
    tpot.set_title("time per output token", fontsize=9, loc="left")
    tpot.legend(fontsize=7, frameon=False)
    _against_batch(rate, points, palette, "decode_tokens_per_s", "ceiling_decode_tokens_per_s", 1.0, critical=True)
    rate.set_ylabel("decode tokens/s per GPU")
    rate.set_title("throughput per GPU", fontsize=9, loc="left")
    _memory(memory, points, capacity_bytes_per_gpu)
    if all(p.usd_per_million_output_tokens is None for p in points):
        cost.text(0.5, 0.5, "no price: give --price or a spec with price_per_hour_usd", ha="center",
                  transform=cost.transAxes, fontsize=9)  # fmt: skip
    else:
        _against_batch(cost, points, palette, "usd_per_million_output_tokens", None, 1.0, critical=False)
        cost.set_yscale("log")
    cost.set_ylabel(f"{USD}/1M output tokens (expected)")
    cost.set_title("cost per million output tokens", fontsize=9, loc="left")
    fig.suptitle(f"{first.model} on {first.gpus}x {first.gpu} · output {first.output_tokens:,} tokens · "
                 "solid: expected, dashed: ceiling, red x: does not fit", fontsize=9, x=0.01, ha="left")  # fmt: skip
    return fig
