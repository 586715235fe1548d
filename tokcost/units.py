"""Units and number formats shared by every package: dtype storage sizes, SI prefixes.

Decimal units throughout (1 GB = 1e9 B, 1 TFLOP/s = 1e12 FLOP/s), as GPU datasheets print them.
"""

from typing import Final

GB: Final = 1e9
TFLOPS: Final = 1e12
US: Final = 1e-6

# Storage bits per element, scale overhead included, for weights and KV cache.
DTYPE_BITS: Final[dict[str, float]] = {
    "fp32": 32.0,
    "bf16": 16.0,
    "fp16": 16.0,
    # fp8 and int8: per-channel (per-row) scales, one 16-bit value per several thousand elements: negligible.
    "fp8": 8.0,
    "int8": 8.0,
    # int4: group 128 with a 16-bit scale and a 16-bit zero point per group: 4 + 32/128 = 4.25 bits.
    "int4": 4.25,
    # fp4: MXFP4 (OCP Microscaling spec): blocks of 32 with an 8-bit E8M0 scale: 4 + 8/32 = 4.25 bits.
    "fp4": 4.25,
}

# Dtypes a GPU may list a dense peak for (keys of `peak_tflops`).
COMPUTE_DTYPES: Final = ("fp64", "fp32", "tf32", "bf16", "fp16", "fp8", "int8", "fp4", "int4")

# Weight dtypes that only shrink storage: their matmuls run at a 16-bit activation peak by default.
WEIGHT_ONLY_DTYPES: Final = ("int8", "int4", "fp4")


def dtype_bytes(dtype: str) -> float:
    """Bytes per element of a storage dtype (fractional for 4-bit formats with scales)."""
    return DTYPE_BITS[dtype] / 8


def known_dtypes() -> str:
    """The storage dtypes, comma-separated, for error messages."""
    return ", ".join(DTYPE_BITS)
