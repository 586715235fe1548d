"""One kernel's work on the busiest GPU, per occurrence: the Stage record and the shapes every builder shares.

Every stage counts FLOPs (a multiply-add is 2) and HBM bytes read and written per occurrence on one GPU, and how
many times it runs per pass (the layers of its kind in the slowest pipeline stage). A matmul reads its weights
once per pass whatever the token count (Pope et al. 2022), reads its input activation and writes its output;
norms and activation functions are fused into their neighbours (TensorRT-LLM, SGLang and torch.compile fuse
them), so they add FLOPs and their tiny weights but no pass of their own over HBM.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Generic, Literal

from tokcost.engine.collectives import Op
from tokcost.engine.features import N
from tokcost.formats import get as get_format

# matmul: weights x activations; experts: routed experts; attention: reads the KV cache (paged GQA / MHA / MQA
# decode kernels, sliding and chunked windows included); attention_mla: MLA's latent cache, read by its own kernel
# (the absorbed decode of FlashMLA, FlashInfer MLA or triton's MLA decode); state: a linear-attention or
# state-space layer's convolution and scan, which read and write a state per sequence; memory: lookups, norms,
# cache writes, sampling; collective: communication between GPUs
Kind = Literal["matmul", "experts", "attention", "attention_mla", "state", "memory", "collective"]
KV_ATTENTION: tuple[Kind, ...] = ("attention", "attention_mla")  # the kinds that read a KV cache
FUSED_NORM = "RMSNorm fused into the next matmul's prologue: its weights, no pass of its own over activations"


@dataclass(frozen=True, slots=True)
class Stage(Generic[N]):
    """One kernel (or collective) of a pass: its work on the busiest GPU, per occurrence, and how often it runs."""

    name: str
    block: str  # "" outside the blocks, else the block kind ("dense layer", "MoE layer, window 1,024", ...)
    kind: Kind
    count: int
    flops: N | float = 0.0
    bytes_read: N | float = 0.0
    bytes_written: N | float = 0.0
    weight_bytes: N | float = 0.0  # the part of bytes_read that is weights (weight-only formats, the breakdown)
    weight_format: str = ""  # storage format of those weights
    kv_bytes: N | float = 0.0  # the part of bytes_read that is the KV cache (attention)
    collective: Op | None = None
    payload_bytes: N | float = 0.0  # the collective's buffer (all-to-all: the busiest rank's volume)
    ranks: int = 1  # GPUs the collective spans
    note: str = ""  # how the numbers were counted, for --explain and --journey
    crosses_nodes: bool = False  # a send/recv between pipeline stages on different nodes (rides the network)
    # FLOPs per element of the rows a grouped GEMM gathers (routed experts: each token-expert pair's row through
    # both expert GEMMs), whose elements it pays at the GPU's row pace on top of its math (0: not such a kernel)
    row_flops: float = 0.0
    # operands FP8 whatever the deployment's compute (DeepSeek Sparse Attention's indexer: its keys and queries are
    # quantized to FP8 in every engine), so it runs at the GPU's FP8 rate wherever the GPU has one
    fp8_operands: bool = False

    @property
    def bytes(self) -> N | float:
        """HBM bytes per occurrence."""
        return self.bytes_read + self.bytes_written


def matmul(name: str, block: str, count: int, params: float, tokens: N, fmt: str, act: float, in_dim: float,
           out_dim: float, note: str = "", kind: Kind = "matmul") -> Stage[N]:  # fmt: skip
    """A matmul against `params` weights for `tokens` rows: 2 x params x tokens FLOPs, weights read once."""
    weight = params * get_format(fmt).bytes
    return Stage(
        name,
        block,
        kind,
        count,
        flops=2 * params * tokens,
        bytes_read=weight + tokens * in_dim * act,
        bytes_written=tokens * out_dim * act,
        weight_bytes=weight,
        weight_format=fmt,
        note=note,
    )


def collective(name: str, block: str, count: int, op: Op, payload_bytes: N, ranks: int, note: str = "",
               crosses_nodes: bool = False) -> Stage[N]:  # fmt: skip
    """A collective stage: `op` over `ranks` GPUs moving `payload_bytes` (the busiest rank's, for an all-to-all)."""
    return Stage(name, block, "collective", count, collective=op, payload_bytes=payload_bytes, ranks=ranks,
                 note=note, crosses_nodes=crosses_nodes)  # fmt: skip


def norm(name: str, block: str, count: int, tokens: N, hidden: int, fmt: str, vectors: int = 1) -> Stage[N]:
    """The norms around a mixer or an MLP (`vectors` of them, each hidden wide: a LayerNorm's bias counts as one):
    ~4 FLOPs per element and vector (square, sum, scale, weight), their weights read."""
    weight = vectors * hidden * get_format(fmt).bytes
    return Stage(name, block, "memory", count, flops=4 * tokens * hidden * vectors, bytes_read=weight,
                 weight_bytes=weight, weight_format=fmt, note=FUSED_NORM)  # fmt: skip
