"""Published measurements (tokcost/validation/published.yaml) as frozen rows, and their deterministic train/test split.

Each row is one number a framework or vendor printed, with the workload it was measured on. Keys that record
our reading rather than the source's words: `source_id` (one key per independent publication, so that a fit can
hold whole sources out), `engine` (the serving-engine profile that predicts the row), `exclude` (a reason not
to use it) and `split` (train/test override).
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from tokcost.errors import SpecError
from tokcost.files import load_mapping
from tokcost.formats import FormatName, KvFormatName
from tokcost.spec_errors import validation_error
from tokcost.validation.cells import Engine, engine_problem

# Each metric is one formula over the row's workload (compare.predict_metric); the source's own definition and
# its unit decide which one a row uses, never the framework's name. `_s` metrics keep a value printed in seconds.
Metric = Literal[
    "decode_tokens_per_s_per_sequence",  # decode alone: 1 / TPOT
    "output_tokens_per_s_per_request",  # output tokens / whole-request time, prefill included (gpt-fast's tok/s)
    "tpot_ms", "itl_ms", "ttft_ms", "e2e_ms", "tpot_s", "ttft_s", "e2e_s",
    "throughput_tokens_per_s",  # output tokens/s of the whole system: B x O / e2e
    "throughput_tokens_per_s_per_gpu",  # the same divided by the GPU count (TensorRT-LLM's out tok/s/GPU)
    "total_throughput_tokens_per_s",  # prompt and output tokens/s: B x (P + O) / e2e (vLLM benchmark_throughput)
    "prefill_tokens_per_s",  # prompt tokens / prefill time: B x P / TTFT (llama-bench ppN)
    "run_s",  # an offline run's wall time: B requests submitted at once, until the last one finishes
]  # fmt: skip
DECODE_METRICS = ("decode_tokens_per_s_per_sequence", "tpot_ms", "itl_ms", "tpot_s")  # timed on decode steps alone
# The software as the source names it (`engine` says which profile predicts it: NIM runs TensorRT-LLM or vLLM).
Framework = Literal[
    "gpt-fast", "torchao", "tensorrt-llm", "nim", "vllm", "sglang", "llama.cpp", "mlc-llm", "lmdeploy", "tgi",
    "exllama", "exllamav2", "deepspeed-mii", "other",
]  # fmt: skip
Split = Literal["train", "test"]
# Where the clock ran: `server` = engine-level timing inside the process (benchmark_latency, bench_one_batch,
# trtllm-bench, llama-bench, gpt-fast generate); `client` = an HTTP / OpenAI-API benchmark client, whose times
# include tokenization, the network and scheduling (the same values as serving.yaml's setups).
MeasuredAt = Literal["server", "client"]

# Rates are better when higher; times when lower. A measurement better than the ceiling is a violation.
HIGHER_IS_BETTER: frozenset[str] = frozenset(
    {"decode_tokens_per_s_per_sequence", "output_tokens_per_s_per_request", "throughput_tokens_per_s",
     "throughput_tokens_per_s_per_gpu", "total_throughput_tokens_per_s", "prefill_tokens_per_s"}
)  # fmt: skip

# Whole sources are held out (issue 12), so that every held-out row comes from a publication the fit never saw.
# The rule, written down before any fit and before any held-out error was looked at (`held_out_by_rule`): order
# the source_ids by the SHA-256 of the id (hex, ascending); take them in that order until the held-out set holds
# at least HELD_OUT_MIN_SOURCES sources, rows of at least HELD_OUT_MIN_ENGINES engines, and at least
# HELD_OUT_MIN_ROW_SHARE of the file's rows. Applied to published.yaml as of issue 19's new static rows it picks
# HELD_OUT_SOURCES (issue 12's three sources, plus llamacpp-pr-6766 and trtllm-perf-overview-v0.17, which sort
# among them, and trtllm-pr-5066 from issue 19's second batch, which sorts before trtllm-perf-v0.9: the rule as
# written decides, so it joins; a test checks that the rule still picks them: a new source that sorts before them
# changes the split, and that is a decision to make, not a side effect).
HELD_OUT_MIN_SOURCES = 3
HELD_OUT_MIN_ENGINES = 3
HELD_OUT_MIN_ROW_SHARE = 0.25
HELD_OUT_SOURCES: frozenset[str] = frozenset(
    {"llm-tracker-lhl", "llamacpp-pr-6766", "trtllm-perf-v0.9", "trtllm-perf-overview-v0.17", "dstack-mi300x-405b-bf16",
     "trtllm-pr-5066"}
)  # fmt: skip


_Item = TypeVar("_Item", bound=BaseModel)


class Row(BaseModel):
    """One published measurement: the workload, the metric and its value exactly as printed."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)  # strict: a bool is never a count

    id: str = Field(min_length=1, max_length=200, pattern=r"^[a-z0-9][a-z0-9.\-]*$")
    source_id: str = Field(min_length=1, max_length=80, pattern=r"^[a-z0-9][a-z0-9.\-]*$")
    source: str = Field(min_length=1, max_length=2000)
    quote: str = Field(min_length=1, max_length=2000)
    model: str = Field(min_length=1, max_length=200)
    gpu: str = Field(min_length=1, max_length=200)
    gpus: int = Field(ge=1, le=4096)  # every GPU the measurement ran on: tp x pp x dp
    pp: int = Field(default=1, ge=1, le=1024)  # pipeline-parallel stages
    ep: int = Field(default=1, ge=1, le=4096)  # expert-parallel degree (MoE; spans TP or DP ranks, not extra GPUs)
    dp: int = Field(default=1, ge=1, le=4096)  # data-parallel replicas (attention DP included)
    weights: FormatName
    # MoE checkpoints that mix formats (gpt-oss: MXFP4 experts, bf16 attention): the experts' format. A row that
    # sets it ran the checkpoint as shipped, so `weights` and `experts` must be the model spec's dtype and expert_dtype.
    experts: FormatName | None = None
    kv: KvFormatName
    compute: str = Field(min_length=1, max_length=16)
    batch: int = Field(ge=1, le=1_000_000)
    prompt_tokens: int = Field(ge=1, le=100_000_000)
    output_tokens: int = Field(ge=1, le=100_000_000)
    framework: Framework
    engine: Engine
    # The software's version as the source prints it ("0.6.3.post1", "0.8.5 (V1)", "1.0.0rc4", "b4600"); None when
    # unstated (the notes then say what the source's date implies). Read with `framework`, `graphs` and the GPU's
    # platform to pick the engine's era.
    engine_version: str | None = Field(default=None, min_length=1, max_length=100)
    # CUDA/HIP graphs: True when captured, False for eager runs (`--enforce-eager`, or a build without graph
    # support), None when the source does not say (the notes give that version's default).
    graphs: bool | None = None
    measured_at: MeasuredAt | None = None  # every shipped row sets it (a test checks); a user's file may leave it out
    scheduler_steps: int | None = Field(default=None, ge=1, le=1024)  # vLLM multi-step: --num-scheduler-steps
    chunked_prefill: bool | None = None  # where the source states it
    # False where the run kept flash attention off (llama-bench's -fa 0 default, llama.cpp before -fa existed)
    flash_attention: bool = True
    # The KV cache's capacity in tokens where the run itself states it (vLLM's log: "# GPU blocks" x the block size,
    # or the --max-model-len its "larger than the maximum number of tokens that can be stored in KV cache" error
    # makes a run set): what the engine held beside its weights, so the sequences that run at once are what these
    # tokens hold at prompt + output each, not what tokcost's memory model would leave.
    kv_tokens: int | None = Field(default=None, ge=1, le=10**10)
    metric: Metric
    value: float = Field(gt=0, le=1e9, allow_inf_nan=False)  # a rate, a time or a throughput as published
    notes: str = Field(default="", max_length=10_000)
    exclude: str | None = Field(default=None, min_length=1, max_length=2000)
    split: Split | None = None

    @model_validator(mode="after")
    def _layout_fits_the_gpus(self) -> Row:
        if self.gpus % (self.pp * self.dp):
            raise ValueError(f"gpus ({self.gpus}) must be a multiple of pp x dp ({self.pp} x {self.dp})")
        return self

    @model_validator(mode="after")
    def _engine_prices_the_framework(self) -> Row:
        problem = engine_problem(self.framework, self.engine)
        if problem:
            raise ValueError(problem)
        return self

    @model_validator(mode="after")
    def _kv_holds_one_sequence(self) -> Row:
        # a stated KV capacity below one whole sequence would run each request in pieces no engine runs
        if self.kv_tokens is not None and self.kv_tokens < self.prompt_tokens + self.output_tokens:
            raise ValueError(f"kv_tokens ({self.kv_tokens:,}) must hold one whole sequence, prompt + output "
                             f"({self.prompt_tokens + self.output_tokens:,}) or more")  # fmt: skip
        return self

    @model_validator(mode="after")
    def _decode_metric_has_decode_steps(self) -> Row:
        # a token gap, or decode alone, needs a second token: with one output token there is no decode step to price
        if self.metric in DECODE_METRICS and self.output_tokens < 2:
            raise ValueError(f"metric {self.metric} times decode steps: output_tokens must be 2 or more "
                             f"(got {self.output_tokens})")  # fmt: skip
        return self

    @property
    def tp(self) -> int:
        """Tensor-parallel degree: the GPUs one pipeline stage of one replica spans."""
        return self.gpus // (self.pp * self.dp)

    @property
    def stage_gpus(self) -> int:
        """The GPUs one pipeline stage spans (tp x dp): what decides the era a split stage runs as."""
        return self.gpus // self.pp

    @property
    def higher_is_better(self) -> bool:
        """True for rates (tokens/s), False for latencies (ms)."""
        return self.metric in HIGHER_IS_BETTER


def split_of(row: Row) -> Split:
    """The row's split: its `split` key if set, else test for a row of a held-out source (HELD_OUT_SOURCES)."""
    if row.split is not None:
        return row.split
    return "test" if row.source_id in HELD_OUT_SOURCES else "train"


def source_digest(source_id: str) -> str:
    """SHA-256 of a source_id (hex): the order in which the rule considers sources for holding out."""
    return hashlib.sha256(source_id.encode("utf-8")).hexdigest()


def held_out_by_rule(rows: list[Row]) -> frozenset[str]:
    """The sources the split rule holds out of `rows` (see HELD_OUT_MIN_SOURCES): hash order, until covered."""
    by_source: dict[str, list[Row]] = {}
    for row in rows:
        by_source.setdefault(row.source_id, []).append(row)
    held: list[str] = []
    engines: set[str] = set()
    count = 0
    for source in sorted(by_source, key=source_digest):
        if (len(held) >= HELD_OUT_MIN_SOURCES and len(engines) >= HELD_OUT_MIN_ENGINES
                and count >= HELD_OUT_MIN_ROW_SHARE * len(rows)):  # fmt: skip
            break
        held.append(source)
        engines |= {r.engine for r in by_source[source]}
        count += len(by_source[source])
    return frozenset(held)


def parse_items(data: dict[str, object], key: str, where: str, schema: type[_Item]) -> list[_Item]:
    """Validated items of data[key], ids unique; an error names the file, the item (index and id) and the field."""
    raw = data.get(key)
    if not isinstance(raw, list) or not raw:
        raise SpecError(where, f"{key}: give a non-empty list", field=key)
    items: list[_Item] = []
    for i, item in enumerate(raw):
        label = f"{where}: {key}[{i}]" + (f" ({item['id']})" if isinstance(item, dict) and "id" in item else "")
        if not isinstance(item, dict):
            raise SpecError(label, f"is a {type(item).__name__}; each item is a mapping of keys such as id: ...")
        try:
            items.append(schema.model_validate(item))
        except ValidationError as exc:
            raise validation_error(label, exc, schema) from None
    seen: set[str] = set()
    for i, found in enumerate(items):
        ident = found.model_dump(include={"id"})["id"]
        if ident in seen:
            raise SpecError(f"{where}: {key}[{i}]", f"duplicate id {ident!r}; ids must be unique", field="id")
        seen.add(ident)
    return items


def parse_rows(data: dict[str, object], where: str) -> list[Row]:
    """Validated rows from the file's mapping; an error names the row (index and id) and the field."""
    keys = set(data) - {"rows"}
    if keys:
        raise SpecError(where, f"unknown top-level key {sorted(keys)[0]!r}; the file holds one key, rows:")
    return parse_items(data, "rows", where, Row)


def load_rows(path: Path) -> list[Row]:
    """The rows of a published-measurements YAML file."""
    return parse_rows(load_mapping(path, example="rows: [...]"), str(path))
