"""The batch past which a replica's prefill queue has no steady state (limits.queue_stable_batch), where long-tailed
prompts make it fall short of the saturation batch.

The test is the backlog's share of the prefill budget, lambda alpha E[P'], against QUEUE_FULL, not a finite wait:
past the batch where the share first reaches 1, the steady-state solve has two branches, the share at 1 (no steady
state) and a hair under it (a "finite" wait of 1e9 s), and a bisection on the finite wait alone landed on either
(Llama-3.2-3B on an H100, lognormal prompts of CV 10: batch 256 at 27.05 req/s, where the queue was full from batch
127 on, at 28.9 req/s; with the backlog a request decodes behind priced, replica.held_backlog, Little's rate is
lower at each batch and the queue fills from batch 299, at 26.5 req/s; with the clump decoders enter in priced,
replica.clumped_companions, from batch 313, at 26.3 req/s). Its bracket closes to STABLE_TOLERANCE
(1e-3) of the batch: the rate there is flat in the batch, so on this replica a bracket closed to 1e-5 gives the same
rate to 1e-4. (Past the first edge a solve can land on a holding branch again; a bisection that stops on such an
island's edge is off by up to 0.2% in rate: docs/benchmarks.md, stop 50.)"""

from __future__ import annotations

import math

import pytest

from tokcost.hardware.library import load_gpu
from tokcost.models.library import load_model
from tokcost.serving import limits
from tokcost.serving.layout import Layout
from tokcost.serving.replica import build_replica
from tokcost.serving.steps import Deployment
from tokcost.serving.traffic import LengthDist, Traffic


@pytest.fixture(scope="module")
def replica():
    traffic = Traffic(LengthDist("lognormal", 1024, 10.0), LengthDist("fixed", 256), rate_rps=1.0)
    return build_replica(load_model("llama-3.2-3b"), Deployment(load_gpu("h100-sxm"), Layout(1)), traffic, 2048,
                         "expected")  # fmt: skip


def test_the_stable_batch_is_where_the_backlog_first_fills_the_prefill_budget(replica):
    stable, top = replica.stable_batch, replica.saturation_top()
    assert 0 < stable < 0.75 * top  # the queue's budget runs out well before the decode batch saturates
    at = replica.state(stable)
    assert math.isfinite(at.wait_mean_s) and 0.99 < at.queue_rho < limits.QUEUE_FULL  # on the edge, still holding
    below = [replica.state(stable * f) for f in (0.5, 0.8, 0.95)]
    assert all(p.queue_rho < at.queue_rho and math.isfinite(p.wait_mean_s) for p in below)  # the share rises to it
    assert [p.queue_rho for p in below] == sorted(p.queue_rho for p in below)
    # (just past the edge a solve can land on a holding branch whose wait is still of the order of 1,000 s: at 1.02)
    past = [replica.state(stable * f) for f in (1.5, 2.0, 2.5)]
    assert all(p.queue_rho >= limits.QUEUE_FULL for p in past)  # full from there on, whichever branch a solve takes
    assert all(at.rate_rps > p.rate_rps for p in past[1:])  # no batch past it sustains more requests


def test_a_finer_bracket_moves_the_rate_at_the_stable_batch_by_under_1e_4(replica, monkeypatch):
    at = replica.state(replica.stable_batch)
    monkeypatch.setattr(limits, "STABLE_TOLERANCE", 1e-5)
    finer = replica.state(replica.queue_stable_batch())
    assert abs(finer.rate_rps - at.rate_rps) <= 1e-4 * at.rate_rps


def test_fixed_lengths_have_no_queue_limit_short_of_saturation():
    """At the saturation batch the steps of fixed-length prompts fill as they must (every one carries prefill, and
    the wait is finite): that is saturation, not a queue that has lost its steady state short of it."""
    traffic = Traffic(LengthDist("fixed", 2048), LengthDist("fixed", 300), rate_rps=1.0)
    replica = build_replica(load_model("llama-3.1-8b"), Deployment(load_gpu("h100-sxm"), Layout(1)), traffic, 2048,
                            "expected")  # fmt: skip
    assert math.isinf(replica.stable_batch)
    top = replica.state(replica.saturation_top())
    assert top.queue_rho > limits.QUEUE_FULL and math.isfinite(top.wait_mean_s)  # the budget full, and it holds
