"""Routed experts that read only the experts tokens are routed to, as a grouped-GEMM MoE kernel does.

Token slots are sorted by expert and one grouped matmul (`F.grouped_mm`, the kernel torchtitan and
vLLM-style MoE layers use) runs each expert on its own rows: an expert no token chose has an empty group
and its weights are never read. No host synchronisation (the group offsets stay on the device), so a
decode step with experts can be captured as a CUDA graph. Where grouped_mm does not run (CUDA before
sm80, or a dtype it refuses), one matmul per routed expert runs instead, eagerly (it needs the counts on
the host). `count_reads` records how many distinct experts each call touched, so the loop reports the
expert bytes it actually read next to the engine's expectation E x (1 - (1 - k/E)^tokens).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from tokcost.measure.faults import first_line
from tokcost.measure.layers import FeedForward
from tokcost.measure.shard import Shard
from tokcost.models.spec import MoeSpec


def grouped_mm_error(device: torch.device, dtype: torch.dtype) -> str | None:
    """Why F.grouped_mm does not run here (CUDA before sm80, a dtype it refuses), or None where it does."""
    x = torch.ones(2, 16, dtype=dtype, device=device)
    w = torch.ones(2, 16, 16, dtype=dtype, device=device)
    try:
        F.grouped_mm(x, w, offs=torch.tensor([1, 2], dtype=torch.int32, device=device))
    except RuntimeError as exc:
        return first_line(exc)
    return None


class Experts(nn.Module):
    """A top-k softmax router, stacked routed SwiGLU experts, and always-on shared experts.

    The shared experts are one SwiGLU of width shared_experts x width: the same parameters and result as
    separate MLPs summed, since SwiGLU is separable over its intermediate dimension. Under TP every expert's
    intermediate width is split across ranks; the routed and shared outputs are summed before one all-reduce.
    """

    def __init__(self, hidden: int, moe: MoeSpec, shard: Shard) -> None:
        super().__init__()
        self.shard, self.top_k, self.n_experts = shard, moe.experts_per_token, moe.experts
        inter = moe.expert_intermediate_size
        lo, hi = shard.span(inter)
        self.router = nn.Linear(hidden, moe.experts, bias=False)
        self.w_gate = nn.Parameter(torch.empty(moe.experts, hi - lo, hidden))  # [E, I, hidden]
        self.w_up = nn.Parameter(torch.empty(moe.experts, hi - lo, hidden))  # [E, I, hidden]
        self.w_down = nn.Parameter(torch.empty(moe.experts, hidden, hi - lo))  # [E, hidden, I]
        shared_width = moe.shared_experts * (moe.shared_expert_intermediate_size or inter)
        self.shared = FeedForward(hidden, shared_width, shard, reduce=False) if shared_width else None
        self.grouped = True  # F.grouped_mm; False: one matmul per routed expert (eager only)
        self.count_reads = False
        self.reads: list[int] = []  # distinct experts per call while count_reads is on
        if shard.world > 1:
            cols = list(range(lo, hi))
            self.sharding = {"w_gate": (1, cols, inter), "w_up": (1, cols, inter), "w_down": (2, cols, inter)}

    def expert_bytes(self) -> int:
        """Bytes of one routed expert on this rank (gate, up and down)."""
        return sum(w[0].numel() * w.element_size() for w in (self.w_gate, self.w_up, self.w_down))

    def forward(self, x: Tensor) -> Tensor:
        b, s, h = x.shape
        flat = x.reshape(b * s, h)  # [T, hidden]
        scores, experts = self.router(flat).float().topk(self.top_k, dim=-1)  # [T, k]
        weights = scores.softmax(dim=-1).to(x.dtype)  # [T, k]
        out = self.routed(flat, experts, weights)
        if self.shared is not None:
            out = out + self.shared(flat)
        return self.shard.all_reduce(out).view(b, s, h)

    def routed(self, x: Tensor, experts: Tensor, weights: Tensor) -> Tensor:
        """sum_k weight_k x expert_k(x) for every token: x [T, hidden], experts/weights [T, k]."""
        slots = experts.flatten()  # [T*k] expert of each (token, choice) slot
        order = slots.argsort(stable=True)  # slots grouped by expert
        token = order // self.top_k  # [T*k] token of each sorted slot
        counts = torch.zeros(self.n_experts, dtype=torch.int32, device=x.device)
        counts.scatter_add_(0, slots, torch.ones_like(slots, dtype=torch.int32))  # no host sync (bincount syncs)
        if self.count_reads:
            self.reads.append(int((counts > 0).sum()))
        xs = x[token]  # [T*k, hidden]
        if self.grouped:
            offs = counts.cumsum(0, dtype=torch.int32)  # end row of each expert's group
            act = F.silu(F.grouped_mm(xs, self.w_gate.transpose(-2, -1), offs=offs))
            act = act * F.grouped_mm(xs, self.w_up.transpose(-2, -1), offs=offs)  # [T*k, I]
            y = F.grouped_mm(act, self.w_down.transpose(-2, -1), offs=offs)  # [T*k, hidden]
        else:
            y = self._per_expert(xs, counts.tolist())
        y = y * weights.flatten()[order, None]
        return torch.zeros_like(x).index_add_(0, token, y)

    def _per_expert(self, xs: Tensor, counts: list[int]) -> Tensor:
        """One matmul per routed expert over its rows (rows sorted by expert)."""
        out, start = [], 0
        for e, n in enumerate(counts):
            if n:
                rows = xs[start : start + n]
                act = F.silu(rows @ self.w_gate[e].T) * (rows @ self.w_up[e].T)
                out.append(act @ self.w_down[e].T)
                start += n
        return torch.cat(out)
