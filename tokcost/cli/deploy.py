"""Flags shared by every command that prices a deployment: the layout, the network, warnings on stderr."""

from __future__ import annotations

import sys
from collections.abc import Iterable

from tokcost.hardware.library import load_network
from tokcost.hardware.spec import GpuSpec, Link
from tokcost.profiles import EngineProfile, load_engine


def network_for(gpu: GpuSpec, flag: str | None) -> Link | None:
    """--network, else the GPU spec's default network, else none (layouts that span nodes are then refused)."""
    name = flag or gpu.network
    return load_network(name) if name else None


def engine_for(flag: str | None) -> EngineProfile:
    """--engine, else the generic profile (the GPU family's fractions alone)."""
    return load_engine(flag or "generic")


def layout_flags(gpus: int | None, tp: int | None, pp: int, ep: int, dp: int, gpus_per_node: int | None) -> dict:
    """The workload keys of the layout flags (`--gpus` alone is the shorthand for `--tp`)."""
    return {"gpus": gpus, "tp": tp, "pp": pp, "ep": ep, "dp": dp, "gpus_per_node": gpus_per_node}


def warn(lines: Iterable[str]) -> None:
    """Warnings go to stderr, one line each, never into the middle of a table or a JSON document."""
    for line in dict.fromkeys(lines):  # each once, in order
        sys.stderr.write(f"warning: {line}\n")
