"""The host as a bound: where an eager era launches more kernel time than the GPU runs, expected's decode step is
"host"-bound (the launches' floor in passcost.stage_seconds), the estimate says so with both times, and the fast
decode lines agree with the priced pass. With CUDA graphs, or once the batch's work outgrows the launches, the
bound is the GPU's again."""

from __future__ import annotations

import json
import typing

import pytest
from typer.testing import CliRunner

from tokcost import Workload, load_gpu, load_model
from tokcost.cli.app import app
from tokcost.engine.decode import DecodeLines
from tokcost.engine.estimate import estimate
from tokcost.engine.passcost import Bound
from tokcost.engine.report import host_bound
from tokcost.profiles import load_engine
from tokcost.serving.capacity import BOUND_LABEL

LLAMA7 = load_model("llama-2-7b")
A100 = load_gpu("a100-80gb-sxm")


def _estimate(engine: str, batch: int = 1, model=LLAMA7, gpu=A100, **layout: int):
    wl = Workload(batch=batch, prompt_tokens=5, output_tokens=100, **layout)
    return estimate(model, gpu, wl, engine=load_engine(engine))


def test_an_eager_step_past_the_gpu_is_host_bound_and_says_both_times():
    e = _estimate("vllm@0.2.1")
    step = e.expected.decode_step
    assert step is not None
    gpu_s = sum(step.parts_seconds) - step.hidden_s  # kernels, their gaps and collectives: the GPU's own time
    # by hand: 228 stage rows x 44 us = 10.0 ms of launches against about 8 ms on the GPU
    assert step.launch_s == pytest.approx(228 * 44e-6)
    assert gpu_s < step.launch_s
    assert (e.ceiling.decode_bound, e.expected.decode_bound) == ("memory", "host")
    note = host_bound(e)
    assert note is not None and "10.0 ms a step" in note and "vllm@eager" in note
    # the step is the launches plus the host's fixed costs, so the bound is what the time says
    assert step.seconds == pytest.approx(step.launch_s + step.overhead_s)


def test_graphs_or_a_large_batch_give_the_bound_back_to_the_gpu():
    assert _estimate("vllm@v0").expected.decode_bound == "memory"
    assert host_bound(_estimate("vllm@v0")) is None
    big = _estimate("vllm@0.2.1", batch=64)  # 64 sequences' KV reads and activations outgrow 10 ms of launches
    step = big.expected.decode_step
    assert step is not None and not step.launch_bound
    assert big.expected.decode_bound in ("memory", "compute") and host_bound(big) is None


LLAMA1B, H100 = load_model("llama-3.2-1b"), load_gpu("h100-sxm")
AGREE = [  # (engine, batch, model, gpu, layout, host-bound as priced)
    ("vllm@0.2.1", 1, LLAMA7, A100, {}, True),
    ("vllm@0.2.1", 64, LLAMA7, A100, {}, False),
    ("llama.cpp@eager", 1, LLAMA7, A100, {}, False),
    ("llama.cpp@eager", 1, LLAMA1B, H100, {}, True),  # 2.8 ms of launches against 2.0 on the GPU
    ("llama.cpp@eager", 1, LLAMA1B, H100, {"pp": 4}, True),  # the slowest of 4 stages
    ("llama.cpp@eager", 4, LLAMA7, A100, {"tp": 2, "pp": 2}, True),  # one host thread: 2 GPUs' launches a stage
    ("vllm@v1", 8, LLAMA7, A100, {}, False),
]


@pytest.mark.parametrize(("engine", "batch", "model", "gpu", "layout", "host"), AGREE)
def test_decode_lines_agree_with_the_priced_pass(engine, batch, model, gpu, layout, host):
    e = _estimate(engine, batch, model, gpu, **layout)
    step = e.expected.decode_step
    assert step is not None and step.launch_bound == host
    cached = e.mean_decode_context
    assert cached is not None
    lines = DecodeLines(e.deployment.bound(e.deployment.rates("expected")), batch)
    seconds, bound = lines.at(cached)
    assert seconds == pytest.approx(step.seconds, rel=1e-9)
    assert bound == step.bound == ("host" if host else bound)


def test_the_note_names_the_stage_under_a_pipeline():
    note = host_bound(_estimate("llama.cpp@eager", 1, LLAMA1B, H100, pp=4))
    assert note is not None and "a microbatch on the slowest of 4 pipeline stages" in note


def test_sweep_reports_the_expected_bound_as_estimate_does():
    args = ["sweep", "-m", "llama-2-7b", "-g", "a100-80gb-sxm", "--engine", "vllm@0.2.1", "-b", "1,64", "-p", "5",
            "--output", "100", "--format", "json"]  # fmt: skip
    out = CliRunner().invoke(app, args)
    assert out.exit_code == 0, out.output
    data = json.loads(out.output)
    points = data["points"] if isinstance(data, dict) else data
    bounds = {p["batch"]: p["decode_bound"] for p in points}
    assert bounds == {b: _estimate("vllm@0.2.1", b).expected.decode_bound for b in (1, 64)}
    assert bounds[1] == "host"


def test_every_bound_has_a_plan_label():
    assert set(BOUND_LABEL) == set(typing.get_args(Bound))
    assert BOUND_LABEL["host"] == "host launches"


def test_estimate_json_and_table_carry_the_host_bound():
    args = ["estimate", "-m", "llama-2-7b", "-g", "a100-80gb-sxm", "--engine", "vllm@0.2.1", "--prompt", "5",
            "--output", "100"]  # fmt: skip
    out = CliRunner().invoke(app, [*args, "--format", "json"])
    assert out.exit_code == 0, out.output
    data = json.loads(out.output)
    assert data["expected"]["decode_bound"] == "host" and data["ceiling"]["decode_bound"] == "memory"
    table = CliRunner().invoke(app, [*args, "--format", "markdown"])
    assert table.exit_code == 0
    row = next(line for line in table.output.splitlines() if line.startswith("| decode bound"))
    assert [c.strip() for c in row.strip("|").split("|")][:3] == ["decode bound", "memory", "host"]
    assert "expected decode is host-bound" in table.output
