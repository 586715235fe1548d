"""Every layer kind priced (issue 23, phase 2): KV or state bytes per sequence, and a decode step's and a prefill's
bytes and FLOPs per kind, each derived by hand here from the published shapes; the hybrid's long-context memory."""

from __future__ import annotations

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from tiers import examples

from tokcost.engine.attend import Pieces, causal_pairs, kv_read_tokens
from tokcost.engine.decode import DecodeLines
from tokcost.engine.estimate import deployment, estimate
from tokcost.engine.layout import Layout, layout_problem, tp_degrees
from tokcost.engine.memory import gpu_bytes
from tokcost.engine.stages import Segment, pipeline_stages
from tokcost.engine.workload import Workload
from tokcost.hardware.library import load_gpu
from tokcost.models.library import load_model
from tokcost.models.spec import ModelSpec

H100 = load_gpu("h100-sxm")
BF16 = 2  # bytes


def stages_of(model: str, segments: list[Segment], **layout) -> list:
    """The first pipeline stage's kernels of one pass at that point's numbers."""
    m = load_model(model)
    d = deployment(m, H100, Workload(**layout))
    return pipeline_stages(m, d.precision, d.layout, segments)[0]


def one(stages: list, name: str, block: str | None = None):
    found = [s for s in stages if s.name == name and (block is None or s.block == block)]
    assert len(found) == 1, [(s.name, s.block) for s in stages]
    return found[0]


# ---- chunked attention (Llama-4: 3 chunked layers of 8,192 tokens, then 1 global; 40 heads, 8 KV heads of 128) ----


@pytest.mark.parametrize(("cached", "in_chunk"), [(100, 100), (8191, 8191), (8192, 0), (20_000, 20_000 - 16_384)])
def test_a_chunked_layer_reads_only_its_current_chunk(cached, in_chunk):
    st = stages_of("llama-4-scout", [Segment(3, cached, 1)], tp=4)
    kv_tok = 2 * (8 / 4) * 128 * BF16  # K and V of 2 KV heads per rank
    chunked = one(st, "attention (KV cache read)", "MoE layer, chunk 8,192")
    assert chunked.count == 36 and chunked.kv_bytes == 3 * in_chunk * kv_tok
    assert chunked.flops == 3 * (in_chunk + 1) * 2 * (40 / 4) * 2 * 128  # QK^T and AV over the chunk, itself too
    full = one(st, "attention (KV cache read)", "MoE layer")
    assert full.count == 12 and full.kv_bytes == 3 * cached * kv_tok


def test_chunked_pairs_and_reads_by_hand():
    scout = load_model("llama-4-scout")
    # a 20,000-token prompt: two full chunks score 1 + ... + 8,192 each, the third 1 + ... + 3,616
    assert causal_pairs(scout, "chunked", 0, 20_000) == 2 * 8192 * 8193 / 2 + 3616 * 3617 / 2
    # continuing at 8,000: 192 more in the first chunk (8,001 .. 8,192), then 1 .. 808 in the second
    assert causal_pairs(scout, "chunked", 8000, 1000) == sum(range(8001, 8193)) + sum(range(1, 809))
    assert kv_read_tokens(scout, "chunked", 16_384) == 0 and kv_read_tokens(scout, "global", 16_384) == 16_384


def test_chunked_memory_holds_at_most_a_chunk_per_sequence():
    scout = load_model("llama-4-scout")
    e = estimate(scout, H100, Workload(batch=2, prompt_tokens=100_000, output_tokens=100, tp=8))
    kv_tok = 2 * 1 * 128 * BF16  # 8 KV heads over 8 ranks
    assert e.memory.per_gpu.kv == 2 * (36 * 8192 + 12 * 100_100) * kv_tok
    assert e.memory.per_gpu.state == 0 and e.memory.state_bytes_per_sequence == 0


def test_decode_pieces_start_at_every_chunk_boundary_and_a_window_filling():
    scout, gemma, qwen = load_model("llama-4-scout"), load_model("gemma-3-27b"), load_model("qwen3-next-80b-a3b")
    assert Pieces.of(scout, ("global", "chunked"), False).kinks(8000, 20_000) == (8192, 16_384)
    assert Pieces.of(gemma, ("global", "sliding"), False).kinks(0, 5000) == (1023, 1024)
    assert Pieces.of(qwen, ("global",), True).kinks(0, 10) == (1,)  # the state is read from c = 1 on
    assert Pieces.of(qwen, ("global",), True).kinks(5, 10**9) == ()


# ---- Gated DeltaNet (Qwen3-Next: 16 key heads, 32 value heads of 128; conv 4; hidden 2,048) ---------------------

GDN_STATE = 32 * 128 * 128  # one dk x dv matrix per value head
GDN_CONV = 2 * 16 * 128 + 32 * 128  # q, k, v channels


def test_gated_deltanet_decode_reads_and_writes_its_state_once_per_sequence():
    b, tp = 5, 4
    st = stages_of("qwen3-next-80b-a3b", [Segment(b, 4000, 1)], tp=tp)
    block = "MoE layer, Gated DeltaNet"
    scan = one(st, "gated delta rule (state)", block)
    assert scan.count == 36 and scan.kind == "state"
    # decay, S k, the rank-1 update and S^T q: 7 dk dv FLOPs per value head per token (Yang et al. 2025, eq. 10)
    assert scan.flops == b * (32 / tp) * 7 * 128 * 128
    heads = 32 / tp
    activations_in = b * (GDN_CONV / tp + 2 * heads) * BF16  # q, k, v and the b, a gates
    assert scan.bytes_read == b * GDN_STATE / tp * BF16 + activations_in
    assert scan.bytes_written == b * GDN_STATE / tp * BF16 + b * heads * 128 * BF16
    conv = one(st, "GDN short convolution", block)
    assert conv.flops == b * 2 * 4 * GDN_CONV / tp  # 4 taps, multiply-add, per channel per token
    window = GDN_CONV / tp * 3 * BF16  # the last 3 inputs
    assert conv.bytes_read == GDN_CONV / tp * 4 * BF16 + b * window + b * GDN_CONV / tp * BF16
    # projections are matmuls: in (q, k, v, z, b, a) and out
    assert one(st, "GDN input projection", block).weight_bytes == 2048 * (2 * 2048 + 2 * 4096 + 2 * 32) / tp * BF16
    assert one(st, "GDN output projection", block).weight_bytes == 4096 * 2048 / tp * BF16


def test_gated_deltanet_prefill_runs_the_chunked_scan_and_reads_no_state_from_scratch():
    p = 10_000
    fresh = one(stages_of("qwen3-next-80b-a3b", [Segment(1, 0, p)]), "gated delta rule (state)")
    dk = dv = 128
    c = 64  # flash-linear-attention's chunk
    per_token = 6 * dk * dv + c * (6 * dk + 4 * dv) + 2 * c * c / 3  # the chunkwise WY form, per value head
    assert fresh.flops == pytest.approx(p * 32 * per_token, rel=1e-12)
    chunk_states = p / c * GDN_STATE * BF16  # written by the state pass, read back by the output pass
    assert fresh.bytes_read == pytest.approx(chunk_states + p * (GDN_CONV + 64) * BF16, rel=1e-12)
    assert fresh.bytes_written == pytest.approx(GDN_STATE * BF16 + chunk_states + p * 4096 * BF16, rel=1e-12)
    warm = one(stages_of("qwen3-next-80b-a3b", [Segment(1, 500, p)]), "gated delta rule (state)")
    assert warm.bytes_read - fresh.bytes_read == pytest.approx(GDN_STATE * BF16, rel=1e-12)  # a cache continues


def test_qwen3_next_attention_layers_carry_the_output_gate_in_q_proj():
    st = stages_of("qwen3-next-80b-a3b", [Segment(1, 100, 1)])
    qkv = one(st, "QKV projection", "MoE layer")
    # q and its gate, k, v; and the q and k norms' vectors of 256 (Counts.attention_extras)
    assert qkv.count == 12 and qkv.weight_bytes == (2048 * (2 * 16 * 256 + 2 * 2 * 256) + 2 * 256) * BF16


# ---- Mamba-2 (Nemotron-H-8B: 128 heads of 64, state 128, 8 groups, conv 4 with bias, chunk 128) ---------------

MAMBA_STATE = 128 * 64 * 128
MAMBA_CONV = 128 * 64 + 2 * 8 * 128  # x, then B and C of every group


def test_mamba2_decode_reads_and_writes_its_state_and_mlp_only_layers_have_no_mixer():
    b = 3
    st = stages_of("nemotron-h-8b", [Segment(b, 6000, 1)])
    scan = one(st, "SSM scan (state)", "Mamba-2 layer, no MLP")
    assert scan.count == 24
    assert scan.flops == b * 128 * 5 * 64 * 128  # decay, dt B x, add, C h: 5 P N per head (selective_state_update)
    assert scan.bytes_read == b * MAMBA_STATE * BF16 + b * (MAMBA_CONV + 128) * BF16
    assert scan.bytes_written == b * MAMBA_STATE * BF16 + b * 128 * 64 * BF16
    conv = one(st, "Mamba-2 short convolution", "Mamba-2 layer, no MLP")
    assert conv.flops == b * (2 * 4 + 1) * MAMBA_CONV  # 4 taps and the bias
    # MLP-only layers: a norm and an ungated (squared ReLU) MLP, 2 x hidden x 21,504, nothing else
    mlp_only = [s for s in st if s.block == "dense MLP-only layer"]
    assert [s.name for s in mlp_only] == ["MLP norm", "MLP (up, down)"]
    assert mlp_only[1].count == 24 and mlp_only[1].weight_bytes == 2 * 4096 * 21_504 * BF16
    attention_only = {s.name for s in st if s.block == "attention layer, no MLP"}
    assert "attention (KV cache read)" in attention_only and not any("MLP" in n for n in attention_only)


def test_mamba2_prefill_runs_the_ssd_chunked_scan():
    p = 8192
    scan = one(stages_of("nemotron-h-8b", [Segment(2, 0, p)]), "SSM scan (state)")
    q, n, hd = 128, 128, 64  # the config's chunk_size; state size; head dim
    # SSD (Dao & Gu 2024, sec. 6): chunk states and their output 4 N P, diagonal blocks 2 Q P per head; C B^T 2 Q N
    per_token = 128 * (4 * n * hd + 2 * q * hd) + 8 * 2 * q * n
    assert scan.flops == 2 * p * per_token


def test_state_memory_is_per_sequence_whatever_the_context():
    nemo = load_model("nemotron-h-8b")
    state = 24 * (MAMBA_STATE + MAMBA_CONV * 3) * BF16
    assert nemo.state_bytes_per_sequence() == state
    for tokens in (1000, 8000):
        used = gpu_bytes(nemo, H100, deployment(nemo, H100, Workload()).precision, Layout(tp=2), Workload(), 6,
                         tokens, tokens)  # fmt: skip
        assert used.state == 6 * state / 2  # heads split over 2 ranks
        assert used.kv == 6 * 4 * tokens * 2 * 4 * 128 * BF16  # 4 attention layers, 4 KV heads per rank


def test_the_state_stays_at_the_model_dtype_under_an_fp8_kv_cache():
    q = load_model("qwen3-next-80b-a3b")
    e = estimate(q, H100, Workload(tp=4, kv_dtype="fp8", prompt_tokens=1000, output_tokens=24))
    assert e.precision.state == "bf16" and e.memory.per_gpu.state == 36 * (GDN_STATE + GDN_CONV * 3) * BF16 / 4
    assert e.memory.per_gpu.kv == 12 * 1024 * 2 * 256 * 1  # 1,024 tokens; 2 KV heads over 4 ranks: one each, 1 byte


def test_tp_degrees_divide_the_state_heads_too():
    base = dict(name="tiny", layers=4, hidden_size=256, attention_heads=8, kv_heads=8, intermediate_size=512,
                vocab_size=100, max_context=1000, layer_pattern="1 linear : 1 global")  # fmt: skip
    gdn = dict(key_heads=2, value_heads=4, key_head_dim=32, value_head_dim=32, conv_kernel=4)
    m = ModelSpec(**base, linear_attention=gdn)
    assert tp_degrees(m) == [1, 2]
    assert layout_problem(m, Layout(tp=4)) == "--tp: 4 does not divide tiny's 2 state heads; valid degrees: 1, 2"


def test_a_tp_degree_is_refused_for_the_rule_it_breaks():
    """It divides the attention heads but splits a KV head across ranks without being a multiple of them: the message
    names that rule (it said the attention heads were not divided, which was false)."""
    m = load_model("llama-3.2-3b")  # 24 attention heads, 8 KV heads
    assert layout_problem(m, Layout(tp=3)) == (
        "--tp: 3 neither divides llama-3.2-3b's 8 KV heads nor is a multiple of them (a rank holds whole KV heads, "
        "or a copy of one); valid degrees: 1, 2, 4, 8, 24"
    )
    assert layout_problem(m, Layout(tp=24)) is None  # 3 ranks to a copy of each KV head
    assert layout_problem(m, Layout(tp=5)).startswith("--tp: 5 does not divide llama-3.2-3b's 24 attention heads;")
    assert layout_problem(m, Layout(tp=0)).startswith("--tp: 0 is not a degree: give 1 or more;")  # no exception


# ---- the hybrid at long context (the acceptance of issue 23) -----------------------------------------------


def full_attention_twin(model: ModelSpec) -> ModelSpec:
    """The same model with every layer full attention: the same experts and projections, a KV cache everywhere."""
    data = model.model_dump(by_alias=True) | {"name": "twin", "layer_pattern": None, "linear_attention": None,
                                              "params_total": None}  # fmt: skip
    return ModelSpec.model_validate(data)


def test_a_hybrids_long_context_batch_is_several_times_its_full_attention_twins():
    # Qwen3-Next keeps KV in 12 of 48 layers (24,576 B/token) plus 39.5 MB of state per sequence; its twin keeps KV
    # in all 48 (98,304 B/token). Same weights on the same 4 H100s: only what each sequence holds differs.
    q = load_model("qwen3-next-80b-a3b")
    twin = full_attention_twin(q)
    # the same experts: 3.64B active against 3.87B (a Gated DeltaNet layer has 6.4M more weights than attention)
    assert twin.params_active == pytest.approx(q.params_active, rel=0.07)
    wl = Workload(prompt_tokens=131_072, output_tokens=256, tp=4)
    hybrid, dense = estimate(q, H100, wl).memory, estimate(twin, H100, wl).memory
    assert hybrid.max_batch >= 4 * dense.max_batch > 0
    per_sequence = 12 * 131_328 * 2 * 256 * BF16 + 36 * (GDN_STATE + GDN_CONV * 3) * BF16 / 4  # one KV head a rank
    assert hybrid.per_gpu.kv + hybrid.per_gpu.state == per_sequence


def test_per_sequence_memory_at_128k_against_a_dense_model_with_the_same_active_parameters():
    # Llama-3.2-3B (3.2B parameters, dense) against Qwen3-Next's 3.9B active: at 128k each Llama sequence holds
    # 28 layers x 8 KV heads x 128 x 2 x 2 B per token, 4.6 times what a Qwen3-Next sequence holds (KV + state)
    q, llama = load_model("qwen3-next-80b-a3b"), load_model("llama-3.2-3b")
    tokens = 131_072
    dense = llama.kv_cache_bytes(tokens)
    hybrid = q.kv_cache_bytes(tokens) + q.state_bytes_per_sequence()
    assert dense == tokens * 28 * 8 * 128 * 2 * BF16
    assert dense / hybrid == pytest.approx(4.6, abs=0.05)


def test_estimate_shows_state_and_kv_as_separate_lines(cli):
    r = cli("estimate", "-m", "qwen3-next-80b-a3b", "-g", "h100-sxm", "--prompt", "131072")
    assert r.exit_code == 0, r.stderr
    rows = {line.split("│")[1].strip(): line.split("│")[2].strip() for line in r.stdout.splitlines()
            if line.count("│") == 3}  # fmt: skip
    kv, state = rows["KV cache (12 attention layers)"], rows["state (36 linear-attention layers)"]
    assert kv.startswith("3.23 GB (24,576 B/token") and state.startswith("39.52 MB (39,518,208 B/sequence")
    assert {"weights", "attention", "state"} <= {
        line.split("│")[1].strip() for line in r.stdout.splitlines() if line.count("│") == 7
    }  # the decode step's breakdown
    data = cli("estimate", "-m", "qwen3-next-80b-a3b", "-g", "h100-sxm", "--prompt", "131072", "--format",
               "json").json()["memory"]  # fmt: skip
    assert data["kv_cache_bytes_per_gpu"] == 12 * 131_328 * 2 * 2 * 256 * BF16
    assert data["state_bytes_per_gpu"] == data["state_bytes_per_sequence_total"] == 39_518_208
    kinds = cli("estimate", "-m", "qwen3-next-80b-a3b", "-g", "h100-sxm", "--format", "json").json()["layer_kinds"]
    assert kinds == [
        {"mixer": "linear", "mlp": "moe", "layers": 36, "kv_bytes_per_token_per_layer": 0,
         "state_bytes_per_sequence_per_layer": (GDN_STATE + GDN_CONV * 3) * BF16},
        {"mixer": "global", "mlp": "moe", "layers": 12, "kv_bytes_per_token_per_layer": 2 * 2 * 256 * BF16,
         "state_bytes_per_sequence_per_layer": 0},
    ]  # fmt: skip


def test_journey_and_explain_show_each_kind_as_its_own_rows(cli):
    r = cli("estimate", "-m", "nemotron-h-8b", "-g", "h100-sxm", "--journey", "--format", "json")
    blocks = {row["block"] for row in r.json()["journey"]["decode_step"] if row["block"]}
    assert blocks == {"Mamba-2 layer, no MLP", "dense MLP-only layer", "attention layer, no MLP"}
    r = cli("estimate", "-m", "qwen3-next-80b-a3b", "-g", "h100-sxm", "--gpus", "4", "--explain")
    assert "Gated DeltaNet (36 layers): state (32 heads x 128 x 128 + conv window 8,192 x 3) x 2 B = 1,097,728 B " \
           "per sequence each" in r.stdout  # fmt: skip
    assert "global attention (12 layers): 2 x 2 KV heads x 256 x 2 B = 2,048 B per token each" in r.stdout
    scout = cli("estimate", "-m", "llama-4-scout", "-g", "h100-sxm", "--gpus", "4", "--explain").stdout
    assert "chunked attention (36 layers): 2 x 8 KV heads x 128 x 2 B = 4,096 B per token each; only the current " \
           "8,192-token chunk kept" in scout  # fmt: skip


# ---- any mix of kinds: the grid path is the stage path, and the decode mean the sum of every step ---------------


@st.composite
def hybrids(draw) -> ModelSpec:
    """Small decoders whose layers mix every mixer and MLP kind, with windows and chunks a few tokens long."""
    layers = draw(st.integers(1, 12))
    mixers = draw(st.lists(st.sampled_from(["global", "sliding", "chunked", "linear", "mamba", "none"]),
                           min_size=layers, max_size=layers))  # fmt: skip
    mlps = [draw(st.sampled_from(["dense", "moe", "none"] if m != "none" else ["dense", "moe"])) for m in mixers]
    kv_heads = draw(st.sampled_from([1, 2, 4]))
    spec: dict = dict(name="hybrid", layers=layers, hidden_size=64, attention_heads=4, kv_heads=kv_heads,
                      intermediate_size=96, vocab_size=500, max_context=10**6, layer_pattern=mixers, mlp_pattern=mlps,
                      mlp_gated=draw(st.booleans()), attention_gate=draw(st.booleans()))  # fmt: skip
    if "sliding" in mixers:
        spec["window_tokens"] = draw(st.integers(1, 40))
    if "chunked" in mixers:
        spec["chunk_tokens"] = draw(st.integers(1, 40))
    if "linear" in mixers:
        spec["linear_attention"] = dict(key_heads=2, value_heads=4, key_head_dim=8, value_head_dim=16, conv_kernel=4)
    if "mamba" in mixers:
        spec["mamba"] = dict(heads=4, head_dim=8, state_size=16, groups=2, conv_kernel=4, chunk_tokens=32)
    if "moe" in mlps:
        spec["moe"] = dict(experts=8, experts_per_token=2, shared_experts=draw(st.integers(0, 1)),
                           expert_intermediate_size=32)  # fmt: skip
    return ModelSpec.model_validate(spec)


LAYOUTS = [{}, {"tp": 2}, {"pp": 2}, {"tp": 2, "pp": 3}, {"tp": 2, "dp": 2, "ep": 4}]


@given(hybrids(), st.sampled_from(LAYOUTS), st.integers(1, 9), st.integers(0, 90), st.integers(0, 60))
@settings(max_examples=examples(60))
def test_any_mix_of_kinds_prices_the_same_on_both_paths(model, layout, batch, first, span):
    assume(layout_problem(model, Layout(**layout)) is None)  # DP and EP need an MoE
    d = deployment(model, H100, Workload(**layout))
    rates = d.rates("expected")
    bound = d.bound(rates)
    segments = [Segment(batch, first, 1), Segment(1, first + 3, 17), Segment(2, 0, span + 1)]
    x = d.compiled.vector(segments)
    for rows, stages in zip(d.compiled.stages, d.compiled.point_stages(x), strict=True):
        for row, stage in zip(rows, stages, strict=True):
            assert row.flops(x) == pytest.approx(stage.flops, rel=1e-12, abs=1e-9)
            assert row.weight_bytes(x) + row.other_bytes(x) == pytest.approx(stage.bytes, rel=1e-12, abs=1e-6)
    last = first + span
    brute = sum(bound.seconds([Segment(batch, c, 1)]) for c in range(first, last + 1)) / (span + 1)
    assert bound.decode_mean(batch=batch, first=first, last=last) == pytest.approx(brute, rel=1e-12)
    assert DecodeLines(bound, batch).mean(first, last) == pytest.approx(brute, rel=1e-12)


def test_a_tp_degree_splits_whole_mamba_2_groups():
    # Nemotron-H-8B: 8 B/C groups; vLLM's MambaMixer2 asserts n_groups % tp == 0 (or one group, replicated), so TP 16
    # (which its 32 attention and 128 state heads allow) would split a group across two ranks
    from tokcost.engine.layout import Layout, layout_problem, tp_degrees

    model = load_model("nemotron-h-8b")
    assert tp_degrees(model) == [1, 2, 4, 8]
    problem = layout_problem(model, Layout(tp=16))
    assert problem is not None and problem.startswith("--tp: 16 does not divide nemotron-h-8b's 8 Mamba-2 groups")
