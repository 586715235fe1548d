"""What `calibrate` writes, from hand-made rates (no torch): ceilings, shares of them, the sustained block, refusals."""

from __future__ import annotations

import datetime as dt
from types import SimpleNamespace

import pytest
import yaml

from tokcost.engine.roofline import expected_rates
from tokcost.errors import MeasureError
from tokcost.hardware.library import load_gpu
from tokcost.hardware.spec import GpuSpec
from tokcost.measure.calibrate import DeviceFacts, spec_from_rates, spec_yaml

H100 = DeviceFacts("cuda", "NVIDIA H100 80GB HBM3", 85.52e9, 700.0, "550.54", "2.13.0", uuid="GPU-1")
CPU = DeviceFacts("cpu", "x86_64", 24e9, None, "n/a", "2.13.0")
DAY = dt.date(2026, 12, 1)


def probe(rate: float, seconds: list[float], size: str = "2048 MiB copied") -> SimpleNamespace:
    """A probes.ProbeResult as the spec builder reads it."""
    return SimpleNamespace(value=rate, seconds_all=seconds, size=size)


def probes(copy: float, gemm: float, spread: float = 0.0) -> dict[str, SimpleNamespace]:
    times = [1.0 - spread, 1.0, 1.0 + spread]  # median 1 s: the relative spread is 2 x spread
    return {"copy": probe(copy, times), "matmul": probe(gemm, times, "8192 x 8192 x 8192 GEMM")}


def test_on_a_known_gpu_the_ceilings_are_the_datasheet_and_every_rate_a_share_of_it():
    spec = spec_from_rates(H100, "bf16", bytes_per_s=2.9e12, flops_per_s=7.1e14, step_overhead_s=45e-6,
                           provenance={"step_overhead_us": "skeleton"}, base=load_gpu("h100-sxm"), today=DAY,
                           probes=probes(copy=2.7e12, gemm=7.5e14))  # fmt: skip
    h100 = load_gpu("h100-sxm")
    assert spec.memory_bandwidth_gb_s == 3350 and spec.peak_tflops == h100.peak_tflops  # the datasheet's
    a = spec.achievable
    assert (a.basis, a.step_overhead_us) == ("measured", 45.0)
    assert a.bandwidth == pytest.approx(2.9e12 / 3.35e12, rel=1e-3)
    assert a.compute == pytest.approx(710 / 989.4, rel=1e-3)
    # expected reads the hardware's probes (issue 19: the sustained block), not the loop's own achievable shares
    rates = expected_rates(spec, "bf16")
    assert rates.bytes_per_s == pytest.approx(2.7e12, rel=1e-3) and rates.flops_per_s == pytest.approx(7.5e14, rel=1e-3)
    s = spec.sustained
    assert s is not None and s.copy_bandwidth.basis == s.gemm["bf16"].basis == "measured"
    assert s.copy_bandwidth.fraction == pytest.approx(2.7 / 3.35, rel=1e-3)
    assert s.gemm["bf16"].fraction == pytest.approx(750 / 989.4, rel=1e-3)
    assert s.gemm["fp8"] == h100.sustained.gemm["fp8"]  # type: ignore[union-attr]  # unprobed dtypes: the built-in's
    assert "NVIDIA H100 80GB HBM3" in s.copy_bandwidth.source and "torch 2.13.0" in s.copy_bandwidth.source
    assert "2026-12-01" in s.gemm["bf16"].source and "h100-sxm's datasheet" in s.gemm["bf16"].source
    assert spec.provenance["ceilings"] == "h100-sxm's datasheet"
    assert (spec.price_per_hour_usd, spec.price_range_usd) == (h100.price_per_hour_usd, h100.price_range_usd)
    assert spec.link == h100.link and spec.tdp_w == 700 and spec.expected_provenance.startswith("measured")
    assert "achievable: block (a measure loop's stream share and step overhead) prices tokcost measure's" in (
        spec.expected_provenance)  # --explain says the loop's own shares are not estimate's  # fmt: skip
    assert GpuSpec.model_validate(yaml.safe_load(spec_yaml(spec))) == spec


def test_a_measurement_above_the_datasheet_raises_its_ceiling_and_says_so():
    # an RTX 4090 boosts past the clock its 165.2 TFLOP/s assume: 170 measured is a share of 1 of a raised peak
    spec = spec_from_rates(H100, "bf16", bytes_per_s=8.9e11, flops_per_s=1.70e14, step_overhead_s=1e-4,
                           provenance={}, base=load_gpu("rtx-4090"), today=DAY,
                           probes=probes(copy=9.0e11, gemm=1.68e14))  # fmt: skip
    assert spec.peak_tflops["bf16"] == 170.0 and spec.achievable.compute == 1.0
    # the sustained GEMM share is the best GEMM seen: the loop's 170 over the probe's 168
    assert spec.sustained is not None and spec.sustained.gemm["bf16"].fraction == pytest.approx(1.0, abs=1e-3)
    assert spec.memory_bandwidth_gb_s == 1008  # the copy stayed under the datasheet
    assert spec.provenance["ceilings"] == "rtx-4090's datasheet, raised to what was measured for peak_tflops.bf16"


def test_without_a_datasheet_the_largest_rate_measured_is_the_ceiling():
    spec = spec_from_rates(CPU, "bf16", bytes_per_s=3.0e9, flops_per_s=4.0e10, step_overhead_s=1e-3,
                           provenance={}, today=DAY, probes=probes(copy=6.0e9, gemm=2.0e10))  # fmt: skip
    assert spec.memory_bandwidth_gb_s == 6.0 and spec.peak_tflops == {"bf16": 0.04, "fp16": 0.04}
    s = spec.sustained
    # the copy is the probe's; the GEMM the best seen, the loop's linears (40 GFLOP/s) over the probe's square (20)
    assert s is not None and s.copy_bandwidth.fraction == 1.0 and s.gemm["bf16"].fraction == 1.0
    assert spec.achievable.bandwidth == 0.5 and spec.achievable.compute == 1.0  # one of each pair sets the ceiling
    assert "no datasheet" in s.copy_bandwidth.source and "no datasheet" in spec.provenance["ceilings"]
    assert spec.tdp_w is None and spec.price_per_hour_usd is None


def test_a_loaded_cpus_rates_still_make_a_valid_spec():
    # issue 21: a starved 2-core machine streamed 0.5-0.9 GB/s, under the old 1 GB/s floor, and crashed
    for gb_s in (0.5, 0.05, 0.005):
        spec = spec_from_rates(CPU, "fp32", bytes_per_s=gb_s * 1e9, flops_per_s=2e8, step_overhead_s=5e-3,
                               provenance={}, probes=probes(copy=gb_s * 1e9, gemm=1e8))  # fmt: skip
        assert spec.memory_bandwidth_gb_s == pytest.approx(gb_s) and spec.peak_tflops == {"fp32": 0.0002}
        assert GpuSpec.model_validate(yaml.safe_load(spec_yaml(spec))) == spec


@pytest.mark.parametrize(
    ("bytes_per_s", "copy", "expect"),
    [(5e5, 5e5, "the bandwidth measured 0.0005 GB/s, under the 0.001 GB/s a spec can hold"),
     (1e7, 5e9, "the loop's weight stream ran at 0.20% of the")],
)  # fmt: skip
def test_a_stalled_measurement_is_refused_in_one_line(bytes_per_s, copy, expect):
    with pytest.raises(MeasureError, match=expect) as info:
        spec_from_rates(CPU, "fp32", bytes_per_s=bytes_per_s, flops_per_s=1e9, step_overhead_s=1e-3, provenance={},
                        probes=probes(copy=copy, gemm=1e9))  # fmt: skip
    assert "\n" not in str(info.value) and "nothing was written" in str(info.value)


def test_a_few_rows_gemm_under_one_percent_of_a_matrix_engine_still_makes_a_spec():
    # 8 prompt rows of a tiny model on a CPU core whose AMX multiplies large bf16 GEMMs at 1.3 TFLOP/s: 11 GFLOP/s,
    # 0.85% of the probe's rate, is the loop's own shape, not a stall (the stream keeps its 1% floor, above)
    spec = spec_from_rates(CPU, "bf16", bytes_per_s=1.6e9, flops_per_s=1.1e10, step_overhead_s=1e-3, provenance={},
                           probes=probes(copy=5e9, gemm=1.3e12), gemm_rows=8)  # fmt: skip
    assert spec.achievable.compute == pytest.approx(1.1e10 / 1.3e12, rel=1e-3)
    # the floor shrinks with the rows under 256 (8 rows: 1% x 8 / 256 = 0.031%): a stall is still refused there,
    # and at 256 rows and more the same 0.85% is one
    with pytest.raises(MeasureError, match="the loop's prefill GEMMs ran at 0.0077% of the"):
        spec_from_rates(CPU, "bf16", bytes_per_s=1.6e9, flops_per_s=1e8, step_overhead_s=1e-3, provenance={},
                        probes=probes(copy=5e9, gemm=1.3e12), gemm_rows=8)  # fmt: skip
    with pytest.raises(MeasureError, match="the loop's prefill GEMMs ran at 0.85% of the"):
        spec_from_rates(CPU, "bf16", bytes_per_s=1.6e9, flops_per_s=1.1e10, step_overhead_s=1e-3, provenance={},
                        probes=probes(copy=5e9, gemm=1.3e12), gemm_rows=4096)  # fmt: skip


def test_uncertainty_is_half_the_spread_of_the_repeats():
    spec = spec_from_rates(CPU, "fp32", bytes_per_s=1e9, flops_per_s=1e10, step_overhead_s=1e-3, provenance={},
                           probes=probes(copy=2e9, gemm=1e10, spread=0.1))  # fmt: skip
    s = spec.sustained
    assert s is not None  # repeats of 0.9, 1.0 and 1.1 s: a spread of 0.2 of the median, half of it on the share
    assert s.copy_bandwidth.uncertainty == pytest.approx(1.0 * 0.1) and s.gemm["fp32"].uncertainty == pytest.approx(0.1)


def test_a_user_datasheet_without_sustained_keeps_only_the_probed_peak():
    base = load_gpu("h100-sxm").model_copy(update={"sustained": None})
    spec = spec_from_rates(H100, "bf16", bytes_per_s=2.9e12, flops_per_s=7.1e14, step_overhead_s=45e-6,
                           provenance={}, base=base, probes=probes(copy=2.7e12, gemm=7.5e14))  # fmt: skip
    assert spec.peak_tflops == {"bf16": 989.4, "fp16": 989.4}  # a GEMM share exists for these only
    assert spec.sustained is not None and set(spec.sustained.gemm) == {"bf16"}


@pytest.mark.parametrize("name", ["l40s", "a40", "h100-nvl"])
def test_a_calibrated_spec_keeps_the_host_link_its_domain_needs(name):
    # the link joins only its domain (a CPU socket's 4 L40S, a bridged pair): a larger group rides the host link, so a
    # calibrated copy that kept the link but dropped the host link priced TP8 on one socket's ring, or refused TP4
    base = load_gpu(name)
    spec = spec_from_rates(H100, "bf16", bytes_per_s=8.0e11, flops_per_s=3.0e14, step_overhead_s=1e-4,
                           provenance={}, base=base, today=DAY)  # fmt: skip
    assert spec.link == base.link and spec.link is not None and spec.link.domain_gpus is not None
    assert spec.host_link == base.host_link and spec.host_link is not None
    assert GpuSpec.model_validate(yaml.safe_load(spec_yaml(spec))).host_link == base.host_link


def test_a_calibrated_hopper_keeps_the_older_kernel_classes_shares():
    # the copy and GEMM probes measure the GPU's own kernels; FlashAttention-2's and an Sm80 grouped GEMM's share of
    # them stay the base spec's, so vLLM 0.6's prefill and TensorRT-LLM 0.9's experts do not go native on a
    # calibrated H100
    base = load_gpu("h100-sxm")
    spec = spec_from_rates(H100, "bf16", bytes_per_s=2.7e12, flops_per_s=7.5e14, step_overhead_s=1e-4, today=DAY,
                           provenance={}, base=base, probes=probes(copy=2.7e12, gemm=7.5e14))  # fmt: skip
    assert spec.sustained is not None and base.sustained is not None
    assert spec.sustained.fa2_attention == base.sustained.fa2_attention is not None
    assert spec.sustained.mma_sync_gemm == base.sustained.mma_sync_gemm is not None
    again = GpuSpec.model_validate(yaml.safe_load(spec_yaml(spec)))
    assert again.sustained is not None and again.sustained.mma_sync_gemm == base.sustained.mma_sync_gemm
