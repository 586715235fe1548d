"""A GGUF file quantizes every tensor, embedding and output included: llama.cpp's bits-per-weight table is the average
over all of them, so the embedding and LM head take the file's format, never a bf16 copy on top (the audit of
2026-12-03: `--weights q4_k_m` held Llama-3.1-8B in 6.32 GB where the file is 4.9 GB, and its decode read the LM head
at 16 bits). The other formats leave them at the model dtype, as their quantizers do."""

from __future__ import annotations

import pytest

from tokcost import Workload, estimate, load_gpu, load_model
from tokcost.engine.workload import resolve_precision
from tokcost.formats import FORMATS

LLAMA = load_model("llama-3.1-8b")
GGUF = [name for name, f in FORMATS.items() if f.whole_model]


def test_the_gguf_formats_are_the_whole_model_ones():
    assert sorted(GGUF) == sorted(["q8_0", "q4_0", "q4_k_m", "q4_k_s", "q5_k_m", "q5_k_s", "q6_k", "q3_k_m", "q2_k"])


@pytest.mark.parametrize("weights", GGUF)
def test_a_gguf_file_holds_its_embedding_and_lm_head_in_its_own_format(weights):
    p = resolve_precision(LLAMA, Workload(weights_dtype=weights), load_gpu("rtx-4090"))
    assert p.embedding == weights
    # every matrix at the file's bits, embedding and LM head included (8,030,261,248 params); the norms, vectors a
    # file keeps unquantized, at the model dtype (266,240 of them here)
    held = estimate(model=LLAMA, gpu="rtx-4090", workload=Workload(weights_dtype=weights)).memory.per_gpu.weights
    norms = LLAMA.params_norms
    assert norms == 65 * 4096
    assert held == pytest.approx((LLAMA.params_total - norms) * FORMATS[weights].bits / 8 + norms * 2, rel=1e-9)


@pytest.mark.parametrize("weights", ["int4", "fp8", "nvfp4", "int8", "nf4"])
def test_other_quantized_formats_keep_the_embedding_and_lm_head_at_the_model_dtype(weights):
    assert resolve_precision(LLAMA, Workload(weights_dtype=weights), load_gpu("b200")).embedding == LLAMA.dtype


def test_q4_k_m_llama_3_1_8b_by_hand():
    # 8,030,261,248 x 4.84 / 8 = 4.858 GB held (the published Q4_K_M file is about 4.9 GB; the norms at 16 bits add
    # 0.4 MB); the decode step reads every tensor but the embedding table (one row a token):
    # (8,030,261,248 - 525,336,576) x 0.605 = 4.541 GB
    e = estimate(model=LLAMA, gpu="rtx-4090", workload=Workload(weights_dtype="q4_k_m"))
    assert e.memory.per_gpu.weights / 1e9 == pytest.approx(4.858, abs=0.001)
    assert LLAMA.params_embedding == 525_336_576
    bandwidth = load_gpu("rtx-4090").bandwidth_bytes_per_s
    weights = (LLAMA.params_total - LLAMA.params_embedding) * 4.84 / 8
    # plus the KV cache at the mean context of the 256 decode steps after a 1,024-token prompt, 131,072 B a token
    kv = e.memory.kv_bytes_per_token * (1024 + (256 - 1) / 2)
    # the ceiling's decode step at batch 1: those reads at the datasheet bandwidth (activations under 0.2% more)
    assert e.ceiling.tpot_s == pytest.approx((weights + kv) / bandwidth, rel=0.002)
    assert e.ceiling.tpot_s >= (weights + kv) / bandwidth
