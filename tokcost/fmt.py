"""Human formatting of SI quantities, shared by explanations and tables (decimal prefixes, as datasheets).

Every quantity here is a time, a size, a rate, a cost or an energy: one that is not finite, or is negative,
cannot be right and is never printed (errors.Unprintable), the rule the JSON, CSV and JSON Lines writers apply
too (cli/render.py).
"""

from __future__ import annotations

import math

from tokcost.errors import Unprintable


def printable(value: float, what: str = "a quantity") -> float:
    """`value` when it may be printed: finite and not negative; else Unprintable, naming `what`."""
    if not math.isfinite(value) or value < 0:
        raise Unprintable(f"refusing to print {what} = {value!r}: a time, rate, cost or size is finite and never "
                          "negative (a tokcost bug: please report the command)")  # fmt: skip
    return value


def gb(nbytes: float) -> str:
    """Bytes as decimal GB: 13.21 GB."""
    return f"{printable(nbytes, 'a size') / 1e9:,.2f} GB"


def ms(seconds: float) -> str:
    """Seconds as milliseconds with 3 significant-ish digits."""
    value = printable(seconds, "a time") * 1e3
    return f"{value:,.3f} ms" if value < 10 else f"{value:,.1f} ms"


def tflop(flops: float) -> str:
    """FLOPs in TFLOP (or GFLOP when small)."""
    printable(flops, "a FLOP count")
    return f"{flops / 1e12:,.2f} TFLOP" if flops >= 1e11 else f"{flops / 1e9:,.2f} GFLOP"


def _digits(value: float, places: int) -> str:
    """`value` with `places` decimals, or 3 significant digits where those would print under 3 (a CPU's rates)."""
    if value == 0 or abs(value) >= 10 ** (3 - places - 1):
        return f"{value:,.{places}f}"
    return f"{value:.3g}"


def rate_gb_s(bytes_per_s: float) -> str:
    """Bandwidth in GB/s: whole GB/s, 3 significant digits under 100 (a CPU's 3.91, a gloo link's 0.36)."""
    return f"{_digits(printable(bytes_per_s, 'a bandwidth') / 1e9, 0)} GB/s"


def rate_tflops(flops_per_s: float) -> str:
    """Compute rate in TFLOP/s: one decimal, 3 significant digits under 10 (a CPU's 0.0537)."""
    return f"{_digits(printable(flops_per_s, 'a compute rate') / 1e12, 1)} TFLOP/s"


def load(value: float) -> str:
    """A request rate or a user count as people write it: 4 significant digits, thousands separated, no exponent
    (12,346 req/s, not 1.235e+04; 5.157; 0.25)."""
    value = printable(value, "a load")
    if value >= 1000 or value == 0:
        return f"{round(value):,}"
    decimals = 3 - math.floor(math.log10(value))  # 4 significant digits
    return f"{value:.{decimals}f}".rstrip("0").rstrip(".")


def rate(value: float | None) -> str:
    """A rate such as tokens/s with one decimal, or n/a where there is none (one output token: no decode)."""
    return "n/a" if value is None else f"{printable(value, 'a rate'):,.1f}"


def count(n: float) -> str:
    """A big count with thousands separators, or billions when huge."""
    return f"{n / 1e9:,.3f}B" if n >= 1e9 else f"{n:,.0f}"


def counted(n: int, noun: str) -> str:
    """`1 user`, `2 users`, `1,024 users`: a whole count and its noun, plural past one."""
    return f"{n:,} {noun}{'' if n == 1 else 's'}"


def joules(value: float | None) -> str:
    """Joules with 3 decimals, or n/a without a power figure."""
    return "n/a" if value is None else f"{printable(value, 'an energy'):.3f}"


def usd(value: float | None) -> str:
    """Dollars to a tenth of a cent, and to 3 significant digits below 10 cents ($0.00632, not $0.006); n/a without
    a price."""
    if value is None:
        return "n/a"
    v = printable(value, "a cost")
    decimals = 3 if v == 0 or abs(v) >= 0.1 else 2 - math.floor(math.log10(abs(v)))
    return f"${v:,.{decimals}f}"


_PREFIXES = ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"), (1.0, ""))


def si(value: float, unit: str, digits: int = 4) -> str:
    """A quantity with a decimal prefix and `digits` significant digits: 402.7 MB, 1.979 TFLOP, 32.77 kB."""
    printable(value, f"a quantity in {unit}")
    for scale, prefix in _PREFIXES:
        if abs(value) >= scale:
            return f"{_sig(value / scale, digits)} {prefix}{unit}"
    return f"{_sig(value, digits)} {unit}"


def seconds(value: float, digits: int = 4) -> str:
    """A time in s, ms or us with `digits` significant digits."""
    printable(value, "a time")
    for scale, unit in ((1.0, "s"), (1e-3, "ms"), (1e-6, "us")):
        if abs(value) >= scale:
            return f"{_sig(value / scale, digits)} {unit}"
    return f"{_sig(value / 1e-6, digits)} us"


def _sig(x: float, digits: int) -> str:
    """`digits` significant digits, thousands separated: 1,234, 12.34, 0.001234."""
    if x == 0:
        return "0"
    magnitude = math.floor(math.log10(abs(x)))
    return f"{x:,.{max(digits - 1 - magnitude, 0)}f}"
