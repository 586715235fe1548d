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
from collections.abc import Callable
from dataclasses import dataclass, replace
from itertools import product, repeat

from tokcost import fmt, workers
from tokcost.engine.collectives import links_of
from tokcost.engine.step import Scenario
from tokcost.engine.workload import Precision, native_compute
from tokcost.errors import TokcostError
from tokcost.hardware.spec import GpuSpec, Link
from tokcost.models.spec import ModelSpec
from tokcost.serving.capacity import capacity
from tokcost.serving.fleet import Fleet, failed, size_aggregated, size_disaggregated, transfer_seconds
from tokcost.serving.layout import DEFAULT_MAX_TP, Layout, valid_tp_degrees
from tokcost.serving.ranking import load_table, mark_pareto, primary_cost, rank
from tokcost.serving.replica import Replica, build_replica
from tokcost.serving.rows import (
    DEFAULT_CHUNKS,
    Choice,
    Mode,
    Plan,
    Row,
    Space,
    experts_format,
    precision_label,
    precision_parts,
    row_label,
    scheduler_choice,
    short_label,
)  # fmt: skip
from tokcost.serving.steps import Deployment, replica_kv_tokens
from tokcost.serving.traffic import Slo, Traffic

__all__ = [  # what callers import from here: the search, and the rows' types and labels it returns
    "DEFAULT_CHUNKS", "Choice", "Mode", "Plan", "Row", "Space", "experts_format", "plan", "precision_label",
    "precision_parts",
    "primary_cost", "row_label", "scheduler_choice", "short_label",
]  # fmt: skip


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
        out += [Layout(tp, pp, ep, dp, space.redundant_experts if ep > 1 else 0) for ep in dict.fromkeys(eps)]
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
        if reason is not None:
            refused += [_refused(deploy(layout), reason, invalid=True, model=model)] if explicit else []
        elif not _fits(model, deploy(layout), traffic):
            gpus = fmt.counted(layout.gpus, "GPU")
            fits = f"does not fit: {model.name}'s weights leave no room for one request's KV on {gpus}"
            refused += [_refused(deploy(layout), fits, model=model)] if explicit else []
        else:
            usable.append(layout)
    if not usable and space.pps is None and not explicit:  # no node holds it: try pipeline stages of full nodes
        candidates = pipeline_fallback(model, gpu)
        usable = [
            lay for lay in candidates if lay.invalid_reason(model, gpu) is None and _fits(model, deploy(lay), traffic)
        ]
    if not usable and not explicit and candidates:
        refused.append(
            _refused(deploy(candidates[-1]), f"does not fit on up to {candidates[-1].gpus} GPUs", model=model)
        )
    return usable, refused


def _refused(deployment: Deployment, reason: str, *, invalid: bool = False, model: ModelSpec | None = None) -> Row:
    """A row that cannot run, with its formats as the engine would resolve them where it can ('bf16/bf16/bf16', not
    'bf16/default/default')."""
    if model is not None:
        try:
            p = deployment.precision(model)
        except (TokcostError, ValueError):  # a format the model or GPU refuses: as requested
            pass
        else:
            deployment = replace(deployment, weights=p.weights, kv_dtype=p.kv, compute_dtype=p.compute)
    return Row("aggregated", deployment, None, None, failed(reason), failed(reason), invalid=invalid)


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
                         scheduler_steps=choice.scheduler_steps, lookahead=choice.overlap,
                         prefill_apart=choice.prefill_apart, **kw)  # fmt: skip


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
    """The path KV takes between pools: the GPU's own link inside one node (its host link where the two pools span
    more GPUs than the link joins: a bridged pair, a PCIe card's CPU socket), else its network."""
    if gpus <= gpu.gpus_per_node and gpu.link is not None:
        return links_of(gpu, None).within(gpus)
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


def plan(model: ModelSpec, traffic: Traffic, slos: list[Slo], space: Space, jobs: int | None = None,
         progress: Callable[[int, int], None] | None = None) -> Plan:  # fmt: skip
    """Every configuration of `space` sized for `traffic` under `slos`, ranked, with the load table. `jobs`: worker
    processes that size the aggregated configurations (None: one per CPU where lengths vary, else none);
    `progress(done, total)` after each is sized (the CLI's line on a terminal)."""
    rows, warnings = _rows(model, traffic, slos, space, jobs, progress)
    rows.sort(key=rank)
    mark_pareto(rows)
    return Plan(model, traffic, slos, space, rows, load_table(rows, traffic, space), warnings)


@dataclass
class _Block:
    """One GPU and precision: the layouts refused outright, the ones to size, and the rest of its work."""

    deploy: Callable[[Layout], Deployment]
    refused: list[Row]
    sized: list[Deployment]  # aggregated configurations, in layout order
    layouts: list[Layout]  # for the disaggregated pairing (none: aggregated only)


def _rows(
    model: ModelSpec, traffic: Traffic, slos: list[Slo], space: Space, jobs: int | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> tuple[list[Row], list[str]]:  # fmt: skip
    warnings: list[str] = []
    blocks: list[_Block | Row] = []
    modes = ["aggregated", "disaggregated"] if space.mode == "both" else [space.mode]
    for gpu in space.gpus:
        if space.prices.get(gpu.name, gpu.price_per_hour_usd) is None:
            warnings.append(f"{gpu.name}: no price in its spec; its $ columns say 'no price' (--price {gpu.name}=USD)")
        seen: set[Precision] = set()
        for weights, kv, compute in product(space.weights, space.kv_dtypes, space.compute_dtypes):
            # the engine's rule (engine/workload.py): fp8/fp4 run natively where the GPU lists that peak
            matmul = compute or (native_compute(weights, gpu) if weights else None)

            def deploy(layout: Layout, g: GpuSpec = gpu, w=weights, k=kv, c=matmul) -> Deployment:  # noqa: ANN001
                return Deployment(
                    g, layout, w, k, c, space.networks.get(g.name), space.engine, flash_attention=space.flash_attention
                )

            try:
                resolved = deploy(Layout(1)).precision(model)
                if compute and resolved.compute != compute:  # no matmul runs at it (engine/workload.py)
                    warnings.append(f"{gpu.name}: --compute-dtype {compute} changes nothing here: no matmul runs at "
                                    f"it; planned at {resolved.compute}")  # fmt: skip
                if resolved in seen:  # the same formats planned already
                    continue
                seen.add(resolved)
                layouts, refused = _layouts(model, gpu, space, deploy, traffic)
                sized = [deploy(layout) for layout in layouts] if "aggregated" in modes else []
                blocks.append(_Block(deploy, refused, sized, layouts if "disaggregated" in modes else []))
            except TokcostError as exc:  # e.g. a compute dtype this GPU lists no peak for
                blocks.append(_refused(deploy(Layout(1)), str(exc), invalid=True))
    todo = [d for b in blocks if isinstance(b, _Block) for d in b.sized]
    sized = _size_all(model, traffic, slos, space, todo, jobs, progress)
    rows: list[Row] = []
    start = 0
    for block in blocks:  # in the order the loops met them; a block's first error ends it, as one pass would
        if not isinstance(block, _Block):
            rows.append(block)
            continue
        rows += block.refused
        mine, start = sized[start : start + len(block.sized)], start + len(block.sized)  # its own, whatever it keeps
        try:
            for row in mine:
                if isinstance(row, str):
                    raise TokcostError(row)
                rows.append(row)
            if block.layouts:
                rows.append(_disaggregated(model, block.deploy, block.layouts, traffic, slos, space))
        except TokcostError as exc:
            rows.append(_refused(block.deploy(Layout(1)), str(exc), invalid=True))
    return rows, warnings


def _size_all(
    model: ModelSpec, traffic: Traffic, slos: list[Slo], space: Space, deployments: list[Deployment], jobs: int | None,
    progress: Callable[[int, int], None] | None = None,
) -> list[Row | str]:  # fmt: skip
    """Each aggregated configuration sized (or its error's message), in order, in worker processes (workers.py) as
    `_workers` counts them. Each is pure, so the rows are the same either way (tests/test_plan_jobs.py)."""
    args = (repeat(model), deployments, repeat(traffic), repeat(slos), repeat(space))
    total = len(deployments)
    counted = None if progress is None else lambda done: progress(done, total)
    return workers.pure_map(_sized, *args, workers=_workers(jobs, total, traffic), progress=counted)


def _workers(jobs: int | None, configurations: int, traffic: Traffic) -> int:
    """Worker processes for `configurations` sizings: `jobs` (1: none), or by default workers.by_default's where
    prompt or output lengths vary, none where they are fixed (each sizing then takes milliseconds)."""
    if jobs is not None:
        return workers.asked(jobs, configurations)
    if traffic.prompt.kind == "fixed" and traffic.output.kind == "fixed" or configurations < 2:
        return 1
    return workers.by_default(configurations)


def _sized(model: ModelSpec, deployment: Deployment, traffic: Traffic, slos: list[Slo], space: Space) -> Row | str:
    """One aggregated configuration sized, or the message of the error that stops it (sent back across processes
    as text, the way the one-process pass reports it)."""
    try:
        return _aggregated(model, deployment, traffic, slos, space)
    except TokcostError as exc:
        return str(exc)
