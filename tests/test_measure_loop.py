"""The measure package on real CPU runs: exact weight and KV bytes, cached decode, timings, probes, NVML."""

from __future__ import annotations

import math
import sys
import types

import pytest

torch = pytest.importorskip("torch")

from tokcost.errors import MeasureError  # noqa: E402
from tokcost.measure import nvml  # noqa: E402
from tokcost.measure.loop import generate, measure_decode, random_prompt  # noqa: E402
from tokcost.measure.model import build_model, weight_bytes  # noqa: E402
from tokcost.measure.probes import probe_copy, probe_matmul, probe_stream  # noqa: E402
from tokcost.models.spec import ModelSpec  # noqa: E402

# 2 layers, hidden 256, vocab 32000: 18.35M parameters (36.7 MB in bf16), 89% of them embedding and LM head.
TINY = ModelSpec(
    name="tiny",
    layers=2,
    hidden_size=256,
    attention_heads=4,
    kv_heads=2,
    intermediate_size=1024,
    vocab_size=32000,
    max_context=512,
)
# Dense first layer, then 8 routed experts (top-2) plus a shared expert; tied embeddings and QKV bias.
TINY_MOE = ModelSpec(
    name="tiny-moe",
    layers=2,
    hidden_size=256,
    attention_heads=4,
    kv_heads=2,
    intermediate_size=1024,
    vocab_size=32000,
    max_context=512,
    tied_embeddings=True,
    attention_bias=True,
    moe={
        "experts": 8,
        "experts_per_token": 2,
        "shared_experts": 1,
        "expert_intermediate_size": 128,
        "dense_layers": 1,
        "dense_intermediate_size": 512,
    },
)
# DeepSeek-style MLA with a low-rank query, scaled down.
TINY_MLA = ModelSpec(
    name="tiny-mla",
    layers=2,
    hidden_size=256,
    attention_heads=4,
    kv_heads=4,
    intermediate_size=1024,
    vocab_size=32000,
    max_context=512,
    mla={"kv_lora_rank": 64, "rope_head_dim": 16, "q_lora_rank": 96, "nope_head_dim": 32, "v_head_dim": 32},
)
SPECS = [TINY, TINY_MOE, TINY_MLA]
IDS = [s.name for s in SPECS]


@pytest.mark.parametrize("spec", SPECS, ids=IDS)
def test_weight_bytes_match_the_spec_parameter_count(spec):
    # The built model follows ModelSpec's counting convention exactly, so bytes = params x 2 in bf16.
    model = build_model(spec, dtype=torch.bfloat16, device="cpu", max_batch=1, max_seq=8)
    assert weight_bytes(model) == spec.params_total * 2


@pytest.mark.parametrize("spec", SPECS, ids=IDS)
def test_kv_cache_bytes_match_the_spec(spec):
    # Exact for MLA too: the absorbed form caches kv_lora_rank + rope_head_dim values per token per layer.
    model = build_model(spec, dtype=torch.bfloat16, device="cpu", max_batch=3, max_seq=40)
    assert model.kv_cache_bytes() == spec.kv_bytes_per_token("bf16") * 40 * 3


@pytest.mark.parametrize("spec", SPECS, ids=IDS)
def test_cached_decode_matches_a_full_forward(spec):
    # Prefill 9 tokens then decode the 10th through the cache == one 10-token forward (fp32).
    model = build_model(spec, dtype=torch.float32, device="cpu", max_batch=2, max_seq=16, seed=1)
    tokens = torch.randint(0, spec.vocab_size, (2, 10), generator=torch.Generator().manual_seed(0))
    with torch.inference_mode():
        full = model(tokens, torch.arange(10), last_only=False)  # [B, 10, V]
        model(tokens[:, :9], torch.arange(9))
        step = model(tokens[:, 9:], torch.tensor([9]))  # [B, 1, V]
    assert full.shape == (2, 10, spec.vocab_size)
    torch.testing.assert_close(step, full[:, -1:], atol=1e-4, rtol=1e-4)


def test_moe_dispatches_agree():
    # Sorted (prefill), gathered (small decode) and dense (large decode) dispatch compute the same sum.
    model = build_model(TINY_MOE, dtype=torch.float32, device="cpu", max_batch=1, max_seq=8)
    experts = model.layers[1].mlp
    x = torch.randn(5, 256, generator=torch.Generator().manual_seed(0))  # [T, hidden]
    scores, chosen = experts.router(x).topk(2, dim=-1)
    weights = scores.softmax(dim=-1)
    reference = experts.by_expert(x, chosen, weights)
    torch.testing.assert_close(experts.gathered(x, chosen, weights), reference)
    torch.testing.assert_close(experts.dense(x, chosen, weights), reference)


def test_mla_absorbed_attention_equals_the_explicit_form():
    # Expanding the latent into per-head K and V (DeepSeek-V2 eq. 9-19) gives the same output.
    model = build_model(TINY_MLA, dtype=torch.float32, device="cpu", max_batch=1, max_seq=6, seed=2)
    attn, m = model.layers[0].attention, TINY_MLA.mla
    x = torch.randn(1, 6, 256, generator=torch.Generator().manual_seed(0))  # [B, S, hidden]
    pos = torch.arange(6)
    with torch.inference_mode():
        absorbed = attn(x, pos, model.causal_mask[pos])
        q = attn.wq_b(attn.q_norm(attn.wq_a(x))).view(1, 6, 4, m.nope_head_dim + m.rope_head_dim)
        q_nope, q_rope = q.split([m.nope_head_dim, m.rope_head_dim], dim=-1)
        latent, k_rope = attn.wkv_a(x).split([m.kv_lora_rank, m.rope_head_dim], dim=-1)
        kv = attn.wkv_b(attn.kv_norm(latent)).view(1, 6, 4, m.nope_head_dim + m.v_head_dim)
        k_nope, v = kv.split([m.nope_head_dim, m.v_head_dim], dim=-1)
        k_rope = attn.rotary(k_rope.view(1, 6, 1, m.rope_head_dim), pos).expand(1, 6, 4, m.rope_head_dim)
        q = torch.cat((q_nope, attn.rotary(q_rope, pos)), dim=-1).transpose(1, 2)  # [B, H, S, Dqk]
        k = torch.cat((k_nope, k_rope), dim=-1).transpose(1, 2)
        o = torch.nn.functional.scaled_dot_product_attention(q, k, v.transpose(1, 2), is_causal=True)
        explicit = attn.wo(o.transpose(1, 2).reshape(1, 6, 4 * m.v_head_dim))
    torch.testing.assert_close(absorbed, explicit, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("batch", [1, 2])
def test_measure_decode_on_cpu(batch):
    result = measure_decode(
        TINY, device="cpu", dtype="bf16", batch=batch, prompt_tokens=16, output_tokens=8, repeats=2, warmup=1
    )
    assert result.mode == "eager"  # "graph" was asked for; the CPU has no CUDA graphs
    assert any("CUDA graphs" in note for note in result.notes)
    assert result.threads == torch.get_num_threads()
    assert len(result.ttft_s_all) == len(result.tpot_s_all) == 2
    for t in [result.ttft_s, result.tpot_s, *result.ttft_s_all, *result.tpot_s_all]:
        assert math.isfinite(t) and t > 0
    assert result.decode_tokens_per_s == pytest.approx(batch / result.tpot_s)
    assert result.weight_bytes_measured == TINY.params_total * 2
    assert result.kv_cache_bytes == TINY.kv_bytes_per_token("bf16") * 24 * batch
    assert result.context_tokens == 24
    assert result.avg_power_w is None and result.joules_per_output_token is None


@pytest.mark.parametrize("spec", [TINY_MOE, TINY_MLA], ids=["moe", "mla"])
def test_measure_decode_moe_and_mla(spec):
    # Batch 2 with top-2 of 8 experts takes the dense decode dispatch; batch 1 the gathered one.
    for batch in (1, 2):
        result = measure_decode(
            spec,
            device="cpu",
            dtype="bf16",
            batch=batch,
            prompt_tokens=16,
            output_tokens=4,
            repeats=1,
            warmup=0,
            mode="eager",
        )
        assert result.weight_bytes_measured == spec.params_total * 2
        assert result.tpot_s > 0 and result.ttft_s > 0


def test_power_sampler_gives_joules_per_token():
    class FixedPower:
        def start(self):
            pass

        def stop(self):
            return 300.0

    result = measure_decode(
        TINY,
        device="cpu",
        dtype="fp32",
        batch=2,
        prompt_tokens=4,
        output_tokens=5,
        repeats=1,
        warmup=0,
        mode="eager",
        threads=1,
        power_sampler=FixedPower(),
    )
    assert result.threads == 1
    assert result.avg_power_w == 300.0
    # joules = watts x decode time / tokens decoded; decode time = tpot x (output - 1)
    assert result.joules_per_output_token == pytest.approx(300.0 * result.tpot_s * 4 / (2 * 4))


def test_greedy_decode_is_deterministic_for_a_seed():
    runs = []
    for _ in range(2):
        model = build_model(TINY, dtype=torch.bfloat16, device="cpu", max_batch=2, max_seq=24, seed=3)
        prompt = random_prompt(TINY, 2, 16, torch.device("cpu"), seed=3)
        runs.append(generate(model, prompt, 8))
    assert runs[0].shape == (2, 8)
    assert torch.equal(runs[0], runs[1])
    assert int(runs[0].min()) >= 0 and int(runs[0].max()) < TINY.vocab_size


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"output_tokens": 1}, "output_tokens >= 2"),
        ({"dtype": "int4"}, "use one of bf16, fp16, fp32"),
        ({"mode": "fast"}, "use one of graph, eager, compile"),
        ({"device": "tpu"}, "not supported"),
    ],
)
def test_measure_decode_rejects_bad_arguments(kwargs, message):
    args = {"device": "cpu", "dtype": "bf16", "batch": 1, "prompt_tokens": 4, "output_tokens": 4} | kwargs
    with pytest.raises(MeasureError, match=message):
        measure_decode(TINY, **args)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-CUDA message")
def test_measure_decode_without_cuda_says_so():
    with pytest.raises(MeasureError, match="CUDA is not available"):
        measure_decode(TINY, device="cuda", dtype="bf16", batch=1, prompt_tokens=4, output_tokens=4)


def test_probes_return_positive_rates():
    mib = 2**20
    copy = probe_copy("cpu", "fp32", size_bytes=16 * mib, repeats=3)
    stream = probe_stream("cpu", "fp32", size_bytes=16 * mib, repeats=3)
    matmul = probe_matmul("cpu", "fp32", n=256, repeats=3)
    assert copy.work == 2 * 16 * mib  # read + write
    assert stream.work == 16 * mib
    assert matmul.work == 2 * 256**3
    for probe in (copy, stream):
        assert probe.flops_per_s is None and math.isfinite(probe.bytes_per_s) and probe.bytes_per_s > 0
    assert matmul.bytes_per_s is None and math.isfinite(matmul.flops_per_s) and matmul.flops_per_s > 0


def test_nvml_missing_returns_none_with_a_reason(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import pynvml now raises ImportError
    notes: list[str] = []
    assert nvml.device_info(0, notes) is None
    assert "pynvml is not installed" in notes[0]
    sampler = nvml.PowerSampler()
    sampler.start()
    assert sampler.stop() is None


def _fake_pynvml(energy_mj: list[int]) -> types.ModuleType:
    """A stand-in pynvml reporting an H100 SXM: 2619 MHz memory clock, 5120-bit bus, 700 W limit."""
    fake = types.ModuleType("pynvml")
    fake.NVML_CLOCK_MEM = 2
    fake.NVMLError = type("NVMLError", (Exception,), {})
    fake.nvmlInit = fake.nvmlShutdown = lambda: None
    fake.nvmlDeviceGetHandleByIndex = lambda index: f"gpu{index}"
    fake.nvmlDeviceGetName = lambda handle: b"NVIDIA H100 80GB HBM3"
    fake.nvmlDeviceGetMemoryInfo = lambda handle: types.SimpleNamespace(total=80 * 2**30)
    fake.nvmlSystemGetDriverVersion = lambda: "550.54.15"
    fake.nvmlDeviceGetMaxClockInfo = lambda handle, kind: 2619
    fake.nvmlDeviceGetMemoryBusWidth = lambda handle: 5120
    fake.nvmlDeviceGetEnforcedPowerLimit = lambda handle: 700_000
    fake.nvmlDeviceGetPowerUsage = lambda handle: 350_000
    fake.nvmlDeviceGetTotalEnergyConsumption = lambda handle: energy_mj.pop(0) if energy_mj else 0
    return fake


def test_nvml_device_info_and_power_from_a_fake_driver(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", _fake_pynvml(energy_mj=[]))
    info = nvml.device_info(0)
    assert info is not None and info.name == "NVIDIA H100 80GB HBM3"
    # 2 x 2619e6 Hz x 5120 bits / 8 = 3.352e12 B/s: the H100 SXM datasheet's 3.35 TB/s.
    assert info.theoretical_bandwidth_bytes_per_s == pytest.approx(3.352e12, rel=1e-3)
    assert info.power_limit_w == 700.0
    sampler = nvml.PowerSampler(interval_s=0.001)
    sampler.start()
    assert sampler.stop() == 350.0  # the energy counter is stuck at 0: falls back to the samples
    assert sampler.method == "samples"


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_measure_decode_cuda_graph():
    result = measure_decode(
        TINY,
        device="cuda",
        dtype="bf16",
        batch=1,
        prompt_tokens=16,
        output_tokens=8,
        repeats=2,
        warmup=1,
        mode="graph",
    )
    assert result.mode == "graph" and result.threads is None
    assert result.tpot_s > 0 and result.weight_bytes_measured == TINY.params_total * 2
    model = build_model(TINY, dtype=torch.bfloat16, device="cuda", max_batch=1, max_seq=24, seed=3)
    prompt = random_prompt(TINY, 1, 16, torch.device("cuda"), seed=3)
    graph_tokens = generate(model, prompt, 8, mode="graph")
    assert torch.equal(graph_tokens, generate(model, prompt, 8, mode="eager"))
