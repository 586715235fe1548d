"""Every built-in GPU states what it sustains (copy and GEMM shares, each sourced) and what it costs per hour."""

from __future__ import annotations

import re

import pytest
from pydantic import ValidationError

from tokcost.catalog import builtin_names
from tokcost.hardware.library import load_gpu
from tokcost.hardware.spec import GpuSpec
from tokcost.hardware.sustained import Sustained, SustainedFigure

GPUS = builtin_names("gpus")
COPY_RANGE = (0.70, 0.95)  # a large copy streams 70-95% of the datasheet bandwidth on every GPU published
GEMM_RANGE = (0.40, 0.95)  # a large dense GEMM reaches 40-95% of the dense peak
OUT_OF_RANGE_NOTE = re.compile(r"above the usual|below the usual|capped at 1")  # such a figure says why


def figures(name: str) -> list[tuple[str, SustainedFigure]]:
    s = load_gpu(name).sustained
    assert s is not None, f"{name}: no sustained block"
    return [("copy_bandwidth", s.copy_bandwidth), *((f"gemm.{d}", f) for d, f in s.gemm.items())]


@pytest.mark.parametrize("name", GPUS)
def test_every_gpu_states_a_copy_and_a_gemm_share_per_dense_peak(name):
    g = load_gpu(name)
    assert g.sustained is not None
    for dtype in g.peak_tflops:  # fp16 may ride on bf16's entry and vice versa
        assert g.sustained.gemm_for(dtype) is not None, (name, dtype)


@pytest.mark.parametrize("name", GPUS)
def test_figures_lie_in_physical_ranges_or_say_why(name):
    for key, f in figures(name):
        low, high = COPY_RANGE if key == "copy_bandwidth" else GEMM_RANGE
        assert low <= f.fraction <= high or OUT_OF_RANGE_NOTE.search(f.source), (name, key, f.fraction)


@pytest.mark.parametrize("name", GPUS)
def test_measured_figures_cite_a_benchmark_and_anchors_state_an_assumption(name):
    for key, f in figures(name):
        if f.basis == "anchor":
            assert f.source.startswith("assumption:"), (name, key)
            assert f.uncertainty >= 0.05, (name, key)  # an assumption is never tighter than a measurement
        else:  # a repository, an issue or PR, or a page: something a reader can open
            assert re.search(r"github\.com/|/|issue #|PR #", f.source), (name, key)
        assert f.provenance.startswith(f"{f.basis}: ") and len(f.provenance) <= 110


@pytest.mark.parametrize("name", ["h100-sxm", "h200", "mi300x", "a100-40gb-sxm", "l40s", "h100-pcie", "rtx-4090"])
def test_most_used_skus_are_measured_not_assumed(name):
    s = load_gpu(name).sustained
    assert s is not None and s.gemm_for("bf16") is not None
    assert s.gemm_for("bf16").basis == "measured"  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("name", "key", "published", "datasheet"),
    [
        # gpu-benches gpu-stream (RRZE-HPC, commit 1038c5d), "scale" = copy, GB/s over the datasheet GB/s
        ("a40", "copy_bandwidth", 653, 696),
        ("a100-40gb-sxm", "copy_bandwidth", 1382, 1555),
        ("a100-80gb-sxm", "copy_bandwidth", 1737, 2039),
        ("h100-pcie", "copy_bandwidth", 1704, 2000),
        ("mi300x", "copy_bandwidth", 3997, 5300),
        # Azure AI-benchmarking-guide's HBM Copy, TB/s over the datasheet TB/s: one harness for both Hopper parts
        ("h100-sxm", "copy_bandwidth", 2.90, 3.35),
        ("h200", "copy_bandwidth", 4.01, 4.8),
        # cub::DeviceTransform "add" on B200 (NVIDIA/cccl PR #7391), TB/s over 8 TB/s
        ("b200", "copy_bandwidth", 6.721, 8.0),
        # AMD's Max-Achievable FLOPs with hipBLASLt (ROCm blog, 2025-02-28), TFLOPS over the dense peak
        ("mi300x", "gemm.bf16", 708, 1307.4),
        ("mi300x", "gemm.fp16", 654, 1307.4),
        ("mi300x", "gemm.fp8", 1273, 2614.9),
        # torch.mm, zzc0721/torch-performance-test-data database.md (commit 9d82827)
        ("h100-sxm", "gemm.bf16", (797.51 + 783.66) / 2, 989.4),
        ("h200", "gemm.bf16", 790.29, 989.4),
        ("h100-pcie", "gemm.bf16", 495.93, 756),
        ("l40s", "gemm.bf16", 269.15, 362.05),
        ("a100-80gb-sxm", "gemm.bf16", 264.53, 312),
        # nvfp4 torch._scaled_mm at 8192^3 on B200 (pytorch/ao PR #2427), FLOP/s over 9 PFLOP/s
        ("b200", "gemm.fp4", 5.37, 9.0),
        # torch.mm on two H20 rows (zzc0721, as above): the compute-starved part reaches 0.96 of its 148
        ("h20", "gemm.bf16", (141.86 + 142.25) / 2, 148),
        # rocprofiler-compute's memcopy on MI325X (ROCm/rocm-systems test_metric_validation.py), GB/s over 6000
        ("mi325x", "copy_bandwidth", 4287.31, 6000),
        ("mi325x", "gemm.bf16", 784.9, 1307.4),  # MAMF torch.matmul (stas00/ml-engineering)
        ("mi355x", "gemm.fp4", 5775, 10066.3),  # MXFP4 GEMM peak on MI355X (ROCm/aiter PR #2037)
        ("mi355x", "gemm.bf16", 1565.0, 2516.6),  # MAMF torch.matmul (stas00/ml-engineering, commit d3439bd)
        ("rtx-5090", "gemm.fp8", 388.91, 419),  # rowwise torch._scaled_mm at 4096^3 (pytorch/pytorch PR #155991)
        ("l40", "copy_bandwidth", 776, 864),  # gpu-benches gpu-stream/l40.txt, scale (copy)
        ("l40", "gemm.bf16", 170.3, 181.05),  # mamf-finder, github.com/mag-/gpu_benchmark README (commit 2218e0a)
        ("rtx-6000-ada", "gemm.bf16", 278.5, 364.2),  # the same table
        ("rtx-3090", "copy_bandwidth", 831, 936),  # chsasank/device-benchmarks 'Nvidia 3090'
        ("rtx-a6000", "gemm.bf16", 123.34, 154.8),  # torch.mm (zzc0721/torch-performance-test-data database.md)
        ("h200-nvl", "gemm.bf16", 811.6, 835.5),  # cuBLAS on one 600 W card (harshanavkis/loom-motivation-experiments)
        ("rtx-pro-6000", "gemm.bf16", 417.34, 480),  # torch.mm at 8192^3 (zzc0721/torch-performance-test-data #161)
        ("rtx-pro-6000", "gemm.tf32", 205.23, 240),  # the same issue
    ],
)
def test_measured_fractions_are_the_published_figures_over_the_datasheet(name, key, published, datasheet):
    figure = dict(figures(name))[key]
    assert figure.basis == "measured"
    assert figure.fraction == pytest.approx(published / datasheet, abs=0.01)
    assert f"{published:g}" in figure.source or f"{published:.2f}" in figure.source or key == "gemm.bf16"


def test_a_ranged_figure_covers_the_figures_it_spans():
    # B200 bf16: two torch.mm runs, 0.631 (pytorch/ao #2427, 8192^3) and 0.754 (zzc0721): 0.69 +- 0.07
    f = load_gpu("b200").sustained.gemm["bf16"]  # type: ignore[union-attr]
    assert f.fraction - f.uncertainty <= 1.42e15 / 2.25e15 and f.fraction + f.uncertainty >= 1696.03 / 2250
    # H100 SXM and H200 copy from one harness (Azure's), so the pair ranks like for like; H200's band reaches tokcost's
    # own probe on an H200 (torch copy_, median 4,232 GB/s), another method
    h100, h200 = (load_gpu(n).sustained.copy_bandwidth for n in ("h100-sxm", "h200"))  # type: ignore[union-attr]
    assert h200.fraction / h100.fraction == pytest.approx((4.01 / 4.8) / (2.90 / 3.35), abs=0.01)
    assert h200.fraction + h200.uncertainty >= 4232 / 4800


def test_fp16_falls_back_to_bf16_and_back():
    s = Sustained.model_validate({
        "copy_bandwidth": {"fraction": 0.9, "uncertainty": 0.04, "basis": "measured", "source": "a copy"},
        "gemm": {"bf16": {"fraction": 0.8, "uncertainty": 0.04, "basis": "measured", "source": "a GEMM"}},
    })  # fmt: skip
    assert s.gemm_for("fp16") is s.gemm["bf16"] and s.gemm_for("fp8") is None
    assert s.missing_gemm(["bf16", "fp16", "fp8"]) == ["fp8"]
    assert s.provenance == {"copy_bandwidth": "measured: a copy", "gemm.bf16": "measured: a GEMM"}


def test_the_spec_says_where_each_share_comes_from():
    where = load_gpu("mi300x").sustained_provenance
    assert (
        where["gemm.bf16"]
        == "measured: hipBLASLt bf16 on MI300X: 708 TFLOPS = 0.542 of 1307.4 at a 1207 MHz median clock"
    )
    assert where["gemm.int8"].startswith("anchor: the 16-bit GEMM share (0.54)")
    assert load_gpu("h100-sxm").model_copy(update={"sustained": None}).sustained_provenance == {}


def test_anchor_provenance_reads_as_the_assumption():
    f = SustainedFigure(fraction=0.8, uncertainty=0.1, basis="anchor", source="assumption: as the A10; more words")
    assert f.provenance == "anchor: as the A10"


@pytest.mark.parametrize("name", GPUS)
def test_every_gpu_has_a_dated_price_and_its_range_holds_it(name):
    g = load_gpu(name)
    assert g.price_per_hour_usd is not None and g.price_per_hour_usd > 0  # plan and compare never say "no price"
    where = g.provenance.get("price_per_hour_usd", "")
    assert re.search(r"20\d\d", where), f"{name}: a price needs its source and date"
    if g.price_range_usd is not None:
        low, high = g.price_range_usd
        assert low <= g.price_per_hour_usd <= high and "range" in where
    else:
        assert "no range" in where  # a single source says so


def test_price_range_is_strict():
    base = load_gpu("h100-sxm").model_dump()
    for bad in ([1.0], [1.0, 2.0, 3.0], ["1", "2"], [4.0, 3.0], [1.0, float("inf")]):
        with pytest.raises(ValidationError):
            GpuSpec.model_validate({**base, "price_range_usd": bad})


def test_the_issue_examples_are_refused_in_python_too():
    base = load_gpu("h100-sxm").model_dump()
    with pytest.raises(ValidationError, match="unknown network 'ib-ndr-40'; did you mean ib-ndr-400"):
        GpuSpec.model_validate({**base, "network": "ib-ndr-40"})
    with pytest.raises(ValidationError, match="131x the marketed memory_gb"):
        GpuSpec.model_validate({**base, "memory_runtime_mib": 10_000_000})
    # the ratio real parts report: HBM "80 GB" -> 81,559 MiB (1.069), GDDR "24 GB" with ECC -> 23,028 MiB (1.006)
    GpuSpec.model_validate({**base, "memory_runtime_mib": 81_559})
    GpuSpec.model_validate({**base, "memory_gb": 24, "memory_runtime_mib": 23_028})
