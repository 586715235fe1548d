"""GPU families: GPUs that share one memory system generation and kernel stack, grouped for reporting.

Nothing is fitted per family since issue 19 (the hardware half of "expected" is each spec's measured `sustained`
block): the families group validate's summary and the leave-one-GPU-family-out folds (a family's rows predicted by
a fit that never saw that family).
"""

from __future__ import annotations

FAMILIES: dict[str, tuple[str, ...]] = {
    "hopper": ("h100-sxm", "h100-pcie", "h100-nvl", "h200", "h20", "h800"),
    "ampere": ("a100-40gb-sxm", "a100-80gb-pcie", "a100-80gb-sxm", "a10", "a10g", "a40"),
    "ada": ("l40s", "l4", "rtx-4090"),
    "blackwell": ("b200", "b300", "gb200"),
    "blackwell-geforce": ("rtx-5090",),  # GB202 with GDDR7, sm_120: not the B200's HBM3e and sm_100 kernels
    "cdna3": ("mi300x", "mi325x"),  # AMD Instinct MI300X and MI325X: ROCm (hipBLASLt, RCCL) rather than CUDA
    "cdna4": ("mi355x",),  # AMD Instinct MI355X: gfx950, its own hipBLASLt and aiter kernels
}


def family_of(gpu: str) -> str | None:
    """The family a built-in GPU belongs to, or None."""
    return next((name for name, members in FAMILIES.items() if gpu in members), None)
