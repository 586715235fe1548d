"""The CUDA-graph batch caps of SGLang and vLLM: decode batches past them run eager, so estimate, sweep and plan say
so (EraFields.graph_batch_cap, EngineProfile.graph_note); an era that states its eager launch cost (SGLang) prices
those steps too (tests/test_eager_past_graphs.py)."""

from __future__ import annotations

import contextlib
import io
import json
import re

import pytest
from pydantic import ValidationError

from tokcost.cli.app import main
from tokcost.engine.estimate import estimate
from tokcost.engine.workload import Workload
from tokcost.hardware.library import load_gpu
from tokcost.models.library import load_model
from tokcost.profiles import ENGINES, EngineProfile, load_engine

SGLANG = load_engine("sglang")


def _run(args: list[str]) -> tuple[int, dict, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(args)
    return code, json.loads(out.getvalue()) if code == 0 else {}, err.getvalue()


def _cap(gpu: str, tp: int) -> int | None:
    spec = load_gpu(gpu)
    return SGLANG.scheduler(gpu_name=spec.name, memory_bytes=spec.memory_bytes, tp=tp).graph_batch_cap


@pytest.mark.parametrize(
    ("gpu", "below_tp4", "from_tp4"),
    [("rtx-4090", 24, 80), ("l40s", 32, 160), ("a100-80gb-sxm", 256, 512), ("h100-sxm", 256, 512),
     ("h200", 256, 512), ("b200", 512, 512), ("mi300x", 512, 512)],
)  # fmt: skip
def test_sglang_caps_follow_its_memory_tiers_and_tp(gpu, below_tp4, from_tp4):
    # server_args.py's _handle_gpu_memory_settings: under 35 GiB, under 60, under 160, above; below TP 4 and from 4
    assert [_cap(gpu, tp) for tp in (1, 2, 4, 8)] == [below_tp4, below_tp4, from_tp4, from_tp4]


def test_a_note_only_past_the_cap_and_only_where_a_cap_is_stated():
    h100 = load_gpu("h100-sxm")
    where = {"gpu_name": h100.name, "memory_bytes": h100.memory_bytes}
    assert SGLANG.graph_note(256, tp=1, **where) is None  # the cap itself is captured
    note = SGLANG.graph_note(257, tp=1, **where)
    assert note is not None and "256" in note and "--cuda-graph-max-bs" in note and "eager" in note
    assert SGLANG.graph_note(512, tp=4, **where) is None and SGLANG.graph_note(513, tp=4, **where) is not None
    stated = [n for n in ENGINES if load_engine(n).scheduler(tp=1, **where).graph_batch_cap is not None]
    assert stated == ["vllm", "sglang"]  # the engines whose default cap has a source here


def test_each_data_parallel_rank_captures_its_own_share_of_the_batch():
    # DP attention (SGLang --dp 8): every rank runs its own graphs on batch / dp sequences; the audit of 2026-12-05
    # found the README's EP72 example (18,432 sequences, 256 a rank) warned against the whole pool's batch
    h100 = load_gpu("h100-sxm")
    where = {"gpu_name": h100.name, "memory_bytes": h100.memory_bytes, "tp": 1}
    assert SGLANG.graph_note(2048, dp=8, **where) is None  # 256 a rank: captured
    note = SGLANG.graph_note(2049, dp=8, **where)  # 257 on the busiest rank
    assert note is not None and "257 per data-parallel rank" in note
    model = load_model("qwen3-30b-a3b")  # DP attention: an MoE model, its experts over the DP group
    e = estimate(model, h100, Workload(batch=2048, dp=8, ep=8, tp=1, output_tokens=2), engine=SGLANG)
    assert not any("CUDA graphs capture" in w for w in e.warnings)


@pytest.mark.parametrize(("era", "cap"), [("vllm", 512), ("vllm@v0", 256), ("vllm@enforce-eager", None)])
def test_vllm_caps_by_era(era, cap):
    # V1: min(max_num_seqs x 2, 512) (VllmConfig._set_cudagraph_sizes); V0: its fixed list up to 256; eager: no graphs
    profile = load_engine(era)
    for gpu in ("h100-sxm", "a100-80gb-sxm", "l40s"):
        spec = load_gpu(gpu)
        assert profile.scheduler(gpu_name=spec.name, memory_bytes=spec.memory_bytes, tp=1).graph_batch_cap == cap


def test_vllm_v1_passes_its_cap_only_where_its_running_cap_allows():
    # 1,024 running sequences on an H100 (max_num_seqs) against 512 captured: batches 513-1,024 run eager; an A100 runs
    # at most 256, so its cap of 512 is never passed
    v1 = load_engine("vllm")
    for gpu, running in (("h100-sxm", 1024), ("a100-80gb-sxm", 256)):
        spec = load_gpu(gpu)
        sched = v1.scheduler(gpu_name=spec.name, memory_bytes=spec.memory_bytes, tp=1)
        assert sched.max_running_sequences == running
        passes = v1.graph_note(running, gpu_name=spec.name, memory_bytes=spec.memory_bytes, tp=1) is not None
        assert passes == (running > 512)


def test_a_cap_no_flag_raises_says_so():
    h100 = load_gpu("h100-sxm")
    where = {"gpu_name": h100.name, "memory_bytes": h100.memory_bytes, "tp": 1}
    v0 = load_engine("vllm@v0").graph_note(300, **where)
    assert v0 is not None and "256" in v0 and "no flag raises it" in v0 and "raise the cap" not in v0
    v1 = load_engine("vllm").graph_note(600, **where)
    assert v1 is not None and "512" in v1 and "raise the cap to the batch (--cuda-graph-sizes" in v1


def test_a_stated_cap_needs_its_source():
    with pytest.raises(ValidationError, match="graph_batch_source"):
        EngineProfile(name="mine", source="a test", graph_batch_cap=64)
    stated = EngineProfile(name="mine", source="a test", graph_batch_cap=64, graph_batch_source="its docs")
    assert stated.graph_batch_cap == 64


def test_estimate_and_sweep_warn_past_the_cap():
    base = ["-m", "llama-3.1-8b", "-g", "h100-sxm", "--engine", "sglang", "-p", "512", "-o", "64", "-f", "json"]
    code, at_cap, _ = _run(["estimate", *base, "-b", "256"])
    assert code == 0 and not any("CUDA graphs" in w for w in at_cap["warnings"])
    code, past, _ = _run(["estimate", *base, "-b", "257"])
    assert code == 0 and sum("CUDA graphs" in w and "257" in w for w in past["warnings"]) == 1
    code, swept, _ = _run(["sweep", *base, "-b", "1,64,300"])
    assert code == 0 and sum("a decode batch of 300" in w for w in swept["warnings"]) == 1
    code, vllm, _ = _run(["estimate", *base[:5], "vllm", *base[6:], "-b", "300"])
    assert code == 0 and not any("CUDA graphs" in w for w in vllm["warnings"])  # V1 captures up to 512
    code, vllm, _ = _run(["estimate", *base[:5], "vllm", *base[6:], "-b", "513"])
    assert code == 0 and sum("vllm@v1" in w and "passes the 512" in w for w in vllm["warnings"]) == 1


@pytest.mark.parametrize(
    ("engine", "tokens", "users", "cap", "most"),
    [("sglang", "500", 600, 256, 600),  # SGLang's 256 below TP 4 on an H100: the top fleet's batch passes it
     ("vllm", "128", 2000, 512, 1024)],  # short requests let V1 run its 1,024 sequences, past the 512 it captures
)  # fmt: skip
def test_plan_warns_where_the_top_fleets_batch_passes_the_cap(engine, tokens, users, cap, most):
    args = ["plan", "-m", "llama-3.1-8b", "-g", "h100-sxm", "--tp", "1", "--engine", engine, "-p", tokens, "-o",
            tokens, "-f", "json"]  # fmt: skip
    code, busy, _ = _run([*args, "--concurrency", str(users)])
    assert code == 0
    notes = [w for w in busy["warnings"] if "CUDA graphs" in w]
    assert len(notes) == 1 and notes[0].startswith("h100-sxm TP1") and f"passes the {cap} sequences" in notes[0]
    batch = int(re.search(r"a decode batch of ([\d,]+)", notes[0])[1].replace(",", ""))  # type: ignore[index]
    assert cap < batch <= most  # the top fleet's mean decode batch per replica, past the cap, within its users/cap
    code, light, _ = _run([*args, "--concurrency", "64"])
    assert code == 0 and not any("CUDA graphs" in w for w in light["warnings"])


def test_plans_scheduler_note_names_the_cap():
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["plan", "-m", "llama-3.1-8b", "-g", "h200", "--tp", "4", "--engine", "sglang", "-p", "500",
                     "-o", "500", "--concurrency", "64", "-f", "markdown"])  # fmt: skip
    assert code == 0, err.getvalue()
    text = " ".join(out.getvalue().split())
    assert "CUDA graphs up to 512 decoding sequences (sglang default)" in text
    assert "each step chosen while the one before it runs (overlap scheduling, sglang default)" in text
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):  # a build before its overlap scheduler
        code = main(["plan", "-m", "llama-3.1-8b", "-g", "h200", "--tp", "4", "--engine", "sglang@0.3.6", "-p", "500",
                     "-o", "500", "--concurrency", "64", "-f", "markdown"])  # fmt: skip
    assert code == 0, err.getvalue()
    assert "Scheduler of #1" in out.getvalue() and "overlap scheduling" not in out.getvalue()
