"""Attention over the filled part of a static KV cache: GQA and MLA, full or sliding-window layers.

Reads follow what a serving kernel reads (FlashAttention, Dao et al. 2022; flash-decoding splits):
- prefill from position 0 runs causal SDPA on the new keys with `is_causal=True`, so no [T, T] mask is
  ever built and the flash kernels stay eligible; a sliding layer longer than its window attends in
  query chunks against a band of keys ([C, C + W] masks, never [T, T]);
- a decode step attends over exactly the slots filled so far (`exact`: the slice length is a host
  integer, no mask), or, where a step must be captured once and replayed (CUDA graphs, torch.compile),
  over a fixed bucket of slots with a [bucket] mask built on the device from the position (at most
  bucket - 1 extra slots are read; the loop counts them);
- a sliding layer's cache is a ring of `window_tokens` slots (slot = position mod window), so it holds
  and reads exactly the window, as ModelSpec.kv_cache_bytes counts it. Attention does not depend on the
  order of keys once RoPE is applied, so the ring is read as is.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from tokcost.errors import MeasureError
from tokcost.measure.layers import Rotary
from tokcost.measure.shard import Shard
from tokcost.models.spec import ModelSpec

PREFILL_CHUNK = 1024  # query rows per chunk of a sliding layer's banded prefill


def decode_attend(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, scale: float | None) -> Tensor:
    """One new token per sequence: q [B, 1, H, Dk] over k/v [B, Hkv, n, D] -> [B, 1, H, Dv].

    The G = H / Hkv query heads of a KV group become G query rows of one SDPA head, so K/V are read
    once per group and never copied (the layout flash-decoding uses for GQA).
    """
    b, _, h, dk = q.shape
    hkv = k.shape[1]
    q = q.view(b, hkv, h // hkv, dk)  # [B, Hkv, G, Dk]: head h reads KV head h // G
    o = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale)  # [B, Hkv, G, Dv]
    return o.reshape(b, 1, h, v.shape[-1])


def prefill_attend(q: Tensor, k: Tensor, v: Tensor, window: int | None, scale: float | None) -> Tensor:
    """Causal attention of a prompt from position 0: q [B, H, S, Dk], k/v [B, Hkv, S, D] -> [B, H, S, Dv]."""
    s = q.shape[2]
    if window is None or s <= window:  # the window never bites: plain causal
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scale, enable_gqa=True)
    out = []
    for c0 in range(0, s, PREFILL_CHUNK):
        c1 = min(c0 + PREFILL_CHUNK, s)
        lo = max(0, c0 - window + 1)  # the first key any query of the chunk still sees
        i = torch.arange(c0, c1, device=q.device)[:, None]  # [C, 1] query positions
        j = torch.arange(lo, c1, device=q.device)[None, :]  # [1, K] key positions
        band = (j <= i) & (j > i - window)  # [C, K]: causal, within the window
        out.append(
            F.scaled_dot_product_attention(
                q[:, :, c0:c1], k[:, :, lo:c1], v[:, :, lo:c1], attn_mask=band, scale=scale, enable_gqa=True
            )  # fmt: skip
        )
    return torch.cat(out, dim=2)


class CachedAttention(nn.Module):
    """What GQA and MLA share: cache slots (a ring for sliding layers), writes, and which slots a pass reads."""

    window: int | None
    slots: int

    def init_slots(self, spec: ModelSpec, layer: int, max_seq: int) -> None:
        """A sliding layer keeps `window_tokens` slots; a full layer one per position."""
        sw = spec.sliding_window
        self.window = sw.window_tokens if sw is not None and spec.is_sliding_layer(layer) else None
        self.slots = min(max_seq, self.window) if self.window else max_seq

    def slot_index(self, input_pos: Tensor) -> Tensor:
        """Cache slot of each position: the position, or position mod window in a ring."""
        return input_pos % self.window if self.window else input_pos

    def write(self, cache: Tensor, entry: Tensor, input_pos: Tensor) -> None:
        """Store entry [B, Hc, S, D] at input_pos [S]; a ring keeps the last `slots` of them."""
        if entry.shape[2] > self.slots:
            entry, input_pos = entry[:, :, -self.slots :], input_pos[-self.slots :]
        cache.index_copy_(2, self.slot_index(input_pos), entry)

    def read_slots(self, start: int, bucket: int | None, input_pos: Tensor) -> tuple[int, Tensor | None]:
        """Decode: (slots to read, mask or None). Exact: the filled slots; bucketed: a fixed count, masked."""
        n = self.slots_read(start, bucket)
        if bucket is None:
            return n, None
        # slot i holds a position <= pos iff i <= pos (a ring past its window holds only valid slots);
        # bool [1, n], broadcast over batch, heads and query rows
        return n, (torch.arange(n, device=input_pos.device) <= input_pos).view(1, n)

    def slots_read(self, start: int, bucket: int | None) -> int:
        """Cache slots one decode step at position `start` reads in this layer (the loop counts them)."""
        return min(start + 1, self.slots) if bucket is None else min(bucket, self.slots)

    def cached_prefix(self, cache: Tensor, start: int, new: int) -> Tensor:
        """Slots 0..start+new-1 in position order, for a prefill that continues a cache (no wrap-around)."""
        if start + new > self.slots:
            raise MeasureError(
                f"a prefill continuing at position {start} past a sliding window of {self.window} is not modelled"
            )
        return cache[:, :, : start + new]


def offset_causal_mask(start: int, new: int, device: torch.device) -> Tensor:
    """[new, start + new] bool: query start+i sees keys 0..start+i (a prefill continuing a cache)."""
    i = torch.arange(start, start + new, device=device)[:, None]
    return torch.arange(start + new, device=device)[None, :] <= i


class Attention(CachedAttention):
    """Grouped-query attention with a fused QKV projection; under TP this rank's heads only."""

    k_cache: Tensor  # [B, Hkv_local, slots, D]
    v_cache: Tensor
    rotary: Rotary

    def __init__(self, spec: ModelSpec, layer: int, shard: Shard) -> None:
        super().__init__()
        self.shard, self.head_dim = shard, spec.head_dim
        q_heads, kv_heads = shard.heads(spec.attention_heads, spec.kv_heads)
        self.n_heads, self.n_kv_heads = len(q_heads), len(kv_heads)
        d, hidden = spec.head_dim, spec.hidden_size
        self.wqkv = nn.Linear(hidden, (self.n_heads + 2 * self.n_kv_heads) * d, bias=spec.attention_bias)
        self.wo = nn.Linear(self.n_heads * d, hidden, bias=False)
        self.init_slots(spec, layer, 0)
        if shard.world > 1:  # global rows of the fused [Q | K | V] projection this rank keeps
            q_dim, kv_dim = spec.attention_heads * d, spec.kv_heads * d
            q_rows = [h * d + i for h in q_heads for i in range(d)]
            kv_rows = [h * d + i for h in kv_heads for i in range(d)]
            rows = q_rows + [q_dim + r for r in kv_rows] + [q_dim + kv_dim + r for r in kv_rows]
            self.sharding = {"wqkv.weight": (0, rows, q_dim + 2 * kv_dim), "wqkv.bias": (0, rows, q_dim + 2 * kv_dim),
                             "wo.weight": (1, q_rows, q_dim)}  # fmt: skip

    def setup_cache(self, spec: ModelSpec, layer: int, batch: int, max_seq: int, device, dtype) -> None:
        """Preallocate K and V [B, Hkv, slots, D] and the rotary tables."""
        self.init_slots(spec, layer, max_seq)
        shape = (batch, self.n_kv_heads, self.slots, self.head_dim)
        self.register_buffer("k_cache", torch.zeros(shape, device=device, dtype=dtype), persistent=False)
        self.register_buffer("v_cache", torch.zeros(shape, device=device, dtype=dtype), persistent=False)
        self.rotary = Rotary(self.head_dim, max_seq, device, dtype)

    def forward(self, x: Tensor, input_pos: Tensor, start: int, bucket: int | None) -> Tensor:
        b, s, _ = x.shape
        d = self.head_dim
        q, k, v = self.wqkv(x).split([self.n_heads * d, self.n_kv_heads * d, self.n_kv_heads * d], dim=-1)
        q = self.rotary(q.view(b, s, self.n_heads, d), input_pos)  # [B, S, H, D]
        k = self.rotary(k.view(b, s, self.n_kv_heads, d), input_pos).transpose(1, 2)  # [B, Hkv, S, D]
        v = v.view(b, s, self.n_kv_heads, d).transpose(1, 2)
        self.write(self.k_cache, k, input_pos)
        self.write(self.v_cache, v, input_pos)
        if s == 1:
            n, mask = self.read_slots(start, bucket, input_pos)
            o = decode_attend(q, self.k_cache[:, :, :n], self.v_cache[:, :, :n], mask, None)  # [B, 1, H, D]
        elif start == 0:
            o = prefill_attend(q.transpose(1, 2), k, v, self.window, None).transpose(1, 2)
        else:
            keys = self.cached_prefix(self.k_cache, start, s)
            values = self.cached_prefix(self.v_cache, start, s)
            mask = offset_causal_mask(start, s, x.device)
            o = F.scaled_dot_product_attention(q.transpose(1, 2), keys, values, attn_mask=mask, enable_gqa=True)
            o = o.transpose(1, 2)
        return self.shard.all_reduce(self.wo(o.reshape(b, s, self.n_heads * d)))
