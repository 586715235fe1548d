"""Measured-vs-predicted arithmetic on hand-made loop results (no torch): MBU, MFU, errors, calibrated specs."""

from __future__ import annotations

import datetime as dt
from types import SimpleNamespace

import pytest
import yaml

from tokcost.engine.estimate import estimate
from tokcost.hardware.library import load_gpu
from tokcost.hardware.spec import GpuSpec
from tokcost.measure.calibrate import DeviceFacts, calibrated_spec, spec_yaml
from tokcost.measure.report import run_dict, run_report, workload_of
from tokcost.models.library import load_model


def fake_loop(batch=1, prompt=512, output=128, ttft_s=0.05, tpot_s=0.01):
    return SimpleNamespace(
        dtype="bf16", batch=batch, prompt_tokens=prompt, output_tokens=output, context_tokens=prompt + output,
        ttft_s=ttft_s, tpot_s=tpot_s, decode_tokens_per_s=batch / tpot_s, ttft_s_all=[ttft_s], tpot_s_all=[tpot_s],
        joules_per_output_token=None,
    )  # fmt: skip


def probe(value, size="x"):
    return SimpleNamespace(value=value, size=size)


def test_mbu_is_bytes_per_step_over_tpot_over_peak():
    spec, h100 = load_model("llama-3.1-8b"), load_gpu("h100-sxm")
    r = run_report(spec, fake_loop(), datasheet=h100, calibrated=None, copy_bytes_per_s=3.0e12)
    # weights (no embedding table) + LM head + 1 embedding row + KV of 640 tokens read + 1 written
    weights = (spec.params_total - spec.params_embedding) * 2 + 4096 * 2
    kv = (640 + 1) * 131_072
    assert r.bytes_per_step == weights + kv
    assert r.mbu == pytest.approx((weights + kv) / 0.01 / 3.35e12)
    assert r.mbu_vs_copy == pytest.approx((weights + kv) / 0.01 / 3.0e12)
    assert r.mfu_prefill == pytest.approx(r.prefill_flops / 0.05 / 989.4e12)


def test_prediction_errors_are_relative_to_measured():
    spec, h100 = load_model("llama-3.1-8b"), load_gpu("h100-sxm")
    r = run_report(spec, fake_loop(tpot_s=0.01), datasheet=h100, calibrated=h100, copy_bytes_per_s=None)
    assert r.datasheet.tpot_error == pytest.approx(r.datasheet.tpot_s / 0.01 - 1)
    # the datasheet prediction is the engine's ceiling TTFT for the same workload
    e = estimate(spec, h100, workload_of("bf16", 1, 512, 128))
    assert r.datasheet.ttft_s == pytest.approx(e.ceiling.ttft_s)
    assert r.datasheet_expected.tpot_s >= r.datasheet.tpot_s
    d = run_dict(r)
    assert set(d["predicted"]) == {"datasheet", "datasheet_expected", "calibrated"}
    assert d["measured"]["mbu_vs_copy"] is None


def test_calibrated_spec_round_trips_and_keeps_datasheet_extras():
    facts = DeviceFacts("cuda", "NVIDIA H100 80GB HBM3", 85.0e9, 700.0, "550.54", "2.13.0")
    probes = {"stream": probe(2.9e12, "GEMV"), "copy": probe(2.7e12, "copy"), "matmul": probe(7.1e14, "GEMM")}
    spec = calibrated_spec(facts, probes, "bf16", load_gpu("h100-sxm"), today=dt.date(2026, 11, 29))
    assert spec.memory_bandwidth_gb_s == 2900 and spec.peak_tflops == {"bf16": 710.0, "fp16": 710.0}
    assert spec.link is not None and spec.link.gb_s == 450 and spec.tdp_w == 700
    assert spec.achievable.bandwidth == 1.0 and spec.provenance["date"] == "2026-11-29"
    again = GpuSpec.model_validate(yaml.safe_load(spec_yaml(spec)))
    assert again == spec


def test_calibrated_cpu_spec_has_no_power():
    facts = DeviceFacts("cpu", "x86_64", 24e9, None, "n/a", "2.13.0")
    probes = {"stream": probe(2.0e10), "copy": probe(2.2e10), "matmul": probe(5e10)}
    spec = calibrated_spec(facts, probes, "fp32", None)
    assert spec.tdp_w is None and spec.name == "cpu-x86-64-calibrated" and spec.peak_tflops == {"fp32": 0.05}
