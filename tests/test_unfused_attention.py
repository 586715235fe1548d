"""Flash attention off (llama-bench's -fa 0 default; llama.cpp builds before -fa): attention writes each scored pair's
fp32 score out, softmax reads and rewrites it, the PV matmul reads it back, 16 B per pair and head (SCORE_BYTES), where
a fused kernel keeps them on chip. The llama.cpp rows that ran so say `flash_attention: false`; the lhl RTX 4090
pp3968 prefill was +73% fast held out, its 129 GB of score traffic unpriced."""

from __future__ import annotations

from pathlib import Path

import pytest

import tokcost
from tokcost import Workload, estimate, load_model
from tokcost.engine.mixer_stages import SCORE_BYTES
from tokcost.errors import UsageError
from tokcost.validation.data import load_rows

DATA = Path(__file__).resolve().parents[1] / "tokcost" / "validation" / "published.yaml"

LLAMA2 = load_model("llama-2-7b")  # 32 layers, 32 query heads of 128


def _attention(e, phase: str):
    cost = e.ceiling.prefill if phase == "prefill" else e.ceiling.decode_step
    return next(p.stage for p in cost.stages if p.stage.name == "attention (KV cache read)")


def _pair(prompt: int):
    return [
        estimate(model=LLAMA2, gpu="rtx-4090",
                 workload=Workload(weights_dtype="q4_0", prompt_tokens=prompt, output_tokens=2, flash_attention=fa))
        for fa in (True, False)
    ]  # fmt: skip


@pytest.mark.parametrize("prompt", [512, 3968])
def test_unfused_prefill_moves_every_causal_pair_s_score_through_memory(prompt):
    fused, unfused = (_attention(e, "prefill") for e in _pair(prompt))
    heads, pairs = LLAMA2.attention_heads, prompt * (prompt + 1) / 2  # causal: token i scores i keys, itself too
    assert SCORE_BYTES == 16
    assert unfused.bytes_read - fused.bytes_read == pytest.approx(pairs * heads * SCORE_BYTES / 2)
    assert unfused.bytes_written - fused.bytes_written == pytest.approx(pairs * heads * SCORE_BYTES / 2)
    assert unfused.flops == fused.flops  # the same arithmetic, only its traffic


def test_unfused_decode_scores_the_whole_context_per_head():
    fused, unfused = (_attention(e, "decode") for e in _pair(3968))
    # one query over 3,968 prompt tokens and itself, 32 heads, 8 B written and 8 B read a pair
    assert unfused.bytes_written - fused.bytes_written == pytest.approx(3969 * 32 * 8)


def test_the_lhl_rtx_4090_prefill_by_hand():
    # 3,968 tokens: 7.87 M causal pairs x 32 heads x 16 B x 32 layers = 129.0 GB at 1,008 GB/s = 128 ms more
    fused, unfused = _pair(3968)
    assert unfused.ceiling.ttft_s - fused.ceiling.ttft_s == pytest.approx(3968 * 3969 / 2 * 32 * 16 * 32 / 1008e9,
                                                                          rel=0.2)  # fmt: skip
    assert unfused.expected.ttft_s > fused.expected.ttft_s


def test_the_llama_cpp_rows_say_when_flash_attention_was_off():
    rows = [r for r in load_rows(DATA) if r.engine == "llama.cpp"]
    off = {r.id for r in rows if not r.flash_attention}
    assert {r.id for r in rows if "-fa" in r.id.split("tg128")[-1]} == {r.id for r in rows} - off
    assert "lhl-rtx4090-llamacpp-llama2-7b-q4-0-pp3968" in off and len(off) == 25


def test_the_cli_flag(cli):
    on = cli("estimate", "-m", "llama-2-7b", "-g", "rtx-4090", "-p", "3968", "-f", "json").json()
    off = cli("estimate", "-m", "llama-2-7b", "-g", "rtx-4090", "-p", "3968", "--no-flash-attention", "-f",
              "json").json()  # fmt: skip
    assert on["workload"]["flash_attention"] is True and off["workload"]["flash_attention"] is False
    assert off["ceiling"]["ttft_s"] > on["ceiling"]["ttft_s"]


def test_unfused_scores_are_traffic_not_cache_so_the_kv_critical_batch_stays():
    def critical(fa: bool):
        return estimate(model=load_model("llama-3.1-8b"), gpu="h100-sxm",
                        workload=Workload(prompt_tokens=8192, flash_attention=fa)).critical_batch_kv  # fmt: skip

    assert critical(False) == critical(True) == 14


def test_unfused_attention_holds_a_micro_batch_of_scores_in_memory():
    # a 512-token micro-batch's fp32 scores against a 120,100-token context, 32 heads: 512 x 120,100 x 32 x 4 B = 7.9 GB
    def run(fa: bool):
        wl = Workload(weights_dtype="q4_0", prompt_tokens=120_000, output_tokens=100, flash_attention=fa)
        return estimate(model=load_model("llama-3.1-8b"), gpu="rtx-4090", workload=wl).memory

    on, off = run(True), run(False)
    assert off.per_gpu.workspace - on.per_gpu.workspace == pytest.approx(512 * 120_100 * 32 * 4)
    assert on.fits and not off.fits


def test_compare_and_sweep_take_the_flag_and_say_so(cli):
    args = ("-m", "llama-2-7b", "-g", "rtx-4090", "-p", "3968", "-o", "64")
    on, off = (cli("compare", *args, *flag, "-f", "json").json()["rows"][0] for flag in ((), ("--no-flash-attention",)))
    assert on["flash_attention"] is True and off["flash_attention"] is False
    assert off["ttft_s"] > on["ttft_s"] and off["tpot_s"] > on["tpot_s"]  # scores through memory, both phases
    table = cli("compare", *args, "--no-flash-attention", "-f", "markdown").stdout
    assert "flash attention off (scores through memory)" in table
    on, off = (cli("sweep", *args, "-b", "1,4", *flag, "-f", "json").json() for flag in ((), ("--no-flash-attention",)))
    points_on, points_off = on["points"], off["points"]
    assert [p["flash_attention"] for p in points_off] == [False, False]
    assert all(b["tpot_s"] > a["tpot_s"] for a, b in zip(points_on, points_off, strict=True))


def test_plan_takes_the_flag_in_the_cli_and_the_api(cli):
    args = ("plan", "-m", "llama-2-7b", "-g", "rtx-4090", "--engine", "llama.cpp", "--rate", "0.5", "-p", "3000",
            "-o", "200", "-f", "json")  # fmt: skip
    on, off = (cli(*args, *flag).json() for flag in ((), ("--no-flash-attention",)))
    assert on["workload"]["flash_attention"] is True and off["workload"]["flash_attention"] is False
    first_on, first_off = on["configs"][0]["expected"], off["configs"][0]["expected"]
    assert first_off["ttft_s"]["p90"] > first_on["ttft_s"]["p90"]  # a 3,000-token prompt's scores through memory
    api = tokcost.plan(model="llama-2-7b", gpus="rtx-4090", engine="llama.cpp", rate_rps=0.5, prompt_tokens=3000,
                       output_tokens=200, flash_attention=False).to_dict()  # fmt: skip
    assert api["workload"]["flash_attention"] is False
    assert api["configs"][0]["expected"]["ttft_s"] == first_off["ttft_s"]
    table = cli(*args[:-2], "--no-flash-attention").stdout
    assert "flash attention off (scores through memory)" in table
    with pytest.raises(UsageError, match="(?i)flash_attention: must be true or false"):
        tokcost.plan(model="llama-2-7b", gpus="rtx-4090", rate_rps=0.5, flash_attention="no")  # type: ignore[arg-type]


def test_predict_takes_the_flag_for_one_replica():
    from tokcost.serving.predict import predict

    def p90_ttft(fa: bool) -> float:
        got = predict(LLAMA2, tokcost.load_gpu("rtx-4090"), tp=1, prompt_tokens=3000, output_tokens=200, rate_rps=0.2,
                      engine=tokcost.load_engine("llama.cpp"), flash_attention=fa)  # fmt: skip
        return got.ttft_s["p90"]

    assert p90_ttft(False) > p90_ttft(True)
