"""`tokcost measure`: run a real decode loop and compare it with the predicted ceilings."""

from __future__ import annotations

import sys
from enum import Enum
from pathlib import Path
from typing import Annotated, Optional

import typer

from tokcost import fmt
from tokcost.cli.common import int_list
from tokcost.cli.options import ForceOpt, ModelOpt, TableFormat, TableFormatOpt
from tokcost.cli.render import Table, print_json, print_tables
from tokcost.errors import FileExistsRefusal, UsageError
from tokcost.models.library import load_model


class Device(str, Enum):
    """Where to run."""

    auto = "auto"
    cuda = "cuda"
    cpu = "cpu"


class Mode(str, Enum):
    """How the decode step runs on CUDA."""

    graph = "graph"
    eager = "eager"
    compile = "compile"


class RunDtype(str, Enum):
    """Dtypes the measured model can be built in."""

    bf16 = "bf16"
    fp16 = "fp16"
    fp32 = "fp32"


DeviceOpt = Annotated[Device, typer.Option("--device", help="auto picks CUDA when torch sees a GPU.")]
RunDtypeOpt = Annotated[RunDtype, typer.Option("--dtype", help="Weights, KV cache and compute dtype.")]


def measure(
    model: ModelOpt,
    gpu: Annotated[
        Optional[str],
        typer.Option("--gpu", "-g", help="Datasheet spec to compare with (default: the built-in matching the device)."),
    ] = None,  # fmt: skip
    device: DeviceOpt = Device.auto,
    batch: Annotated[str, typer.Option("--batch", "-b", help="Batch sizes, comma-separated.")] = "1",
    prompt: Annotated[int, typer.Option("--prompt", "-p", min=1, max=1_000_000, help="Prompt tokens.")] = 512,
    output: Annotated[int, typer.Option("--output", "-o", min=2, max=1_000_000, help="Output tokens (>= 2).")] = 128,
    dtype: RunDtypeOpt = RunDtype.bf16,
    repeats: Annotated[int, typer.Option("--repeats", min=1, max=1000, help="Timed repeats (median).")] = 5,
    mode: Annotated[Mode, typer.Option("--mode", help="graph (CUDA graph), eager or compile.")] = Mode.graph,
    layers: Annotated[Optional[int], typer.Option("--layers", min=1, help="Keep only the first N layers.")] = None,
    threads: Annotated[Optional[int], typer.Option("--threads", min=1, max=1024, help="CPU threads.")] = None,
    save: Annotated[Optional[Path], typer.Option("--save", help="Also write the JSON report here.")] = None,
    force: ForceOpt = False,
    format: TableFormatOpt = TableFormat.table,
) -> None:
    """Time a real decode loop vs predictions. Example: tokcost measure -m llama-3.2-1b --layers 2 --device cpu"""
    from tokcost.measure.session import measure as run_measure

    spec = load_model(model)
    if layers is not None:
        if layers > spec.layers:
            raise UsageError(f"--layers: {spec.name} has {spec.layers} layers; give 1..{spec.layers}")
        spec = spec.truncated(layers)
    if save is not None and save.exists() and not force:
        raise FileExistsRefusal(f"{save}: already exists; pass --force to replace it, or choose another name")
    batches = int_list(batch, "--batch", 1, 100_000)
    from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    with Progress(SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(),
                  transient=True, console=_stderr_console()) as bar:  # fmt: skip
        task = bar.add_task("starting", total=None)
        outcome = run_measure(
            spec, device=device.value, dtype=dtype.value, batches=batches, prompt_tokens=prompt,
            output_tokens=output, repeats=repeats, mode=mode.value, threads=threads, gpu=gpu,
            progress=lambda msg: bar.update(task, description=msg),
        )  # fmt: skip
    data = {"model": spec.name, "layers": spec.layers, **outcome.as_dict()}
    if save is not None:
        from tokcost.cli.render import json_text
        from tokcost.files import write_new

        write_new(save, json_text(data), force=force)
    if format == TableFormat.json:
        print_json(data)
    else:
        print_tables(measure_tables(spec.name, outcome), format.value)
    if outcome.stopped:
        sys.stderr.write(f"stopped early: {outcome.stopped}\n")


def _stderr_console():
    from rich.console import Console

    return Console(file=sys.stderr)


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.0%}"


def _err(x: float | None) -> str:
    return "n/a" if x is None else f"{x:+.0%}"


def measure_tables(model: str, outcome) -> list[Table]:
    """Measured vs predicted per batch, the probes, and notes."""
    d = outcome.device
    runs = Table(
        f"{model} measured on {d['name']} ({d['kind']}, {d['dtype']}, mode {d['mode']}"
        + (f", {d['threads']} threads" if d.get("threads") else "") + ")",
        ["batch", "TTFT", "TPOT", "tokens/s", "TPOT datasheet (err)", "TPOT calibrated (err)", "TTFT calibrated (err)",
         "MBU", "MBU vs copy", "MFU prefill", "J/token"],
    )  # fmt: skip
    for r in outcome.runs:
        ds, cal = r.datasheet, r.calibrated
        runs.rows.append([
            f"{r.batch:,}", fmt.ms(r.ttft_s), fmt.ms(r.tpot_s), f"{r.decode_tokens_per_s:,.1f}",
            f"{fmt.ms(ds.tpot_s)} ({_err(ds.tpot_error)})" if ds else "n/a",
            f"{fmt.ms(cal.tpot_s)} ({_err(cal.tpot_error)})" if cal else "n/a",
            f"{fmt.ms(cal.ttft_s)} ({_err(cal.ttft_error)})" if cal else "n/a",
            _pct(r.mbu), _pct(r.mbu_vs_copy), _pct(r.mfu_prefill), fmt.joules(r.joules_per_output_token),
        ])  # fmt: skip
    p = outcome.probes
    probes = Table("Probes (ceilings measured on this device)", ["probe", "rate", "size"], [
        ["copy (read + write)", fmt.rate_gb_s(p["copy"].value), p["copy"].size],
        ["streaming read (GEMV)", fmt.rate_gb_s(p["stream"].value), p["stream"].size],
        ["matmul", fmt.rate_tflops(p["matmul"].value), p["matmul"].size],
    ])  # fmt: skip
    runs.notes = ["MBU = bytes per decode step (weights + KV read and written) / TPOT / datasheet bandwidth; "
                  "err = (predicted - measured) / measured."] + [f"note: {n}" for n in outcome.notes]  # fmt: skip
    return [runs, probes]
