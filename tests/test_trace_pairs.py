"""A trace's requests keep their own lengths: a prompt comes with its own answer (traces.read_trace in arrival order,
Traffic.pairs), so the decode context weighs each prompt by its own decode steps and the simulation draws requests
whole. Drawn apart, a trace of long prompts with short answers and short prompts with long answers decodes long
prompts for long answers, which it never does."""

from __future__ import annotations

import json
import random
import re

import pytest

from tokcost.hardware.library import load_gpu
from tokcost.models.library import load_model
from tokcost.serving.capacity import capacity, state_at_rate
from tokcost.serving.inputs import plan_traffic
from tokcost.serving.latency import percentile
from tokcost.serving.layout import Layout
from tokcost.serving.replica import build_replica, decode_context
from tokcost.serving.simulate import _Run, simulate
from tokcost.serving.steps import Deployment
from tokcost.traces import read_trace

# a summarizing half (4,000 tokens in, 50 out) and a chatting half (200 in, 1,000 out)
MIX = [(4000, 50), (200, 1000)] * 50


def _traffic(pairs, cached=0, rate=1.0, arrivals=()):
    prompts, outputs = tuple(p for p, _ in pairs), tuple(o for _, o in pairs)
    return plan_traffic(
        trace=(prompts, outputs, arrivals), rate=None if arrivals else rate, cached_prefix_tokens=cached
    )


def test_a_trace_is_read_in_arrival_order_each_request_with_its_own_lengths(tmp_path):
    lines = [(3.0, 300, 30), (1.0, 100, 10), (2.0, 200, 20), (0.5, 50, 5)]
    path = tmp_path / "t.jsonl"
    path.write_text(
        "\n".join(json.dumps({"arrival_s": t, "prompt_tokens": p, "output_tokens": o}) for t, p, o in lines)
    )
    trace = read_trace(path)
    assert trace.arrivals_s == (0.5, 1.0, 2.0, 3.0)
    assert trace.prompts == (50, 100, 200, 300) and trace.outputs == (5, 10, 20, 30)  # each its own, not re-paired


def test_the_decode_context_weighs_each_prompt_by_its_own_answer():
    n_long, n_short = 49, 999  # decode steps of the two kinds of request (output - 1)
    by_hand = (n_long * 4000 + n_short * 200) / (n_long + n_short) + (n_long**2 + n_long + n_short**2 + n_short) / (
        2 * (n_long + n_short)
    )
    assert decode_context(_traffic(MIX)) == pytest.approx(by_hand)
    assert by_hand == pytest.approx(855.46, abs=0.01)
    # drawn apart, the same lengths decode at E[P'] + the length-biased progress: 2,100 + 477.8
    apart = _traffic(MIX)
    apart = type(apart)(apart.prompt, apart.output, rate_rps=1.0)
    assert decode_context(apart) == pytest.approx(2100 + (n_long**2 + n_long + n_short**2 + n_short) / 2096)
    # one length for every request: P + O / 2, as with fixed lengths; a cached prefix adds itself once
    assert decode_context(_traffic([(1000, 201)] * 5)) == pytest.approx(1000 + 100.5)
    assert decode_context(_traffic([(1000, 201)] * 5, cached=400)) == pytest.approx(1000 + 100.5)


def test_the_simulation_draws_a_traces_requests_whole():
    traffic = _traffic(MIX, cached=100)
    replica = build_replica(load_model("llama-3.1-8b"), Deployment(load_gpu("h100-sxm"), Layout(1)), traffic, 2048,
                            "expected")  # fmt: skip
    run = _Run(replica.steps, traffic, 2048, 200, random.Random(4), 1.0, None, 1)
    drawn = {run.lengths(i) for i in range(200)}
    assert drawn == {(3900, 50), (100, 1000)}  # the computed prompt beyond the 100 cached tokens, with its answer
    timed = _traffic([(300, 3), (100, 1), (200, 2)], arrivals=(0.0, 1.0, 2.0))
    run = _Run(replica.steps, timed, 2048, 3, random.Random(4), None, None, 1)
    assert [run.lengths(i) for i in range(3)] == [(300, 3), (100, 1), (200, 2)]  # in arrival order


@pytest.mark.slow
@pytest.mark.parametrize("load", [0.3, 0.7])
def test_closed_form_matches_the_simulation_on_a_paired_trace(load):
    traffic = _traffic(MIX)
    replica = build_replica(load_model("llama-3.1-8b"), Deployment(load_gpu("h100-sxm"), Layout(1)), traffic, 2048,
                            "expected")  # fmt: skip
    rate = load * capacity(replica, []).saturation_rps
    point = state_at_rate(replica, rate)
    sim = simulate(replica.steps, traffic, 2048, requests=4000, seed=1, rate_rps=rate)
    for metric in ("ttft", "tpot"):
        for q in (0.5, 0.9):
            assert percentile(replica, point, metric, q) == pytest.approx(sim.percentile(metric, q), rel=0.15)


def test_plan_explains_the_paired_context(cli, tmp_path):
    path = tmp_path / "mix.jsonl"
    path.write_text("\n".join(json.dumps({"prompt_tokens": p, "output_tokens": o}) for p, o in MIX))
    r = cli("plan", "-m", "llama-3.1-8b", "-g", "h100-sxm", "--tp", "1", "--trace", str(path), "--rate", "2",
            "--explain")  # fmt: skip
    assert r.exit_code == 0, r.stderr
    text = " ".join(r.stdout.split())
    found = re.search(r"decode context c = p0 \+ E\[n P'\] / E\[n\] \(.*?\) .*? = ([\d,]+) tokens", text)
    assert found and int(found[1].replace(",", "")) == 855  # 855.46 by hand, above
