"""Multi-GPU, multi-node and expert-parallel rows (multinode.yaml) priced with their own layouts: the hard class.

These rows are never fitted on; they check what the fitted "expected" says where the layout does the work (EP all-to-all
across nodes, DP attention, prefill/decode disaggregation). One engine instance is tp x pp x dp GPUs with ep inside
it, priced by the engine (its TTFT and mean TPOT) on the row's network (its stated kind, else the GPU spec's
default). Each metric is read as one phase of that instance:
- input tokens/s (a prefill pool): one prefill pass of the instance's batch, batch x prompt / TTFT;
- output tokens/s, tokens/s per user, ITL (a decode pool): a decode step at the row's context (prompt + half the
  output), batch / TPOT; per user 1 / TPOT;
- a disaggregated unit of prefill and decode instances serving requests end to end: the smaller of what its decode
  instances emit (batch / TPOT each) and what its prefill instances admit (prompts/s x output tokens), the decode
  instances each running the unit's concurrency share, capped by the KV cache and the engine's cap per DP rank.
Per node and per GPU divide by the pool's nodes or GPUs. A row without the lengths or the concurrency its metric
needs, or on a GPU with no built-in spec (recorded under its published name), is listed with the reason and not
priced.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from tokcost.engine.estimate import deployment, times
from tokcost.engine.memory import ReplicaMemory
from tokcost.engine.workload import Workload
from tokcost.errors import UsageError
from tokcost.hardware.library import builtin_gpus, load_network
from tokcost.hardware.spec import GpuSpec, Link
from tokcost.models.spec import ModelSpec
from tokcost.profiles import EngineProfile
from tokcost.validation.serving_data import MultinodeRow

# Tokens one DP rank prefills per pass when the row does not say: vLLM's and SGLang's default token budget per
# scheduler step (max_num_batched_tokens / chunked_prefill_size, 8192).
PREFILL_TOKENS_PER_RANK = 8192
# The network a row names, as tokcost's built-in networks (a stated kind without a rate takes the GPU's default).
NETWORKS = {"infiniband hdr": "ib-hdr-200", "infiniband ndr": "ib-ndr-400", "roce": "roce-400"}


@dataclass(frozen=True, slots=True)
class MultinodeResult:
    """One multinode row: its predictions (None when not priced), or the reason it is not priced."""

    row: MultinodeRow
    ceiling: float | None
    expected: float | None
    network: str
    reason: str | None = None

    @property
    def error(self) -> float | None:
        """Expected / measured - 1."""
        return None if self.expected is None else self.expected / self.row.value - 1

    @property
    def violation(self) -> bool:
        """The measurement beats the ceiling (latencies: is shorter)."""
        if self.ceiling is None:
            return False
        if self.row.metric.endswith("_ms"):
            return self.row.value < self.ceiling
        return self.row.value > self.ceiling


def network_of(row: MultinodeRow, gpu: GpuSpec) -> Link | None:
    """The row's network: a named kind of a known rate, else the GPU spec's default; None on one node."""
    if row.nodes == 1:
        return None
    name = NETWORKS.get(row.network.strip().lower()) or gpu.network
    return load_network(name) if name else None


def _instance_batch(row: MultinodeRow) -> int:
    """Sequences of one instance: the stated batch per GPU (DP rank) times the ranks, or the unit's share."""
    assert row.batch is not None
    if row.batch_scope == "gpu":
        return row.batch * row.dp
    return math.ceil(row.batch / row.instances)


def _workload(row: MultinodeRow, batch: int, prompt: int, output: int) -> Workload:
    return Workload(batch=batch, prompt_tokens=prompt, output_tokens=output, tp=row.tp, pp=row.pp, ep=row.ep,
                    dp=row.dp, redundant_experts=row.redundant_experts, gpus_per_node=row.gpus_per_node,
                    weights_dtype=row.weights, kv_dtype=row.kv, compute_dtype=row.compute)  # fmt: skip


def _both(
    model: ModelSpec, gpu: GpuSpec, wl: Workload, net: Link | None, eng: EngineProfile
) -> tuple[tuple[float, float | None], ...]:
    """(TTFT, TPOT) under the ceiling and under the engine's expected rates."""
    d = deployment(model, gpu, wl, net, eng)
    return times(d, wl, d.rates("ceiling")), times(d, wl, d.rates("expected"))


def _missing(row: MultinodeRow) -> str | None:
    """Why a row cannot be priced, or None."""
    if row.gpu not in builtin_gpus():
        return f"{row.gpu} has no built-in GPU spec"
    if row.metric == "request_throughput_rps" and (row.prompt_tokens is None or row.output_tokens is None):
        return "request lengths not stated (ShareGPT means not published for this run)"
    if row.batch is None or row.prompt_tokens is None:
        return "batch or lengths not stated (production traffic)"
    if row.prefill_decode == "disaggregated" and row.instances > 1 and row.output_tokens is None:
        return "output length not stated for an end-to-end unit"
    return None


def price_multinode(
    row: MultinodeRow, models: Mapping[str, ModelSpec], gpus: Mapping[str, GpuSpec], engine: EngineProfile
) -> MultinodeResult:
    """One multinode row under the ceiling and under its engine's expected rates (see the module docstring)."""
    reason = f"excluded: {row.exclude}" if row.exclude else _missing(row)
    if reason is not None:
        return MultinodeResult(row, None, None, row.network, reason)
    try:
        return _price(row, models[row.model], gpus[row.gpu], engine)
    except UsageError as exc:  # a layout tokcost cannot build
        return MultinodeResult(row, None, None, row.network, f"layout: {exc}")


def _price(row: MultinodeRow, model: ModelSpec, gpu: GpuSpec, engine: EngineProfile) -> MultinodeResult:
    net = network_of(row, gpu)
    assert row.batch is not None and row.prompt_tokens is not None
    prompt, output = row.prompt_tokens, row.output_tokens or 1
    values = []
    if row.metric.startswith("input_tokens"):  # a prefill pool: one pass of the instance's batch
        batch = _instance_batch(row)
        for ttft, _ in _both(model, gpu, _workload(row, batch, prompt, 1), net, engine):
            values.append(batch * prompt / ttft / _per(row, row.instances))
    elif row.prefill_decode == "disaggregated" and row.instances > 1:
        values = _end_to_end(row, model, gpu, net, engine)
    else:  # a decode pool at the row's context
        batch = _instance_batch(row)
        context = prompt + (output - 1) // 2
        for _, tpot in _both(model, gpu, _workload(row, batch, context, 2), net, engine):
            assert tpot is not None
            values.append(_decode_metric(row, batch * row.instances, tpot))
    name = net.name if net is not None else "none (one node)"
    return MultinodeResult(row, values[0], values[1], name)


def _per(row: MultinodeRow, instances: int) -> float:
    """What a per-node or per-GPU metric divides the pool's rate by (instances of the pool share the nodes evenly)."""
    if row.metric.endswith("_per_node"):
        return row.nodes * instances / row.instances
    if row.metric.endswith("_per_gpu"):
        return row.gpus * instances / row.instances
    return 1.0


def _decode_metric(row: MultinodeRow, sequences: int, tpot_s: float) -> float:
    if row.metric == "tokens_per_s_per_user":
        return 1 / tpot_s
    if row.metric == "itl_ms":
        return tpot_s * 1e3
    return sequences / tpot_s / _per(row, row.instances)


def _end_to_end(
    row: MultinodeRow, model: ModelSpec, gpu: GpuSpec, net: Link | None, engine: EngineProfile
) -> list[float]:
    """Output tokens/s of a prefill + decode unit: the slower of its decode pool and its prefill pool."""
    assert row.batch is not None and row.prompt_tokens is not None and row.output_tokens is not None
    prompt, output = row.prompt_tokens, row.output_tokens
    decoders = row.decode_instances or row.instances
    prefillers = row.prefill_instances or row.instances
    wl = _workload(row, math.ceil(row.batch / decoders), prompt + output // 2, 2)
    d = deployment(model, gpu, wl, net, engine)
    held = ReplicaMemory(model, gpu, d.precision, d.layout).max_batch(wl)
    cap_each = d.engine.max_running_sequences  # the era the layout runs as (deployment resolves it)
    cap = cap_each * row.dp if cap_each else held
    running = max(1, min(wl.batch, held, cap))
    per_pass = max(1, PREFILL_TOKENS_PER_RANK // prompt) * row.dp
    out = []
    decode = _both(model, gpu, _workload(row, running, prompt + output // 2, 2), net, engine)
    prefill = _both(model, gpu, _workload(row, per_pass, prompt, 1), net, engine)
    for (_, tpot), (ttft, _) in zip(decode, prefill, strict=True):
        assert tpot is not None
        emitted = decoders * running / tpot
        admitted = prefillers * per_pass / ttft * output
        rate = min(emitted, admitted)
        out.append(rate / _per(row, decoders) if row.metric != "request_throughput_rps" else rate / output)
    return out
