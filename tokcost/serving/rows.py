"""What a plan is made of: the space it searches, the scheduler each row runs with, its rows and how they read.

A Row is one configuration (GPU, layout, formats, chunk) with its fleet under "expected" and "ceiling"; a Plan holds
the ranked rows, the load table and the warnings. The scheduler of a row is the engine profile's on its GPU (the
prefill chunk budget, the cap on running sequences, multi-step scheduling), overridden by --chunk and --max-running;
a list of chunks (or an engine that states none) is searched.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from tokcost.engine.workload import Precision
from tokcost.hardware.spec import GpuSpec, Link
from tokcost.models.spec import ModelSpec
from tokcost.profiles import GENERIC, EngineProfile
from tokcost.serving.fleet import Fleet
from tokcost.serving.layout import Layout
from tokcost.serving.replica import Replica
from tokcost.serving.steps import Deployment
from tokcost.serving.traffic import Slo, Traffic

# prefill token budgets `--chunk search` tries (vLLM: 512-8192), and the engine's own default where it has one
DEFAULT_CHUNKS = (256, 512, 1024, 2048, 4096, 8192)
Mode = Literal["aggregated", "disaggregated", "both"]


@dataclass(frozen=True)
class Space:
    """What the plan may choose from, and the fleet-level knobs."""

    gpus: tuple[GpuSpec, ...]
    tps: tuple[int, ...] | None = None  # None: every valid degree from the smallest that fits up to 8
    pps: tuple[int, ...] | None = None  # None: 1, and 2..4 stages of a full node when no single node holds it
    eps: tuple[int, ...] | None = None  # None: 1, and for MoE models every expert-parallel degree = the stage's GPUs
    dps: tuple[int, ...] = (1,)  # data-parallel attention replicas (MoE)
    redundant_experts: int = 0  # expert copies on every layout with EP > 1 (EPLB); none at EP 1
    engine: EngineProfile = GENERIC  # the serving engine whose profile shapes "expected"
    weights: tuple[str | None, ...] = (None,)
    kv_dtypes: tuple[str | None, ...] = (None,)
    compute_dtypes: tuple[str | None, ...] = (None,)
    chunks: tuple[int, ...] | None = None  # None: the engine's budget on each GPU (searched if it states none)
    max_running: int | None = None  # None: the engine's cap on each GPU (the KV cache alone if it states none)
    prefill_apart: bool | None = None  # None: as the engine schedules prefill (apart or beside the decodes)
    mode: Mode = "aggregated"
    max_gpus: int | None = None
    headroom: float = 0.2
    prices: Mapping[str, float] = field(default_factory=dict)
    networks: Mapping[str, Link] = field(default_factory=dict)  # GPU name -> its network between nodes
    flash_attention: bool = True  # fused attention; False: scores through memory (llama-bench's -fa 0)


@dataclass(frozen=True, slots=True)
class Choice:
    """The scheduler a row runs with, and where each setting comes from."""

    chunks: tuple[int, ...]  # the budgets tried (one: the engine's, or the one given)
    chunk_source: str  # "engine default", "--chunk", "searched"
    max_running: int | None
    max_running_source: str  # "engine default", "--max-running", "none (KV cache)"
    scheduler_steps: int = 1
    overlap: bool = False  # the engine's overlap scheduler: a late arrival waits one more step
    prefill_apart: bool = False  # the engine runs prefill in steps of its own: decodes wait them out
    prefill_source: str = "engine default"  # "<engine> default" or "--prefill"


def scheduler_choice(space: Space, gpu: GpuSpec) -> Choice:
    """The engine's scheduler on `gpu`, overridden by --chunk and --max-running."""
    sched = space.engine.scheduler(gpu_name=gpu.name, memory_bytes=gpu.memory_bytes)
    if space.chunks == DEFAULT_CHUNKS and sched.chunk_tokens is not None:  # --chunk search: the engine's own too
        chunks, source = tuple(sorted({*space.chunks, sched.chunk_tokens})), "searched"
    elif space.chunks is not None:
        chunks, source = space.chunks, "--chunk" if len(space.chunks) == 1 else "searched"
    elif sched.chunk_tokens is not None:
        chunks, source = (sched.chunk_tokens,), f"{space.engine.name} default"
    else:
        chunks, source = DEFAULT_CHUNKS, "searched"
    if space.max_running is not None:
        cap, cap_source = space.max_running, "--max-running"
    elif sched.max_running_sequences is not None:
        cap, cap_source = sched.max_running_sequences, f"{space.engine.name} default"
    else:
        cap, cap_source = None, "none (KV cache)"
    if space.prefill_apart is not None:
        apart, apart_source = space.prefill_apart, "--prefill"
    else:
        apart, apart_source = sched.prefill_apart, f"{space.engine.name} default"
    return Choice(chunks, source, cap, cap_source, sched.scheduler_steps, sched.overlap, apart, apart_source)


@dataclass
class Row:
    """One configuration: what it is, and its fleet under expected and ceiling."""

    mode: str
    deployment: Deployment
    prefill_layout: Layout | None
    chunk: int | None
    expected: Fleet
    ceiling: Fleet
    replica: Replica | None = None  # expected, at the chosen chunk (aggregated; the decode pool)
    prefill_replica: Replica | None = None
    pareto: bool = False
    simulated: dict[str, dict[str, float | None] | None] | None = None
    choice: Choice | None = None
    invalid: bool = False  # a configuration no engine runs (a layout or dtype refused), not one that fails its load

    @property
    def price(self) -> float | None:
        """$/GPU-hour used (None without a price)."""
        x = self.expected
        return x.usd_per_hour / x.gpus if x.usd_per_hour is not None and x.gpus else None


@dataclass
class Plan:
    """The ranked configurations, the load table and what the reader should know."""

    model: ModelSpec
    traffic: Traffic
    slos: list[Slo]
    space: Space
    rows: list[Row]
    load: list[dict[str, object]]
    warnings: list[str]


def _where(row: Row) -> str:
    """'h100-sxm TP4' (disaggregated: 'h100-sxm P:TP2+D:TP4')."""
    d = row.deployment
    layout = d.layout.label if row.prefill_layout is None else f"P:{row.prefill_layout.label}+D:{d.layout.label}"
    return f"{d.gpu.name} {layout}"


def _resolved(row: Row) -> Precision | None:
    """The formats as the engine resolved them for a sized row; None before sizing."""
    return None if row.replica is None else row.replica.steps.deployment.precision(row.replica.steps.model)


def short_label(row: Row) -> str:
    """'h100-sxm TP4 fp8': GPU, layout and weights (the plot's and the narrow table's name for a row)."""
    return f"{_where(row)} {weights_label(row)}"


def experts_format(row: Row) -> str | None:
    """The routed experts' format where it differs from the other weights' (gpt-oss: MXFP4 experts beside bf16
    attention), as the engine resolved it; None otherwise or before sizing."""
    p = _resolved(row)
    return p.experts if p is not None and p.experts != p.weights else None


def weights_label(row: Row) -> str:
    """'bf16', or 'bf16+fp4 experts' where the experts are stored apart: one label, one configuration."""
    weights, experts = precision_parts(row)[0] or "default", experts_format(row)
    return f"{weights}+{experts} experts" if experts else weights


def row_label(row: Row) -> str:
    """'h100-sxm TP4 fp8/bf16' (disaggregated: 'h100-sxm P:TP2+D:TP4 ...')."""
    return f"{_where(row)} {precision_label(row)}"


def precision_parts(row: Row) -> tuple[str | None, str | None, str | None]:
    """(weights, kv, compute) formats as resolved by the engine; as requested (None: default) if never sized."""
    p = _resolved(row)
    if p is None:
        d = row.deployment
        return d.weights, d.kv_dtype, d.compute_dtype
    return p.weights, p.kv, p.compute


def precision_label(row: Row) -> str:
    """weights/kv/compute, e.g. 'fp8/bf16/fp8' ('default' where unresolved)."""
    _, kv, compute = precision_parts(row)
    return "/".join([weights_label(row), kv or "default", compute or "default"])
