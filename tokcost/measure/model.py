"""A Llama-style decoder built from a ModelSpec, with random weights and a static KV cache, for timing.

RMSNorm, rotary embeddings, grouped-query attention (Ainslie et al. 2023) or MLA through
`scaled_dot_product_attention` over the filled cache only (attention.py), SwiGLU MLPs or routed experts
read through grouped matmuls (moe.py), sliding windows as the spec lists them (ring caches). The
parameters match `ModelSpec.params_total` exactly and the cache holds exactly `kv_cache_bytes`, so the
bytes a step moves are the ones the roofline counts; `decode_read_bytes` counts them from the built
model. With a Shard of world N the model is one tensor-parallel rank's slice of the same weights: every
parameter is drawn whole from its own seed and sliced, so N ranks compute what one device computes.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable

import torch
from torch import Tensor, nn

from tokcost.measure.attention import Attention, CachedAttention
from tokcost.measure.layers import FeedForward, RMSNorm
from tokcost.measure.mla import LatentAttention
from tokcost.measure.moe import Experts
from tokcost.measure.shard import Shard
from tokcost.models.spec import ModelSpec

_INIT_STD = 0.02  # GPT-2 / Llama initializer range; any small value keeps bf16 logits finite.


class Block(nn.Module):
    """Pre-norm transformer layer: x + attn(norm(x)), then x + mlp(norm(x))."""

    def __init__(self, spec: ModelSpec, layer: int, shard: Shard) -> None:
        super().__init__()
        self.attention_norm = RMSNorm(spec.hidden_size)
        self.attention: Attention | LatentAttention = (
            LatentAttention(spec, layer, shard) if spec.mla else Attention(spec, layer, shard)
        )
        self.ffn_norm = RMSNorm(spec.hidden_size)
        moe = spec.moe
        if moe is not None and layer >= moe.dense_layers:
            self.mlp: nn.Module = Experts(spec.hidden_size, moe, shard)
        else:
            self.mlp = FeedForward(spec.hidden_size, spec.dense_intermediate, shard)

    def forward(self, x: Tensor, input_pos: Tensor, start: int, bucket: int | None) -> Tensor:
        x = x + self.attention(self.attention_norm(x), input_pos, start, bucket)
        return x + self.mlp(self.ffn_norm(x))


class Decoder(nn.Module):
    """Embedding, `spec.layers` blocks, final norm and (vocabulary-split under TP) LM head."""

    def __init__(self, spec: ModelSpec, shard: Shard | None = None) -> None:
        super().__init__()
        self.spec, self.shard = spec, shard or Shard()
        # from_pretrained skips nn.Embedding's normal_ init, whose meta-device kernel costs 1.5 s to import
        self.tok_embeddings = nn.Embedding.from_pretrained(torch.empty(spec.vocab_size, spec.hidden_size))
        self.layers = nn.ModuleList(Block(spec, i, self.shard) for i in range(spec.layers))
        self.norm = RMSNorm(spec.hidden_size)
        self.vocab_start, vocab_stop = self.shard.span(spec.vocab_size)
        self.output = nn.Linear(spec.hidden_size, vocab_stop - self.vocab_start, bias=False)
        if self.shard.world > 1:
            self.sharding = {"output.weight": (0, list(range(self.vocab_start, vocab_stop)), spec.vocab_size)}
        self.tie_weights()
        self.max_batch = self.max_seq = 0
        self.notes: list[str] = []
        self.compiled_layers: list[Callable[..., Tensor]] = []

    def compile_blocks(self) -> None:
        """Fuse each block's decode step with torch.compile (regional: the blocks share one compiled graph)."""
        import torch._dynamo

        # batch sizes and KV buckets each add a guard set; the default limit (8) would fall back to eager
        torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, 64)
        self.compiled_layers = [torch.compile(block) for block in self.layers]

    def tie_weights(self) -> None:
        """Share the embedding table with the LM head when the spec ties them (one device only)."""
        if self.spec.tied_embeddings and self.shard.world == 1:
            self.output.weight = self.tok_embeddings.weight

    def attentions(self) -> list[CachedAttention]:
        """Every layer's attention, in order."""
        return [block.attention for block in self.layers]

    def setup_caches(self, max_batch: int, max_seq: int) -> None:
        """Allocate every layer's KV cache (rings for sliding layers) on the parameters' device."""
        device, dtype = self.output.weight.device, self.output.weight.dtype
        self.max_batch, self.max_seq = max_batch, max_seq
        for i, attn in enumerate(self.attentions()):
            attn.setup_cache(self.spec, i, max_batch, max_seq, device, dtype)

    def forward(
        self, tokens: Tensor, input_pos: Tensor, *, start: int | None = None, bucket: int | None = None,
        last_only: bool = True,
    ) -> Tensor:  # fmt: skip
        """Logits [B, 1 or S, V_local] for tokens [B, S] at positions input_pos [S].

        `start` is the first position as a host integer (read from input_pos when not given, which
        synchronises); a decode step with a `bucket` attends over that many slots, masked on the device,
        and needs no host position at all (what a CUDA graph replays).
        """
        if start is None and bucket is None:
            start = int(input_pos[0])
        # a bucketed decode step runs the compiled blocks when there are any (compile mode)
        blocks = self.compiled_layers if bucket is not None and self.compiled_layers else self.layers
        x = self.tok_embeddings(tokens)  # [B, S, hidden]
        for block in blocks:
            x = block(x, input_pos, -1 if start is None else start, bucket)
        if last_only:
            x = x[:, -1:]  # the LM head runs on the last position only: prefill needs one next token
        return self.output(self.norm(x))

    def next_token(
        self, tokens: Tensor, input_pos: Tensor, *, start: int | None = None, bucket: int | None = None
    ) -> Tensor:
        """The greedy next token [B, 1] (over the whole vocabulary under TP)."""
        return self.shard.argmax(self(tokens, input_pos, start=start, bucket=bucket), self.vocab_start)

    def kv_cache_bytes(self) -> int:
        """Bytes of every layer's preallocated KV cache on this rank."""
        return sum(b.numel() * b.element_size() for n, b in self.named_buffers() if n.endswith("_cache"))

    def kv_bytes_per_slot(self) -> list[int]:
        """Bytes one cached token occupies in each layer, for one sequence."""
        out = []
        for attn in self.attentions():
            caches = [b for n, b in attn.named_buffers() if n.endswith("_cache")]
            out.append(sum(c[0, :, 0].numel() * c.element_size() for c in caches))
        return out

    def experts(self) -> list[Experts]:
        """Every MoE layer's experts."""
        return [m for m in self.modules() if isinstance(m, Experts)]


def weight_bytes(model: nn.Module) -> int:
    """Bytes of all parameters (a tied embedding counted once)."""
    return sum(p.numel() * p.element_size() for p in model.parameters())


def decode_read_bytes(model: Decoder, batch: int, experts_per_layer: float | None) -> float:
    """Weight bytes one decode step reads on this rank, counted from the built model.

    Every parameter except the embedding table (only `batch` rows are looked up; tied, it is read whole
    as the LM head) and the routed experts (only `experts_per_layer` distinct experts per MoE layer).
    """
    experts = model.experts()
    routed = {id(p) for e in experts for p in (e.w_gate, e.w_up, e.w_down)}
    table = model.tok_embeddings.weight
    tied = model.output.weight is table
    total = sum(p.numel() * p.element_size() for p in model.parameters() if id(p) not in routed and p is not table)
    if tied:
        total += table.numel() * table.element_size()
    else:
        total += min(batch, table.shape[0]) * table.shape[1] * table.element_size()
    touched = experts_per_layer if experts_per_layer is not None else float(model.spec.moe.experts if experts else 0)
    return total + sum(touched * e.expert_bytes() for e in experts)


def _param_seed(seed: int, name: str) -> int:
    """A seed per parameter, so a parameter's values depend on its name only, not on order or sharding."""
    return (seed * 1_000_003 + zlib.crc32(name.encode())) % 2**63


@torch.no_grad()
def _init_weights(model: Decoder, seed: int) -> None:
    """N(0, 0.02) matrices (drawn whole, then this rank's slice taken), unit norm weights, zero biases."""
    device = model.output.weight.device
    sharding = {
        f"{prefix}.{key}" if prefix else key: rule
        for prefix, module in model.named_modules()
        for key, rule in getattr(module, "sharding", {}).items()
    }
    for name, param in model.named_parameters(remove_duplicate=False):
        if name.endswith("bias"):
            param.zero_()
        elif param.dim() == 1:
            param.fill_(1.0)
        else:
            # a tied table is drawn from the LM head's seed, so a TP rank's head slice matches one device's
            key = "output.weight" if name == "tok_embeddings.weight" and model.spec.tied_embeddings else name
            generator = torch.Generator(device=device).manual_seed(_param_seed(seed, key))
            if name not in sharding:
                param.normal_(0.0, _INIT_STD, generator=generator)
                continue
            dim, index, size = sharding[name]
            shape = list(param.shape)
            shape[dim] = size
            whole = torch.empty(shape, dtype=param.dtype, device=device).normal_(0.0, _INIT_STD, generator=generator)
            param.copy_(whole.index_select(dim, torch.tensor(index, device=device)))


def build_model(
    spec: ModelSpec,
    *,
    dtype: torch.dtype,
    device: torch.device | str,
    max_batch: int,
    max_seq: int,
    seed: int = 0,
    shard: Shard | None = None,
) -> Decoder:
    """A Decoder (or one TP rank of it) with random weights on `device` and KV caches for max_batch x max_seq."""
    with torch.device("meta"):
        model = Decoder(spec, shard)
    model = model.to(dtype=dtype).to_empty(device=device)
    model.tie_weights()  # to_empty gives each module its own tensor; tie again
    _init_weights(model, seed)
    model.setup_caches(max_batch, max_seq)
    model.notes.extend(_model_notes(spec, model.shard))
    return model.eval().requires_grad_(False)


def _model_notes(spec: ModelSpec, shard: Shard) -> list[str]:
    """What the built model does differently from the spec's architecture."""
    notes = []
    if spec.mla:
        notes.append(
            "MLA runs in absorbed form (W_UK folded into the query, W_UV after attention): "
            "the cache holds kv_lora_rank + rope_head_dim values per token per layer"
        )
    if spec.moe and spec.moe.expert_dtype and spec.moe.expert_dtype != spec.dtype:
        notes.append(f"experts run in the model dtype, not expert_dtype {spec.moe.expert_dtype}")
    if shard.world > 1 and spec.tied_embeddings:
        notes.append("under TP the LM head is a vocabulary slice of its own (the tied table is not shared)")
    return notes
