"""Human formatting of SI quantities, shared by explanations and tables (decimal prefixes, as datasheets)."""

from __future__ import annotations


def gb(nbytes: float) -> str:
    """Bytes as decimal GB: 13.21 GB."""
    return f"{nbytes / 1e9:,.2f} GB"


def ms(seconds: float) -> str:
    """Seconds as milliseconds with 3 significant-ish digits."""
    value = seconds * 1e3
    return f"{value:,.3f} ms" if value < 10 else f"{value:,.1f} ms"


def tflop(flops: float) -> str:
    """FLOPs in TFLOP (or GFLOP when small)."""
    return f"{flops / 1e12:,.2f} TFLOP" if flops >= 1e11 else f"{flops / 1e9:,.2f} GFLOP"


def rate_gb_s(bytes_per_s: float) -> str:
    """Bandwidth in GB/s."""
    return f"{bytes_per_s / 1e9:,.0f} GB/s"


def rate_tflops(flops_per_s: float) -> str:
    """Compute rate in TFLOP/s."""
    return f"{flops_per_s / 1e12:,.1f} TFLOP/s"


def count(n: float) -> str:
    """A big count with thousands separators, or billions when huge."""
    return f"{n / 1e9:,.3f}B" if n >= 1e9 else f"{n:,.0f}"


def joules(value: float | None) -> str:
    """Joules with 3 decimals, or n/a without a power figure."""
    return "n/a" if value is None else f"{value:.3f}"


def usd(value: float | None) -> str:
    """Dollars, or n/a without a price."""
    return "n/a" if value is None else f"${value:,.3f}"
