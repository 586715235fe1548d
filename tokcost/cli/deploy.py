"""Flags shared by every command that prices a deployment: the layout flags, and warnings on stderr."""

from __future__ import annotations

import sys
from collections.abc import Iterable


def layout_flags(gpus: int | None, tp: int | None, pp: int, ep: int, dp: int, gpus_per_node: int | None) -> dict:
    """The workload keys of the layout flags (`--gpus` alone is the shorthand for `--tp`)."""
    return {"gpus": gpus, "tp": tp, "pp": pp, "ep": ep, "dp": dp, "gpus_per_node": gpus_per_node}


def warn(lines: Iterable[str]) -> None:
    """Warnings go to stderr, one line each, never into the middle of a table or a JSON document."""
    for line in dict.fromkeys(lines):  # each once, in order
        sys.stderr.write(f"warning: {line}\n")
