"""A Llama-style decoder built from a ModelSpec, with random weights and a static KV cache, for timing.

RMSNorm, rotary embeddings (RoPE, Su et al. 2021), grouped-query attention (Ainslie et al. 2023)
through `scaled_dot_product_attention`, SwiGLU MLPs (Shazeer 2020) or routed experts, and
multi-head latent attention (DeepSeek-V2, arXiv:2405.04434) in its absorbed decode form.
The parameters match `ModelSpec.params_total` exactly, and the KV cache holds exactly
`kv_bytes_per_token()` per token, so that bytes moved per step are the ones the roofline counts.
Sliding windows are not modelled here: every layer attends to the whole static cache.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from tokcost.models.spec import ModelSpec, MoeSpec

_INIT_STD = 0.02  # GPT-2 / Llama initializer range; any small value keeps bf16 logits finite.


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
    """cos/sin tables for rotary embeddings, indexed by position (half-split rotation)."""

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


def attend(q: Tensor, k: Tensor, v: Tensor, mask: Tensor, scale: float | None = None) -> Tensor:
    """Grouped-query attention reading K/V once: q [B, S, H, Dk], k/v [B, Hkv, T, D] -> [B, S, H, Dv].

    The G = H / Hkv query heads of a group are folded into the query length, so SDPA sees
    Hkv heads and never copies K/V (as `repeat_interleave` or a math-path `enable_gqa` would).
    """
    b, s, h, dk = q.shape
    hkv, t, dv = k.shape[1], k.shape[2], v.shape[-1]
    g = h // hkv
    q = q.view(b, s, hkv, g, dk).permute(0, 2, 3, 1, 4).reshape(b, hkv, g * s, dk)  # [B, Hkv, G*S, Dk]
    m = mask.unsqueeze(0).expand(g, s, t).reshape(g * s, t)  # [G*S, T]
    o = F.scaled_dot_product_attention(q, k, v, attn_mask=m, scale=scale)  # [B, Hkv, G*S, Dv]
    return o.view(b, hkv, g, s, dv).permute(0, 3, 1, 2, 4).reshape(b, s, h, dv)


class Attention(nn.Module):
    """Multi-head / grouped-query attention with a fused QKV projection and a static KV cache."""

    k_cache: Tensor  # [B, Hkv, T, D]
    v_cache: Tensor
    rotary: Rotary

    def __init__(self, spec: ModelSpec) -> None:
        super().__init__()
        self.n_heads, self.n_kv_heads, self.head_dim = spec.attention_heads, spec.kv_heads, spec.head_dim
        qkv_dim = (self.n_heads + 2 * self.n_kv_heads) * self.head_dim
        self.wqkv = nn.Linear(spec.hidden_size, qkv_dim, bias=spec.attention_bias)
        self.wo = nn.Linear(self.n_heads * self.head_dim, spec.hidden_size, bias=False)

    def setup_cache(self, batch: int, max_seq: int, device: torch.device, dtype: torch.dtype) -> None:
        """Preallocate K and V [B, Hkv, T, D] and the rotary tables."""
        shape = (batch, self.n_kv_heads, max_seq, self.head_dim)
        self.register_buffer("k_cache", torch.zeros(shape, device=device, dtype=dtype), persistent=False)
        self.register_buffer("v_cache", torch.zeros(shape, device=device, dtype=dtype), persistent=False)
        self.rotary = Rotary(self.head_dim, max_seq, device, dtype)

    def forward(self, x: Tensor, input_pos: Tensor, mask: Tensor) -> Tensor:
        b, s, _ = x.shape
        q_dim, kv_dim = self.n_heads * self.head_dim, self.n_kv_heads * self.head_dim
        q, k, v = self.wqkv(x).split([q_dim, kv_dim, kv_dim], dim=-1)
        q = self.rotary(q.view(b, s, self.n_heads, self.head_dim), input_pos)  # [B, S, H, D]
        k = self.rotary(k.view(b, s, self.n_kv_heads, self.head_dim), input_pos)  # [B, S, Hkv, D]
        v = v.view(b, s, self.n_kv_heads, self.head_dim)
        self.k_cache.index_copy_(2, input_pos, k.transpose(1, 2))  # cache [B, Hkv, T, D]
        self.v_cache.index_copy_(2, input_pos, v.transpose(1, 2))
        o = attend(q, self.k_cache, self.v_cache, mask)  # [B, S, H, D]
        return self.wo(o.reshape(b, s, q_dim))


class LatentAttention(nn.Module):
    """Multi-head latent attention, absorbed form: the cache holds the KV latent plus the RoPE key.

    W_UK is folded into the query and W_UV applied after attention (DeepSeek-V2 section 2.1.2),
    so all heads share one cached "head" of kv_lora_rank + rope_head_dim values: MQA over the latent.
    """

    kv_cache: Tensor  # [B, 1, T, R + Dr]
    rotary: Rotary | None

    def __init__(self, spec: ModelSpec) -> None:
        super().__init__()
        assert spec.mla is not None
        m, h = spec.mla, spec.hidden_size
        self.n_heads, self.rank, self.rope_dim = spec.attention_heads, m.kv_lora_rank, m.rope_head_dim
        self.nope_dim, self.v_dim = m.nope_head_dim, m.v_head_dim
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

    def setup_cache(self, batch: int, max_seq: int, device: torch.device, dtype: torch.dtype) -> None:
        """Preallocate the latent cache [B, 1, T, rank + rope] and the rotary tables."""
        shape = (batch, 1, max_seq, self.rank + self.rope_dim)
        self.register_buffer("kv_cache", torch.zeros(shape, device=device, dtype=dtype), persistent=False)
        self.rotary = Rotary(self.rope_dim, max_seq, device, dtype) if self.rope_dim else None

    def _rope(self, x: Tensor, input_pos: Tensor) -> Tensor:
        return self.rotary(x, input_pos) if self.rotary is not None else x

    def forward(self, x: Tensor, input_pos: Tensor, mask: Tensor) -> Tensor:
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
        entry = torch.cat((self.kv_norm(latent).unsqueeze(2), k_rope), dim=-1)  # [B, S, 1, R + Dr]
        self.kv_cache.index_copy_(2, input_pos, entry.transpose(1, 2))  # cache [B, 1, T, R + Dr]
        o = attend(q, self.kv_cache, self.kv_cache[..., : self.rank], mask, self.scale)  # [B, S, H, R]
        o = torch.einsum("bshr,hdr->bshd", o, w_uv)  # [B, S, H, Dv]
        return self.wo(o.reshape(b, s, self.n_heads * self.v_dim))


class FeedForward(nn.Module):
    """SwiGLU MLP: down(silu(gate(x)) * up(x))."""

    def __init__(self, hidden: int, intermediate: int) -> None:
        super().__init__()
        self.gate = nn.Linear(hidden, intermediate, bias=False)
        self.up = nn.Linear(hidden, intermediate, bias=False)
        self.down = nn.Linear(intermediate, hidden, bias=False)

    def forward(self, x: Tensor) -> Tensor:
        return self.down(F.silu(self.gate(x)) * self.up(x))


class Experts(nn.Module):
    """Routed SwiGLU experts (stacked weights), a top-k softmax router, and always-on shared experts.

    Three dispatches, each reading what a serving kernel would read as closely as plain PyTorch allows:
    - prefill (S > 1): tokens sorted by expert, one matmul per used expert (host sync; exact work);
    - decode, few tokens (3 T k < E): each token gathers its k experts' weights (no sync, reads T k experts
      plus the gathered copy);
    - decode, many tokens: every expert on every token, weighted by the router (no sync, reads all E once).
    The shared experts are one SwiGLU of width shared_experts x width: the same parameters and result
    as separate MLPs summed, since SwiGLU is separable over its intermediate dimension.
    """

    def __init__(self, hidden: int, moe: MoeSpec) -> None:
        super().__init__()
        self.top_k, inter = moe.experts_per_token, moe.expert_intermediate_size
        self.router = nn.Linear(hidden, moe.experts, bias=False)
        self.w_gate = nn.Parameter(torch.empty(moe.experts, inter, hidden))  # [E, I, hidden]
        self.w_up = nn.Parameter(torch.empty(moe.experts, inter, hidden))  # [E, I, hidden]
        self.w_down = nn.Parameter(torch.empty(moe.experts, hidden, inter))  # [E, hidden, I]
        shared_width = moe.shared_experts * (moe.shared_expert_intermediate_size or inter)
        self.shared = FeedForward(hidden, shared_width) if shared_width else None

    def forward(self, x: Tensor) -> Tensor:
        b, s, h = x.shape
        flat = x.reshape(b * s, h)  # [T, hidden]
        scores, experts = self.router(flat).float().topk(self.top_k, dim=-1)  # [T, k]
        weights = scores.softmax(dim=-1).to(x.dtype)  # [T, k]
        if s > 1:
            out = self.by_expert(flat, experts, weights)
        elif 3 * flat.shape[0] * self.top_k < self.w_gate.shape[0]:
            out = self.gathered(flat, experts, weights)
        else:
            out = self.dense(flat, experts, weights)
        if self.shared is not None:
            out = out + self.shared(flat)
        return out.view(b, s, h)

    def by_expert(self, x: Tensor, experts: Tensor, weights: Tensor) -> Tensor:
        """Group token slots by expert and run each used expert once (needs the counts on the host)."""
        order = experts.flatten().argsort()  # [T*k] slots sorted by expert
        counts = torch.bincount(experts.flatten(), minlength=self.w_gate.shape[0]).tolist()
        token_of_slot = order // self.top_k
        slot_weight = weights.flatten()[order]
        out = torch.zeros_like(x)
        start = 0
        for e, count in enumerate(counts):
            if count:
                tokens = token_of_slot[start : start + count]
                xe = x[tokens]  # [n, hidden]
                act = F.silu(xe @ self.w_gate[e].T) * (xe @ self.w_up[e].T)  # [n, I]
                out.index_add_(0, tokens, (act @ self.w_down[e].T) * slot_weight[start : start + count, None])
                start += count
        return out

    def gathered(self, x: Tensor, experts: Tensor, weights: Tensor) -> Tensor:
        """Each token multiplies by its own k experts' weights, gathered [T, k, ...]."""
        gate = torch.einsum("tkih,th->tki", self.w_gate[experts], x)  # [T, k, I]
        up = torch.einsum("tkih,th->tki", self.w_up[experts], x)
        y = torch.einsum("tkhi,tki->tkh", self.w_down[experts], F.silu(gate) * up)  # [T, k, hidden]
        return torch.einsum("tkh,tk->th", y, weights)

    def dense(self, x: Tensor, experts: Tensor, weights: Tensor) -> Tensor:
        """Every expert on every token; unrouted pairs get weight zero."""
        dense_weights = torch.zeros(x.shape[0], self.w_gate.shape[0], dtype=x.dtype, device=x.device)
        dense_weights.scatter_(1, experts, weights)  # [T, E]
        gate = torch.einsum("eih,th->eti", self.w_gate, x)  # [E, T, I]
        up = torch.einsum("eih,th->eti", self.w_up, x)
        y = torch.einsum("ehi,eti->eth", self.w_down, F.silu(gate) * up)  # [E, T, hidden]
        return torch.einsum("eth,te->th", y, dense_weights)


class Block(nn.Module):
    """Pre-norm transformer layer: x + attn(norm(x)), then x + mlp(norm(x))."""

    def __init__(self, spec: ModelSpec, layer: int) -> None:
        super().__init__()
        self.attention_norm = RMSNorm(spec.hidden_size)
        self.attention: Attention | LatentAttention = LatentAttention(spec) if spec.mla else Attention(spec)
        self.ffn_norm = RMSNorm(spec.hidden_size)
        moe = spec.moe
        if moe is not None and layer >= moe.dense_layers:
            self.mlp: nn.Module = Experts(spec.hidden_size, moe)
        else:
            self.mlp = FeedForward(spec.hidden_size, spec.dense_intermediate)

    def forward(self, x: Tensor, input_pos: Tensor, mask: Tensor) -> Tensor:
        x = x + self.attention(self.attention_norm(x), input_pos, mask)
        return x + self.mlp(self.ffn_norm(x))


class Decoder(nn.Module):
    """Embedding, `spec.layers` blocks, final norm and LM head; `notes` lists what differs from the spec."""

    causal_mask: Tensor  # [T, T]

    def __init__(self, spec: ModelSpec) -> None:
        super().__init__()
        self.spec = spec
        # from_pretrained skips nn.Embedding's normal_ init, whose meta-device kernel costs 1.5 s to import
        self.tok_embeddings = nn.Embedding.from_pretrained(torch.empty(spec.vocab_size, spec.hidden_size))
        self.layers = nn.ModuleList(Block(spec, i) for i in range(spec.layers))
        self.norm = RMSNorm(spec.hidden_size)
        self.output = nn.Linear(spec.hidden_size, spec.vocab_size, bias=False)
        self.tie_weights()
        self.max_batch = self.max_seq = 0
        self.notes: list[str] = []

    def tie_weights(self) -> None:
        """Share the embedding table with the LM head when the spec ties them."""
        if self.spec.tied_embeddings:
            self.output.weight = self.tok_embeddings.weight

    def setup_caches(self, max_batch: int, max_seq: int) -> None:
        """Allocate every layer's KV cache and the causal mask [T, T] on the parameters' device."""
        device, dtype = self.output.weight.device, self.output.weight.dtype
        self.max_batch, self.max_seq = max_batch, max_seq
        for module in self.modules():
            if isinstance(module, (Attention, LatentAttention)):
                module.setup_cache(max_batch, max_seq, device, dtype)
        causal = torch.ones(max_seq, max_seq, dtype=torch.bool, device=device).tril()
        self.register_buffer("causal_mask", causal, persistent=False)

    def forward(self, tokens: Tensor, input_pos: Tensor, *, last_only: bool = True) -> Tensor:
        """Logits for tokens [B, S] at positions input_pos [S]: [B, 1, V] (last position) or [B, S, V].

        Attention runs over the whole static cache [T = max_seq] with positions after the
        current one masked, so shapes never change and one decode step can be a CUDA graph.
        """
        mask = self.causal_mask[input_pos]  # [S, T]
        x = self.tok_embeddings(tokens)  # [B, S, hidden]
        for block in self.layers:
            x = block(x, input_pos, mask)
        if last_only:
            x = x[:, -1:]  # the LM head runs on the last position only: prefill needs one next token
        return self.output(self.norm(x))  # [B, S or 1, V]

    def kv_cache_bytes(self) -> int:
        """Bytes of every layer's preallocated KV cache."""
        return sum(b.numel() * b.element_size() for n, b in self.named_buffers() if n.endswith("_cache"))


def weight_bytes(model: nn.Module) -> int:
    """Bytes of all parameters (a tied embedding counted once)."""
    return sum(p.numel() * p.element_size() for p in model.parameters())


@torch.no_grad()
def _init_weights(model: Decoder, seed: int) -> None:
    """Fill parameters cheaply: N(0, 0.02) matrices, unit norm weights, zero biases."""
    device = model.output.weight.device
    generator = torch.Generator(device=device).manual_seed(seed)
    for name, param in model.named_parameters():
        if name.endswith("bias"):
            param.zero_()
        elif param.dim() == 1:
            param.fill_(1.0)
        else:
            param.normal_(0.0, _INIT_STD, generator=generator)


def build_model(
    spec: ModelSpec,
    *,
    dtype: torch.dtype,
    device: torch.device | str,
    max_batch: int,
    max_seq: int,
    seed: int = 0,
) -> Decoder:
    """A Decoder with random weights on `device` and KV caches for max_batch x max_seq tokens."""
    with torch.device("meta"):
        model = Decoder(spec)
    model = model.to(dtype=dtype).to_empty(device=device)
    model.tie_weights()  # to_empty gives each module its own tensor; tie again
    _init_weights(model, seed)
    model.setup_caches(max_batch, max_seq)
    model.notes.extend(_model_notes(spec))
    return model.eval().requires_grad_(False)


def _model_notes(spec: ModelSpec) -> list[str]:
    """What the built model does differently from the spec's architecture."""
    notes = []
    if spec.mla:
        notes.append(
            "MLA runs in absorbed form (W_UK folded into the query, W_UV after attention): "
            "the cache holds kv_lora_rank + rope_head_dim values per token per layer"
        )
    if spec.sliding_window:
        notes.append("sliding windows are ignored: every layer attends to the whole static cache")
    if spec.moe and spec.moe.expert_dtype and spec.moe.expert_dtype != spec.dtype:
        notes.append(f"experts run in the model dtype, not expert_dtype {spec.moe.expert_dtype}")
    return notes
