"""Options shared by several commands, declared once as Annotated aliases."""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Annotated, Optional

import typer

from tokcost.units import COMPUTE_DTYPES


def _check_plot(ctx: typer.Context, path: Path | None) -> Path | None:
    """--plot's check before any work (tokcost.plots.canvas.check_path), loaded only when a plot is asked for; an
    existing file is replaced only with --force (eager, so read here before this runs)."""
    if path is None:
        return None
    from tokcost.plots.canvas import check_path

    return check_path(path, force=bool(ctx.params.get("force")))


class Format(str, Enum):
    """Output renderings of one result."""

    table = "table"
    markdown = "markdown"
    json = "json"
    csv = "csv"


class TableFormat(str, Enum):
    """Renderings for commands without a CSV form."""

    table = "table"
    markdown = "markdown"
    json = "json"


# Matmul dtypes a GPU may list a dense peak for: the one list (tokcost.units), as click's choices
ComputeDtype = Enum("ComputeDtype", {dtype: dtype for dtype in COMPUTE_DTYPES}, type=str)  # type: ignore[misc]


ModelOpt = Annotated[str, typer.Option("--model", "-m", help="Built-in model name, a model YAML, or a HF config.json.")]
GpuOpt = Annotated[str, typer.Option("--gpu", "-g", help="Built-in GPU name or a GPU YAML (e.g. from calibrate).")]
GpusOpt = Annotated[
    Optional[int],
    typer.Option("--gpus", help="GPUs per replica (tp x pp x dp); without --tp, TP is what --pp and --dp leave."),
]
TpOpt = Annotated[Optional[int], typer.Option("--tp", help="Tensor-parallel degree (divides the attention heads).")]
PpOpt = Annotated[int, typer.Option("--pp", help="Pipeline stages (contiguous layer ranges).")]
EpOpt = Annotated[int, typer.Option("--ep", help="Expert-parallel degree over a stage's tp x dp GPUs (MoE).")]
DpOpt = Annotated[int, typer.Option("--dp", help="Data-parallel attention replicas inside the expert group (MoE).")]
RedundantOpt = Annotated[
    int,
    typer.Option(
        "--redundant-experts", help="Expert copies spread with the experts over the EP ranks (EPLB; MoE, --ep > 1)."
    ),
]
GpusPerNodeOpt = Annotated[
    Optional[int], typer.Option("--gpus-per-node", help="GPUs per node / NVLink domain (default: the GPU spec's, 8).")
]
NetworkOpt = Annotated[
    Optional[str],
    typer.Option("--network", help="Network between nodes: a built-in (ib-ndr-400, roce-400, ...) or a YAML file."),
]
BatchOpt = Annotated[int, typer.Option("--batch", "-b", help="Concurrent sequences.")]
PromptOpt = Annotated[int, typer.Option("--prompt", "-p", help="Prompt tokens per sequence.")]
OutputOpt = Annotated[int, typer.Option("--output", "-o", help="Output tokens per sequence.")]
WeightsOpt = Annotated[
    Optional[str],
    typer.Option(
        "--weights",
        help="Block linear weight format (default: the model's as shipped): bf16, fp8, int8, int4 (= int4-g128), "
        "int4-g<N>[-sym|-z16], fp4, nvfp4, nf4, q4_k_m, q5_k_m, q8_0, ...",
    ),
]
KvOpt = Annotated[
    Optional[str], typer.Option("--kv-dtype", help="KV cache format (default: the model's): bf16, fp8, int8, ...")
]
ComputeOpt = Annotated[
    Optional[ComputeDtype],
    typer.Option(
        "--compute-dtype",
        case_sensitive=False,
        help="Matmul dtype whose peak applies (default: fp8/fp4 weights run natively where the GPU lists that peak, "
        "other formats dequantize to the model's dtype; a checkpoint that states W8A8 runs it).",
    ),
]
WeightsListOpt = Annotated[
    Optional[str],
    typer.Option("--weights", help="Block linear weight formats, comma-separated (each priced): bf16,fp8,int4, ..."),
]
KvListOpt = Annotated[Optional[str], typer.Option("--kv-dtype", help="KV cache formats, comma-separated: bf16,fp8.")]
ComputeListOpt = Annotated[
    Optional[str],
    typer.Option("--compute-dtype", help="Matmul dtypes, comma-separated (default: as estimate resolves them)."),
]
PrefixOpt = Annotated[int, typer.Option("--cached-prefix", help="Prompt tokens served from a prefix cache.")]
FlashOpt = Annotated[
    bool,
    typer.Option(
        "--flash-attention/--no-flash-attention",
        help="Fused attention (default); --no-flash-attention writes the scores out and reads them back "
        "(llama-bench's -fa 0).",
    ),
]
PriceOpt = Annotated[Optional[float], typer.Option("--price", help="USD per GPU-hour (default: the GPU spec's).")]
FormatOpt = Annotated[Format, typer.Option("--format", "-f", help="table (rich), markdown, json or csv.")]
TableFormatOpt = Annotated[TableFormat, typer.Option("--format", "-f", help="table (rich), markdown or json.")]
ForceOpt = Annotated[bool, typer.Option("--force", is_eager=True, help="Replace an existing file.")]
ExplainOpt = Annotated[bool, typer.Option("--explain", help="Show the arithmetic behind each number.")]
EngineOpt = Annotated[
    Optional[str],
    typer.Option(
        "--engine",
        help="Serving engine whose profile shapes 'expected': generic (default), vllm, sglang, tensorrt-llm, "
        "lmdeploy, llama.cpp, tgi, mlc, torch-compile; NAME@ERA or NAME@VERSION for an older era (vllm@v0, "
        "vllm@0.6; tokcost specs list --kind engines); or a YAML file.",
    ),
]
JourneyOpt = Annotated[
    bool,
    typer.Option(
        "--journey",
        help="Show one token's journey: every kernel of a decode step and the prefill (with -f csv, the journey's "
        "rows and each pass's total alone; -f json carries the estimate too).",
    ),
]
PlotOpt = Annotated[
    Optional[Path],
    typer.Option(
        "--plot",
        metavar="FILE",
        callback=_check_plot,
        help="Also draw the result as a chart in FILE, .png or .svg (needs matplotlib: the plot extra); an "
        "existing FILE is replaced only with --force.",
    ),
]


def dash_is_stdout(value: Optional[Path]) -> Optional[Path]:
    """`--out -` is standard output, as the convention goes: no file (a file named '-' was written)."""
    return None if value is not None and str(value) == "-" else value
