"""Turning flags into validated inputs: the workload, with errors that name the flag and its range."""

from __future__ import annotations

import math
import re
from typing import Any

from pydantic import ValidationError

from tokcost.engine.workload import Workload
from tokcost.errors import UsageError
from tokcost.spec_errors import allowed

MAX_GRID_POINTS = 10_000  # points held at once: a sweep's table or JSON, a compare's pairs (each a spec load)
_DIGITS = re.compile(r"[0-9]+")

FLAG_OF_FIELD = {
    "batch": "--batch",
    "prompt_tokens": "--prompt",
    "output_tokens": "--output",
    "gpus": "--gpus",
    "tp": "--tp",
    "pp": "--pp",
    "ep": "--ep",
    "dp": "--dp",
    "gpus_per_node": "--gpus-per-node",
    "weights_dtype": "--weights",
    "kv_dtype": "--kv-dtype",
    "compute_dtype": "--compute-dtype",
    "cached_prefix_tokens": "--cached-prefix",
    "price_per_hour_usd": "--price",
}


def _value(v: Any) -> Any:
    return v.value if hasattr(v, "value") else v


def workload_from_flags(**flags: Any) -> Workload:
    """A Workload from CLI values; an out-of-range flag becomes `--flag: message (got X)`."""
    values = {k: _value(v) for k, v in flags.items() if v is not None}
    try:
        return Workload.model_validate(values)
    except ValidationError as exc:
        first = exc.errors()[0]
        # the cross-field checks carry no location: the prefix one names the prefix, the other the GPU count
        whole = "cached_prefix_tokens" if "cached prefix" in first["msg"] else "gpus"
        field = str(first["loc"][0]) if first["loc"] else whole
        if first["loc"] and field in Workload.model_fields and first["type"] != "value_error":
            message = f"must be {allowed(Workload.model_fields[field])} (got {first['input']!r:.40})"
        else:
            message = first["msg"].removeprefix("Value error, ") + (
                f" (got {first['input']!r:.40})" if first["loc"] else ""
            )
        raise UsageError(f"{FLAG_OF_FIELD.get(field, field)}: {message}") from None


def split_list(value: str, flag: str) -> list[str]:
    """`a,b,a` -> ['a', 'b']: items stripped, duplicates merged (first kept), empty items and lists refused."""
    items = [v.strip() for v in value.split(",")]
    if not all(items):
        what = "no value" if not value.strip() else f"an empty item in {value[:60]!r}"
        raise UsageError(f"{flag}: {what}; give a comma-separated list like a,b")
    return list(dict.fromkeys(items))


def int_list(value: str, flag: str, low: int = 1, high: int = 100_000_000) -> list[int]:
    """`1,2,4` -> [1, 2, 4], each ASCII digits (int() would take '٣' for 3) within [low, high]."""
    out = []
    for item in split_list(value, flag):
        if not _DIGITS.fullmatch(item):
            raise UsageError(f"{flag}: {item[:40]!r} is not an integer (digits 0-9); give a list like 1,8,32")
        n = int(item) if len(item) <= 18 else None  # no int() of a thousand digits
        if n is None or not low <= n <= high:
            raise UsageError(f"{flag}: {item[:20]} is out of range; each value must be in {low}..{high:,}")
        out.append(n)
    return list(dict.fromkeys(out))


def check_grid(*axes: tuple[str, list[Any]], limit: int = MAX_GRID_POINTS, hint: str = "") -> None:
    """Refuse, before any work, a grid of more than `limit` points (the product of the lists' lengths); `hint`
    ends the line (e.g. what a larger grid needs)."""
    points = math.prod(len(values) for _, values in axes)
    if points > limit:
        sizes = " x ".join(f"{len(values):,} {flag} values" for flag, values in axes)
        raise UsageError(f"{axes[0][0]}: {sizes} make {points:,} points; at most {limit:,} per run{hint}")
