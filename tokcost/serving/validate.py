"""`tokcost plan`'s serving model against published serving measurements (tokcost/validation/serving.yaml).

Each row is one load point of a pinned setup (model, GPU, layout, formats, engine, lengths, rate or concurrency)
and one metric; the prediction is one call of serving.predict with the same inputs, for one replica, the load
split evenly over the setup's instances. What a row's statistic maps to: p50/p90/p99 are the closed form's
percentiles; a mean is compared with the closed form's mean (TTFT's mixture mean, Little's TPOT, their sum for
E2E), and so is an unstated statistic (the client harnesses print the average first: AIPerf's tables open with
avg); ITL, the gap between tokens pooled over every gap, is compared with the closed form's pooled gaps (its
percentiles; a mean with the mean step). Rows the
closed form cannot speak to are skipped with the reason: disaggregated setups, p10/p25/p75/p95 statistics,
and vLLM ITL under multi-step scheduling (tokens stream in bursts of `--num-scheduler-steps`); a setup that
runs multi-step scheduling makes a new request wait for the running window (serving.predict), and one whose
engine schedules one step ahead (SGLang's overlap scheduler) makes a request that finds a step running wait the
next one too. The prefill budget per step is the flags' (`--max-num-batched-tokens`, `--chunked-prefill-size`)
or else the engine profile's default on that GPU, as `plan` takes it. Lengths: fixed; a uniform law as uniform
over its stated range; a dataset's as an exponential.
A row that states its run's request count is priced as that finite run (serving.predict's `requests`): the
throughput a harness prints is its N requests over the run's span, and past saturation the run still ends; a
closed loop's run is its simulation throughout (its users' first requests sent together, a burst every figure counts).
"""

from __future__ import annotations

import math
import re
import statistics
from collections.abc import Mapping
from dataclasses import dataclass

from tokcost.eras import schedules_ahead
from tokcost.hardware.spec import GpuSpec, Link
from tokcost.models.spec import ModelSpec
from tokcost.profiles import EngineProfile
from tokcost.serving.predict import Prediction, predict
from tokcost.serving.traffic import LengthDist
from tokcost.validation.cells import engine_version_of
from tokcost.validation.serving_data import ServingRow, ServingSetup

PERCENTILES = ("p50", "p90", "p99")
LATENCY = {"ttft_ms": "ttft_s", "tpot_ms": "tpot_s", "itl_ms": "itl_s", "e2e_ms": "e2e_s"}
# the share of each GPU weights and KV cache may take (SGLang's --mem-fraction-static, vLLM's --gpu-memory-utilization)
MEMORY_FLAG = re.compile(
    r"--(?:mem[-_]frac(?:tion[-_]static)?|gpu[-_]memory[-_]utilization)[\s=]+(0?\.\d+|1(?:\.0*)?)\b"
)
ASIDE = re.compile(r"\([^)]*\)")  # a parenthetical in a setup's flags: prose about other runs, not this one's flags
CHUNK_FLAG = re.compile(r"--(?:max[-_]num[-_]batched[-_]tokens?|chunked[-_]prefill[-_]size)\s+(\d+)")
STEPS_FLAG = re.compile(r"--num[-_]scheduler[-_]steps\s+(\d+)")
SEQS_FLAG = re.compile(r"--(?:max[-_]num[-_]seqs|max[-_]running[-_]requests|max[-_]batch[-_]size)\s+(\d+)")
# An overlap scheduler's switches in a setup's flags, the last one stated winning (as argparse takes them). Off:
# SGLang's flag, TensorRT-LLM's config key and its TensorRT backend (a 1.x build run as engines, no overlap loop),
# vLLM's flag; on: vLLM's opt-in before it became the default (0.10-0.13), unless given a false value.
OVERLAP_SWITCH = re.compile(
    r"(?P<off>--disable[-_]overlap[-_]schedul\w*|disable_overlap_scheduler[\"']?\s*[:=]\s*true\b"
    r"|--no[-_]async[-_]scheduling\b|--backend[= ](?:trt|tensorrt)\b)"
    r"|(?P<on>--async[-_]scheduling\b(?![= ]\s*(?:false|0)\b))",
    re.IGNORECASE,
)
# prefill beside the decodes where the engine would run it apart: SGLang's mixed chunks, vLLM V0's chunked prefill
MIXED_ON = re.compile(r"--enable[-_](?:mixed[-_]chunk|chunked[-_]prefill)")


@dataclass(frozen=True, slots=True)
class ServingResult:
    """One row: measured, predicted (None when skipped) and why a row was skipped."""

    row: ServingRow
    setup: ServingSetup
    predicted: float | None
    skipped: str | None = None

    @property
    def error(self) -> float | None:
        """Predicted / measured - 1."""
        return None if self.predicted is None else self.predicted / self.row.value - 1


def _skip_reason(setup: ServingSetup, row: ServingRow) -> str | None:
    if setup.prefill_decode == "disaggregated":
        return "disaggregated pools: not one replica"
    if row.metric in LATENCY and row.statistic not in (*PERCENTILES, "mean", "unstated"):
        return f"statistic {row.statistic}: the closed form gives p50, p90 and p99"
    if row.metric == "itl_ms" and "--num-scheduler-steps" in setup.engine_flags:
        return "ITL under multi-step scheduling streams tokens in bursts: compared through TPOT rows instead"
    return None


def _lookahead(setup: ServingSetup, engine: EngineProfile) -> bool:
    """Whether the setup's build chooses each step's requests while the step before it runs: its version is at or
    past the era's `overlap_scheduling_since` (the profile says when the engine's overlap scheduler became its default)
    and its flags do not turn it off, or its flags turn it on (vLLM's --async-scheduling before 0.14)."""
    switches = list(OVERLAP_SWITCH.finditer(setup.engine_flags))
    if switches:
        return switches[-1].group("on") is not None
    version = engine_version_of(setup.framework, setup.engine_version)
    return version is not None and schedules_ahead(engine, version)


def _prefill_apart(setup: ServingSetup, engine: EngineProfile) -> bool:
    """Whether the setup's engine runs prefill in steps of its own: the era does by default and its flags do not
    mix prefill chunks into the decode steps."""
    return engine.prefill_steps_apart and not MIXED_ON.search(setup.engine_flags)


def _length(kind: str, mean: float, span: tuple[int, int] | None) -> LengthDist:
    """The row's length law: fixed; a uniform law over its stated range as it is (every integer in it equally
    likely, as the harnesses draw them: np.random.randint); a dataset's lengths (ShareGPT), long-tailed, as an
    exponential of the same mean."""
    if kind == "fixed":
        return LengthDist("fixed", mean)
    if kind == "uniform" and span is not None:
        values = tuple(range(span[0], span[1] + 1))
        return LengthDist("empirical", sum(values) / len(values), values=values)
    return LengthDist("exponential", mean)


def predict_row(
    setup: ServingSetup,
    row: ServingRow,
    model: ModelSpec,
    gpu: GpuSpec,
    engine: EngineProfile,
    network: Link | None,
    memo: dict[tuple[object, ...], Prediction] | None = None,
) -> ServingResult:
    """The row's metric as the closed form predicts it, or the reason it is skipped. `memo` keeps one prediction
    per load point of one setup (a point's metrics share it: a finite run is simulated once, not once a metric)."""
    reason = _skip_reason(setup, row)
    if reason:
        return ServingResult(row, setup, None, reason)
    engine = engine.for_layout(setup.tp * setup.dp)  # the era the layout runs as (predict resolves it too)
    memory = MEMORY_FLAG.search(ASIDE.sub("", setup.engine_flags))
    if memory:  # the run's own share of each GPU for weights and KV cache
        engine = engine.model_copy(update={"memory_share": float(memory[1])})
    load: dict[str, float | int | None] = {"rate_rps": None, "concurrency": None}
    if row.arrival == "poisson":
        load["rate_rps"] = (row.request_rate_rps or 0.0) / setup.instances
    elif row.arrival == "closed_loop":
        load["concurrency"] = max(round((row.concurrency or 1) / setup.instances), 1)
    else:  # all at once: every request sent at t = 0 (N unstated: the steady state past saturation)
        load["rate_rps"] = math.inf
    found, steps = CHUNK_FLAG.search(setup.engine_flags), STEPS_FLAG.search(setup.engine_flags)
    seqs = SEQS_FLAG.search(setup.engine_flags)
    point = (
        setup.id,
        row.arrival,
        row.request_rate_rps,
        row.concurrency,
        row.prompt_tokens_mean,
        row.output_tokens_mean,
        row.num_requests,
    )  # all that the prediction reads of the row: its load point
    p = memo.get(point) if memo is not None else None
    p = p or predict(
        model, gpu, tp=setup.tp, pp=setup.pp, ep=setup.ep, dp=setup.dp, engine=engine, network=network,
        redundant_experts=setup.redundant_experts,
        prompt_tokens=row.prompt_tokens_mean, output_tokens=row.output_tokens_mean,
        prompt_dist=_length(setup.prompt_dist, row.prompt_tokens_mean, setup.prompt_tokens_range),
        output_dist=_length(setup.output_dist, row.output_tokens_mean, setup.output_tokens_range),
        weights=setup.weights, kv_dtype=setup.kv, chunk=int(found[1]) if found else None,  # None: the engine's
        scheduler_steps=int(steps[1]) if steps else 1, max_running=int(seqs[1]) if seqs else None,
        client_side=setup.measured_at == "client", lookahead=_lookahead(setup, engine),
        prefill_apart=_prefill_apart(setup, engine), **load,  # type: ignore[arg-type]
        requests=max(round(row.num_requests / setup.instances), 1) if row.num_requests else None,
    )  # fmt: skip
    if memo is not None:
        memo[point] = p
    if row.metric in LATENCY:
        values = getattr(p, LATENCY[row.metric])
        stat = row.statistic if row.statistic in PERCENTILES else "p50"
        value = values.get(stat) if values else None
        if row.statistic not in PERCENTILES and values:  # a mean (or unstated: the harnesses print the mean first)
            means = p.means_s or {}
            # the mean gap is the mean step a decoding sequence waits
            value = p.itl_mean_s if row.metric == "itl_ms" else means.get(LATENCY[row.metric])
        if value is None:
            return ServingResult(row, setup, None, "the load is past the predicted saturation: no percentiles")
        return ServingResult(row, setup, value * 1e3)
    rate = p.rate_rps * setup.instances  # requests/s the whole setup serves
    per_request = {"output_throughput_tokens_per_s": row.output_tokens_mean,
                   "total_throughput_tokens_per_s": row.prompt_tokens_mean + row.output_tokens_mean,
                   "request_throughput_rps": 1.0}[row.metric]  # fmt: skip
    return ServingResult(row, setup, rate * per_request)


def validate_serving(
    setups: Mapping[str, ServingSetup],
    rows: list[ServingRow],
    models: Mapping[str, ModelSpec],
    gpus: Mapping[str, GpuSpec],
    engines: Mapping[str, EngineProfile],
    networks: Mapping[str, Link | None],
) -> list[ServingResult]:
    """Every row predicted (or skipped with its reason), each load point of a setup once."""
    out, memo = [], {}
    for row in rows:
        setup = setups[row.setup]
        out.append(predict_row(setup, row, models[setup.model], gpus[setup.gpu], engines[setup.engine],
                               networks.get(setup.gpu), memo))  # fmt: skip
    return out


def summary(results: list[ServingResult]) -> list[tuple[str, int, float, float]]:
    """(group, rows, median |error|, max |error|) per setup and metric, then overall."""
    groups: dict[str, list[float]] = {}
    for r in results:
        if r.error is None:
            continue
        kind = "throughput" if r.row.metric not in LATENCY else r.row.metric.removesuffix("_ms")
        for key in (f"{r.setup.id} · {kind}", f"metric: {kind}", "all predicted rows"):
            groups.setdefault(key, []).append(abs(r.error))
    return [(k, len(v), statistics.median(v), max(v)) for k, v in sorted(groups.items(), key=lambda kv: kv[0])]
