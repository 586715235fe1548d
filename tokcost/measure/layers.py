"""The small layers every block uses: RMSNorm, rotary embeddings and the gated (SwiGLU) MLP."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from tokcost.measure.shard import Shard


class RMSNorm(nn.Module):
    """Root-mean-square norm (Zhang and Sennrich 2019), computed in fp32."""

    def __init__(self, dim: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.empty(dim))

    def forward(self, x: Tensor) -> Tensor:
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)).type_as(x) * self.weight


class Rotary(nn.Module):
    """cos/sin tables for rotary embeddings (Su et al. 2021), indexed by position (half-split rotation)."""

    cos: Tensor  # [T, D/2]
    sin: Tensor

    def __init__(self, dim: int, max_seq: int, device: torch.device, dtype: torch.dtype) -> None:
        super().__init__()
        inv_freq = 1.0 / (10_000.0 ** (torch.arange(0, dim, 2, device=device).float() / dim))  # [D/2]
        angles = torch.outer(torch.arange(max_seq, device=device).float(), inv_freq)  # [T, D/2]
        self.register_buffer("cos", angles.cos().to(dtype), persistent=False)
        self.register_buffer("sin", angles.sin().to(dtype), persistent=False)

    def forward(self, x: Tensor, input_pos: Tensor) -> Tensor:
        """Rotate x [B, S, H, D] at positions input_pos [S]."""
        cos, sin = self.cos[input_pos][:, None, :], self.sin[input_pos][:, None, :]  # [S, 1, D/2]
        x1, x2 = x.chunk(2, dim=-1)
        return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)


class FeedForward(nn.Module):
    """SwiGLU MLP (Shazeer 2020): down(silu(gate(x)) * up(x)); under TP a slice of the intermediate width."""

    def __init__(self, hidden: int, intermediate: int, shard: Shard, reduce: bool = True) -> None:
        super().__init__()
        lo, hi = shard.span(intermediate)
        self.shard, self.reduce = shard, reduce
        self.gate = nn.Linear(hidden, hi - lo, bias=False)
        self.up = nn.Linear(hidden, hi - lo, bias=False)
        self.down = nn.Linear(hi - lo, hidden, bias=False)
        if shard.world > 1:
            cols = list(range(lo, hi))
            self.sharding = {"gate.weight": (0, cols, intermediate), "up.weight": (0, cols, intermediate),
                             "down.weight": (1, cols, intermediate)}  # fmt: skip

    def forward(self, x: Tensor) -> Tensor:
        y = self.down(F.silu(self.gate(x)) * self.up(x))
        return self.shard.all_reduce(y) if self.reduce else y
