"""--explain and --journey are views of the engine's parts: every `label: a x b = c` line redoes its arithmetic.

The checker below evaluates each expression with the values as printed (4 significant digits, decimal unit
prefixes) and compares it with the printed result, so a line that shows numbers the engine did not use fails.
"""

from __future__ import annotations

import math
import re

import pytest

from tokcost.engine.estimate import estimate
from tokcost.engine.explain import explanation_lines
from tokcost.engine.journey import journey
from tokcost.engine.workload import Workload
from tokcost.hardware.library import load_gpu, load_network
from tokcost.models.library import load_model

PREFIX = {"": 1.0, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12}
TIME = {"s": 1.0, "ms": 1e-3, "us": 1e-6}
TOKEN = re.compile(
    r"(?P<max>max\(|min\()"
    r"|(?P<num>\d[\d,]*(?:\.\d+)?(?:e[+-]?\d+)?)(?:\s*(?P<unit>[kMGT]?(?:FLOP/s|FLOP/B|FLOP|B/s|B)|ms|us|s|W|J|\$/h|\$)(?![\w/]))?"
    r"|(?P<op> x |[/+\-(),])"
    r"|(?P<word>[A-Za-z_][\w\-.]*)"
    r"|(?P<space>\s+)"
)


def _value(num: str, unit: str | None) -> float:
    x = float(num.replace(",", ""))
    if not unit:
        return x
    if unit in TIME:
        return x * TIME[unit]
    if unit[0] in PREFIX and unit[1:] in ("FLOP/s", "FLOP", "B/s", "B"):
        return x * PREFIX[unit[0]]
    return x  # FLOP, B, FLOP/B, W, J, $, $/h: base units


def evaluate(expr: str) -> float:
    """The arithmetic of `expr` with units turned to SI and label words dropped."""
    out, pos = [], 0
    while pos < len(expr):
        m = TOKEN.match(expr, pos)
        assert m, f"cannot read {expr[pos:]!r} in {expr!r}"
        pos = m.end()
        if m["max"]:
            out.append(m["max"])
        elif m["num"]:
            out.append(repr(_value(m["num"], m["unit"])))
        elif m["op"]:
            out.append("*" if m["op"] == " x " else m["op"])
    return float(eval("".join(out), {"__builtins__": {}, "max": max, "min": min}))  # noqa: S307 - digits and operators only


def checked_lines(lines: list[str]) -> int:
    """Redo every `label: expression = value` line; returns how many were checked."""
    checked = 0
    for line in lines:
        left, sep, right = line.partition(" = ")
        if not sep or ": " not in left:
            continue
        expr = left.rpartition(": ")[2]
        result = TOKEN.match(right.strip())
        assert result and result["num"], line
        want = _value(result["num"], result["unit"])
        got = evaluate(expr)
        assert got == pytest.approx(want, rel=4e-3, abs=1e-9 * max(abs(want), 1e-12) + 5e-10), line
        checked += 1
    return checked


CASES = {
    "dense": ("llama-3.1-8b", "h100-sxm", {}),
    "tensor parallel": ("llama-3.1-70b", "h100-sxm", {"tp": 4, "batch": 16}),
    "long prefill, two-shot": ("llama-3.1-70b", "h200", {"tp": 8, "prompt_tokens": 16_000}),
    "tensor parallel across nodes": ("llama-3.1-70b", "h100-sxm", {"tp": 16}),
    "tensor parallel across uneven nodes": ("llama-3.1-70b", "h100-sxm", {"tp": 16, "gpus_per_node": 3}),
    "tensor parallel, one GPU a node": ("llama-3.1-8b", "h100-sxm", {"tp": 2, "gpus_per_node": 1}),
    "pipeline": ("llama-3.1-405b", "h100-sxm", {"tp": 8, "pp": 2, "batch": 8}),
    "moe, expert parallel, dp attention": ("deepseek-v3", "h100-sxm", {"ep": 16, "dp": 16, "batch": 256,
                                                                         "weights_dtype": "fp8"}),
    "moe tensor parallel": ("mixtral-8x7b", "h200", {"tp": 2, "batch": 8}),
    "sliding window": ("gemma-2-9b", "l40s", {"prompt_tokens": 8000}),
    "sparse attention past its top k": ("deepseek-v3.2", "h200", {"tp": 8, "prompt_tokens": 16_000, "batch": 4}),
    # FlashMLA's sparse FP8 layout: the formula had shown 1 B an element where the cache keeps 656 B a token
    "sparse attention, fp8 cache": ("deepseek-v3.2", "h200", {"tp": 8, "batch": 4, "kv_dtype": "fp8"}),
    "weight-only int4 on pcie": ("llama-3.1-70b", "rtx-4090", {"tp": 2, "weights_dtype": "int4"}),
    "one output token": ("qwen3-8b", "mi300x", {"output_tokens": 1}),
    "cached prefix": ("llama-3.1-8b", "a100-80gb-sxm", {"prompt_tokens": 4096, "cached_prefix_tokens": 2048,
                                                       "batch": 4}),
}  # fmt: skip


@pytest.mark.parametrize("case", CASES)
def test_every_explained_line_redoes_its_arithmetic(case):
    model, gpu, wl = CASES[case]
    e = estimate(load_model(model), load_gpu(gpu), Workload(**wl), load_network("ib-ndr-400"))
    lines = explanation_lines(e)
    assert checked_lines(lines) >= 15, lines


def test_the_checker_catches_a_wrong_line():
    with pytest.raises(AssertionError):
        checked_lines(["weights: 2 x 3.000 GB = 7.000 GB"])
    assert checked_lines(["weights: 2 x 3.000 GB = 6.000 GB", "bandwidth: 3.350 TB/s x 0.57 = 1.909 TB/s"]) == 2


@pytest.mark.parametrize("case", CASES)
def test_the_journey_adds_up_to_the_pass_times(case):
    model, gpu, wl = CASES[case]
    e = estimate(load_model(model), load_gpu(gpu), Workload(**wl), load_network("ib-ndr-400"))
    j = journey(e)
    assert sum(r.ceiling_s for r in j.prefill) == pytest.approx(e.ceiling.prefill.seconds, rel=1e-12)
    assert sum(r.expected_s for r in j.prefill) == pytest.approx(e.expected.prefill.seconds, rel=1e-12)
    if e.ceiling.decode_step is None:
        assert j.decode is None
        return
    assert sum(r.ceiling_s for r in j.decode) == pytest.approx(e.ceiling.decode_step.seconds, rel=1e-12)
    assert sum(r.expected_s for r in j.decode) == pytest.approx(e.expected.decode_step.seconds, rel=1e-12)
    names = [r.name for r in j.decode]
    assert names[0] == "tokenize" and names[-1] == "detokenize and loop back"
    assert {"LM head", "attention (KV cache read)", "KV cache write"} <= set(names)
    # with pipeline stages the rows are the slowest stage's (here the last, which holds the LM head)
    assert ("embedding lookup" in names) == (e.layout.pp == 1)
    assert math.isclose(sum(r.share for r in j.decode), 1.0, rel_tol=1e-9)


def test_journey_of_llama_8b_sums_to_the_printed_tpot():
    # the done-when: the decode step's stages add up to TPOT, the LM head and the KV read on their own lines
    e = estimate(load_model("llama-3.1-8b"), load_gpu("h100-sxm"), Workload())
    rows = {r.name: r for r in journey(e).decode}
    assert sum(r.ceiling_s for r in rows.values()) == pytest.approx(e.ceiling.tpot_s, rel=1e-9)
    head = rows["LM head"]
    assert head.bytes_read == pytest.approx(128_256 * 4096 * 2 + 4096 * 2)  # vocab x hidden x 2 B + one row in
    # the LM head alone costs about as much as two of the 32 blocks
    block = sum(r.ceiling_s for r in rows.values() if r.block) / 32
    assert 1.5 < head.ceiling_s / block < 2.5


def test_expected_names_every_kernel_class_a_deployment_reads():
    # an int4 checkpoint's matmuls run TensorRT-LLM's weight-only class, not its GEMV: --explain printed only the
    # GEMV's 0.897 while the step used the int4 class's value (5.6% apart on the step)
    from tokcost.profiles import load_engine

    engine = load_engine("tensorrt-llm")
    e = estimate(load_model("llama-3.1-8b"), load_gpu("l40s"), Workload(batch=8, weights_dtype="int4"),
                 engine=engine)  # fmt: skip
    side = next(x for x in explanation_lines(e) if x.strip().startswith("memory side:"))
    assert f"weight-only int4 {engine.kernels.memory_of('weight_only', 'int4'):.3g}" in side
    assert "routed experts x" in side and "on top of their format's class" in side
    dense = estimate(load_model("llama-3.1-8b"), load_gpu("l40s"), Workload(batch=8), engine=engine)
    assert "weight-only" not in next(x for x in explanation_lines(dense) if x.strip().startswith("memory side:"))


def test_expected_says_what_the_ceiling_hides_and_the_engine_does_not():
    # TP 2 at FP8 compute: the collectives run in series under "expected" (only the ceiling subtracts them, marked
    # "hidden"), and the 16-bit matmuls run at the bf16 GEMM share, which the lines now give beside the FP8 one
    w = Workload(batch=64, tp=2, weights_dtype="fp8", compute_dtype="fp8")
    e = estimate(load_model("llama-3.1-70b"), load_gpu("mi300x"), w)
    lines = [x.strip() for x in explanation_lines(e)]
    assert "overlap: none; the collectives run in series with the kernels (the ceiling alone hides them)" in lines
    assert any(x.startswith("one stage-time:") and " hidden = " in x for x in lines)
    half = load_gpu("mi300x").hardware.gemm_for("bf16")
    assert any(x.startswith("GEMM (bf16, for the matmuls that stay 16-bit") and f"x {half.fraction:g} =" in x
               for x in lines)  # fmt: skip


@pytest.mark.parametrize(("compute", "key"), [("fp8", "fp8"), (None, "bf16")])
def test_expected_names_the_gemm_share_of_the_dtype_the_matmuls_run_in(cli, compute, key):
    # an FP8 run on an H100 is priced at its FP8 GEMM share (0.76, an anchor), and every "expected from" line had
    # named the bf16 one (0.8, measured) whatever the compute dtype
    gpu = load_gpu("h100-sxm")
    figure = gpu.hardware.gemm_for(key)
    said = f"{key} GEMM {figure.fraction:g} ({figure.basis})"
    w = Workload(weights_dtype="fp8", compute_dtype=compute) if compute else Workload()
    e = estimate(load_model("llama-3.1-8b"), gpu, w)
    assert said in next(x for x in explanation_lines(e) if x.strip().startswith("hardware ("))
    flags = ["--weights", "fp8", "--compute-dtype", compute] if compute else []
    printed = cli("compare", "-m", "llama-3.1-8b", "-g", "h100-sxm", *flags, "-f", "json")
    assert {row["expected_provenance"] for row in printed.json()["rows"]} == {gpu.expected_provenance_at(compute)}
    assert said in gpu.expected_provenance_at(compute)


def test_weights_held_are_those_read_plus_the_embedding_table():
    # Llama-3.1-8B: the memory table holds 16.06 GB, a step reads 15.01 GB; the rest is the embedding table, by hand
    # 128,256 x 4,096 x 2 B = 1.051 GB, looked up a row per token (the LM head is its own 1.051 GB, read every step)
    e = estimate(load_model("llama-3.1-8b"), load_gpu("h100-sxm"), Workload())
    line = next(x.strip() for x in explanation_lines(e) if x.strip().startswith("weights held by each GPU"))
    read, rest, held = (float(v) for v in re.findall(r"([\d.]+) GB", line)[:3])
    assert held == pytest.approx(read + rest, abs=0.002)
    assert rest == pytest.approx(128_256 * 4_096 * 2 / 1e9, abs=0.001)


def test_weights_held_are_the_stage_the_step_reads_under_uneven_pipeline_stages():
    # Llama-3.1-70B on 3 stages: 27 + 27 + 26 layers (the first stages take the extra). The slowest stage is the last
    # (26 layers + the LM head, 46.60 GB, all read); the fullest GPU is the first (27 layers + the embedding table):
    # the audit of 2026-12-05 found the line adding the last stage's reads to the first stage's holdings
    e = estimate(load_model("llama-3.1-70b"), load_gpu("h100-sxm"), Workload(pp=3, batch=12))
    (line,) = _lines_starting(e, "weights held by a GPU of pipeline stage")
    assert line.startswith("weights held by a GPU of pipeline stage 2 (of 0..2): ") and "every one read" in line
    held, fullest = (float(v) for v in re.findall(r"([\d.]+) GB", line))
    layer = (8192 * (64 + 2 * 8) * 128 + 64 * 128 * 8192 + 3 * 8192 * 28_672 + 2 * 8192) * 2  # one layer, bf16
    head = 128_256 * 8192 * 2  # the LM head (and, on stage 1, the embedding table: the same size)
    assert held == pytest.approx((26 * layer + head + 8192 * 2) / 1e9, abs=0.005)  # + the final norm
    assert fullest == pytest.approx((27 * layer + head) / 1e9, abs=0.005)
    assert fullest == pytest.approx(e.memory.per_gpu.weights / 1e9, abs=0.005)


def _lines_starting(e, prefix: str) -> list[str]:
    return [x.strip() for x in explanation_lines(e) if x.strip().startswith(prefix)]


@pytest.mark.parametrize("case", ["dense", "pipeline", "moe tensor parallel", "sliding window"])
def test_memory_limits_show_the_sum_at_the_limit_and_one_past_it(case):
    model, gpu, wl = CASES[case]
    e = estimate(load_model(model), load_gpu(gpu), Workload(**wl), load_network("ib-ndr-400"))
    cap = e.memory.capacity_bytes_per_gpu
    (batch,) = _lines_starting(e, "max batch at")
    (context,) = _lines_starting(e, "max context at")
    for line, limit in ((batch, e.memory.max_batch), (context, e.memory.max_context)):
        assert f": {limit:,}: " in line, line
        at, _, rest = line.partition(" <= ")
        assert evaluate(at.rpartition(": ")[2].partition(" = ")[0]) <= cap * (1 + 4e-3), line
        if "sequences: " in rest or "tokens: " in rest:  # one past the limit no longer fits
            past = rest.rpartition(": ")[2]
            assert " > " in past and _value(*re.match(r"([\d.,]+) (\w?B)", past).groups()) > cap * (1 - 4e-3), line
        else:
            assert "the model's own context limit" in rest and limit == e.model.max_context


def test_max_batch_of_llama_8b_by_hand():
    # 8B on an H100 at 1,024 + 256 tokens: (85.52 GB x 0.9 - 16.06 GB weights - workspace) / (1,280 x 131,072 B)
    e = estimate(load_model("llama-3.1-8b"), load_gpu("h100-sxm"), Workload())
    (line,) = _lines_starting(e, "max batch at")
    b = e.memory.max_batch
    kv = float(re.search(r"([\d.]+) GB KV", line)[1]) * 1e9
    assert kv == pytest.approx(b * 1_280 * 131_072, rel=1e-3)
    assert (0.9 * e.memory.capacity_bytes_per_gpu - 16.06e9) / (1_280 * 131_072) == pytest.approx(b, abs=8)


def test_critical_batches_show_both_sides_flip_at_the_batch():
    e = estimate(load_model("llama-3.1-8b"), load_gpu("h100-sxm"), Workload())
    (compute,) = _lines_starting(e, "weight matmuls turn compute-bound")
    (kv,) = _lines_starting(e, "KV reads outweigh weight reads")
    b = e.critical_batch_compute
    below, at = re.findall(r"batch ([\d,]+): ([\d.]+ m?s) of FLOPs ([<>]=?) ([\d.]+ m?s) of bytes", compute)
    assert (below[0], at[0]) == (f"{b - 1:,}", f"{b:,}") and (below[2], at[2]) == ("<=", ">")
    # the FLOP side by hand: batch x the step's 15.01 GFLOP of weight matmuls over the 989.4 TFLOP/s dense peak
    flops_s = _value(*at[1].split())
    assert flops_s == pytest.approx(b * 15.01e9 / 989.4e12, rel=2e-3)
    k = e.critical_batch_kv
    below, at = re.findall(r"batch ([\d,]+): ([\d.]+ GB) KV ([<>]=?) ([\d.]+ GB) weights", kv)
    assert (below[0], at[0]) == (f"{k - 1:,}", f"{k:,}") and (below[2], at[2]) == ("<", ">=")
    # the KV side by hand: k sequences x (the mean decode context + the new token) x 131,072 B
    kv_bytes = _value(*at[1].split())
    assert kv_bytes == pytest.approx(k * (e.mean_decode_context + 1) * 131_072, rel=2e-3)
    assert _value(*at[3].split()) == pytest.approx(15.01e9, rel=1e-3)


def test_journey_csv_closes_each_phase_with_the_pass_time_its_rows_add_up_to(cli):
    import csv
    import io

    r = cli("estimate", "-m", "llama-3.1-70b", "-g", "h100-sxm", "--tp", "4", "--journey", "-f", "csv")
    assert r.exit_code == 0, r.output
    rows = list(csv.DictReader(io.StringIO(r.stdout)))
    for phase in ("decode_step", "prefill"):
        (total,) = [x for x in rows if x["phase"] == phase and x["name"] == "total"]
        parts = sum(float(x["ceiling_s"]) for x in rows if x["phase"] == phase and x["name"] != "total")
        assert float(total["ceiling_s"]) == pytest.approx(parts, rel=1e-9)


@pytest.mark.parametrize(("gpu", "tp", "beyond"), [("l40s", 8, 4), ("a40", 4, 2)])
def test_a_group_beyond_the_links_domain_names_the_link_it_crosses(gpu, tp, beyond):
    # an 8 x L40S ring crosses the CPU sockets and an A40 group beyond its bridged pair crosses PCIe: the deployment
    # lines give that link's figures, and the all-reduce lines use its latency at the group's size
    g = load_gpu(gpu)
    e = estimate(load_model("llama-3.1-70b"), g, Workload(tp=tp))
    lines = [x.strip() for x in explanation_lines(e)]
    host = g.host_link
    assert host is not None
    assert f"a group of more than {beyond} GPUs: {host.kind}, {host.gb_s:g} GB/s per direction, " \
           f"{host.latency_us:g} us per step" in "\n".join(lines)  # fmt: skip
    reduce = next(x for x in lines if x.startswith("attention all-reduce (dense layer): 80 x ("))
    assert f"({host.latency_at_s(tp) * 1e6:.2f} us + " in reduce and f"{tp} GPUs over {host.kind}" in reduce


def test_a_chunked_models_tpot_is_the_steps_mean_and_explain_says_how_far_from_the_step_shown(cli):
    # Llama-4-Scout at TP 4: 36 of its 48 layers attend within chunks of 8,192 and read c mod 8,192 cached tokens. At
    # the mean context (8,255) that is 63; over 8,000..8,510 it is a mean of 3,141: the step shown (11.32 ms) is not
    # TPOT (11.86 ms), which the audit of 2026-12-05 could reproduce only by hand. The difference is those reads:
    # 36 layers x 16 sequences x (3,141 - 63) tokens x 1,024 B (2 of 8 KV heads x 128 x 2 B x K and V) / 3,350 GB/s
    out = cli("estimate", "-m", "llama-4-scout", "-g", "h100-sxm", "--tp", "4", "--prompt", "8000", "--output", "512",
              "--batch", "16", "--explain")  # fmt: skip
    assert out.exit_code == 0, out.stderr
    text = out.stdout
    tpot = float(re.search(r"TPOT \(ceiling\) = mean decode step over cached contexts [\d,.]+ = ([\d.]+) ms", text)[1])
    step = float(re.search(r"the decode step above is at the mean context, 8,255 tokens: ([\d.]+) ms", text)[1])
    layers, at, mean = re.search(
        r"(\d+) chunked layers read c mod 8,192 cached tokens: ([\d,]+) at the mean context, a mean of ([\d,.]+)", text
    ).groups()
    assert (int(layers), int(at)) == (36, 8255 % 8192)
    assert float(mean.replace(",", "")) == pytest.approx(sum(c % 8192 for c in range(8000, 8511)) / 511, abs=0.05)
    extra_s = 36 * 16 * (float(mean.replace(",", "")) - 63) * 1024 / 3350e9
    assert tpot == pytest.approx(step + extra_s * 1e3, abs=0.01)


@pytest.mark.parametrize(
    ("args", "pairs", "touched"),
    [
        # by hand: 8 + sqrt(8 x 2 x 1/2 x 1/2 x 6/7) sqrt(2 ln 2) = 10.18 pairs; 4 (1 - (3/4)^10.18) = 3.786 experts
        (("-m", "mixtral-8x7b", "-g", "mi300x", "--tp", "2", "--ep", "2", "--batch", "8"), 10.18, 3.786),
        (("-m", "mixtral-8x7b", "-g", "h100-sxm", "--batch", "1"), 2, 2),  # one rank: T k pairs, k experts
    ],
)
def test_explain_derives_the_busiest_ranks_pairs_and_experts(cli, args, pairs, touched):
    # an audit: "routed experts: 32 x 346.5 MB" and an all-to-all's bytes printed with no count behind them
    out = cli("estimate", *args, "--explain")
    assert out.exit_code == 0, out.stderr
    routing = next(x for x in out.stdout.splitlines() if x.strip().startswith("routing (uniform"))
    read = next(x for x in out.stdout.splitlines() if x.strip().startswith("experts read on that rank"))
    assert float(routing.rsplit("= ", 1)[1].split()[0]) == pytest.approx(pairs, abs=0.01)
    assert float(read.rsplit("= ", 1)[1]) == pytest.approx(touched, abs=0.001)


def test_a_pipelines_critical_batch_sides_are_one_microbatchs_and_say_so(cli):
    # Llama-3.1-70B on an A100 at TP 2 x PP 2: a 748-sequence step runs 2 microbatches of 374, and the sides compared
    # are one microbatch's on the slowest stage (374 x 1,151 tokens x 40 layers x 2,048 B = 35.26 GB of KV); the
    # line had put them under the whole batch's label (an audit: 748 sequences read 70.5 GB a stage)
    out = cli("estimate", "-m", "llama-3.1-70b", "-g", "a100-80gb-sxm", "--tp", "2", "--pp", "2", "--explain")
    assert out.exit_code == 0, out.stderr
    line = next(x for x in out.stdout.splitlines() if x.strip().startswith("KV reads outweigh weight reads"))
    found = re.search(r"batch ([\d,]+) \(a microbatch of ([\d.,]+) of 2, the slowest stage's\): ([\d.]+) GB KV <", line)
    assert found, line
    batch, micro, kv = int(found[1].replace(",", "")), float(found[2].replace(",", "")), float(found[3])
    assert micro == batch / 2 and kv == pytest.approx(micro * 1151 * 40 * 2048 / 1e9, abs=0.01)
