"""The table of tokcost's commands: where each one lives and its one-line help, known without importing it.

`tokcost --help` and shell completion list every command from this table; only the command that runs (or whose
own --help or flags are asked for) is imported. A test holds each `summary` equal to the first line of the
command's docstring, the text its own --help opens with.
"""

from __future__ import annotations

from typing import NamedTuple


class Entry(NamedTuple):
    """A command: the module and attribute that define it (a function, or a typer app for a group), its help line."""

    module: str
    attribute: str
    summary: str


COMMANDS = {
    "estimate": Entry(
        "tokcost.cli.estimate_cmd",
        "estimate",
        "Estimate TTFT, TPOT, throughput, memory and cost. Example: tokcost estimate -m llama-3.1-8b -g h100-sxm",
    ),
    "compare": Entry(
        "tokcost.cli.compare_cmd",
        "compare",
        "Compare models x GPUs for one workload. Example: tokcost compare -m llama-3.1-70b -g h100-sxm,h200 --gpus 4,2",
    ),
    "sweep": Entry(
        "tokcost.cli.sweep_cmd",
        "sweep",
        "Sweep batch sizes and/or prompt lengths. Example: tokcost sweep -m llama-3.1-8b -g h100-sxm -b 1,8,64,256",
    ),
    "measure": Entry(
        "tokcost.cli.measure_cmd",
        "measure",
        "Time a real decode loop vs predictions. Example: tokcost measure -m llama-3.2-1b --layers 2 --device cpu",
    ),
    "calibrate": Entry(
        "tokcost.cli.calibrate_cmd",
        "calibrate",
        "Measure the loop's step overhead, stream and GEMM rates as a GPU spec. Example: tokcost calibrate -o gpu.yaml",
    ),
    "validate": Entry(
        "tokcost.cli.validate_cmd",
        "validate",
        "Check predictions against published measurements. Example: tokcost validate --engine vllm --format markdown",
    ),
    "plan": Entry(
        "tokcost.cli.plan_cmd",
        "plan",
        "Plan the cheapest fleet for a traffic and SLOs; at most 600 search points (GPU x format x layout x chunk). "
        "Example: tokcost plan -m llama-3.1-70b --rate 20 "
        "--prompt 2048 --output 300 --slo ttft_p90=500ms --slo tpot_p90=40ms --gpu h100-sxm,h200,mi300x,l40s",
    ),
    "specs": Entry("tokcost.cli.specs_cmd", "app", "List, show, validate and import model and GPU specs."),
}
