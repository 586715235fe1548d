"""GPU specs by built-in name or YAML path."""

from __future__ import annotations

from pydantic import ValidationError

from tokcost.catalog import builtin_names, locate
from tokcost.hardware.spec import GpuSpec, Link
from tokcost.spec_errors import validation_error


def load_gpu(name_or_path: str) -> GpuSpec:
    """A validated GpuSpec from a built-in name (`h100-sxm`) or a YAML file."""
    where, data = locate("gpus", name_or_path)
    try:
        return GpuSpec.model_validate(data)
    except ValidationError as exc:
        raise validation_error(where, exc) from None


def load_network(name_or_path: str) -> Link:
    """A validated network Link from a built-in name (`ib-ndr-400`) or a YAML file."""
    where, data = locate("networks", name_or_path)
    try:
        return Link.model_validate(data)
    except ValidationError as exc:
        raise validation_error(where, exc) from None


def builtin_gpus() -> list[str]:
    """Names of the built-in GPUs."""
    return builtin_names("gpus")


def match_device_name(device_name: str) -> str | None:
    """The built-in GPU whose `device_names` best matches a runtime name (longest listed name wins)."""
    best: tuple[int, str] | None = None
    for name in builtin_gpus():
        for listed in load_gpu(name).device_names:
            if listed.lower() in device_name.lower() and (best is None or len(listed) > best[0]):
                best = (len(listed), name)
    return best[1] if best else None
