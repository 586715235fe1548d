"""Predicted vs published: each row's metric under "ceiling" and "expected", its error, and the summary.

How a row's metric maps onto the estimate (the metric names the source's own definition; see data.Metric):
- decode_tokens_per_s_per_sequence: the decode rate alone, 1 / TPOT (MLC, llama.cpp, SGLang bench_one_batch).
- output_tokens_per_s_per_request: generated tokens over the wall time of the whole call, prefill included:
  O / (TTFT + (O - 1) x TPOT) (gpt-fast and torchao's generate.py, vLLM's benchmark_latency).
- tpot_ms, itl_ms: TPOT. ttft_ms: TTFT. e2e_ms: TTFT + (O - 1) x TPOT; the `_s` variants are the same in seconds.
- run_s: an offline run's wall time, every request submitted at once until the last finishes: one wave's e2e, or
  the waves' e2e one after another.
- throughput_tokens_per_s: output tokens over the whole request, B x O / e2e; `_per_gpu` divides by the GPU count
  (TensorRT-LLM's out_tps = output_seqlen x batch_size / total_latency / tp); total_throughput_tokens_per_s counts
  prompt tokens too, B x (P + O) / e2e; prefill_tokens_per_s is B x P / TTFT.
Error = predicted / measured - 1, in the metric's own unit; summaries use its absolute value.

Each row is priced with its engine era's profile (cells.cell_of: the framework, version, graphs and the GPU's
platform) and layout, by the engine's compiled pass (its TTFT and exact mean TPOT: nothing else of an estimate is
computed); the per-request cost only on a client-side clock (`measured_at: client`). A row that offers more sequences
than the engine can run at once (offline throughput runs that submit every request at t = 0) runs in waves, as the
engine would: at most `max_batch` sequences at a time, the most the KV cache holds at prompt + output tokens each
beside the weights (memory_report's max_batch) or the engine's own cap on running sequences, whichever is
smaller; full waves first, then the rest. Rates count the whole run; a request's TTFT and end-to-end time include
the waves it queued behind.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from tokcost.engine.estimate import Deployment, deployment, times
from tokcost.engine.memory import ReplicaMemory
from tokcost.engine.roofline import Rates, expected_rates
from tokcost.engine.workload import Workload
from tokcost.eras import built_at
from tokcost.errors import SpecError, UsageError
from tokcost.hardware.spec import GpuSpec
from tokcost.models.spec import ModelSpec
from tokcost.profiles import EngineProfile
from tokcost.validation.cells import Cell, engine_version_of
from tokcost.validation.data import Row

ROW_KEY_OF_FLAG = {
    "--compute-dtype": "compute", "--gpus": "gpus", "--tp": "gpus", "--weights": "weights", "--kv-dtype": "kv",
    "--batch": "batch", "--prompt": "prompt_tokens", "--output": "output_tokens",
}  # fmt: skip
MS_PER_S = 1e3


def workload_of(row: Row, batch: int | None = None) -> Workload:
    """The row's workload (or one wave of `batch` of its sequences): prompt, output, layout and its precisions."""
    return Workload(
        batch=row.batch if batch is None else batch,
        prompt_tokens=row.prompt_tokens,
        output_tokens=row.output_tokens,
        tp=row.gpus // (row.pp * row.dp),
        pp=row.pp,
        ep=row.ep,
        dp=row.dp,
        weights_dtype=None if row.experts is not None else row.weights,  # as shipped: the model's dtypes
        kv_dtype=row.kv,
        compute_dtype=row.compute,
        flash_attention=row.flash_attention,
    )


def predict_metric(row: Row, ttft_s: float, tpot_s: float | None) -> float:
    """The row's metric, in its published unit, from a predicted TTFT and mean TPOT (None: one output token): the
    row's whole batch as one wave (run_metric)."""
    return run_metric(row, (WaveTimes(row.batch, 1, ttft_s, tpot_s),))


@dataclass(frozen=True, slots=True)
class Wave:
    """`count` consecutive waves of `batch` sequences each."""

    batch: int
    count: int


def max_running(row: Row, model: ModelSpec, gpu: GpuSpec, engine: EngineProfile, d: Deployment | None = None) -> int:
    """Sequences the engine runs at once: what the KV cache holds at prompt + output tokens (the run's own stated
    capacity where it gives one, else the memory model's), and the engine's cap."""
    if row.kv_tokens is not None:
        held = row.kv_tokens // (row.prompt_tokens + row.output_tokens)
    else:
        d = d or deployment(model, gpu, workload_of(row), None, engine)
        held = ReplicaMemory(model, gpu, d.precision, d.layout).max_batch(workload_of(row))
    cap = engine.max_running_sequences or held
    return max(1, min(held, cap))  # a batch that does not fit even once is priced as one sequence at a time


def waves_of(
    row: Row, model: ModelSpec, gpu: GpuSpec, engine: EngineProfile, d: Deployment | None = None
) -> tuple[Wave, ...]:
    """The row's sequences as the engine runs them: one wave when they fit at once, else full waves then the rest."""
    most = max_running(row, model, gpu, engine, d)
    if row.batch <= most:
        return (Wave(row.batch, 1),)
    full, rest = divmod(row.batch, most)
    return (Wave(most, full),) + ((Wave(rest, 1),) if rest else ())


@dataclass(frozen=True, slots=True)
class WaveTimes:
    """One kind of wave priced: its sequences, how many such waves, TTFT and mean TPOT (None: one output token)."""

    batch: int
    count: int
    ttft_s: float
    tpot_s: float | None


def run_metric(row: Row, waves: Sequence[WaveTimes]) -> float:
    """The row's metric over waves run one after another (one wave: B sequences that start and end together)."""
    out = row.output_tokens
    start = ttft_sum = e2e_sum = tpot_sum = prefill_s = 0.0
    for w in waves:
        e2e = w.ttft_s + (out - 1) * (w.tpot_s or 0.0)  # the first token comes out of prefill, the rest a step each
        for _ in range(w.count):  # each request of a wave queued behind the waves before it
            ttft_sum += w.batch * (start + w.ttft_s)
            e2e_sum += w.batch * (start + e2e)
            tpot_sum += w.batch * (w.tpot_s or 0.0)
            prefill_s += w.ttft_s
            start += e2e
    n = sum(w.batch * w.count for w in waves)
    seconds = {"tpot": tpot_sum / n, "itl": tpot_sum / n, "ttft": ttft_sum / n, "e2e": e2e_sum / n, "run": start}
    name, _, unit = row.metric.rpartition("_")
    if unit in ("ms", "s") and name in seconds:
        return seconds[name] * (MS_PER_S if unit == "ms" else 1)
    rates: dict[str, Callable[[], float]] = {
        "decode_tokens_per_s_per_sequence": lambda: n / tpot_sum,
        "output_tokens_per_s_per_request": lambda: out * n / e2e_sum,
        "throughput_tokens_per_s": lambda: n * out / start,
        "throughput_tokens_per_s_per_gpu": lambda: n * out / start / row.gpus,
        "total_throughput_tokens_per_s": lambda: n * (row.prompt_tokens + out) / start,
        "prefill_tokens_per_s": lambda: n * row.prompt_tokens / prefill_s,
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


def row_rates(row: Row, d: Deployment, engine: EngineProfile | None) -> Rates:
    """The rates a row is priced under: the ceiling (engine None), or its engine era's expected rates on its GPU, the
    per-request cost only on a client-side clock and the step cost spread over multi-step scheduling."""
    if engine is None:
        return d.rates("ceiling")
    return expected_rates(d.gpu, d.precision.compute, engine, client_side=row.measured_at == "client",
                          scheduler_steps=row.scheduler_steps or 1,
                          fused_attention=d.precision.fused_attention, tp=d.layout.tp)  # fmt: skip


@dataclass(frozen=True, slots=True)
class RowResult:
    """One row: measured; ceiling, expected (the shipped profile) and held-out (its source left out) predictions."""

    row: Row
    cell: Cell
    ceiling: float
    expected: float
    held_out: float | None = None  # priced under the fold that never read this row's source (None: not asked)
    waves: int = 1  # waves the row's sequences ran in (1: all at once)

    @property
    def engine(self) -> str:
        """The engine era that priced it (`vllm@v1`; the profile's own label under --engine)."""
        return f"{self.cell.engine}@{self.cell.era}" if self.cell.era not in ("", "identity") else self.cell.engine

    @property
    def used(self) -> bool:
        """False when the row carries an `exclude` reason."""
        return self.row.exclude is None

    @property
    def error(self) -> float:
        """Expected / measured - 1."""
        return self.expected / self.row.value - 1

    @property
    def held_out_error(self) -> float | None:
        """Held-out prediction / measured - 1."""
        return None if self.held_out is None else self.held_out / self.row.value - 1

    @property
    def ceiling_error(self) -> float:
        """Ceiling / measured - 1: the error of the untuned model (datasheet peaks, no overhead)."""
        return self.ceiling / self.row.value - 1

    def time_ratio(self, predicted: float) -> float:
        """Measured time over a predicted time (rates inverted): above 1 when the run was slower than predicted."""
        ratio = predicted / self.row.value
        return ratio if self.row.higher_is_better else 1 / ratio

    @property
    def violation(self) -> bool:
        """The measurement beats the datasheet ceiling: a spec, a formula or the row's reading is wrong."""
        if self.row.higher_is_better:
            return self.row.value > self.ceiling
        return self.row.value < self.ceiling


def row_deployment(row: Row, model: ModelSpec, gpu: GpuSpec, engine: EngineProfile) -> Deployment:
    """The row's deployment, its layout and formats checked; an error names the row and its key."""
    check_shipped_formats(row, model)
    try:
        d = deployment(model, gpu, workload_of(row), engine=engine)
        d.rates("ceiling")  # the compute dtype has a peak on this GPU
    except UsageError as exc:  # the engine names a flag (--compute-dtype: ...): name the row and its key
        flag, _, message = str(exc).partition(": ")
        raise SpecError(f"row {row.id}", message, field=ROW_KEY_OF_FLAG.get(flag, flag)) from None
    lay = d.layout
    if lay.nodes > 1:  # a row names no network: its collectives could not be priced
        raise SpecError(f"row {row.id}", f"{lay.gpus} GPUs span {lay.nodes} nodes of {lay.gpus_per_node}; a row here "
                        "runs inside one node (a multi-node run goes in multinode.yaml, with its network)",
                        field="gpus")  # fmt: skip
    return d


def as_row_built(row: Row, engine: EngineProfile) -> EngineProfile:
    """The profile as the row's own build ran it (eras.built_at: its MoE kernels and memory rule), where it is the
    row's engine; another engine's profile priced on the row (validate --engine) stays as given."""
    if engine.name != row.engine:
        return engine
    return built_at(engine, engine_version_of(row.framework, row.engine_version))


def price_row(row: Row, model: ModelSpec, gpu: GpuSpec, cell: Cell, engine: EngineProfile,
              held_out: EngineProfile | None = None) -> RowResult:  # fmt: skip
    """One row under the ceiling, its engine era's shipped profile and (when given) its held-out fold's, wave by wave:
    each wave's TTFT and mean TPOT from the engine (the waves from the shipped profile's running cap). A profile of
    the row's own engine runs as the row's build (eras.built_at: its MoE kernels and memory rule), as the fit reads it
    (cases.prepare)."""
    engine = as_row_built(row, engine)
    held_out = as_row_built(row, held_out) if held_out is not None else None
    d = row_deployment(row, model, gpu, engine)
    plan = waves_of(row, model, gpu, engine, d)

    def metric(rates: Rates) -> float:
        return run_metric(row, [WaveTimes(w.batch, w.count, *times(d, workload_of(row, w.batch), rates)) for w in plan])

    out = metric(row_rates(row, d, held_out)) if held_out is not None else None
    return RowResult(row, cell, metric(row_rates(row, d, None)), metric(row_rates(row, d, engine)), out,
                     sum(w.count for w in plan))  # fmt: skip


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0..100), linear between closest ranks (numpy's default)."""
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100
    lo, hi = math.floor(rank), math.ceil(rank)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (rank - lo)
