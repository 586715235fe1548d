"""Mixers that keep a fixed state per sequence instead of a growing KV cache: Gated DeltaNet and Mamba-2.

Parameter counts follow transformers' modules (counted against `sum(p.numel())` on the meta device in
tests/test_hf_meta_counts.py); state shapes follow the caches transformers and vLLM allocate per sequence:
a recurrent (SSM) state plus the last `conv_kernel - 1` inputs of the causal depthwise convolution.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, model_validator

_FROZEN = ConfigDict(frozen=True, extra="forbid", strict=True)


class GatedDeltaNetSpec(BaseModel):
    """Gated DeltaNet linear attention (Qwen3-Next's `linear_attention` layers; Yang et al. 2024)."""

    model_config = _FROZEN

    key_heads: int = Field(ge=1, le=10_000)
    value_heads: int = Field(ge=1, le=10_000)
    key_head_dim: int = Field(ge=1, le=100_000)
    value_head_dim: int = Field(ge=1, le=100_000)
    conv_kernel: int = Field(ge=1, le=1024)

    @model_validator(mode="after")
    def _values_share_keys(self) -> GatedDeltaNetSpec:
        if self.value_heads % self.key_heads:  # each key head serves value_heads / key_heads value heads (GQA-like)
            raise ValueError(f"value_heads ({self.value_heads}) must be a multiple of key_heads ({self.key_heads}): "
                             "each key head serves a whole number of value heads")  # fmt: skip
        return self

    @property
    def conv_channels(self) -> int:
        """Channels the causal convolution runs over: q, k (key width each) and v (value width)."""
        return 2 * self.key_heads * self.key_head_dim + self.value_heads * self.value_head_dim

    def params(self, hidden_size: int) -> int:
        """One layer's weights (transformers' Qwen3NextGatedDeltaNet)."""
        key_dim, value_dim = self.key_heads * self.key_head_dim, self.value_heads * self.value_head_dim
        qkvz = hidden_size * (2 * key_dim + 2 * value_dim)  # in_proj_qkvz: q, k, v and the output gate z
        ba = hidden_size * 2 * self.value_heads  # in_proj_ba: the beta and alpha gates, one each per value head
        conv = self.conv_channels * self.conv_kernel  # depthwise conv1d, no bias
        per_head = 2 * self.value_heads  # dt_bias and A_log
        norm = self.value_head_dim  # gated RMSNorm over one value head
        return qkvz + ba + conv + per_head + norm + value_dim * hidden_size  # + out_proj

    def recurrent_elements(self) -> int:
        """The delta-rule memory one sequence keeps in one layer: one dk x dv matrix per value head."""
        return self.value_heads * self.key_head_dim * self.value_head_dim

    def conv_state_elements(self) -> int:
        """The causal convolution's window one sequence keeps in one layer: its last conv_kernel - 1 inputs."""
        return self.conv_channels * (self.conv_kernel - 1)

    def state_elements(self) -> int:
        """State one sequence keeps in one layer: the delta-rule memory plus the convolution's window."""
        return self.recurrent_elements() + self.conv_state_elements()


class MambaSpec(BaseModel):
    """Mamba-2 state-space mixer (Dao & Gu 2024; Nemotron-H's `M` layers)."""

    model_config = _FROZEN

    heads: int = Field(ge=1, le=10_000)
    head_dim: int = Field(ge=1, le=100_000)
    state_size: int = Field(ge=1, le=100_000)
    groups: int = Field(ge=1, le=10_000)
    conv_kernel: int = Field(ge=1, le=1024)
    conv_bias: bool = True
    proj_bias: bool = False
    # tokens per chunk of the SSD prefill scan (config.json's chunk_size; mamba_ssm's Mamba2 default is 256)
    chunk_tokens: int = Field(default=256, ge=1, le=100_000)

    @model_validator(mode="after")
    def _groups_divide_heads(self) -> MambaSpec:
        if self.heads % self.groups:  # each group's B and C are shared by heads / groups heads
            raise ValueError(f"groups ({self.groups}) must divide heads ({self.heads}): each group's B and C serve "
                             "a whole number of heads")  # fmt: skip
        return self

    @property
    def inner(self) -> int:
        """The SSM's width: heads x head_dim (= expand x hidden_size)."""
        return self.heads * self.head_dim

    @property
    def conv_channels(self) -> int:
        """Channels the causal convolution runs over: x, then B and C of every group."""
        return self.inner + 2 * self.groups * self.state_size

    def params(self, hidden_size: int) -> int:
        """One layer's weights (transformers' NemotronHMamba2Mixer / Mamba2Mixer)."""
        in_proj = hidden_size * (self.inner + self.conv_channels + self.heads)  # gate z, xBC, dt
        in_proj += (self.inner + self.conv_channels + self.heads) if self.proj_bias else 0
        conv = self.conv_channels * self.conv_kernel + (self.conv_channels if self.conv_bias else 0)
        per_head = 3 * self.heads  # dt_bias, A_log, D
        out_proj = self.inner * hidden_size + (hidden_size if self.proj_bias else 0)
        return in_proj + conv + per_head + self.inner + out_proj  # + gated RMSNorm over the inner width

    def recurrent_elements(self) -> int:
        """The SSM state one sequence keeps in one layer: head_dim x state_size per head."""
        return self.heads * self.head_dim * self.state_size

    def conv_state_elements(self) -> int:
        """The causal convolution's window one sequence keeps in one layer: its last conv_kernel - 1 inputs."""
        return self.conv_channels * (self.conv_kernel - 1)

    def state_elements(self) -> int:
        """State one sequence keeps in one layer: the SSM state plus the convolution's window."""
        return self.recurrent_elements() + self.conv_state_elements()
