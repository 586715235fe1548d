"""The arithmetic behind each headline number, with the values plugged in (what `--explain` prints)."""

from __future__ import annotations

from tokcost import fmt
from tokcost.engine.estimate import Estimate
from tokcost.engine.memory import RESERVE_FRACTION
from tokcost.engine.roofline import ceiling_rates
from tokcost.engine.traffic import matmul_params_per_token
from tokcost.formats import bits_of


def explain(e: Estimate) -> list[tuple[str, list[str]]]:
    """(headline, lines) pairs; every number in them comes from the specs and the workload."""
    m, g, wl, p = e.model, e.gpu, e.workload, e.precision
    rates = ceiling_rates(g, p.compute)
    n, b = wl.gpus, wl.batch
    step = e.ceiling.decode_step
    weights, attention, comm = step.part("weights"), step.part("attention"), step.part("communication")
    c = e.mean_decode_context
    kv_tok = m.kv_bytes_per_token(p.kv)
    kv_formula = (
        f"{m.layers} layers x ({m.mla.kv_lora_rank} latent + {m.mla.rope_head_dim} rope) x {bits_of(p.kv) / 8:g} B"
        if m.mla
        else f"2 x {m.layers} layers x {m.kv_heads} KV heads x {m.head_dim} head_dim x {bits_of(p.kv) / 8:g} B"
    )
    sections = [
        (
            "Peaks (ceiling)",
            [
                f"{g.name}: {g.memory_bandwidth_gb_s:,g} GB/s memory, {rates.flops_per_s / 1e12:,.1f} TFLOP/s dense "
                f"{p.compute}; ridge point = {rates.flops_per_s / rates.bytes_per_s:,.0f} FLOP/byte",
            ],
        ),
        (
            "Weights read per decode step",
            [
                f"{m.params_total:,} params ({m.params_active:,} active per token); block linears at {p.weights}"
                + (f", experts at {p.experts}" if m.moe else "")
                + f", embedding/LM head at {p.embedding}",
                f"per GPU (/{n}): {fmt.gb(weights.bytes)} = block weights + LM head "
                f"({m.vocab_size:,} x {m.hidden_size:,}) + {b} embedding rows",
            ],
        ),
        (
            "KV cache",
            [
                f"per token: {kv_formula} = {kv_tok:,.0f} B",
                f"this workload: {b} seq x {wl.total_tokens:,} tokens -> {fmt.gb(e.memory.kv_cache_bytes)}",
            ],
        ),
        (
            f"Decode step at the mean context ({c:,.0f} tokens), ceiling",
            [
                f"weights: max({fmt.tflop(weights.flops)} / {fmt.rate_tflops(rates.flops_per_s)}, "
                f"{fmt.gb(weights.bytes)} / {fmt.rate_gb_s(rates.bytes_per_s)}) = "
                f"{fmt.ms(weights.seconds)} ({weights.bound})",
                f"  FLOPs = 2 x {matmul_params_per_token(m):,} matmul params x {b} / {n} GPU",
                f"attention: max({fmt.tflop(attention.flops)} / peak, {fmt.gb(attention.bytes)} / bandwidth) = "
                f"{fmt.ms(attention.seconds)} ({attention.bound}); "
                f"bytes = {b} x ({c:,.0f} read + 1 written) x {kv_tok:,.0f} B",
                f"communication: {fmt.ms(comm.seconds)}"
                + (
                    f" = {2 * m.layers} all-reduces x ring(2 x {n - 1}/{n} x "
                    f"{comm.bytes / max(2 * m.layers, 1):,.0f} B "
                    f"/ {g.link.gb_s if g.link else 0:g} GB/s + {g.link.latency_us if g.link else 0:g} us)"
                    if n > 1
                    else " (1 GPU)"
                ),
                f"step = {fmt.ms(step.seconds)}",
            ],
        ),
        (
            "TPOT, tokens/s, E2E (ceiling)",
            [
                f"TPOT = mean step over contexts {wl.prompt_tokens + 1:,}.."
                f"{wl.prompt_tokens + max(wl.output_tokens - 1, 1):,}"
                f" = {fmt.ms(e.ceiling.tpot_s)}",
                f"decode tokens/s = {b} / {fmt.ms(e.ceiling.tpot_s)} = {e.ceiling.decode_tokens_per_s:,.1f}",
                f"E2E = TTFT + (O - 1) x TPOT = {fmt.ms(e.ceiling.ttft_s)} + {wl.output_tokens - 1} x "
                f"{fmt.ms(e.ceiling.tpot_s)} = {fmt.ms(e.ceiling.e2e_s)}",
            ],
        ),
        ("TTFT = prefill (ceiling)", _prefill_lines(e)),
        (
            "Memory",
            [
                f"weights {fmt.gb(e.memory.weights_bytes)} + KV {fmt.gb(e.memory.kv_cache_bytes)} + workspace "
                f"{fmt.gb(e.memory.workspace_bytes)} + reserve {fmt.gb(e.memory.reserve_bytes)} "
                f"({RESERVE_FRACTION:.0%} of each GPU) = {fmt.gb(e.memory.total_bytes)} "
                f"of {fmt.gb(e.memory.capacity_bytes)}"
                f" -> {'fits' if e.memory.fits else 'does not fit'}",
                f"max batch at {wl.total_tokens:,} tokens: {e.memory.max_batch:,}; max context at batch {b}: "
                f"{e.memory.max_context:,} (capped at the model's {m.max_context:,})",
            ],
        ),
        (
            "Critical batch",
            [
                "smallest batch whose decode step spends longer on FLOPs than on bytes: "
                + (
                    f"{e.critical_batch:,}"
                    if e.critical_batch
                    else "none (KV reads grow with the batch as fast as FLOPs)"
                ),
            ],
        ),
        ("Cost and energy", _cost_lines(e)),
        (
            "Expected",
            [
                f"achievable: {g.achievable.bandwidth:.0%} of bandwidth, {g.achievable.compute:.0%} of compute, "
                f"+{g.achievable.step_overhead_us:g} us per step"
                + (
                    f" ({g.achievable.weight_only_quant_bandwidth:.0%} of bandwidth for weight-only quantized kernels)"
                    if g.achievable.weight_only_quant_bandwidth
                    else ""
                ),
                f"TTFT {fmt.ms(e.expected.ttft_s)}, TPOT {fmt.ms(e.expected.tpot_s)}, "
                f"{e.expected.decode_tokens_per_s:,.1f} tokens/s",
            ],
        ),
    ]
    return sections


def _prefill_lines(e: Estimate) -> list[str]:
    wl, pre = e.workload, e.ceiling.prefill
    rates = ceiling_rates(e.gpu, e.precision.compute)
    computed = wl.computed_prompt_tokens
    return [
        f"FLOPs = 2 x matmul params x {wl.batch} x {computed:,} tokens + causal attention "
        f"(~{e.model.attention_flops_per_token_per_context:,} x P^2/2 x {wl.batch}) = {fmt.tflop(pre.flops)}",
        f"time = max({fmt.tflop(pre.flops)} / {fmt.rate_tflops(rates.flops_per_s)}, {fmt.gb(pre.bytes)} / "
        f"{fmt.rate_gb_s(rates.bytes_per_s)}) per part, summed = {fmt.ms(pre.seconds)} ({pre.bound}-bound)",
    ] + (
        [f"cached prefix: {wl.cached_prefix_tokens:,} tokens read from the KV cache, not recomputed"]
        if wl.cached_prefix_tokens
        else []
    )


def _cost_lines(e: Estimate) -> list[str]:
    wl, s = e.workload, e.ceiling
    if s.joules_per_output_token is None:
        lines = [f"J/output token: {e.gpu.name} has no tdp_w, so no energy figure"]
    else:
        lines = [
            f"J/output token = {e.gpu.tdp_w:g} W TDP x {wl.gpus} GPU x {fmt.ms(s.tpot_s)} / {wl.batch} = "
            f"{s.joules_per_output_token:.3f} J (an upper bound: boards rarely draw full TDP in decode)"
        ]
    if e.price_per_hour_usd is None:
        return lines + ["$/1M tokens: no price (pass --price USD per GPU-hour)"]
    hourly = e.price_per_hour_usd
    return lines + [
        f"$/1M output = ${hourly:g}/h x {wl.gpus} / 3600 x {fmt.ms(s.tpot_s)} / {wl.batch} x 1e6 = "
        f"{fmt.usd(s.usd_per_million_output_tokens)}",
        f"$/1M input = ${hourly:g}/h x {wl.gpus} / 3600 x {fmt.ms(s.ttft_s)} / "
        f"({wl.batch} x {wl.prompt_tokens:,}) x 1e6"
        f" = {fmt.usd(s.usd_per_million_input_tokens)}",
    ]
