"""The floor under `tokcost estimate`: a command of the same shape built on typer, pydantic and rich alone.

24 options parsed by typer (which builds a pydantic TypeAdapter for each), one pydantic model with 20 constrained
fields validated from them, and three rich tables of 10 rows drawn on stdout; nothing of tokcost's. What
`tokcost estimate` costs beyond this is tokcost's own: its modules, spec classes, specs and engine
(benchmarks/bench_startup.py runs both). Run: python benchmarks/floor_cli.py [--batch 2]
"""

from __future__ import annotations

import os
from enum import Enum
from typing import Annotated, Optional

os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")  # pydantic's own switch, as tokcost's CLI sets it

import typer  # noqa: E402 - after the switch, which pydantic reads when it builds a model
from pydantic import BaseModel, ConfigDict, Field  # noqa: E402
from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402


class Shape(str, Enum):
    table = "table"
    json = "json"


class Spec(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)
    layers: int = Field(gt=0)
    hidden: int = Field(gt=0)
    heads: int = Field(gt=0)
    kv_heads: int = Field(gt=0)
    head_dim: int = Field(gt=0)
    vocab: int = Field(gt=0)
    intermediate: int = Field(gt=0)
    params: float = Field(gt=0)
    bandwidth_gb_s: float = Field(gt=0)
    memory_gb: float = Field(gt=0)
    tflops_bf16: float = Field(gt=0)
    tflops_fp8: float = Field(gt=0)
    power_w: float = Field(gt=0)
    price: float = Field(ge=0)
    batch: int = Field(gt=0)
    prompt: int = Field(gt=0)
    output: int = Field(gt=0)
    tp: int = Field(gt=0)
    pp: int = Field(gt=0)
    name: str = Field(min_length=1)


def command(
    model: Annotated[str, typer.Option("--model", "-m")] = "m",
    gpu: Annotated[str, typer.Option("--gpu", "-g")] = "g",
    gpus: Annotated[Optional[int], typer.Option(min=1)] = None,
    tp: Annotated[Optional[int], typer.Option(min=1)] = None,
    pp: Annotated[int, typer.Option(min=1)] = 1,
    ep: Annotated[int, typer.Option(min=1)] = 1,
    dp: Annotated[int, typer.Option(min=1)] = 1,
    per_node: Annotated[Optional[int], typer.Option(min=1)] = None,
    network: Annotated[Optional[str], typer.Option()] = None,
    engine: Annotated[Optional[str], typer.Option()] = None,
    batch: Annotated[int, typer.Option("--batch", "-b", min=1)] = 1,
    prompt: Annotated[int, typer.Option(min=1)] = 1024,
    output: Annotated[int, typer.Option(min=1)] = 256,
    weights: Annotated[Optional[str], typer.Option()] = None,
    kv: Annotated[Optional[str], typer.Option()] = None,
    compute: Annotated[Optional[str], typer.Option()] = None,
    prefix: Annotated[int, typer.Option(min=0)] = 0,
    price: Annotated[Optional[float], typer.Option(min=0)] = None,
    shape: Annotated[Shape, typer.Option("--format", "-f")] = Shape.table,
    explain: Annotated[bool, typer.Option()] = False,
    journey: Annotated[bool, typer.Option()] = False,
    plot: Annotated[Optional[str], typer.Option()] = None,
    rounds: Annotated[int, typer.Option(min=1)] = 1,
    width: Annotated[Optional[int], typer.Option(min=20)] = None,
) -> None:
    """Validate a spec from the options and draw three tables."""
    spec = Spec(layers=32, hidden=4096, heads=32, kv_heads=8, head_dim=128, vocab=128256, intermediate=14336,
                params=8.03e9, bandwidth_gb_s=3350.0, memory_gb=80.0, tflops_bf16=989.0, tflops_fp8=1979.0,
                power_w=700.0, price=price or 0.0, batch=batch, prompt=prompt, output=output, tp=tp or 1, pp=pp,
                name=model)  # fmt: skip
    console = Console()
    for title in ("Latency", "Memory", "Decode step"):
        table = Table(title=title)
        for column in ("quantity", "ceiling", "expected", "band"):
            table.add_column(column, justify="right")
        for i in range(10):
            table.add_row(f"row {i}", f"{spec.params / (i + 1):,.1f}", f"{spec.bandwidth_gb_s * i:,.2f}", f"x{i}")
        console.print(table)


if __name__ == "__main__":
    typer.run(command)
