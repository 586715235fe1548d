"""Units shared by every package: SI prefixes and the compute dtypes a GPU lists peaks for.

Decimal units throughout (1 GB = 1e9 B, 1 TFLOP/s = 1e12 FLOP/s), as GPU datasheets print them.
"""

from typing import Final

GB: Final = 1e9
TFLOPS: Final = 1e12
US: Final = 1e-6

# Dtypes a GPU may list a dense peak for (keys of `peak_tflops`).
COMPUTE_DTYPES: Final = ("fp64", "fp32", "tf32", "bf16", "fp16", "fp8", "int8", "fp4", "int4")
MIB: Final = 2**20  # mebibyte: what nvidia-smi and torch.cuda.mem_get_info count in
