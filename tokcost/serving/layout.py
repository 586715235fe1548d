"""How one replica spreads a model over GPUs, as plan searches it: the engine's layouts (tokcost.engine.layout).

A layout is one object (TP x PP x EP x DP attention) so the search only asks it for its GPU count, its label,
why it is invalid (the engine's own rule: TP divides the heads and splits or replicates the KV heads, PP at
most one stage per layer, EP divides the experts and the stage's GPUs, DP attention for MoE models only) and
the Workload the engine prices it with. Plan keeps tensor parallelism inside one node (one NVLink / xGMI /
PCIe domain); pipeline stages and expert groups may span nodes over the network.
"""

from __future__ import annotations

from dataclasses import dataclass

from tokcost.engine.layout import Layout as EngineLayout
from tokcost.engine.layout import layout_problem, tp_degrees
from tokcost.hardware.spec import GpuSpec
from tokcost.models.spec import ModelSpec

DEFAULT_MAX_TP = 8


@dataclass(frozen=True, slots=True, order=True)
class Layout:
    """One replica's degrees: tensor, pipeline, expert and data-parallel attention."""

    tp: int
    pp: int = 1
    ep: int = 1
    dp: int = 1
    redundant_experts: int = 0  # expert copies over the EP ranks (EPLB)

    @property
    def gpus(self) -> int:
        """GPUs one replica occupies: tp x pp x dp."""
        return self.engine(1).gpus

    @property
    def label(self) -> str:
        """'TP4', 'TP8xPP2', 'DP16xEP16', 'DP72xEP72+32': the engine's label, compact (+R: R redundant experts)."""
        spare = f"+{self.redundant_experts}" if self.redundant_experts else ""
        return EngineLayout(self.tp, self.pp, self.ep, self.dp, 1).label().replace(" ", "") + spare

    def engine(self, gpus_per_node: int) -> EngineLayout:
        """The engine's layout on nodes of `gpus_per_node`."""
        return EngineLayout(self.tp, self.pp, self.ep, self.dp, gpus_per_node, self.redundant_experts)

    def invalid_reason(self, model: ModelSpec, gpu: GpuSpec) -> str | None:
        """Why this layout cannot run `model` on `gpu`, or None when it can."""
        return layout_problem(model, self.engine(gpu.gpus_per_node)) or self.gpu_reason(gpu)

    def gpu_reason(self, gpu: GpuSpec) -> str | None:
        """Why the GPU cannot host this layout (TP across nodes, a missing link), or None."""
        if self.tp > gpu.gpus_per_node:
            return (
                f"TP {self.tp} (--tp) spans more than one node ({gpu.gpus_per_node} GPUs per node); TP goes up to "
                f"{gpu.gpus_per_node}, and pipeline stages (--pp) spread a model over more GPUs"
            )
        if self.gpus > 1 and gpu.link is None:
            return (f"{self.label} needs a GPU-to-GPU link and {gpu.name}'s spec lists none (add link: {{kind, gb_s, "
                    "latency_us, source} to it); one GPU a replica needs none (--tp 1)")  # fmt: skip
        return None

    def replicates_kv(self, model: ModelSpec) -> bool:
        """True when TP exceeds the KV heads, so each KV head is held by tp / kv_heads GPUs."""
        return model.mla is None and self.tp > model.kv_heads


def valid_tp_degrees(model: ModelSpec, limit: int = DEFAULT_MAX_TP) -> list[int]:
    """Every TP degree up to `limit` that divides the heads and splits or replicates the KV heads."""
    return tp_degrees(model, limit)
