"""Published measurements (tokcost/validation/published.yaml) as frozen rows, and their deterministic train/test split.

Each row is one number a framework or vendor printed, with the workload it was measured on. The only keys
tokcost adds to a published row are `exclude` (a reason not to use it) and `split` (train/test override).
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from tokcost.errors import SpecError
from tokcost.files import load_mapping
from tokcost.formats import FormatName
from tokcost.spec_errors import validation_error

Metric = Literal[
    "decode_tokens_per_s_per_sequence", "tpot_ms", "itl_ms", "ttft_ms", "e2e_ms", "throughput_tokens_per_s"
]
Framework = Literal["gpt-fast", "torchao", "tensorrt-llm", "nim", "vllm", "sglang", "other"]
Split = Literal["train", "test"]

# Rates are better when higher; times when lower. A measurement better than the ceiling is a violation.
HIGHER_IS_BETTER: frozenset[str] = frozenset({"decode_tokens_per_s_per_sequence", "throughput_tokens_per_s"})

# One row in TEST_EVERY goes to the held-out split, chosen by a hash of its id (stable across machines).
TEST_EVERY = 3


class Row(BaseModel):
    """One published measurement: the workload, the metric and its value exactly as printed."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)  # strict: a bool is never a count

    id: str = Field(min_length=1, max_length=200, pattern=r"^[a-z0-9][a-z0-9.\-]*$")
    source: str = Field(min_length=1, max_length=2000)
    quote: str = Field(min_length=1, max_length=2000)
    model: str = Field(min_length=1, max_length=200)
    gpu: str = Field(min_length=1, max_length=200)
    gpus: int = Field(ge=1, le=4096)
    weights: FormatName
    kv: FormatName
    compute: str = Field(min_length=1, max_length=16)
    batch: int = Field(ge=1, le=1_000_000)
    prompt_tokens: int = Field(ge=1, le=100_000_000)
    output_tokens: int = Field(ge=1, le=100_000_000)
    framework: Framework
    metric: Metric
    value: float = Field(gt=0, allow_inf_nan=False)
    notes: str = Field(default="", max_length=10_000)
    exclude: str | None = Field(default=None, min_length=1, max_length=2000)
    split: Split | None = None

    @property
    def higher_is_better(self) -> bool:
        """True for rates (tokens/s), False for latencies (ms)."""
        return self.metric in HIGHER_IS_BETTER


def split_of(row: Row) -> Split:
    """The row's split: its `split` key if set, else test for one id in TEST_EVERY by SHA-256 (no RNG, no order)."""
    if row.split is not None:
        return row.split
    digest = int(hashlib.sha256(row.id.encode("utf-8")).hexdigest(), 16)
    return "test" if digest % TEST_EVERY == 0 else "train"


def parse_rows(data: dict[str, object], where: str) -> list[Row]:
    """Validated rows from the file's mapping; an error names the row (index and id) and the field."""
    keys = set(data) - {"rows"}
    if keys:
        raise SpecError(where, f"unknown top-level key {sorted(keys)[0]!r}; the file holds one key, rows:")
    raw = data.get("rows")
    if not isinstance(raw, list) or not raw:
        raise SpecError(where, "rows: give a non-empty list of measurements", field="rows")
    rows: list[Row] = []
    for i, item in enumerate(raw):
        label = f"{where}: rows[{i}]" + (f" ({item['id']})" if isinstance(item, dict) and "id" in item else "")
        if not isinstance(item, dict):
            raise SpecError(label, f"is a {type(item).__name__}; each row is a mapping of keys such as id: ...")
        try:
            rows.append(Row.model_validate(item))
        except ValidationError as exc:
            raise validation_error(label, exc) from None
    seen: set[str] = set()
    for i, row in enumerate(rows):
        if row.id in seen:
            raise SpecError(f"{where}: rows[{i}]", f"duplicate id {row.id!r}; ids must be unique", field="id")
        seen.add(row.id)
    return rows


def load_rows(path: Path) -> list[Row]:
    """The rows of a published-measurements YAML file."""
    return parse_rows(load_mapping(path), str(path))
