"""`tokcost estimate`: one model on one GPU type and layout, ceiling and expected side by side."""

from __future__ import annotations

import sys

from tokcost import fmt, plots
from tokcost.cli.common import check_force_with_plot, workload_from_flags
from tokcost.cli.deploy import degree_named_as_given, layout_flags, unused_network, warn
from tokcost.cli.options import (
    BatchOpt,
    ComputeOpt,
    DpOpt,
    EngineOpt,
    EpOpt,
    ExplainOpt,
    FlashOpt,
    ForceOpt,
    Format,
    FormatOpt,
    GpuOpt,
    GpusOpt,
    GpusPerNodeOpt,
    JourneyOpt,
    KvOpt,
    ModelOpt,
    NetworkOpt,
    OutputOpt,
    PlotOpt,
    PpOpt,
    PrefixOpt,
    PriceOpt,
    PromptOpt,
    RedundantOpt,
    TpOpt,
    WeightsOpt,
)
from tokcost.cli.render import Table, flash_note, flatten, print_csv, print_json, print_tables
from tokcost.engine.estimate import Estimate
from tokcost.engine.estimate import estimate as run_estimate
from tokcost.engine.journey import Journey, JourneyRow, journey
from tokcost.engine.passcost import PassCost
from tokcost.engine.report import band_dict, bottleneck, estimate_dict, host_bound, journey_dict, journey_row_dict
from tokcost.hardware.library import load_gpu, network_for
from tokcost.models.library import load_model
from tokcost.profiles import engine_for

GLOSSARY = """
Metrics: TTFT = time to first token = prefill time. TPOT = time per output token = (E2E - TTFT) / (O - 1), the
mean decode step as the context grows (none with one output token). E2E = TTFT + (O - 1) x TPOT. tokens/s =
batch / TPOT. Critical batches: where the weight matmuls turn compute-bound, and where KV reads outweigh weight
reads. Ceiling = datasheet peaks; expected = what the GPU sustains (measured copy and GEMM shares) x the engine
era's kernel efficiencies and host costs (--engine vllm, vllm@0.6, ...; provenance under the table), with an 80%
band from published runs each predicted by a fit that never read their source.
"""


def estimate(
    model: ModelOpt,
    gpu: GpuOpt,
    gpus: GpusOpt = None,
    tp: TpOpt = None,
    pp: PpOpt = 1,
    ep: EpOpt = 1,
    dp: DpOpt = 1,
    redundant_experts: RedundantOpt = 0,
    gpus_per_node: GpusPerNodeOpt = None,
    network: NetworkOpt = None,
    engine: EngineOpt = None,
    batch: BatchOpt = 1,
    prompt: PromptOpt = 1024,
    output: OutputOpt = 256,
    weights: WeightsOpt = None,
    kv_dtype: KvOpt = None,
    compute_dtype: ComputeOpt = None,
    cached_prefix: PrefixOpt = 0,
    flash_attention: FlashOpt = True,
    price: PriceOpt = None,
    format: FormatOpt = Format.table,
    explain_: ExplainOpt = False,
    journey_: JourneyOpt = False,
    plot: PlotOpt = None,
    force: ForceOpt = False,
) -> None:
    """Estimate TTFT, TPOT, throughput, memory and cost. Example: tokcost estimate -m llama-3.1-8b -g h100-sxm"""
    check_force_with_plot(force, plot)
    workload = workload_from_flags(
        batch=batch,
        prompt_tokens=prompt,
        output_tokens=output,
        weights_dtype=weights,
        kv_dtype=kv_dtype,
        compute_dtype=compute_dtype,
        cached_prefix_tokens=cached_prefix,
        flash_attention=flash_attention,
        price_per_hour_usd=price,
        **layout_flags(gpus, tp, pp, ep, dp, gpus_per_node, redundant_experts),
    )
    gpu_spec = load_gpu(gpu)
    with degree_named_as_given(gpus, tp, pp, dp):
        result = run_estimate(load_model(model), gpu_spec, workload, network_for(gpu_spec, network), engine_for(engine))
    warn(unused_network(network, [result.layout]))
    render_estimate(result, format, explain_=explain_, journey_=journey_)
    if plot is not None:  # the roofline chart; with --journey, the journey's bars beside it
        plots.save(plots.estimate_figure(result, journey=journey_), plot, force=force, asker="--plot")


estimate.__doc__ = (estimate.__doc__ or "") + "\n" + GLOSSARY


def render_estimate(e: Estimate, format: Format, *, explain_: bool, journey_: bool) -> None:
    """Print one estimate in `format`; explanations and warnings never break a machine-readable format."""
    from tokcost.engine.explain import explanation_lines  # only --explain reads the derivation

    lines = explanation_lines(e) if explain_ else []
    if format == Format.json:
        data = estimate_dict(e)
        if explain_:
            data["explain"] = lines
        if journey_ or explain_:  # the journey is a section of the explanation too
            data["journey"] = journey_dict(journey(e))
        print_json(data)
        return
    warn(e.warnings)
    if format == Format.csv:
        print_csv(journey_csv(journey(e)) if journey_ else [flatten(estimate_dict(e))])
        if explain_:
            sys.stderr.write("\n".join(lines) + "\n")
        return
    tables = estimate_tables(e) + (journey_tables(journey(e)) if journey_ or explain_ else [])
    print_tables(tables, format.value)
    if explain_:
        from tokcost.engine.explain import explain  # only --explain reads the derivation

        markdown = format == Format.markdown
        out = ["", "## How these numbers are derived" if markdown else "How these numbers are derived:"]
        for head, body in explain(e):
            out.append(f"\n**{head}**" if markdown else f"\n{head}")
            out += [f"- {line}" if markdown else f"  {line}" for line in body]
        sys.stdout.write("\n".join(out) + "\n")


def _times(e: Estimate, attr: str) -> list[str]:
    return [_ms(getattr(e.ceiling, attr)), _ms(getattr(e.expected, attr))]


def _ms(seconds: float | None) -> str:
    return "n/a" if seconds is None else fmt.ms(seconds)


def _past_context(e: Estimate) -> list[str]:
    """A note in the table itself (stderr's warning is lost when a table is pasted) when the request is longer
    than the model's context: a server refuses it, and the figures only extend the roofline past it."""
    wl, m = e.workload, e.model
    if wl.total_tokens <= m.max_context:
        return []
    what, tokens = ("the prompt alone", wl.prompt_tokens) if wl.prompt_tokens > m.max_context else (
        "prompt + output", wl.total_tokens)  # fmt: skip
    return [f"past the context: {what} ({tokens:,} tokens) exceeds {m.name}'s {m.max_context:,}; a server refuses "
            "this request, and these figures only extend the roofline past it"]  # fmt: skip


def band_spans(e: Estimate) -> dict[str, str]:
    """Each banded figure's 80% band as text ('5.1-7.9 ms', '127-196'), from the engine's band."""
    out = {}
    for key, span in band_dict(e).items():
        if key.endswith("_per_s"):
            out[key] = "n/a" if span is None else f"{fmt.rate(span[0])} - {fmt.rate(span[1])}"
        elif key.endswith("_s"):
            out[key] = "n/a" if span is None else f"{_ms(span[0])} - {_ms(span[1])}"
    return out


def _costs(e: Estimate) -> list[list[str]]:
    """$ and J per token, ceiling and expected; none where the deployment does not fit (as compare and sweep)."""
    c, x = e.ceiling, e.expected
    rows = [
        ["$/1M input tokens", fmt.usd(c.usd_per_million_input_tokens), fmt.usd(x.usd_per_million_input_tokens), ""],
        ["$/1M output tokens", fmt.usd(c.usd_per_million_output_tokens), fmt.usd(x.usd_per_million_output_tokens), ""],
        ["J/output token (TDP)", fmt.joules(c.joules_per_output_token), fmt.joules(x.joules_per_output_token), ""],
    ]  # fmt: skip
    if not e.memory.fits:
        return [[name, "does not fit", "does not fit", ""] for name, *_ in rows]
    return rows


def estimate_tables(e: Estimate) -> list[Table]:
    """Performance (ceiling vs expected), memory of the fullest GPU, and the decode step's breakdown."""
    wl, p, c, x, mem, lay = e.workload, e.precision, e.ceiling, e.expected, e.memory, e.layout
    header = (
        f"{e.model.name} on {lay.gpus}x {e.gpu.name}{f' ({lay.label()})' if lay.gpus > 1 else ''}"
        f" · batch {wl.batch:,} · prompt {wl.prompt_tokens:,}"
        f" · output {wl.output_tokens:,} · weights {p.weights}"
        + (f" (experts {p.experts})" if p.experts != p.weights else "")
        + (f" (attention {p.attention})" if p.attention != p.weights else "")
        + f" · KV {p.kv} · compute {p.compute}"
        + flash_note(p.fused_attention)
    )
    per_seq = [fmt.rate(s.decode_tokens_per_s / wl.batch if s.decode_tokens_per_s else None) for s in (c, x)]
    spans = band_spans(e)
    perf = Table(
        "Performance",
        ["metric", "ceiling", "expected", "expected 80% band"],
        header=header,
        rows=[
            ["TTFT", *_times(e, "ttft_s"), spans["ttft_s"]],
            ["TPOT", *_times(e, "tpot_s"), spans["tpot_s"]],
            ["E2E", *_times(e, "e2e_s"), spans["e2e_s"]],
            [
                "decode tokens/s",
                fmt.rate(c.decode_tokens_per_s),
                fmt.rate(x.decode_tokens_per_s),
                spans["decode_tokens_per_s"],
            ],
            ["tokens/s per sequence", *per_seq, ""],
            ["prefill bound", c.prefill_bound, x.prefill_bound, ""],
            ["decode bound", c.decode_bound or "n/a", x.decode_bound or "n/a", ""],
            *_costs(e),
        ],  # fmt: skip
        notes=[
            bottleneck(e),
            *filter(None, [host_bound(e)]),
            f"expected: {e.gpu.expected_provenance_at(e.precision.compute)}; engine {e.deployment.engine.label}",
            f"80% band: {e.band.basis}",
            *_past_context(e),
        ],  # fmt: skip
    )
    b = mem.per_gpu
    fits = "yes" if mem.fits else f"no: needs {mem.min_gpus} GPUs ({mem.min_layout})" if mem.min_gpus else "no"
    memory = Table(
        f"Memory per GPU (the fullest of {lay.gpus})",
        ["item", "value"],
        [
            ["weights", fmt.gb(b.weights)],
            *_cache_rows(e),
            ["activation workspace", fmt.gb(b.workspace)],
            ["reserve", fmt.gb(b.reserve)],
            ["total / capacity", f"{fmt.gb(b.total)} / {fmt.gb(mem.capacity_bytes_per_gpu)}"],
            ["capacity from", mem.capacity_basis],
            ["fits", fits],
            ["max batch at this context", f"{mem.max_batch:,}"],
            ["max context at this batch", f"{mem.max_context:,}"],
            [
                "critical batch: matmuls compute-bound",
                f"{e.critical_batch_compute:,}" if e.critical_batch_compute else "never",
            ],
            [
                f"critical batch: {'KV + state' if mem.state_bytes_per_sequence else 'KV'} reads > weight reads",
                f"{e.critical_batch_kv:,}" if e.critical_batch_kv else "never",
            ],
        ],
    )
    step = c.decode_step or c.prefill
    what = f"Decode step at {e.mean_decode_context:,.0f} cached tokens" if c.decode_step else "Prefill (no decode step)"
    # with pipeline stages a part's time is one stage's, as its FLOPs and bytes are: the step takes it in turn
    factor = step.pipeline_factor
    breakdown = Table(
        f"{what} (ceiling, busiest GPU{' of the slowest stage' if step.pp > 1 else ''})",
        ["part", "FLOPs", "bytes", "time", "share", "bound"],
        [
            [
                part.name,
                fmt.tflop(part.flops),
                fmt.gb(part.bytes),
                fmt.ms(part.seconds / factor),
                f"{part.seconds / step.seconds:.0%}",
                part.bound,
            ]
            for part in step.components
            if part.seconds >= 0.0005 * step.seconds  # parts under 0.05% of the step are left out
        ],
        notes=[_step_note(step), *_overlap_note(step)],
    )
    return [perf, memory, breakdown]


def _step_note(step: PassCost) -> str:
    """The step from the parts: one stage's time, taken in turn by every pipeline stage (and the overhead)."""
    if step.pp == 1:
        return f"step = {fmt.ms(step.seconds)}"
    overhead = f" + {fmt.ms(step.overhead_s)} overhead" if step.overhead_s else ""
    return (f"step = {step.pipeline_factor:.3g} stage-times x {fmt.ms(step.stage_seconds)}{overhead} = "
            f"{fmt.ms(step.seconds)}: the {step.pp} pipeline stages take the step in turn ({step.schedule} "
            "schedule); each part's FLOPs, bytes and time are one stage's")  # fmt: skip


def _overlap_note(step: PassCost) -> list[str]:
    """Where collectives run beside the kernels, how much of them the step hides (the shares then sum past 100%)."""
    hidden = step.hidden_s  # one stage's, as the table's times are
    if hidden <= 0:
        return []
    comm = step.part("communication").seconds / step.pipeline_factor
    return [f"communication runs beside the kernels: {fmt.ms(hidden)} of its {fmt.ms(comm)} is hidden behind them "
            "(the ceiling hides all it can), so the shares add up to more than 100%"]  # fmt: skip


def _cache_rows(e: Estimate) -> list[list[str]]:
    """The KV cache of the attention layers and, for a hybrid, the state of its linear / state-space layers."""
    m, mem, b = e.model, e.memory, e.memory.per_gpu
    kv = f"{fmt.gb(b.kv)} ({mem.kv_bytes_per_token:,.0f} B/token, whole model)"
    if not mem.state_bytes_per_sequence:
        return [["KV cache", kv]]
    state_layers = " + ".join(
        f"{m.plan.count(mixer=k)} {_STATE_NAMES[k]}" for k in _STATE_NAMES if m.plan.count(mixer=k)
    )
    return [
        [f"KV cache ({m.kv_layers} attention layers)", kv],
        [f"state ({state_layers} layers)", f"{fmt.si(b.state, 'B')} ({mem.state_bytes_per_sequence:,.0f} B/sequence, "
                                           "whole model, at any length)"],
    ]  # fmt: skip


_STATE_NAMES = {"linear": "linear-attention", "mamba": "Mamba-2"}


def _journey_table(title: str, rows: list[JourneyRow], seconds: float) -> Table:
    table = Table(title, ["stage", "x", "FLOPs", "read", "written", "ceiling", "expected", "share", "bound"])
    for r in rows:
        where = r.name + (f" [{r.block}]" if r.block else "")
        table.rows.append(
            [
                where,
                f"{r.count:,}" if r.count else "",
                fmt.si(r.flops, "FLOP") if r.flops else "",
                fmt.si(r.bytes_read, "B") if r.bytes_read else "",
                fmt.si(r.bytes_written, "B") if r.bytes_written else "",
                fmt.seconds(r.ceiling_s) if r.ceiling_s else "",
                fmt.seconds(r.expected_s) if r.expected_s else "",
                f"{r.share:.1%}" if r.share else "",
                r.bound,
            ]
        )
    table.notes.append(f"the rows add up to {fmt.ms(seconds)} (ceiling); host rows sit outside the GPU roofline")
    if any(r.bound == "interconnect" for r in rows):  # journey._exposed: the pass's clock, not the collective's own
        table.notes.append("a collective that runs beside the kernels counts only its share not hidden behind them "
                           "(the ceiling hides all it can); --explain prints each collective's whole time")  # fmt: skip
    return table


def journey_tables(j: Journey) -> list[Table]:
    """One token's journey: the decode step, then the prefill."""
    tables = []
    if j.decode is not None and j.decode_seconds is not None:
        tables.append(_journey_table("Journey of a decode step (busiest GPU)", j.decode, j.decode_seconds))
    tables.append(_journey_table("Journey of the prefill (busiest GPU)", j.prefill, j.prefill_seconds))
    return tables


def journey_csv(j: Journey) -> list[dict[str, object]]:
    """The journey's rows with their phase, each phase closed by the ceiling pass time its rows add up to, for CSV
    (one table: the estimate's own figures are `-f csv` without --journey, or `-f json` with it)."""
    out: list[dict[str, object]] = []
    for phase, rows, seconds in (
        ("decode_step", j.decode, j.decode_seconds),
        ("prefill", j.prefill, j.prefill_seconds),
    ):
        if rows is None:
            continue
        out += [{"phase": phase, **journey_row_dict(r)} for r in rows]
        total = dict.fromkeys(journey_row_dict(rows[0]), "")
        out.append({"phase": phase, **total, "name": "total", "ceiling_s": seconds, "note": "the ceiling pass time "
                    "the rows add up to (host rows outside it)"})  # fmt: skip
    return out
