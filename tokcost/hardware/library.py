"""GPU specs by built-in name or YAML path."""

from __future__ import annotations

from typing import Any

from tokcost.catalog import builtin_names, expect_kind, locate
from tokcost.hardware.spec import GpuSpec, Link
from tokcost.spec_errors import validated


def load_gpu(name_or_path: str) -> GpuSpec:
    """A validated GpuSpec from a built-in name (`h100-sxm`) or a YAML file."""
    return gpu_from(*locate("gpus", name_or_path))


def gpu_from(where: str, data: dict[str, Any]) -> GpuSpec:
    """A GpuSpec from a loaded file; a model spec or HF config is named as such."""
    expect_kind(where, data, "gpus")
    return validated(GpuSpec, where, data)


def load_network(name_or_path: str) -> Link:
    """A validated network Link from a built-in name (`ib-ndr-400`) or a YAML file."""
    where, data = locate("networks", name_or_path)
    expect_kind(where, data, "networks")
    return validated(Link, where, data)


def network_for(gpu: GpuSpec, network: Link | str | None = None) -> Link | None:
    """The network given (a Link, a built-in name or a file), else the GPU spec's default one, else none."""
    if isinstance(network, Link):
        return network
    if network is not None:  # given, even empty: loaded (an empty name is refused, not taken as the default)
        return load_network(network)
    return load_network(gpu.network) if gpu.network else None


def builtin_gpus() -> list[str]:
    """Names of the built-in GPUs."""
    return builtin_names("gpus")


def match_device_name(device_name: str) -> str | None:
    """The built-in GPU whose `device_names` best matches a runtime name: the longest listed name it contains (the
    whole name where a spec lists it), skipping a spec whose `sibling_device_names` (another part's name) it holds."""
    runtime = device_name.strip().lower()
    best: tuple[int, str] | None = None
    for name in builtin_gpus():
        spec = load_gpu(name)
        if any(sibling.lower() in runtime for sibling in spec.sibling_device_names):
            continue  # another part whose name contains this spec's (H20-3e holds "H20")
        for listed in spec.device_names:
            if listed.lower() in runtime and (best is None or len(listed) > best[0]):
                best = (len(listed), name)
    return best[1] if best else None
