"""--explain derives the activation workspace and the reserve it adds to the memory (the audit of 2026-12-03 found
"92.79 MB workspace" and "reserve: 0.1 x ..." with neither formula nor source): the printed parts give the total.
(test_explain.py redoes the line's arithmetic in every case; this pins its parts to the model's shapes.)"""

from __future__ import annotations

import re

import pytest

from tokcost.engine.estimate import estimate
from tokcost.engine.workload import Workload
from tokcost.hardware.library import load_gpu
from tokcost.models.library import load_model

WORKSPACE = re.compile(
    r"workspace: min\(([\d,]+) x ([\d,]+) tokens, ([\d,]+) tokens\) x \(4 x ([\d,]+) \+ 2 x ([\d,]+) / (\d+)\) x "
    r"(\d) B \+ ([\d,]+) x ([\d,]+) x (\d) B = ([\d.]+) (k|M|G)B"
)
SCALE = {"k": 1e3, "M": 1e6, "G": 1e9}


def _n(text: str) -> int:
    return int(text.replace(",", ""))


@pytest.mark.parametrize(
    ("args", "hidden", "mlp", "vocab"),
    [
        (("-m", "llama-3.1-70b", "-g", "h100-sxm", "--tp", "4", "-b", "64"), 8192, 28672, 128_256),
        (("-m", "llama-3.1-8b", "-g", "l40s", "-b", "2", "-p", "512"), 4096, 14336, 128_256),
        (("-m", "mixtral-8x7b", "-g", "h200", "--tp", "2"), 4096, 2 * 14336, 32_000),  # 2 experts a token
    ],
)
def test_the_workspace_line_adds_up(cli, args, hidden, mlp, vocab):
    out = cli("estimate", *args, "--explain")
    assert out.exit_code == 0, out.stderr
    found = WORKSPACE.search(out.stdout.replace("\n", " "))
    assert found, out.stdout
    seqs, prompt, chunk, h, width, tp, act, seqs2, v, logit, value, unit = found.groups()
    assert (_n(h), _n(width), _n(v)) == (hidden, mlp, vocab) and seqs == seqs2
    assert _n(chunk) == 8192 and (act, logit) == ("2", "4")  # bf16 activations, fp32 logits
    per_token = (4 * hidden + 2 * mlp / int(tp)) * 2
    # the logits of the whole vocabulary: every rank holds them once gathered for sampling
    total = min(_n(seqs) * _n(prompt), 8192) * per_token + _n(seqs) * vocab * 4
    assert float(value) * SCALE[unit] == pytest.approx(total, rel=2e-3)
    assert "reserve: 0.1 x" in out.stdout and "gpu_memory_utilization 0.9" in out.stdout


def test_logits_live_only_on_the_last_pipeline_stage(cli):
    # Llama-3.1-70B at TP 2 on 3 stages (27 + 27 + 26 layers): the first stage holds a layer more than the last and
    # is the fullest GPU; the LM head and the fp32 logits it samples from are on the last stage only
    out = cli("estimate", "-m", "llama-3.1-70b", "-g", "h100-sxm", "--tp", "2", "--pp", "3", "-b", "8", "--explain")
    assert out.exit_code == 0, out.stderr
    line = next(x for x in out.stdout.splitlines() if x.strip().startswith("workspace:"))
    assert " x 128,256 x 4 B" not in line and "no logits: stage 0 holds none" in line
    per_token = (4 * 8192 + 2 * 28_672 / 2) * 2
    value, unit = re.search(r"= ([\d.]+) (k|M|G)B \(", line).groups()
    assert float(value) * SCALE[unit] == pytest.approx(min(8 * 1024, 8192) * per_token, rel=2e-3)


@pytest.mark.parametrize("pp", [2, 4])
def test_the_last_stage_adds_the_logits_to_its_own_workspace(pp):
    # on 2 or 4 even stages the last (layers + LM head + logits) outweighs the first (layers + embedding table)
    e = estimate(load_model("llama-3.1-70b"), load_gpu("h100-sxm"), Workload(tp=2, pp=pp, batch=8))
    b = e.memory.per_gpu
    assert b.stage == pp - 1
    assert b.workspace == pytest.approx(8192 * (4 * 8192 + 2 * 28_672 / 2) * 2 + 8 * 128_256 * 4, rel=1e-9)


def test_tensorrt_llm_reserves_a_tenth_of_what_weights_and_activations_leave_free():
    # TensorRT-LLM's KV cache takes free_gpu_memory_fraction (0.9) of the memory free after the weights and
    # activations load; vLLM's gpu_memory_utilization (0.9) is of the whole GPU: on an H100 holding Llama-3.1-8B the
    # reserve is 0.1 x (capacity - weights - workspace), not 0.1 x capacity, and more sequences fit
    from tokcost.profiles import load_engine

    model, gpu = load_model("llama-3.1-8b"), load_gpu("h100-sxm")
    vllm = estimate(model, gpu, Workload(batch=1), engine=load_engine("vllm"))
    trt = estimate(model, gpu, Workload(batch=1), engine=load_engine("tensorrt-llm"))
    assert vllm.memory.per_gpu.reserve == pytest.approx(0.1 * gpu.memory_bytes)
    b = trt.memory.per_gpu
    assert b.reserve == pytest.approx(0.1 * (gpu.memory_bytes - b.weights - b.workspace))
    assert trt.memory.max_batch > vllm.memory.max_batch
