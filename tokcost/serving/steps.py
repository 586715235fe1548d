"""The step times one replica runs, priced by the engine: a decode batch of b plus a prefill part, one pass.

`Steps` binds a model, a GPU, a layout, a precision and a scenario ("ceiling" or "expected") to the engine's
compiled pass for that deployment (engine/compiled.py: its kernels counted once, priced per pass). The closed
form asks for the same few pass shapes (decode only; a full packed prefill chunk; a lone prompt's chunks) at
many decode batches b, so each shape becomes a Curve in b built once from a few engine calls (see curve.py);
the simulation asks for arbitrary passes and prices each on the compiled pass.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tokcost.engine.compiled import BoundPass
from tokcost.engine.decode import DecodeLines
from tokcost.engine.estimate import deployment as engine_deployment
from tokcost.engine.passcost import PassCost
from tokcost.engine.step import Scenario, Segment, kv_capacity
from tokcost.engine.workload import Precision, Workload, resolve_precision
from tokcost.hardware.spec import GpuSpec, Link
from tokcost.models.spec import ModelSpec
from tokcost.profiles import GENERIC, EngineProfile
from tokcost.serving.curve import Curve, build_curve
from tokcost.serving.layout import Layout

Shape = tuple[Segment, ...]  # the prefill part of a pass (empty: decode only)
DECODE_LINES_KEPT = 4096  # decode batches whose lines a simulation keeps
CAP_STEP = 1e-6  # the width of the jump where passes leave the CUDA graphs, relative to the curve's range


@dataclass(frozen=True, slots=True)
class Deployment:
    """One point of the search space: a GPU type, a layout and the storage/compute formats."""

    gpu: GpuSpec
    layout: Layout
    weights: str | None = None
    kv_dtype: str | None = None
    compute_dtype: str | None = None
    network: Link | None = None  # between nodes, for layouts that span them
    engine: EngineProfile = GENERIC  # the serving engine whose profile shapes "expected"
    flash_attention: bool = True  # fused attention; False: the scores go through memory

    def __post_init__(self) -> None:
        # the era this layout runs as (a llama.cpp row split runs eager), as the engine's deployment() resolves it,
        # so that the band, the warnings and the host costs name the profile that priced it
        stage = self.layout.engine(self.gpu.gpus_per_node).stage_gpus
        object.__setattr__(self, "engine", self.engine.for_layout(stage))

    def workload(self, batch: int = 1, prompt: int = 1024, output: int = 256, cached: int = 0) -> Workload:
        """The engine's Workload for this deployment: its layout, precision and lengths."""
        lay = self.layout
        return Workload(
            batch=batch, prompt_tokens=prompt, output_tokens=output, tp=lay.tp, pp=lay.pp, ep=lay.ep, dp=lay.dp,
            redundant_experts=lay.redundant_experts,
            weights_dtype=self.weights, kv_dtype=self.kv_dtype, compute_dtype=self.compute_dtype,
            cached_prefix_tokens=cached, flash_attention=self.flash_attention,
        )  # fmt: skip

    def precision(self, model: ModelSpec) -> Precision:
        """Resolved formats (unset ones from the model), as the engine resolves them."""
        return resolve_precision(model, self.workload(), self.gpu)


@dataclass(slots=True)
class Steps:
    """Step times of one deployment under one scenario, with decode sequences at `decode_context` tokens."""

    model: ModelSpec
    deployment: Deployment
    scenario: Scenario
    decode_context: float
    batch_limit: float  # curves cover decode batches 0 .. batch_limit
    _workload: Workload = field(init=False)
    _curves: dict[Shape, Curve] = field(init=False, default_factory=dict)
    _bound: BoundPass | None = field(init=False, default=None)
    _decode: dict[int, DecodeLines] = field(init=False, default_factory=dict)

    def __post_init__(self) -> None:
        self._workload = self.deployment.workload()

    @property
    def engine(self) -> BoundPass:
        """The deployment's compiled pass under this scenario (built on first use)."""
        if self._bound is None:
            d = self.deployment
            found = engine_deployment(self.model, d.gpu, self._workload, d.network, d.engine)
            self._bound = found.bound(found.rates(self.scenario))
        return self._bound

    @property
    def request_overhead_s(self) -> float:
        """Per-request latency the scenario adds to TTFT (expected: the server's fixed cost; ceiling: 0)."""
        return self.engine.rates.request_overhead_s

    def cost(self, segments: list[Segment]) -> PassCost:
        """One pass with every kernel priced (bounds and the breakdown), straight from the engine."""
        return self.engine.cost(segments, schedule="steady")

    def seconds(self, segments: list[Segment]) -> float:
        """One pass's time (a steady pipeline), straight from the engine."""
        return self.engine.seconds(segments)

    def decode_line(self, batch: int, context: float) -> tuple[float, float, float]:
        """A decode-only step of `batch` sequences at mean `context` as a line in the context: (seconds, seconds
        per token of context, the context up to which the line holds exactly)."""
        return self._lines(batch).line(context)

    def decode_mean(self, batch: int, first: int, last: int) -> float:
        """The mean decode-only step of `batch` sequences over cached contexts first..last, every step exactly (a
        sliding window that fills bends the line)."""
        return self._lines(batch).mean(first, last)

    def _lines(self, batch: int) -> DecodeLines:
        lines = self._decode.get(batch)
        if lines is None:
            if len(self._decode) >= DECODE_LINES_KEPT:
                self._decode.clear()
            lines = self._decode[batch] = DecodeLines(self.engine, batch)
        return lines

    def pass_cost(self, batch: float, shape: Shape) -> PassCost:
        """A pass of `batch` decode tokens at the decode context plus the prefill `shape`."""
        decode = [Segment(batch, self.decode_context, 1)] if batch > 0 else []
        return self.cost(decode + list(shape))

    def curve(self, shape: Shape) -> Curve:
        """Seconds of pass_cost(b, shape) as a function of b, built on first use."""
        found = self._curves.get(shape)
        if found is None:
            tokens = sum(s.tokens for s in shape)
            breaks = () if self.model.tied_embeddings else (self.model.vocab_size - tokens,)
            pp = self.deployment.layout.pp
            # a decode step past the batch the era's CUDA graphs capture runs eager (Rates.launch_s): the step jumps
            # there, so the curve holds the last captured batch and the next (exact for one replica without DP or
            # pipeline stages; with them the midpoints find it); a pass with prompt tokens is not priced so
            cap = self.engine.rates.graph_cap_tokens
            if not shape and self.engine.rates.eager_launch_overhead_s and 0.0 < cap < self.batch_limit:
                breaks += (cap, cap + CAP_STEP * max(self.batch_limit, 1.0))
            found = build_curve(
                lambda b: self.pass_cost(b, shape), 0.0, self.batch_limit,
                # MoE expert counts, the DP split (whole sequences) and the slowest pipeline stage bend the line
                linear=self.model.moe is None and pp == 1 and self.deployment.layout.dp == 1,
                # below pp sequences each whole batch is its own microbatch count (compiled.microbatches): the
                # step at a mean batch between two is their mixture, the chord
                breaks=breaks + tuple(float(k) for k in range(1, pp + 1) if pp > 1), chords_below=pp if pp > 1 else 0.0,
            )  # fmt: skip
            self._curves[shape] = found
        return found


def replica_kv_tokens(model: ModelSpec, deployment: Deployment, batch: float, prompt: int, output: int) -> float:
    """Tokens of KV one replica holds beside weights, workspace (for `batch` sequences) and reserve."""
    wl = deployment.workload(batch=max(1, min(round(batch), 1_000_000)), prompt=prompt, output=output)
    return kv_capacity(model, deployment.gpu, wl, deployment.network, deployment.engine)
