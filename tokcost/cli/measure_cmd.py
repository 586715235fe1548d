"""`tokcost measure`: run a real decode loop and compare it with the predictions.

The --save destination is checked before any work; each finished batch is written to it at once
(atomically), so an out-of-memory stop, Ctrl-C or a kill keeps what finished. Ctrl-C exits 130 with
one line on stderr; a failed batch exits 2 with one line; neither ever exits 0.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterator
from enum import Enum
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from tokcost import files, fmt
from tokcost.cli.common import int_list
from tokcost.cli.options import ForceOpt, ModelOpt, TableFormat, TableFormatOpt
from tokcost.cli.render import Table, print_json, print_tables
from tokcost.errors import FileExistsRefusal, Interrupted, TokcostError, UsageError
from tokcost.models.library import load_model
from tokcost.models.spec import ModelSpec


class Device(str, Enum):
    """Where to run."""

    auto = "auto"
    cuda = "cuda"
    cpu = "cpu"


class Mode(str, Enum):
    """How the decode step runs: auto = compile on CUDA, eager on the CPU."""

    auto = "auto"
    compile = "compile"
    graph = "graph"
    eager = "eager"


class RunDtype(str, Enum):
    """Dtypes the measured model can be built in."""

    bf16 = "bf16"
    fp16 = "fp16"
    fp32 = "fp32"


DeviceOpt = Annotated[Device, typer.Option("--device", help="auto picks CUDA when torch sees a GPU.")]
RunDtypeOpt = Annotated[RunDtype, typer.Option("--dtype", help="Weights, KV cache and compute dtype.")]
ModeOpt = Annotated[Mode, typer.Option("--mode", help="compile (fused, CUDA default), graph (CUDA graphs) or eager.")]
ThreadsOpt = Annotated[Optional[int], typer.Option("--threads", min=1, max=1024, help="CPU threads (per rank).")]
SaveOpt = Annotated[Optional[Path], typer.Option("--save", help="Also write the JSON report here (after each batch).")]
TpOpt = Annotated[int, typer.Option("--tp", min=1, max=64, help="Tensor-parallel ranks (NCCL on CUDA, gloo on CPU).")]


def check_destination(path: Path, force: bool, flag: str) -> None:
    """Refuse, before any work, a destination that cannot be written (the rule every write follows), naming the flag."""
    try:
        files.check_destination(path, force)
    except FileExistsRefusal as exc:  # a folder, a file that exists: the same refusal, named by its flag
        raise FileExistsRefusal(f"{flag}: {exc}") from None
    except TokcostError as exc:
        raise UsageError(f"{flag}: {exc}") from None


MIN_OUTPUT = 2  # --output's floor: a decode step needs a first token from prefill and one more


def check_context(spec: ModelSpec, prompt: int, output: int) -> None:
    """Refuse, before any work, a prompt and answer past the model's context: the loop would prefill and cache
    every token of them (a 200,000-token prefill of a 4,096-token model runs for minutes, meaning nothing)."""
    if prompt + output <= spec.max_context:
        return
    ctx = spec.max_context
    fixes = [f"--prompt {ctx - output:,} or less" if ctx - output >= 1 else "",
             f"--output {ctx - prompt:,} or less" if ctx - prompt >= MIN_OUTPUT else ""]  # fmt: skip
    fix = " or ".join(f for f in fixes if f)
    fix = (
        f"give {fix}"
        if fix
        else (
            f"give a prompt and output of at most {ctx:,} tokens together (at least 1 + {MIN_OUTPUT})"
            if ctx > MIN_OUTPUT
            else "this model's context holds no answer"
        )
    )
    raise UsageError(f"--prompt: {prompt:,} prompt + {output:,} output tokens exceed {spec.name}'s context of "
                     f"{spec.max_context:,} tokens; {fix}")  # fmt: skip


class Saver:
    """Writes the report to --save after every finished batch; remembers a failure instead of raising."""

    def __init__(self, path: Path | None, force: bool, header: dict[str, Any]) -> None:
        self.path, self.force, self.header = path, force, header
        self.written = 0  # runs in the file
        self.error: str | None = None

    def __call__(self, outcome, *, final: bool = False) -> None:
        """Save the batches finished so far; until the session's end (`final`) the file says it is not complete."""
        if self.path is None or self.error or not outcome.runs:
            return
        from tokcost.cli.render import json_text
        from tokcost.files import write_new

        state = outcome.as_dict() if final else {**outcome.as_dict(), "complete": False}
        try:
            write_new(self.path, json_text({**self.header, **state}), force=self.force or self.written > 0)
            self.written = len(outcome.runs)
        except (OSError, TokcostError) as exc:  # files.open_new words an OSError as a TokcostError naming the path
            said = getattr(exc, "strerror", None) or str(exc).removeprefix(f"{self.path}: ")
            kept = f" (it holds the first {self.written} batch{'es' * (self.written != 1)})" if self.written else ""
            self.error = f"{self.path}: not saved: {said}{kept}"

    def where(self) -> str:
        """Where the finished runs are, for the closing line."""
        if self.error:
            return self.error
        return f"saved in {self.path}" if self.written else "nothing was saved"


def measure(
    model: ModelOpt,
    gpu: Annotated[
        Optional[str],
        typer.Option("--gpu", "-g", help="Datasheet spec to compare with (default: the built-in matching the device)."),
    ] = None,  # fmt: skip
    device: DeviceOpt = Device.auto,
    batch: Annotated[str, typer.Option("--batch", "-b", help="Batch sizes, comma-separated.")] = "1",
    prompt: Annotated[int, typer.Option("--prompt", "-p", min=1, max=1_000_000, help="Prompt tokens.")] = 512,
    output: Annotated[
        int, typer.Option("--output", "-o", min=MIN_OUTPUT, max=1_000_000, help="Output tokens (>= 2).")
    ] = 128,
    dtype: RunDtypeOpt = RunDtype.bf16,
    repeats: Annotated[int, typer.Option("--repeats", min=1, max=1000, help="Timed repeats (median).")] = 5,
    mode: ModeOpt = Mode.auto,
    layers: Annotated[Optional[int], typer.Option("--layers", help="Keep only the first N layers.")] = None,
    threads: ThreadsOpt = None,
    tp: TpOpt = 1,
    save: SaveOpt = None,
    force: ForceOpt = False,
    format: TableFormatOpt = TableFormat.table,
) -> None:  # fmt: skip
    """Time a real decode loop vs predictions. Example: tokcost measure -m llama-3.2-1b --layers 2 --device cpu"""
    from tokcost.measure.session import ignored_on
    from tokcost.measure.session import measure as run_measure

    problem = ignored_on(device.value, mode=mode.value, threads=threads)  # before torch loads (auto: after)
    if problem:
        raise UsageError(problem)
    spec = load_model(model)
    if layers is not None:
        if not 1 <= layers <= spec.layers:  # the range names the model's own depth, which click's min cannot
            raise UsageError(f"--layers: {spec.name} has {spec.layers} layers; give 1..{spec.layers}")
        spec = spec.truncated(layers)
    spec = spec.at_dtype(dtype.value)  # the loop builds every tensor at --dtype, its embedding and LM head included
    batches = int_list(batch, "--batch", 1, 100_000)
    check_context(spec, prompt, output)
    if save is not None:
        check_destination(save, force, "--save")
    elif force:
        raise UsageError("--force: replaces an existing --save file; give it with --save, or drop it")
    saver = Saver(save, force, {"model": spec.name, "layers": spec.layers})
    try:
        with _progress() as progress:
            outcome = run_measure(
                spec, device=device.value, dtype=dtype.value, batches=batches, prompt_tokens=prompt,
                output_tokens=output, repeats=repeats, mode=mode.value, threads=threads, gpu=gpu, tp=tp,
                progress=progress, on_update=saver,
            )  # fmt: skip
    except KeyboardInterrupt:  # before the session could catch it (loading, the memory check)
        raise Interrupted("interrupted before the first batch finished: nothing was saved") from None
    from tokcost.measure.parallel import torchrun_rank

    if (torchrun_rank() or (0, 1))[0] != 0:
        return  # under torchrun, rank 0 reports
    saver(outcome, final=True)  # the final state (stopped, notes) of a run that already saved its batches
    if format == TableFormat.json:
        print_json({"model": spec.name, "layers": spec.layers, **outcome.as_dict()})
    elif outcome.runs or not outcome.stopped:
        print_tables(measure_tables(spec.name, outcome), format.value)
    _finish(outcome, saver)


def _finish(outcome, saver: Saver) -> None:
    """One closing line on stderr and the exit code: 0 complete, 130 interrupted, 2 stopped by an error."""
    if outcome.stopped is None:
        if saver.error:
            sys.stderr.write(f"error: {saver.error}\n")
            raise typer.Exit(2)
        return
    n = len(outcome.runs)
    kept = f"kept {n} finished batch{'es' if n != 1 else ''} ({saver.where()})" if n else "no batch finished"
    if outcome.stopped["kind"] == "interrupted":
        raise Interrupted(f"{outcome.stopped['message']}: {kept}")
    sys.stderr.write(f"error: {outcome.stopped['message']}; {kept}\n")
    raise typer.Exit(2)


@contextlib.contextmanager
def _progress() -> Iterator[Callable[[str], None]]:
    """A transient spinner on a terminal's stderr; nothing at all when stderr is a file or a pipe."""
    if not sys.stderr.isatty():
        yield lambda _msg: None
        return
    from rich.console import Console
    from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    with Progress(SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(), transient=True,
                  console=Console(file=sys.stderr)) as bar:  # fmt: skip
        task = bar.add_task("starting", total=None)
        yield lambda msg: bar.update(task, description=msg)


def _pct(x: float | None) -> str:
    """A share as a percentage: whole above 10%, two significant digits below (a CPU's MBU of 0.32% is not 0%)."""
    if x is None:
        return "n/a"
    return f"{x:.0%}" if abs(x) >= 0.1 else f"{x * 100:.2g}%"


def _err(x: float | None, noisy: bool) -> str:
    if noisy:
        return "noisy"
    return "n/a" if x is None else f"{x:+.0%}"


def _rest(seconds: float) -> str:
    """TPOT less the measured collectives: below zero only when timing noise exceeds the rest (never printed)."""
    return fmt.ms(seconds) if seconds >= 0 else "noisy (< 0)"


def _pred(p, noisy: bool) -> str:
    return f"{fmt.ms(p.tpot_s)} ({_err(p.tpot_error, noisy)})" if p else "n/a"


def measure_tables(model: str, outcome) -> list[Table]:
    """Measured vs predicted per batch, bytes the loop read vs the engine's, TP terms, probes, notes."""
    d = outcome.device
    threads = f", {d['threads']} thread{'s' if d['threads'] != 1 else ''}" if d.get("threads") else ""
    runs = Table(
        f"{model} measured on {d['name']} ({d['kind']}, {d['dtype']}, mode {d['mode']}"
        + threads + (f", TP {d['tp']}" if d.get("tp", 1) > 1 else "")
        + ")",
        ["batch", "TTFT", "TPOT median [IQR]", "step CV", "tokens/s", "TPOT datasheet (err)", "TPOT expected (err)",
         "TPOT calibrated (err)", "MBU", "MBU of copy", "MFU prefill", "J/token"],
        answer=("TPOT calibrated (err)", "MBU of copy"),  # what a narrow terminal keeps longest: the device's own
    )  # fmt: skip
    reads = Table("Bytes per decode step: what the loop read vs what the engine expects (per device)",
                  ["batch", "weights (loop)", "weights (engine)", "KV read (loop)", "KV read (engine)",
                   "experts/layer: loop (engine)", "step overhead", "loop stream rate"])  # fmt: skip
    terms = Table("Tensor-parallel decode step by term (calibrated prediction vs measured)",
                  ["batch", "weights", "attention", "communication", "overhead", "all-reduce measured",
                   "all-reduce share", "rest predicted", "rest measured"])  # fmt: skip
    for r in outcome.runs:
        lp, noisy = r.loop, r.noisy
        runs.rows.append([
            f"{lp.batch:,}", fmt.ms(lp.ttft_s), f"{fmt.ms(lp.tpot_s)} [{fmt.ms(lp.tpot.iqr)}]", f"{lp.step.cv:.1%}",
            f"{lp.decode_tokens_per_s:,.1f}", _pred(r.datasheet, noisy), _pred(r.datasheet_expected, noisy),
            _pred(r.calibrated, noisy), _pct(r.mbu), _pct(r.mbu_vs_copy), _pct(r.mfu_prefill),
            fmt.joules(lp.joules_per_output_token),
        ])  # fmt: skip
        cal = r.calibration
        reads.rows.append([
            f"{lp.batch:,}", *(fmt.si(b, "B") for b in (lp.weight_read_bytes, r.engine_bytes["weights"],
                                                         lp.kv_read_bytes, r.engine_bytes["kv_read"])),
            "n/a" if lp.experts_per_layer is None
            else f"{lp.experts_per_layer:.2f} ({r.engine_bytes['experts_per_layer']:.2f})",
            fmt.ms(cal["step_overhead_s"]) if cal else "n/a",
            fmt.rate_gb_s(cal["stream_bytes_per_s"]) if cal else "n/a",
        ])  # fmt: skip
        if lp.tp > 1 and r.calibrated:
            t, c = r.calibrated.terms, lp.collective_s_per_step
            terms.rows.append([
                f"{lp.batch:,}", fmt.ms(t["weights"]), fmt.ms(t["attention"]), fmt.ms(t["communication"]),
                fmt.ms(t["overhead"]), fmt.ms(c["all_reduce"]) if c else "n/a",
                _pct(c["all_reduce"] / lp.tpot_s) if c else "n/a",
                fmt.ms(t["weights"] + t["attention"] + t["overhead"]),
                _rest(lp.tpot_s - sum(c.values())) if c else "n/a",
            ])  # fmt: skip
    datasheet = any(r.datasheet is not None for r in outcome.runs)
    if not datasheet:  # a CPU, or a GPU no spec matches: those columns would be n/a in every row
        _drop_columns(runs, ("TPOT datasheet (err)", "TPOT expected (err)", "MBU"))
    runs.notes = (
        [
            "err = (predicted - measured) / measured; 'noisy' where the step times' CV exceeds 10% (no error printed). "
            + ("MBU = bytes the loop read per step / TPOT / datasheet bandwidth; " if datasheet else "")
            + "MBU of copy = the same over the copy probe's rate (above 100%: the loop streamed faster than the probe "
            "read, a noisy probe on a shared host)."
        ]
        + [_expected_note(outcome.runs[0].expected_engine)] * bool(outcome.runs and datasheet)
        + [f"note: {n}" for n in outcome.notes]
    )
    tables = [runs, reads]
    if terms.rows:
        terms.notes = [
            "all-reduce measured: wall time inside the loop's all-reduce calls per step (eager CPU runs); "
            "rest measured: TPOT less all collectives (the loop all-gathers each rank's argmax, where the engine "
            "prices a serving engine's gather of the logits)."
        ]
        tables.append(terms)
    p = outcome.probes
    if p:
        tables.append(Table("Probes (ceilings measured on this device)", ["probe", "rate", "size"], [
            ["copy (read + write)", fmt.rate_gb_s(p["copy"].value), p["copy"].size],
            ["streaming read (GEMV)", fmt.rate_gb_s(p["stream"].value), p["stream"].size],
            ["matmul", fmt.rate_tflops(p["matmul"].value), p["matmul"].size],
        ]))  # fmt: skip
    if outcome.link:
        link = outcome.link
        rows = [[f"{r['bytes']:,}", fmt.ms(r["seconds"]), f"{r['bus_gb_s']:,.3f}"] for r in link["sizes"]]
        tables.append(Table(f"All-reduce probe: {link['summary']}", ["bytes", "time", "bus GB/s"], rows))
    return tables


def _drop_columns(table: Table, names: tuple[str, ...]) -> None:
    """Leave `names` out of a table, its rows' cells with them."""
    keep = [i for i, c in enumerate(table.columns) if c not in names]
    table.columns = [table.columns[i] for i in keep]
    table.rows = [[row[i] for i in keep] for row in table.rows]


def _expected_note(engine: str) -> str:
    """Which engine profile the 'expected' column prices the datasheet spec with."""
    if engine == "generic":
        return "expected = the datasheet under the hardware alone (engine generic: no profile describes this mode)"
    return f"expected = the datasheet under the {engine} engine profile (this loop's kind, fitted on published rows)"
