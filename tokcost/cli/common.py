"""Turning flags into validated inputs: the workload, with errors that name the flag and its range."""

from __future__ import annotations

import re
from itertools import product
from pathlib import Path
from typing import Any

from tokcost import fmt
from tokcost.engine.workload import MAX_GPUS, Workload
from tokcost.errors import UsageError
from tokcost.formats import lookup
from tokcost.hardware.library import builtin_gpus
from tokcost.inputs import FLAG_OF_FIELD
from tokcost.units import COMPUTE_DTYPES

_DIGITS = re.compile(r"[0-9]+")


def _value(v: Any) -> Any:
    return v.value if hasattr(v, "value") else v


def workload_from_flags(**flags: Any) -> Workload:
    """A Workload from CLI values; an out-of-range flag becomes `--flag: message (got X)`."""
    return Workload.checked({k: _value(v) for k, v in flags.items() if v is not None}, FLAG_OF_FIELD)


def split_list(value: str, flag: str, *, merge: bool = True) -> list[str]:
    """`a,b,a` -> ['a', 'b']: items stripped, empty items and lists refused, duplicates merged (first kept) unless
    merge=False, which keeps a repeat (spec names: the caller refuses two specs of one name, as it does `a,A`, so that a
    list aligned with it, such as --gpus 1,2, is never read against a shorter one)."""
    items = [v.strip() for v in value.split(",")]
    if not all(items):
        what = "no value" if not value.strip() else f"an empty item in {value[:60]!r}"
        raise UsageError(f"{flag}: {what}; give a comma-separated list like a,b")
    return list(dict.fromkeys(items)) if merge else items


def gpu_names(value: str) -> list[str]:
    """--gpu as plan and compare take it: names or files, comma-separated (a repeat kept, for the caller to refuse),
    or 'all' alone for every built-in GPU."""
    if value.strip().lower() == "all":
        return builtin_gpus()
    names = split_list(value, "--gpu", merge=False)
    if len(names) > 1 and any(n.lower() == "all" for n in names):  # 'all,h100-sxm'
        raise UsageError("--gpu: 'all' stands alone (every built-in GPU); drop it, or give only it")
    return names


def int_list(value: str, flag: str, low: int = 1, high: int = 100_000_000) -> list[int]:
    """`1,2,4` -> [1, 2, 4], each ASCII digits (int() would take '٣' for 3) within [low, high]."""
    out = []
    for item in split_list(value, flag):
        allowed = f"each value must be an integer from {low:,} to {high:,}"
        if not _DIGITS.fullmatch(item.removeprefix("-")):
            raise UsageError(f"{flag}: {allowed}, in digits 0-9 (got {item[:40]!r}); give a list like 1,8,32")
        n = int(item) if len(item) <= 18 else None  # no int() of a thousand digits
        if n is None or not low <= n <= high:
            raise UsageError(f"{flag}: {allowed} (got {item[:20]})")
        out.append(n)
    return list(dict.fromkeys(out))


def format_list(value: str, flag: str) -> list[str]:
    """--weights, --kv-dtype or --compute-dtype as a list of names as tokcost spells them, one of each (`BF16` is
    bf16, so one format is never priced twice); an unknown name is kept as given, for the spec's check to refuse
    with the names it allows."""

    def canonical(item: str) -> str:
        if flag == "--compute-dtype":
            return item.lower() if item.lower() in COMPUTE_DTYPES else item
        found = lookup(item)
        return found.name if found is not None else item

    return list(dict.fromkeys(canonical(item) for item in split_list(value, flag)))


def format_grid(weights: str | None, kv_dtype: str | None, compute_dtype: str | None) -> list[dict[str, str | None]]:
    """The precisions asked for, as plan takes them: each flag a comma-separated list (or absent: the model's and
    the GPU's default), every combination, weights outermost: [{"weights_dtype": ..., "kv_dtype": ...}, ...]."""
    lists = {key: format_list(value, flag) if value is not None else [None]
             for key, value, flag in (("weights_dtype", weights, "--weights"), ("kv_dtype", kv_dtype, "--kv-dtype"),
                                      ("compute_dtype", compute_dtype, "--compute-dtype"))}  # fmt: skip
    for dtype in lists["compute_dtype"]:
        if dtype is not None and dtype not in COMPUTE_DTYPES:
            raise UsageError(f"--compute-dtype: {dtype!r} is not one of {', '.join(COMPUTE_DTYPES)}")
    return [dict(zip(lists, combo, strict=True)) for combo in product(*lists.values())]


def per_gpu_values(value: str | None, names: list[str], flag: str, kind: type) -> dict[str, object]:
    """`8` (every GPU), `8,4` (aligned with --gpu) or `h100-sxm=8,h200=4` (by name) -> {gpu name: value}."""
    if value is None:
        return {}
    items = split_list(value, flag)

    def parse(text: str) -> object:
        try:
            number = kind(text)
        except ValueError:
            raise UsageError(f"{flag}: {text!r} is not a {'whole ' if kind is int else ''}number") from None
        if kind is int and not 1 <= number <= MAX_GPUS:  # a count of GPUs; a price's range is the workload's check
            raise UsageError(f"{flag}: must be an integer from 1 to {MAX_GPUS:,} (got {text})")
        return number

    if all("=" in item for item in items):
        out = {}
        by_key = {n.lower(): n for n in names}  # any case, as --gpu takes the names
        for item in items:
            given, _, text = item.partition("=")
            name = by_key.get(given.strip().lower())
            if name is None:
                raise UsageError(f"{flag}: {given.strip()!r} is not one of the --gpu names: {', '.join(names)}")
            if name in out:
                raise UsageError(f"{flag}: {name} given twice; give each GPU once")
            out[name] = parse(text.strip())
        return out
    if any("=" in item for item in items):
        raise UsageError(f"{flag}: mix of NAME=VALUE and plain values; give one form, e.g. h100-sxm=8,h200=4")
    if len(items) == 1:
        return {name: parse(items[0]) for name in names}
    if len(items) != len(names):
        raise UsageError(f"{flag}: {len(items)} values for {fmt.counted(len(names), 'GPU')}; give one, one per --gpu, "
                         "or NAME=VALUE")  # fmt: skip
    return {name: parse(text) for name, text in zip(names, items, strict=True)}


def check_force_with_plot(force: bool, plot: Path | None) -> None:
    """--force replaces an existing --plot file; without --plot it would be ignored, so it is refused."""
    if force and plot is None:
        raise UsageError("--force: replaces an existing --plot file; give it with --plot, or drop it")


def check_yaml_destination(path: Path, flag: str) -> None:
    """Refuse a .json name for a spec written as YAML: tokcost reads a .json file back as JSON, so it would not load."""
    if path.suffix.lower() == ".json":
        raise UsageError(f"{flag}: {path.name!r}: the spec is written as YAML; name it .yaml or .yml")
