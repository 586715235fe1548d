"""One `tokcost measure` session: device, probes, a decode loop per batch, and the report (torch imported lazily)."""

from __future__ import annotations

import platform
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tokcost.errors import MeasureError
from tokcost.hardware.library import load_gpu, match_device_name
from tokcost.hardware.spec import GpuSpec
from tokcost.measure.calibrate import DeviceFacts, calibrated_spec
from tokcost.measure.report import RunReport, run_dict, run_report
from tokcost.models.spec import ModelSpec

INSTALL_HINT = "install the measure extra: pip install 'tokcost[measure]' (torch, nvidia-ml-py)"


def import_torch() -> Any:
    """torch, or a MeasureError saying how to install it."""
    import warnings

    # CPU wheels without numpy warn at import; tokcost never hands torch a numpy array
    warnings.filterwarnings("ignore", message="Failed to initialize NumPy")
    try:
        import torch
    except ImportError:
        raise MeasureError(f"torch is not installed; {INSTALL_HINT}") from None
    return torch


def resolve_device(device: str) -> str:
    """auto -> cuda when torch sees a GPU, else cpu; cuda without one is an error."""
    torch = import_torch()
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda" and not torch.cuda.is_available():
        raise MeasureError(
            f"--device cuda: torch {torch.__version__} sees no CUDA device (a CPU-only build, or no driver); "
            "use --device cpu, or a CUDA build of torch"
        )
    return device


def device_facts(device: str, notes: list[str]) -> DeviceFacts:
    """Name, memory and power limit of the device (NVML where present)."""
    torch = import_torch()
    if device == "cuda":
        from tokcost.measure.nvml import device_info

        props = torch.cuda.get_device_properties(0)
        info = device_info(0, notes)
        return DeviceFacts(
            kind="cuda",
            name=info.name if info else props.name,
            memory_bytes=float(props.total_memory),
            power_limit_w=info.power_limit_w if info else None,
            driver=info.driver_version if info else "unknown",
            torch_version=torch.__version__,
        )
    import os

    memory = float(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")) if hasattr(os, "sysconf") else 0.0
    notes.append("CPU run: NVML power and J/token are GPU-only")
    return DeviceFacts("cpu", platform.processor() or platform.machine() or "cpu", memory or 1e9, None, "n/a",
                       torch.__version__)  # fmt: skip


def run_probes(device: str, dtype: str, progress: Callable[[str], None]) -> dict[str, Any]:
    """Copy, streaming-read and matmul probes on `device` in `dtype`."""
    from tokcost.measure.probes import probe_copy, probe_matmul, probe_stream

    results = {}
    for name, probe in (("copy", probe_copy), ("stream", probe_stream), ("matmul", probe_matmul)):
        progress(f"probe: {name}")
        results[name] = probe(device, dtype)
    return results


def datasheet_for(facts: DeviceFacts, gpu: str | None, notes: list[str]) -> GpuSpec | None:
    """The datasheet spec to compare with: --gpu if given, else the built-in matching the device name."""
    if gpu:
        return load_gpu(gpu)
    if facts.kind != "cuda":
        notes.append("no datasheet for a CPU: predictions use the calibrated (probed) ceilings only")
        return None
    name = match_device_name(facts.name)
    if name is None:
        notes.append(f"no built-in spec matches {facts.name!r}; pass --gpu to compare with a datasheet")
        return None
    return load_gpu(name)


@dataclass
class MeasureOutcome:
    """Everything measured in one session, also when it stopped early."""

    device: dict[str, Any]
    probes: dict[str, Any]
    runs: list[RunReport] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    stopped: str | None = None  # why the session ended early (out of memory, interrupted)
    datasheet: GpuSpec | None = None
    calibrated: GpuSpec | None = None

    def as_dict(self) -> dict[str, Any]:
        """Stable JSON keys."""
        return {
            "device": self.device,
            "probes": {
                "copy_bytes_per_s": self.probes["copy"].value,
                "stream_bytes_per_s": self.probes["stream"].value,
                "matmul_flops_per_s": self.probes["matmul"].value,
                "sizes": {k: v.size for k, v in self.probes.items()},
            },
            "datasheet_gpu": self.datasheet.name if self.datasheet else None,
            "runs": [run_dict(r) for r in self.runs],
            "notes": self.notes,
            "stopped": self.stopped,
        }


def measure(
    spec: ModelSpec,
    *,
    device: str,
    dtype: str,
    batches: list[int],
    prompt_tokens: int,
    output_tokens: int,
    repeats: int,
    mode: str,
    threads: int | None,
    gpu: str | None,
    progress: Callable[[str], None],
) -> MeasureOutcome:
    """Probe the device, run the decode loop at each batch, and compare with the engine."""
    device = resolve_device(device)
    from tokcost.measure.loop import measure_decode

    notes: list[str] = []
    facts = device_facts(device, notes)
    datasheet = datasheet_for(facts, gpu, notes)
    probes = run_probes(device, dtype, progress)
    calibrated = calibrated_spec(facts, probes, dtype, datasheet)
    outcome = MeasureOutcome(
        device={"kind": facts.kind, "name": facts.name, "driver": facts.driver, "torch": facts.torch_version,
                "memory_bytes": facts.memory_bytes, "power_limit_w": facts.power_limit_w, "dtype": dtype,
                "mode": mode, "threads": threads},  # fmt: skip
        probes=probes, notes=notes, datasheet=datasheet, calibrated=calibrated,
    )  # fmt: skip
    for batch in batches:
        progress(f"batch {batch}")
        sampler = _power_sampler(device)
        try:
            loop = measure_decode(
                spec, device=device, dtype=dtype, batch=batch, prompt_tokens=prompt_tokens,
                output_tokens=output_tokens, repeats=repeats, mode=mode, threads=threads,
                on_progress=progress, power_sampler=sampler,
            )  # fmt: skip
        except MeasureError as exc:
            outcome.stopped = (
                f"batch {batch}: {exc}; {_max_batch_hint(spec, calibrated, dtype, prompt_tokens, output_tokens)}"
            )
            break
        except KeyboardInterrupt:
            outcome.stopped = f"interrupted during batch {batch}"
            break
        outcome.device["mode"] = loop.mode
        outcome.device["threads"] = loop.threads
        notes.extend(n for n in loop.notes if n not in notes)
        outcome.runs.append(
            run_report(
                spec, loop, datasheet=datasheet, calibrated=calibrated, copy_bytes_per_s=probes["copy"].value
            )  # fmt: skip
        )
    return outcome


def _max_batch_hint(spec: ModelSpec, gpu: GpuSpec, dtype: str, prompt: int, output: int) -> str:
    """What the engine says fits on this device: the way out of an out-of-memory stop."""
    from tokcost.engine.memory import memory_report
    from tokcost.engine.workload import resolve_precision
    from tokcost.measure.report import workload_of

    wl = workload_of(dtype, 1, prompt, output)
    report = memory_report(spec, gpu, wl, resolve_precision(spec, wl))
    return f"the engine's max batch for {report.capacity_bytes / 1e9:,.1f} GB at this context is {report.max_batch}"


def _power_sampler(device: str) -> Any:
    if device != "cuda":
        return None
    from tokcost.measure.nvml import PowerSampler

    return PowerSampler(0)
