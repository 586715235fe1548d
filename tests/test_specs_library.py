"""Every built-in spec loads, has a source, and its derived counts match the published ones."""

from __future__ import annotations

from importlib import resources

import pytest
import yaml

from tokcost.catalog import builtin_names
from tokcost.hardware.library import load_gpu, load_network, match_device_name
from tokcost.models.library import load_model

REQUIRED_MODELS = [
    "llama-2-7b",
    "llama-2-13b",
    "llama-2-70b",
    "llama-3-8b",
    "llama-3.1-8b",
    "llama-3.1-70b",
    "llama-3.1-405b",
    "llama-3.3-70b",
    "llama-3.2-1b",
    "llama-3.2-3b",
    "mistral-7b",
    "mixtral-8x7b",
    "mixtral-8x22b",
    "qwen2.5-7b",
    "qwen2.5-72b",
    "qwen3-8b",
    "qwen3-32b",
    "qwen3-30b-a3b",
    "qwen3-235b-a22b",
    "deepseek-v3",
    "gemma-2-9b",
    "gemma-2-27b",
    "phi-3-mini",
    "gpt-oss-20b",
    "gpt-oss-120b",
]
REQUIRED_GPUS = [
    "h100-sxm",
    "h100-pcie",
    "h100-nvl",
    "h200",
    "a100-40gb-sxm",
    "a100-80gb-sxm",
    "a100-80gb-pcie",
    "l40s",
    "l4",
    "a10g",
    "a10",
    "rtx-4090",
    "mi300x",
    "b200",
    "a40",
    "h20",
    "mi325x",
    "mi355x",
    "rtx-5090",
    "b300",
    "gb200",
    "h800",
    "l40",
    "rtx-6000-ada",
    "rtx-3090",
    "rtx-pro-6000",
    "rtx-a6000",
    "h200-nvl",
]


def test_required_names_are_built_in():
    assert set(REQUIRED_MODELS) <= set(builtin_names("models"))
    assert set(REQUIRED_GPUS) <= set(builtin_names("gpus"))


@pytest.mark.parametrize("name", REQUIRED_MODELS)
def test_model_params_match_published_within_1_percent(name):
    m = load_model(name)
    assert m.source.startswith("https://"), "every model cites its config.json"
    assert m.params_total_stated is not None, "the published count is recorded to check the shapes against"
    assert abs(m.params_total / m.params_total_stated - 1) < 0.01


# Published counts, exact where HF safetensors give them (model cards and config.json of each model).
@pytest.mark.parametrize(
    ("name", "total"),
    [
        ("llama-2-7b", 6_738_415_616),  # HF safetensors metadata
        ("llama-3.1-8b", 8_030_261_248),  # "8.03B" on the model card
        ("llama-3.1-70b", 70_553_706_496),  # "70.55B"
    ],
)
def test_exact_parameter_counts(name, total):
    assert load_model(name).params_total == total


@pytest.mark.parametrize(
    ("name", "total_b", "active_b", "active_includes_embedding"),
    [
        ("mixtral-8x7b", 46.7, 12.9, True),  # Mistral AI blog: 46.7B total, 12.9B per token
        ("deepseek-v3", 671.0, 37.0, True),  # DeepSeek-V3 report: 671B total, 37B activated
        ("qwen3-30b-a3b", 30.5, 3.3, True),  # Qwen3 model card
        ("qwen3-235b-a22b", 235.0, 22.0, True),  # Qwen3 model card
        ("gpt-oss-120b", 116.8, 5.1, False),  # gpt-oss model card: active count excludes the embedding
        ("gpt-oss-20b", 20.9, 3.6, False),
    ],
)
def test_moe_total_and_active(name, total_b, active_b, active_includes_embedding):
    m = load_model(name)
    active = m.params_active if active_includes_embedding else m.params_active - m.params_embedding
    assert m.params_total / 1e9 == pytest.approx(total_b, rel=0.01)
    assert active / 1e9 == pytest.approx(active_b, rel=0.02)


def test_moe_active_is_attention_shared_topk_and_dense_parts():
    m = load_model("deepseek-v3")
    expected = (
        m.layers * m.params_attention_per_layer
        + m.dense_mlp_layers * m.params_dense_mlp_per_layer
        + m.moe_layers * (8 * m.params_per_expert + m.params_shared_experts_per_layer + m.params_router_per_layer)
        + m.params_norms
        + m.params_embedding
        + m.params_lm_head
    )
    assert m.params_active == expected


@pytest.mark.parametrize("name", REQUIRED_GPUS)
def test_gpu_specs_have_sources_and_dense_peaks(name):
    g = load_gpu(name)
    assert g.source.strip()
    assert all(isinstance(v, float | int) and v > 0 for v in g.peak_tflops.values())
    assert g.memory_bandwidth_gb_s > 0 and g.memory_gb > 0


def test_datasheet_figures():
    # NVIDIA H100 datasheet, SXM: 3.35 TB/s, 1,979 TFLOPS bf16 with sparsity -> 989.4 dense
    h100 = load_gpu("h100-sxm")
    assert h100.memory_bandwidth_gb_s == 3350
    assert h100.peak_tflops["bf16"] == pytest.approx(989.4)
    # H200: same compute, 4.8 TB/s HBM3e
    assert load_gpu("h200").memory_bandwidth_gb_s == 4800
    # RTX 4090: the FP32-accumulate rate (what PyTorch matmuls use), not the FP16-accumulate 330
    assert load_gpu("rtx-4090").peak_tflops["bf16"] == pytest.approx(165.2)
    # RTX 5090 likewise: 209.5 with FP32 accumulate, not the 419 (FP16 accumulate, or 2:4 sparse)
    assert load_gpu("rtx-5090").peak_tflops["bf16"] == pytest.approx(209.5)
    # H20: 148 dense bf16 (torch.mm reaches 142, which a sparse 148 would rule out), 4.0 TB/s
    h20 = load_gpu("h20")
    assert h20.peak_tflops["bf16"] == pytest.approx(148) and h20.memory_bandwidth_gb_s == 4000
    # MI325X: the MI300X's compute die with 256 GB at 6 TB/s; MI355X: 2,400 MHz x 256 CUs x 4,096 FLOP/clk
    assert load_gpu("mi325x").peak_tflops["bf16"] == load_gpu("mi300x").peak_tflops["bf16"]
    assert load_gpu("mi355x").peak_tflops["bf16"] == pytest.approx(2.4e9 * 256 * 4096 / 1e12, abs=0.1)
    # The L40 halves FP32-accumulate tensor math (181.05), the L40S and the RTX 6000 Ada (same AD102) run it at full
    # rate: 142 SMs x 4 tensor cores x 256 FLOP/clk x 2.505 GHz = 364.2 on the RTX 6000 Ada
    assert load_gpu("l40").peak_tflops["bf16"] == pytest.approx(181.05)
    assert load_gpu("rtx-6000-ada").peak_tflops["bf16"] == pytest.approx(142 * 4 * 256 * 2.505e9 / 1e12, abs=0.1)
    # RTX 3090: 328 tensor cores x 128 FLOP/clk x 1.695 GHz = 71.2 with FP32 accumulate (GA102 whitepaper: 71)
    assert load_gpu("rtx-3090").peak_tflops["bf16"] == pytest.approx(328 * 128 * 1.695e9 / 1e12, rel=0.01)
    # H200 NVL: the H200's die and memory, its tensor peaks the datasheet's sparse NVL column halved (1,671 / 2)
    nvl = load_gpu("h200-nvl")
    assert nvl.memory_bandwidth_gb_s == 4800 and nvl.peak_tflops["bf16"] == pytest.approx(1671 / 2)
    # RTX A6000: the professional GA102 runs FP32-accumulate tensor math at full rate, 336 x 256 x 1.8 GHz = 154.8
    assert load_gpu("rtx-a6000").peak_tflops["bf16"] == pytest.approx(336 * 256 * 1.8e9 / 1e12, abs=0.1)
    # RTX PRO 6000 Server Edition: GDDR7 at 12,481 MHz on 512 bits, double data rate = 1,597 GB/s; dense BF16 4x FP32
    pro = load_gpu("rtx-pro-6000")
    assert pro.memory_bandwidth_gb_s == pytest.approx(12_481e6 * 512 * 2 / 8 / 1e9, abs=1)
    assert pro.peak_tflops["bf16"] == pytest.approx(4 * pro.peak_tflops["fp32"])


@pytest.mark.parametrize("kind", ["models", "gpus", "networks"])
def test_every_yaml_loads_to_numbers(kind):
    """The PyYAML 1.1 trap: `3.35e12` loads as a string. Every numeric leaf must be a number."""
    folder = resources.files("tokcost") / "specs" / kind
    for entry in folder.iterdir():
        data = yaml.safe_load(entry.read_text())
        for key, value in _leaves(data):
            if isinstance(value, str):
                assert not _looks_numeric(value), f"{entry.name}: {key} is the string {value!r}"


def _leaves(data, prefix=""):
    if isinstance(data, dict):
        for k, v in data.items():
            yield from _leaves(v, f"{prefix}{k}.")
    elif isinstance(data, list):
        for i, v in enumerate(data):
            yield from _leaves(v, f"{prefix}{i}.")
    else:
        yield prefix, data


def _looks_numeric(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


@pytest.mark.parametrize(
    ("runtime_name", "spec"),
    [
        ("NVIDIA H100 80GB HBM3", "h100-sxm"),
        ("NVIDIA L40S", "l40s"),
        ("NVIDIA L4", "l4"),
        ("NVIDIA A100-SXM4-80GB", "a100-80gb-sxm"),
        ("NVIDIA A10G", "a10g"),
        ("NVIDIA A40", "a40"),
        ("NVIDIA RTX A4000", None),
        ("Intel Xeon", None),
        ("NVIDIA H20", "h20"),
        ("NVIDIA H200", "h200"),  # the whole name, though "NVIDIA H20" is inside it
        ("NVIDIA GeForce RTX 5090", "rtx-5090"),
        ("AMD Instinct MI325X", "mi325x"),
        ("AMD Instinct MI355X", "mi355x"),
        ("AMD Instinct MI300X VF", "mi300x"),  # a virtual function of the same part: the longest name it holds
        # another part whose name holds a spec's: no spec rather than the wrong one (sibling_device_names)
        ("NVIDIA H20-3e", None),  # 141 GB HBM3e, not the 96 GB H20
        ("NVIDIA H200 NVL", "h200-nvl"),  # the 600 W PCIe part by its whole name, not the H200 SXM (nor the H20)
        ("NVIDIA L40", "l40"),  # the whole name: not the L4, whose spec lists "NVIDIA L40" as a sibling
        ("NVIDIA L40-48Q", None),  # a vGPU slice of the L40, with its own memory
        ("NVIDIA RTX 6000 Ada Generation", "rtx-6000-ada"),
        ("NVIDIA RTX A6000", "rtx-a6000"),  # the Ampere card, not the RTX 6000 Ada
        ("NVIDIA GeForce RTX 3090", "rtx-3090"),
        ("NVIDIA GeForce RTX 3090 Ti", None),  # 450 W, another part
        ("NVIDIA RTX PRO 6000 Blackwell Server Edition", "rtx-pro-6000"),
        ("NVIDIA RTX PRO 6000 Blackwell Workstation Edition", None),  # 1,792 GB/s, not the Server Edition's 1,597
        ("NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition", None),
        ("NVIDIA A100-PCIE-40GB", None),  # not the A10
        ("NVIDIA GeForce RTX 4090 D", None),
        ("NVIDIA GeForce RTX 5090 D", None),
        ("AMD Instinct MI350X", None),  # the 1,000 W sibling of the MI355X
        ("NVIDIA GeForce RTX 4090 Laptop GPU", None),  # an AD103 with 16 GB
        ("AMD Instinct MI300X HF", None),  # its own product name in amdgpu.ids
        ("NVIDIA B300 SXM6 AC", "b300"),
        ("NVIDIA GB200", "gb200"),  # not the B200: "NVIDIA B200" is not inside it
        ("NVIDIA H800", "h800"),
        ("NVIDIA H800 PCIe", None),  # the PCIe card, not the SXM5 part
    ],
)
def test_runtime_names_match_the_right_spec(runtime_name, spec):
    assert match_device_name(runtime_name) == spec


# Runtime totals as nvidia-smi prints them ("Total", MiB); the provenance of each spec names the log.
@pytest.mark.parametrize(
    ("name", "mib"),
    [
        ("h100-sxm", 81_559),  # NVIDIA/nccl issue #1264: "0MiB /  81559MiB" on NVIDIA H100 80GB HBM3
        ("h200", 143_771),  # sgl-project/sglang issue #3196: "124585MiB / 143771MiB" on NVIDIA H200
        ("a100-80gb-sxm", 81_920),  # thamada/nvidia-smi gls/A100SXMx4_smi.py
        ("a40", 46_068),  # thamada/nvidia-smi gls/A40x10_smi.py; vllm-project/vllm issue #6623
        ("b200", 183_359),  # NVIDIA/TensorRT-LLM issue #10278
        ("h20", 97_871),  # NVIDIA/nvtrust issue #128: "0MiB /  97871MiB" on 8x NVIDIA H20
        ("mi325x", 262_128),  # ROCm/ROCm issue #6023: rocminfo's pool of 268,419,072 KB
        ("rtx-5090", 32_607),  # nvidia-smi on NVIDIA GeForce RTX 5090 (club-3090 issues #617, #1261)
    ],
)
def test_runtime_memory_is_the_printed_total(name, mib):
    g = load_gpu(name)
    assert g.memory_runtime_mib == mib
    assert g.memory_bytes == mib * 2**20


@pytest.mark.parametrize("name", REQUIRED_GPUS)
def test_a_sibling_name_says_which_part_it_is(name):
    g = load_gpu(name)
    if g.sibling_device_names:
        where = g.provenance.get("sibling_device_names", "")
        assert all(sibling.split()[-1] in where for sibling in g.sibling_device_names), name
        # a sibling holds one of the spec's own names (else it could never pick this spec anyway)
        assert all(any(own.lower() in sib.lower() for own in g.device_names) for sib in g.sibling_device_names), name


@pytest.mark.parametrize("name", REQUIRED_GPUS)
def test_every_link_and_runtime_figure_names_its_source(name):
    g = load_gpu(name)
    if g.memory_runtime_mib is not None:
        assert g.provenance.get("memory_runtime_mib", "").strip(), "a runtime total needs the log that prints it"
    for link in (g.link, g.host_link):
        if link is not None:
            assert "PLACEHOLDER" not in link.source and "github.com" in link.source
    # the old interconnect keys and their placeholder latency are gone from the prose too
    text = " ".join([g.source, g.notes, *g.provenance.values()])
    assert "interconnect_gb_s" not in text and "interconnect_latency_us" not in text


@pytest.mark.parametrize("name", REQUIRED_GPUS)
def test_every_gpu_names_a_built_in_network(name):
    g = load_gpu(name)
    assert g.network in builtin_names("networks")


def test_bridged_pairs_carry_a_host_link():
    # an NVLink bridge joins two GPUs; the rest of the node talks over PCIe
    for name in ("h100-nvl", "a40"):
        g = load_gpu(name)
        assert g.link is not None and g.link.kind == "nvlink-bridge" and g.link.domain_gpus == 2
        assert g.host_link is not None and g.host_link.kind.startswith("pcie")
    # A40 datasheet: NVLink 112.5 GB/s bidirectional; H100 NVL: 600 GB/s bidirectional
    assert load_gpu("a40").link.gb_s == pytest.approx(112.5 / 2)
    assert load_gpu("h100-nvl").link.gb_s == 600 / 2


def test_an_eight_l40s_ring_crosses_the_cpu_sockets():
    # flashinfer PR #4870: 8 x L40S as two 4-GPU islands under two sockets, no PCIe switch; bare copies at a ring's own
    # pattern: 25.46 GB/s a rank within an island, 20.75 across all 8 ranks. NCCL #1530: 42.14 us at 8 B on 8 x AD102
    from tokcost.engine.collectives import links_of
    from tokcost.engine.layout import Layout

    g = load_gpu("l40s")
    assert g.link is not None and g.link.domain_gpus == 4
    # NCCL's model within a socket, times the measured cost of the crossing (the 8-rank ring over a one-island ring)
    assert g.host_link is not None and g.host_link.efficiency == pytest.approx(0.75 * 20.75 / 25.46, abs=0.005)
    assert g.host_link.latency_us == pytest.approx(42.1)
    links = links_of(g, None)
    island = links.path(4, Layout(tp=4), expected=True)
    node = links.path(8, Layout(tp=8), expected=True)
    # within a socket: NCCL's model (6.6 + 6 hops x 1.0 us) at 0.75 of 32 GB/s; across the sockets the measured ring
    assert island.latency_s == pytest.approx(12.6e-6) and island.bytes_per_s == pytest.approx(0.75 * 32e9)
    assert node.latency_s == pytest.approx(42.1e-6) and node.bytes_per_s == pytest.approx(0.61 * 32e9)


def test_link_figures_from_published_runs():
    # NVIDIA/nccl-tests #212: ring busbw ~370 of the 450 GB/s NVLink4 line rate
    assert load_gpu("h100-sxm").link.efficiency == pytest.approx(370 / 450, abs=0.005)
    # NVIDIA/nccl #1530: 42.14 us for an 8-byte all-reduce on 8 RTX 4090 (P2P disabled, through host memory)
    assert load_gpu("rtx-4090").link.latency_us == pytest.approx(42.1)
    # NCCL's model (src/graph/tuning.cc): 6.6 us + 14 PCIe hops x 1.0 us at 8 GPUs
    assert load_gpu("l40s").link.latency_us == pytest.approx(6.6 + 14 * 1.0)


@pytest.mark.parametrize(
    ("name", "gbit"),
    [
        ("eth-100", 100),
        ("ib-hdr-200", 200),
        ("roce-200", 200),
        ("ib-ndr-400", 400),
        ("roce-400", 400),
        ("ib-xdr-800", 800),
    ],
)
def test_networks_are_line_rate_per_direction(name, gbit):
    net = load_network(name)
    assert net.gb_s == gbit / 8
    assert 0.5 < net.efficiency <= 1 and net.latency_us > 0
    assert "PLACEHOLDER" not in net.source


def test_dense_int4_peaks():
    # A100 datasheet: INT4 1,248 | 2,496* TOPS, twice the INT8 rate (tokcost issue 10)
    for name in ("a100-40gb-sxm", "a100-80gb-sxm", "a100-80gb-pcie"):
        peaks = load_gpu(name).peak_tflops
        assert peaks["int4"] == 1248 == 2 * peaks["int8"]
    assert load_gpu("a40").peak_tflops["int4"] == pytest.approx(598.7)  # A40 datasheet 598.7 | 1,197.4*
    assert load_gpu("b200").peak_tflops["fp4"] == 9000  # HGX B200 FP4 18 PF sparse


@pytest.mark.parametrize("name", REQUIRED_GPUS)
def test_a_smaller_group_takes_fewer_ring_hops(name):
    # NCCL's model (base + 2 (n - 1) hops): each link states the group its latency is at and the hop; a pair on an
    # 8-GPU fabric paid the whole group's latency per all-reduce (B200: 15.0 us where the model gives 7.8)
    g = load_gpu(name)
    for link in (g.link, g.host_link):
        if link is None:
            continue
        assert link.latency_ranks in (2, 8) and link.latency_hop_us in (0.6, 0.8, 1.0)
        assert link.latency_at_s(link.latency_ranks) == pytest.approx(link.latency_s)
        steps = [link.latency_at_s(n) for n in range(2, link.latency_ranks + 1)]
        assert all(
            b - a == pytest.approx(2 * link.latency_hop_us * 1e-6) for a, b in zip(steps, steps[1:], strict=False)
        )
        assert steps[0] > 0 and link.latency_at_s(1) == steps[0]  # one rank prices as a pair, never below


def test_group_latencies_by_hand():
    assert load_gpu("b200").link.latency_at_s(2) == pytest.approx((6.6 + 2 * 0.6) * 1e-6)  # NCCL's own figure at 2
    assert load_gpu("mi300x").link.latency_at_s(4) == pytest.approx((23.2 - 8 * 0.8) * 1e-6)  # RCCL: 12.0 + 6 x 0.8
    assert load_gpu("l40s").link.latency_at_s(4) == pytest.approx(12.6e-6)  # the spec's own "12.6 at 4"


def test_a_link_states_both_latency_scaling_keys_or_neither(tmp_path):
    from tokcost.hardware.spec import Link

    base = {"kind": "nvlink4", "gb_s": 450, "latency_us": 12.5, "source": "mine"}
    assert Link.model_validate({**base, "latency_ranks": 8, "latency_hop_us": 0.6}).latency_at_s(2) > 0
    assert Link.model_validate(base).latency_at_s(2) == pytest.approx(12.5e-6)  # no scaling stated: as given
    with pytest.raises(ValueError, match="latency_ranks and latency_hop_us go together"):
        Link.model_validate({**base, "latency_ranks": 8})
