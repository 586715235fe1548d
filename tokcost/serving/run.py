"""A whole plan as the CLI and the Python API run it: the inputs checked, the search, its warnings, the simulation.

`tokcost plan` and `tokcost.plan(...)` both call run_plan with loaded specs, so the JSON one prints and the
other's `to_dict()` are the same object.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import replace

from tokcost import fmt
from tokcost.engine.layout import Layout, layout_problem
from tokcost.errors import UsageError
from tokcost.inputs import keyword_message
from tokcost.models.spec import ModelSpec
from tokcost.serving import search
from tokcost.serving.fleet import REPORTED
from tokcost.serving.inputs import (
    MAX_REQUESTS,
    SIMULATED_ROWS,
    check_context,
    check_jobs,
    check_mode,
    check_search,
    check_simulation,
    check_slos,
    name,
)
from tokcost.serving.rows import Row
from tokcost.serving.search import Plan, Space
from tokcost.serving.simulate import SimResult, simulate_replica
from tokcost.serving.traffic import QUANTILES, Slo, Traffic


def run_plan(
    model: ModelSpec, traffic: Traffic, slos: list[Slo], space: Space, *, simulate: bool = False,
    requests: int | None = None, seed: int | None = None, api: bool = False, jobs: int | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> Plan:  # fmt: skip
    """Check the inputs and the work they ask for, search, warn, and simulate the top rows when asked."""
    slos = check_slos(slos, api)
    context_warnings = check_context(model, traffic, api)
    check_mode(traffic, space, api)
    check_search(model, space, api)
    if space.redundant_experts and model.moe is None:  # the engine's own refusal, as estimate gives it
        problem = layout_problem(model, Layout(redundant_experts=space.redundant_experts)) or ""
        raise UsageError(keyword_message(problem) if api else problem)
    simulated = check_simulation(traffic, space, simulate=simulate, requests=requests, seed=seed, api=api)
    result = search.plan(model, traffic, slos, space, check_jobs(jobs, api), progress)
    if result.rows and all(row.invalid for row in result.rows):  # every configuration asked for is one no engine runs
        raise UsageError(result.rows[0].expected.binding)
    if space.redundant_experts and not any(row.deployment.layout.redundant_experts for row in result.rows):
        slots = f"{model.moe.experts} + {space.redundant_experts}" if model.moe else str(space.redundant_experts)
        raise UsageError(f"{name('redundant_experts', api)}: no expert-parallel layout searched holds them (EP must "
                         f"divide the {slots} expert slots, on GPUs that hold the model), so every row would price "
                         f"without them; give {name('ep', api)} a degree that does, or drop it")  # fmt: skip
    result.warnings += context_warnings + provenance_warnings(space) + scheduler_warnings(result)
    result.warnings += tensor_parallel_warnings(result) + graph_warnings(result) + left_out_warnings(result)
    result.warnings += closed_loop_warnings(traffic, simulate=simulated is not None)
    if simulated is not None:
        simulate_rows(result, SIMULATED_ROWS, simulated, seed or 0)
    return result


def closed_loop_warnings(traffic: Traffic, *, simulate: bool) -> list[str]:
    """A closed loop of one-token answers (a classifier, a judge) with no think time: its users keep the prefill
    queue full and take turns, each TTFT about N prompts' work, where the closed form spreads the other users' queue
    as random arrivals' (p50 20-30% under, p90 up to 2x over the simulation's; README's known misses)."""
    if (not traffic.concurrency or traffic.concurrency < 2 or traffic.think_time_s > 0 or traffic.output.values
            or traffic.output.kind != "fixed" or traffic.output.mean > 1):  # fmt: skip
        return []
    how = "the simulation prices the rows that meet the SLOs" if simulate else "--simulate prices it"
    return [f"a closed loop of one-token answers and no think time: its users take turns at a full prefill queue, "
            f"which the closed form spreads as random arrivals' waits (p90 TTFT up to 2x); {how} (README, known "
            "misses)"]  # fmt: skip


def provenance_warnings(space: Space) -> list[str]:
    """GPUs whose "expected" rests on stated anchors, not on what the GPU was measured to sustain (as estimate warns;
    the prefixes this checked, unfitted and none, went with the fitted GPU fractions)."""
    return [f"expected for {gpu.name}: {gpu.expected_provenance}" for gpu in space.gpus if gpu.sustained is None]


def scheduler_warnings(result: Plan) -> list[str]:
    """Where the engine's running cap, not its KV cache or compute, limits the top fleet."""
    top = next((row for row in result.rows if row.expected.meets_slo), None)
    if top is None or top.choice is None or not top.expected.binding.startswith("running cap"):
        return []
    if top.choice.max_running_source == "--max-running":  # the user's own cap, not the engine's default
        return [f"{search.row_label(top)}: the --max-running cap of {top.choice.max_running:,} running sequences "
                "binds (more users only queue for admission); a larger one raises it where memory allows"]  # fmt: skip
    return [f"{search.row_label(top)}: the engine's cap of {top.choice.max_running:,} running sequences binds "
            "(more users only queue for admission); --max-running raises it where memory allows"]  # fmt: skip


def tensor_parallel_warnings(result: Plan) -> list[str]:
    """What TP means in the top fleet's engine where its own multi-GPU default differs (llama.cpp splits layers)."""
    top = next((row for row in result.rows if row.expected.meets_slo), None)
    engine = top.deployment.engine if top is not None else None
    if top is None or engine is None or top.deployment.layout.tp <= 1 or not engine.tensor_parallel_note:
        return []
    return [f"{search.row_label(top)}: {engine.label}: {engine.tensor_parallel_note}"]


def left_out_warnings(result: Plan) -> list[str]:
    """The configurations a list of flag values asked for that no engine runs (`--ep 8,1` on a dense model), by
    reason: a value given alone is refused; in a list the others are planned, and this says what was dropped."""
    reasons = Counter(row.expected.binding for row in result.rows if row.invalid)
    return [f"left out {n} configuration{'s' if n > 1 else ''}: {why}" for why, n in reasons.items()]


def graph_warnings(result: Plan) -> list[str]:
    """Where the top fleet's mean decode batch per replica passes its engine's default CUDA-graph cap (unpriced)."""
    top = next((row for row in result.rows if row.expected.meets_slo), None)
    point = top.expected.point if top is not None else None
    if top is None or point is None:
        return []
    d = top.deployment
    note = d.engine.graph_note(
        point.batch, gpu_name=d.gpu.name, memory_bytes=d.gpu.memory_bytes, tp=d.layout.tp, dp=d.layout.dp
    )
    return [f"{search.row_label(top)}: {note}"] if note else []


def simulate_rows(plan: Plan, top: int, requests: int, seed: int) -> None:
    """Fill `simulated` for the first `top` aggregated rows that meet the SLOs: one replica at its offered load."""
    done = 0
    for row in plan.rows:
        if done >= top or not row.expected.meets_slo:
            break
        point, replica = row.expected.point, row.replica
        if row.mode != "aggregated" or point is None or replica is None:
            continue
        traffic, n = plan.traffic, row.expected.replicas or 1
        if traffic.concurrency:
            traffic = replace(traffic, concurrency=max(round(traffic.concurrency / n), 1))
        elif traffic.arrivals_s and n > 1:  # a timed trace: one replica's share, each request sent to one at random
            pick = random.Random(seed)
            kept = [i for i in range(len(traffic.arrivals_s)) if pick.randrange(n) == 0]
            traffic = replace(traffic, arrivals_s=tuple(traffic.arrivals_s[i] for i in kept),
                              pairs=tuple(traffic.pairs[i] for i in kept) if traffic.pairs else ())  # fmt: skip
        result = simulate_replica(replica, traffic, requests=requests, seed=seed, rate_rps=point.rate_rps)
        misses = _simulated_misses(row, plan.slos, result)
        plan.warnings += _unsettled(row, requests, result) + (misses or _disagreements(row, result))
        row.simulated = {
            f"{metric}_s": (
                None
                if result.percentile(metric, 0.5) is None
                else {name: result.percentile(metric, QUANTILES[name]) for name in REPORTED}
            )
            for metric in ("ttft", "tpot", "e2e", "itl")
        }
        done += 1


def _unsettled(row: Row, requests: int, result: SimResult) -> list[str]:
    """A simulation whose load still moved over its measured stretch (simulate.SETTLE_DRIFT): started empty, it may
    still be filling where the batch sets its own step time, and then its percentiles understate the steady state
    the closed form prices."""
    if result.settled:
        return []
    return [f"{search.row_label(row)}: the simulated replica had not settled over {requests:,} requests (the "
            f"requests in it moved {result.drift:+.0%} from the first quarter of its measured stretch to the last): "
            "its percentiles are not yet the steady state's (a run that is still filling understates them); more "
            f"--requests settle it (up to {MAX_REQUESTS:,}: near saturation one can need more: README)"]  # fmt: skip


DISAGREE = 0.25  # closed form against a settled simulation of its replica: the README promises 15%; past this, say so


def _disagreements(row: Row, result: SimResult) -> list[str]:
    """Where the closed form and a settled simulation of the same replica part by more than DISAGREE on p50 or p90
    TTFT or TPOT (either of the closed form's TTFT figures, free and lock-step, may match): the table shows both
    numbers, and this says they part. 300 users of Mixtral on 2 x H200 with fixed 2,000 / 100 tokens and a 2 s
    think time simulate p90 TTFT 1,277 ms against the closed form's 420 (users who keep returning in convoys, a
    known miss) and nothing was said without an SLO."""
    if not result.settled:  # _unsettled says what to do first
        return []
    e, parts = row.expected, []
    for metric, figures in (("ttft", (e.ttft_s, e.ttft_lock_step_s)), ("tpot", (e.tpot_s,))):
        for stat in ("p50", "p90"):
            simulated = result.percentile(metric, QUANTILES[stat])
            closed = [f[stat] for f in figures if f and f.get(stat)]
            if not simulated or not closed or any(abs(c / simulated - 1) <= DISAGREE for c in closed):
                continue
            parts.append(f"{metric.upper()} {stat} {fmt.ms(closed[0])} against {fmt.ms(simulated)} simulated "
                         f"({closed[0] / simulated - 1:+.0%})")  # fmt: skip
    if not parts:
        return []
    return [f"{search.row_label(row)}: the closed form and the simulation of its replica part by more than "
            f"{DISAGREE:.0%}: {'; '.join(parts)} (the README's known misses say where and why)"]  # fmt: skip


def _simulated_misses(row: Row, slos: Sequence[Slo], result: SimResult) -> list[str]:
    """An SLO the closed form meets and the simulation of the same replica misses, said where the row is read:
    a loop the closed form does not price (users in a lasting convoy, README's known misses) must not pass as
    checked."""
    out = []
    for slo in slos:
        got = result.percentile(slo.metric, slo.quantile)
        if got is not None and got > slo.seconds:
            out.append(f"{search.row_label(row)}: simulated {slo.metric.upper()} {slo.percentile} {fmt.ms(got)} misses "
                       f"its SLO of {fmt.ms(slo.seconds)}, which the closed form meets: trust the simulation here "
                       "(README, known misses)")  # fmt: skip
    return out
