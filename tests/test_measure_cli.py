"""`tokcost measure` and `tokcost calibrate` on the CPU, for real: structure and consistency, no timing thresholds."""

from __future__ import annotations

import json
import math
import os
import re
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # not in the quick tier: measure and calibrate run torch loops
pytest.importorskip("torch")

from tokcost.models.library import load_model  # noqa: E402

TINY = str(Path(__file__).parent / "assets" / "tiny-model.yaml")
# 2 layers, hidden 128, vocab 1000: 0.6M parameters, a run of a few hundred milliseconds per batch.
MICRO = (Path(__file__).parent / "assets" / "micro-model.yaml").read_text()  # 0.6M parameters
ARGS = ["--device", "cpu", "--batch", "1,2", "--prompt", "16", "--output", "8", "--repeats", "2", "--threads", "1"]


@pytest.fixture(scope="module")
def micro(tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("spec") / "micro.yaml"
    path.write_text(MICRO)
    return str(path)


@pytest.fixture(scope="module")
def measured(tmp_path_factory, micro):
    """One measure run shared by the tests below."""
    import contextlib
    import io

    from tokcost.cli.app import main

    save = tmp_path_factory.mktemp("m") / "run.json"
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["measure", "-m", micro, *ARGS, "--format", "json", "--save", str(save)])
    assert code == 0, err.getvalue()
    assert err.getvalue() == ""  # no progress noise when stderr is not a terminal
    return json.loads(out.getvalue()), save


def test_report_keys(measured):
    data, _ = measured
    assert {"device", "runs", "probes", "complete", "stopped"} <= set(data)
    assert data["complete"] is True and data["stopped"] is None
    assert data["device"]["kind"] == "cpu" and data["device"]["threads"] == 1 and data["device"]["mode"] == "eager"
    assert [r["batch"] for r in data["runs"]] == [1, 2]
    for run in data["runs"]:
        m = run["measured"]
        assert {"min", "median", "q1", "q3", "iqr", "cv", "n"} <= set(m["tpot"]) and m["step"]["n"] == 2 * 7
        assert run["predicted"]["datasheet"] is None  # no datasheet for a CPU
        cal = run["predicted"]["calibrated"]  # whatever the machine's load: a measured rate always makes a spec
        assert cal is not None, data["notes"]
        assert cal["tpot_s"] == pytest.approx(sum(cal["terms_s"].values()))
        # the calibrated step overhead is the skeleton's TPOT
        assert cal["terms_s"]["overhead"] == pytest.approx(run["calibration"]["step_overhead_s"], rel=1e-3)
        assert (cal["tpot_error"] is None) == m["noisy"]


def test_timings_positive_finite_and_consistent(measured):
    data, _ = measured
    for run in data["runs"]:
        m = run["measured"]
        assert all(math.isfinite(m[k]) and m[k] > 0 for k in ("ttft_s", "tpot_s", "decode_tokens_per_s"))
        assert m["decode_tokens_per_s"] == pytest.approx(run["batch"] / m["tpot_s"])
        assert m["tpot"]["min"] <= m["tpot_s"] <= m["tpot"]["q3"] + 1e-12
        assert m["mbu_vs_copy"] > 0


def test_bytes_the_loop_read_equal_the_engines_for_a_dense_model(measured, micro):
    data, _ = measured
    spec = load_model(micro)
    for run in data["runs"]:
        loop, engine = run["bytes_per_step"]["loop"], run["bytes_per_step"]["engine"]
        assert loop["weights"] == engine["weights"]
        # mean context 16 + 8/2 = 20 slots x 2 layers x 2 KV heads x 32 x 2 (K, V) x 2 B per sequence
        assert run["mean_context_read"] == 20
        assert loop["kv_read"] == pytest.approx(run["batch"] * 20 * spec.kv_bytes_per_token("bf16"))
        assert engine["kv_read"] == pytest.approx(loop["kv_read"])


def test_save_holds_the_same_runs_and_refuses_to_overwrite_before_any_work(measured, cli, micro):
    data, save = measured
    saved = json.loads(save.read_text())
    assert [r["batch"] for r in saved["runs"]] == [1, 2] and saved["complete"] is True
    before = save.read_text()
    r = cli("measure", "-m", micro, *ARGS, "--save", str(save))
    assert r.exit_code == 2 and "--force" in r.stderr and save.read_text() == before
    assert r.stdout == ""  # refused before the probes and the loop
    # what --save writes reads back as a measure report (catalog.REPORT_KEYS), never as a spec of any kind
    from tokcost.catalog import REPORT_KEYS, kind_of

    assert saved.keys() >= REPORT_KEYS and kind_of(saved) == "reports"


@pytest.mark.parametrize("where", ["folder", "missing", "readonly", "proc", "long"])
def test_unwritable_destinations_are_refused_before_any_work(cli, tmp_path, micro, where):
    target = {
        "folder": tmp_path,
        "missing": tmp_path / "no-such-dir" / "run.json",
        "readonly": tmp_path / "ro" / "run.json",
        "proc": Path("/proc/tokcost-run.json"),  # a folder nobody, root included, can create files in
        "long": tmp_path / ("x" * 300 + ".json"),
    }[where]
    if where == "readonly":
        target.parent.mkdir()
        target.parent.chmod(0o500)
        if os.access(target.parent, os.W_OK):  # root ignores permissions
            pytest.skip("running as root: a read-only folder is still writable")
    for command in (["measure", "-m", micro, *ARGS, "--save", str(target)], ["calibrate", "--out", str(target)]):
        r = cli(*command)
        assert r.exit_code == 2 and r.stdout == "", r.stderr
        assert len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr


def test_measure_table_renders(cli, micro):
    r = cli("measure", "-m", micro, "--device", "cpu", "--batch", "1", "--prompt", "8", "--output", "4",
            "--repeats", "1", "--layers", "1", "--threads", "1")  # fmt: skip
    assert r.exit_code == 0, r.stderr
    assert "TPOT calibrated" in r.stdout and "weights (loop)" in r.stdout and "streaming read" in r.stdout
    assert "MBU of copy" in r.stdout and re.search(r"│ +\d+(\.\d)?% │ +n/a │", r.stdout)  # the CPU's own MBU, of copy
    # a CPU has no datasheet: the columns that would read n/a in every row are left out, and their legend with them
    assert (
        "TPOT datasheet" not in r.stdout and "TPOT expected" not in r.stdout and "datasheet bandwidth" not in r.stdout
    )
    # a micro model's reads print in their own unit (kB, MB), never as "0.00 GB"
    assert "0.00 GB" not in r.stdout and re.search(r"│ 1 +│ +[\d.]+ [kM]B │", r.stdout), r.stdout


def test_memory_refusal_names_the_max_batch_and_layers(cli, micro):
    # 100,000 sequences of 1,024 tokens x 2 KB of KV each: ~200 GB, beyond any test machine's RAM.
    r = cli("measure", "-m", micro, "--device", "cpu", "--batch", "1,100000", "--prompt", "1000", "--output", "24")
    assert r.exit_code == 2 and len(r.stderr.strip().splitlines()) == 1 and r.stdout == ""
    # the whole model fits at batch 1, so no --layers advice; the max batch is named
    assert "--batch 100000" in r.stderr and "largest batch that fits is" in r.stderr and "--layers" not in r.stderr


def test_layers_out_of_range(cli):
    r = cli("measure", "-m", TINY, "--device", "cpu", "--layers", "9")
    assert r.exit_code == 2 and "--layers" in r.stderr and "1..4" in r.stderr


def test_cuda_without_a_gpu_is_one_line(cli):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    r = cli("measure", "-m", TINY, "--device", "cuda")
    assert r.exit_code == 2 and "--device cuda" in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_calibrate_on_a_busy_machine_says_its_step_overhead_is_noisy(cli, tmp_path, micro, monkeypatch):
    # an audit on a loaded 2-core machine got a 20x step overhead written without a word: the skeleton's steps
    # varied past measure's noisy line; here the same loop's spread is widened as a busy machine's is
    from dataclasses import replace

    import tokcost.measure.loop as loop

    real = loop.measure_decode

    def busy(*args, **kwargs):
        run = real(*args, **kwargs)
        return replace(run, step=replace(run.step, cv=0.4))

    monkeypatch.setattr(loop, "measure_decode", busy)
    out = tmp_path / "busy.yaml"
    r = cli("calibrate", "--device", "cpu", "--model", micro, "--threads", "1", "--out", str(out))
    assert r.exit_code == 0, r.stderr
    assert "warning: the skeleton's steps varied 40%" in r.stderr and "rerun on an idle machine" in r.stderr
    shown = cli("specs", "show", str(out), "--format", "json").json()
    assert "NOISY: the skeleton's steps varied 40%" in shown["provenance"]["step_overhead_us"]


def test_calibrate_writes_a_measured_spec_estimate_accepts(cli, tmp_path, micro):
    out = tmp_path / "cpu.yaml"
    r = cli("calibrate", "--device", "cpu", "--model", micro, "--threads", "1", "--out", str(out))
    assert r.exit_code == 0, r.stderr
    shown = cli("specs", "show", str(out), "--format", "json").json()
    a, s = shown["achievable"], shown["sustained"]
    assert a["basis"] == "measured" and a["step_overhead_us"] > 0
    assert shown["memory_runtime_mib"] > 0 and shown["memory_bandwidth_gb_s"] > 0 and shown["tdp_w"] is None
    assert {"step_overhead_us", "bandwidth", "peak_tflops", "torch", "date", "ceilings"} <= set(shown["provenance"])
    # no datasheet for a CPU: the ceilings are the largest rates measured, the loop's or the probe's
    copy, gemm = s["copy_bandwidth"], s["gemm"]["bf16"]
    # (the ceilings keep 4 significant digits, so the share that sets one is 1 to within 1e-3)
    assert max(a["bandwidth"], copy["fraction"]) == pytest.approx(1.0, abs=1e-3)
    assert max(a["compute"], gemm["fraction"]) == pytest.approx(1.0, abs=1e-3)
    assert copy["basis"] == gemm["basis"] == "measured" and 0 <= copy["uncertainty"] <= 0.5
    assert "tokcost calibrate copy probe" in copy["source"] and "no datasheet" in copy["source"]
    assert "sustained copy" in r.stdout and "GEMM" in r.stdout
    assert "micro" in shown["provenance"]["step_overhead_us"]
    est = cli("estimate", "-m", micro, "-g", str(out), "--format", "json")
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
    from tokcost.measure.session import INSTALL_HINT

    assert out.stderr.strip() == f"error: torch is not installed; {INSTALL_HINT}"
    assert "pip install -e '.[measure]'" in INSTALL_HINT  # true for a source checkout (no registry package)


def test_an_fp32_run_is_priced_at_fp32_throughout(micro):
    # every tensor of the loop is fp32, its embedding and LM head too: the engine priced the LM head at the spec's
    # bf16 (half its bytes), and the counting spec listed only an fp32 peak, which the 16-bit path refused
    import contextlib
    import io

    from tokcost.cli.app import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["measure", "-m", micro, "--device", "cpu", "--dtype", "fp32", "--prompt", "16", "--output", "4",
                     "--repeats", "1", "--threads", "1", "--format", "json"])  # fmt: skip
    assert code == 0, err.getvalue()
    run = json.loads(out.getvalue())["runs"][0]
    loop, engine = run["bytes_per_step"]["loop"], run["bytes_per_step"]["engine"]
    assert loop["weights"] == engine["weights"]
    assert loop["kv_read"] == pytest.approx(run["mean_context_read"] * load_model(micro).kv_bytes_per_token("fp32"))
    assert run["predicted"]["calibrated"]["tpot_s"] > 0


def test_calibrate_refuses_a_batch_memory_cannot_hold_before_any_probe(cli, monkeypatch):
    # measure refused such a batch in one line; calibrate probed, then swapped towards an out-of-memory kill
    from tokcost.measure import faults, session

    monkeypatch.setattr(faults, "free_bytes", lambda device: 2e9)  # a host with 2 GB free

    def no_probe(*args, **kwargs):
        raise AssertionError("probed before refusing the batch")

    monkeypatch.setattr(session, "run_probes", no_probe)
    r = cli("calibrate", "--device", "cpu", "-m", "llama-3.2-1b", "--batch", "100000", "-o", "-")
    assert r.exit_code == 2
    assert r.stderr.startswith("error: --batch 100000: llama-3.2-1b-skeleton (16 layers, bf16) needs about ")
    assert "2.00 GB is host RAM available; the largest batch that fits is " in r.stderr
