"""The arithmetic behind each headline number, read from the engine's own parts (what `--explain` prints).

Nothing here computes a physical quantity: every number is a field of the Estimate, its stages, its
collectives or its memory report, printed as `label: expression = value` so that a reader (and a test)
can redo the arithmetic with the values shown.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from tokcost import fmt
from tokcost.engine.attend import attention_kinds, kv_read_tokens, span_of
from tokcost.engine.compiled import microbatches
from tokcost.engine.estimate import (
    CRITICAL_BATCH_SEARCH_LIMIT,
    Estimate,
    Scenario,
    matmul_sides,
    sequence_and_weight_bytes,
)
from tokcost.engine.features import (
    EXPERT_PAIRS,
    EXPERTS_TOUCHED,
    TOKENS,
    Segment,
    expected_distinct_experts,
    pairs_load_sigma,
    pairs_spread_experts,
)
from tokcost.engine.layout import stage_layer_ranges
from tokcost.engine.memory import (
    LOGIT_BYTES,
    MAX_BATCH,
    PREFILL_CHUNK_TOKENS,
    RESERVE_FRACTION,
    SCORE_VALUE_BYTES,
    UNFUSED_UBATCH_TOKENS,
    GpuBytes,
    ReplicaMemory,
    context_prompt,
    mlp_width,
    stage_kv_bytes,
    stage_state_bytes,
    stage_weight_bytes,
)
from tokcost.engine.mixer_stages import SCORE_BYTES, attention_kernel
from tokcost.engine.passcost import PassCost, Priced
from tokcost.engine.roofline import (
    ATTENTION_FLOOR_SOURCE,
    NARROW_COMPUTE,
    UNHIDDEN_SOURCE,
    Rates,
    expert_row_dtype,
    expert_row_pace,
    fa2_share,
    kernel_class,
    kernel_rates,
    matmul_path,
    mma_sync_share,
    row_figure,
)
from tokcost.formats import get as get_format
from tokcost.hardware.spec import Link
from tokcost.models.layers import KV_MIXERS, MIXERS
from tokcost.models.spec import ModelSpec
from tokcost.profiles import EngineProfile, KernelEfficiency, kernel_family
from tokcost.units import MIB

ATTENTION_NAME = {"attention": "paged GQA / MHA", "attention_mla": "MLA latent cache"}  # --explain's names

Section = tuple[str, list[str]]


def _stage_line(p: Priced, rates: Rates) -> str:
    st, n = p.stage, p.stage.count
    where = f"{st.name}" + (f" ({st.block})" if st.block else "")
    if p.collective is not None:
        c = p.collective
        size = fmt.si(c.payload_bytes, "B")
        lat, bw = fmt.seconds(c.path.latency_s), fmt.si(c.path.bytes_per_s, "B/s")
        one = {
            "one-shot": f"{lat} + {c.ranks - 1} x {size} / {bw}",
            "two-shot": f"2 x {lat} + 2 x {c.ranks - 1} / {c.ranks} x {size} / {bw}",
            "ring": f"{2 * (c.ranks - 1)} x {lat} + 2 x {c.ranks - 1} / {c.ranks} x {size} / {bw}",
            "p2p": f"{lat} + {size} / {bw}",
        }.get(c.algorithm, f"{lat} + {size} / {bw}")
        nodes, intra_bw = c.path.nodes, fmt.si(c.path.intra_bytes_per_s, "B/s")
        if c.algorithm == "hierarchical":  # collectives.allreduce_lines: inside each node, then S/g across nodes
            g = -(-c.ranks // nodes)
            inside = f"2 x {fmt.seconds(c.path.intra_latency_s)} + " if g > 1 else ""  # one GPU a node: no step
            one = (f"{inside}{2 * (nodes - 1)} x {lat} + 2 x {g - 1} / {g} x {size} / {intra_bw} + "
                   f"2 x {nodes - 1} / {nodes} x {size} / {g} / {bw}")  # fmt: skip
        if c.op == "all-gather":  # collectives.allgather_line: the group's floor, then the n - 1 other shares
            one = f"{lat} + {c.ranks - 1} / {c.ranks} x {size} / {bw}"
        if c.op == "all-to-all" and nodes > 1:  # collectives.alltoall_line: the off-node share and the rest at once
            one = f"{lat} + max({nodes - 1} / {nodes} x {size} / {bw}, 1 / {nodes} x {size} / {intra_bw})"
        return (
            f"{where}: {n} x ({one}) = {fmt.seconds(p.seconds)} "
            f"({c.op}, {c.algorithm}, {c.ranks} GPUs over {c.path.name})"
        )
    flops_rate, weights_bw, other_bw = kernel_rates(st, rates)
    if st.weight_bytes and weights_bw != other_bw:  # a dequantizing kernel streams its weights at its own rate
        memory = (f"{fmt.si(st.weight_bytes, 'B')} / {fmt.si(weights_bw, 'B/s')} + "
                  f"{fmt.si(st.bytes - st.weight_bytes, 'B')} / {fmt.si(other_bw, 'B/s')}")  # fmt: skip
    else:
        memory = f"{fmt.si(st.bytes, 'B')} / {fmt.si(other_bw, 'B/s')}"
    terms = f"max({fmt.si(st.flops, 'FLOP')} / {fmt.si(flops_rate, 'FLOP/s')}, {memory})"
    return f"{where}: {n} x {terms} = {fmt.seconds(p.seconds)} ({p.bound})"


def _pass_lines(cost: PassCost, rates: Rates) -> list[str]:
    lines = [_stage_line(p, rates) for p in cost.stages if p.seconds > 0]
    total = " + ".join(fmt.seconds(p.seconds) for p in cost.stages if p.seconds > 0)
    kernels = sum(p.stage.count for p in cost.stages)
    if cost.gap_s:  # the GPU's idle gap between kernels, every era
        total += f" + {kernels} x {fmt.seconds(cost.gap_s / kernels)}"
    if cost.hidden_s:  # collectives overlapped with the kernels (the ceiling: all of them)
        total += f" - {fmt.seconds(cost.hidden_s)} hidden"
    if cost.launch_s:  # the host launches every kernel (eager eras): no faster than that
        total = f"max({total}, {kernels} x {fmt.seconds(cost.launch_s / kernels)})"
    lines.append(f"one stage-time: {total} = {fmt.seconds(cost.stage_seconds)}")
    over = f" + {fmt.seconds(cost.overhead_s)}" if cost.overhead_s else ""
    if cost.pp > 1 or over:
        terms, note = _pipeline_terms(cost)
        lines.append(f"pass: {terms}{over} = {fmt.seconds(cost.seconds)}{note}")
    return lines


def _pipeline_terms(cost: PassCost) -> tuple[str, str]:
    """The pass through the pipeline stages as passcost.pipeline_seconds sums it, and what the sum means."""
    slowest, m = fmt.seconds(cost.stage_seconds), cost.microbatches
    if cost.pp == 1:
        return slowest, ""
    runs: list[list] = []  # equal neighbours as one term: 7 x 818.5 us + 1.420 ms
    for t in (fmt.seconds(t) for t in cost.every_stage_s):
        if runs and runs[-1][1] == t:
            runs[-1][0] += 1
        else:
            runs.append([1, t])
    every = " + ".join(f"{n} x {t}" if n > 1 else t for n, t in runs)
    where = f" ({cost.pp} pipeline stages, {m} microbatch{'es' if m > 1 else ''}"
    if cost.schedule == "fill":
        more = f" + {m - 1} x {slowest}" if m > 1 else ""
        return f"{every}{more}", f"{where}, from empty: every stage once, then m - 1 more of the slowest)"
    if m == 1:
        return every, f"{where}: the token passes every stage in turn)"
    return f"max({every}, {m} x {slowest})", f"{where}, steady: every stage once, or m x the slowest)"


def _expert_pool(e: Estimate) -> str:
    """How the routed experts sit on the EP ranks, when there is more than one: `; experts: 256 + 32 redundant =
    288 slots, 4 on each of 72 EP ranks`."""
    moe, lay = e.model.moe, e.deployment.layout
    if moe is None or lay.ep == 1:
        return ""
    spare = lay.redundant_experts
    pool = f"{moe.experts} + {spare} redundant = {lay.expert_slots(moe.experts)} slots" if spare else f"{moe.experts}"
    return f"; experts: {pool}, {lay.slots_per_rank(moe.experts)} on each of {lay.ep} EP ranks, routed uniformly"


def _routing_lines(e: Estimate) -> list[str]:
    """The routed experts' counts the decode step is priced with (features.py, uniform routing): the busiest EP rank's
    token-expert pairs and the distinct experts it reads, with the numbers plugged in."""
    moe, lay, context = e.model.moe, e.deployment.layout, e.mean_decode_context
    if moe is None or context is None:
        return []
    x = e.deployment.compiled.vector([Segment(e.workload.batch, context, 1)])
    tokens, pairs, touched = x[TOKENS], x[EXPERT_PAIRS], x[EXPERTS_TOUCHED]
    k, slots, ep = moe.experts_per_token, lay.expert_slots(moe.experts), lay.ep
    local = slots // ep
    if ep == 1:
        shown = f"pairs = T k = {tokens:,.4g} x {k} = {pairs:,.4g}"
    else:
        sigma = pairs_load_sigma(slots, k, tokens, ep)
        shown = (f"pairs on the busiest of {ep} EP ranks = T k / ep + sigma sqrt(2 ln ep), sigma^2 = T k (1/ep)"
                 f"(1 - 1/ep)(E - k)/(E - 1): {tokens:,.4g} x {k} / {ep} + {sigma:,.4g} x "
                 f"{math.sqrt(2 * math.log(ep)):.4g} = {pairs:,.4g} (at most T min(k, E / ep))")  # fmt: skip
    distinct, spread = expected_distinct_experts(slots, k, tokens), pairs_spread_experts(local, pairs)
    return [
        f"routing (uniform, one microbatch of T = {tokens:,.4g} tokens, k = {k} of E = {slots} experts): {shown}",
        f"experts read on that rank = min(max(L (1 - (1 - 1/L)^pairs), E (1 - (1 - k/E)^T) / ep), L), L = {local} "
        f"its experts: min(max({spread:,.4g}, {distinct / ep:,.4g}), {local}) = {touched:,.4g}",
    ]


def _per_rank(dp: int) -> str:
    """How the per-sequence host cost counts under DP attention: each rank's scheduler takes its own sequences."""
    return f" (the busiest of {dp} DP ranks' share: each schedules its own)" if dp > 1 else ""


def _deployment(e: Estimate) -> Section:
    d, wl, p = e.deployment, e.workload, e.precision
    lay = d.layout
    w = get_format(p.weights)
    lines = [
        f"{e.model.name} on {lay.gpus} x {e.gpu.name}: {lay.label()}, {fmt.counted(lay.nodes, 'node')} of "
        f"{lay.gpus_per_node}" + _expert_pool(e),
        f"weights {p.weights} ({w.bits:g} bits: {w.source}); attention's projections {p.attention}; experts "
        f"{p.experts}; KV {p.kv}; "
        f"matmuls at {p.compute}; embedding and LM head at {p.embedding}"
        + (" (a GGUF file quantizes them too)" if get_format(p.embedding).whole_model else "")
        + (
            ""
            if p.fused_attention
            else f"; flash attention off: each scored pair's fp32 score is written, softmaxed "
            f"and read back, {SCORE_BYTES} B per pair and head, on top of the KV read"
        ),
        f"batch {wl.batch}, prompt {wl.prompt_tokens:,} (cached prefix {wl.cached_prefix_tokens:,}), output "
        f"{wl.output_tokens:,}",
    ]
    intra = d.links.intra
    if intra:
        lines.append(f"link inside a node: {_link_figures(intra)}")
        if intra.domain_gpus is not None and d.links.host is not None:  # a bridged pair, a PCIe card's CPU socket
            lines.append(f"a group of more than {intra.domain_gpus} GPUs: {_link_figures(d.links.host)}")
    return "Deployment", lines


def _link_figures(link: Link) -> str:
    """A link's rate, latency at its stated group, hop scaling and efficiency, as one line of the deployment."""
    scaled = (f" at {link.latency_ranks} GPUs, 2 x {link.latency_hop_us:g} us less for each GPU fewer"
              if link.latency_ranks and link.latency_hop_us is not None else "")  # fmt: skip
    mesh = (f" over {link.peer_links} point-to-point links, one to each peer (a group of n GPUs drives n - 1 of them: "
            f"(n - 1) / {link.peer_links} of it)" if link.peer_links else "")  # fmt: skip
    return (f"{link.kind}, {link.gb_s:g} GB/s per direction{mesh}, {link.latency_us:g} us per step{scaled}, efficiency "
            f"{link.efficiency:g} (expected)")  # fmt: skip


def _peaks(e: Estimate) -> Section:
    rates = e.deployment.rates("ceiling")
    f, bw = fmt.si(rates.flops_per_s, "FLOP/s"), fmt.si(rates.bytes_per_s, "B/s")
    ridge = rates.flops_per_s / rates.bytes_per_s
    return "Peaks (ceiling)", [
        f"ridge point of {e.gpu.name} at {e.precision.compute}: {f} / {bw} = {ridge:,.1f} FLOP/B",
    ]


def _weights(e: Estimate, step: PassCost) -> Section:
    lines = []
    for p in step.stages:
        st = p.stage
        if st.weight_bytes:
            where = st.name + (f" ({st.block})" if st.block else "")
            lines.append(
                f"{where}: {st.count} x {fmt.si(st.weight_bytes, 'B')} = "
                f"{fmt.si(st.count * st.weight_bytes, 'B')} at {st.weight_format}"
            )
    total = sum(p.stage.count * p.stage.weight_bytes for p in step.stages)
    parts = " + ".join(fmt.si(p.stage.count * p.stage.weight_bytes, "B") for p in step.stages if p.stage.weight_bytes)
    lines.append(f"weights one decode step reads per GPU: {parts} = {fmt.si(total, 'B')}")
    i = step.slowest_stage  # the step's kernels are that stage's
    held = ReplicaMemory(e.model, e.gpu, e.precision, e.layout).weights[i]
    where = f"a GPU of pipeline stage {i} (of 0..{e.layout.pp - 1})" if e.layout.pp > 1 else "each GPU"  # as listed
    fullest = "" if held == e.memory.per_gpu.weights else (
        f"; the memory table's fullest GPU holds {fmt.si(e.memory.per_gpu.weights, 'B')}")  # fmt: skip
    if held > total:  # the stage holds more than a step streams
        tower = "; the vision or audio tower, which decode never runs" if e.model.encoder_params else ""
        rest = fmt.si(held - total, "B")
        lines.append(f"weights held by {where}: {fmt.si(total, 'B')} read + {rest} not read = "
                     f"{fmt.si(held, 'B')} (not read by a step: the embedding table, looked up a row per "
                     f"token; for MoE, the experts no token in the step is routed to{tower}){fullest}")  # fmt: skip
    elif fullest:
        lines.append(f"weights held by {where}: {fmt.si(held, 'B')}, every one read{fullest}")
    return "Weights read per decode step (busiest GPU)", lines


_KEPT = {"global": "every token kept", "sliding": "the last {w:,} tokens kept",
         "chunked": "only the current {c:,}-token chunk kept (vLLM frees the earlier ones)",
         "sparse": "every token kept; each query attends the {k:,} its indexer selects"}  # fmt: skip


def _state_shape(m: ModelSpec, mixer: str) -> str:
    """A state layer's kind, layer count and state shape: the recurrent state plus the convolution's window."""
    n = m.plan.count(mixer=mixer)
    if mixer == "linear" and m.linear_attention:
        g = m.linear_attention
        recurrent, name = f"{g.value_heads} heads x {g.key_head_dim} x {g.value_head_dim}", "Gated DeltaNet"
        conv = f"{g.conv_channels:,} x {g.conv_kernel - 1}"
    else:
        assert m.mamba is not None
        s = m.mamba
        recurrent, name = f"{s.heads} heads x {s.head_dim} x {s.state_size}", "Mamba-2"
        conv = f"{s.conv_channels:,} x {s.conv_kernel - 1}"
    return f"{name} ({n} layers): state ({recurrent} + conv window {conv})"


def _cache_shape(m: ModelSpec, kv: str) -> str:
    """One token's K/V in one attention layer as its formula (counts.cache_bytes_per_token_per_layer): heads x dim,
    MLA's latent and RoPE key, or a sparse model's FP8 layout (the latent, a 4-byte scale per 128, a 16-bit RoPE
    key)."""
    bytes_ = get_format(kv).bytes
    if m.mla and m.sparse_attention and bytes_ == 1:
        return f"({m.mla.kv_lora_rank} + 4 x {math.ceil(m.mla.kv_lora_rank / 128)} + 2 x {m.mla.rope_head_dim}) B"
    if m.mla:
        return f"({m.mla.kv_lora_rank} + {m.mla.rope_head_dim}) x {bytes_:g} B"
    return f"2 x {m.kv_heads} KV heads x {m.head_dim} x {bytes_:g} B"


def _kind_lines(e: Estimate) -> list[str]:
    """One line per mixer kind: its layers, and the KV per token or the state per sequence one layer keeps."""
    m, p, lines = e.model, e.precision, []
    state_bytes = get_format(p.state).bytes
    for mixer in MIXERS:
        n = m.plan.count(mixer=mixer)
        if not n or mixer == "none":
            continue
        if mixer in KV_MIXERS:
            per = m.kv_bytes_per_token_per_layer(mixer, p.kv)
            s = m.sparse_attention if mixer == "sparse" else None
            index = f" + {s.index_head_dim} FP8 index key + {s.index_key_bytes} B scale" if s else ""
            kept = _KEPT[mixer].format(w=m.window or 0, c=m.chunk_tokens or 0, k=s.top_k_tokens if s else 0)
            lines.append(f"{mixer} attention ({n} layers): {_cache_shape(m, p.kv)}{index} = {per:,.0f} B per token "
                         f"each; {kept}")  # fmt: skip
        else:
            per = m.state_bytes_per_sequence_per_layer(mixer, p.state)
            lines.append(f"{_state_shape(m, mixer)} x {state_bytes:g} B = {per:,.0f} B per sequence each, whatever "
                         "its length")  # fmt: skip
    return lines


def _kv(e: Estimate) -> Section:
    m, mem = e.model, e.memory
    bytes_, n = get_format(e.precision.kv).bytes, m.kv_layers
    s = m.sparse_attention
    if s and m.plan.count(mixer="sparse") == n:  # each layer's index key (FP8 and its scale) too
        formula = f"{n} layers x ({_cache_shape(m, e.precision.kv)} + {s.index_head_dim} + {s.index_key_bytes} B)"
    elif m.mla:
        formula = f"{n} layers x {_cache_shape(m, e.precision.kv)}"
    else:
        formula = f"2 x {n} layers x {m.kv_heads} KV heads x {m.head_dim} x {bytes_:g} B"
    mixed = any(k.mixer != "global" for k in m.plan.kinds)  # then each kind says what it keeps
    lines = (_kind_lines(e) if mixed else []) + [f"per token, whole model: {formula} = {mem.kv_bytes_per_token:,.0f} B"]
    if mem.state_bytes_per_sequence:
        lines.append(f"state per sequence, whole model: {mem.state_bytes_per_sequence:,.0f} B, whatever its length")
    lines.append(_kv_held_line(e))
    return ("KV cache and state" if mem.state_bytes_per_sequence else "KV cache"), lines


def _kv_held_line(e: Estimate) -> str:
    """The KV (and state) the fullest GPU holds: its sequences (the batch split dp-way) x tokens x its layers' bytes
    per token; a product to redo where every layer caches every token (no window, chunk or cached prefix)."""
    mem, wl, lay = e.memory, e.workload, e.layout
    replica = ReplicaMemory(e.model, e.gpu, e.precision, lay)
    seqs, tokens, prefix = -(-wl.batch // lay.dp), wl.total_tokens, wl.cached_prefix_tokens
    split = fmt.counted(seqs, "sequence") + (
        f" (of the {wl.batch:,}, data parallel {lay.dp}-way)" if lay.dp > 1 else ""
    )
    held = f"this workload on the fullest GPU: {fmt.si(mem.per_gpu.kv, 'B')}"
    if mem.state_bytes_per_sequence:
        return held + f" KV + {fmt.si(mem.per_gpu.state, 'B')} state ({split} x {tokens:,} tokens)"
    fullest = [kinds for kinds in replica.kinds if replica.kv(kinds, wl.batch, tokens, prefix) == mem.per_gpu.kv]
    layers = sum(n for k, n in fullest[0] if k.mixer in KV_MIXERS) if fullest else 0
    every = all(k.mixer == "global" for k in e.model.plan.kinds) and not prefix
    if layers and every:  # the product, with the bytes one layer keeps per token on one GPU (KV heads split tp-way)
        product = (f"{fmt.counted(layers, 'layer')} x {fmt.counted(seqs, 'sequence')} x {fmt.counted(tokens, 'token')}"
                   f" x {replica.kv_per_token:,.0f} B")  # fmt: skip
        of = f" (of the {wl.batch:,} sequences, data parallel {lay.dp}-way)" if lay.dp > 1 else ""
        return f"this workload on the fullest GPU: {product} = {fmt.si(mem.per_gpu.kv, 'B')}{of}"
    windowed = any(k.mixer in ("sliding", "chunked") for k in e.model.plan.kinds)
    sparse = any(k.mixer == "sparse" for k in e.model.plan.kinds)
    how = [w for w, on in (("windowed as above", windowed and not prefix),
                           ("every token kept, with its index key", sparse),
                           ("the cached prefix stored once", prefix)) if on]  # fmt: skip
    return held + f" ({split} x {tokens:,} tokens{', ' + ', '.join(how) if how else ''})"


def _scenario_lines(e: Estimate, s: Scenario, name: str) -> list[str]:
    wl = e.workload
    if s.tpot_s is None:
        return [
            f"TPOT: none ({wl.output_tokens} output token: no decode step runs)",
            f"E2E = TTFT = {fmt.seconds(s.e2e_s)}",
        ]
    contexts = f"{wl.prompt_tokens:,}..{wl.prompt_tokens + wl.output_tokens - 2:,}"
    return [
        f"TPOT ({name}) = mean decode step over cached contexts {contexts} = {fmt.seconds(s.tpot_s)}",
        *_windowed_mean_lines(e, s),
        f"decode tokens/s: {wl.batch} / {fmt.seconds(s.tpot_s)} = {s.decode_tokens_per_s:,.1f}",
        f"E2E: {fmt.seconds(s.ttft_s)} + {wl.output_tokens - 1} x {fmt.seconds(s.tpot_s)} = {fmt.seconds(s.e2e_s)}",
    ]


def _windowed_mean_lines(e: Estimate, s: Scenario) -> list[str]:
    """Why TPOT is not the step shown at the mean context: a windowed or chunked layer's reads are not linear in the
    context (attend.kv_read_tokens), so the mean of the steps is summed context by context (compiled.decode_mean)."""
    wl, step = e.workload, s.decode_step
    if step is None or s.tpot_s is None or abs(step.seconds / s.tpot_s - 1) < 1e-3:
        return []
    first, last = wl.prompt_tokens, wl.prompt_tokens + wl.output_tokens - 2
    mid = (first + last) / 2
    at = f"the decode step above is at the mean context, {mid:,.0f} tokens: {fmt.seconds(step.seconds)}"
    lines = [f"{at}; TPOT is the mean of every step, not the step at the mean, where a layer reads a window of its "
             "context:"]  # fmt: skip
    for kind in attention_kinds(e.model):
        span = span_of(e.model, kind)
        if span is None:
            continue
        mean = sum(kv_read_tokens(e.model, kind, c) for c in range(first, last + 1)) / (last - first + 1)
        rule = f"min(c, {span:,})" if kind in ("sliding", "sparse") else f"c mod {span:,}"
        lines.append(f"  {e.model.plan.count(mixer=kind)} {kind} layers read {rule} cached tokens: "
                     f"{kv_read_tokens(e.model, kind, mid):,.0f} at the mean context, a mean of {mean:,.1f} over "
                     f"{first:,}..{last:,}")  # fmt: skip
    return lines


def _stage_memory(e: Estimate) -> list[str]:
    """Each pipeline stage's GPU (tp x dp of them alike): the per-rank breakdown behind the fullest one."""
    lay, wl, p = e.layout, e.workload, e.precision
    if lay.pp == 1:
        return []
    ranges = stage_layer_ranges(e.model.layers, lay.pp)
    lines = []
    for s, layers in enumerate(ranges):
        w = stage_weight_bytes(e.model, p, lay, layers, s == 0, s == len(ranges) - 1)
        kv = stage_kv_bytes(e.model, p, lay, layers, wl, wl.batch, wl.total_tokens)
        state = stage_state_bytes(e.model, p, lay, layers, wl.batch)
        held = f"{fmt.si(kv, 'B')} KV" + (f" + {fmt.si(state, 'B')} state" if state else "")
        lines.append(f"stage {s} (layers {layers.start}..{layers.stop - 1}, {lay.stage_gpus} GPUs): "
                     f"{fmt.si(w, 'B')} weights + {held} = {fmt.si(w + kv + state, 'B')} per GPU")  # fmt: skip
    return lines


def _reserve_line(e: Estimate) -> str:
    """The engine's reserve: 0.1 of the GPU, or of what weights and activations leave free (memory.reserve_beside)."""
    mem, b = e.memory, e.memory.per_gpu
    cap = fmt.si(mem.capacity_bytes_per_gpu, "B")
    engine, share = e.deployment.engine, e.layout.reserve_share
    whose = "a flag's" if engine.memory_share is not None else "default"
    if e.layout.reserve_holds_workspace:  # SGLang: the share its mem_fraction_static leaves, activations inside it
        return (f"reserve: max({share:.3g} x {cap} - {fmt.si(b.workspace, 'B')} workspace, 0) = "
                f"{fmt.si(b.reserve, 'B')} ({engine.label}{' ' + engine.build if engine.build else ''}'s {whose} "
                f"mem_fraction_static {1 - share:.3g} on this GPU and layout keeps weights and KV cache; the rest "
                "holds activations, CUDA graphs and the context)")  # fmt: skip
    if not e.layout.reserve_of_free:
        return (f"reserve: {share:.3g} x {cap} = {fmt.si(b.reserve, 'B')} ({1 - share:.3g} of the GPU kept for "
                f"weights, KV and activations, as vLLM's {whose} gpu_memory_utilization {1 - share:.3g} keeps it: the "
                "CUDA context, NCCL buffers, fragmentation, graph pools)")  # fmt: skip
    return (f"reserve: {RESERVE_FRACTION:g} x ({cap} - {fmt.si(b.weights, 'B')} weights - {fmt.si(b.workspace, 'B')} "
            f"workspace) = {fmt.si(b.reserve, 'B')} ({e.deployment.engine.label}'s KV cache takes 0.9 of the memory "
            "left free once weights and activations are loaded: free_gpu_memory_fraction 0.9)")  # fmt: skip


def _workspace_line(e: Estimate) -> str:
    """The activation workspace (memory.ReplicaMemory.gpu_bytes): a prefill chunk's live activations and the logits."""
    m, lay, wl, p = e.model, e.layout, e.workload, e.precision
    seqs = -(-wl.batch // lay.dp)
    act = get_format(p.activation).bytes
    scores, why = "", ""
    if not p.fused_attention:  # memory.ReplicaMemory.score_buffer
        scores = (f" + min({seqs:,} x {wl.computed_prompt_tokens:,} tokens, {UNFUSED_UBATCH_TOKENS:,} tokens) x "
                  f"{wl.total_tokens:,} x {m.attention_heads:,} / {lay.tp} x {SCORE_VALUE_BYTES} B")  # fmt: skip
        why = "; and, flash attention off, one layer's fp32 scores of a 512-token micro-batch against the context"
    share = f" / {lay.sampled_share}" if lay.sampled_share > 1 else ""  # each rank samples its own share
    whole = "its share of the vocabulary" if share else "the whole vocabulary"
    logits, of = f" + {seqs:,} x {m.vocab_size:,}{share} x {LOGIT_BYTES} B", f"; then the fp32 logits of {whole}"
    if e.memory.per_gpu.stage != lay.pp - 1:  # the fullest GPU is not the last stage's, which alone holds logits
        logits, of = "", f"; no logits: stage {e.memory.per_gpu.stage} holds none, the last stage samples"
    return (
        f"workspace: min({seqs:,} x {wl.computed_prompt_tokens:,} tokens, {PREFILL_CHUNK_TOKENS:,} tokens) x (4 x "
        f"{m.hidden_size:,} + 2 x {mlp_width(m):,} / {lay.tp}) x {act:g} B{logits}"
        f"{scores} = {fmt.si(e.memory.per_gpu.workspace, 'B')} (a prefill chunk's live activations, "
        f"at most {PREFILL_CHUNK_TOKENS:,} tokens: 4 of hidden size (residual, normed input, attention's input and "
        f"output) and the MLP's gate and up, split over TP, at "
        f"{p.activation}{of}{why})"
    )


def _held(b: GpuBytes) -> str:
    """A GPU's bytes as the sum of its parts."""
    state = f"{fmt.si(b.state, 'B')} state + " if b.state else ""
    return (
        f"{fmt.si(b.weights, 'B')} weights + {fmt.si(b.kv, 'B')} KV + {state}{fmt.si(b.workspace, 'B')} workspace + "
        f"{fmt.si(b.reserve, 'B')} reserve = {fmt.si(b.total, 'B')}"
    )


def _limit_lines(e: Estimate) -> list[str]:
    """The max batch and max context: the memory at each limit, and one past it, from the memory model's own sum."""
    mem, wl = e.memory, e.workload
    replica = ReplicaMemory(e.model, e.gpu, e.precision, e.layout)
    cap = fmt.si(mem.capacity_bytes_per_gpu, "B")
    prompt, tokens, prefix = wl.computed_prompt_tokens, wl.total_tokens, wl.cached_prefix_tokens

    def held(batch: int, prompt_tokens: int, held_tokens: int) -> GpuBytes:
        return replica.gpu_bytes(batch, prompt_tokens, held_tokens, prefix)

    def past(b: GpuBytes) -> str:
        return f"{fmt.si(b.total, 'B')} {'>' if b.total > mem.capacity_bytes_per_gpu else '<='} {cap}"

    if mem.max_batch == 0:
        batch = f"max batch at {tokens:,} tokens: 0: one sequence needs {_held(held(1, prompt, tokens))} > {cap}"
    else:
        at = held(mem.max_batch, prompt, tokens)
        batch = f"max batch at {tokens:,} tokens: {mem.max_batch:,}: {_held(at)} <= {cap}"
        batch += (
            f"; {mem.max_batch + 1:,} sequences: {past(held(mem.max_batch + 1, prompt, tokens))}"
            if mem.max_batch < MAX_BATCH
            else f" (the search stops at {MAX_BATCH:,})"
        )
    t = mem.max_context
    if t == 0:
        context = f"max context at batch {wl.batch:,}: 0: one token needs {past(held(wl.batch, 1, 1))}"
    else:
        whole = wl.cached_prefix_tokens
        context = (f"max context at batch {wl.batch:,} (all of it prompt, the largest workspace: it fits however it "
                   f"splits): {t:,}: {_held(held(wl.batch, context_prompt(t, whole), t))} <= {cap}")  # fmt: skip
        context += (
            f" (the model's own context limit, {e.model.max_context:,})"
            if t >= e.model.max_context
            else f"; {t + 1:,} tokens: {past(held(wl.batch, context_prompt(t + 1, whole), t + 1))}"
        )
    return [batch, context, f"smallest layout that fits: {mem.min_layout or 'none searched'}"]


def _memory(e: Estimate) -> Section:
    mem, g = e.memory, e.gpu
    b = mem.per_gpu
    cap = (
        f"capacity: {g.memory_runtime_mib:,.0f} x {MIB:,} B = {fmt.si(mem.capacity_bytes_per_gpu, 'B')} (runtime)"
        if g.memory_runtime_mib
        else f"capacity: {g.memory_gb:g} GB as marketed (no memory_runtime_mib)"
    )
    return "Memory (fullest GPU)", [
        cap,
        _reserve_line(e),
        _workspace_line(e),
        f"used: {_held(b)} -> {'fits' if mem.fits else 'does not fit'}",
        *_limit_lines(e),
        *_stage_memory(e),
    ]


def _cost(e: Estimate, s: Scenario) -> list[str]:
    wl, gpus = e.workload, e.layout.gpus
    lines = []
    if s.joules_per_output_token is not None and s.tpot_s is not None:
        lines.append(
            f"J/output token (TDP, an upper bound): {e.gpu.tdp_w:g} W x {gpus} x {fmt.seconds(s.tpot_s)} / "
            f"{wl.batch} = {s.joules_per_output_token:.4g} J"
        )
    if e.price_per_hour_usd is None:
        return lines + ["$/1M tokens: no price (pass --price USD per GPU-hour)"]
    hourly = e.price_per_hour_usd
    if s.usd_per_million_output_tokens is not None and s.tpot_s is not None:
        lines.append(
            f"$/1M output: {hourly:g} $/h x {gpus} / 3600 x {fmt.seconds(s.tpot_s)} / {wl.batch} x 1e6 = "
            f"{s.usd_per_million_output_tokens:.4g} $"
        )
    lines.append(
        f"$/1M input: {hourly:g} $/h x {gpus} / 3600 x {fmt.seconds(s.ttft_s)} / "
        f"({wl.batch} x {wl.prompt_tokens}) x 1e6 = {s.usd_per_million_input_tokens:.4g} $"
    )
    return lines


def _critical_lines(e: Estimate) -> list[str]:
    """Each critical batch, with the two sides it compares just below it and at it (the ceiling's rates)."""
    d, rates = e.deployment, e.deployment.rates("ceiling")
    kinds = "KV and state" if e.memory.state_bytes_per_sequence else "KV"
    cached = e.mean_decode_context if e.mean_decode_context is not None else e.workload.prompt_tokens

    def sides(batch: int) -> str:
        compute, memory = matmul_sides(d, rates, batch)
        sign = ">" if compute > memory else "<="
        return f"{one(batch)}: {fmt.seconds(compute)} of FLOPs {sign} {fmt.seconds(memory)} of bytes"

    def one(batch: int) -> str:  # under PP the sides are one microbatch's on the slowest stage, as the step's are
        m = microbatches(d.layout, [Segment(batch, cached, 1)])
        return f"batch {batch:,}" + (
            f" (a microbatch of {batch / m:,.4g} of {m}, the slowest stage's)" if m > 1 else ""
        )

    def reads(batch: int) -> str:
        kv, weights = sequence_and_weight_bytes(d, rates, batch, cached)
        sign = ">=" if kv >= weights else "<"
        return f"{one(batch)}: {fmt.si(kv, 'B')} {kinds} {sign} {fmt.si(weights, 'B')} weights"

    b = e.critical_batch_compute
    compute = (
        f"weight matmuls turn compute-bound at batch {b:,} ({sides(b - 1) + '; ' if b > 1 else ''}{sides(b)}; the "
        "matmuls of one decode step on the busiest GPU, independent of context)"
        if b
        else f"weight matmuls never turn compute-bound up to batch {CRITICAL_BATCH_SEARCH_LIMIT:,}"
    )
    k = e.critical_batch_kv
    kv = (
        f"{kinds} reads outweigh weight reads at batch {k:,} at {cached:,.0f} cached tokens "
        f"({reads(k - 1) + '; ' if k > 1 else ''}{reads(k)}; past it, batching stops being nearly free)"
        if k
        else f"{kinds} reads never outweigh weight reads up to batch {CRITICAL_BATCH_SEARCH_LIMIT:,}"
    )
    return [compute, kv]


def explain(e: Estimate) -> list[Section]:
    """(headline, lines) pairs; every number in them is a part the engine computed."""
    ceiling, expected = e.deployment.rates("ceiling"), e.deployment.rates("expected")
    c = e.ceiling
    sections = [_deployment(e), _peaks(e)]
    if c.decode_step is not None:
        sections.append(_weights(e, c.decode_step))
    sections.append(_kv(e))
    if c.decode_step is not None:
        sections.append(
            (
                f"Decode step at {e.mean_decode_context:,.0f} cached tokens (ceiling, busiest GPU)",
                _pass_lines(c.decode_step, ceiling) + _routing_lines(e),
            )
        )
    sections += [
        ("TPOT, tokens/s, E2E (ceiling)", _scenario_lines(e, c, "ceiling")),
        (
            f"TTFT = prefill of {e.workload.batch} x {e.workload.computed_prompt_tokens:,} tokens (ceiling)",
            _pass_lines(c.prefill, ceiling),
        ),
        _memory(e),
        ("Critical batches", _critical_lines(e)),
        ("Cost and energy (ceiling)", _cost(e, c)),
        ("Expected", _expected_lines(e, expected)),
    ]
    return sections


def _kernel_count(engine: EngineProfile) -> str:
    """How many kernels the era launches per stage row, and whence (EraFields.kernels_per_row)."""
    return (
        f" (both paid on {engine.kernels_per_row:.3g} kernels per kernel row, one per collective: "
        f"{_first_clause(engine.kernels_per_row_source)})"
    )


def _first_clause(source: str) -> str:
    """A profile source's first clause, for a one-line why (its full text is in the engine file)."""
    return source.split("; ")[0] or "its profile"


def _weight_only(e: Estimate, k: KernelEfficiency, mark: Callable[[str], str]) -> str:
    """The weight-only (dequantizing) class of each format this deployment's matmuls read that way, or ''."""
    ceiling = e.deployment.rates("ceiling")
    formats = dict.fromkeys(f for kind, f, *_ in e.deployment.compiled.kernel_keys
                            if kernel_class(kind, matmul_path(kind, f, ceiling)[1]) == "weight_only")  # fmt: skip
    return "".join(f", weight-only {f} {k.memory_of('weight_only', f):.3g}{mark('m.wo.' + kernel_family(f))}"
                   for f in formats)  # fmt: skip


def _expert_rows_line(e: Estimate, rates: Rates) -> list[str]:
    """The routed experts' gathered rows at the GPU's pace, where it states one (roofline.kernel_rate), or none."""
    experts = next(((f, rf) for kind, f, rf, _ in e.deployment.compiled.kernel_keys if kind == "experts" and rf), None)
    if experts is None or e.deployment.engine.moe_gemm_kernel != "fused-moe":
        return []
    fmt_, row_flops = experts
    path = matmul_path("experts", fmt_, rates)[0]
    dtype, engine = expert_row_dtype(path, rates), e.deployment.engine
    (figure, kernel), pace = row_figure(e.gpu, dtype, engine.moe_row_kernels), expert_row_pace(path, rates)
    if figure is None:  # the rates hold the figure's pace
        return [f"routed experts' gathered rows: {engine.label}'s fused-MoE kernel has no pace published "
                f"for {e.gpu.name} at {dtype}, none priced"]  # fmt: skip
    where = f"{engine.label}'s fused-MoE kernel" if kernel is None else (
        f"{kernel} (the kernel {engine.label} runs {dtype} experts in on {e.gpu.name} from "
        f"{next(s.since for s in engine.moe_row_kernels if s.experts == dtype)})")  # fmt: skip
    return [f"routed experts' gathered rows: {fmt.si(pace, 'elements/s')} in {where}, on top of their math (a "
            f"token-expert pair's row is hidden + width elements, {row_flops:,.0f} FLOPs each through both GEMMs; "
            f"1 / rate is 1 / GEMM rate + 1 / {fmt.si(row_flops * pace, 'FLOP/s')}); the ceiling: none "
            f"[{figure.provenance}]"]  # fmt: skip


def _expected_lines(e: Estimate, rates: Rates) -> list[str]:
    g, peak, engine = e.gpu, e.deployment.rates("ceiling"), e.deployment.engine
    hw, gap = g.hardware, engine.gap(g.platform)
    k, basis = engine.kernels, engine.basis
    attention = attention_kernel(e.model)  # the kernel class that reads this model's KV cache
    # a file written before the split prices MLA with `attention`'s value, and says whose it is
    unsplit = attention == "attention_mla" and k.memory.attention_mla is None
    attention_key = "m.attention" if unsplit else "m." + attention
    copy, gemm = hw.copy_bandwidth, hw.gemm_for(e.precision.compute) or hw.gemm_for("bf16")

    def mark(key: str) -> str:
        return f" ({basis.get(key, 'prior' if engine.name != 'generic' else 'identity')})"

    lines = [
        f"hardware ({g.name}, {g.platform}): {g.expected_provenance_at(e.precision.compute)}",
        f"copy: {fmt.si(peak.bytes_per_s, 'B/s')} x {copy.fraction:g} = {fmt.si(rates.bytes_per_s, 'B/s')} "
        f"[{copy.provenance}]",
    ]
    if gemm is not None:
        lines.append(f"GEMM ({e.precision.compute}): {fmt.si(peak.flops_per_s, 'FLOP/s')} x {gemm.fraction:g} = "
                     f"{fmt.si(rates.flops_per_s, 'FLOP/s')} [{gemm.provenance}]")  # fmt: skip
    half = hw.gemm_for("bf16")
    wide_experts = e.model.moe is not None and not rates.narrow_experts and rates.compute_dtype in NARROW_COMPUTE
    if half is not None and gemm is not half and rates.float16_flops_per_s:  # attention, the LM head at 16 bits
        stay = "attention, a 16-bit LM head" + (", the routed experts" if wide_experts else "")
        lines.append(f"GEMM (bf16, for the matmuls that stay 16-bit: {stay}): "
                     f"{fmt.si(peak.float16_flops_per_s, 'FLOP/s')} x {half.fraction:g} = "
                     f"{fmt.si(rates.float16_flops_per_s, 'FLOP/s')} [{half.provenance}]")  # fmt: skip
    lines += [
        f"engine: {engine.label} ({engine.summary or engine.source}); each kernel class at the hardware's rate "
        "x its efficiency, capped at the datasheet",
        f"memory side: GEMV {k.memory.gemv:.3g}{mark('m.gemv')}{_weight_only(e, k, mark)}, decode attention "
        f"({ATTENTION_NAME[attention]}: {attention}) {k.memory_of(attention):.3g}{mark(attention_key)}, routed "
        f"experts x{k.memory.moe:.3g}{mark('m.moe')} on top of their format's class",
        f"compute side: GEMM {k.compute.gemm:.3g}{mark('c.gemm')}, prefill attention {k.compute.attention:.3g}"
        f"{mark('c.attention')}, MoE {k.compute.moe:.3g}{mark('c.moe')}",
    ]
    fa2 = fa2_share(g, engine) if e.precision.fused_attention else 1.0  # unfused: plain GEMMs
    if fa2 != 1.0 and hw.fa2_attention is not None:
        why = _first_clause(engine.prefill_attention_source)
        lines.append(f"prefill attention x{fa2:g} on top: {engine.label}'s kernels are FlashAttention-2-class, "
                     f"which leave {g.name}'s newer tensor-core paths idle ({why}) "
                     f"[{hw.fa2_attention.provenance}]")  # fmt: skip
    if wide_experts:
        lines.append(f"routed experts at 16 bits under {engine.label} ({_first_clause(engine.moe_gemm_source)}); the "
                     f"ceiling: at {rates.compute_dtype}")  # fmt: skip
    moe = mma_sync_share(g, engine) if e.model.moe else 1.0
    if moe != 1.0 and hw.mma_sync_gemm is not None:
        lines.append(f"routed experts' compute x{moe:g} on top: {engine.label}'s MoE grouped GEMM is an Ampere/Ada-"
                     f"generation (mma.sync) kernel, which leaves {g.name}'s warpgroup MMA idle "
                     f"[{hw.mma_sync_gemm.provenance}]")  # fmt: skip
    lines += _expert_rows_line(e, rates)
    fp8_cache = peak.compute_dtype == "fp8" and matmul_path("attention", e.precision.kv, peak)[0] == "attention"
    if fp8_cache and not rates.fp8_attention:
        why = ("its kernels are FlashAttention-2-class, which have no FP8 path" if e.precision.fused_attention
               else "its attention kernels are FlashAttention-2-class, and it runs no FP8 attention")  # fmt: skip
        lines.append(f"attention at 16 bits: {engine.label} multiplies the FP8 cache at the 16-bit rate ({why}; the "
                     "ceiling: at FP8)")  # fmt: skip
    if rates.unhidden:
        lines.append(f"each kernel: max(compute, memory) + {rates.unhidden:g} x min(compute, memory) (its loads "
                     f"and math overlap imperfectly; the ceiling hides it all) [{UNHIDDEN_SOURCE}]")  # fmt: skip
    if rates.attention_floor_s:
        floor_us = rates.attention_floor_s * 1e6
        lines.append(f"each attention kernel: + {floor_us:.3g} us whatever its work, once per layer and pass (the "
                     f"ceiling: none) [{ATTENTION_FLOOR_SOURCE}]")  # fmt: skip
    if g.platform != "cuda":
        sides = {"memory": gap.memory, "GEMM": gap.compute, "prefill attention": gap.attention, "step": gap.step}
        keys = {"memory": "memory", "GEMM": "compute", "prefill attention": "attention", "step": "step"}
        parts = [f"{name} x{value:.3g} ({gap.basis.get(f'{g.platform}.{keys[name]}', 'prior')})"
                 for name, value in sides.items()]  # fmt: skip
        lines.append(f"platform gap on {g.platform}: {', '.join(parts)} (the engine's {g.platform} build, not the "
                     "hardware)")  # fmt: skip
    coll = rates.collective_costs
    lines.append(
        f"host costs: {rates.step_overhead_s * 1e6:,.0f} us per step{mark('step_us')} + "
        f"{rates.sequence_overhead_s * 1e6:.3g} us per sequence in it{mark('seq_us')}"
        f"{_per_rank(e.layout.dp)}, "
        f"{rates.launch_overhead_s * 1e6:.3g} us per launched kernel"
        f"{mark('launch_us') if rates.launch_overhead_s else ''}"
        f", {rates.kernel_overhead_s * 1e6:.3g} us GPU gap per kernel{mark('kernel_us')}"
        f"{_kernel_count(engine) if rates.kernels_per_row != 1 else ''}, "
        f"{rates.request_overhead_s * 1e6:,.0f} us per request{mark('request_us')}; per collective "
        f"{coll.nvlink:.3g} us NVLink, {coll.pcie:.3g} us PCIe, {coll.network:.3g} us network, added to the link's "
        "latency; each collective then runs the cheapest algorithm for its payload at these rates (one-shot, "
        "two-shot, ring: collectives.cheapest), which may differ from the ceiling's lines above"
    )  # fmt: skip
    gpus = e.layout.stage_gpus
    if rates.launch_overhead_s and rates.one_host_thread and gpus > 1:
        lines.append(f"launches: one host thread launches the kernels of all {gpus} GPUs of a pipeline stage, one "
                     f"GPU after another, so each of one GPU's kernels costs the host {gpus} x "
                     f"{fmt.seconds(rates.launch_overhead_s)} = {fmt.seconds(rates.launch_s(gpus, 0.0))} "
                     f"({_first_clause(engine.one_host_thread_source)})")  # fmt: skip
    if rates.eager_launch_overhead_s:  # a graph era past the batch its graphs capture (EraFields.eager_launch_us)
        lines.append(f"CUDA graphs: {engine.label} captures decode steps of up to {rates.graph_cap_tokens:,.0f} "
                     f"sequences per data-parallel rank on this GPU and TP; a larger step runs eager, each kernel "
                     f"launched from the host at {fmt.seconds(rates.eager_launch_overhead_s)}, a floor on its time "
                     f"({_first_clause(engine.eager_launch_source)}; prefill passes are not priced so)")  # fmt: skip
    step = e.expected.decode_step
    if step is not None and step.launch_s:  # the host's launches as a floor on the decode step (eager eras)
        launched, gpu = rates.launched(*step.rows), fmt.seconds(step.gpu_s)
        sets = "the launches set" if step.launch_bound else "the GPU sets"
        lines.append(f"decode step at the mean context: max(the GPU's {gpu}, {launched:,.0f} kernels x "
                     f"{fmt.seconds(step.launch_s / launched)} = {fmt.seconds(step.launch_s)} of launches): {sets} "
                     f"it, then + {fmt.seconds(step.overhead_s)} on the host")  # fmt: skip
    if rates.comm_overlap:
        lines.append(f"overlap: {rates.comm_overlap:.0%} of the expert all-to-all hidden behind compute")
    elif e.layout.gpus > 1:  # the ceiling hides every collective it can (its steps subtract them, 'hidden')
        lines.append("overlap: none; the collectives run in series with the kernels (the ceiling alone hides them)")
    band = e.band
    lines.append(
        f"80% band (time x {band.low:.4g} to x {band.high:.4g}, neither end past the ceiling's figure): {band.basis}"
    )
    x = e.expected
    lines.append(
        f"TTFT {fmt.seconds(x.ttft_s)}, TPOT {fmt.seconds(x.tpot_s) if x.tpot_s else 'none'}"
        + (f", {x.decode_tokens_per_s:,.1f} tokens/s" if x.decode_tokens_per_s else "")
    )
    return lines + _cost(e, x)


def explanation_lines(e: Estimate) -> list[str]:
    """The explanation as flat lines (headings end with a colon), for JSON and CSV (the CLI's and the API's)."""
    return [line for head, body in explain(e) for line in (f"{head}:", *body)]
