"""Predicted vs published: each row's metric under "ceiling" and "expected", its error, and the summary.

How a row's metric maps onto the estimate (the metric names the source's own definition; see data.Metric):
- decode_tokens_per_s_per_sequence: the decode rate alone, 1 / TPOT (MLC, llama.cpp, SGLang bench_one_batch).
- output_tokens_per_s_per_request: generated tokens over the wall time of the whole call, prefill included:
  O / (TTFT + (O - 1) x TPOT) (gpt-fast and torchao's generate.py, vLLM's benchmark_latency).
- tpot_ms, itl_ms: TPOT. ttft_ms: TTFT. e2e_ms: TTFT + (O - 1) x TPOT; the `_s` variants are the same in seconds.
- throughput_tokens_per_s: output tokens over the whole request, B x O / e2e; `_per_gpu` divides by the GPU count
  (TensorRT-LLM's out_tps = output_seqlen x batch_size / total_latency / tp); total_throughput_tokens_per_s counts
  prompt tokens too, B x (P + O) / e2e; prefill_tokens_per_s is B x P / TTFT.
Error = predicted / measured - 1, in the metric's own unit; summaries use its absolute value.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from tokcost.engine.estimate import estimate
from tokcost.engine.workload import Workload, same_tensor_rate
from tokcost.errors import SpecError, UsageError
from tokcost.formats import get as get_format
from tokcost.hardware.spec import GpuSpec
from tokcost.models.spec import ModelSpec
from tokcost.validation.data import Row, Split, split_of

ROW_KEY_OF_FLAG = {
    "--compute-dtype": "compute", "--gpus": "gpus", "--tp": "gpus", "--weights": "weights", "--kv-dtype": "kv",
    "--batch": "batch", "--prompt": "prompt_tokens", "--output": "output_tokens",
}  # fmt: skip
MS_PER_S = 1e3


def workload_of(row: Row) -> Workload:
    """The row's workload: batch, prompt, output, tensor-parallel GPUs and its three precisions."""
    return Workload(
        batch=row.batch,
        prompt_tokens=row.prompt_tokens,
        output_tokens=row.output_tokens,
        tp=row.gpus // (row.pp * row.dp),
        pp=row.pp,
        ep=row.ep,
        dp=row.dp,
        weights_dtype=None if row.experts is not None else row.weights,  # as shipped: the model's dtypes
        kv_dtype=row.kv,
        compute_dtype=row.compute,
    )


def predict_metric(row: Row, ttft_s: float, tpot_s: float | None) -> float:
    """The row's metric, in its published unit, from a predicted TTFT and mean TPOT (None: one output token)."""
    out = row.output_tokens
    tpot_s = tpot_s or 0.0
    e2e_s = ttft_s + (out - 1) * tpot_s  # the first token comes out of prefill, the rest one step each
    seconds = {"tpot": tpot_s, "itl": tpot_s, "ttft": ttft_s, "e2e": e2e_s}
    name, _, unit = row.metric.rpartition("_")
    if unit in ("ms", "s") and name in seconds:
        return seconds[name] * (MS_PER_S if unit == "ms" else 1)
    rates: dict[str, Callable[[], float]] = {
        "decode_tokens_per_s_per_sequence": lambda: 1 / tpot_s,
        "output_tokens_per_s_per_request": lambda: out / e2e_s,
        "throughput_tokens_per_s": lambda: row.batch * out / e2e_s,
        "throughput_tokens_per_s_per_gpu": lambda: row.batch * out / e2e_s / row.gpus,
        "total_throughput_tokens_per_s": lambda: row.batch * (row.prompt_tokens + out) / e2e_s,
        "prefill_tokens_per_s": lambda: row.batch * row.prompt_tokens / ttft_s,
    }
    return rates[row.metric]()


def check_shipped_formats(row: Row, model: ModelSpec) -> None:
    """A row with `experts` ran the checkpoint as shipped: its formats must be the model spec's."""
    expert_dtype = model.moe.expert_dtype if model.moe else None
    if row.experts is not None and (row.weights, row.experts) != (model.weights_dtype or model.dtype, expert_dtype):
        raise SpecError(
            f"row {row.id}",
            f"weights {row.weights} / experts {row.experts} differ from {model.name}'s shipped "
            f"{model.weights_dtype or model.dtype} / {expert_dtype}; drop `experts` to force one format",
            field="experts",
        )


@dataclass(frozen=True, slots=True)
class RowResult:
    """One row: measured, ceiling and expected predictions, the error of each, and the ceiling check."""

    row: Row
    split: Split
    ceiling: float
    expected: float

    @property
    def used(self) -> bool:
        """False when the row carries an `exclude` reason."""
        return self.row.exclude is None

    @property
    def error(self) -> float:
        """Expected / measured - 1."""
        return self.expected / self.row.value - 1

    @property
    def ceiling_error(self) -> float:
        """Ceiling / measured - 1: the error of the untuned model (datasheet peaks, no overhead)."""
        return self.ceiling / self.row.value - 1

    @property
    def violation(self) -> bool:
        """The measurement beats the datasheet ceiling: a spec, a formula or the row's reading is wrong."""
        if self.row.higher_is_better:
            return self.row.value > self.ceiling
        return self.row.value < self.ceiling


def compare_rows(rows: Sequence[Row], models: Mapping[str, ModelSpec], gpus: Mapping[str, GpuSpec]) -> list[RowResult]:
    """Every row priced by estimate() with the specs as shipped (models and GPUs by the row's names)."""
    results = []
    for row in rows:
        check_shipped_formats(row, models[row.model])
        try:
            e = estimate(models[row.model], gpus[row.gpu], workload_of(row))
        except UsageError as exc:  # the engine names a flag (--compute-dtype: ...): name the row and its key
            flag, _, message = str(exc).partition(": ")
            raise SpecError(f"row {row.id}", message, field=ROW_KEY_OF_FLAG.get(flag, flag)) from None
        results.append(
            RowResult(
                row=row,
                split=split_of(row),
                ceiling=predict_metric(row, e.ceiling.ttft_s, e.ceiling.tpot_s),
                expected=predict_metric(row, e.expected.ttft_s, e.expected.tpot_s),
            )
        )
    return results


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0..100), linear between closest ranks (numpy's default)."""
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100
    lo, hi = math.floor(rank), math.ceil(rank)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (rank - lo)


@dataclass(frozen=True, slots=True)
class GroupStats:
    """Absolute errors of one group of used rows: all of them, the held-out ones, and the untuned ceiling."""

    group: str
    rows: int
    median_abs_error: float
    p90_abs_error: float
    test_rows: int
    test_median_abs_error: float | None
    test_p90_abs_error: float | None
    ceiling_median_abs_error: float
    violations: int


def group_stats(group: str, results: Sequence[RowResult]) -> GroupStats:
    """Median and 90th percentile of |error| over `results` (all splits, then test only)."""
    errors = [abs(r.error) for r in results]
    test = [abs(r.error) for r in results if r.split == "test"]
    return GroupStats(
        group=group,
        rows=len(results),
        median_abs_error=statistics.median(errors),
        p90_abs_error=percentile(errors, 90),
        test_rows=len(test),
        test_median_abs_error=statistics.median(test) if test else None,
        test_p90_abs_error=percentile(test, 90) if test else None,
        ceiling_median_abs_error=statistics.median(abs(r.ceiling_error) for r in results),
        violations=sum(r.violation for r in results),
    )


# Classes of rows the physics treats differently; reported so that a class that stays off cannot hide.
ROW_CLASSES: dict[str, Callable[[Row], bool]] = {
    "class: tensor parallel (gpus > 1)": lambda r: r.gpus > 1,
    "class: MoE (mixtral)": lambda r: r.model.startswith("mixtral"),
    # weights narrower than a 16-bit matmul, dequantized in the kernel (is_weight_only's rule, fp8 included)
    "class: weight-only (int8/int4/fp8 under 16-bit compute)": lambda r: (
        r.compute in ("bf16", "fp16") and not same_tensor_rate(get_format(r.weights).native_compute, r.compute)
    ),
    "class: fp8 weights": lambda r: r.weights == "fp8",
}


@dataclass(frozen=True, slots=True)
class Summary:
    """Rows used and excluded, ceiling violations, and error statistics per split, framework, engine, metric, class."""

    rows_total: int
    rows_used: int
    excluded: tuple[str, ...]
    violations: tuple[str, ...]
    groups: tuple[GroupStats, ...]


def summarize(results: Sequence[RowResult]) -> Summary:
    """Statistics over the used rows: overall, per split, per framework, engine and metric, and per class."""
    used = [r for r in results if r.used]
    selections: list[tuple[str, list[RowResult]]] = [("all rows", used)]
    selections += [(f"split: {s}", [r for r in used if r.split == s]) for s in ("train", "test")]
    for key in ("framework", "engine", "metric"):
        for value in sorted({getattr(r.row, key) for r in used}):
            selections.append((f"{key}: {value}", [r for r in used if getattr(r.row, key) == value]))
    selections += [(name, [r for r in used if member(r.row)]) for name, member in ROW_CLASSES.items()]
    groups = [group_stats(name, members) for name, members in selections if members]
    return Summary(
        rows_total=len(results),
        rows_used=len(used),
        excluded=tuple(r.row.id for r in results if not r.used),
        violations=tuple(r.row.id for r in used if r.violation),
        groups=tuple(groups),
    )
