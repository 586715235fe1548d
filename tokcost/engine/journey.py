"""One token's journey: the kernels of a decode step and of the prefill, in order, with their share of the time.

A view, not a model: every row is a stage the engine priced (ceiling and expected), plus the host-side steps
(tokenize, detokenize) that sit outside the GPU roofline, the pipeline's extra stage-times and the fixed
per-step overhead, so that the rows add up to the pass time `estimate` prints.
"""

from __future__ import annotations

from dataclasses import dataclass

from tokcost.engine.estimate import Estimate
from tokcost.engine.passcost import PassCost, Priced
from tokcost.engine.roofline import kernels_launched


@dataclass(frozen=True, slots=True)
class JourneyRow:
    """One stop of the journey: its work on the busiest GPU (all its occurrences) and its time."""

    name: str
    block: str
    count: int
    flops: float
    bytes_read: float
    bytes_written: float
    ceiling_s: float
    expected_s: float
    share: float  # of the ceiling pass time
    bound: str
    note: str = ""


def _note(name: str, note: str, count: int = 0, bound: str = "host", ceiling_s: float = 0.0, expected_s: float = 0.0,
          total: float = 0.0) -> JourneyRow:  # fmt: skip
    """A row that is not a kernel: host work, the pipeline's other turns, fixed overhead, a skipped prefix."""
    share = ceiling_s / total if total else 0.0
    return JourneyRow(name, "", count, 0.0, 0.0, 0.0, ceiling_s, expected_s, share, bound, note)


def paired(ceiling: PassCost, expected: PassCost) -> list[tuple[Priced | None, Priced | None]]:
    """The two scenarios' kernels side by side; with pipeline stages each scenario's slowest stage may differ (the
    expected one adds a gap per kernel), so a kernel only one of them runs has nothing beside it."""
    if len(ceiling.stages) == len(expected.stages):
        return list(zip(ceiling.stages, expected.stages, strict=True))
    theirs = {(p.stage.name, p.stage.block): p for p in expected.stages}
    out: list[tuple[Priced | None, Priced | None]] = [(p, theirs.pop((p.stage.name, p.stage.block), None))
                                                      for p in ceiling.stages]  # fmt: skip
    return out + [(None, p) for p in theirs.values()]


def _exposed(p: Priced | None, cost: PassCost) -> float:
    """A kernel's time on the pass's clock: an overlapped collective only its share not hidden behind the kernels
    (the ceiling hides them all where the kernels are longer; an engine its expert all-to-all share)."""
    if p is None:
        return 0.0
    overlapped = cost.parts_seconds[2]
    if not cost.hidden_s or p.collective is None or p.collective.op not in cost.overlap_ops:
        return p.seconds
    return p.seconds * (1 - cost.hidden_s / overlapped)


def _stage_terms(ceiling: PassCost, expected: PassCost, total: float, per_row: float, host_gpus: int = 1
                 ) -> list[JourneyRow]:  # fmt: skip
    """What a stage adds to its kernels' sum (passcost.stage_seconds): the GPU's gap between kernels and the host's
    launches where they outlast the GPU (eager eras); hidden collective time comes off its rows (_exposed).
    `per_row`: the kernels the engine launches per stage row (EraFields.kernels_per_row); `host_gpus`: the GPUs whose
    kernels one host thread launches (EraFields.one_host_thread: a pipeline stage's)."""
    out = []
    # the expected pass's slowest stage, whose gaps these are: kernel rows as the engine launches them, collectives one
    kernels = round(kernels_launched(*expected.rows, per_row))
    if ceiling.gap_s or expected.gap_s:
        out.append(_note("gaps between kernels", "each kernel's ramp-up, tail and the idle time before the next "
                         "(the engine's per-kernel cost, expected only)", kernels, "gpu", ceiling.gap_s,
                         expected.gap_s, total))  # fmt: skip
    excess = [max(0.0, p.launch_s - p.gpu_s) for p in (ceiling, expected)]
    if any(excess):
        every = f", one host thread for each of a stage's {host_gpus} GPUs in turn" if host_gpus > 1 else ""
        out.append(_note("host launches past the GPU", f"an eager era launches every kernel from the host{every}: the "
                         "pass takes the launches' time", kernels, "host", excess[0], excess[1], total))  # fmt: skip
    return out


def _rows(ceiling: PassCost, expected: PassCost, per_row: float, cached_tokens: int = 0, host_gpus: int = 1
          ) -> list[JourneyRow]:  # fmt: skip
    total = ceiling.seconds
    rows = [_note("tokenize", "on the CPU, outside the GPU roofline (text -> token ids)")]
    if cached_tokens:
        rows.append(_note("cached prefix (skipped)", f"{cached_tokens:,} prompt tokens per sequence are not "
                          "recomputed: no matmul runs for them; their K/V is read inside the attention row",
                          count=cached_tokens, bound="cache"))  # fmt: skip
    for c, x in paired(ceiling, expected):
        st = (c or x).stage  # type: ignore[union-attr]
        c_s, x_s = _exposed(c, ceiling), _exposed(x, expected)
        rows.append(JourneyRow(st.name, st.block, st.count, st.count * st.flops, st.count * st.bytes_read,
                               st.count * st.bytes_written, c_s, x_s, c_s / total if total else 0.0,
                               (c or x).bound, st.note))  # type: ignore[union-attr]  # fmt: skip
    rows += _stage_terms(ceiling, expected, total, per_row, host_gpus)
    extra_c = ceiling.pipeline_s - ceiling.stage_seconds
    if extra_c:
        extra_x = expected.pipeline_s - expected.stage_seconds
        rule = "every stage once + (m - 1) x the slowest" if ceiling.schedule == "fill" else (
            "max(every stage once, m x the slowest)")  # fmt: skip
        note = f"{ceiling.pp} stages, {ceiling.microbatches} microbatches, {ceiling.schedule}: {rule}"
        rows.append(_note("pipeline (other stages' turns)", note, ceiling.extra_turns, "pipeline", extra_c, extra_x,
                          total))  # fmt: skip
    if ceiling.overhead_s or expected.overhead_s:
        rows.append(_note("fixed overhead", "launches, scheduling, sampling on the host (expected only)", 1, "host",
                          ceiling.overhead_s, expected.overhead_s, total))  # fmt: skip
    rows.append(_note("detokenize and loop back",
                      "the sampled id is appended; the next step reads one more KV entry per layer"))  # fmt: skip
    return rows


@dataclass(frozen=True, slots=True)
class Journey:
    """The decode step (at the mean context; None with one output token) and the prefill, stage by stage."""

    decode: list[JourneyRow] | None
    prefill: list[JourneyRow]
    decode_seconds: float | None  # the ceiling pass times the rows add up to
    prefill_seconds: float


def journey(e: Estimate) -> Journey:
    """The journey of `e`'s tokens through its deployment."""
    c, x, engine = e.ceiling, e.expected, e.deployment.engine
    per_row, gpus = engine.kernels_per_row, e.layout.stage_gpus if engine.one_host_thread else 1
    decode = _rows(c.decode_step, x.decode_step, per_row, 0, gpus) if c.decode_step and x.decode_step else None
    prefill = _rows(c.prefill, x.prefill, per_row, e.workload.cached_prefix_tokens, gpus)
    return Journey(decode, prefill, c.decode_step.seconds if c.decode_step else None, c.prefill.seconds)
