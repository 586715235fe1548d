"""`tokcost plan` as tables: what answers the buyer first (fleet, GPUs, $/hour, p90 TTFT and TPOT, what binds), the
rest after it, so a narrow terminal leaves out the detail and never the answer; every value printed whole."""

from __future__ import annotations

from tokcost import fmt
from tokcost.cli.render import Table, flash_note
from tokcost.engine.band import band_of
from tokcost.serving.fleet import Fleet
from tokcost.serving.loop import PARTIAL_LOCK
from tokcost.serving.rounds import locks_whole
from tokcost.serving.search import Plan, Row, precision_parts, row_label, short_label
from tokcost.serving.traffic import Slo

LOCK_STEP_SHOWN_ABOVE = 0.1  # the lock-step TTFT is printed beside the primary one where they differ by more


def _hourly(value: float | None) -> str:
    """$/hour as it ranks: cents, and a tenth of a cent under $10 where it is not 0 ($0.864, $2.525, $3.78), so
    that two fleets never print one price and rank apart."""
    if value is None:
        return "no price"
    text = f"{value:,.3f}" if value < 10 else f"{value:,.2f}"
    return "$" + (text[:-1] if value < 10 and text.endswith("0") else text)


def _usd(value: float | None) -> str:
    return "no price" if value is None else fmt.usd(value)


def _ms(values: dict[str, float | None] | None, key: str = "p90") -> str:
    value = (values or {}).get(key)
    if value is None:
        return "n/a"
    return f"{value * 1e3:,.0f} ms" if value < 10 else f"{value:,.1f} s"


def _lock_step(x: Fleet) -> str:
    """The lock-step p90 TTFT where users could lock and it differs from the primary by over a tenth; else "-"."""
    main, locked = (x.ttft_s or {}).get("p90"), (x.ttft_lock_step_s or {}).get("p90")
    if main is None or locked is None or abs(locked / main - 1) <= LOCK_STEP_SHOWN_ABOVE:
        return "-"
    return _ms(x.ttft_lock_step_s)


def _pair(values: dict[str, float | None] | None, keys: tuple[str, str] = ("p50", "p99")) -> str:
    if not values or any(values.get(k) is None for k in keys):
        return "n/a"
    return "/".join(f"{(values[k] or 0.0) * 1e3:,.0f}" for k in keys) + " ms"


def binding_cell(binding: str) -> str:
    """The binding constraint, short: 'tpot_p90' for 'tpot_p90 SLO', 'cap 256' for 'running cap (256)'."""
    if binding.endswith(" SLO"):
        return binding.removesuffix(" SLO")
    if binding.startswith("running cap ("):
        return "cap " + binding.removeprefix("running cap (").removesuffix(")")
    if binding.startswith("needs "):
        return "> --max-gpus"
    return {"memory bandwidth": "bandwidth"}.get(binding, binding)


def _replicas(row: Row, f: Fleet) -> str:
    if f.gpus is None:
        return "-"
    if f.prefill_replicas is not None:
        return f"{f.prefill_replicas:,}P + {f.replicas:,}D"
    return f"{f.replicas:,} x {row.deployment.layout.gpus}"


def _goodput(row: Row, output_tokens: float) -> str:
    g = row.expected.max_rate_rps
    tokens_per_s = g * output_tokens
    tokens = f"{tokens_per_s / 1e3:,.1f}k" if tokens_per_s >= 1000 else f"{tokens_per_s:,.0f}"  # never "0.0k"
    return f"{g:,.2f} req/s, {tokens} out tok/s"


def _scheduler(row: Row) -> str:
    c = row.choice
    if c is None:
        return f"{row.chunk or '-'}"
    cap = f"{c.max_running:,}" if c.max_running is not None else "KV"
    return f"{row.chunk:,} / {cap}"


# on a narrow terminal the answer stays: the fleet, its GPUs, $/hour, p90 TTFT and TPOT and what binds; before
# one of them goes, the fleet's label (a disaggregated pair's is long) and a GPU's reason for no fleet wrap
ANSWER, WRAP_LAST = ("GPUs", "$/hour", "p90 TTFT", "p90 TPOT", "binding"), ("fleet", "binding")


def fleets_table(result: Plan, passing: list[Row]) -> Table:
    """The ranked fleets under expected, the answer first."""
    t = result.traffic
    table = Table(
        "Cheapest fleets that meet every SLO (expected)",
        ["#", "fleet", "GPUs", "$/hour", "p90 TTFT", "p90 TPOT", "binding", "lock-step", "$/1M tok", "p99 ITL",
         "TTFT p50/p99", "TPOT p50/p99", "replicas", "goodput / replica", "util", "kv/compute", "chunk / cap",
         "$/1M in", "$/1M out"],
        header=header(result), answer=ANSWER, wrap_last=WRAP_LAST,
    )  # fmt: skip
    for i, row in enumerate(passing, 1):
        x = row.expected
        _, kv, compute = precision_parts(row)
        table.rows.append([
            f"{i}{'*' if row.pareto else ''}", short_label(row), f"{x.gpus:,}", _hourly(x.usd_per_hour),
            _ms(x.ttft_s), _ms(x.tpot_s), binding_cell(x.binding), _lock_step(x), _usd(x.usd_per_million_tokens),
            _ms(x.itl_s, "p99"), _pair(x.ttft_s), _pair(x.tpot_s), _replicas(row, x), _goodput(row, t.output.mean),
            f"{x.utilization or 0:.0%}", f"{kv or 'default'}/{compute or 'default'}", _scheduler(row),
            _usd(x.usd_per_million_input_tokens), _usd(x.usd_per_million_output_tokens),
        ])  # fmt: skip
    table.notes += notes(result, passing)
    return table


def header(result: Plan) -> str:
    """The traffic, the SLOs and how TTFT is timed, on one line."""
    t = result.traffic
    arrivals = "trace arrivals" if t.arrivals_s else "Poisson"
    load = f"{fmt.load(t.rate_rps)} req/s ({arrivals})" if t.rate_rps is not None else (
        f"{fmt.counted(t.concurrency, 'user')} (closed loop, think {t.think_time_s:g} s)")  # fmt: skip
    slos = ", ".join(_slo_text(s) for s in result.slos) or "none (latencies at the offered load, and saturation)"
    prefix = f" · cached prefix {t.cached_prefix_tokens:,}" if t.cached_prefix_tokens else ""
    lengths = f"prompt {t.prompt_mean_tokens:,.0f} ({t.prompt.label}) · output {t.output.mean:,.0f} ({t.output.label})"
    return (f"{result.model.name} · {load} · {lengths}{prefix} · SLO {slos} · headroom {result.space.headroom:.0%}"
            f"{flash_note(result.space.flash_attention)}")  # fmt: skip


def _slo_text(slo: Slo) -> str:
    return f"{slo.percentile} {slo.metric.upper()} <= {fmt.ms(slo.seconds)}"


def notes(result: Plan, passing: list[Row]) -> list[str]:
    """How to read the fleets table: the ranking, the star, the costs, the scheduler and TTFT's basis."""
    out = []
    if not passing:
        out.append("No configuration meets every SLO under expected; see why below.")
    load = ("users x (1 + {h:g}) / whole users per replica at its goodput: a closed loop's headroom is in users, and "
            "its throughput stays near the limit until its users fall below the knee" if result.traffic.concurrency
            else "req/s x (1 + {h:g}) / goodput per replica").format(h=result.space.headroom)  # fmt: skip
    unpriced = any(r.expected.usd_per_hour is None for r in passing)
    by = "$/hour, then GPUs where a GPU has no price" if unpriced else "$/hour"
    out.append(
        f"Ranked by {by} (GPUs = replicas x GPUs each, replicas = ceil({load})); * = on the Pareto frontier of "
        "$/hour vs p90 TPOT or p90 TTFT. $/1M tok spreads $/hour over every token served; $/1M in and out split it "
        "by busy time (prefill vs decode), each scenario by its own: on the same fleet the ceiling's split can put "
        "more on either side than expected's, its $/1M tok the same."
    )
    spare = result.space.redundant_experts
    if spare and any(row.deployment.layout.redundant_experts for row in result.rows):
        out.append(f"'+{spare}' in a layout (DP16xEP16+{spare}): {spare} redundant expert copies (EPLB) spread with "
                   "the experts over its EP ranks (EP > 1 only); they cost memory and weight reads, and routing is "
                   "priced uniform over them.")  # fmt: skip
    top = passing[0] if passing else None
    if top is not None and top.choice is not None:
        c = top.choice
        cap = f"{c.max_running:,} ({c.max_running_source})" if c.max_running else "none: the KV cache caps it"
        prefill = "apart: the decodes wait out each prompt step" if c.prefill_apart else "beside the decodes"
        d = top.deployment
        graphs = d.engine.scheduler(gpu_name=d.gpu.name, memory_bytes=d.gpu.memory_bytes, tp=d.layout.tp)
        captured = (f", CUDA graphs up to {graphs.graph_batch_cap:,} decoding sequences ({d.engine.name} default)"
                    if graphs.graph_batch_cap else "")  # fmt: skip
        if top.replica is not None and top.replica.lookahead:  # the engine's default, with one pipeline stage
            captured += f", each step chosen while the one before it runs (overlap scheduling, {d.engine.name} default)"
        out.append(f"Scheduler of #1: chunk {top.chunk:,} tokens per step ({c.chunk_source}), running cap {cap}, "
                   f"prefill {prefill} ({c.prefill_source}){captured}. p99 ITL: the gap between two tokens, steps "
                   "that carry a prefill chunk included.")  # fmt: skip
        if c.chunk_source.endswith("default") and any(s.metric in ("tpot", "itl") for s in result.slos):
            out.append("A smaller chunk trades TTFT for TPOT and ITL: --chunk search tries 256 to 8,192 tokens.")
    if top is not None and top.replica is not None:
        cost = top.replica.overhead_s
        out.append(f"TTFT as a client times it: the engine's per-request cost ({fmt.ms(cost)}: HTTP, tokenization, "
                   "scheduling) included." if cost else "TTFT as the engine times it: its per-request cost is 0 "
                   "in this profile (HTTP and tokenization not priced).")  # fmt: skip
    t = result.traffic
    if t.concurrency and top is not None and top.replica is not None and locks_whole(top.replica):
        out.append("Fixed answers, no think time, prefill apart: every user comes back in one lock-step round, all "
                   "prompts prefilled before any decode, so TTFT spreads over the round's prefill steps and TPOT holds "
                   "the steps after a request's own (priced step by step; --explain).")  # fmt: skip
    elif t.concurrency and not t.think_time_s and t.prompt.kind == "fixed" and t.output.kind == "fixed":
        out.append(
            "Fixed lengths and no think time: users can fall into lock-step, each group waiting out the one before "
            f"it; p90 TTFT prices {PARTIAL_LOCK:.0%} of them so (published runs lock partly), lock-step all of them "
            "(where they differ by over 10%)."
        )
    if top is not None:
        band = band_of(top.deployment.engine, top.deployment.gpu.platform)
        out.append(f"80% band of #1's engine ({top.deployment.engine.label}): a time can be x{band.low:.2f} to "
                   f"x{band.high:.2f} of expected ({band.basis}).")  # fmt: skip
    out.append(f"Planned {fmt.counted(len(result.rows), 'configuration')}. --explain shows the arithmetic.")
    return out


def best_per_gpu(result: Plan) -> Table:
    """Each GPU type's cheapest fleet that meets every SLO, or why it has none: the buyer's comparison."""
    table = Table("Cheapest per GPU type (expected)", ["gpu", "fleet", "GPUs", "$/hour", "p90 TTFT", "p90 TPOT",
                                                        "binding", "lock-step"], answer=ANSWER,
                  wrap_last=WRAP_LAST)  # fmt: skip
    for gpu in result.space.gpus:
        rows = [r for r in result.rows if r.deployment.gpu.name == gpu.name]
        best = next((r for r in rows if r.expected.meets_slo), None)
        if best is None:  # why: a sized layout's miss (the SLO it breaks) before a smaller one that does not fit
            sized = [r for r in rows if r.replica is not None]
            why = (sized or rows)[0].expected.binding if rows else "no configuration"
            table.rows.append([gpu.name, "none", "-", "-", "-", "-", why, "-"])
            continue
        x = best.expected
        table.rows.append([gpu.name, short_label(best).removeprefix(gpu.name + " "), f"{x.gpus:,}",
                           _hourly(x.usd_per_hour), _ms(x.ttft_s), _ms(x.tpot_s), binding_cell(x.binding),
                           _lock_step(x)])  # fmt: skip
    return table


def plan_tables(result: Plan, top: int) -> list[Table]:
    """Ranked fleets (expected), the best per GPU, the same under ceiling, failures, the load table."""
    rows = result.rows
    passing = [r for r in rows if r.expected.meets_slo][:top]
    tables = [fleets_table(result, passing)]
    if len(result.space.gpus) > 1:
        tables.append(best_per_gpu(result))
    if passing:
        ceiling = Table("The same fleets under ceiling (datasheet peaks, no overhead), numbered as above: the "
                        "fewest GPUs physics allows each",
                        ["#", "fleet", "GPUs", "$/hour", "binding", "replicas", "goodput / replica"])  # fmt: skip
        for i, row in enumerate(passing, 1):
            c = row.ceiling
            cells = [
                str(i),
                short_label(row),
                f"{c.gpus:,}" if c.gpus else "-",
                _hourly(c.usd_per_hour),
                binding_cell(c.binding),
            ]
            ceiling.rows.append([*cells, _replicas(row, c), f"{c.max_rate_rps:,.2f} req/s"])
        tables.append(ceiling)
    if any(r.simulated for r in passing):
        tables.append(simulated_table(passing))
    failing = [r for r in rows if not r.expected.meets_slo]
    if failing:
        fails = Table("Configurations that fail (expected)", ["fleet", "why"], prose=True)
        for row in failing[:top]:
            fails.rows.append([row_label(row), row.expected.binding])
        if len(failing) > top:
            fails.notes.append(f"... and {len(failing) - top} more (--top, or --format json for all)")
        tables.append(fails)
    return tables + [load_table(result)]


def load_table(result: Plan) -> Table:
    """GPUs the cheapest configuration needs as the load changes."""
    unit = "req/s" if result.traffic.rate_rps is not None else "users"
    table = Table("GPUs needed as the load changes (cheapest configuration at each load)",
                  ["load", unit, "configuration", "GPUs", "$/hour"])  # fmt: skip
    for entry in result.load:
        hourly = _hourly(entry["usd_per_hour"]) if entry["config"] else "-"  # type: ignore[arg-type]
        table.rows.append([f"{entry['multiple']:g}x", fmt.load(entry["load"]), str(entry["config"] or "none"),
                           f"{entry['gpus']:,}" if entry["gpus"] else "-", hourly])  # fmt: skip
    return table


def simulated_table(rows: list[Row]) -> Table:
    """Closed form beside the simulation, for the rows simulated."""
    columns = ["#", "fleet", "TTFT p50/p90", "simulated", "TPOT p50/p90", "simulated", "ITL p99", "simulated"]
    table = Table("Closed form vs simulation (one replica at its offered load)", columns, wrap=("TTFT p50/p90",))
    p50_p90 = ("p50", "p90")
    for i, row in enumerate(rows, 1):
        if not row.simulated:
            continue
        x, s = row.expected, row.simulated
        ttft = _pair(x.ttft_s, p50_p90)
        if x.ttft_lock_step_s:  # the simulated clients fall into lock-step with fixed lengths
            ttft += f" (lock-step: {_pair(x.ttft_lock_step_s, p50_p90)})"
        table.rows.append([str(i), short_label(row), ttft, _pair(s["ttft_s"], p50_p90),
                           _pair(x.tpot_s, p50_p90), _pair(s["tpot_s"], p50_p90), _ms(x.itl_s, "p99"),
                           _ms(s.get("itl_s"), "p99")])  # fmt: skip
    return table
