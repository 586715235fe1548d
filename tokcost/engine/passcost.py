"""A pass priced: each stage with its time, the stages grouped for the breakdown, the pipeline's schedule.

What --explain, --journey, the breakdown tables and plan's curves read. Times come from the roofline
(roofline.priced: one kernel on its rates); this module only assembles them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from tokcost.engine.collectives import CollectiveCost
from tokcost.engine.stages import Stage

Bound = Literal["compute", "memory", "interconnect", "host"]  # host: an eager era's kernel launches outlast the GPU
Schedule = Literal["steady", "fill"]


def overlapped_sides(compute_s: float, memory_s: float, unhidden: float, floor_s: float = 0.0) -> tuple[float, float]:
    """A kernel's two roofline sides as priced: each plus the share `unhidden` of the other that it does not hide,
    so that the larger is max(c, m) + u x min(c, m) = max(c + u x m, m + u x c) (u = 0: the ceiling's perfect
    overlap), plus the kernel's fixed time `floor_s` on both. Both stay linear in the work, and the larger is the
    same side as before."""
    if unhidden:
        compute_s, memory_s = compute_s + unhidden * memory_s, memory_s + unhidden * compute_s
    return compute_s + floor_s, memory_s + floor_s


@dataclass(frozen=True, slots=True)
class Priced:
    """A stage with its time under one scenario: compute and memory time, or its collective."""

    stage: Stage
    compute_s: float  # all occurrences, each side on its own
    memory_s: float
    collective: CollectiveCost | None
    unhidden: float = 0.0  # the share of the shorter side the longer does not hide (overlapped_sides)
    floor_s: float = 0.0  # all occurrences' fixed time, whatever their work (an attention kernel's)

    @property
    def seconds(self) -> float:
        """Time of all occurrences: the slower of compute and memory plus the unhidden share of the other and the
        kernel's fixed time, or the collective."""
        if self.collective is not None:
            return self.stage.count * self.collective.seconds
        return max(overlapped_sides(self.compute_s, self.memory_s, self.unhidden, self.floor_s))

    @property
    def bound(self) -> Bound:
        """What limits this stage."""
        if self.collective is not None:
            return "interconnect"
        return "compute" if self.compute_s > self.memory_s else "memory"


@dataclass(frozen=True, slots=True)
class Component:
    """A group of stages shown together: weights (matmuls), attention (KV), state, communication, other."""

    name: str
    flops: float
    bytes: float
    seconds: float
    bound: Bound


GROUPS = {"matmul": "weights", "experts": "weights", "attention": "attention", "attention_mla": "attention",
          "state": "state", "collective": "communication"}  # fmt: skip
COMPONENTS = ("weights", "attention", "state", "communication", "other")


def group_of(stage: Stage) -> str:
    """The component a stage belongs to (KV writes count with attention, a state layer's convolution and scan as
    state, lookups and norms as other)."""
    if stage.name == "KV cache write":
        return "attention"
    return GROUPS.get(stage.kind, "other")


def stage_seconds(kernels_s: float, serial_s: float, overlapped_s: float, overlap: float, launch_s: float) -> float:
    """One microbatch through one pipeline stage: its serial collectives, plus its kernels and its overlapped
    collectives with `overlap` of the shorter of the two hidden behind the longer (the ceiling hides all of it:
    max(kernels, collectives)); never shorter than the host takes to launch its kernels (eager eras)."""
    hidden = overlap * min(kernels_s, overlapped_s)
    return max(serial_s + kernels_s + overlapped_s - hidden, launch_s)


def visible_bound(time: dict[Bound, float], kernels_s: float, overlapped_s: float, overlap: float) -> Bound:
    """What holds most of a stage's time once `overlap` of the shorter of its kernels and its overlapped collectives
    hides behind the longer (stage_seconds): `time` is each class's full seconds, collectives under interconnect."""
    shown = dict(time)
    if overlapped_s > kernels_s:  # the kernels hide behind the collectives: their classes shrink alike
        for k in ("memory", "compute"):
            shown[k] *= 1.0 - overlap
    else:  # the collectives, down to what still shows (the ceiling's perfect overlap: only the serial ones)
        shown["interconnect"] -= overlap * overlapped_s
    return max(shown, key=lambda k: shown[k])


def pipeline_pass(stage_times_s: Sequence[float], microbatches: int, schedule: Schedule) -> tuple[float, int]:
    """(seconds, turns the pipeline adds to the slowest stage's one) of a pass through the pipeline stages, m
    microbatches (series.pipeline_sum): from an empty pipeline every stage once plus m - 1 of the slowest; steady
    decode max(every stage once, m x the slowest), whichever leads giving its turns."""
    slowest, every, m = max(stage_times_s), sum(stage_times_s), microbatches
    others = len(stage_times_s) - 1
    if schedule == "fill":
        return every + (m - 1) * slowest, others + m - 1
    return (every, others) if every >= m * slowest else (m * slowest, m - 1)


def pipeline_seconds(stage_times_s: Sequence[float], microbatches: int, schedule: Schedule) -> float:
    """A pass through the pipeline stages, m microbatches (pipeline_pass)."""
    return pipeline_pass(stage_times_s, microbatches, schedule)[0]


@dataclass(frozen=True, slots=True)
class PassCost:
    """A pass as its kernels on the slowest pipeline stage, the pipeline schedule, and a fixed overhead."""

    stages: tuple[Priced, ...]  # the slowest pipeline stage's kernels, one microbatch
    overhead_s: float
    pp: int = 1
    microbatches: int = 1
    schedule: Schedule = "steady"
    overlap: float = 0.0  # share of the overlapped collectives' time hidden behind the kernels
    overlap_ops: frozenset[str] = frozenset()  # which collectives overlap (the ceiling: every one)
    launch_s: float = 0.0  # the host's time to launch the stage's kernels (eager eras; 0 with CUDA graphs)
    gap_s: float = 0.0  # the GPU's idle time between the stage's kernels (their count x the engine's gap)
    stage_times_s: tuple[float, ...] = ()  # every pipeline stage's time, one microbatch (empty: pp balanced stages)

    @property
    def slowest_stage(self) -> int:
        """Index of the pipeline stage whose kernels `stages` are: the slowest (the first of equals; 0 unstaged)."""
        times = self.stage_times_s
        return times.index(max(times)) if times else 0

    @property
    def parts_seconds(self) -> tuple[float, float, float]:
        """(kernels, serial collectives, overlapped collectives) of one microbatch on the slowest stage."""
        kernels, serial, overlapped = self.gap_s, 0.0, 0.0
        for s in self.stages:
            if s.collective is None:
                kernels += s.seconds
            elif s.collective.op in self.overlap_ops:
                overlapped += s.seconds
            else:
                serial += s.seconds
        return kernels, serial, overlapped

    @property
    def stage_seconds(self) -> float:
        """One microbatch through the slowest pipeline stage (overlap and the host's launches applied)."""
        return stage_seconds(*self.parts_seconds, self.overlap, self.launch_s)

    @property
    def hidden_s(self) -> float:
        """Collective time hidden behind kernels (the ceiling's perfect overlap, an engine's two-batch overlap)."""
        kernels, _, overlapped = self.parts_seconds
        return self.overlap * min(kernels, overlapped)

    @property
    def hidden_pass_s(self) -> float:
        """Collective time the whole pass hides (every stage-time of its pipeline schedule)."""
        return self.hidden_s * self.pipeline_factor

    @property
    def gpu_s(self) -> float:
        """One microbatch through the slowest stage on the GPU alone: its kernels, gaps and collectives less the
        hidden share (stage_seconds without the host's launch floor)."""
        return sum(self.parts_seconds) - self.hidden_s

    @property
    def rows(self) -> tuple[int, int]:
        """(kernel rows, collective rows) of the slowest stage: what Rates.launched counts kernels from."""
        kernels = sum(p.stage.count for p in self.stages if p.collective is None)
        return kernels, sum(p.stage.count for p in self.stages) - kernels

    @property
    def launch_bound(self) -> bool:
        """The host's kernel launches, not the GPU, set the stage's time (an eager era on a small model)."""
        return self.launch_s > self.gpu_s

    @property
    def every_stage_s(self) -> tuple[float, ...]:
        """Each pipeline stage's time for one microbatch (the slowest as stage_seconds sums it, to the last bit)."""
        if self.pp == 1 or not self.stage_times_s:
            return (self.stage_seconds,) * self.pp
        times = list(self.stage_times_s)
        times[times.index(max(times))] = self.stage_seconds
        return tuple(times)

    @property
    def pipeline_s(self) -> float:
        """The pass through every stage under its schedule (pipeline_pass), no overhead."""
        return pipeline_pass(self.every_stage_s, self.microbatches, self.schedule)[0]

    @property
    def extra_turns(self) -> int:
        """Stage-times the pipeline adds to the slowest stage's one: every other stage (and, from an empty pipeline,
        m - 1 more of the slowest), or m - 1 of the slowest where the slowest serving each microbatch leads."""
        return pipeline_pass(self.every_stage_s, self.microbatches, self.schedule)[1]

    @property
    def pipeline_factor(self) -> float:
        """The pass in slowest-stage times (the breakdown of the slowest stage scales by it to the pass)."""
        return self.pipeline_s / self.stage_seconds if self.stage_seconds else 1.0

    @property
    def seconds(self) -> float:
        """Total time of the pass, overhead included."""
        return self.pipeline_s + self.overhead_s

    @property
    def flops(self) -> float:
        """FLOPs of one microbatch on the slowest stage's busiest GPU."""
        return sum(s.stage.count * s.stage.flops for s in self.stages)

    @property
    def bytes(self) -> float:
        """HBM bytes of one microbatch on the slowest stage's busiest GPU."""
        return sum(s.stage.count * s.stage.bytes for s in self.stages if s.collective is None)

    @property
    def components(self) -> tuple[Component, ...]:
        """Stages grouped for the breakdown: weights, attention (KV), state, communication, other."""
        out = []
        for name in COMPONENTS:
            members = [s for s in self.stages if group_of(s.stage) == name]
            if not members:
                continue
            seconds = sum(s.seconds for s in members) * self.pipeline_factor
            top = max(members, key=lambda s: s.seconds)
            out.append(
                Component(
                    name,
                    sum(s.stage.count * s.stage.flops for s in members),
                    sum(s.stage.count * (s.collective.link_bytes if s.collective else s.stage.bytes) for s in members),
                    seconds,
                    top.bound,
                )
            )
        return tuple(out)

    def part(self, name: str) -> Component:
        """The component called `name` (zero when the pass has none)."""
        return next((c for c in self.components if c.name == name), Component(name, 0.0, 0.0, 0.0, "memory"))

    @property
    def bound(self) -> Bound:
        """What holds most of the pass's time: compute-bound kernels, memory-bound kernels, or collectives; the host
        where an eager era's kernel launches outlast them all (stage_seconds' floor)."""
        if self.launch_bound:
            return "host"
        time: dict[Bound, float] = {"memory": 0.0, "compute": 0.0, "interconnect": 0.0}
        for s in self.stages:
            time[s.bound] += s.seconds
        kernels, _, overlapped = self.parts_seconds
        return visible_bound(time, kernels, overlapped, self.overlap)
