"""`tokcost calibrate`: probe this device and write a GPU spec with its measured ceilings."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from tokcost import fmt
from tokcost.cli.measure_cmd import Device, DeviceOpt, RunDtype, RunDtypeOpt
from tokcost.cli.options import ForceOpt
from tokcost.errors import FileExistsRefusal
from tokcost.files import write_new


def calibrate(
    device: DeviceOpt = Device.auto,
    dtype: RunDtypeOpt = RunDtype.bf16,
    out: Annotated[Optional[Path], typer.Option("--out", "-o", help="Write the spec here (default: stdout).")] = None,
    gpu: Annotated[
        Optional[str],
        typer.Option("--gpu", "-g", help="Built-in spec to start from (default: the one matching the device)."),
    ] = None,  # fmt: skip
    force: ForceOpt = False,
) -> None:
    """Probe bandwidth and matmul rate; write a GPU spec. Example: tokcost calibrate --out my-gpu.yaml"""
    from tokcost.measure.calibrate import calibrated_spec, spec_yaml
    from tokcost.measure.session import datasheet_for, device_facts, resolve_device, run_probes

    if out is not None and out.exists() and not force:
        raise FileExistsRefusal(f"{out}: already exists; pass --force to replace it, or choose another name")
    resolved = resolve_device(device.value)
    notes: list[str] = []
    facts = device_facts(resolved, notes)
    base = datasheet_for(facts, gpu, notes)
    probes = run_probes(resolved, dtype.value, lambda msg: sys.stderr.write(f"{msg}\n"))
    spec = calibrated_spec(facts, probes, dtype.value, base)
    text = spec_yaml(spec)
    if out is None:
        sys.stdout.write(text)
        return
    write_new(out, text, force=force)
    sys.stdout.write(
        f"wrote {out}: {spec.name}, {fmt.rate_gb_s(spec.bandwidth_bytes_per_s)} streaming read, "
        f"{spec.peak_tflops[dtype.value]:,.3f} TFLOP/s {dtype.value}"
        + (f" (datasheet {base.memory_bandwidth_gb_s:,g} GB/s)" if base else "")
        + "\n"
        f"use it anywhere a GPU is accepted: tokcost estimate -m MODEL -g {out}\n"
    )
