"""Tensor-parallel placement of one rank: which heads, columns and rows it holds, and its collectives.

Megatron-LM's layout (Shoeybi et al. 2019, arXiv:1909.08053): QKV and the MLP's gate/up are split by
output (column-parallel), the attention output and MLP down projection by input (row-parallel), so
each layer needs two all-reduces of [tokens, hidden], the two the engine prices. KV heads are split
across ranks, or replicated when there are fewer KV heads than ranks (as vLLM does). The LM head is
split by vocabulary; the greedy token is then found from each rank's best (two small all-gathers the
engine does not price: the report lists them apart). With world = 1 every collective is a no-op.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor

from tokcost.errors import MeasureError


@dataclass
class Shard:
    """One rank of a tensor-parallel group (rank 0 of 1 without parallelism)."""

    rank: int = 0
    world: int = 1
    functional: bool = False  # traceable collectives (torch.compile) instead of in-place c10d calls
    skip: bool = False  # collectives off: the skeleton's step time excludes communication
    timed: bool = False  # accumulate the wall time of each collective (eager CPU: gloo calls are blocking)
    seconds: dict[str, float] = field(default_factory=lambda: {"all_reduce": 0.0, "all_gather": 0.0})
    calls: dict[str, int] = field(default_factory=lambda: {"all_reduce": 0, "all_gather": 0})

    def span(self, size: int) -> tuple[int, int]:
        """[start, stop) of this rank's share of `size` items split as evenly as possible."""
        base, extra = divmod(size, self.world)
        start = self.rank * base + min(self.rank, extra)
        return start, start + base + (1 if self.rank < extra else 0)

    def heads(self, heads: int, kv_heads: int) -> tuple[list[int], list[int]]:
        """This rank's query heads and the KV heads they read (KV replicated when kv_heads < world)."""
        if heads % self.world or (kv_heads % self.world and self.world % kv_heads):
            raise MeasureError(
                f"--tp {self.world}: {heads} query heads and {kv_heads} KV heads cannot be split {self.world} ways "
                "(the degree must divide the query heads, and divide or be a multiple of the KV heads)"
            )
        per_rank, group = heads // self.world, heads // kv_heads
        q = list(range(self.rank * per_rank, (self.rank + 1) * per_rank))
        return q, sorted({h // group for h in q})

    def reset(self) -> None:
        """Zero the collective timers."""
        self.seconds = dict.fromkeys(self.seconds, 0.0)
        self.calls = dict.fromkeys(self.calls, 0)

    def all_reduce(self, x: Tensor) -> Tensor:
        """Sum x over the ranks (after a row-parallel matmul)."""
        if self.world == 1 or self.skip:
            return x
        if self.functional:
            from torch.distributed import _functional_collectives as funcol

            return funcol.all_reduce(x, "sum", dist.group.WORLD)
        t0 = time.perf_counter() if self.timed else 0.0
        dist.all_reduce(x)
        self._count("all_reduce", t0)
        return x

    def all_gather(self, x: Tensor) -> Tensor:
        """[world, *x.shape]: every rank's x."""
        if self.world == 1:
            return x.unsqueeze(0)
        if self.skip:
            return x.unsqueeze(0).expand(self.world, *x.shape).contiguous()
        if self.functional:
            from torch.distributed import _functional_collectives as funcol

            return funcol.all_gather_tensor(x.contiguous(), 0, dist.group.WORLD).view(self.world, *x.shape)
        t0 = time.perf_counter() if self.timed else 0.0
        out = torch.empty(self.world * x.shape[0], *x.shape[1:], dtype=x.dtype, device=x.device)
        gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor  # renamed in torch 2.13
        gather(out, x.contiguous())
        self._count("all_gather", t0)
        return out.view(self.world, *x.shape)

    def argmax(self, logits: Tensor, vocab_start: int) -> Tensor:
        """The global greedy token [B, 1] from this rank's logits [B, 1, V_local] over vocab_start.. ."""
        best, index = logits.float().max(dim=-1)  # [B, 1]
        if self.world == 1:
            return index
        bests = self.all_gather(best)  # [N, B, 1]
        indices = self.all_gather(index + vocab_start)  # [N, B, 1] global token ids
        winner = bests.argmax(dim=0, keepdim=True)  # [1, B, 1]: the rank holding the largest logit
        return indices.gather(0, winner).squeeze(0)

    def _count(self, kind: str, t0: float) -> None:
        if self.timed:
            self.seconds[kind] += time.perf_counter() - t0
            self.calls[kind] += 1


def init_process_group(rank: int, world: int, device_kind: str, address: str, port: int) -> Any:
    """Join the group: NCCL on CUDA (one GPU per rank), gloo on the CPU."""
    if device_kind == "cuda":
        torch.cuda.set_device(rank)
    dist.init_process_group(
        "nccl" if device_kind == "cuda" else "gloo",
        init_method=f"tcp://{address}:{port}",
        rank=rank,
        world_size=world,
    )
    return dist.group.WORLD
