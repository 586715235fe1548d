"""`tokcost plan`: from traffic and latency targets to the cheapest fleet; parse, load, plan, render."""

from __future__ import annotations

import sys
import time
from enum import Enum
from pathlib import Path
from typing import Annotated, Optional

import typer

from tokcost import plots
from tokcost.cli.common import check_force_with_plot, format_list, gpu_names, int_list, per_gpu_values
from tokcost.cli.deploy import warn
from tokcost.cli.options import EngineOpt, FlashOpt, ForceOpt, Format, FormatOpt, ModelOpt, NetworkOpt, PlotOpt
from tokcost.cli.plan_render import plan_tables
from tokcost.cli.render import Progress, flatten, print_csv, print_json, print_tables
from tokcost.hardware.library import load_gpu, network_for
from tokcost.models.library import load_model
from tokcost.profiles import engine_for
from tokcost.serving.explain import explain_lines, explain_plan
from tokcost.serving.fleet import REPORTED
from tokcost.serving.inputs import (
    MAX_JOBS,
    MAX_REQUESTS,
    MAX_SIMULATED_STEPS,
    MIN_REQUESTS,
    plan_space,
    plan_traffic,
)  # fmt: skip
from tokcost.serving.report import config_dict, plan_dict
from tokcost.serving.rows import Row
from tokcost.serving.run import run_plan
from tokcost.serving.search import DEFAULT_CHUNKS, Plan
from tokcost.serving.traffic import parse_duration, parse_slo
from tokcost.traces import MAX_TRACE_BYTES, MAX_TRACE_ROWS, read_trace


class Mode(str, Enum):
    """Serving layouts to plan."""

    aggregated = "aggregated"
    disaggregated = "disaggregated"
    both = "both"


class Prefill(str, Enum):
    """How a step that runs prompt tokens treats the decodes."""

    engine = "engine"
    apart = "apart"
    mixed = "mixed"


def plan(
    model: ModelOpt,
    gpu: Annotated[str, typer.Option("--gpu", "-g", help="GPUs to consider, comma-separated, or 'all'.")],
    rate: Annotated[Optional[float], typer.Option("--rate", help="Requests/s, Poisson arrivals (open loop).")] = None,
    concurrency: Annotated[
        Optional[int], typer.Option("--concurrency", help="Users, each sending its next request after its last answer.")
    ] = None,
    think_time: Annotated[
        Optional[str], typer.Option("--think-time", help="Mean pause between a user's requests (with --concurrency).")
    ] = None,
    prompt: Annotated[Optional[int], typer.Option("--prompt", "-p", help="Mean prompt tokens (default 1024).")] = None,
    output: Annotated[Optional[int], typer.Option("--output", "-o", help="Mean output tokens (default 256).")] = None,
    prompt_dist: Annotated[
        Optional[str], typer.Option("--prompt-dist", help="fixed (default), exponential or lognormal:CV.")
    ] = None,
    output_dist: Annotated[
        Optional[str], typer.Option("--output-dist", help="fixed (default), exponential or lognormal:CV.")
    ] = None,
    trace: Annotated[
        Optional[Path],
        typer.Option(
            "--trace",
            help=f"JSONL, one request a line: prompt_tokens, output_tokens[, arrival_s]; at most "
            f"{MAX_TRACE_ROWS:,} lines and {MAX_TRACE_BYTES // 1_000_000} MB.",
        ),
    ] = None,  # fmt: skip
    cached_prefix: Annotated[int, typer.Option("--cached-prefix", help="Prompt tokens shared by all, cached.")] = 0,
    slo: Annotated[
        Optional[list[str]],
        typer.Option("--slo", help="METRIC_PCT=VALUE, repeatable or comma-separated: ttft_p90=500ms,tpot_p90=40ms."),
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
    redundant_experts: Annotated[
        int,
        typer.Option("--redundant-experts", help="Expert copies on every layout with --ep > 1 (EPLB; MoE)."),
    ] = 0,
    engine: EngineOpt = None,
    network: NetworkOpt = None,
    plot: PlotOpt = None,
    force: ForceOpt = False,
    weights: Annotated[Optional[str], typer.Option("--weights", help="Weight formats, comma-separated.")] = None,
    kv_dtype: Annotated[Optional[str], typer.Option("--kv-dtype", help="KV cache formats, comma-separated.")] = None,
    compute_dtype: Annotated[
        Optional[str], typer.Option("--compute-dtype", help="Matmul dtypes (default: fp8/fp4 where native).")
    ] = None,
    flash_attention: FlashOpt = True,
    chunk: Annotated[
        Optional[str],
        typer.Option(
            "--chunk",
            help="Prefill tokens per step: the engine's default on each GPU; a list to search; "
            f"or 'search' ({', '.join(map(str, DEFAULT_CHUNKS))}).",
        ),
    ] = None,  # fmt: skip
    max_running: Annotated[
        Optional[int],
        typer.Option(
            "--max-running",
            help="Most sequences running at once (default: the engine's, e.g. vLLM's "
            "max_num_seqs; none: the KV cache).",
            min=1,
            max=10_000_000,
        ),
    ] = None,  # fmt: skip
    prefill: Annotated[
        Prefill,
        typer.Option(
            "--prefill",
            help="engine: as the engine schedules it (SGLang and vLLM before V1: apart); apart: prompt steps run "
            "alone and the decodes wait them out; mixed: prompt chunks ride beside the decodes.",
        ),
    ] = Prefill.engine,  # fmt: skip
    mode: Annotated[Mode, typer.Option("--mode", help="aggregated, disaggregated or both.")] = Mode.aggregated,
    max_gpus: Annotated[Optional[int], typer.Option("--max-gpus", help="Largest fleet to accept.")] = None,
    headroom: Annotated[float, typer.Option("--headroom", help="Capacity kept free for bursts.")] = 0.2,
    price: Annotated[
        Optional[str],
        typer.Option("--price", help="USD per GPU-hour: one value, one per --gpu, or NAME=USD (default: the spec's)."),
    ] = None,
    simulate: Annotated[bool, typer.Option("--simulate", help="Check the top 3 rows by simulation.")] = False,
    requests: Annotated[
        Optional[int],
        typer.Option(
            "--requests",
            help=f"Requests per simulation ({MIN_REQUESTS}..{MAX_REQUESTS:,}, default 4,000 or the most that fit; "
            f"at most {MAX_SIMULATED_STEPS:,} prefill steps over the rows).",
        ),
    ] = None,  # fmt: skip
    seed: Annotated[Optional[int], typer.Option("--seed", help="Simulation seed (default 0).")] = None,
    jobs: Annotated[
        Optional[int],
        typer.Option(
            "--jobs",
            "-j",
            min=1,
            max=MAX_JOBS,
            help="Worker processes for the search (default on Linux: one per CPU where lengths vary; 1: none).",
        ),
    ] = None,
    top: Annotated[int, typer.Option("--top", help="Rows shown in the tables.", min=1, max=10_000)] = 10,
    format: FormatOpt = Format.table,
    explain_: Annotated[bool, typer.Option("--explain", help="Show the serving model and its arithmetic.")] = False,
) -> None:
    """Plan the cheapest fleet for a traffic and SLOs; at most 600 search points (GPU x format x layout x chunk). Example: tokcost plan -m llama-3.1-70b --rate 20 --prompt 2048 --output 300 --slo ttft_p90=500ms --slo tpot_p90=40ms --gpu h100-sxm,h200,mi300x,l40s"""  # noqa: E501
    started = time.perf_counter()
    check_force_with_plot(force, plot)
    rows = read_trace(trace) if trace is not None else None
    traffic = plan_traffic(
        rate=rate, concurrency=concurrency, think_time_s=_think(think_time), prompt_tokens=prompt,
        output_tokens=output, prompt_dist=prompt_dist, output_dist=output_dist, cached_prefix_tokens=cached_prefix,
        trace=(rows.prompts, rows.outputs, rows.arrivals_s) if rows else None,
        trace_name=str(rows.path) if rows else "",
    )  # fmt: skip
    slos = [parse_slo(s) for given in slo or [] for s in given.split(",")]  # repeated, or a list as --gpu takes
    gpus = tuple(load_gpu(name) for name in gpu_names(gpu))
    space = plan_space(
        gpus=gpus, engine=engine_for(engine), tp=_ints(tp, "--tp", 4096), pp=_ints(pp, "--pp", 1024),
        ep=_ints(ep, "--ep", 4096), dp=_ints(dp, "--dp", 4096), weights=_formats(weights, "--weights"),
        kv_dtypes=_formats(kv_dtype, "--kv-dtype"), compute_dtypes=_formats(compute_dtype, "--compute-dtype"),
        chunks=_chunks(chunk), max_running=max_running, prefill=prefill.value, mode=mode.value, max_gpus=max_gpus,
        headroom=headroom,
        prices=per_gpu_values(price, [g.name for g in gpus], "--price", float),  # type: ignore[arg-type]
        networks={g.name: net for g in gpus if (net := network_for(g, network)) is not None},
        flash_attention=flash_attention, redundant_experts=redundant_experts,
    )  # fmt: skip
    progress = Progress(sys.stderr, started)
    try:
        result = run_plan(load_model(model), traffic, slos, space, simulate=simulate, requests=requests,
                          seed=seed, jobs=jobs, progress=progress)  # fmt: skip
    finally:
        progress.clear()
    elapsed = time.perf_counter() - started
    _render(result, format, explain_, top, elapsed)
    if plot is not None:  # $/hour against p90 TPOT and TTFT, labelled, SLOs dashed, the chosen configuration starred
        from tokcost.plots.plan import frontier_points, plan_slos

        figure = plots.plan_figure(frontier_points(result), slos=plan_slos(result))
        plots.save(figure, plot, force=force, asker="--plot")


def _think(text: str | None) -> float | None:
    if text is None:
        return None
    return parse_duration(text, "--think-time", allow_zero=True)


def _formats(value: str | None, flag: str) -> list[str] | None:
    return None if value is None else format_list(value, flag)


def _ints(value: str | None, flag: str, high: int) -> list[int] | None:
    return None if value is None else int_list(value, flag, 1, high)


def _chunks(value: str | None) -> tuple[int, ...] | str | None:
    if value is None or value.strip().lower() == "search":  # plan_space resolves 'search'
        return value
    return tuple(int_list(value, "--chunk", 16, 1_000_000))


PERCENTILES = ("ttft_s", "ttft_lock_step_s", "tpot_s", "itl_s", "e2e_s")


def _csv_config(row: Row) -> dict:
    """A row's JSON with each unknown percentile set as its p50/p90/p99 columns, empty: the CSV's header is the same
    whether a fleet was sized or not (null there in JSON)."""
    data = config_dict(row)
    for scenario in ("expected", "ceiling"):
        for figures in (data.get(scenario), (data.get(scenario) or {}).get("band")):
            for key in PERCENTILES if isinstance(figures, dict) else ():
                if key in figures and figures[key] is None:
                    figures[key] = dict.fromkeys(REPORTED)
    return data


def _render(result: Plan, format: Format, explain: bool, top: int, elapsed: float) -> None:
    if format == Format.json:
        print_json(plan_dict(result, explain_lines(result) if explain else None))
        return
    warn(result.warnings)
    if format == Format.csv:
        print_csv([flatten(_csv_config(row)) for row in result.rows])
        if explain:
            sys.stderr.write("\n".join(explain_lines(result)) + "\n")
        return
    print_tables(plan_tables(result, top), format.value)
    sys.stderr.write(f"planned in {elapsed:.1f} s\n")  # a timing, not a result: never in what a test compares
    if explain:
        _print_explanation(result, markdown=format == Format.markdown)


def _print_explanation(result: Plan, markdown: bool) -> None:
    out = ["", "## How this plan is derived" if markdown else "How this plan is derived:"]
    for head, lines in explain_plan(result):
        out.append(f"\n**{head}**" if markdown else f"\n{head}")
        out += [f"- {line}" if markdown else f"  {line}" for line in lines]
    sys.stdout.write("\n".join(out) + "\n")
