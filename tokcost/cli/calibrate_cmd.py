"""`tokcost calibrate`: measure what this device's decode loop achieves and write it as a GPU spec."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Optional

import typer

from tokcost import fmt
from tokcost.cli.common import check_yaml_destination
from tokcost.cli.measure_cmd import Device, DeviceOpt, RunDtype, RunDtypeOpt, TpOpt, check_destination
from tokcost.cli.options import ForceOpt, dash_is_stdout
from tokcost.engine.layout import Layout, layout_problem
from tokcost.errors import Interrupted, UsageError
from tokcost.files import write_new
from tokcost.models.library import load_model

ModelShapesOpt = Annotated[str, typer.Option("--model", "-m", help="Model whose shapes and depth the probes use.")]


def calibrate(
    device: DeviceOpt = Device.auto,
    dtype: RunDtypeOpt = RunDtype.bf16,
    out: Annotated[
        Optional[Path],
        typer.Option("--out", "-o", help="Write the spec here (default, or -: stdout).", callback=dash_is_stdout),
    ] = None,
    gpu: Annotated[
        Optional[str],
        typer.Option("--gpu", "-g", help="Built-in spec to start from (default: the one matching the device)."),
    ] = None,  # fmt: skip
    model: ModelShapesOpt = "llama-3.1-8b",
    batch: Annotated[int, typer.Option("--batch", "-b", min=1, max=100_000, help="Decode batch of the probes.")] = 1,
    threads: Annotated[Optional[int], typer.Option("--threads", min=1, max=1024, help="CPU threads.")] = None,
    tp: TpOpt = 1,
    force: ForceOpt = False,
) -> None:  # fmt: skip
    """Measure the loop's step overhead, stream and GEMM rates as a GPU spec. Example: tokcost calibrate -o gpu.yaml"""
    from tokcost.measure.session import ignored_on

    problem = ignored_on(device.value, threads=threads)  # before torch loads (auto: once it has chosen)
    if problem:
        raise UsageError(problem)
    if out is not None:
        check_yaml_destination(out, "--out")
        check_destination(out, force, "--out")
    elif force:
        raise UsageError("--force: replaces an existing --out file; give it with --out, or drop it")
    spec = load_model(model)
    from tokcost.measure.buildable import check_buildable

    check_buildable(spec)  # the skeleton is the torch decoder's: a model it cannot build is not calibrated as another
    tp_problem = layout_problem(spec, Layout(tp=tp)) if tp > 1 else None  # the degrees measure --tp takes
    if tp_problem:
        raise UsageError(tp_problem)

    def recheck() -> None:  # once the specs are read: a --out that names one is refused before minutes of probes
        if out is not None:
            check_destination(out, force, "--out")

    recheck()  # the model is read: before torch loads (seconds); _calibrate checks again once the datasheet is
    try:
        text, summary = _calibrate(spec, device.value, dtype.value, gpu, batch, threads, tp, recheck)
    except KeyboardInterrupt:
        raise Interrupted("interrupted: calibration not finished, nothing was written") from None
    if out is None:
        sys.stdout.write(text)
        return
    write_new(out, text, force=force)  # a write that fails says so in one line naming the path (files.open_new)
    sys.stdout.write(f"wrote {out}: {summary}\nuse it anywhere a GPU is accepted: tokcost estimate -m MODEL -g {out} "
                     "(the hardware alone, at its copy and GEMM rates; tokcost measure's calibrated prediction adds "
                     "this loop's stream share and step overhead)\n")  # fmt: skip


def _calibrate(spec, device: str, dtype: str, gpu: str | None, batch: int, threads: int | None, tp: int,
               recheck: Callable[[], None]):  # fmt: skip
    """Probe, time the skeleton, and build the spec's YAML and a one-line summary (`recheck`: the destination,
    once the datasheet is read, before any probe)."""
    from tokcost.measure.calibrate import (
        measured_link,
        skeleton,
        spec_from_rates,
        spec_yaml,
        step_overhead,
        stream_label,
    )
    from tokcost.measure.loop import measure_decode
    from tokcost.measure.session import (
        check_memory,
        datasheet_for,
        device_facts,
        import_torch,
        resolve_device,
        run_probes,
    )
    from tokcost.measure.stats import NOISY_CV

    def say(msg: str) -> None:
        sys.stderr.write(f"{msg}\n")

    resolved = resolve_device(device, threads=threads)
    # the skeleton's decode holds the batch's KV at 512 + 32 tokens: a batch memory cannot hold is refused before
    # any probe, as measure refuses it (a CPU swapped for minutes towards an out-of-memory kill)
    check_memory(skeleton(spec), dtype, [batch], 512, 32, 1, resolved)
    torch = import_torch()
    previous = torch.get_num_threads()
    if threads:
        torch.set_num_threads(threads)
    notes: list[str] = []
    facts = device_facts(resolved, notes)
    base = datasheet_for(facts, gpu, notes)
    recheck()
    link = _link_probe(spec, resolved, dtype, batch, threads, tp, say) if tp > 1 else None
    try:
        from tokcost.measure.probes import calibrate_rates

        reference = run_probes(resolved, dtype, say)
        say(f"probe: {spec.name}'s linears at M = {batch}, and its prefill GEMMs")
        rates = calibrate_rates(spec, resolved, dtype, batch, 512)
        say(f"skeleton: {spec.layers} layers at near-zero width, batch {batch}")
        overhead = measure_decode(skeleton(spec), device=resolved, dtype=dtype, batch=batch, prompt_tokens=512,
                                  output_tokens=32, repeats=3, mode="auto", threads=threads,
                                  flush_like=spec)  # fmt: skip
    finally:
        torch.set_num_threads(previous)
    stream, compute = rates["stream"], rates["compute"]
    step_s, how = step_overhead(overhead)
    if overhead.step.noisy:  # a busy machine (other jobs, more threads than cores): the overhead is contention's
        spread = f"the skeleton's steps varied {overhead.step.cv:.0%} (coefficient of variation, over {NOISY_CV:.0%})"
        how += f"; NOISY: {spread}, so this overhead may be the machine's load"
        say(f"warning: {spread}: the step overhead written may be the machine's load; rerun on an idle machine "
            "(or with fewer --threads)")  # fmt: skip
    cache = rates["cache_bytes"]
    provenance = {
        "step_overhead_us": f"{spec.name}: {how}",
        "bandwidth": f"{stream_label(stream)} with {spec.name}'s shapes at M = {batch} "
                     f"({stream['bytes'] / 2**20:,.0f} MiB, >= {8} x the {_size(cache)} last-level cache), "
                     f"net of the same calls at near-zero width",
        "peak_tflops": f"{spec.name}'s per-layer linears at M = {compute['rows']} rows (the prefill's GEMMs)",
        "copy_bandwidth": f"device copy of {reference['copy'].size}: {reference['copy'].value / 1e9:,.1f} GB/s",
        "gemv_bandwidth": f"GEMV {reference['stream'].size}: {reference['stream'].value / 1e9:,.1f} GB/s",
        "square_gemm": f"{reference['matmul'].size}: {reference['matmul'].value / 1e12:,.3f} TFLOP/s",
        "threads": str(overhead.threads) if overhead.threads else "n/a (GPU)",
        "memory_runtime_mib": "total memory the runtime reports (torch.cuda.mem_get_info; MemTotal on a CPU)",
    }  # fmt: skip
    if link:
        provenance["link"] = link["summary"]
    calibrated = spec_from_rates(facts, dtype, bytes_per_s=stream["bytes_per_s"], flops_per_s=compute["flops_per_s"],
                                 step_overhead_s=step_s, provenance=provenance, base=base, probes=reference,
                                 link=measured_link(link, base) if link else None,
                                 gemm_rows=compute["rows"])  # fmt: skip
    return spec_yaml(calibrated), _summary(calibrated, dtype, stream["bytes_per_s"], compute["flops_per_s"], base)


def _summary(spec, dtype: str, stream_bytes_per_s: float, flops_per_s: float, base) -> str:
    """One line: the loop's rates, the sustained shares the probes found, the step overhead, the link."""
    copy = spec.sustained.copy_bandwidth.fraction if spec.sustained else None
    gemm = spec.sustained.gemm_for(dtype) if spec.sustained else None
    over = f"of {base.name}'s datasheet" if base else "of the largest rates measured (no datasheet)"
    link = spec.link if spec.link and "measured" in spec.link.name else None
    return (f"{spec.name}, {fmt.rate_gb_s(stream_bytes_per_s)} loop stream, {flops_per_s / 1e12:,.3f} TFLOP/s "
            f"{dtype}, step overhead {spec.achievable.step_overhead_us:,.1f} us"
            + (f"; sustained copy {copy:.2f}, GEMM {gemm.fraction:.2f} {over}" if copy and gemm else "")
            + (f", link {link.gb_s:,.2f} GB/s + {link.latency_us:,.1f} us" if link else ""))  # fmt: skip


def _link_probe(spec, device: str, dtype: str, batch: int, threads: int | None, tp: int, say) -> dict:
    """The all-reduce probe over `tp` spawned ranks."""
    from tokcost.errors import MeasureError
    from tokcost.measure.parallel import TpJob, run_ranks

    say(f"probe: all-reduce over {tp} ranks")
    got: dict = {}

    def take(kind: str, payload) -> None:
        if kind in ("oom", "error"):
            raise MeasureError(payload)
        got[kind] = payload

    run_ranks(TpJob(spec, device, dtype, [batch], 1, 2, 1, "eager", threads, probe_only=True), tp, take)
    return got["link"]


def _size(nbytes: int | None) -> str:
    return "unknown" if nbytes is None else f"{nbytes / 2**20:,.0f} MiB"
