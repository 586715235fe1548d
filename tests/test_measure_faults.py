"""Faults during `tokcost measure`, for real, in a child process: out of memory, Ctrl-C, partial saves."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # not in the quick tier: measure runs in subprocesses, with torch
pytest.importorskip("torch")

from tokcost.measure.faults import host_available_bytes, is_oom  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
MICRO = (Path(__file__).parent / "assets" / "micro-model.yaml").read_text()  # 0.6M parameters
# Run the CLI in a child whose address space is capped RLIMIT_MIB above what it has mapped after imports:
# the memory check (host RAM) passes, and the allocator really fails.
CAPPED = textwrap.dedent("""
    import resource, sys
    import torch
    import tokcost.measure.loop, tokcost.measure.probes, tokcost.measure.session
    from tokcost.cli.app import main
    with open("/proc/self/statm") as f:
        mapped = int(f.read().split()[0]) * resource.getpagesize()
    cap = mapped + int(sys.argv[1]) * 2**20
    resource.setrlimit(resource.RLIMIT_AS, (cap, resource.RLIM_INFINITY))
    sys.exit(main(sys.argv[2:]))
""")


@pytest.fixture
def micro(tmp_path) -> str:
    path = tmp_path / "micro.yaml"
    path.write_text(MICRO)
    return str(path)


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONWARNINGS": "ignore"}


def test_oom_is_recognised_in_every_form():
    import torch

    assert is_oom(torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB"))
    assert is_oom(RuntimeError("[enforce fail at alloc_cpu.cpp:117] DefaultCPUAllocator: can't allocate memory"))
    assert is_oom(MemoryError()) and not is_oom(RuntimeError("shape mismatch"))


def test_out_of_memory_mid_run_keeps_and_saves_the_finished_batch(micro, tmp_path):
    # batch 2000 x (2000 + 4) tokens x 512 B of KV = 2.05 GB: over the 1,500 MiB cap, under the host's RAM
    if (host_available_bytes() or 0) < 4e9:
        pytest.skip("needs 4 GB of RAM available so that the memory check passes batch 2000")
    save = tmp_path / "oom.json"
    args = ["measure", "-m", micro, "--device", "cpu", "--batch", "1,2000", "--prompt", "2000", "--output", "4",
            "--repeats", "1", "--threads", "1", "--save", str(save), "--format", "json"]  # fmt: skip
    run = subprocess.run([sys.executable, "-c", CAPPED, "1500", *args], capture_output=True, text=True, env=_env(),
                         timeout=300)  # fmt: skip
    lines = run.stderr.strip().splitlines()
    assert run.returncode == 2 and len(lines) == 1 and "Traceback" not in run.stderr, run.stderr
    assert lines[0].startswith("error: out of memory on ") and "at batch 2000" in lines[0]
    assert "kept 1 finished batch" in lines[0] and str(save) in lines[0]
    assert "max batch is" in lines[0]  # the way out: what the engine says fits in the memory now free
    saved = json.loads(save.read_text())
    assert [r["batch"] for r in saved["runs"]] == [1] and saved["complete"] is False
    assert saved["stopped"]["kind"] == "out_of_memory"
    assert json.loads(run.stdout)["runs"][0]["batch"] == 1  # the finished batch is reported too


def _start(args: list[str]) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "tokcost", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=_env(), cwd=ROOT)  # fmt: skip


def _wait_for(path: Path, proc: subprocess.Popen, timeout_s: float = 240) -> None:
    deadline = time.monotonic() + timeout_s
    while not path.exists():
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "the first batch never finished"
        time.sleep(0.05)


def test_ctrl_c_mid_batch_exits_130_and_keeps_the_finished_batches(micro, tmp_path):
    save = tmp_path / "run.json"
    proc = _start(["measure", "-m", micro, "--device", "cpu", "--batch", "1,2,3,4,5,6", "--prompt", "16",
                   "--output", "400", "--repeats", "3", "--threads", "1", "--save", str(save)])  # fmt: skip
    _wait_for(save, proc)  # batch 1 finished and was saved; batch 2 has 3 x 399 steps to go
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err  # an interrupted measure never exits 0
    (line,) = err.strip().splitlines()
    assert line.startswith("interrupted during batch ") and "kept " in line and str(save) in line
    saved = json.loads(save.read_text())
    kept = int(line.split("kept ")[1].split()[0])
    assert len(saved["runs"]) == kept >= 1 and saved["complete"] is False
    assert saved["stopped"] == {"kind": "interrupted", "message": line.split(":")[0]}
    assert "micro measured on" in out  # the finished batches are shown as well


# The CLI in a child that says on stderr when the measurement has begun (its probes), so that a signal is sent
# then and not after a guessed delay, which a loaded machine can outlast while still importing torch.
ANNOUNCED = textwrap.dedent("""
    import sys
    import tokcost.measure.session as session
    probes = session.run_probes
    def announced(*args, **kwargs):
        sys.stderr.write("probing\\n")
        sys.stderr.flush()
        return probes(*args, **kwargs)
    session.run_probes = announced
    from tokcost.cli.app import main
    sys.exit(main(sys.argv[1:]))
""")


def test_ctrl_c_before_any_batch_finished_saves_nothing(micro, tmp_path):
    save = tmp_path / "run.json"
    args = ["measure", "-m", micro, "--device", "cpu", "--batch", "1", "--prompt", "16", "--output", "2000",
            "--repeats", "5", "--threads", "1", "--save", str(save)]  # fmt: skip
    proc = subprocess.Popen([sys.executable, "-c", ANNOUNCED, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=_env(), cwd=ROOT)  # fmt: skip
    for said in proc.stderr:  # the probes have begun; then batch 1 (5 x 1,999 steps) is still to come
        if said == "probing\n":
            break
    assert proc.poll() is None
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130 and "Traceback" not in err
    (line,) = err.strip().splitlines()
    assert line.startswith("interrupted") and ("no batch finished" in line or "nothing was saved" in line)
    assert not save.exists() and out == ""


def test_a_failure_mid_run_is_one_line_and_keeps_what_finished(micro, tmp_path, cli, monkeypatch):
    # a kernel or the compiler failing at batch 2 (simulated: the run itself is real up to there)
    from tokcost.measure import session

    real = session.measure_batch

    def failing(spec, job, batch, **kw):
        if batch == 2:
            raise RuntimeError("CUDA error: an illegal memory access was encountered\nmore detail")
        return real(spec, job, batch, **kw)

    monkeypatch.setattr(session, "measure_batch", failing)
    save = tmp_path / "run.json"
    r = cli("measure", "-m", micro, "--device", "cpu", "--batch", "1,2,4", "--prompt", "8", "--output", "4",
            "--repeats", "1", "--threads", "1", "--save", str(save))  # fmt: skip
    assert r.exit_code == 2 and "Traceback" not in r.stderr
    (line,) = r.stderr.strip().splitlines()
    assert line == (f"error: batch 2: RuntimeError: CUDA error: an illegal memory access was encountered; "
                    f"kept 1 finished batch (saved in {save})")  # fmt: skip
    saved = json.loads(save.read_text())
    assert [x["batch"] for x in saved["runs"]] == [1] and saved["stopped"]["kind"] == "error"


def test_a_save_that_fails_midway_says_so_and_never_claims_a_complete_run(micro, tmp_path, cli, monkeypatch):
    # the disk fills after the first batch is saved: the error names the file and what it holds, and the file left
    # behind says it is not complete (every save before the session's end did: a later batch may still come)
    import tokcost.files as files
    from tokcost.errors import TokcostError

    real, calls = files.write_new, []

    def fills(path, text, *, force=False):
        calls.append(path)
        if len(calls) > 1:
            raise TokcostError(f"{path}: cannot write: No space left on device")
        return real(path, text, force=force)

    monkeypatch.setattr(files, "write_new", fills)
    save = tmp_path / "run.json"
    r = cli("measure", "-m", micro, "--device", "cpu", "--batch", "1,2", "--prompt", "8", "--output", "4",
            "--repeats", "1", "--threads", "1", "--save", str(save))  # fmt: skip
    assert r.exit_code == 2 and "Traceback" not in r.stderr and "batch" in r.stdout  # the table still printed
    (line,) = r.stderr.strip().splitlines()
    assert line == f"error: {save}: not saved: cannot write: No space left on device (it holds the first 1 batch)"
    saved = json.loads(save.read_text())
    assert [x["batch"] for x in saved["runs"]] == [1] and saved["complete"] is False


def test_a_cpu_run_refuses_a_gpu_datasheet(micro, cli):
    for command in (["measure", "-m", micro, "--batch", "1"], ["calibrate", "-m", micro]):
        for gpu in ("h100-sxm", "no-such-gpu"):  # a name that is no datasheet is not called one
            r = cli(*command, "--device", "cpu", "--threads", "1", "--gpu", gpu)
            said = f"error: --gpu: a run on the CPU takes no GPU datasheet (got '{gpu}'); drop --gpu"
            assert r.exit_code == 2 and r.stderr.startswith(said), r.stderr


def test_calibrate_refuses_a_model_its_decoder_cannot_build(cli):
    r = cli("calibrate", "-m", "nemotron-h-8b", "--device", "cpu", "--threads", "1")
    assert r.exit_code == 2 and "cannot build Mamba-2" in r.stderr and "Traceback" not in r.stderr


@pytest.mark.parametrize("named", [True, False])
def test_a_calibrated_spec_is_on_its_devices_platform(named):
    # torch on ROCm reports its device as "cuda"; the facts carry the HIP build's platform, so a spec calibrated on an
    # MI300X is priced with ROCm's engine gap whether or not --gpu named the datasheet (it was CUDA without it)
    from tokcost.hardware.library import load_gpu
    from tokcost.measure.calibrate import DeviceFacts, spec_from_rates

    base = load_gpu("mi300x")
    facts = DeviceFacts(kind="cuda", name="AMD Instinct MI300X", memory_bytes=base.memory_bytes, power_limit_w=750,
                        driver="rocm 6.2", torch_version="2.13.0", platform="rocm")  # fmt: skip
    spec = spec_from_rates(facts, "bf16", bytes_per_s=3e12, flops_per_s=5e14, step_overhead_s=1e-4, provenance={},
                           base=base if named else None)  # fmt: skip
    assert spec.platform == "rocm"
    nvidia = DeviceFacts(kind="cuda", name="NVIDIA H100", memory_bytes=80e9, power_limit_w=700, driver="550",
                         torch_version="2.13.0")  # fmt: skip
    spec = spec_from_rates(nvidia, "bf16", bytes_per_s=3e12, flops_per_s=5e14, step_overhead_s=1e-4, provenance={},
                           base=load_gpu("h100-sxm") if named else None)  # fmt: skip
    assert spec.platform == "cuda"


def test_calibrate_takes_the_tensor_parallel_degrees_measure_takes(cli):
    for command in (["measure", "-m", "llama-3.2-1b", "--layers", "1"], ["calibrate", "-m", "llama-3.2-1b"]):
        r = cli(*command, "--device", "cpu", "--threads", "1", "--tp", "3")
        said = "error: --tp: 3 does not divide llama-3.2-1b's 32 attention heads; valid degrees: 1, 2, 4, 8, 16, 32"
        assert r.exit_code == 2 and r.stderr.strip() == said, r.stderr
