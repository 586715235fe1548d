"""Storage formats of weights and KV cache: bits per element with their scales, and the matmul they feed.

A format's bits include its quantization metadata, so bytes = elements x bits / 8 is the whole footprint:
- group quantization (AWQ, GPTQ, torchao): `int4-g128` holds 4-bit codes plus one 16-bit scale and one
  packed 4-bit zero point per 128 weights: 4 + 16/128 + 4/128 = 4.156 bits; `-sym` drops the zero point;
  `-z16` keeps a 16-bit zero point (torchao and gpt-fast's int4: 4 + 32/g);
- block formats (OCP MX, NVFP4, bitsandbytes, llama.cpp's GGUF) carry a scale per block of fixed size;
- the GGUF "K" mixtures (Q4_K_M, Q5_K_M) mix block types across tensors: their bits per weight are the
  measured averages llama.cpp publishes, not a formula.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Annotated, Final

from pydantic import AfterValidator

SCALE_BITS: Final = 16  # fp16/bf16 scale per group (AWQ, GPTQ, torchao)
_GROUPED = re.compile(r"^int(?P<bits>4|8)-g(?P<group>\d{1,5})(?P<zero>-sym|-z16)?$")
GROUPED_GRAMMAR: Final = "int4-g<group>[-sym|-z16] or int8-g<group>[-sym|-z16]"


@dataclass(frozen=True, slots=True)
class Format:
    """One storage format: bits per element (metadata included) and the tensor-core dtype it runs natively on."""

    name: str
    bits: float
    native_compute: str | None  # peak_tflops key that multiplies it without dequantizing; None: always dequantized
    source: str
    # its matmul applies a scale per weight block inside the main loop: a kernel of its own even where it runs at
    # its native dtype (DeepSeek-V3's 128x128 FP8 blocks: triton's w8a8_block_fp8_matmul, CUTLASS blockwise,
    # DeepGEMM), priced as its own format family, apart from a per-tensor FP8 GEMM
    block_scaled: bool = False
    # the platforms whose tensor cores take its block scales as stored (None: every platform that lists its native
    # dtype): NVFP4's FP8 E4M3 scale per 16 is Blackwell's; CDNA4's FP4 instructions take the MX formats' E8M0 per 32
    native_platforms: tuple[str, ...] | None = None
    # a GGUF file quantizes the embedding and the output (LM head) too: the llama.cpp table's bits are the average
    # over every tensor of the file, so these formats hold the embedding and LM head as well (a q4_0 file's output
    # tensor is Q6_K, llama.cpp src/llama-quant.cpp: under 1% of a 7B's bytes); the other formats leave them at the
    # model dtype, as the quantizers do
    whole_model: bool = False

    @property
    def bytes(self) -> float:
        """Bytes per element, metadata included."""
        return self.bits / 8


_LLAMA_CPP_TABLE = (
    "llama.cpp tools/quantize/README.md, 'Llama 2 7B' table of bits per weight (a mixture: the average over "
    "the model's tensors)"
)
_GGML_BLOCKS = "llama.cpp ggml-common.h block layouts (block_q8_0: 32 int8 + fp16 scale; block_q4_0: 32 x 4 bit + fp16)"

FORMATS: Final[dict[str, Format]] = {
    f.name: f
    for f in (
        Format("fp32", 32.0, "fp32", "IEEE 754 single precision"),
        Format("bf16", 16.0, "bf16", "bfloat16"),
        Format("fp16", 16.0, "fp16", "IEEE 754 half precision"),
        # per-tensor, per-channel or 128x128-block scales (DeepSeek-V3: one fp32 per 16,384 weights): < 0.03%
        Format("fp8", 8.0, "fp8", "OCP FP8 (E4M3/E5M2); scale overhead under 0.03% for per-channel or 128x128 blocks"),
        # DeepSeek-V3/R1's shipped checkpoint: FP8 E4M3 with one fp32 scale per 128x128 block of weights (the
        # config's quantization_config weight_block_size [128, 128]; DeepSeek-V3 report, section 3.3.1)
        Format("fp8-block", 8.0 + 32 / 128**2, "fp8", "FP8 E4M3, fp32 scale per 128x128 block", block_scaled=True),
        # per-channel scales (LLM.int8, SmoothQuant, compressed-tensors W8A8/W8A16): one per row, negligible
        Format("int8", 8.0, "int8", "8-bit integers with per-channel scales (negligible overhead)"),
        # the AWQ / GPTQ default: group 128, fp16 scale, 4-bit zero point packed beside the codes
        Format("int4", 4.0 + 16 / 128 + 4 / 128, "int4", "= int4-g128: the AWQ/GPTQ default, group 128, zero points"),
        Format("fp4", 4.0 + 8 / 32, "fp4", "MXFP4, OCP Microscaling spec v1.0: blocks of 32 with an 8-bit E8M0 scale"),
        Format(
            "nvfp4",
            4.0 + 8 / 16,
            "fp4",
            "NVFP4 (NVIDIA Blackwell): blocks of 16 with an FP8 E4M3 scale",
            native_platforms=("cuda",),
        ),
        # bitsandbytes 4-bit: blocks of 64 with an fp32 absmax; double quantization stores absmax in 8 bits with
        # an fp32 scale per 256 blocks (Dettmers et al. 2023, QLoRA, section 3): 4 + 8/64 + 32/(64 x 256)
        Format("nf4", 4.0 + 32 / 64, None, "bitsandbytes NF4, blocksize 64, fp32 absmax (QLoRA paper, sec. 2-3)"),
        Format("nf4-dq", 4.0 + 8 / 64 + 32 / (64 * 256), None, "bitsandbytes NF4 with double quantization (QLoRA)"),
        # bitsandbytes' other 4-bit code book (transformers' default bnb_4bit_quant_type): the same blocks as NF4
        Format("bnb-fp4", 4.0 + 32 / 64, None, "bitsandbytes FP4, blocksize 64, fp32 absmax (as NF4)"),
        Format("bnb-fp4-dq", 4.0 + 8 / 64 + 32 / (64 * 256), None, "bitsandbytes FP4 with double quantization"),
        Format("q8_0", 8.5, None, _GGML_BLOCKS, whole_model=True),
        Format("q4_0", 4.5, None, _GGML_BLOCKS, whole_model=True),
        Format("q4_k_m", 4.84, None, _LLAMA_CPP_TABLE, whole_model=True),
        Format("q4_k_s", 4.58, None, _LLAMA_CPP_TABLE, whole_model=True),
        Format("q5_k_m", 5.68, None, _LLAMA_CPP_TABLE, whole_model=True),
        Format("q5_k_s", 5.52, None, _LLAMA_CPP_TABLE, whole_model=True),
        Format("q6_k", 6.56, None, _LLAMA_CPP_TABLE, whole_model=True),
        Format("q3_k_m", 3.91, None, _LLAMA_CPP_TABLE, whole_model=True),
        Format("q2_k", 3.35, None, _LLAMA_CPP_TABLE, whole_model=True),
    )
}

# Formats an activation can also take (the dtype of activations, all-reduce payloads and logits).
ACTIVATION_FORMATS: Final = ("fp32", "bf16", "fp16")


def grouped(bits: int, group: int, zero: str = "") -> Format:
    """`int4-g128` and kin: codes, a 16-bit scale per group, and a zero point (4-bit packed, 16-bit, or none)."""
    zero_bits = {"": bits, "-z16": 16, "-sym": 0}[zero]
    total = bits + SCALE_BITS / group + zero_bits / group
    what = {"": f"{bits}-bit zero point", "-z16": "16-bit zero point", "-sym": "no zero point (symmetric)"}[zero]
    return Format(
        f"int{bits}-g{group}{zero}",
        total,
        f"int{bits}",
        f"group quantization: {bits} + {SCALE_BITS}/{group} (fp16 scale) + {zero_bits}/{group} ({what}) bits",
    )


def lookup(name: str) -> Format | None:
    """The format called `name` (case-insensitive), parsing grouped integer formats; None if unknown."""
    key = name.strip().lower()
    if key in FORMATS:
        return FORMATS[key]
    m = _GROUPED.match(key)
    if m and 1 <= int(m["group"]) <= 65536:
        return grouped(int(m["bits"]), int(m["group"]), m["zero"] or "")
    return None


def known_formats() -> str:
    """The format names, comma-separated, for error messages."""
    return ", ".join(FORMATS) + f", {GROUPED_GRAMMAR}"


def get(name: str) -> Format:
    """The format called `name`; a ValueError naming the allowed ones otherwise."""
    found = lookup(name)
    if found is None and "," in name:  # the list syntax of compare, sweep and plan, given where one format goes
        raise ValueError(f"{name[:60]!r} is a list; give one format here (compare, sweep and plan take a list)")
    if found is None:
        raise ValueError(f"unknown format {name!r}; allowed: {known_formats()}")
    return found


def bits_of(name: str) -> float:
    """Bits per element of a format, metadata included."""
    return get(name).bits


def _canonical(name: str) -> str:
    return get(name).name


# A storage format name in a spec or a flag: validated and normalized (lower case) by pydantic.
FormatName = Annotated[str, AfterValidator(_canonical)]

# Weight formats a KV cache is never stored in: DeepSeek-V3's 128x128-block FP8, llama.cpp's k-quant mixtures (its
# cache takes q8_0, q4_0 and the like, --cache-type-k) and bitsandbytes' code books, which quantize weights only
_NOT_KV = (
    "fp8-block", "nf4", "nf4-dq", "bnb-fp4", "bnb-fp4-dq", "q4_k_m", "q4_k_s", "q5_k_m", "q5_k_s", "q6_k", "q3_k_m",
    "q2_k",
)  # fmt: skip


def _kv_canonical(name: str) -> str:
    allowed = ", ".join(f for f in FORMATS if f not in _NOT_KV)
    if lookup(name) is None and "," not in name:  # the formats a cache takes, not every weight format
        raise ValueError(f"unknown format {name!r}; a cache takes {allowed}, or intN-gG")
    found = _canonical(name)
    if found in _NOT_KV:
        raise ValueError(f"{found} quantizes weights, not a KV cache; a cache takes {allowed}, or intN-gG")
    return found


# A KV cache's format: a storage format a cache is kept in (not a weight-only mixture or code book).
KvFormatName = Annotated[str, AfterValidator(_kv_canonical)]
