"""`tokcost measure` and `tokcost calibrate` on the CPU, for real: structure and consistency, no timing thresholds."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

pytest.importorskip("torch")

from tokcost.engine.traffic import decode_counts  # noqa: E402
from tokcost.engine.workload import Workload, resolve_precision  # noqa: E402
from tokcost.models.library import load_model  # noqa: E402

TINY = str(Path(__file__).parent / "assets" / "tiny-model.yaml")
ARGS = ["--device", "cpu", "--batch", "1,2", "--prompt", "16", "--output", "8", "--repeats", "2", "--threads", "2"]


@pytest.fixture(scope="module")
def measured(tmp_path_factory):
    """One measure run shared by the tests below (it costs a few seconds)."""

    import contextlib
    import io

    from tokcost.cli.app import main

    save = tmp_path_factory.mktemp("m") / "run.json"
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["measure", "-m", TINY, *ARGS, "--format", "json", "--save", str(save)])
    assert code == 0, err.getvalue()
    return json.loads(out.getvalue()), save


def test_report_keys(measured):
    data, _ = measured
    assert {"device", "runs", "probes"} <= set(data)
    assert {"copy_bytes_per_s", "stream_bytes_per_s", "matmul_flops_per_s"} <= set(data["probes"])
    assert data["device"]["kind"] == "cpu" and data["device"]["threads"] == 2
    assert [r["batch"] for r in data["runs"]] == [1, 2]
    for run in data["runs"]:
        assert {"ttft_s", "tpot_s", "decode_tokens_per_s", "mbu", "mfu_prefill", "joules_per_output_token"} <= set(
            run["measured"]
        )
        assert run["predicted"]["datasheet"] is None  # no datasheet for a CPU
        assert {"ttft_s", "tpot_s"} <= set(run["predicted"]["calibrated"])


def test_timings_positive_finite_and_consistent(measured):
    data, _ = measured
    for run in data["runs"]:
        m = run["measured"]
        assert all(math.isfinite(m[k]) and m[k] > 0 for k in ("ttft_s", "tpot_s", "decode_tokens_per_s"))
        assert m["decode_tokens_per_s"] == pytest.approx(run["batch"] / m["tpot_s"])
        assert 0 < m["mbu_vs_copy"] <= 1.2  # achieved bytes/s over the copy probe
        assert len(m["tpot_s_all"]) == 2


def test_bytes_per_step_match_the_engine(measured):
    data, _ = measured
    spec = load_model(TINY)
    p = resolve_precision(spec, Workload(weights_dtype="bf16", kv_dtype="bf16"))
    for run in data["runs"]:
        counts = decode_counts(spec, p, run["batch"], run["context_tokens"], 1)
        assert run["context_tokens"] == 16 + 8
        assert run["measured"]["bytes_per_step"] == counts.weight_bytes + counts.kv_read_bytes + counts.kv_write_bytes


def test_save_writes_once_and_refuses_to_overwrite(measured, cli):
    data, save = measured
    assert json.loads(save.read_text())["runs"][0]["batch"] == 1
    before = save.read_text()
    r = cli("measure", "-m", TINY, *ARGS, "--save", str(save))
    assert r.exit_code == 2 and "--force" in r.stderr and save.read_text() == before


def test_measure_table_renders(cli):
    r = cli("measure", "-m", TINY, "--device", "cpu", "--batch", "1", "--prompt", "8", "--output", "4",
            "--repeats", "1", "--layers", "1")  # fmt: skip
    assert r.exit_code == 0, r.stderr
    assert "TPOT calibrated" in r.stdout and "streaming read" in r.stdout


def test_layers_out_of_range(cli):
    r = cli("measure", "-m", TINY, "--device", "cpu", "--layers", "9")
    assert r.exit_code == 2 and "--layers" in r.stderr and "1..4" in r.stderr


def test_cuda_without_a_gpu_is_one_line(cli):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    r = cli("measure", "-m", TINY, "--device", "cuda")
    assert r.exit_code == 2 and "--device cuda" in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_calibrate_writes_a_spec_estimate_accepts(cli, tmp_path):
    out = tmp_path / "cpu.yaml"
    r = cli("calibrate", "--device", "cpu", "--out", str(out))
    assert r.exit_code == 0, r.stderr
    shown = cli("specs", "show", str(out), "--format", "json").json()
    assert shown["provenance"]["torch"] and shown["memory_bandwidth_gb_s"] > 0 and shown["tdp_w"] is None
    est = cli("estimate", "-m", TINY, "-g", str(out), "--format", "json")
    assert est.exit_code == 0, est.stderr
    assert est.json()["ceiling"]["joules_per_output_token"] is None
    again = cli("calibrate", "--device", "cpu", "--out", str(out))
    assert again.exit_code == 2 and "--force" in again.stderr


def test_without_torch_measure_says_how_to_install_it():
    import subprocess
    import sys

    code = (
        "import sys; sys.modules['torch'] = None\n"  # as if torch were not installed
        "from tokcost.cli.app import main\n"
        f"sys.exit(main(['measure', '-m', {TINY!r}, '--device', 'cpu']))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert out.stderr.strip() == (
        "error: torch is not installed; install the measure extra: pip install 'tokcost[measure]' (torch, nvidia-ml-py)"
    )
