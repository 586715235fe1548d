"""Multi-head latent attention (DeepSeek-V2, arXiv:2405.04434) in its absorbed decode form.

W_UK is folded into the query and W_UV applied after attention (section 2.1.2), so every head shares
one cached "head" of kv_lora_rank + rope_head_dim values: MQA over the latent. Under tensor parallelism
the heads are split and the latent (one per token) is replicated on every rank, as the engine counts it.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from tokcost.measure.attention import CachedAttention, decode_attend, offset_causal_mask, prefill_attend
from tokcost.measure.layers import RMSNorm, Rotary
from tokcost.measure.shard import Shard
from tokcost.models.spec import ModelSpec


class LatentAttention(CachedAttention):
    """Absorbed MLA: the cache holds the normed KV latent plus the RoPE key, [B, 1, slots, R + Dr]."""

    kv_cache: Tensor
    rotary: Rotary | None

    def __init__(self, spec: ModelSpec, layer: int, shard: Shard) -> None:
        super().__init__()
        assert spec.mla is not None
        m, h = spec.mla, spec.hidden_size
        self.shard, self.rank, self.rope_dim = shard, m.kv_lora_rank, m.rope_head_dim
        self.nope_dim, self.v_dim = m.nope_head_dim, m.v_head_dim
        heads, _ = shard.heads(spec.attention_heads, spec.attention_heads)
        self.n_heads = len(heads)
        qk_dim = self.nope_dim + self.rope_dim
        self.scale = qk_dim**-0.5  # softmax scale of the un-absorbed head width
        if m.q_lora_rank:
            self.wq_a = nn.Linear(h, m.q_lora_rank, bias=False)
            self.q_norm = RMSNorm(m.q_lora_rank)
            self.wq_b = nn.Linear(m.q_lora_rank, self.n_heads * qk_dim, bias=False)
        else:
            self.wq = nn.Linear(h, self.n_heads * qk_dim, bias=False)
        self.wkv_a = nn.Linear(h, self.rank + self.rope_dim, bias=False)
        self.kv_norm = RMSNorm(self.rank)
        self.wkv_b = nn.Linear(self.rank, self.n_heads * (self.nope_dim + self.v_dim), bias=False)
        self.wo = nn.Linear(self.n_heads * self.v_dim, h, bias=False)
        self.init_slots(spec, layer, 0)
        if shard.world > 1:
            n = spec.attention_heads

            def rows(width: int) -> tuple[int, list[int], int]:
                return 0, [i * width + j for i in heads for j in range(width)], n * width

            q_name = "wq_b.weight" if m.q_lora_rank else "wq.weight"
            self.sharding = {q_name: rows(qk_dim), "wkv_b.weight": rows(self.nope_dim + self.v_dim),
                             "wo.weight": (1, rows(self.v_dim)[1], n * self.v_dim)}  # fmt: skip

    def setup_cache(self, spec: ModelSpec, layer: int, batch: int, max_seq: int, device, dtype) -> None:
        """Preallocate the latent cache [B, 1, slots, rank + rope] and the rotary tables."""
        self.init_slots(spec, layer, max_seq)
        shape = (batch, 1, self.slots, self.rank + self.rope_dim)
        self.register_buffer("kv_cache", torch.zeros(shape, device=device, dtype=dtype), persistent=False)
        self.rotary = Rotary(self.rope_dim, max_seq, device, dtype) if self.rope_dim else None

    def _rope(self, x: Tensor, input_pos: Tensor) -> Tensor:
        return self.rotary(x, input_pos) if self.rotary is not None else x

    def forward(self, x: Tensor, input_pos: Tensor, start: int, bucket: int | None) -> Tensor:
        b, s, _ = x.shape
        q = self.wq_b(self.q_norm(self.wq_a(x))) if hasattr(self, "wq_a") else self.wq(x)
        q = q.view(b, s, self.n_heads, self.nope_dim + self.rope_dim)
        q_nope, q_rope = q.split([self.nope_dim, self.rope_dim], dim=-1)  # [B, S, H, Dn], [B, S, H, Dr]
        wkv_b = self.wkv_b.weight.view(self.n_heads, self.nope_dim + self.v_dim, self.rank)
        w_uk, w_uv = wkv_b.split([self.nope_dim, self.v_dim], dim=1)  # [H, Dn, R], [H, Dv, R]
        q_latent = torch.einsum("bshd,hdr->bshr", q_nope, w_uk)  # [B, S, H, R]
        q = torch.cat((q_latent, self._rope(q_rope, input_pos)), dim=-1)  # [B, S, H, R + Dr]
        latent, k_rope = self.wkv_a(x).split([self.rank, self.rope_dim], dim=-1)
        k_rope = self._rope(k_rope.view(b, s, 1, self.rope_dim), input_pos)  # [B, S, 1, Dr]
        entry = torch.cat((self.kv_norm(latent).unsqueeze(2), k_rope), dim=-1).transpose(1, 2)  # [B, 1, S, R + Dr]
        self.write(self.kv_cache, entry, input_pos)
        if s == 1:
            n, mask = self.read_slots(start, bucket, input_pos)
            cache = self.kv_cache[:, :, :n]
            o = decode_attend(q, cache, cache[..., : self.rank], mask, self.scale)  # [B, 1, H, R]
        elif start == 0:
            o = prefill_attend(q.transpose(1, 2), entry, entry[..., : self.rank], self.window, self.scale)
            o = o.transpose(1, 2)
        else:
            keys = self.cached_prefix(self.kv_cache, start, s)
            mask = offset_causal_mask(start, s, x.device)
            o = F.scaled_dot_product_attention(q.transpose(1, 2), keys, keys[..., : self.rank], attn_mask=mask,
                                               scale=self.scale, enable_gqa=True).transpose(1, 2)  # fmt: skip
        o = torch.einsum("bshr,hdr->bshd", o, w_uv)  # [B, S, H, Dv]
        return self.shard.all_reduce(self.wo(o.reshape(b, s, self.n_heads * self.v_dim)))
