"""The batch past which a replica's prefill queue has no steady state (limits.queue_stable_batch), where long-tailed
prompts make it fall short of the saturation batch. Its bracket closes to STABLE_TOLERANCE (1e-3) of the batch: the
rate a replica sustains there, the figure plan prints, is flat in the batch near it, so a bracket closed to 1e-5
gives the same rate to 1e-4 at a third more steady-state solves."""

from __future__ import annotations

import math

from tokcost.hardware.library import load_gpu
from tokcost.models.library import load_model
from tokcost.serving import limits
from tokcost.serving.layout import Layout
from tokcost.serving.replica import build_replica
from tokcost.serving.steps import Deployment
from tokcost.serving.traffic import LengthDist, Traffic


def test_a_long_tailed_prompts_stable_batch_is_finite_below_saturation_and_its_rate_needs_no_finer_bracket(
    monkeypatch,
):
    traffic = Traffic(LengthDist("lognormal", 1024, 10.0), LengthDist("fixed", 256), rate_rps=1.0)
    replica = build_replica(load_model("llama-3.2-3b"), Deployment(load_gpu("h100-sxm"), Layout(1)), traffic, 2048,
                            "expected")  # fmt: skip
    stable, top = replica.stable_batch, replica.saturation_top()
    assert 0 < stable < 0.9 * top  # the queue's budget runs out well before the decode batch saturates
    at = replica.state(stable)
    assert math.isfinite(at.wait_mean_s)
    monkeypatch.setattr(limits, "STABLE_TOLERANCE", 1e-5)
    finer = replica.state(replica.queue_stable_batch())
    assert math.isfinite(finer.wait_mean_s)
    assert abs(finer.rate_rps - at.rate_rps) <= 1e-4 * at.rate_rps
