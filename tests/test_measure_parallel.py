"""Tensor parallelism for real: two CPU processes over gloo compute what one device computes, and measure it."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # not in the quick tier: gloo ranks and torchrun in subprocesses
torch = pytest.importorskip("torch")

from tokcost.measure.model import build_model  # noqa: E402
from tokcost.measure.parallel import generate_tp  # noqa: E402
from tokcost.measure.runner import generate, random_prompt  # noqa: E402
from tokcost.models.spec import ModelSpec  # noqa: E402

BASE = {"hidden_size": 64, "intermediate_size": 96, "vocab_size": 301, "max_context": 64}  # 301: an uneven vocab split
SPECS = [
    # 4 query heads and 2 KV heads: one KV head per rank
    ModelSpec(name="gqa", layers=2, attention_heads=4, kv_heads=2, attention_bias=True, **BASE),
    # 1 KV head for 2 ranks: replicated, as the engine's kv_shard counts it; tied embeddings, a window
    ModelSpec(
        name="mqa",
        layers=2,
        attention_heads=4,
        kv_heads=1,
        tied_embeddings=True,
        sliding_window={"window_tokens": 6, "layers": "even"},
        **BASE,
    ),  # fmt: skip
    ModelSpec(
        name="moe",
        layers=2,
        attention_heads=4,
        kv_heads=2,
        **BASE,
        moe={"experts": 4, "experts_per_token": 2, "shared_experts": 1, "expert_intermediate_size": 32},
    ),  # fmt: skip
    ModelSpec(
        name="mla",
        layers=2,
        attention_heads=4,
        kv_heads=4,
        **BASE,
        mla={"kv_lora_rank": 16, "rope_head_dim": 8, "q_lora_rank": 24, "nope_head_dim": 8, "v_head_dim": 8},
    ),  # fmt: skip
]


def test_two_gloo_ranks_decode_the_same_tokens_as_one_device():
    # Every parameter is drawn whole from its own seed and sliced, so 2 ranks (column/row-parallel linears,
    # two all-reduces per layer, vocabulary-split head) must greedy-decode exactly what one device does.
    prompt = random_prompt(301, 2, 10, torch.device("cpu"), seed=5)
    two = generate_tp(SPECS, prompt.tolist(), 8, 2, seed=7)
    for spec, tokens in zip(SPECS, two, strict=True):
        one = generate(build_model(spec, dtype=torch.float32, device="cpu", max_batch=2, max_seq=18, seed=7), prompt, 8)
        assert tokens == one.tolist(), spec.name


MICRO = (Path(__file__).parent / "assets" / "micro-model.yaml").read_text()  # 0.6M parameters


def test_measure_tp2_over_gloo_reports_the_allreduce_share(cli, tmp_path):
    spec = tmp_path / "micro.yaml"
    spec.write_text(MICRO)
    save = tmp_path / "tp.json"
    r = cli("measure", "-m", str(spec), "--device", "cpu", "--tp", "2", "--batch", "1", "--prompt", "8",
            "--output", "6", "--repeats", "2", "--threads", "1", "--format", "json", "--save", str(save))  # fmt: skip
    assert r.exit_code == 0, r.stderr
    data = r.json()
    assert data["device"]["tp"] == 2 and json.loads(save.read_text())["runs"][0]["tp"] == 2
    probe = data["allreduce"]
    assert probe["backend"] == "gloo" and probe["ranks"] == 2 and probe["latency_us"] >= 0 and probe["bus_gb_s"] > 0
    (run,) = data["runs"]
    m = run["measured"]
    # 2 all-reduces per layer per step, timed inside the loop: a share of the step, not more than all of it
    assert 0 < m["collective_s_per_step"]["all_reduce"] < m["tpot_s"] and 0 < m["allreduce_share"] < 1
    calibrated = run["predicted"]["calibrated"]  # whatever the machine's load: a measured rate always makes a spec
    assert calibrated is not None, data["notes"]
    assert calibrated["terms_s"]["communication"] > 0
    # the spec keeps the probe's fit as measure/calibrate.measured_link writes it: 4 significant digits (compared
    # exactly: a relative tolerance on a rounded figure depends on how slow the machine was)
    assert run["calibration"]["link"]["gb_s"] == float(f"{probe['bus_gb_s']:.4g}")
    assert run["calibration"]["link"]["latency_us"] == round(probe["latency_us"], 3)
    # per rank: half the block and head weights, plus what every rank keeps whole (norms, 1 embedding row)
    loop, engine = run["bytes_per_step"]["loop"], run["bytes_per_step"]["engine"]
    assert loop["weights"] == pytest.approx(engine["weights"], rel=0.02)
    assert loop["kv_read"] == pytest.approx(engine["kv_read"])  # 1 of 2 KV heads per rank, both sides


def test_calibrate_tp2_writes_a_measured_link(cli, tmp_path):
    spec = tmp_path / "micro.yaml"
    spec.write_text(MICRO)
    out = tmp_path / "cpu-tp2.yaml"
    r = cli("calibrate", "--device", "cpu", "--model", str(spec), "--tp", "2", "--threads", "1", "--out", str(out))
    assert r.exit_code == 0, r.stderr
    shown = cli("specs", "show", str(out), "--format", "json").json()
    link = shown["link"]
    assert link["gb_s"] > 0 and link["latency_us"] >= 0 and "gloo all-reduce over 2 ranks" in link["source"]
    assert link["kind"] == "nvlink"  # a fabric no datasheet names is priced in the NVLink class (a kind it knows)
    assert "all-reduce" in shown["provenance"]["link"] and shown["achievable"]["basis"] == "measured"
    est = cli("estimate", "-m", str(spec), "-g", str(out), "--gpus", "2", "--format", "json")
    assert est.exit_code == 0, est.stderr


def test_torchrun_launch_reports_once_from_rank_0(tmp_path):
    # `torchrun --nproc-per-node 2 -m tokcost measure --tp 2`: each rank runs the CLI, rank 0 alone prints
    import subprocess
    import sys

    spec = tmp_path / "micro.yaml"
    spec.write_text(MICRO)
    root = Path(__file__).resolve().parents[1]
    run = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "-m", "tokcost", "measure", "-m",
         str(spec), "--device", "cpu", "--tp", "2", "--batch", "1", "--prompt", "8", "--output", "4", "--repeats", "1",
         "--threads", "1", "--format", "json"],
        capture_output=True, text=True, timeout=300, env={**os.environ, "PYTHONPATH": str(root)},
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    data = json.loads(run.stdout)  # exactly one JSON document: the other rank printed nothing
    assert data["device"]["tp"] == 2 and data["runs"][0]["tp"] == 2 and data["allreduce"]["ranks"] == 2


def test_the_decode_steps_collectives_leave_the_prefills_out(cli, tmp_path):
    # a long prompt's prefill all-reduces far more bytes than a decode step does; counted into the per-step time
    # (as they were), the step's collectives came out at 76% to 262% of the step
    spec = tmp_path / "micro.yaml"
    spec.write_text(MICRO)
    r = cli("measure", "-m", str(spec), "--device", "cpu", "--tp", "2", "--batch", "4", "--prompt", "1024",
            "--output", "3", "--repeats", "2", "--threads", "1", "--format", "json")  # fmt: skip
    assert r.exit_code == 0, r.stderr
    m = r.json()["runs"][0]["measured"]
    # with 2 repeats the median TPOT is the mean of every timed step, and the collectives are timed inside them
    assert sum(m["collective_s_per_step"].values()) < m["tpot_s"] and 0 < m["allreduce_share"] < 1
