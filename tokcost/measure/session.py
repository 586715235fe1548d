"""One `tokcost measure` session: device, memory check, probes, a loop and its calibration per batch.

torch is imported lazily. A session keeps every batch it finished: an out-of-memory error or Ctrl-C
ends it with `stopped` set (and on_update has already seen each finished run), never with a traceback.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tokcost.errors import MeasureError, UsageError
from tokcost.hardware.library import load_gpu, match_device_name
from tokcost.hardware.spec import GpuSpec
from tokcost.measure.buildable import check_buildable
from tokcost.measure.calibrate import (
    DeviceFacts,
    measured_link,
    skeleton,
    spec_from_rates,
    step_overhead,
    stream_label,
)
from tokcost.measure.report import RunReport, loop_profile, memory_fit, run_dict, run_report
from tokcost.models.spec import ModelSpec

INSTALL_HINT = (
    "install the measure extra from a tokcost checkout: pip install -e '.[measure]' (torch, nvidia-ml-py; on a "
    "CPU-only machine install torch's CPU build first, as scripts/test.sh does)"
)


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


def resolve_device(device: str, *, mode: str = "auto", threads: int | None = None) -> str:
    """auto -> cuda when torch sees a GPU, else cpu; cuda without one is an error, and so is a flag the device
    would ignore (CUDA graphs on the CPU, CPU threads on a GPU), before any work."""
    torch = import_torch()
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    elif device == "cuda" and not torch.cuda.is_available():
        raise MeasureError(
            f"--device cuda: torch {torch.__version__} sees no CUDA device (a CPU-only build, or no driver); "
            "use --device cpu, or a CUDA build of torch"
        )
    problem = ignored_on(device, mode=mode, threads=threads)
    if problem:
        raise MeasureError(problem)
    return device


def ignored_on(device: str, *, mode: str = "auto", threads: int | None = None) -> str | None:
    """Why a flag would be ignored on `device` (cpu or cuda; auto decides nothing yet), or None: the CLI asks
    before loading anything, resolve_device again once auto has chosen."""
    if device == "cpu" and mode == "graph":
        return "--mode graph: CUDA graphs need a CUDA device and this run is on the CPU; give --mode eager or compile"
    if device == "cuda" and threads is not None:
        return "--threads: sets the CPU's threads and this run is on CUDA; drop it, or give --device cpu"
    return None


def device_facts(device: str, notes: list[str]) -> DeviceFacts:
    """Name, runtime memory, UUID and power limit of the device torch uses (NVML found by UUID)."""
    torch = import_torch()
    from tokcost.measure.faults import host_total_bytes
    from tokcost.measure.loop import device_name

    if device == "cuda":
        from tokcost.measure.nvml import device_info

        index = torch.cuda.current_device()
        props = torch.cuda.get_device_properties(index)
        uuid = str(getattr(props, "uuid", "")) or None
        info = device_info(index, notes, uuid=uuid)
        return DeviceFacts(kind="cuda", name=info.name if info else props.name,
                           memory_bytes=float(torch.cuda.mem_get_info(index)[1]),
                           power_limit_w=info.power_limit_w if info else None,
                           driver=info.driver_version if info else "unknown", torch_version=torch.__version__,
                           uuid=uuid, platform="rocm" if torch.version.hip else "cuda")  # fmt: skip
    notes.append("CPU run: NVML energy and J/token are GPU-only")
    name = device_name(torch.device("cpu"))
    return DeviceFacts("cpu", name, host_total_bytes() or 1e9, None, "n/a", torch.__version__)


def run_probes(device: str, dtype: str, progress: Callable[[str], None]) -> dict[str, Any]:
    """Copy, streaming-read and matmul probes on `device` in `dtype` (the device's reference ceilings)."""
    from tokcost.measure.probes import probe_copy, probe_matmul, probe_stream

    results = {}
    for name, probe in (("copy", probe_copy), ("stream", probe_stream), ("matmul", probe_matmul)):
        progress(f"probe: {name}")
        results[name] = probe(device, dtype)
    return results


def datasheet_for(facts: DeviceFacts, gpu: str | None, notes: list[str]) -> GpuSpec | None:
    """The datasheet spec to compare with: --gpu if given, else the built-in matching the device name (a CPU has no
    GPU datasheet: its shares of one would read as a stalled run)."""
    if gpu and facts.kind != "cuda":
        raise UsageError(f"--gpu: a run on the CPU takes no GPU datasheet (got {gpu!r:.60}); drop --gpu (a CPU run "
                         "is compared with the rates its own probes measure)")  # fmt: skip
    if gpu:
        return load_gpu(gpu)
    if facts.kind != "cuda":
        notes.append("no datasheet for a CPU: predictions use the calibrated (measured) rates only")
        return None
    name = match_device_name(facts.name)
    if name is None:
        notes.append(f"no built-in spec matches {facts.name!r}; pass --gpu to compare with a datasheet")
        return None
    return load_gpu(name)


def check_memory(spec: ModelSpec, dtype: str, batches: list[int], prompt: int, output: int, tp: int,
                 device: str) -> None:  # fmt: skip
    """Refuse, before anything is allocated, a batch the engine says will not fit in free memory."""
    torch = import_torch()
    from tokcost.measure.faults import free_bytes

    free = free_bytes(torch.device(device))
    if free is None:
        return
    share = free / tp if device == "cpu" else free  # CPU ranks share the host's memory
    for batch in sorted(batches, reverse=True):
        fit = memory_fit(spec, dtype, batch, prompt, output, tp, share)
        if not fit["fits"]:
            where = "host RAM available" if device == "cpu" else "free on the GPU"
            raise MeasureError(
                f"--batch {batch}: {spec.name} ({spec.layers} layers, {dtype}) needs about "
                f"{fit['need_bytes'] / 1e9:,.2f} GB per {'rank' if tp > 1 else 'device'} "
                f"(weights, KV cache, workspace, 10% reserve) and {free / 1e9:,.2f} GB"
                f" is {where}; the largest batch that fits is {fit['max_batch']}"
                + _layers_hint(fit["max_layers"], spec.layers)
            )


@dataclass
class MeasureOutcome:
    """Everything measured in one session, also when it stopped early."""

    device: dict[str, Any]
    probes: dict[str, Any] = field(default_factory=dict)
    runs: list[RunReport] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    stopped: dict[str, str] | None = None  # {"kind": interrupted | out_of_memory | error, "message": ...}
    link: dict[str, Any] | None = None  # the all-reduce probe (TP)
    datasheet: GpuSpec | None = None
    batch: int | None = None  # the batch running now

    def stop(self, kind: str, message: str) -> None:
        """Record why the session ended early (the first reason wins)."""
        if self.stopped is None:
            self.stopped = {"kind": kind, "message": message}

    def as_dict(self) -> dict[str, Any]:
        """Stable JSON keys."""
        p = self.probes
        return {
            "device": self.device,
            "probes": {
                "copy_bytes_per_s": p["copy"].value,
                "stream_bytes_per_s": p["stream"].value,
                "matmul_flops_per_s": p["matmul"].value,
                "sizes": {k: v.size for k, v in p.items()},
            }
            if p
            else None,  # fmt: skip
            "allreduce": self.link,
            "datasheet_gpu": self.datasheet.name if self.datasheet else None,
            "runs": [run_dict(r) for r in self.runs],
            "notes": self.notes,
            "complete": self.stopped is None,
            "stopped": self.stopped,
        }


def measure_batch(spec: ModelSpec, job: Any, batch: int, *, shard: Any = None, threads: int | None = None,
                  energy: Any = None, progress: Callable[[str], None] | None = None) -> tuple[Any, Any]:  # fmt: skip
    """The loop at one batch (with its own linears probed), then its skeleton for the step overhead."""
    from tokcost.measure.loop import measure_decode
    from tokcost.measure.shard import Shard

    shard = shard or Shard()
    common = {"device": job.device, "dtype": job.dtype, "batch": batch, "prompt_tokens": job.prompt_tokens,
              "output_tokens": job.output_tokens, "repeats": job.repeats, "mode": job.mode,
              "threads": threads if threads is not None else job.threads, "on_progress": progress}  # fmt: skip
    loop = measure_decode(spec, shard=shard, energy=energy, calibrate=True, **common)
    if progress:
        progress(f"batch {batch}: skeleton ({spec.layers} layers, near-zero width) for the step overhead")
    overhead = measure_decode(
        skeleton(spec, shard.world), shard=Shard(shard.rank, shard.world, skip=True), flush_like=spec, **common
    )
    return loop, overhead


def calibration_of(facts: DeviceFacts, loop: Any, overhead: Any, link: dict[str, Any] | None,
                   datasheet: GpuSpec | None, notes: list[str],
                   probes: dict[str, Any] | None = None) -> tuple[GpuSpec | None, dict[str, Any]]:  # fmt: skip
    """The spec this loop's own measurements give (the device's probes as its sustained block), and the figures."""
    stream, compute = loop.loop_rates["stream"], loop.loop_rates["compute"]
    step_s, how = step_overhead(overhead)
    provenance = {
        "step_overhead_us": how,
        "bandwidth": f"the model's {stream_label(stream)} at M = {stream['rows']}: "
        f"{stream['bytes'] / 1e6:,.1f} MB "
                     f"in {(stream['seconds'] - stream['call_seconds']) * 1e3:,.3f} ms net of per-call cost",
        "peak_tflops": f"one block's {compute['matrices']} linears at M = {compute['rows']} rows, net of per-call cost",
    }  # fmt: skip
    try:
        spec: GpuSpec | None = spec_from_rates(
            facts, loop.dtype, bytes_per_s=stream["bytes_per_s"], flops_per_s=compute["flops_per_s"],
            step_overhead_s=step_s, provenance=provenance, base=datasheet, probes=probes, gemm_rows=compute["rows"],
            link=measured_link(link, datasheet) if link else None, name=f"{facts.kind}-loop-calibrated",
        )  # fmt: skip
    except MeasureError as exc:  # a stalled measurement (under 1 MB/s, or 1% of the device's own rate)
        spec = None
        notes.append(f"batch {loop.batch}: no calibrated prediction: {exc}")
    figures = {"step_overhead_s": step_s, "skeleton_tpot": overhead.tpot.as_dict(),
               "skeleton_flush_s": overhead.flush_s_per_step,
               "stream_bytes_per_s": stream["bytes_per_s"], "compute_flops_per_s": compute["flops_per_s"],
               "stream": stream, "compute": compute,
               "link": {"gb_s": spec.link.gb_s, "latency_us": spec.link.latency_us} if spec and spec.link and link
               else None}  # fmt: skip
    return spec, figures


def measure(
    spec: ModelSpec, *, device: str, dtype: str, batches: list[int], prompt_tokens: int, output_tokens: int,
    repeats: int, mode: str, threads: int | None, gpu: str | None, progress: Callable[[str], None],
    tp: int = 1, on_update: Callable[[MeasureOutcome], None] | None = None,
) -> MeasureOutcome:  # fmt: skip
    """Check memory, probe the device, run the loop and its calibration at each batch, compare with the engine."""
    from tokcost.measure.parallel import TpJob

    check_buildable(spec)  # before torch loads
    device = resolve_device(device, mode=mode, threads=threads)
    if device == "cuda" and os.environ.get("LOCAL_RANK"):  # a torchrun rank probes and reports its own GPU
        import_torch().cuda.set_device(int(os.environ["LOCAL_RANK"]))
    notes: list[str] = []
    facts = device_facts(device, notes)
    datasheet = datasheet_for(facts, gpu, notes)
    check_memory(spec, dtype, batches, prompt_tokens, output_tokens, tp, device)
    outcome = MeasureOutcome(
        device={"kind": facts.kind, "name": facts.name, "uuid": facts.uuid, "driver": facts.driver,
                "torch": facts.torch_version, "memory_bytes": facts.memory_bytes, "power_limit_w": facts.power_limit_w,
                "dtype": dtype, "mode": mode, "threads": threads, "tp": tp},
        notes=notes, datasheet=datasheet,
    )  # fmt: skip
    job = TpJob(spec, device, dtype, batches, prompt_tokens, output_tokens, repeats, mode, threads)

    def take(kind: str, payload: Any) -> None:
        if kind == "link":
            outcome.link = payload
        elif kind == "run":
            loop, overhead = payload
            calibrated, figures = calibration_of(facts, loop, overhead, outcome.link, datasheet, outcome.notes,
                                                 outcome.probes or None)  # fmt: skip
            outcome.device.update(mode=loop.mode, threads=loop.threads)
            outcome.notes.extend(n for n in loop.notes if n not in outcome.notes)
            copy = outcome.probes["copy"].value if outcome.probes else None
            engine = loop_profile(loop.mode, facts.kind != "cpu")
            outcome.runs.append(run_report(spec, loop, datasheet=datasheet, calibrated=calibrated,
                                           copy_bytes_per_s=copy, calibration=figures,
                                           expected_engine=engine))  # fmt: skip
            if on_update:
                on_update(outcome)
        elif kind in ("oom", "error"):
            outcome.stop("out_of_memory" if kind == "oom" else "error", _with_hint(payload, kind, outcome, spec, job))

    try:
        outcome.probes = run_probes(device, dtype, progress)
        if tp > 1:
            _run_parallel(job, tp, take, outcome, progress)
        else:
            for batch in batches:
                outcome.batch = batch
                progress(f"batch {batch}")
                take("run", measure_batch(spec, job, batch, energy=_energy_meter(facts), progress=progress))
    except KeyboardInterrupt:
        where = f"during batch {outcome.batch}" if outcome.batch else "before the first batch"
        outcome.stop("interrupted", f"interrupted {where}")
    except MeasureError as exc:
        from tokcost.measure.faults import OutOfMemory

        if not outcome.runs and not isinstance(exc, OutOfMemory):
            raise
        take("oom" if isinstance(exc, OutOfMemory) else "error", str(exc))
    except Exception as exc:  # torch failing mid-run (a kernel, the compiler): one line, the finished runs kept
        from tokcost.measure.faults import first_line

        where = f"batch {outcome.batch}" if outcome.batch else "before the first batch"
        take("error", f"{where}: {type(exc).__name__}: {first_line(exc)}")
    return outcome


def _run_parallel(job: Any, tp: int, take: Callable[[str, Any], None], outcome: MeasureOutcome,
                  progress: Callable[[str], None]) -> None:  # fmt: skip
    from tokcost.measure.parallel import run_ranks, run_torchrun_rank, torchrun_rank

    def track(kind: str, payload: Any) -> None:
        if kind == "run":
            done = len(outcome.runs) + 1
            outcome.batch = job.batches[done] if done < len(job.batches) else None
        take(kind, payload)
        progress(f"tp {tp}: {len(outcome.runs)} of {len(job.batches)} batches done")

    outcome.batch = job.batches[0]
    launched = torchrun_rank()
    if launched:
        if launched[1] != tp:
            raise MeasureError(f"--tp {tp}: torchrun started {launched[1]} ranks; pass --tp {launched[1]}")
        run_torchrun_rank(job, track)
    else:
        run_ranks(job, tp, track)


def _with_hint(message: str, kind: str, outcome: MeasureOutcome, spec: ModelSpec, job: Any) -> str:
    """An out-of-memory stop names what fits: the engine's max batch for the free memory, and --layers."""
    if kind != "oom":
        return message
    torch = import_torch()
    from tokcost.measure.faults import free_bytes, release

    release()
    free = free_bytes(torch.device(job.device))
    if free is None:
        return message
    tp = outcome.device.get("tp", 1)
    batch = outcome.batch or job.batches[0]
    fit = memory_fit(
        spec, job.dtype, batch, job.prompt_tokens, job.output_tokens, tp, free / tp if job.device == "cpu" else free
    )
    return f"{message}; for {free / 1e9:,.2f} GB free the engine's max batch is {fit['max_batch']}" + _layers_hint(
        fit["max_layers"], spec.layers
    )


def _layers_hint(max_layers: int, layers: int) -> str:
    """How many layers fit at batch 1, when that is fewer than the model has."""
    if max_layers == 0:
        return "; not even one layer fits at batch 1"
    return f", or measure fewer layers (--layers {max_layers} fits at batch 1)" if max_layers < layers else ""


def _energy_meter(facts: DeviceFacts) -> Any:
    if facts.kind != "cuda":
        return None
    from tokcost.measure.nvml import EnergyMeter

    return EnergyMeter(uuid=facts.uuid)
