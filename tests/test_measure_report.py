"""Measured-vs-predicted arithmetic on hand-made loop results (no torch): MBU, errors, noise, specs, NVML."""

from __future__ import annotations

import sys
import types
from types import SimpleNamespace

import pytest

from tokcost.engine.estimate import estimate
from tokcost.engine.roofline import expected_rates
from tokcost.hardware.library import load_gpu
from tokcost.measure import nvml
from tokcost.measure.calibrate import DeviceFacts, fit_allreduce, measured_link, skeleton, spec_from_rates
from tokcost.measure.report import loop_calibrated, loop_profile, memory_fit, run_dict, run_report, workload_of
from tokcost.measure.stats import spread
from tokcost.models.library import load_model
from tokcost.profiles import GENERIC


def fake_loop(batch=1, prompt=512, output=128, ttft_s=0.05, tpot_s=0.01, cv=0.01, contexts=None, tp=1, **kw):
    spec = load_model("llama-3.1-8b")
    steady = SimpleNamespace(median=tpot_s, cv=cv, noisy=cv > 0.1, as_dict=lambda: {})
    contexts = contexts or list(range(prompt + 1, prompt + output))
    kv = batch * sum(contexts) / len(contexts) * spec.kv_bytes_per_token("bf16")
    values = dict(dtype="bf16", batch=batch, prompt_tokens=prompt, output_tokens=output, tp=tp, mode="eager",
                  threads=None, context_tokens=prompt + output, decode_contexts=contexts, ttft_s=ttft_s, tpot_s=tpot_s,
                  ttft=SimpleNamespace(median=ttft_s, noisy=False, as_dict=lambda: {}), tpot=steady, step=steady,
                  decode_tokens_per_s=batch / tpot_s, weight_read_bytes=15.0e9, kv_read_bytes=kv,
                  experts_per_layer=None, collective_s_per_step=None, joules_per_output_token=None,
                  avg_power_w=None)  # fmt: skip
    return SimpleNamespace(**(values | kw))


def test_mbu_uses_the_bytes_the_loop_read():
    spec, h100 = load_model("llama-3.1-8b"), load_gpu("h100-sxm")
    loop = fake_loop()
    r = run_report(spec, loop, datasheet=h100, calibrated=None, copy_bytes_per_s=3.0e12)
    assert r.bytes_per_step == 15.0e9 + loop.kv_read_bytes
    assert r.mbu == pytest.approx(r.bytes_per_step / 0.01 / 3.35e12)
    assert r.mbu_vs_copy == pytest.approx(r.bytes_per_step / 0.01 / 3.0e12)
    assert r.mfu_prefill == pytest.approx(r.prefill_flops / 0.05 / 989.4e12)


def test_engine_bytes_at_the_loops_contexts():
    # llama-3.1-8b bf16: weights read per step = everything but the embedding table, plus 1 row of it;
    # KV: 131,072 B/token x the mean context read (513..639 -> 576)
    spec = load_model("llama-3.1-8b")
    r = run_report(spec, fake_loop(), datasheet=None, calibrated=None, copy_bytes_per_s=None)
    assert r.engine_bytes["weights"] == (spec.params_total - spec.params_embedding) * 2 + 4096 * 2
    assert r.engine_bytes["kv_read"] == pytest.approx(576 * 131_072)


def test_predictions_price_the_loops_own_steps():
    spec, h100 = load_model("llama-3.1-8b"), load_gpu("h100-sxm")
    r = run_report(spec, fake_loop(tpot_s=0.01), datasheet=h100, calibrated=h100, copy_bytes_per_s=None)
    assert r.datasheet.tpot_error == pytest.approx(r.datasheet.tpot_s / 0.01 - 1)
    # exact reads over 513..639 cached slots: the mean step is the engine's TPOT for prompt 513, output 128, whose
    # steps hold P .. P + O - 2 = 513..639 cached tokens
    e = estimate(spec, h100, workload_of("bf16", 1, 513, 128))
    assert r.datasheet.tpot_s == pytest.approx(e.ceiling.tpot_s, rel=1e-9)
    prefill = estimate(spec, h100, workload_of("bf16", 1, 512, 128))
    assert r.datasheet.ttft_s == pytest.approx(prefill.ceiling.ttft_s, rel=1e-9)
    assert r.datasheet_expected.tpot_s >= r.datasheet.tpot_s
    assert sum(r.datasheet.terms.values()) == pytest.approx(r.datasheet.tpot_s)
    d = run_dict(r)
    assert set(d["predicted"]) == {"datasheet", "datasheet_expected", "calibrated"}
    assert set(d["predicted"]["datasheet"]["terms_s"]) == {"weights", "attention", "communication", "other", "overhead"}


def test_a_compiled_gpu_loop_is_expected_as_the_torch_compile_engine():
    # the loop in compile mode is a torch.compile'd decode loop with CUDA graphs (gpt-fast's kind): "expected" is that
    # profile's, not the hardware alone; on a CPU or in graph/eager mode no profile describes the loop
    spec, h100 = load_model("llama-3.1-8b"), load_gpu("h100-sxm")
    compiled = loop_profile("compile", on_gpu=True)
    assert compiled.name == "torch-compile"
    assert loop_profile("graph", on_gpu=True) is GENERIC and loop_profile("compile", on_gpu=False) is GENERIC
    r = run_report(spec, fake_loop(tpot_s=0.01), datasheet=h100, calibrated=None, copy_bytes_per_s=None,
                   expected_engine=compiled)  # fmt: skip
    e = estimate(spec, h100, workload_of("bf16", 1, 513, 128), engine=compiled)
    assert r.datasheet_expected.tpot_s == pytest.approx(e.expected.tpot_s, rel=1e-9)
    assert r.datasheet_expected.tpot_s > estimate(spec, h100, workload_of("bf16", 1, 513, 128)).expected.tpot_s
    assert run_dict(r)["expected_engine"] == "torch-compile"


def test_bucketed_reads_are_priced_as_read():
    # A bucketed loop read 640 slots every step: the prediction is the engine's step at context 640.
    spec, h100 = load_model("llama-3.1-8b"), load_gpu("h100-sxm")
    r = run_report(spec, fake_loop(contexts=[640] * 127), datasheet=h100, calibrated=None, copy_bytes_per_s=None)
    e = estimate(spec, h100, workload_of("bf16", 1, 640, 2))  # its one decode step holds 640 cached tokens
    assert r.engine_bytes["kv_read"] == pytest.approx(640 * 131_072)
    assert r.datasheet.tpot_s == pytest.approx(e.ceiling.tpot_s, rel=1e-12)


def test_a_noisy_run_gets_no_error_figure():
    spec, h100 = load_model("llama-3.1-8b"), load_gpu("h100-sxm")
    r = run_report(spec, fake_loop(cv=0.25), datasheet=h100, calibrated=h100, copy_bytes_per_s=None)
    assert r.noisy and r.datasheet.tpot_error is None and r.calibrated.tpot_error is None
    assert r.datasheet.tpot_s > 0  # the prediction itself is still shown


def test_spread_by_hand():
    s = spread([4.0, 1.0, 3.0, 2.0, 100.0])
    assert (s.n, s.min, s.median, s.q1, s.q3, s.iqr) == (5, 1.0, 3.0, 2.0, 4.0, 2.0)
    # mean 22, population sd sqrt(((18^2 + 21^2 + 19^2 + 20^2 + 78^2) / 5) = 39.01
    assert s.cv == pytest.approx(39.0128 / 22, rel=1e-4) and s.noisy
    steady = spread([1.0, 1.02, 0.98])
    assert not steady.noisy and steady.as_dict()["iqr"] == pytest.approx(0.02)
    assert spread([2.5]).cv == 0.0


def test_allreduce_fit_recovers_latency_and_bus_bandwidth():
    # t = 20 us + 2 (N-1)/N x bytes / 100 GB/s on 4 ranks: the fit must return both exactly
    rows = [{"bytes": b, "seconds": 20e-6 + 1.5 * b / 100e9} for b in (1024, 65536, 2**20, 2**24)]
    fit = fit_allreduce(rows, 4, "nccl")
    assert fit["latency_us"] == pytest.approx(20.0) and fit["bus_gb_s"] == pytest.approx(100.0)
    assert fit["sizes"][-1]["bus_gb_s"] == pytest.approx(1.5 * 2**24 / (20e-6 + 1.5 * 2**24 / 100e9) / 1e9)
    link = measured_link(fit, load_gpu("h100-sxm"))
    assert (link.kind, link.gb_s, link.latency_us) == (load_gpu("h100-sxm").link.kind, 100.0, 20.0)
    # measured on 4 ranks: a pair pays 2 hops less (the datasheet link's 0.6 us each), 8 ranks 4 hops more; a
    # calibrated link charged its own group's latency at every size, the bug built-in specs had
    assert (link.latency_ranks, link.latency_hop_us) == (4, 0.6)
    assert link.latency_at_s(2) == pytest.approx((20.0 - 2 * 2 * 0.6) * 1e-6)
    assert link.latency_at_s(8) == pytest.approx((20.0 + 2 * 4 * 0.6) * 1e-6)
    bare = measured_link(fit, None)  # no datasheet link: no hop to scale by, the measured figure at every size
    assert bare.latency_ranks is None and bare.latency_at_s(2) == pytest.approx(20e-6)


@pytest.mark.parametrize(("ranks", "bus"), [(2, 48.0), (8, 336.0)])
def test_a_link_measured_on_a_mesh_keeps_the_mesh(ranks, bus):
    # an MI300X pair measures one link's 48 GB/s, 8 ranks all 7 links' 336: either way the calibrated link prices
    # every group as the datasheet's mesh does ((n - 1) / 7 of the node's rate), not the measured group's at all
    fit = {"ranks": ranks, "bus_gb_s": bus, "latency_us": 20.0, "backend": "rccl", "summary": "rccl-tests"}
    link = measured_link(fit, load_gpu("mi300x"))
    assert link.peer_links == 7 and link.gb_s == pytest.approx(336.0)
    assert [link.group_bytes_per_s(n) / 1e9 for n in (2, 4, 8)] == pytest.approx([48.0, 144.0, 336.0])


def test_calibrated_cpu_spec_has_no_power():
    facts = DeviceFacts("cpu", "x86_64", 24e9, None, "n/a", "2.13.0")
    spec = spec_from_rates(facts, "fp32", bytes_per_s=2.0e10, flops_per_s=5e10, step_overhead_s=1e-3, provenance={})
    assert spec.tdp_w is None and spec.name == "cpu-x86-64-calibrated" and spec.peak_tflops == {"fp32": 0.05}


def test_skeleton_keeps_depth_routing_and_windows_at_near_zero_width():
    for name in ("llama-3.1-8b", "mixtral-8x7b", "deepseek-v3", "gemma-2-9b"):
        spec = load_model(name)
        s = skeleton(spec, tp=2)
        assert s.layers == spec.layers and s.sliding_window == spec.sliding_window
        assert (
            (s.moe.experts, s.moe.experts_per_token) == (spec.moe.experts, spec.moe.experts_per_token)
            if spec.moe
            else s.moe is None
        )
        assert (s.mla is None) == (spec.mla is None)
        assert s.params_total < spec.params_total / 1000  # near-zero width


def test_memory_fit_names_the_max_batch_and_layers():
    # llama-3.1-8b bf16 in 20 GB: 16.06 GB of weights + 10% reserve leave room for a few sequences of 640
    # tokens. In 4 GB: 4 - 0.4 reserve - 2.10 embedding and LM head - 0.05 workspace = 1.45 GB, and a layer
    # takes 0.436 GB of weights + 2.6 MB of KV: 3 layers fit.
    spec = load_model("llama-3.1-8b")
    fit = memory_fit(spec, "bf16", 64, 512, 128, 1, 20e9)
    assert not fit["fits"] and 0 < fit["max_batch"] < 64 and fit["max_layers"] == spec.layers
    assert memory_fit(spec, "bf16", fit["max_batch"], 512, 128, 1, 20e9)["fits"]
    small = memory_fit(spec, "bf16", 1, 512, 128, 1, 4e9)
    assert not small["fits"] and small["max_batch"] == 0 and small["max_layers"] == 3


def _fake_pynvml(uuids: list[str], energy_mj: list[int]) -> types.ModuleType:
    """A stand-in pynvml: GPUs by index with the given UUIDs, an H100 SXM's clocks, 700 W limit."""
    fake = types.ModuleType("pynvml")
    fake.NVML_CLOCK_MEM = 2
    fake.NVMLError = type("NVMLError", (Exception,), {})
    fake.nvmlInit = fake.nvmlShutdown = lambda: None
    fake.nvmlDeviceGetCount = lambda: len(uuids)
    fake.nvmlDeviceGetHandleByIndex = lambda index: index
    fake.nvmlDeviceGetUUID = lambda handle: uuids[handle]
    fake.nvmlDeviceGetName = lambda handle: f"NVIDIA H100 80GB HBM3 #{handle}"
    fake.nvmlDeviceGetMemoryInfo = lambda handle: types.SimpleNamespace(total=80 * 2**30)
    fake.nvmlSystemGetDriverVersion = lambda: "550.54.15"
    fake.nvmlDeviceGetMaxClockInfo = lambda handle, kind: 2619
    fake.nvmlDeviceGetMemoryBusWidth = lambda handle: 5120
    fake.nvmlDeviceGetEnforcedPowerLimit = lambda handle: 700_000
    fake.nvmlDeviceGetPowerUsage = lambda handle: 350_000
    fake.nvmlDeviceGetTotalEnergyConsumption = lambda handle: energy_mj.pop(0) if energy_mj else 0
    return fake


def test_nvml_finds_the_gpu_torch_uses_by_uuid(monkeypatch):
    # CUDA_VISIBLE_DEVICES=2 makes torch's cuda:0 NVML's index 2; torch prints the UUID without "GPU-".
    uuids = ["GPU-aaaa-0000", "GPU-bbbb-1111", "GPU-cccc-2222"]
    monkeypatch.setitem(sys.modules, "pynvml", _fake_pynvml(uuids, energy_mj=[]))
    info = nvml.device_info(0, uuid="cccc-2222")
    assert info is not None and info.index == 2 and info.name.endswith("#2")
    # 2 x 2619e6 Hz x 5120 bits / 8 = 3.352e12 B/s: the H100 SXM datasheet's 3.35 TB/s.
    assert info.theoretical_bandwidth_bytes_per_s == pytest.approx(3.352e12, rel=1e-3)
    notes: list[str] = []
    assert nvml.device_info(0, notes, uuid="dddd").index == 0 and "no GPU with UUID dddd" in notes[0]


def test_energy_meter_reads_the_counter_around_the_phase(monkeypatch):
    # 1,000,000 mJ at start, 1,250,000 mJ at stop: 250 J in the phase, whatever the power samples say.
    monkeypatch.setitem(sys.modules, "pynvml", _fake_pynvml(["GPU-x"], energy_mj=[1_000_000, 1_250_000]))
    meter = nvml.EnergyMeter(uuid="x", interval_s=0.001)
    meter.start()
    assert meter.stop() == 250.0 and meter.method == "energy"
    stuck = nvml.EnergyMeter(uuid="x", interval_s=0.001)  # the counter returns 0 from now on: samples x time
    stuck.start()
    joules = stuck.stop()
    assert stuck.method == "samples" and joules is not None and joules > 0


def test_nvml_missing_returns_none_with_a_reason(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import pynvml now raises ImportError
    notes: list[str] = []
    assert nvml.device_info(0, notes) is None and "pynvml is not installed" in notes[0]
    meter = nvml.EnergyMeter()
    meter.start()
    assert meter.stop() is None


def test_engine_expectation_for_moe_experts_and_replicated_kv():
    # mixtral-8x7b, top-2 of 8: at batch 4 the engine expects 8 x (1 - (6/8)^4) = 5.47 distinct experts per layer
    spec = load_model("mixtral-8x7b")
    r = run_report(spec, fake_loop(batch=4, experts_per_layer=5.0), datasheet=None, calibrated=None,
                   copy_bytes_per_s=None)  # fmt: skip
    assert r.engine_bytes["experts_per_layer"] == pytest.approx(8 * (1 - 0.75**4))
    # llama-3.1-8b over 16 ranks: 8 KV heads, so each rank holds (and reads) one head: 1/8 of the cache
    llama = load_model("llama-3.1-8b")
    wide = run_report(llama, fake_loop(tp=16), datasheet=None, calibrated=None, copy_bytes_per_s=None)
    assert wide.engine_bytes["kv_read"] == pytest.approx(576 * 131_072 / 8)
    assert "experts_per_layer" not in wide.engine_bytes


def test_a_truncated_moe_whose_kept_layers_are_dense_expects_no_experts():
    # DeepSeek-V3's first 3 layers are dense: --layers 1 runs no MoE layer, where the engine said 8 experts a layer
    from tokcost.measure.report import engine_bytes

    loop = SimpleNamespace(dtype="bf16", batch=1, prompt_tokens=16, output_tokens=4, tp=1, decode_contexts=[16, 17, 18])
    assert "experts_per_layer" not in engine_bytes(load_model("deepseek-v3").truncated(1), loop)
    assert engine_bytes(load_model("deepseek-v3").truncated(4), loop)["experts_per_layer"] == pytest.approx(8.0)


@pytest.mark.parametrize("profile", ["generic", "torch-compile"])
def test_predictions_price_the_loops_own_head_not_a_serving_engines(profile):
    # the loop splits its LM head by vocabulary (shard.py), takes each rank's argmax and gathers only the winners:
    # no logits gather, sampling over a rank's share; the review of 2026-12-05 found measure's expected column under
    # the torch-compile profile (gpt-fast holds the head whole) pricing 525 MB of LM head a rank where the loop read 263
    from tokcost.engine.features import Segment
    from tokcost.engine.step import step_cost
    from tokcost.measure.report import as_loop
    from tokcost.profiles import load_engine

    model, gpu = load_model("llama-3.2-1b"), load_gpu("h100-sxm")
    wl = workload_of("bf16", 4, 64, 16, tp=2)
    cost = step_cost(model, gpu, wl, segments=[Segment(4, 64, 1)], scenario="expected",
                     engine=as_loop(load_engine(profile)))  # fmt: skip
    names = {p.stage.name: p.stage for p in cost.stages}
    v, h = model.vocab_size, model.hidden_size
    assert names["LM head"].weight_bytes == pytest.approx(v * h / 2 * 2)  # half the vocabulary, bf16
    assert "logits all-gather" not in names
    assert names["sampling"].bytes_read == pytest.approx(4 * v / 2 * 4)  # 4 rows of a rank's share, fp32
    # the same profile as a serving engine prices its own head: gpt-fast's whole, the others' gathered
    as_served = step_cost(
        model, gpu, wl, segments=[Segment(4, 64, 1)], scenario="expected", engine=load_engine(profile)
    )
    served = {p.stage.name: p.stage for p in as_served.stages}
    whole = profile == "torch-compile"
    assert served["LM head"].weight_bytes == pytest.approx(v * h / (1 if whole else 2) * 2)
    assert ("logits all-gather" in served) is not whole and served["sampling"].bytes_read == pytest.approx(4 * v * 4)


def test_the_calibrated_column_prices_the_loops_own_rates_however_far_from_the_probes():
    # a CPU's fp16 square-GEMM probe ran 27x slower than the loop's own fp16 linears: as an engine efficiency over
    # the probe's share (held to 2x) that priced decode compute-bound at 5-8x the step measured (an audit found
    # +729%). The loop's shares now stand as the hardware's, so the prediction runs at exactly what the loop reached.
    facts = DeviceFacts("cpu", "x86_64", 24e9, None, "n/a", "2.13.0")
    probes = {"copy": SimpleNamespace(value=2.0e10, seconds_all=[1.0], size="copy"),
              "matmul": SimpleNamespace(value=0.7e9, seconds_all=[1.0], size="1024^3 GEMM")}  # fmt: skip
    spec = spec_from_rates(facts, "fp16", bytes_per_s=1.7e10, flops_per_s=1.9e10, step_overhead_s=1e-4,
                           provenance={}, probes=probes)  # fmt: skip
    # the sustained GEMM share is the best GEMM seen, the loop's linears here (they set the peak): 1, not 0.7 / 19
    assert spec.sustained.gemm_for("fp16").fraction == pytest.approx(1.0, abs=1e-3)
    assert "loop's prefill GEMMs" in spec.sustained.gemm_for("fp16").source
    hardware, engine = loop_calibrated(spec)
    rates = expected_rates(hardware, "fp16", engine)
    gemv, gemm = rates.kernels.memory.gemv, rates.kernels.compute.gemm
    assert rates.bytes_per_s * gemv == pytest.approx(1.7e10, rel=1e-3)  # the loop's stream
    assert rates.flops_per_s * gemm == pytest.approx(1.9e10, rel=1e-3)  # the loop's GEMMs, not 2x the probe's
    assert engine.step_overhead_us == pytest.approx(100.0)
