"""Turning flags into validated inputs: the workload, with errors that name the flag and its range."""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from tokcost.engine.workload import Workload
from tokcost.errors import UsageError
from tokcost.spec_errors import allowed

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
    """`a,b,c` -> ['a', 'b', 'c'], refusing empty items."""
    items = [v.strip() for v in value.split(",")]
    if not all(items):
        raise UsageError(f"{flag}: empty item in {value!r}; give a comma-separated list like a,b")
    return items


def int_list(value: str, flag: str, low: int = 1, high: int = 100_000_000) -> list[int]:
    """`1,2,4` -> [1, 2, 4], each within [low, high]."""
    out = []
    for item in split_list(value, flag):
        try:
            n = int(item)
        except ValueError:
            raise UsageError(f"{flag}: {item!r} is not an integer; give a list like 1,8,32") from None
        if not low <= n <= high:
            raise UsageError(f"{flag}: {n} is out of range; each value must be in {low}..{high:,}")
        out.append(n)
    return out
