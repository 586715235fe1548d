"""What measure's torch decoder can build, checked before torch loads: anything else is refused in one line.

The decoder (measure/model.py) is Llama-style: global or sliding-window attention (GQA or MLA), then a gated MLP,
dense layers before routed experts. Chunked attention, Gated DeltaNet and Mamba-2 mixers, layers without a mixer
or an MLP, interleaved dense and MoE layers, ungated MLPs and attention output gates have no torch module here
yet; `tokcost estimate` prices all of them.
"""

from __future__ import annotations

from tokcost.errors import SpecError
from tokcost.models.layers import MIXERS
from tokcost.models.spec import ModelSpec

_NAMES = {"chunked": "chunked-attention", "sparse": "sparse-attention (DeepSeek's indexer)",
          "linear": "linear-attention (Gated DeltaNet)",
          "mamba": "Mamba-2 state-space", "none": "MLP-only"}  # fmt: skip


def unbuildable(spec: ModelSpec) -> str | None:
    """What the torch decoder cannot build in `spec` (None: all of it)."""
    mixers = {k.mixer for k in spec.plan.kinds}
    mlps = [k.mlp for k in spec.plan.kinds]
    other = sorted(mixers - {"global", "sliding"}, key=MIXERS.index)
    if other:
        return ", ".join(_NAMES[m] for m in other) + " layers"
    if "none" in mlps:
        return "layers without an MLP"
    moe_from = mlps.index("moe") if "moe" in mlps else len(mlps)
    if any(m != "moe" for m in mlps[moe_from:]):
        return "dense and MoE layers interleaved"
    if not spec.mlp_gated:
        return "an ungated MLP"
    # rotary embeddings turn pairs of values: an odd rotated width leaves one without a partner
    rotated = spec.mla.rope_head_dim if spec.mla is not None else spec.head_dim
    if rotated % 2:
        return f"an odd rotary width ({'rope_head_dim' if spec.mla is not None else 'head_dim'} {rotated})"
    return "an attention output gate" if spec.attention_gate else None


def check_buildable(spec: ModelSpec) -> None:
    """Refuse, in one line naming the model, a spec the torch decoder cannot build."""
    gap = unbuildable(spec)
    if gap:
        raise SpecError(spec.name, f"tokcost measure cannot build {gap} yet (its torch decoder is Llama-style); "
                                   "`tokcost estimate` prices them")  # fmt: skip
