"""What estimate, compare and sweep are asked, checked once for the CLI and the Python API.

One path for both callers, so they refuse the same inputs with the same one line, named as a flag (`--batch`)
on the command line and as a keyword (`batch`, `batches`) in Python (plan's own inputs: serving/inputs.py):
- the workload: the Workload's strict ranges and its prefix rule (engine/workload.py), and every swept batch
  and prompt checked as the workload it makes (a batch of 0 or a prompt inside its cached prefix is refused,
  never priced);
- the work, bounded before it starts: at most MAX_GRID_POINTS points held at once (a sweep's table, JSON or
  Python result; a compare's pairs);
- a message the engine words with a flag (`--tp: 3 does not divide ...`) names the keyword in Python.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from tokcost.catalog import repeated_name
from tokcost.engine.workload import Workload
from tokcost.errors import UsageError

MAX_GRID_POINTS = 10_000  # points held at once: a sweep's table or JSON, a compare's pairs (each a spec load)
MAX_STREAMED_POINTS = 10_000_000  # points written as computed (sweep -f csv or jsonl, the API's iter_sweep)

FLAG_OF_FIELD = {
    "batch": "--batch", "prompt_tokens": "--prompt", "output_tokens": "--output", "gpus": "--gpus", "tp": "--tp",
    "pp": "--pp", "ep": "--ep", "dp": "--dp", "gpus_per_node": "--gpus-per-node", "weights_dtype": "--weights",
    "kv_dtype": "--kv-dtype", "compute_dtype": "--compute-dtype", "cached_prefix_tokens": "--cached-prefix",
    "price_per_hour_usd": "--price", "redundant_experts": "--redundant-experts",
}  # fmt: skip
_FLAG = re.compile(r"^(--[a-z-]+)(?=:)")


def keyword_message(message: str, names: Mapping[str, str] | None = None) -> str:
    """A message that opens with a Workload flag (`--tp: ...`, as the engine words it) opened with the keyword
    instead (`tp: ...`, or as `names` calls that key); any other message as it is."""
    match = _FLAG.match(message)
    field = next((k for k, flag in FLAG_OF_FIELD.items() if match and flag == match[1]), None)
    return message if field is None else (names or {}).get(field, field) + message[match.end() :]  # type: ignore[union-attr]


# a flag named inside a message (a hint, not its opening key), as the Python API calls it
_API_WORDS = {"pass it to --model (-m)": "pass it as model", "pass it to --gpu (-g)": "pass it as gpu",
              "pass it to --network": "pass it as network", "pass it to --engine": "pass it as engine",
              **{f"use {flag} ": f"use {field}=" for field, flag in FLAG_OF_FIELD.items()}}  # fmt: skip


def api_message(message: str) -> str:
    """A message worded for the command line (`--tp: ...`, `pass it to --gpu (-g)`, `use --ep 1`) in the Python
    API's words (`tp: ...`, `pass it as gpu`, `use ep=1`)."""
    message = keyword_message(message)
    for cli, api in _API_WORDS.items():
        message = message.replace(cli, api)
    return message


def check_distinct_names(specs: Iterable[Any], flag: str) -> None:
    """Refuse two specs of one name: their rows would read as one (catalog.repeated_name)."""
    name = repeated_name(specs)
    if name is not None:
        raise UsageError(f"{flag}: two specs are named {name!r}: list each once (names match in any case), and give a "
                         f"spec file a name of its own (its name: key)")  # fmt: skip


def check_grid(*axes: tuple[str, Sequence[Any]], limit: int = MAX_GRID_POINTS, hint: str = "") -> None:
    """Refuse, before any work, an empty axis (a grid of no point) or a grid of more than `limit` points (the product
    of the lists' lengths); `hint` ends the line (e.g. what a larger grid needs)."""
    for name, values in axes:
        if not values:
            raise UsageError(f"{name}: an empty list; give at least one value")
    points = math.prod(len(values) for _, values in axes)
    if points > limit:
        sizes = " x ".join(f"{len(values):,} {name}{' values' * name.startswith('-')}" for name, values in axes)
        raise UsageError(f"{axes[0][0]}: {sizes} make {points:,} points; at most {limit:,} per run{hint}")


def check_decode_output(output_tokens: object, name: str) -> None:
    """A sweep prices decode steps: 2 or more output tokens (checked before the workload's own 1..1e8 range, so that
    a 0 is told what a sweep takes, not a range that 1 would pass)."""
    if isinstance(output_tokens, int) and not isinstance(output_tokens, bool) and output_tokens < 2:
        raise UsageError(
            f"{name}: sweep prices decode steps; give 2 to 100,000,000 output tokens (got {output_tokens})"
        )


def sweep_grid(
    base: Workload, *, batches: Sequence[int], prompts: Sequence[int], names: Mapping[str, str],
    limit: int = MAX_GRID_POINTS, hint: str = "", more: tuple[tuple[str, Sequence[Any]], ...] = (),
) -> tuple[list[int], list[int]]:  # fmt: skip
    """A sweep's batches and prompts, duplicates merged (first kept), the grid bounded (with `more` axes, such as
    formats), and each value checked as the workload it makes with `base` (its range, the prefix rule); a sweep
    prices decode steps: 2+ outputs."""
    check_decode_output(base.output_tokens, names.get("output_tokens", "output_tokens"))
    batches, prompts = list(dict.fromkeys(batches)), list(dict.fromkeys(prompts))
    for key, values in (("batch", batches), ("prompt_tokens", prompts)):
        if not values:
            raise UsageError(f"{names.get(key, key)}: an empty list; give at least one value")
    check_grid((names.get("batch", "batch"), batches), (names.get("prompt_tokens", "prompt_tokens"), prompts), *more,
               limit=limit, hint=hint)  # fmt: skip
    fields = base.model_dump(exclude={"gpus"})
    for key, values in (("batch", batches), ("prompt_tokens", prompts)):
        wrong = [v for v in values if isinstance(v, bool) or not isinstance(v, int)]
        # the ranges and the prefix rule are bounds: the smallest and the largest value stand for every one
        for value in wrong[:1] or [min(values), max(values)]:
            Workload.checked({**fields, key: value}, names)
    return batches, prompts
