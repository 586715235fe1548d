"""What the fit may believe before any row: each engine parameter's physical range and its prior centre, with why.

Efficiencies are shares of what the hardware sustains (the GPU's measured copy and GEMM shares), so their ranges
are about software, never about the silicon:
- memory side (GEMV over native or dequantizing weights): 0.5-1.12 of a plain copy; a tuned GEMV streams about
  what a copy kernel does (the copy shares are copy kernels': H100 SXM 0.87 in Azure's harness, 0.85-0.92 in
  RRZE-HPC/gpu-benches; cudaMemcpy streams less, 0.745 on H100 SXM), a naive one half of it. Across the GPUs an
  era ran on, the GEMV's share of the datasheet (copy x efficiency) must stay in BANDWIDTH_PRODUCT (0.70-0.95): a
  hinge on the product, per GPU;
- decode attention (paged KV reads, many small blocks): 0.3-1.12, centred per engine on its kernel family, never
  pooled across engines (below); MoE grouped GEMM on top of its class: 0.4-1.12, centre 1.0: vLLM's triton
  fused_moe in bf16 at Mixtral-8x7B's TP-2 shapes on an H100 SXM ran 144 us at batch 1 (2 experts, 352 MB) and
  435-483 us at batch 8-64 (7.2-8 experts, 1.27-1.41 GB): 0.73 and 0.87 of the datasheet, 0.84 and 1.0 of a copy
  (vllm-project/vllm PR 24700, 2025-09, tuned configs);
- MLA's decode attention apart (another kernel: one latent row per token shared by every head, absorbed into the
  query; DeepSeek-V2/V3, Kimi-K2): 0.25-1.12, centre 0.53 (the range's log-middle). The top is FlashMLA's "up to
  3000 GB/s in memory-bound configuration" on an H800 SXM5 (deepseek-ai/FlashMLA README, 2025-02; 0.90 of its
  3.35 TB/s, about 1.03 of a copy at h800's 0.87). The bottom is the triton MLA decode that early-2025 engines ran
  by default (vLLM V0's TRITON_MLA: FlashMLA only in V1, vllm-project/vllm issue 14882; SGLang's triton backend unless
  --enable-flashinfer-mla): FlashInfer's MLA kernel gave 3.9x the throughput of triton's at 32K-token prompts
  (sgl-project/sglang PR 3550, 2025-02), so triton reached about 1.12 / 3.9 = 0.29 of a copy there. Which of the
  two an era runs is what rows would identify; until 3 sources do, every era sits at the centre and says "prior".
  Like paged attention (below), it is never pooled across engines: FlashInfer's MLA and triton's are 3.9x apart;
- block-scaled FP8 (DeepSeek-V3's 128x128 blocks at FP8 compute, its own kernel: m.wo.fp8_block): 0.09-1.0 of a
  copy, centre 0.26. On an H100 SXM (copy share 0.87) at DeepSeek-V3's shapes, DeepGEMM streamed 1,934 GB/s at
  m=64, n=7168, k=18432 (0.66 of a copy) but 286-439 GB/s at n=4096, k=7168 (0.10-0.15; vllm-project/vllm PR 13917,
  2025-02-26), and the tuned triton w8a8_block_fp8_matmul 1.30 TFLOP/s at batch 1 for n=2112, k=7168, i.e.
  0.65 TB/s (0.22; CUTLASS blockwise 0.89 TFLOP/s; PR 23280, 2025-09), where a bf16 GEMV of that shape streams
  0.91 of the datasheet: small per-rank shapes pay a fixed kernel time. The centre is the log-middle of the
  measured 0.10-0.66 (it was 0.3 while H100 SXM's copy share was 0.79);
- compute side (GEMM share x efficiency): 0.4-1.1 of the GEMM share, the product within GEMM_PRODUCT (0.40-0.95);
  prefill attention 0.3-1.1, centre 0.8: a flash-attention kernel of its GPU's generation reaches about 0.8 of
  a GEMM's sustained rate at long sequences (softmax's exponentials and the causal mask's diagonal tiles are work
  a GEMM has not): FlashAttention-3's forward pass at head dim 128 on an H100 SXM, 565-648 TFLOP/s at 1K-16K
  tokens (FlashAttention-3 paper, arXiv 2407.08608, figure "Attention forward speed, head dim 128"; 590-621 in
  pytorch/benchmark PR 2391's rerun, 2024-07), against torch.mm's 791 (the H100 spec's GEMM share 0.80): 0.71-0.82.
  FlashAttention-2 on the same H100 reached 350-370 (0.44-0.47), Hopper-blind kernels that some eras ran: what their
  rows identify, not the centre;
- a platform gap (a CUDA-first engine's ROCm build: untuned GEMMs, triton attention, RCCL): 0.1-1.12 per side
  (memory, GEMM compute, prefill attention compute apart: vLLM 0.6's ROCm prefill at 10-20x its ceiling's time on
  long prompts is its flash attention's, while hipBLASLt GEMMs reach 0.54 of the peak);
- per kernel on the GPU, every era: 0.3-5 us, centre 1.5: the idle gap between consecutive kernels (NVIDIA's
  "Getting Started with CUDA Graphs", 2019: a 2.9 us kernel costs 3.4 us per launch inside a graph, 3.8 us from a
  stream) plus each kernel's ramp-up and tail wave (a GEMV at batch 1 fills the SMs only in its middle);
Host costs by era (review of 2026-12-01, shared/notes/expected-review.md section 4, and the sources below):
- per step: graph-captured eras 50-1,000 us (vLLM V1's blog: the CPU work between forward passes matters when a
  Llama-8B step on an H100 is ~5 ms on the GPU, so it is well under that); V0 0.2-5 ms (Python scheduler and
  sampling); eager eras 0.5-10 ms; C++ engines (TensorRT-LLM, LMDeploy TurboMind, MLC) 20-1,000 us; llama.cpp with
  CUDA graphs still builds its ggml graph, splits it and checks the captured graph against it on the CPU every token:
  10-15% of the time per token on its critical path for Llama-2 7B and 13B Q4_K_M on A100 and H100 (ggml-org/llama.cpp
  issue 7456, 2024-05, the CUDA graphs author's timings; the H100 PCIe's 7B runs at 163.8 tokens/s with graphs, issue
  6763), so 600-900 us there: centre 700 (the range stays 50-2,000 us for other CPUs and models);
- per running sequence per step (the step's host time grows with the batch: each request's slot in the inputs and
  block tables, its sampling parameters, its sampled token turned into a Python object, its output and
  detokenization): Python engines 1-100 us. vLLM before its V1 rewrite left "5-13 ms of GPU bubble" per decode step
  of a serving batch, "about 4 ms" in its Llama-3-8B H100 traces (vllm-project/vllm issue 6854, 2024-07, the
  multi-step scheduling RFC: de-tokenization, pythonization of outputs, input preparation, scheduling): 15 us a
  sequence or more over a batch of up to 256 (max_num_seqs' default); its output processing alone took 3.4 ms of a
  25 ms step at batch 32 on Llama-3-70B FP8 over 4 x H100 (issue 6913, 2024-07), about 100 us a sequence. V0 and
  eager eras 2-100 us, centre 15; TGI's Python model server likewise. V1 moved input preparation to persistent
  batches and output processing to another process (vLLM's V1 blog, 2025-01), but its step still grows with the
  batch ("CPU overhead increases as the batch size grows", issue 18760, 2025-05; a fast path for repeated decodes,
  PR 17866): 1-50 us. V1 in development left a 5-6 ms gap between two decode steps of a batch of 256 on Llama-2-7B
  (issue 10634 and PR 11133, 2024-12: 150-170 us with the asynchronous scheduling it proposed, which builds run
  when asked from 0.10 and by default from 0.14, PR 27614), about 20 us a sequence: centre 15 for vLLM V1; 5 for
  SGLang (its overlap scheduler runs the host's work while the GPU runs, from 0.4) and LMDeploy's PyTorch engine.
  C++ runtimes (TensorRT-LLM, TurboMind, MLC, llama.cpp, gpt-fast's loop): 0.1-10 us, centre 1;
- per launched kernel, eager eras only: 2-30 us (cudaLaunchKernel 1-3 us plus PyTorch's dispatch, 5-25 us per op
  in eager mode; llama.cpp launches from C++: 2-20 us). vLLM before 0.2.6 (2023, before CUDA graphs) spent far more
  a stage row, its model code and its workers' per-step handling all Python: on Llama-2-7B at batch 1 (5 prompt and
  100 output tokens, one GPU) a step took 12.0 ms eager against 10.5 ms with the CUDA graph its PR captured
  (vllm-project/vllm PR 1440, 2023-10: 1.2 s against 1.05 s); eager decode at batch 1 is host-bound (a graph gains
  only where the host, not the GPU, sets the pace), so the host spent about 12.0 ms a step: less the era's 2.0 ms
  step prior, 10.0 ms over Llama-2-7B's 228 launched stage rows, about 44 us a row (37 us if, on an A100, the graph
  run's own 3.5 ms of host time beyond the GPU's 7 ms is taken out instead; the PR names no GPU; range 10-100).
  vLLM from 0.2.6 run with --enforce-eager keeps the generic 2-30 us, centre 10;
- per collective on top of the link's own latency: NVLink/xGMI custom all-reduce 2-30 us, NCCL over PCIe or the
  network 10-100 us (llama.cpp's 2023 row split gathers partial results on the main GPU: 50-1,000 us);
- per request on a client-side harness: 0.5-50 ms (HTTP, tokenization, admission; at low concurrency a few
  tenths of a percent of a multi-second request, andyluo7.github.io 2026-05-14, vLLM 0.19 on MI300X).
Decode attention (paged GQA / MHA / MQA) by kernel family: the engines run different kernels for it, 2-3x apart at
one shape, so one engine's rows say nothing of another's, and an engine whose rows do not identify the class takes
its family's published figure, not a pool of other engines' rows (their pool is whichever engine has most rows):
- FlashInfer's decode (tensor cores for GQA) and TensorRT-LLM's XQA stream the KV cache at about a copy's rate:
  FlashInfer's single-request decode is "close to 100%" of the datasheet bandwidth at long contexts on an H100, and
  the page size (1 to 16) changes it little (flashinfer.ai blog "Accelerating Self-Attentions for LLM Serving with
  FlashInfer", 2024-02-02, figures 5 and 12); its batch decode at batch 128, 128 query / 16 KV heads, page 128, bf16
  on an H20 (4.0 TB/s) reads 1.07 GB in 0.339 ms at 1K tokens and 2.15 GB in 0.633 ms at 2K (3.2-3.4 TB/s, 0.79-0.85
  of the datasheet; flashinfer-ai/flashinfer issue 1753, 2025-09) and 17.2 GB in 5.10 ms at 16K (0.84; Dao-AILab/
  flash-attention issue 1572, 2025-04): about 1.0 of a copy (a copy streams 0.82-0.9 of the datasheet). Centre 1.0:
  SGLang (FlashInfer by default on CUDA through 0.4), MLC (FlashInfer in its CUDA backend), TensorRT-LLM (XQA);
- vLLM's PagedAttention kernels (v1/v2, and their ROCm port that TGI's ROCm builds call), like the FlashAttention
  paged decode it moved to, stream far less for GQA: FlashInfer's tensor-core decode is "up to 2-3x" faster than
  vLLM's PagedAttention on A100 and H100, 3x at batch 64 in Llama-70B's TP-2 shapes (the same blog, figure 9); the
  FlashAttention-3 paged decode of the H20 case above took 15.97 ms (9.3 ms with tuned tiles) where FlashInfer took
  5.10, 0.27-0.46 of the datasheet (issue 1572); FlashAttention-2's paged batch decode on an H100 SXM at batch 64,
  GQA 8, reached 15-47% of the datasheet at 32-256 tokens (microsoft/onnxruntime PR 21414, 2024-08). Centre 0.41
  (a copy's rate over 2-3, the log-middle): TGI (the 2024 ROCm builds its rows ran call vLLM's paged kernels).
  FlashInfer's author wrote in 2025-07 that every engine's kernels have since taken the same optimizations (packed
  KV, tensor cores; flashinfer-ai/flashinfer issue 1244): vLLM's eras before V1 (its PagedAttention v1/v2 kernels
  before 0.4, FlashAttention-2's paged decode in 0.4-0.7) take this family's centre as their own, apart from the
  engine's value, and V1 (FlashAttention-3's paged decode on Hopper, after those optimizations) the generic 1.0;
- SGLang's triton decode (its ROCm builds, and where `--attention-backend triton` is asked) is 2-3x FlashInfer's
  time at small batches and contexts, 1.25x at batch 4 x 4K tokens (sgl-project/sglang PR 2467, 2024-12): its
  fixed cost is the kernel gap's (`kernel_us`), its stream near FlashInfer's; SGLang keeps the centre 1.0;
- llama.cpp's own CUDA/HIP kernels, gpt-fast's SDPA over a static (unpaged) cache, LMDeploy TurboMind's decode: no
  published bandwidth figure found; the generic centre 1.0 (a kernel streaming at a copy's rate), said as "prior".
Dequantizing GEMV by kernel family, where an engine's int4 path is one kernel of its own: torch.compile'd loops
(gpt-fast's int4, torchao's int4_weight_only) call PyTorch's tinygemm (`aten._weight_int4pack_mm`), not the Marlin,
AWQ or GPTQ kernels the serving engines run, so its rows say nothing of theirs and theirs nothing of its own (never
pooled: WEIGHT_ONLY_BY_ENGINE). At batch 1 tinygemm (bf16, group 128) runs 2.06x and 2.33x faster than fp16
torch.matmul at 4096^2 and 8192^2 on an A100 SXM4, 2.32x and 2.26x on an H100, while it reads 0.266 of the bytes (4
bits and a bf16 scale and zero per 128 weights against 16 bits): it streams 0.55-0.62 of what the fp16 GEMV streams
(mobiusml/gemlite README, images/4bit_gs=128_*_{A100,H100}.svg, 2024-10-29: triton do_bench, L2 flushed, minimum of
the runs; read off the plots). Centre 0.58, their log-middle, as a share of a copy: every family's prior is stated
against a GEMV at a copy's rate (m.wo's centre, 1.0), not against the era's fitted GEMV (torch.compile's 0.92 would
give 0.53), so that a refit of the GEMV never moves a kernel's published figure; the range is m.wo's. gemlite measured
group 128; gpt-fast's int4 runs group 32, whose extra scale bytes the format's bits already count. The same kernel
library run on an A5000's 768 GB/s GDDR6 reached 0.87-0.94 (facebookresearch/any4 README.md, "Microbenchmark
Results": 3.26x at 4096, 3.52x at 8192): a narrower bus a GEMV fills more easily, not the HBM GPUs the rows ran on.
The centre is where a parameter stays when no rows identify it ("prior", and it says so in the profile).
"""

from __future__ import annotations

from dataclasses import dataclass

BANDWIDTH_PRODUCT = (0.70, 0.95)  # a GEMV's share of the datasheet bandwidth (copy share x memory efficiency)
GEMM_PRODUCT = (0.40, 0.95)  # a GEMM's share of the dense peak (GEMM share x compute efficiency)
SHRINK_SCALE = 0.3  # Laplace scale (in log) of an era's efficiency around its engine's, an engine's around all
COST_SCALE = 1.0  # Laplace scale (in log) of a host cost around its centre: weak, a tie-breaker
HINGE_SCALE = 0.01  # outside its range a parameter pays (distance in log / 0.01)^2 / 2: a stiff wall
PRODUCT_HINGE_SCALE = 0.01  # the GEMV's and GEMM's share of the datasheet, per GPU: a stiff wall (a physical bound)


@dataclass(frozen=True, slots=True)
class Prior:
    """A parameter's physical range and where it sits when nothing identifies it."""

    low: float
    high: float
    centre: float


EFFICIENCY_PRIORS: dict[str, Prior] = {
    "m.gemv": Prior(0.5, 1.12, 1.0),
    "m.wo": Prior(0.5, 1.12, 1.0),  # each format family (m.wo.int4, ...): centre = the era's GEMV
    "m.wo.fp8_block": Prior(0.09, 1.0, 0.26),  # block-scaled FP8 GEMV at DeepSeek-V3's shapes (docstring)
    "m.attention": Prior(0.3, 1.12, 1.0),
    "m.attention_mla": Prior(0.25, 1.12, 0.53),  # MLA's latent-cache kernel: triton's to FlashMLA (docstring)
    "m.moe": Prior(0.4, 1.12, 1.0),
    "c.gemm": Prior(0.4, 1.1, 1.0),
    "c.attention": Prior(0.3, 1.1, 0.8),  # prefill attention: FlashAttention-3's share of a GEMM (docstring)
    "c.moe": Prior(0.4, 1.1, 1.0),
    "gap.memory": Prior(0.1, 1.12, 1.0),
    "gap.compute": Prior(0.1, 1.12, 1.0),
    "gap.attention": Prior(0.1, 1.12, 1.0),
    "gap.step": Prior(0.3, 5.0, 1.0),
}

# Host costs in us: (engine, era) -> {cost: Prior}. Eras without a launch cost capture their graphs.
_SEQ_V0 = {"seq_us": Prior(2, 100, 15)}  # per running sequence per step: Python schedulers before vLLM V1 (docstring)
_SEQ_PY = {"seq_us": Prior(1, 50, 5)}  # ... V1-style Python schedulers (persistent batch, output process apart)
_SEQ_CPP = {"seq_us": Prior(0.1, 10, 1)}  # ... C++ runtimes
_SEQ_V1 = {"seq_us": Prior(1, 50, 15)}  # ... vLLM V1 (docstring)
_GRAPHS_PY = {"step_us": Prior(50, 1000, 300), **_SEQ_PY}  # Python schedulers with CUDA graphs (vLLM V1, SGLang)
_CPP = {"step_us": Prior(20, 1000, 150), **_SEQ_CPP}  # C++ runtimes (TensorRT-LLM, TurboMind, MLC, torch.compile)
_NVLINK_COLL = {"coll.nvlink": Prior(2, 30, 10), "coll.pcie": Prior(10, 100, 40), "coll.network": Prior(10, 100, 40)}
_CLIENT = {"request_us": Prior(500, 50_000, 5000)}
# llama.cpp's collectives in either era: its own NVLink path, and host-staged copies over PCIe and the network
_LLAMA_CPP_COLL = {
    "coll.nvlink": Prior(2, 30, 15),
    "coll.pcie": Prior(50, 1000, 300),
    "coll.network": Prior(50, 1000, 300),
}
KERNEL_GAP = Prior(0.3, 5, 1.5)  # us per kernel on the GPU, every era (see the module docstring)
# vLLM without graphs, either era: a Python scheduler, NCCL from Python; the two differ in their launch cost
_VLLM_EAGER = {
    "step_us": Prior(500, 10_000, 2000),
    **_SEQ_V0,
    "coll.nvlink": Prior(2, 30, 15),
    "coll.pcie": Prior(10, 100, 50),
    "coll.network": Prior(10, 100, 50),
    **_CLIENT,
}
COST_PRIORS: dict[tuple[str, str], dict[str, Prior]] = {
    # before 0.2.6: vLLM PR 1440's eager step on Llama-2-7B (the module docstring)
    ("vllm", "eager"): {**_VLLM_EAGER, "launch_us": Prior(10, 100, 44)},
    ("vllm", "enforce-eager"): {**_VLLM_EAGER, "launch_us": Prior(2, 30, 10)},
    ("vllm", "v0"): {"step_us": Prior(200, 5000, 1000), **_SEQ_V0, **_NVLINK_COLL, **_CLIENT},
    ("vllm", "v1"): {**_GRAPHS_PY, **_SEQ_V1, **_NVLINK_COLL, **_CLIENT},
    ("tensorrt-llm", "static"): {"step_us": Prior(20, 500, 100), **_SEQ_CPP, **_NVLINK_COLL, **_CLIENT},
    ("tensorrt-llm", "inflight"): {"step_us": Prior(50, 1000, 200), **_SEQ_CPP, **_NVLINK_COLL, **_CLIENT},
    ("sglang", "main"): {**_GRAPHS_PY, **_NVLINK_COLL, **_CLIENT},
    ("lmdeploy", "pytorch"): {**_GRAPHS_PY, **_NVLINK_COLL, **_CLIENT},
    ("lmdeploy", "turbomind"): {**_CPP, **_NVLINK_COLL, **_CLIENT},
    ("llama.cpp", "eager"): {
        "step_us": Prior(100, 5000, 500),
        **_SEQ_CPP,
        "launch_us": Prior(2, 20, 5),
        **_LLAMA_CPP_COLL,
        **_CLIENT,
    },  # fmt: skip
    ("llama.cpp", "graphs"): {
        "step_us": Prior(50, 2000, 700),  # llama.cpp issue 7456 (the module docstring)
        **_SEQ_CPP,
        **_LLAMA_CPP_COLL,
        **_CLIENT,
    },  # fmt: skip
    ("tgi", "main"): {"step_us": Prior(200, 5000, 1000), **_SEQ_V0, **_NVLINK_COLL, **_CLIENT},
    ("mlc", "main"): {**_CPP, **_NVLINK_COLL, **_CLIENT},
    ("torch-compile", "main"): {"step_us": Prior(20, 500, 100), **_SEQ_CPP, **_NVLINK_COLL, **_CLIENT},
}
# decode attention's kernel family by engine (the module docstring): its prior centre where its rows identify nothing
PAGED_KERNELS = Prior(0.3, 1.12, 0.41)  # vLLM's PagedAttention / FlashAttention's paged decode
ATTENTION_BY_ENGINE: dict[str, Prior] = {"tgi": PAGED_KERNELS}
# eras whose decode attention is a kernel family of its own, apart from their engine's pooled value (the docstring)
ATTENTION_BY_ERA: dict[tuple[str, str], Prior] = {
    ("vllm", "eager"): PAGED_KERNELS,
    ("vllm", "enforce-eager"): PAGED_KERNELS,
    ("vllm", "v0"): PAGED_KERNELS,
}
UNPOOLED = frozenset({"m.attention", "m.attention_mla"})  # classes an engine never takes from other engines' rows
# an engine's dequantizing GEMV that is a kernel of its own (the module docstring): its prior, and no all-engines pool
TINYGEMM_INT4 = Prior(0.5, 1.12, 0.58)
WEIGHT_ONLY_BY_ENGINE: dict[tuple[str, str], Prior] = {("torch-compile", "m.wo.int4"): TINYGEMM_INT4}
EAGER_CELLS = frozenset(cell for cell, costs in COST_PRIORS.items() if "launch_us" in costs)


def efficiency_prior(key: str) -> Prior:
    """The range and centre of an efficiency or gap key (`m.wo.int4` reads `m.wo`'s)."""
    if key in EFFICIENCY_PRIORS:
        return EFFICIENCY_PRIORS[key]
    return EFFICIENCY_PRIORS["m.wo" if key.startswith("m.wo.") else key]


def own_family(engine: str, era: str, key: str) -> bool:
    """Whether this era's decode attention is a kernel family of its own (ATTENTION_BY_ERA): no engine value above."""
    return key == "m.attention" and (engine, era) in ATTENTION_BY_ERA


def engine_efficiency_prior(engine: str, key: str) -> Prior:
    """An engine's prior for an efficiency or gap key: its decode-attention or dequantizing kernel family's, else the
    key's."""
    if key == "m.attention":
        return ATTENTION_BY_ENGINE.get(engine, EFFICIENCY_PRIORS["m.attention"])
    return WEIGHT_ONLY_BY_ENGINE.get((engine, key)) or efficiency_prior(key)


def unpooled(engine: str, key: str) -> bool:
    """Whether an engine's value of `key` has no all-engines parent: decode attention for every engine, and a
    dequantizing kernel of the engine's own (WEIGHT_ONLY_BY_ENGINE); its family's prior centre stands in."""
    return key in UNPOOLED or (engine, key) in WEIGHT_ONLY_BY_ENGINE


def cost_prior(engine: str, era: str, key: str) -> Prior:
    """The range and centre of one era's host cost."""
    return KERNEL_GAP if key == "kernel_us" else COST_PRIORS[(engine, era)][key]
