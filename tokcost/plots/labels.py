"""Names and colours shared by the estimate's pictures: a stage keeps its label and colour in every panel."""

from __future__ import annotations

from typing import Any

from tokcost.engine.estimate import Estimate
from tokcost.engine.journey import journey
from tokcost.plots.canvas import colors

OTHER = "other stages (< 1% each)"


def stage_label(name: str, block: str, blocks: int) -> str:
    """A stage's name, with its block kind when the pass has more than one kind of block."""
    return name + (f" [{block}]" if blocks > 1 and block else "")


def stage_palette(e: Estimate) -> dict[str, Any]:
    """One colour per stage label, the strongest colours to the stages that take the largest share of a pass."""
    j = journey(e)
    share: dict[str, float] = {}
    for rows in (j.decode or [], j.prefill):
        blocks = len({r.block for r in rows if r.block})
        total = sum(r.expected_s for r in rows) or 1.0
        for r in rows:
            if r.ceiling_s > 0 or r.expected_s > 0:
                label = stage_label(r.name, r.block, blocks)
                share[label] = max(share.get(label, 0.0), r.expected_s / total)
    return colors([*sorted(share, key=lambda label: -share[label]), OTHER])


def title(e: Estimate) -> str:
    """Model, GPUs and workload, as the estimate's table header says them."""
    wl, lay = e.workload, e.layout
    decode = f" · decode at {e.mean_decode_context:,.0f} cached tokens" if e.mean_decode_context is not None else ""
    return (
        f"{e.model.name} on {lay.gpus}x {e.gpu.name} · batch {wl.batch} · prompt {wl.prompt_tokens:,}{decode}"
        f" · weights {e.precision.weights} · compute {e.precision.compute}"
    )
