"""vLLM's two eager eras: 2023 builds (before 0.2.6, no CUDA graphs yet: the model run from Python every step, about
44 us a stage row, from vLLM PR 1440's own eager step) and later builds run with --enforce-eager (the generic 10 us
a launch). The first is a floor a batch-1 step cannot go under; the second, on the same GPU, hides behind it."""

from __future__ import annotations

import pytest

from tokcost import Workload, load_gpu, load_model
from tokcost.engine.estimate import estimate
from tokcost.profiles import load_engine
from tokcost.validation.priors import COST_PRIORS

LLAMA7 = load_model("llama-2-7b")
A100 = load_gpu("a100-80gb-sxm")
# vllm-project/vllm PR 1440 (2023-10): Llama-2-7B, batch 1, 5 prompt and 100 output tokens, one GPU: 1.2 s eager
EAGER_STEP_S = 1.2 / 100


def _step(engine: str):
    e = estimate(LLAMA7, A100, Workload(prompt_tokens=5, output_tokens=100), engine=load_engine(engine))
    return e, e.expected.decode_step


def test_the_2023_era_is_host_bound_at_pr_1440_s_eager_step():
    e, step = _step("vllm@0.2.1")
    profile = e.deployment.engine
    assert profile.label == "vllm@eager"
    rows = sum(p.stage.count for p in step.stages)
    assert rows == 228  # Llama-2-7B's stage rows at batch 1: 32 layers x 7, embedding, final norm, LM head, sampling
    rates = e.deployment.rates("expected")
    host = rates.launched(rows, 0) * profile.launch_overhead_us * 1e-6
    # by hand: 228 rows x 44 us = 10.0 ms of launches, above the GPU's 7 ms of weight reads, so the step is the
    # launches plus the per-step and per-sequence host costs: 10.0 + 2.0 + 0.015 ms
    assert host == pytest.approx(228 * 44e-6)
    # the floor binds: the same step with no launch cost (the GPU's own time, gaps included) is shorter
    free = estimate(LLAMA7, A100, Workload(prompt_tokens=5, output_tokens=100),
                    engine=profile.model_copy(update={"launch_overhead_us": 0.0})).expected.decode_step  # fmt: skip
    assert free.seconds - free.overhead_s < host
    assert e.expected.tpot_s == pytest.approx(host + (profile.step_overhead_us + profile.sequence_overhead_us) * 1e-6)
    assert e.expected.tpot_s == pytest.approx(EAGER_STEP_S, rel=0.05)


def test_enforce_eager_on_a_later_build_keeps_the_generic_launch_cost():
    assert COST_PRIORS[("vllm", "enforce-eager")]["launch_us"].centre == 10
    assert COST_PRIORS[("vllm", "eager")]["launch_us"].centre == 44
    old, _ = _step("vllm@eager")
    later, _ = _step("vllm@enforce-eager")
    assert later.deployment.engine.launch_overhead_us < old.deployment.engine.launch_overhead_us
    assert later.expected.tpot_s < old.expected.tpot_s
