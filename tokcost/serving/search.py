"""The plan: every GPU x layout x precision x chunk, sized for the traffic, ranked by cost.

For each GPU type and precision, every layout (TP degree) is tried: those that cannot run the model (heads,
links, node size) or cannot hold one request's KV beside the weights fail with the reason. For each that can,
the engine's scheduler on that GPU (its prefill chunk budget, its cap on running sequences, multi-step; the
profile's defaults, or --chunk and --max-running) sets the replica; with a list of chunks (or an engine that
states none) each chunk gets its goodput under "expected" and the one with the most is kept. The fleet is
sized under "expected" and, with the same choices, under "ceiling" (datasheet peaks: the fewest GPUs physics
allows). Disaggregated mode pairs the prefill layout and chunk with the most goodput per GPU for the TTFT
SLOs with the decode layout with the most for the TPOT SLOs. Ranking: configurations that meet every SLO
under "expected" first, cheapest $/hour first (no price: after those with one, fewest GPUs first), ties by
p90 TPOT then p90 TTFT. A configuration is on the Pareto frontier when no other that meets the SLOs costs at
most as much per hour and is at least as fast at p90 TPOT (or at p90 TTFT), better in one: the cheapest is
always on it.

Precision: weights, KV and compute formats come from the lists given; an unset compute dtype follows the
weights where the GPU runs that float format natively (fp8 weights -> fp8 matmuls on Hopper, Ada, MI300X;
fp4 on Blackwell, as vLLM's FP8 and NVFP4 paths do), and the model's compute dtype otherwise (integer
formats stay weight-only unless --compute-dtype says otherwise).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from itertools import product
from typing import Literal

from tokcost import formats
from tokcost.engine.step import Scenario
from tokcost.errors import TokcostError
from tokcost.hardware.spec import GpuSpec, Link
from tokcost.models.spec import ModelSpec
from tokcost.profiles import GENERIC, EngineProfile
from tokcost.serving.capacity import capacity
from tokcost.serving.fleet import REPORTED, Fleet, failed, size_aggregated, size_disaggregated, transfer_seconds
from tokcost.serving.layout import DEFAULT_MAX_TP, Layout, valid_tp_degrees
from tokcost.serving.replica import Replica, build_replica
from tokcost.serving.simulate import simulate
from tokcost.serving.steps import Deployment, replica_kv_tokens
from tokcost.serving.traffic import QUANTILES, Slo, Traffic

DEFAULT_CHUNKS = (256, 512, 1024, 2048, 4096, 8192)  # prefill token budgets per step (vLLM: 512-8192)
LOAD_MULTIPLES = (0.25, 0.5, 1.0, 2.0, 4.0)
NATIVE_FLOAT_COMPUTE = ("fp8", "fp4")
Mode = Literal["aggregated", "disaggregated", "both"]


@dataclass(frozen=True)
class Space:
    """What the plan may choose from, and the fleet-level knobs."""

    gpus: tuple[GpuSpec, ...]
    tps: tuple[int, ...] | None = None  # None: every valid degree from the smallest that fits up to 8
    pps: tuple[int, ...] | None = None  # None: 1, and 2..4 stages of a full node when no single node holds it
    eps: tuple[int, ...] | None = None  # None: 1, and for MoE models every expert-parallel degree = the stage's GPUs
    dps: tuple[int, ...] = (1,)  # data-parallel attention replicas (MoE)
    engine: EngineProfile = GENERIC  # the serving engine whose profile shapes "expected"
    weights: tuple[str | None, ...] = (None,)
    kv_dtypes: tuple[str | None, ...] = (None,)
    compute_dtypes: tuple[str | None, ...] = (None,)
    chunks: tuple[int, ...] | None = None  # None: the engine's budget on each GPU (searched if it states none)
    max_running: int | None = None  # None: the engine's cap on each GPU (the KV cache alone if it states none)
    mode: Mode = "aggregated"
    max_gpus: int | None = None
    headroom: float = 0.2
    prices: Mapping[str, float] = field(default_factory=dict)
    networks: Mapping[str, Link] = field(default_factory=dict)  # GPU name -> its network between nodes


@dataclass(frozen=True, slots=True)
class Choice:
    """The scheduler a row runs with, and where each setting comes from."""

    chunks: tuple[int, ...]  # the budgets tried (one: the engine's, or the one given)
    chunk_source: str  # "engine default", "--chunk", "searched"
    max_running: int | None
    max_running_source: str  # "engine default", "--max-running", "none (KV cache)"
    scheduler_steps: int = 1


def scheduler_choice(space: Space, gpu: GpuSpec) -> Choice:
    """The engine's scheduler on `gpu`, overridden by --chunk and --max-running."""
    sched = space.engine.scheduler(gpu_name=gpu.name, memory_bytes=gpu.memory_bytes)
    if space.chunks is not None:
        chunks, source = space.chunks, "--chunk" if len(space.chunks) == 1 else "searched"
    elif sched.chunk_tokens is not None:
        chunks, source = (sched.chunk_tokens,), f"{space.engine.name} default"
    else:
        chunks, source = DEFAULT_CHUNKS, "searched"
    if space.max_running is not None:
        cap, cap_source = space.max_running, "--max-running"
    elif sched.max_running_sequences is not None:
        cap, cap_source = sched.max_running_sequences, f"{space.engine.name} default"
    else:
        cap, cap_source = None, "none (KV cache)"
    return Choice(chunks, source, cap, cap_source, sched.scheduler_steps)


@dataclass
class Row:
    """One configuration: what it is, and its fleet under expected and ceiling."""

    mode: str
    deployment: Deployment
    prefill_layout: Layout | None
    chunk: int | None
    expected: Fleet
    ceiling: Fleet
    replica: Replica | None = None  # expected, at the chosen chunk (aggregated; the decode pool)
    prefill_replica: Replica | None = None
    pareto: bool = False
    simulated: dict[str, dict[str, float | None] | None] | None = None
    choice: Choice | None = None

    @property
    def price(self) -> float | None:
        """$/GPU-hour used (None without a price)."""
        x = self.expected
        return x.usd_per_hour / x.gpus if x.usd_per_hour is not None and x.gpus else None


@dataclass
class Plan:
    """The ranked configurations, the load table and what the reader should know."""

    model: ModelSpec
    traffic: Traffic
    slos: list[Slo]
    space: Space
    rows: list[Row]
    load: list[dict[str, object]]
    warnings: list[str]


def default_compute(weights: str | None, gpu: GpuSpec) -> str | None:
    """fp8/fp4 weights run their matmuls natively where the GPU lists that peak; else the engine's default."""
    if weights is None:
        return None
    native = formats.get(weights).native_compute
    if native in NATIVE_FLOAT_COMPUTE and gpu.peak_flops_per_s(native) is not None:
        return native
    return None


def _fits(model: ModelSpec, deployment: Deployment, traffic: Traffic) -> bool:
    prompt = max(round(traffic.prompt_mean_tokens), 1)
    output = max(round(traffic.output.mean), 1)
    return replica_kv_tokens(model, deployment, 1, prompt, output) >= model.attended_tokens(prompt + output)


def candidate_layouts(model: ModelSpec, gpu: GpuSpec, space: Space) -> list[Layout]:
    """Every combination of the space's degrees (defaults: valid TP up to a node; pipeline stages of a full node
    as a fallback; expert parallelism over the stage for MoE), smallest first."""
    tps = space.tps or tuple(valid_tp_degrees(model, min(DEFAULT_MAX_TP, gpu.gpus_per_node)))
    pps = space.pps or (1,)
    out = []
    for tp, pp, dp in product(tps, pps, space.dps):
        eps = space.eps or ((1, tp * dp) if model.moe and tp * dp > 1 else (1,))
        out += [Layout(tp, pp, ep, dp) for ep in dict.fromkeys(eps)]
    return sorted(dict.fromkeys(out), key=lambda lay: (lay.gpus, lay.pp, lay.ep, lay.tp))


def pipeline_fallback(model: ModelSpec, gpu: GpuSpec) -> list[Layout]:
    """For a model no single node holds: the widest TP of a node, in 2 to 4 pipeline stages."""
    widest = max(valid_tp_degrees(model, min(DEFAULT_MAX_TP, gpu.gpus_per_node)))
    return [Layout(widest, pp) for pp in (2, 3, 4)]


def _layouts(
    model: ModelSpec,
    gpu: GpuSpec,
    space: Space,
    deploy,
    traffic: Traffic,  # noqa: ANN001
) -> tuple[list[Layout], list[Row]]:
    """The layouts to size, and rows for those that cannot run (explicit --tp only)."""
    explicit = space.tps is not None or space.pps is not None or space.eps is not None or space.dps != (1,)
    candidates = candidate_layouts(model, gpu, space)
    usable, refused = [], []
    for layout in candidates:
        reason = layout.invalid_reason(model, gpu)
        if reason is None and not _fits(model, deploy(layout), traffic):
            reason = f"does not fit: {model.name}'s weights leave no room for one request's KV on {layout.gpus} GPU(s)"
        if reason is None:
            usable.append(layout)
        elif explicit:
            refused.append(_refused(deploy(layout), reason))
    if not usable and space.pps is None and not explicit:  # no node holds it: try pipeline stages of full nodes
        candidates = pipeline_fallback(model, gpu)
        usable = [
            lay for lay in candidates if lay.invalid_reason(model, gpu) is None and _fits(model, deploy(lay), traffic)
        ]
    if not usable and not explicit and candidates:
        refused.append(_refused(deploy(candidates[-1]), f"does not fit on up to {candidates[-1].gpus} GPUs"))
    return usable, refused


def _refused(deployment: Deployment, reason: str) -> Row:
    return Row("aggregated", deployment, None, None, failed(reason), failed(reason))


def _replica(
    model: ModelSpec,
    deployment: Deployment,
    traffic: Traffic,
    chunk: int,
    scenario: Scenario,
    choice: Choice,
    **kw,  # noqa: ANN003
) -> Replica:
    return build_replica(model, deployment, traffic, chunk, scenario, max_running=choice.max_running,
                         scheduler_steps=choice.scheduler_steps, **kw)  # fmt: skip


def _best_chunk(
    model: ModelSpec, deployment: Deployment, traffic: Traffic, slos: list[Slo], choice: Choice
) -> tuple[int, Replica]:
    """The chunk with the most goodput under "expected" (ties: the smaller chunk), and its replica."""
    best: tuple[float, int, Replica] | None = None
    for chunk in choice.chunks:
        replica = _replica(model, deployment, traffic, chunk, "expected", choice)
        goodput = capacity(replica, slos).max_rate_rps
        if best is None or goodput > best[0] * (1 + 1e-9):
            best = (goodput, chunk, replica)
    assert best is not None
    return best[1], best[2]


def _aggregated(model: ModelSpec, deployment: Deployment, traffic: Traffic, slos: list[Slo], space: Space) -> Row:
    choice = scheduler_choice(space, deployment.gpu)
    chunk, replica = _best_chunk(model, deployment, traffic, slos, choice)
    price = space.prices.get(deployment.gpu.name, deployment.gpu.price_per_hour_usd)

    def size(r: Replica) -> Fleet:
        return size_aggregated(r, traffic, slos, headroom=space.headroom, gpus_per_replica=deployment.layout.gpus,
                               price=price, max_gpus=space.max_gpus)  # fmt: skip

    ceiling = _replica(model, deployment, traffic, chunk, "ceiling", choice)
    return Row("aggregated", deployment, None, chunk, size(replica), size(ceiling), replica, choice=choice)


def _link_for(gpu: GpuSpec, space: Space, gpus: int) -> Link | None:
    """The path KV takes between pools: the GPU's own link inside one node, else its network."""
    if gpus <= gpu.gpus_per_node and gpu.link is not None:
        return gpu.link
    return space.networks.get(gpu.name)


def _disaggregated(
    model: ModelSpec,
    deploy,
    layouts: list[Layout],
    traffic: Traffic,
    slos: list[Slo],
    space: Space,  # noqa: ANN001
) -> Row:
    """The cheapest pair of pools for this GPU and precision."""
    ttft_slos = [s for s in slos if s.metric == "ttft"]
    choice = scheduler_choice(space, deploy(layouts[0]).gpu)
    best_p: tuple[float, Layout, int, Replica] | None = None
    for layout, chunk in product(layouts, choice.chunks):
        r = _replica(model, deploy(layout), traffic, chunk, "expected", choice, role="prefill")
        goodput = capacity(r, ttft_slos).max_rate_rps
        per_gpu = goodput / layout.gpus
        if best_p is None or per_gpu > best_p[0] * (1 + 1e-9):
            best_p = (per_gpu, layout, chunk, r)
    assert best_p is not None
    _, p_layout, chunk, _ = best_p
    best: tuple[int, Fleet, Layout, Replica, Replica] | None = None
    for layout in layouts:
        fleet, decode, prefill = _size_pair(model, deploy, p_layout, layout, chunk, traffic, slos, space, "expected",
                                            choice)  # fmt: skip
        key = fleet.gpus if fleet.gpus is not None and fleet.max_rate_rps > 0 else math.inf
        if best is None or key < best[0]:
            best = (key, fleet, layout, decode, prefill)  # type: ignore[assignment]
    assert best is not None
    _, fleet, d_layout, decode, prefill = best
    ceiling, _, _ = _size_pair(model, deploy, p_layout, d_layout, chunk, traffic, slos, space, "ceiling", choice)
    return Row("disaggregated", deploy(d_layout), p_layout, chunk, fleet, ceiling, decode, prefill, choice=choice)


def _size_pair(
    model: ModelSpec, deploy, p_layout: Layout, d_layout: Layout, chunk: int, traffic: Traffic,  # noqa: ANN001
    slos: list[Slo], space: Space, scenario: Scenario, choice: Choice,
) -> tuple[Fleet, Replica, Replica]:  # fmt: skip
    gpu = deploy(d_layout).gpu
    prefill = _replica(model, deploy(p_layout), traffic, chunk, scenario, choice, role="prefill")
    price = space.prices.get(gpu.name, gpu.price_per_hour_usd)
    fleet: Fleet | None = None
    decode: Replica | None = None
    for gpus in (p_layout.gpus + d_layout.gpus, math.inf):  # one node first; past it, the network
        link = _link_for(gpu, space, gpus)  # type: ignore[arg-type]
        if link is None:
            fleet = failed(f"no link or network to move KV between pools on {gpu.name}")
            decode = _replica(model, deploy(d_layout), traffic, chunk, scenario, choice, role="decode")
            break
        transfer = transfer_seconds(model, prefill, link, p_layout.tp, d_layout.tp)
        decode = _replica(model, deploy(d_layout), traffic, chunk, scenario, choice, role="decode", transfer_s=transfer)
        fleet = size_disaggregated(prefill, decode, traffic, slos, headroom=space.headroom,
                                   prefill_gpus=p_layout.gpus, decode_gpus=d_layout.gpus, price=price,
                                   max_gpus=space.max_gpus)  # fmt: skip
        if fleet.gpus is None or fleet.gpus <= gpu.gpus_per_node:
            break
    assert fleet is not None and decode is not None
    return fleet, decode, prefill


def plan(model: ModelSpec, traffic: Traffic, slos: list[Slo], space: Space) -> Plan:
    """Every configuration of `space` sized for `traffic` under `slos`, ranked, with the load table."""
    rows, warnings = _rows(model, traffic, slos, space)
    rows.sort(key=_rank)
    _mark_pareto(rows)
    return Plan(model, traffic, slos, space, rows, load_table(rows, traffic, space), warnings)


def _rows(model: ModelSpec, traffic: Traffic, slos: list[Slo], space: Space) -> tuple[list[Row], list[str]]:
    rows: list[Row] = []
    warnings: list[str] = []
    modes = ["aggregated", "disaggregated"] if space.mode == "both" else [space.mode]
    for gpu in space.gpus:
        if space.prices.get(gpu.name, gpu.price_per_hour_usd) is None:
            warnings.append(f"{gpu.name}: no price in its spec; its $ columns say 'no price' (--price {gpu.name}=USD)")
        for weights, kv, compute in product(space.weights, space.kv_dtypes, space.compute_dtypes):
            matmul = compute or default_compute(weights, gpu)

            def deploy(layout: Layout, g: GpuSpec = gpu, w=weights, k=kv, c=matmul) -> Deployment:  # noqa: ANN001
                return Deployment(g, layout, w, k, c, space.networks.get(g.name), space.engine)

            try:
                layouts, refused = _layouts(model, gpu, space, deploy, traffic)
                rows += refused
                for layout in layouts if "aggregated" in modes else []:
                    rows.append(_aggregated(model, deploy(layout), traffic, slos, space))
                if "disaggregated" in modes and layouts:
                    rows.append(_disaggregated(model, deploy, layouts, traffic, slos, space))
            except TokcostError as exc:  # e.g. a compute dtype this GPU lists no peak for
                rows.append(_refused(deploy(Layout(1)), str(exc)))
    return rows, warnings


def _p90(values: dict[str, float | None] | None) -> float:
    return (values or {}).get("p90") or math.inf


def _rank(row: Row) -> tuple:
    x = row.expected
    return (
        not x.meets_slo,
        x.usd_per_hour is None,
        x.usd_per_hour if x.usd_per_hour is not None else 0.0,
        x.gpus if x.gpus is not None else math.inf,
        _p90(x.tpot_s),
        _p90(x.ttft_s),
    )


def primary_cost(fleet: Fleet) -> float | None:
    """What plans rank and the frontier weighs: the fleet's $/hour (the same load is served by every row)."""
    return fleet.usd_per_hour


def _mark_pareto(rows: list[Row]) -> None:
    """Pareto frontier of $/hour against p90 TPOT and against p90 TTFT (rows meeting the SLOs)."""
    points = []
    for row in rows:
        x = row.expected
        cost = primary_cost(x)
        if x.meets_slo and cost is not None:
            points.append((row, cost, (x.tpot_s or {}).get("p90"), (x.ttft_s or {}).get("p90")))
    for row, usd, tpot, ttft in points:
        row.pareto = any(
            latency is not None
            and not any(
                o_usd <= usd and o_lat is not None and o_lat <= latency and (o_usd < usd or o_lat < latency)
                for other, o_usd, *o_lats in points
                for o_lat in [o_lats[i]]
                if other is not row
            )
            for i, latency in enumerate((tpot, ttft))
        )


def load_table(rows: list[Row], traffic: Traffic, space: Space) -> list[dict[str, object]]:
    """For each multiple of the offered load, the cheapest configuration's GPUs (by the same goodputs)."""
    base = traffic.rate_rps if traffic.rate_rps is not None else float(traffic.concurrency or 0)
    table = []
    for multiple in LOAD_MULTIPLES:
        load = base * multiple
        best: tuple[tuple, Row, int] | None = None
        for row in rows:
            if not row.expected.meets_slo:
                continue
            gpus = row.expected.gpus_at(load, space.headroom)
            if gpus is None or (space.max_gpus is not None and gpus > space.max_gpus):
                continue
            usd = row.price * gpus if row.price is not None else None
            key = (usd is None, usd or 0.0, gpus)
            if best is None or key < best[0]:
                best = (key, row, gpus)
        entry: dict[str, object] = {"multiple": multiple, "load": load, "config": None, "gpus": None,
                                    "usd_per_hour": None}  # fmt: skip
        if best is not None:
            _, row, gpus = best
            entry.update(config=row_label(row), gpus=gpus, usd_per_hour=row.price * gpus if row.price else None)
        table.append(entry)
    return table


def short_label(row: Row) -> str:
    """'h100-sxm TP4 fp8': GPU, layout and weights (the plot's and the narrow table's name for a row)."""
    d = row.deployment
    layout = d.layout.label if row.prefill_layout is None else f"P:{row.prefill_layout.label}+D:{d.layout.label}"
    return f"{d.gpu.name} {layout} {precision_parts(row)[0] or 'default'}"


def row_label(row: Row) -> str:
    """'h100-sxm TP4 fp8/bf16' (disaggregated: 'h100-sxm P:TP2+D:TP4 ...')."""
    d = row.deployment
    layout = d.layout.label if row.prefill_layout is None else f"P:{row.prefill_layout.label}+D:{d.layout.label}"
    return f"{d.gpu.name} {layout} {precision_label(row)}"


def precision_parts(row: Row) -> tuple[str | None, str | None, str | None]:
    """(weights, kv, compute) formats as resolved by the engine; as requested (None: default) if never sized."""
    if row.replica is None:
        d = row.deployment
        return d.weights, d.kv_dtype, d.compute_dtype
    p = row.replica.steps.deployment.precision(row.replica.steps.model)
    return p.weights, p.kv, p.compute


def precision_label(row: Row) -> str:
    """weights/kv/compute, e.g. 'fp8/bf16/fp8' ('default' where unresolved)."""
    return "/".join(x or "default" for x in precision_parts(row))


def simulate_rows(plan: Plan, top: int, requests: int, seed: int) -> None:
    """Fill `simulated` for the first `top` aggregated rows that meet the SLOs: one replica at its offered load."""
    done = 0
    for row in plan.rows:
        if done >= top or not row.expected.meets_slo:
            break
        point, replica = row.expected.point, row.replica
        if row.mode != "aggregated" or point is None or replica is None:
            continue
        traffic = plan.traffic
        if traffic.concurrency and row.expected.replicas:
            traffic = replace(traffic, concurrency=max(round(traffic.concurrency / row.expected.replicas), 1))
        result = simulate(replica.steps, traffic, replica.chunk, requests=requests, seed=seed, rate_rps=point.rate_rps,
                          max_running=replica.running_cap(), scheduler_steps=replica.scheduler_steps)  # fmt: skip
        row.simulated = {
            f"{metric}_s": (
                None
                if result.percentile(metric, 0.5) is None
                else {name: result.percentile(metric, QUANTILES[name]) for name in REPORTED}
            )
            for metric in ("ttft", "tpot", "e2e", "itl")
        }
        done += 1
