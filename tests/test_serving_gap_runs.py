"""The simulation keeps its gaps between tokens as runs: a stretch of decode-only steps is one line in the step
index (each step one context token longer), so it is stored and read as one run, not one pair per step.

One pair per step had made `plan --simulate` with one user and 20,000-token answers take 85 s and 5.5 GB over its
1,000 requests (20 million pairs per row). These tests hold the runs to what the pairs gave: the same quantiles,
the same mean, the same measured stretch, read by brute force from the steps one by one.
"""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tokcost.engine.step import Segment
from tokcost.hardware.library import load_gpu
from tokcost.models.library import load_model
from tokcost.serving.layout import Layout
from tokcost.serving.replica import build_replica
from tokcost.serving.simulate import GapRun, SimResult, _kept, _run_quantile, simulate
from tokcost.serving.steps import Deployment
from tokcost.serving.traffic import LengthDist, Traffic


def _each_gap(runs):
    """Every (gap, sequences) pair the runs stand for, one per step."""
    return [(r.seconds + r.slope_s * k, r.sequences) for r in runs for k in range(r.steps)]


def _quantile_one_by_one(pairs, q):
    """The smallest gap at or under which a share q of the weight lies, read off the sorted pairs."""
    total = sum(n for _, n in pairs)
    seen = 0
    for value, n in sorted(pairs):
        seen += n
        if seen >= q * total:
            return value
    return max(v for v, _ in pairs)


runs = st.lists(
    st.builds(
        GapRun,
        seconds=st.floats(1e-3, 1.0),
        slope_s=st.one_of(st.just(0.0), st.floats(1e-9, 1e-3)),
        steps=st.integers(1, 3000),
        sequences=st.integers(1, 300),
    ),
    min_size=1,
    max_size=40,
)


@given(runs, st.floats(0.0, 1.0))
def test_a_runs_quantile_is_the_quantile_of_its_steps_one_by_one(gap_runs, q):
    # long runs (up to 120,000 steps in all) take the bisection, short ones the final reading one by one
    assert _run_quantile(tuple(gap_runs), q) == pytest.approx(_quantile_one_by_one(_each_gap(gap_runs), q), rel=1e-12)


@given(runs)
def test_a_runs_mean_is_the_mean_of_its_steps_one_by_one(gap_runs):
    pairs = _each_gap(gap_runs)
    result = SimResult((), (), (), tuple(gap_runs), 1.0, 0.0, 0.0, 0)
    assert result.itl_mean_s == pytest.approx(sum(v * n for v, n in pairs) / sum(n for _, n in pairs), rel=1e-12)


@given(
    st.lists(
        st.tuples(st.integers(0, 200), st.integers(1, 20), st.integers(0, 3), st.integers(1, 40), st.integers(1, 9)),
        min_size=1,
        max_size=20,
    ),
    st.integers(0, 3000),
    st.integers(0, 3000),
)
def test_the_measured_stretch_keeps_the_steps_that_end_inside_it(records, start, length):
    # whole seconds end every step on a whole number and the stretch's bounds fall halfway: no rounding decides
    start_s, end_s = start + 0.5, start + length + 0.5
    inside = []
    for first_end, seconds, slope, steps, sequences in records:
        end = float(first_end)
        for k in range(steps):  # step k ends after the gaps seconds + slope j, j = 1..k, past the first's end
            end += seconds + slope * k if k else 0.0
            if start_s < end <= end_s:
                inside.append((seconds + slope * k, sequences))
    kept = list(_kept([(float(a), float(b), float(c), d, e) for a, b, c, d, e in records], start_s, end_s))
    assert sorted(_each_gap(kept)) == sorted(inside)


def test_a_lone_users_long_answer_is_a_run_and_its_median_gap_is_the_step_at_its_middle_context():
    # one user, 100-token prompts and 20,000-token answers: its decode steps run at contexts 101 .. 20,099, a step's
    # time is linear in the context between the engine's kernel bounds, so the median gap is the step at the middle
    traffic = Traffic(LengthDist("fixed", 100), LengthDist("fixed", 20_000), concurrency=1)
    replica = build_replica(
        load_model("llama-3.1-8b"), Deployment(load_gpu("h100-sxm"), Layout(1)), traffic, 2048, "expected"
    )
    sim = simulate(replica.steps, traffic, 2048, requests=20, seed=1)
    middle = replica.steps.seconds([Segment(1, 100 + 10_000, 1)])
    assert sim.percentile("itl", 0.5) == pytest.approx(middle, rel=2e-3)
    assert sim.itl_mean_s == pytest.approx(middle, rel=2e-3)
    # 16 measured requests of 19,999 gaps each: a few runs per request (its first step, a line or two), not 320,000
    assert sum(r.steps for r in sim.itl_runs) == pytest.approx(16 * 19_999, rel=0.01)
    assert len(sim.itl_runs) <= 5 * 20
    assert math.isfinite(sim.percentile("itl", 0.99))
