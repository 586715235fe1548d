"""A HuggingFace config's `torch_dtype` and `quantization_config` -> the formats its weights ship in.

Keys follow transformers' quantization config classes (utils/quantization_config.py: AwqConfig, GPTQConfig,
BitsAndBytesConfig, CompressedTensorsConfig, FbgemmFp8Config, FineGrainedFP8Config, Mxfp4Config) and the
compressed-tensors QuantizationArgs; AutoAWQ's own names (w_bit, q_group_size) are read too. Each method
maps to a storage format of tokcost/formats.py (its bits include scales and zero points) and, when the
checkpoint quantizes activations as well (FP8, W8A8, LLM.int8), to the matmul's compute dtype.
Embeddings and the LM head stay at the base dtype, as every method listed leaves them unquantized.
Not modelled: `modules_to_not_convert` lists; the imported spec's notes name them (they are priced as shipped).
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, ValidationError

from tokcost.errors import SpecError
from tokcost.spec_errors import validation_error

# torch dtype names (str(torch.bfloat16) without "torch.") -> the unquantized base dtype of a ModelSpec
BASE_DTYPES = {"float32": "fp32", "float16": "fp16", "bfloat16": "bf16", "bf16": "bf16", "fp16": "fp16"}
FP8_DTYPES = ("float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz")  # weights fp8, base bf16

# modules every method leaves unquantized and tokcost prices at the base dtype anyway
# (norms and biases: no linear at all, Qwen3-Coder-FP8 lists 124 norms; a bare `gate` or `*.gate` is an MoE's router,
# MiniMax-M2 lists it and its router's e_score_correction_bias)
_UNQUANTIZED_ANYWAY = re.compile(r"lm_head|embed_tokens|router|(^|\.)gate$|norm|bias$|vision|visual")
_LAYER = re.compile(r"layers\.\d+")
_ONE_PROJECTION = re.compile(r"self_attn\.\w")  # self_attn.q_proj: one projection, not the whole attention
_WHOLE_LAYER = re.compile(r"layers\.(\d+)(?:\.\*)?$")  # a whole decoder layer: model.layers.0
_LAYER_ATTENTION = re.compile(r"layers\.(\d+)\.self_attn(?:\.\*)?$")  # its attention: model.layers.1.self_attn
_READ = ConfigDict(extra="ignore", strict=True, frozen=True)
# a group of 1..65536 weights per scale, or -1: one scale per output channel (per row)
Group = Literal[-1] | Annotated[int, Field(ge=1, le=65536)]


def _grouped(bits: int, group: int, zero_points: bool, hidden_size: int) -> str:
    """`int4-g128`, `int4-g128-sym`, ...; per-channel (-1) is a group of one row: `hidden_size` inputs."""
    return f"int{bits}-g{hidden_size if group == -1 else group}" + ("" if zero_points else "-sym")


class _Awq(BaseModel):
    model_config = _READ
    bits: Literal[4, 8] = Field(4, validation_alias=AliasChoices("bits", "w_bit"))
    group_size: Group = Field(128, validation_alias=AliasChoices("group_size", "q_group_size"))
    zero_point: bool = True

    def formats(self, hidden_size: int) -> tuple[str, str | None]:
        return _grouped(self.bits, self.group_size, self.zero_point, hidden_size), None  # weight-only


class _Gptq(BaseModel):
    model_config = _READ
    bits: Literal[4, 8]
    group_size: Group = 128
    sym: bool = True  # symmetric: kernels read no zero points (the checkpoint still packs qzeros, 4/g bits)

    def formats(self, hidden_size: int) -> tuple[str, str | None]:
        return _grouped(self.bits, self.group_size, not self.sym, hidden_size), None


class _Bnb(BaseModel):
    model_config = _READ
    load_in_4bit: bool = Field(False, validation_alias=AliasChoices("load_in_4bit", "_load_in_4bit"))
    load_in_8bit: bool = Field(False, validation_alias=AliasChoices("load_in_8bit", "_load_in_8bit"))
    bnb_4bit_quant_type: Literal["nf4", "fp4"] = "fp4"  # transformers' default
    bnb_4bit_use_double_quant: bool = False

    def formats(self, hidden_size: int) -> tuple[str, str | None]:
        if self.load_in_4bit and self.load_in_8bit:  # transformers refuses this pair too: never guess which
            raise ValueError("load_in_4bit and load_in_8bit are both true; a checkpoint is one or the other")
        if self.load_in_4bit:  # blocks of 64 with an absmax; dequantized to bnb_4bit_compute_dtype
            name = "nf4" if self.bnb_4bit_quant_type == "nf4" else "bnb-fp4"
            return name + ("-dq" if self.bnb_4bit_use_double_quant else ""), None
        if self.load_in_8bit:  # LLM.int8(): int8 weights and row-wise int8 activations (Dettmers et al. 2022)
            return "int8", "int8"
        raise ValueError("load_in_4bit and load_in_8bit are both false: nothing is quantized")


class _CtArgs(BaseModel):  # compressed-tensors QuantizationArgs
    model_config = _READ
    num_bits: Literal[4, 8]
    type: Literal["int", "float"]
    strategy: str | None = None  # tensor, channel, group, tensor_group, block, token
    group_size: int | None = Field(None, ge=1, le=65536)
    symmetric: bool = True

    def weights(self, hidden_size: int) -> str:
        if self.type == "float" and self.num_bits == 8:
            return "fp8"
        if self.type == "float":  # NVFP4: groups of 16 with an FP8 scale; MXFP4: groups of 32
            if self.group_size not in (16, 32):
                raise ValueError(f"4-bit float groups of {self.group_size}; known: 16 (NVFP4), 32 (MXFP4)")
            return "nvfp4" if self.group_size == 16 else "fp4"
        if self.num_bits == 8 and self.strategy != "group":
            return "int8"  # per-channel or per-tensor scales: negligible overhead
        return _grouped(self.num_bits, self.group_size or -1, not self.symmetric, hidden_size)

    def compute(self) -> str:
        return {"float": {8: "fp8", 4: "fp4"}, "int": {8: "int8", 4: "int4"}}[self.type][self.num_bits]


class _CtScheme(BaseModel):
    model_config = _READ
    weights: _CtArgs
    input_activations: _CtArgs | None = None  # None: weight-only (W4A16, W8A16)


class _CompressedTensors(BaseModel):
    model_config = _READ
    config_groups: dict[str, _CtScheme] = Field(min_length=1)

    def formats(self, hidden_size: int) -> tuple[str, str | None]:
        found = {
            name: (s.weights.weights(hidden_size), s.input_activations.compute() if s.input_activations else None)
            for name, s in self.config_groups.items()
        }
        if len(set(found.values())) > 1:
            shown = ", ".join(f"{name}: {w} x {c or 'bf16'}" for name, (w, c) in found.items())
            raise ValueError(f"config_groups differ ({shown}); tokcost prices one format for all block linears")
        return next(iter(found.values()))


class _Fp8(BaseModel):  # fbgemm_fp8 and fp8 (FineGrainedFP8Config, DeepSeek-V3's 128x128 blocks)
    model_config = _READ
    # read to be checked (a wrong type or a zero is refused); the format stays fp8, as the built-in DeepSeek-V3's
    weight_block_size: list[Annotated[int, Field(ge=1, le=65536)]] | None = Field(default=None, min_length=2,
                                                                                 max_length=2)  # fmt: skip

    def formats(self, hidden_size: int) -> tuple[str, str | None]:
        return "fp8", "fp8"  # activations are quantized to fp8 too (dynamically per token or block)


METHODS: dict[str, type[BaseModel]] = {
    "awq": _Awq, "gptq": _Gptq, "bitsandbytes": _Bnb, "compressed-tensors": _CompressedTensors,
    "fbgemm_fp8": _Fp8, "fp8": _Fp8, "mxfp4": _Fp8,  # mxfp4 is handled below: experts only
}  # fmt: skip


def attention_kept(kept: list[str], layers: int) -> bool:
    """Whether the unquantized modules hold every layer's attention: its `self_attn` (or the whole layer) listed for
    each of `layers`, or one name or pattern with `self_attn` and no layer index (compressed-tensors' "re:.*self_attn").
    Meta's Llama-3.1-405B FP8 lists model.layers.0, model.layers.125 and model.layers.1-124.self_attn."""
    covered: set[int] = set()
    for m in kept:
        whole = _WHOLE_LAYER.search(m)
        if "self_attn" in m and _LAYER.search(m) is None and _ONE_PROJECTION.search(m) is None:
            return True  # every layer's attention at once
        if whole:
            covered.add(int(whole.group(1)))
        elif (att := _LAYER_ATTENTION.search(m)) is not None:
            covered.add(int(att.group(1)))
    return covered >= set(range(layers))


def shipped(data: dict[str, Any], where: str, hidden_size: int, moe: bool, layers: int = 0) -> dict[str, str]:
    """The ModelSpec fields a config's torch_dtype and quantization_config set: dtype, weights_dtype, ..."""
    dtype = data.get("torch_dtype", data.get("dtype"))  # transformers >= 4.56 writes `dtype`
    key = "torch_dtype" if "torch_dtype" in data else "dtype"
    name = str(dtype).removeprefix("torch.")
    if dtype is not None and (not isinstance(dtype, str) or name not in (*BASE_DTYPES, *FP8_DTYPES)):
        known = ", ".join((*BASE_DTYPES, *FP8_DTYPES))
        raise SpecError(where, f"unknown dtype {dtype!r:.40}; known: {known}", field=key)
    fields = {"dtype": BASE_DTYPES.get(name, "bf16")}  # no torch_dtype key: bf16, what checkpoints ship

    def note(text: str) -> None:  # "; " parts the notes (specs import prints one a line): never inside one
        fields["notes"] = f"{fields['notes']}; {text}" if "notes" in fields else text

    if dtype is None:  # said, as a defaulted shape is
        note("no torch_dtype: priced at bf16, what checkpoints ship (dtype: in the spec changes it)")
    if name in FP8_DTYPES:
        fields["weights_dtype"] = "fp8"
    quant = data.get("quantization_config")
    if quant is None:
        return fields
    method = quant.get("quant_method") if isinstance(quant, dict) else None
    if method not in METHODS:
        what = "a mapping without quant_method" if method is None else f"{method!r:.40}"
        supported = ", ".join(METHODS)
        field = "quantization_config.quant_method"
        raise SpecError(where, f"unsupported ({what}); supported: {supported}", field=field)
    if method == "mxfp4":  # gpt-oss: MXFP4 experts; attention and router stay bf16 (modules_to_not_convert)
        return {**fields, ("expert_dtype" if moe else "weights_dtype"): "fp4"}
    try:
        weights, compute = METHODS[method].model_validate(quant).formats(hidden_size)  # type: ignore[attr-defined]
    except ValidationError as exc:
        error = validation_error(where, exc, METHODS[method])
        raise SpecError(where, error.message, field=f"quantization_config.{error.field}") from None
    except ValueError as exc:
        raise SpecError(where, str(exc), field="quantization_config") from None
    fields |= {"weights_dtype": weights} | ({"compute_dtype": compute} if compute else {})
    if method == "fp8" and quant.get("weight_block_size"):  # said: the block kernel is a prior no row has pinned
        note(
            "block-scaled FP8 (weight_block_size) priced as fp8, as the built-in DeepSeek-V3 is (--weights "
            "fp8-block prices its own kernel class, fp8_block, an engine prior)"
        )
    listed = quant.get("modules_to_not_convert") or quant.get("ignore") or quant.get("llm_int8_skip_modules")
    listed = listed if isinstance(listed, list) else []
    kept = [m for m in listed if isinstance(m, str) and not _UNQUANTIZED_ANYWAY.search(m)]
    if kept and layers and attention_kept(kept, layers):  # attention's projections as shipped, at the model dtype
        fields["attention_dtype"] = fields["dtype"]
        rest = [m for m in kept if "self_attn" not in m]
        note(f"quantization_config keeps every layer's attention unquantized: attention_dtype {fields['dtype']}"
             + (f", and {len(rest)} more module(s) ({rest[0][:80]}, ...), whose MLPs tokcost prices at {weights}"
                if rest else ""))  # fmt: skip
    elif kept:  # a ModelSpec has one format for all block linears: say so rather than price these silently
        note(
            f"quantization_config keeps {len(kept)} module(s) unquantized ({kept[0][:80]}, ...), and tokcost prices "
            f"every block linear at {weights}"
        )
    return fields
