"""`tokcost plan`: from traffic and latency targets to the cheapest fleet; parse, load, plan, render."""

from __future__ import annotations

import json
import math
import sys
import time
from enum import Enum
from pathlib import Path
from typing import Annotated, Optional

import typer

from tokcost import fmt, plots
from tokcost.cli.common import int_list, split_list, workload_from_flags
from tokcost.cli.options import EngineOpt, Format, FormatOpt, ModelOpt, NetworkOpt, PlotOpt
from tokcost.cli.render import Table, flatten, print_csv, print_json, print_tables
from tokcost.errors import UsageError
from tokcost.hardware.library import builtin_gpus, load_gpu, network_for
from tokcost.models.library import load_model
from tokcost.profiles import engine_for
from tokcost.serving import search
from tokcost.serving.explain import explain_lines, explain_plan
from tokcost.serving.report import config_dict, plan_dict
from tokcost.serving.search import DEFAULT_CHUNKS, Plan, Row, Space, precision_label, row_label, simulate_rows
from tokcost.serving.traffic import LengthDist, Slo, Traffic, parse_dist, parse_duration, parse_slo
from tokcost.units import COMPUTE_DTYPES

MAX_RATE = 1e6
SIMULATED_ROWS = 3


class Mode(str, Enum):
    """Serving layouts to plan."""

    aggregated = "aggregated"
    disaggregated = "disaggregated"
    both = "both"


def plan(
    model: ModelOpt,
    gpu: Annotated[str, typer.Option("--gpu", "-g", help="GPUs to consider, comma-separated, or 'all'.")],
    rate: Annotated[Optional[float], typer.Option("--rate", help="Requests/s, Poisson arrivals (open loop).")] = None,
    concurrency: Annotated[
        Optional[int], typer.Option("--concurrency", help="Users, each sending its next request when the last ends.")
    ] = None,
    think_time: Annotated[str, typer.Option("--think-time", help="Mean pause between a user's requests.")] = "0s",
    prompt: Annotated[Optional[int], typer.Option("--prompt", "-p", help="Mean prompt tokens (default 1024).")] = None,
    output: Annotated[Optional[int], typer.Option("--output", "-o", help="Mean output tokens (default 256).")] = None,
    prompt_dist: Annotated[str, typer.Option("--prompt-dist", help="fixed, exponential or lognormal:CV.")] = "fixed",
    output_dist: Annotated[str, typer.Option("--output-dist", help="fixed, exponential or lognormal:CV.")] = "fixed",
    trace: Annotated[
        Optional[Path],
        typer.Option("--trace", help="JSONL, one request a line: prompt_tokens, output_tokens[, arrival_s]."),
    ] = None,
    cached_prefix: Annotated[int, typer.Option("--cached-prefix", help="Prompt tokens shared by all, cached.")] = 0,
    slo: Annotated[
        Optional[list[str]], typer.Option("--slo", help="METRIC_PCT=VALUE, repeatable: ttft_p90=500ms tpot_p90=40ms.")
    ] = None,
    tp: Annotated[Optional[str], typer.Option("--tp", help="TP degrees (default: valid ones that fit, to 8).")] = None,
    pp: Annotated[
        Optional[str],
        typer.Option("--pp", help="Pipeline stages (default: 1, or 2-4 whole nodes if one is too small)."),
    ] = None,
    ep: Annotated[
        Optional[str], typer.Option("--ep", help="Expert-parallel degrees (default for MoE: 1 and the stage's GPUs).")
    ] = None,
    dp: Annotated[Optional[str], typer.Option("--dp", help="Data-parallel attention replicas (MoE).")] = None,
    engine: EngineOpt = None,
    network: NetworkOpt = None,
    plot: PlotOpt = None,
    weights: Annotated[Optional[str], typer.Option("--weights", help="Weight formats, comma-separated.")] = None,
    kv_dtype: Annotated[Optional[str], typer.Option("--kv-dtype", help="KV cache formats, comma-separated.")] = None,
    compute_dtype: Annotated[
        Optional[str], typer.Option("--compute-dtype", help="Matmul dtypes (default: fp8/fp4 where native).")
    ] = None,
    chunk: Annotated[
        Optional[str], typer.Option("--chunk", help="Prefill token budgets per step (default: searched).")
    ] = None,
    mode: Annotated[Mode, typer.Option("--mode", help="aggregated, disaggregated or both.")] = Mode.aggregated,
    max_gpus: Annotated[Optional[int], typer.Option("--max-gpus", help="Largest fleet to accept.")] = None,
    headroom: Annotated[float, typer.Option("--headroom", help="Capacity kept free for bursts.")] = 0.2,
    price: Annotated[
        Optional[str], typer.Option("--price", help="USD per GPU-hour: NAME=USD,... (or one number for all).")
    ] = None,
    simulate: Annotated[bool, typer.Option("--simulate", help="Check the top rows by simulation.")] = False,
    requests: Annotated[int, typer.Option("--requests", help="Requests per simulation.")] = 4000,
    seed: Annotated[int, typer.Option("--seed", help="Simulation seed.")] = 0,
    top: Annotated[int, typer.Option("--top", help="Rows shown in the tables.")] = 10,
    format: FormatOpt = Format.table,
    explain_: Annotated[bool, typer.Option("--explain", help="Show the serving model and its arithmetic.")] = False,
) -> None:
    """Plan the cheapest fleet for a traffic and SLOs. Example: tokcost plan -m llama-3.1-70b --rate 20 --prompt 2048 --output 300 --slo ttft_p90=500ms --slo tpot_p90=40ms --gpu h100-sxm,h200,mi300x,l40s"""  # noqa: E501
    started = time.perf_counter()
    traffic = _traffic(rate, concurrency, think_time, prompt, output, prompt_dist, output_dist, trace, cached_prefix)
    slos = [parse_slo(s) for s in slo or []]
    names = builtin_gpus() if gpu.strip().lower() == "all" else split_list(gpu, "--gpu")
    gpus = tuple(load_gpu(name) for name in names)
    if mode != Mode.aggregated and traffic.rate_rps is None:
        raise UsageError("--mode: disaggregated plans need --rate (or a trace with arrival_s)")
    space = Space(
        gpus=gpus,
        tps=tuple(int_list(tp, "--tp", 1, 64)) if tp else None,
        pps=tuple(int_list(pp, "--pp", 1, 64)) if pp else None,
        eps=tuple(int_list(ep, "--ep", 1, 4096)) if ep else None,
        dps=tuple(int_list(dp, "--dp", 1, 4096)) if dp else (1,),
        engine=engine_for(engine),
        weights=_formats(weights, "weights_dtype"),
        kv_dtypes=_formats(kv_dtype, "kv_dtype"),
        compute_dtypes=_compute(compute_dtype),
        chunks=tuple(int_list(chunk, "--chunk", 16, 1_000_000)) if chunk else DEFAULT_CHUNKS,
        mode=mode.value,
        max_gpus=_positive_int(max_gpus, "--max-gpus"),
        headroom=_headroom(headroom),
        prices=_prices(price, [g.name for g in gpus]),
        networks={g.name: net for g in gpus if (net := network_for(g, network)) is not None},
    )
    if simulate and (requests < 100 or requests > 1_000_000):
        raise UsageError(f"--requests: must be in 100..1,000,000 (got {requests})")
    if top < 1:
        raise UsageError(f"--top: must be at least 1 (got {top})")
    result = search.plan(load_model(model), traffic, slos, space)
    result.warnings += _provenance_warnings(result)
    if simulate:
        simulate_rows(result, SIMULATED_ROWS, requests, seed)
    elapsed = time.perf_counter() - started
    _render(result, format, explain_, top, elapsed)
    if plot is not None:  # cost against p90 TPOT and TTFT, the frontier joined, the chosen configuration starred
        plots.save(plots.plan_figure(frontier_points(result)), plot)


def frontier_points(result: Plan) -> list[plots.FrontierPoint]:
    """One point per configuration planned (expected), the cheapest that meets every SLO chosen."""
    chosen = next((r for r in result.rows if r.expected.meets_slo), None)
    out = []
    for row in result.rows:
        x = row.expected
        out.append(plots.FrontierPoint(
            row_label(row), x.usd_per_million_output_tokens, (x.tpot_s or {}).get("p90"), (x.ttft_s or {}).get("p90"),
            meets_slo=x.meets_slo, chosen=row is chosen,
        ))  # fmt: skip
    return out


def _render(result: Plan, format: Format, explain: bool, top: int, elapsed: float) -> None:
    if format == Format.json:
        print_json(plan_dict(result, explain_lines(result) if explain else None))
        return
    for warning in result.warnings:
        sys.stderr.write(f"warning: {warning}\n")
    if format == Format.csv:
        print_csv([flatten(config_dict(row)) for row in result.rows])
        if explain:
            sys.stderr.write("\n".join(explain_lines(result)) + "\n")
        return
    print_tables(plan_tables(result, top), format.value)
    sys.stderr.write(f"planned in {elapsed:.1f} s\n")  # a timing, not a result: never in what a test compares
    if explain:
        _print_explanation(result, markdown=format == Format.markdown)


def _traffic(
    rate: float | None, concurrency: int | None, think_time: str, prompt: int | None, output: int | None,
    prompt_dist: str, output_dist: str, trace: Path | None, cached_prefix: int,
) -> Traffic:  # fmt: skip
    arrivals: tuple[float, ...] = ()
    if trace is not None:
        if prompt is not None or output is not None:
            raise UsageError("--trace: lengths come from the trace; drop --prompt and --output")
        prompts, outputs, arrivals = read_trace(trace)
        if rate is None and concurrency is None and len(arrivals) > 1 and arrivals[-1] > arrivals[0]:
            rate = (len(arrivals) - 1) / (arrivals[-1] - arrivals[0])
        if min(prompts) <= cached_prefix:
            raise UsageError(f"--cached-prefix: must be below the trace's shortest prompt ({min(prompts)} tokens)")
        prompt_len = LengthDist("empirical", sum(prompts) / len(prompts), values=tuple(prompts))
        output_len = LengthDist("empirical", sum(outputs) / len(outputs), values=tuple(outputs))
    else:
        # the Workload validates lengths and the prefix exactly as estimate does
        wl = workload_from_flags(prompt_tokens=prompt or 1024, output_tokens=output or 256,
                                 cached_prefix_tokens=cached_prefix)  # fmt: skip
        prompt_len = parse_dist(prompt_dist, wl.prompt_tokens, "--prompt-dist")
        output_len = parse_dist(output_dist, wl.output_tokens, "--output-dist")
    if (rate is None) == (concurrency is None):
        raise UsageError("--rate / --concurrency: give exactly one (requests/s, or users in a closed loop)")
    if rate is not None and not (math.isfinite(rate) and 0 < rate <= MAX_RATE):
        raise UsageError(f"--rate: must be above 0 and at most {MAX_RATE:,.0f} requests/s (got {rate:g})")
    if concurrency is not None and not 1 <= concurrency <= 10_000_000:
        raise UsageError(f"--concurrency: must be in 1..10,000,000 users (got {concurrency})")
    think = 0.0 if think_time.strip() in ("0", "0s", "0ms") else parse_duration(think_time, "--think-time")
    return Traffic(
        prompt=prompt_len.shifted(cached_prefix), output=output_len, rate_rps=rate, concurrency=concurrency,
        think_time_s=think, cached_prefix_tokens=cached_prefix, arrivals_s=arrivals,
    )  # fmt: skip


def read_trace(path: Path) -> tuple[list[int], list[int], tuple[float, ...]]:
    """(prompt tokens, output tokens, arrival times if every line has one) from a JSONL trace."""
    try:
        lines = path.read_text().splitlines()
    except OSError as exc:
        raise UsageError(f"--trace: {path}: cannot read ({exc.strerror})") from None
    prompts, outputs, arrivals = [], [], []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
        except json.JSONDecodeError as exc:
            raise UsageError(f"{path}: line {number}: not JSON ({exc.msg})") from None
        if not isinstance(item, dict):
            raise UsageError(f"{path}: line {number}: expected an object with prompt_tokens and output_tokens")
        for key, low in (("prompt_tokens", 1), ("output_tokens", 1)):
            value = item.get(key)
            if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= 100_000_000:
                raise UsageError(f"{path}: line {number}: {key}: must be an integer from 1 to 100,000,000")
        prompts.append(item["prompt_tokens"])
        outputs.append(item["output_tokens"])
        arrival = item.get("arrival_s")
        if arrival is not None:
            if isinstance(arrival, bool) or not isinstance(arrival, (int, float)) or not 0 <= arrival < 1e9:
                raise UsageError(f"{path}: line {number}: arrival_s: must be a number of seconds from 0")
            arrivals.append(float(arrival))
    if not prompts:
        raise UsageError(f"{path}: no requests in the trace")
    timed = tuple(sorted(arrivals)) if len(arrivals) == len(prompts) else ()
    return prompts, outputs, timed


def _formats(value: str | None, field: str) -> tuple[str | None, ...]:
    if value is None:
        return (None,)
    items = split_list(value, "--weights" if field == "weights_dtype" else "--kv-dtype")
    return tuple(getattr(workload_from_flags(**{field: item}), field) for item in items)


def _compute(value: str | None) -> tuple[str | None, ...]:
    if value is None:
        return (None,)
    items = split_list(value, "--compute-dtype")
    for item in items:
        if item not in COMPUTE_DTYPES:
            raise UsageError(f"--compute-dtype: {item!r} is not one of {', '.join(COMPUTE_DTYPES)}")
    return tuple(items)


def _positive_int(value: int | None, flag: str) -> int | None:
    if value is not None and not 1 <= value <= 1_000_000:
        raise UsageError(f"{flag}: must be in 1..1,000,000 (got {value})")
    return value


def _headroom(value: float) -> float:
    if not (math.isfinite(value) and 0 <= value <= 10):
        raise UsageError(f"--headroom: must be a fraction from 0 to 10 (got {value:g}); 0.2 keeps 20% free")
    return value


def _prices(value: str | None, gpus: list[str]) -> dict[str, float]:
    if value is None:
        return {}
    prices = {}
    for item in split_list(value, "--price"):
        name, sep, usd = item.rpartition("=")
        try:
            amount = float(usd)
        except ValueError:
            amount = -1.0
        if not (math.isfinite(amount) and 0 <= amount <= 100_000):
            raise UsageError(f"--price: {item!r}: USD per GPU-hour must be a number from 0 to 100,000")
        if not sep:
            prices.update(dict.fromkeys(gpus, amount))
        elif name.strip().lower() not in gpus:
            raise UsageError(f"--price: {name!r} is not among --gpu ({', '.join(gpus)})")
        else:
            prices[name.strip().lower()] = amount
    return prices


def _provenance_warnings(result: Plan) -> list[str]:
    out = []
    for gpu in result.space.gpus:
        basis = gpu.expected_provenance
        if basis.startswith("unfitted"):
            out.append(f"{gpu.name}: expected is an {basis}")
        elif basis.startswith("none"):
            out.append(f"{gpu.name}: {basis}")
    return out


# ---- rendering -------------------------------------------------------------------------------------------


def _hourly(value: float | None) -> str:
    return "no price" if value is None else f"${value:,.2f}"


def _usd(value: float | None) -> str:
    return "no price" if value is None else fmt.usd(value)


def _triple(values: dict[str, float | None] | None) -> str:
    if not values:
        return "n/a"
    return "/".join(f"{(values[k] or 0) * 1e3:,.0f}" for k in ("p50", "p90", "p99")) + " ms"


def _layout(row: Row) -> str:
    if row.prefill_layout is None:
        return row.deployment.layout.label
    return f"P {row.prefill_layout.label} + D {row.deployment.layout.label}"


def _replicas(row: Row, which: str) -> str:
    f = getattr(row, which)
    if f.gpus is None:
        return "-"
    if f.prefill_replicas is not None:
        return f"{f.prefill_replicas}P+{f.replicas}D = {f.gpus}"
    return f"{f.replicas} x {row.deployment.layout.gpus} = {f.gpus}"


def _goodput(row: Row, tokens_per_request: float) -> str:
    g = row.expected.max_rate_rps
    return f"{g:,.2f} req/s, {g * tokens_per_request / 1e3:,.1f}k tok/s"


def plan_tables(result: Plan, top: int) -> list[Table]:
    """Ranked fleets (expected), the same under ceiling, failures, the load table."""
    t, rows = result.traffic, result.rows
    passing = [r for r in rows if r.expected.meets_slo][:top]
    tokens = t.prompt_mean_tokens + t.output.mean
    fleets = Table(
        "Cheapest fleets that meet every SLO (expected)",
        ["#", "gpu", "layout", "w/kv/compute", "chunk", "replicas x GPUs", "goodput / replica", "util",
         "TTFT p50/p90/p99", "TPOT p50/p90/p99", "$/hour", "$/1M in", "$/1M out", "binding"],
        header=_header(result),
    )  # fmt: skip
    for i, row in enumerate(passing, 1):
        x = row.expected
        fleets.rows.append([
            f"{i}{'*' if row.pareto else ''}", row.deployment.gpu.name, _layout(row), precision_label(row),
            f"{row.chunk:,}", _replicas(row, "expected"), _goodput(row, tokens), f"{x.utilization or 0:.0%}",
            _triple(x.ttft_s), _triple(x.tpot_s), _hourly(x.usd_per_hour), _usd(x.usd_per_million_input_tokens),
            _usd(x.usd_per_million_output_tokens), x.binding,
        ])  # fmt: skip
    fleets.notes += _notes(result, passing)
    ceiling = Table(
        "The same under ceiling (datasheet peaks, no overhead): the fewest GPUs physics allows",
        ["#", "gpu", "layout", "replicas x GPUs", "goodput / replica", "$/hour", "binding"],
    )
    for i, row in enumerate(passing, 1):
        c = row.ceiling
        ceiling.rows.append([str(i), row.deployment.gpu.name, _layout(row), _replicas(row, "ceiling"),
                             f"{c.max_rate_rps:,.2f} req/s", _hourly(c.usd_per_hour), c.binding])  # fmt: skip
    tables = [fleets, ceiling] if passing else [fleets]
    if any(r.simulated for r in passing):
        tables.append(_simulated_table(passing))
    failing = [r for r in rows if not r.expected.meets_slo]
    if failing:
        fails = Table("Configurations that fail (expected)", ["gpu", "layout", "w/kv/compute", "why"])
        for row in failing[:top]:
            fails.rows.append([row.deployment.gpu.name, _layout(row), precision_label(row), row.expected.binding])
        if len(failing) > top:
            fails.notes.append(f"... and {len(failing) - top} more (--top, or --format json for all)")
        tables.append(fails)
    unit = "req/s" if t.rate_rps is not None else "users"
    load = Table("GPUs needed as the load changes (cheapest configuration at each load)",
                 ["load", unit, "configuration", "GPUs", "$/hour"])  # fmt: skip
    for entry in result.load:
        load.rows.append([f"{entry['multiple']:g}x", f"{entry['load']:,.4g}", str(entry["config"] or "none"),
                          str(entry["gpus"] or "-"), _hourly(entry["usd_per_hour"])])  # type: ignore[arg-type]  # fmt: skip
    return tables + [load]


def _header(result: Plan) -> str:
    t = result.traffic
    load = f"{t.rate_rps:,.4g} req/s (Poisson)" if t.rate_rps is not None else (
        f"{t.concurrency:,} users (closed loop, think {t.think_time_s:g} s)")  # fmt: skip
    slos = ", ".join(_slo_text(s) for s in result.slos) or "none (latencies at the offered load, and saturation)"
    prefix = f" · cached prefix {t.cached_prefix_tokens:,}" if t.cached_prefix_tokens else ""
    lengths = f"prompt {t.prompt_mean_tokens:,.0f} ({t.prompt.label}) · output {t.output.mean:,.0f} ({t.output.label})"
    return f"{result.model.name} · {load} · {lengths}{prefix} · SLO {slos} · headroom {result.space.headroom:.0%}"


def _slo_text(slo: Slo) -> str:
    return f"{slo.percentile} {slo.metric.upper()} <= {fmt.ms(slo.seconds)}"


def _notes(result: Plan, passing: list[Row]) -> list[str]:
    notes = []
    if not passing:
        notes.append("No configuration meets every SLO under expected; see why below.")
    notes.append(
        f"replicas = ceil(load x (1 + {result.space.headroom:g}) / goodput per replica); util = load per replica / "
        "its saturation rate; * = on the Pareto frontier of $/1M output tokens vs p90 TPOT or p90 TTFT."
    )
    notes.append(f"Planned {len(result.rows)} configurations. --explain shows the arithmetic.")
    return notes


def _simulated_table(rows: list[Row]) -> Table:
    table = Table("Closed form vs simulation (one replica at its offered load)",
                  ["#", "configuration", "TTFT p50/p90 closed form", "simulated", "TPOT p50/p90 closed form",
                   "simulated"])  # fmt: skip
    for i, row in enumerate(rows, 1):
        if not row.simulated:
            continue
        x, s = row.expected, row.simulated
        table.rows.append([str(i), row_label(row), _pair(x.ttft_s), _pair(s["ttft_s"]), _pair(x.tpot_s),
                           _pair(s["tpot_s"])])  # fmt: skip
    return table


def _pair(values: dict[str, float | None] | None) -> str:
    if not values:
        return "n/a"
    return f"{(values['p50'] or 0) * 1e3:,.1f}/{(values['p90'] or 0) * 1e3:,.1f} ms"


def _print_explanation(result: Plan, markdown: bool) -> None:
    out = ["", "## How this plan is derived" if markdown else "How this plan is derived:"]
    for head, lines in explain_plan(result):
        out.append(f"\n**{head}**" if markdown else f"\n{head}")
        out += [f"- {line}" if markdown else f"  {line}" for line in lines]
    sys.stdout.write("\n".join(out) + "\n")
