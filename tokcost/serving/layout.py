"""How one replica spreads a model over GPUs. Today: tensor parallelism (TP) only.

A layout is one object so that pipeline, expert and data parallelism can join it later without touching the
search: the search asks a layout for its GPU count, its label, why it is invalid (if it is) and the Workload
the engine prices it with. Valid TP degrees: the degree divides the attention heads (each GPU holds whole
query heads), and the KV heads either split evenly (kv_heads % tp == 0) or are replicated (tp % kv_heads ==
0, as vLLM does when tp > kv_heads); TP stays inside one node (one NVLink/xGMI/PCIe domain) and needs a
GPU-to-GPU link.
"""

from __future__ import annotations

from dataclasses import dataclass

from tokcost.hardware.spec import GpuSpec
from tokcost.models.spec import ModelSpec

DEFAULT_MAX_TP = 8


@dataclass(frozen=True, slots=True, order=True)
class Layout:
    """Tensor-parallel degree of one replica."""

    tp: int

    @property
    def gpus(self) -> int:
        """GPUs one replica occupies."""
        return self.tp

    @property
    def label(self) -> str:
        """'TP4'."""
        return f"TP{self.tp}"

    def invalid_reason(self, model: ModelSpec, gpu: GpuSpec) -> str | None:
        """Why this layout cannot run `model` on `gpu`, or None when it can."""
        return self.model_reason(model) or self.gpu_reason(gpu)

    def model_reason(self, model: ModelSpec) -> str | None:
        """Why the model's heads cannot be split this way, or None."""
        if model.attention_heads % self.tp:
            return f"TP {self.tp} does not divide {model.attention_heads} attention heads"
        if model.kv_heads % self.tp and self.tp % model.kv_heads:
            return f"TP {self.tp} neither divides nor is a multiple of {model.kv_heads} KV heads"
        return None

    def gpu_reason(self, gpu: GpuSpec) -> str | None:
        """Why the GPU cannot host this layout (node size, missing link), or None."""
        if self.tp > gpu.gpus_per_node:
            return f"TP {self.tp} spans more than one node ({gpu.gpus_per_node} GPUs per node)"
        if self.tp > 1 and gpu.link is None:
            return f"TP {self.tp} needs a GPU-to-GPU link and {gpu.name} lists none"
        return None

    def replicates_kv(self, model: ModelSpec) -> bool:
        """True when TP exceeds the KV heads, so each KV head is held by tp / kv_heads GPUs."""
        return model.mla is None and self.tp > model.kv_heads


def valid_tp_degrees(model: ModelSpec, limit: int = DEFAULT_MAX_TP) -> list[int]:
    """Every TP degree up to `limit` that divides the heads and splits or replicates the KV heads."""
    return [t for t in range(1, limit + 1) if Layout(t).model_reason(model) is None]
