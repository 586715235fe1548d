"""The measured model and loop on real CPU runs: exact bytes, filled-cache attention, windows, MoE, modes."""

from __future__ import annotations

import math

import pytest

pytestmark = pytest.mark.slow  # not in the quick tier: torch decode loops
torch = pytest.importorskip("torch")

from tokcost.errors import MeasureError  # noqa: E402
from tokcost.measure import attention  # noqa: E402
from tokcost.measure.loop import measure_decode  # noqa: E402
from tokcost.measure.model import build_model, decode_read_bytes, weight_bytes  # noqa: E402
from tokcost.measure.report import engine_bytes  # noqa: E402
from tokcost.measure.runner import BUCKET_TOKENS, DecodeRunner, generate, random_prompt  # noqa: E402
from tokcost.models.spec import ModelSpec  # noqa: E402

# 2 layers, hidden 256, vocab 32000: 18.35M parameters (36.7 MB in bf16), 89% of them embedding and LM head.
TINY = ModelSpec(name="tiny", layers=2, hidden_size=256, attention_heads=4, kv_heads=2, intermediate_size=1024,
                 vocab_size=32000, max_context=512)  # fmt: skip
# Dense first layer, then 8 routed experts (top-2) plus a shared expert; tied embeddings and QKV bias.
TINY_MOE = ModelSpec(
    name="tiny-moe", layers=2, hidden_size=256, attention_heads=4, kv_heads=2, intermediate_size=1024,
    vocab_size=32000, max_context=512, tied_embeddings=True, attention_bias=True,
    moe={"experts": 8, "experts_per_token": 2, "shared_experts": 1, "expert_intermediate_size": 128,
         "dense_layers": 1, "dense_intermediate_size": 512},
)  # fmt: skip
# DeepSeek-style MLA with a low-rank query, scaled down.
TINY_MLA = ModelSpec(
    name="tiny-mla", layers=2, hidden_size=256, attention_heads=4, kv_heads=4, intermediate_size=1024,
    vocab_size=32000, max_context=512,
    mla={"kv_lora_rank": 64, "rope_head_dim": 16, "q_lora_rank": 96, "nope_head_dim": 32, "v_head_dim": 32},
)  # fmt: skip
# Gemma-2-style: every other layer (0 and 2) slides over the last 5 tokens.
TINY_SW = ModelSpec(name="tiny-sw", layers=3, hidden_size=128, attention_heads=4, kv_heads=2, intermediate_size=256,
                    vocab_size=1000, max_context=512,
                    sliding_window={"window_tokens": 5, "layers": "even"})  # fmt: skip
SPECS = [TINY, TINY_MOE, TINY_MLA, TINY_SW]
IDS = [s.name for s in SPECS]


@pytest.mark.parametrize("spec", SPECS, ids=IDS)
def test_weight_bytes_match_the_spec_parameter_count(spec):
    # The built model follows ModelSpec's counting convention exactly, so bytes = params x 2 in bf16.
    model = build_model(spec, dtype=torch.bfloat16, device="cpu", max_batch=1, max_seq=8)
    assert weight_bytes(model) == spec.params_total * 2


@pytest.mark.parametrize("spec", SPECS, ids=IDS)
def test_kv_cache_bytes_match_the_spec_windows_included(spec):
    # Sliding layers hold a ring of 5 slots, so 40 positions cost what ModelSpec.kv_cache_bytes says.
    model = build_model(spec, dtype=torch.bfloat16, device="cpu", max_batch=3, max_seq=40)
    assert model.kv_cache_bytes() == spec.kv_cache_bytes(40, 3, "bf16")


def test_ring_cache_is_the_window_only():
    # tiny-sw: layers 0 and 2 keep 5 slots of 2 x 2 heads x 32 dims x 2 B; layer 1 keeps all 40.
    model = build_model(TINY_SW, dtype=torch.bfloat16, device="cpu", max_batch=1, max_seq=40)
    assert [a.slots for a in model.attentions()] == [5, 40, 5]
    assert model.kv_cache_bytes() == (5 + 40 + 5) * 2 * 2 * 32 * 2


def _decode_vs_full(spec, steps, bucket):
    """Logits of one 12-token forward vs a 9-token prefill then 3 cached decode steps."""
    model = build_model(spec, dtype=torch.float32, device="cpu", max_batch=2, max_seq=16, seed=1)
    tokens = torch.randint(0, spec.vocab_size, (2, 12), generator=torch.Generator().manual_seed(0))
    with torch.inference_mode():
        full = model(tokens, torch.arange(12), last_only=False)  # [B, 12, V]
        model(tokens[:, :9], torch.arange(9), start=0)
        for p in range(9, 9 + steps):
            step = model(tokens[:, p : p + 1], torch.tensor([p]), start=p if bucket is None else None, bucket=bucket)
            torch.testing.assert_close(step, full[:, p : p + 1], atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("spec", SPECS, ids=IDS)
@pytest.mark.parametrize("bucket", [None, 16], ids=["exact", "bucketed"])
def test_cached_decode_matches_a_full_forward(spec, bucket):
    # Exact reads (the filled slots, no mask) and bucketed reads (16 slots, masked on the device) both give
    # the logits of one causal forward; for tiny-sw this crosses the 5-token window in the ring.
    _decode_vs_full(spec, 3, bucket)


def test_banded_prefill_in_chunks(monkeypatch):
    # A 12-token prompt over a 5-token window in 4-row query chunks equals the one-pass forward.
    monkeypatch.setattr(attention, "PREFILL_CHUNK", 4)
    _decode_vs_full(TINY_SW, 3, None)


def test_prefill_continuing_a_cache_matches():
    # Chunked prefill: 6 tokens, then 6 more from position 6 (an offset causal mask [6, 12], never [T, T]).
    model = build_model(TINY, dtype=torch.float32, device="cpu", max_batch=1, max_seq=16, seed=2)
    tokens = torch.randint(0, TINY.vocab_size, (1, 12), generator=torch.Generator().manual_seed(1))
    with torch.inference_mode():
        full = model(tokens, torch.arange(12), last_only=False)
        model(tokens[:, :6], torch.arange(6))
        rest = model(tokens[:, 6:], torch.arange(6, 12), last_only=False)
    torch.testing.assert_close(rest, full[:, 6:], atol=1e-4, rtol=1e-4)


def test_moe_reads_only_routed_experts_and_matches_a_dense_sum():
    # Grouped matmuls over experts sorted by routing == every expert on every token, weighted by the router.
    model = build_model(TINY_MOE, dtype=torch.float32, device="cpu", max_batch=1, max_seq=8)
    experts = model.layers[1].mlp
    x = torch.randn(5, 256, generator=torch.Generator().manual_seed(0))  # [T, hidden]
    scores, chosen = experts.router(x).topk(2, dim=-1)
    weights = scores.softmax(dim=-1)
    dense = torch.zeros(5, 256)
    for e in range(8):
        y = (torch.nn.functional.silu(x @ experts.w_gate[e].T) * (x @ experts.w_up[e].T)) @ experts.w_down[e].T
        dense += y * (weights * (chosen == e)).sum(-1, keepdim=True)
    experts.count_reads = True
    torch.testing.assert_close(experts.routed(x, chosen, weights), dense, atol=1e-5, rtol=1e-4)
    assert experts.reads == [len(set(chosen.flatten().tolist()))]  # distinct experts, counted on the device
    experts.grouped = False  # per-expert fallback: the same sum
    torch.testing.assert_close(experts.routed(x, chosen, weights), dense, atol=1e-5, rtol=1e-4)


def test_decode_bytes_counted_from_the_model_equal_the_engine_for_a_dense_model():
    # Weights read per step: all but the embedding table, plus B embedding rows; KV: B x L slots x bytes.
    model = build_model(TINY, dtype=torch.bfloat16, device="cpu", max_batch=3, max_seq=24)
    runner = DecodeRunner(model, random_prompt(TINY.vocab_size, 3, 16, torch.device("cpu"), 0), 8, "eager")
    # step j reads prompt + j slots per sequence: 17..23; at 20 the engine's step reads the same weights and KV
    assert runner.contexts() == list(range(17, 24))
    loop = type("Loop", (), {"dtype": "bf16", "batch": 3, "prompt_tokens": 16, "output_tokens": 8, "tp": 1,
                             "decode_contexts": [20]})()  # fmt: skip
    expected = engine_bytes(TINY, loop)
    assert decode_read_bytes(model, 3, None) == expected["weights"]
    assert runner.kv_read_bytes()[3] == expected["kv_read"]


def test_bucketed_steps_read_whole_buckets():
    model = build_model(TINY, dtype=torch.bfloat16, device="cpu", max_batch=1, max_seq=200)
    runner = DecodeRunner(model, random_prompt(TINY.vocab_size, 1, 60, torch.device("cpu"), 0), 140, "compile")
    contexts = runner.contexts()  # lengths 61..199 in buckets of 64, the last capped at the cache (200)
    assert contexts[0] == BUCKET_TOKENS and contexts[4] == 2 * BUCKET_TOKENS and contexts[-1] == 200
    assert len(set(contexts)) == 4


@pytest.mark.parametrize("batch", [1, 2])
def test_measure_decode_on_cpu(batch):
    result = measure_decode(TINY, device="cpu", dtype="bf16", batch=batch, prompt_tokens=16, output_tokens=8,
                            repeats=2, warmup=1, threads=1)  # fmt: skip
    assert result.mode == "eager" and result.threads == 1 and result.tp == 1
    assert result.ttft.n == result.tpot.n == 2 and result.step.n == 2 * 7
    for t in [result.ttft_s, result.tpot_s, result.step.min, result.tpot.q1, result.tpot.q3]:
        assert math.isfinite(t) and t > 0
    assert result.step.min <= result.step.median and result.tpot.q1 <= result.tpot_s <= result.tpot.q3
    assert result.decode_tokens_per_s == pytest.approx(batch / result.tpot_s)
    assert result.weight_bytes_measured == TINY.params_total * 2
    assert result.kv_cache_bytes == TINY.kv_bytes_per_token("bf16") * 24 * batch
    assert result.decode_contexts == list(range(17, 24)) and result.context_tokens == 24
    assert result.experts_per_layer is None and result.collective_s_per_step is None
    assert result.joules_per_output_token is None


def test_measure_decode_counts_experts_and_probes_its_linears():
    result = measure_decode(TINY_MOE, device="cpu", dtype="bf16", batch=2, prompt_tokens=16, output_tokens=4,
                            repeats=1, warmup=0, threads=1, calibrate=True)  # fmt: skip
    # 2 sequences x top-2 of 8 experts: between 2 and 4 distinct experts per step in the one MoE layer
    assert 2 <= result.experts_per_layer <= 4
    stream, compute = result.loop_rates["stream"], result.loop_rates["compute"]
    assert stream["rows"] == 2 and stream["bytes_per_s"] > 0 and compute["flops_per_s"] > 0
    # dense layer (4) + attention (2 x 2) + router, shared (3) + routed experts read (3 each) + LM head
    assert stream["matrices"] == 2 + 3 + 2 + 1 + 3 + 3 * round(result.experts_per_layer) + 1
    assert stream["grouped_layers"] == 1  # the routed experts through the loop's own grouped kernel


def test_energy_meter_gives_joules_per_token():
    class FixedEnergy:
        def start(self):
            pass

        def stop(self):
            return 2.0  # joules per decode phase

    result = measure_decode(TINY, device="cpu", dtype="fp32", batch=2, prompt_tokens=4, output_tokens=5, repeats=3,
                            warmup=0, mode="eager", threads=1, energy=FixedEnergy())  # fmt: skip
    # joules = 3 phases x 2 J over 3 repeats x 4 steps x 2 sequences
    assert result.joules_per_output_token == pytest.approx(6.0 / 24)


def test_greedy_decode_is_deterministic_and_bucketed_steps_agree():
    prompt = random_prompt(TINY.vocab_size, 2, 16, torch.device("cpu"), seed=3)
    runs = [generate(build_model(TINY, dtype=torch.float32, device="cpu", max_batch=2, max_seq=24, seed=3), prompt, 8)
            for _ in range(2)]  # fmt: skip
    assert runs[0].shape == (2, 8) and torch.equal(runs[0], runs[1])
    assert int(runs[0].min()) >= 0 and int(runs[0].max()) < TINY.vocab_size


def test_compile_mode_runs_on_cpu_and_agrees_with_eager():
    spec = TINY_SW.truncated(1)
    model = build_model(spec, dtype=torch.float32, device="cpu", max_batch=1, max_seq=14, seed=4)
    prompt = random_prompt(spec.vocab_size, 1, 8, torch.device("cpu"), seed=4)
    assert torch.equal(generate(model, prompt, 6, mode="compile"), generate(model, prompt, 6, mode="eager"))


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"output_tokens": 1}, "output_tokens >= 2"),
        ({"dtype": "int4"}, "use one of bf16, fp16, fp32"),
        ({"mode": "fast"}, "use one of auto, eager, graph, compile"),
        ({"device": "tpu"}, "not supported"),
    ],
)
def test_measure_decode_rejects_bad_arguments(kwargs, message):
    args = {"device": "cpu", "dtype": "bf16", "batch": 1, "prompt_tokens": 4, "output_tokens": 4} | kwargs
    with pytest.raises(MeasureError, match=message):
        measure_decode(TINY, **args)


def test_graph_mode_on_cpu_runs_eagerly_and_says_so():
    result = measure_decode(TINY, device="cpu", dtype="bf16", batch=1, prompt_tokens=4, output_tokens=3, repeats=1,
                            warmup=0, mode="graph", threads=1)  # fmt: skip
    assert result.mode == "eager" and any("CUDA graphs need a GPU" in n for n in result.notes)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-CUDA message")
def test_measure_decode_without_cuda_says_so():
    with pytest.raises(MeasureError, match="CUDA is not available"):
        measure_decode(TINY, device="cuda", dtype="bf16", batch=1, prompt_tokens=4, output_tokens=4)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("mode", ["graph", "compile"])
def test_cuda_graph_and_compile_steps_match_eager(mode):
    # fp32, so that masked bucketed attention and fused kernels cannot flip a greedy argmax by rounding
    for spec in (TINY, TINY_SW):
        model = build_model(spec, dtype=torch.float32, device="cuda", max_batch=2, max_seq=100, seed=3)
        prompt = random_prompt(spec.vocab_size, 2, 60, torch.device("cuda"), seed=3)  # crosses a 64-slot bucket
        assert torch.equal(generate(model, prompt, 40, mode=mode), generate(model, prompt, 40, mode="eager"))


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_grouped_experts_capture_and_bucketed_step_matches_exact():
    # bf16 (grouped_mm's dtype on CUDA): the MoE decode step captures as a CUDA graph and replays; a bucketed
    # step's logits match the exact step's (bf16 rounding only)
    model = build_model(TINY_MOE, dtype=torch.bfloat16, device="cuda", max_batch=2, max_seq=80, seed=3)
    prompt = random_prompt(TINY_MOE.vocab_size, 2, 60, torch.device("cuda"), seed=3)
    runner = DecodeRunner(model, prompt, 4, "graph")
    with torch.inference_mode():
        runner.capture()
        runner.prefill()
        tok, pos = runner.tok.clone(), runner.pos.clone()
        runner.decode()  # three graph replays
        assert int(runner.generated().max()) < TINY_MOE.vocab_size
        runner.prefill()
        exact = model(tok, pos, start=60)  # [B, 1, V]
        runner.prefill()
        bucketed = model(tok, pos, bucket=runner.bucket_of(61))
    torch.testing.assert_close(bucketed.float(), exact.float(), atol=5e-2, rtol=5e-2)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_measure_decode_cuda_defaults_to_compile_with_energy():
    from tokcost.measure.nvml import EnergyMeter

    uuid = str(torch.cuda.get_device_properties(0).uuid)
    result = measure_decode(TINY, device="cuda", dtype="bf16", batch=1, prompt_tokens=16, output_tokens=8, repeats=2,
                            energy=EnergyMeter(uuid=uuid), calibrate=True)  # fmt: skip
    assert result.mode == "compile" and result.threads is None and result.tpot_s > 0
    assert result.weight_bytes_measured == TINY.params_total * 2
    assert result.loop_rates["stream"]["bytes_per_s"] > 0


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("name", ["llama-3.1-8b", "qwen3-30b-a3b"])
def test_cuda_linear_stream_rate_is_not_above_one_big_gemv(name):
    # the linears' rate nets out the per-call cost of near-zero linears; timed as launched from Python that cost was
    # host time the real pass hides, and the net rate came out at 7.2 TB/s on an H200 whose HBM gives 4.8
    from tokcost.measure.probes import calibrate_rates, probe_stream
    from tokcost.models.library import load_model

    rates = calibrate_rates(load_model(name), "cuda", "bf16", batch=1, prompt_tokens=512, repeats=5)
    gemv = probe_stream("cuda", "bf16").bytes_per_s  # one launch over 2 GiB: no per-call cost to net out
    assert rates["working_set_bytes"] >= 8 * rates["cache_bytes"]
    assert rates["stream"]["bytes_per_s"] <= 1.1 * gemv
    if name == "llama-3.1-8b":  # large dense GEMVs stream near the big one's rate
        assert rates["stream"]["bytes_per_s"] > 0.5 * gemv
    else:  # the routed experts go through the loop's grouped kernel
        assert rates["stream"]["grouped_layers"] >= 1


def test_expert_stack_runs_the_loops_grouped_kernel_on_the_touched_experts():
    from tokcost.measure.probes import ExpertStack

    gen = torch.Generator().manual_seed(0)
    gate, up, down = (torch.randn(6, *shape, generator=gen).to(torch.bfloat16) for shape in ((8, 16), (8, 16), (16, 8)))
    stack = ExpertStack(gate, up, down, touched=3, slots=5)  # 5 token-expert pairs over experts 0, 1, 2: 2 + 2 + 1
    assert stack.nbytes == 3 * (8 * 16 * 3) * 2  # three touched experts' gate, up and down, 2 bytes each
    g, u, d = (call() for call in stack.calls())
    rows = [0, 0, 1, 1, 2]
    for r, e in enumerate(rows):
        assert torch.allclose(g[r].float(), gate[e].float().sum(-1), rtol=2e-2, atol=2e-2)  # ones @ gate[e]^T
        assert torch.allclose(u[r].float(), up[e].float().sum(-1), rtol=2e-2, atol=2e-2)
        assert torch.allclose(d[r].float(), down[e].float().sum(-1), rtol=2e-2, atol=2e-2)
    tiny = stack.tiny()
    assert tuple(tiny.gate.shape) == (6, 16, 16) and (tiny.touched, tiny.slots) == (3, 5)  # same groups, width 16


@pytest.mark.parametrize(("batch", "touched"), [(1, 2), (4, 5), (64, 8)])
def test_calibrate_probes_the_experts_a_batch_touches_as_grouped_stacks(batch, touched):
    from tokcost.engine.features import expected_distinct_experts
    from tokcost.measure.probes import layer_reads

    assert round(expected_distinct_experts(8, 2, batch)) == touched  # 8 x (1 - (3/4)^4) = 5.47 at batch 4
    weights, stacks = layer_reads(TINY_MOE, torch.device("cpu"), torch.bfloat16, batch, min_bytes=4 * 2**20)
    # the first routed layer (layer 1; layer 0's dense 512-wide MLP is absent): fused QKV (4 + 2 x 2 heads of 64),
    # output projection, router, and the 128-wide shared expert
    shapes = {tuple(w.shape) for w in weights}
    assert shapes == {(512, 256), (256, 256), (8, 256), (128, 256), (256, 128)}
    assert all(w.dim() == 2 for w in weights)
    assert {(s.touched, s.slots, tuple(s.gate.shape), tuple(s.down.shape)) for s in stacks} == {
        (touched, max(2 * batch, touched), (touched, 128, 256), (touched, 256, 128))
    }
    total = sum(w.numel() * 2 for w in weights) + sum(s.nbytes for s in stacks)
    assert total >= 4 * 2**20 and len(stacks) >= 2


def test_cache_flush_reads_up_to_l2_through_its_ring():
    from tokcost.measure.flush import CacheFlush

    flush = CacheFlush(torch.bfloat16, l2_bytes=4096, ring_bytes=10 * 1024)  # 10 rows of 512 bf16 (1 KiB)
    reads = []
    for nbytes in (4096, 100, 1 << 20, 4096):  # 4 rows; at least 1 row; capped at L2 (4 rows); wraps to row 0
        flush(nbytes)
        reads.append(flush.next_row)
    assert reads == [4, 5, 9, 4] and flush.seconds == 0.0  # not counting: nothing summed
    flush.counting = True
    flush(4096)
    assert flush.seconds > 0


def test_skeleton_step_overhead_is_net_of_its_cache_flushes():
    from tokcost.measure.calibrate import skeleton, step_overhead
    from tokcost.measure.flush import attach, cpu_cache_bytes
    from tokcost.measure.model import Decoder

    skel = skeleton(TINY)
    with torch.device("meta"):
        real, stand_in = Decoder(TINY), Decoder(skel)
    handles = attach(stand_in, real, lambda _n: None)
    # every linear of the skeleton has a same-named one in the real model: QKV, O, gate, up, down x 2 + head
    assert len(handles) == 2 * 5 + 1
    r = measure_decode(skel, device="cpu", dtype="bf16", batch=1, prompt_tokens=8, output_tokens=6, repeats=2,
                       threads=1, flush_like=TINY)  # fmt: skip
    if 2 not in cpu_cache_bytes():
        assert r.flush_s_per_step is None
        return
    assert 0 < r.flush_s_per_step < r.tpot_s
    net, how = step_overhead(r)
    assert net == pytest.approx(r.tpot_s - r.flush_s_per_step) and "cache flushes" in how
