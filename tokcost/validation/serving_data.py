"""Published serving measurements under load (serving.yaml) and across nodes (multinode.yaml), as frozen rows.

serving.yaml pins each server and workload once (`setups`) and lists load points (`rows`) that point at a setup,
so the points of one setup form a latency-vs-load curve for `tokcost plan`. multinode.yaml keeps the row keys of
published.yaml plus the parallel layout (tp, pp, ep, dp, instances, nodes, network, prefill/decode split).
Both files say in their header what every key and metric means; nothing in `value` is derived.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from tokcost.errors import SpecError
from tokcost.files import load_mapping
from tokcost.formats import FormatName, KvFormatName
from tokcost.validation.cells import Engine, engine_problem
from tokcost.validation.data import parse_items

PrefillDecode = Literal["aggregated", "disaggregated"]
LengthDist = Literal["fixed", "uniform", "normal", "dataset"]
Arrival = Literal["poisson", "closed_loop", "all_at_once"]
ServingMetric = Literal[
    "ttft_ms", "tpot_ms", "itl_ms", "e2e_ms",
    "output_throughput_tokens_per_s", "total_throughput_tokens_per_s", "request_throughput_rps",
]  # fmt: skip
Statistic = Literal["mean", "p1", "p10", "p25", "p50", "p75", "p90", "p95", "p99", "aggregate", "unstated"]
MultinodeMetric = Literal[
    "input_tokens_per_s_per_node", "output_tokens_per_s_per_node",
    "input_tokens_per_s_per_gpu", "output_tokens_per_s_per_gpu",
    "output_tokens_per_s", "request_throughput_rps", "tokens_per_s_per_user", "ttft_ms", "itl_ms",
]  # fmt: skip
# The software as the source names it (`engine` says which profile predicts it: cells.FRAMEWORK_PROFILES).
Framework = Literal[
    "gpt-fast", "torchao", "tensorrt-llm", "nim", "vllm", "sglang", "llama.cpp", "mlc-llm", "lmdeploy", "tgi",
    "other",
]  # fmt: skip
# Latencies carry a per-request statistic; throughputs are one aggregate over the run.
THROUGHPUT_METRICS: frozenset[str] = frozenset(
    {"output_throughput_tokens_per_s", "total_throughput_tokens_per_s", "request_throughput_rps"}
)
# Percentiles in rising order: within one load point of one metric, the values must not fall along this order.
PERCENTILE_ORDER: tuple[str, ...] = ("p1", "p10", "p25", "p50", "p75", "p90", "p95", "p99")

_ID = r"^[a-z0-9][a-z0-9.\-]*$"


class _Layout(BaseModel):
    """Parallel layout shared by both files: one engine instance is tp x pp x dp GPUs, ep inside it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    gpus: int = Field(ge=1, le=100_000)
    tp: int = Field(ge=1, le=1024)
    pp: int = Field(default=1, ge=1, le=1024)
    ep: int = Field(default=1, ge=1, le=100_000)
    dp: int = Field(default=1, ge=1, le=100_000)
    redundant_experts: int = Field(default=0, ge=0, le=4096)  # expert copies over the EP ranks (EPLB), as stated
    instances: int = Field(default=1, ge=1, le=100_000)
    nodes: int = Field(ge=1, le=100_000)
    prefill_decode: PrefillDecode

    @property
    def gpus_per_instance(self) -> int:
        """GPUs of one engine instance: tensor x pipeline x data-parallel-attention ranks."""
        return self.tp * self.pp * self.dp

    @model_validator(mode="after")
    def _layout_adds_up(self) -> _Layout:
        if self.gpus_per_instance * self.instances != self.gpus:
            raise ValueError(
                f"gpus {self.gpus} != tp x pp x dp x instances = {self.tp} x {self.pp} x {self.dp} x {self.instances}"
            )
        if self.gpus_per_instance % self.ep:
            raise ValueError(f"ep {self.ep} must divide tp x pp x dp = {self.gpus_per_instance} (one instance)")
        if self.nodes > self.gpus:
            raise ValueError(f"nodes {self.nodes} exceed gpus {self.gpus}")
        return self


class ServingSetup(_Layout):
    """One server and workload shape, pinned: model, GPUs, layout, formats, engine and version, length laws."""

    id: str = Field(min_length=1, max_length=200, pattern=_ID)
    source_id: str = Field(min_length=1, max_length=200, pattern=_ID)
    source: str = Field(min_length=1, max_length=2000)
    model: str = Field(min_length=1, max_length=200)
    gpu: str = Field(min_length=1, max_length=200)
    prefill_instances: int | None = Field(default=None, ge=1, le=100_000)
    decode_instances: int | None = Field(default=None, ge=1, le=100_000)
    weights: FormatName
    # a MoE checkpoint run as shipped with its routed experts in their own format (gpt-oss: MXFP4 experts, bf16
    # attention -> weights bf16, experts fp4), as in published.yaml; null when every weight is in `weights`
    experts: FormatName | None = None
    kv: KvFormatName
    engine: Engine
    framework: Framework
    engine_version: str = Field(min_length=1, max_length=200)
    engine_flags: str = Field(default="", max_length=2000)
    # CUDA/HIP graphs: true (captured), false (eager, --enforce-eager), null (unstated: notes give the default)
    graphs: bool | None = Field(strict=True)
    prompt_dist: LengthDist
    output_dist: LengthDist
    prompt_tokens_range: tuple[int, int] | None = None
    output_tokens_range: tuple[int, int] | None = None
    dataset: str | None = Field(default=None, min_length=1, max_length=500)
    length_means: Literal["stated", "derived", "nominal"]
    measured_at: Literal["client", "server"]
    notes: str = Field(default="", max_length=10_000)

    @model_validator(mode="after")
    def _engine_split_and_lengths(self) -> ServingSetup:
        problem = engine_problem(self.framework, self.engine)
        if problem:
            raise ValueError(problem)
        if self.experts is not None and self.experts == self.weights:
            raise ValueError(f"experts {self.experts} equals weights: drop experts (it names a second format)")
        split = (self.prefill_instances, self.decode_instances)
        if self.prefill_decode == "aggregated" and split != (None, None):
            raise ValueError("prefill_instances/decode_instances apply only to prefill_decode: disaggregated")
        if self.prefill_decode == "disaggregated" and (None in split or sum(split) != self.instances):  # type: ignore[arg-type]
            raise ValueError(f"prefill_instances + decode_instances must equal instances ({self.instances})")
        for side, dist, span in (("prompt", self.prompt_dist, self.prompt_tokens_range),
                                 ("output", self.output_dist, self.output_tokens_range)):  # fmt: skip
            if (dist == "uniform") != (span is not None):
                raise ValueError(f"{side}_tokens_range is required for a uniform {side}_dist and only then")
            if span is not None and not 1 <= span[0] <= span[1]:
                raise ValueError(f"{side}_tokens_range must be [min, max] with 1 <= min <= max (got {list(span)})")
            if dist == "dataset" and self.dataset is None:
                raise ValueError(f"{side}_dist: dataset needs the dataset key")
        return self


class ServingRow(BaseModel):
    """One load point of a setup: the load, one metric with its statistic, and the value as printed."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str = Field(min_length=1, max_length=200, pattern=_ID)
    setup: str = Field(min_length=1, max_length=200)
    quote: str = Field(min_length=1, max_length=2000)
    arrival: Arrival
    request_rate_rps: float | None = Field(default=None, gt=0, allow_inf_nan=False)
    concurrency: int | None = Field(default=None, ge=1, le=10_000_000)
    num_requests: int | None = Field(default=None, ge=1, le=100_000_000)
    # closed loop: seconds a client waits between receiving an answer and sending its next request
    think_time_s: float = Field(default=0.0, ge=0, le=86_400, allow_inf_nan=False)
    prompt_tokens_mean: float = Field(gt=0, le=10_000_000, allow_inf_nan=False)
    output_tokens_mean: float = Field(gt=0, le=10_000_000, allow_inf_nan=False)
    metric: ServingMetric
    statistic: Statistic
    value: float = Field(gt=0, allow_inf_nan=False)
    notes: str = Field(default="", max_length=10_000)

    @model_validator(mode="after")
    def _load_and_statistic(self) -> ServingRow:
        if self.arrival == "poisson" and self.request_rate_rps is None:
            raise ValueError("arrival poisson needs request_rate_rps")
        if self.arrival == "closed_loop" and (self.concurrency is None or self.request_rate_rps is not None):
            raise ValueError("arrival closed_loop needs concurrency and no request_rate_rps")
        if self.think_time_s and self.arrival != "closed_loop":
            raise ValueError("think_time_s applies to arrival closed_loop only")
        if self.arrival == "all_at_once" and self.request_rate_rps is not None:
            raise ValueError("arrival all_at_once has no request_rate_rps (every request is sent at t=0)")
        if (self.metric in THROUGHPUT_METRICS) != (self.statistic == "aggregate"):
            raise ValueError(f"statistic aggregate goes with the throughput metrics only (metric {self.metric})")
        return self

    @property
    def load(self) -> tuple[str, float | None, int | None]:
        """The load point: (arrival, rate, concurrency); rows of one setup with equal load form one point."""
        return (self.arrival, self.request_rate_rps, self.concurrency)


class MultinodeRow(_Layout):
    """published.yaml's row keys plus the layout: a multi-GPU/multi-node measurement with its parallelism stated."""

    id: str = Field(min_length=1, max_length=200, pattern=_ID)
    source_id: str = Field(min_length=1, max_length=200, pattern=_ID)
    source: str = Field(min_length=1, max_length=2000)
    quote: str = Field(min_length=1, max_length=2000)
    model: str = Field(min_length=1, max_length=200)
    gpu: str = Field(min_length=1, max_length=200)
    gpus_per_node: int = Field(ge=1, le=1024)
    network: str = Field(min_length=1, max_length=500)
    weights: FormatName
    kv: KvFormatName
    compute: str = Field(min_length=1, max_length=16)
    batch: int | None = Field(default=None, ge=1, le=100_000_000)
    # what `batch` counts: the whole unit's sequences (a client's concurrency), or one GPU's (one DP rank's)
    batch_scope: Literal["system", "gpu"] = "system"
    prompt_tokens: int | None = Field(default=None, ge=1, le=100_000_000)
    output_tokens: int | None = Field(default=None, ge=1, le=100_000_000)
    # a disaggregated unit of several instances: how many prefill and how many decode (sum = instances)
    prefill_instances: int | None = Field(default=None, ge=1, le=100_000)
    decode_instances: int | None = Field(default=None, ge=1, le=100_000)
    framework: Framework
    engine: Engine
    metric: MultinodeMetric
    value: float = Field(gt=0, allow_inf_nan=False)
    notes: str = Field(default="", max_length=10_000)
    exclude: str | None = Field(default=None, min_length=1, max_length=2000)
    split: Literal["train", "test"] | None = None

    @model_validator(mode="after")
    def _engine_and_nodes(self) -> MultinodeRow:
        problem = engine_problem(self.framework, self.engine)
        if problem:
            raise ValueError(problem)
        if self.nodes * self.gpus_per_node != self.gpus:
            raise ValueError(f"nodes x gpus_per_node = {self.nodes} x {self.gpus_per_node} != gpus {self.gpus}")
        split = (self.prefill_instances, self.decode_instances)
        if split != (None, None) and (None in split or sum(split) != self.instances):  # type: ignore[arg-type]
            raise ValueError(f"prefill_instances + decode_instances must equal instances ({self.instances})")
        return self


def _only_keys(data: dict[str, object], allowed: tuple[str, ...], where: str) -> None:
    extra = sorted(set(data) - set(allowed))
    if extra:
        raise SpecError(where, f"unknown top-level key {extra[0]!r}; the file holds: {', '.join(allowed)}")


def parse_serving(data: dict[str, object], where: str) -> tuple[dict[str, ServingSetup], list[ServingRow]]:
    """Setups by id and rows, validated; every row names an existing setup."""
    _only_keys(data, ("setups", "rows"), where)
    setups = {s.id: s for s in parse_items(data, "setups", where, ServingSetup)}
    rows = parse_items(data, "rows", where, ServingRow)
    for i, row in enumerate(rows):
        if row.setup not in setups:
            raise SpecError(f"{where}: rows[{i}] ({row.id})", f"unknown setup {row.setup!r}", field="setup")
    return setups, rows


def load_serving(path: Path) -> tuple[dict[str, ServingSetup], list[ServingRow]]:
    """The setups and load points of a serving-measurements YAML file."""
    return parse_serving(load_mapping(path), str(path))


def load_multinode(path: Path) -> list[MultinodeRow]:
    """The rows of a multi-node measurements YAML file (not yet used by `tokcost validate`)."""
    data = load_mapping(path)
    _only_keys(data, ("rows",), str(path))
    return parse_items(data, "rows", str(path), MultinodeRow)
