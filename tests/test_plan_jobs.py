"""plan's search in worker processes (`--jobs`, `plan(jobs=...)`): each aggregated configuration is sized by a pure
function, so any number of workers gives the rows one process gives, in the same order; by default the search
takes one worker per CPU where lengths vary (each sizing then prices a grid of prompt lengths) and none where
they are fixed."""

from __future__ import annotations

import json
import os
import runpy
import sys
from pathlib import Path

import pytest

from tokcost import plan, workers
from tokcost.errors import UsageError
from tokcost.serving import search
from tokcost.serving.traffic import LengthDist, Traffic

ASKED = dict(model="llama-3.2-3b", gpus=["h100-sxm", "l40s", "a100-80gb-sxm"], rate_rps=2.0, prompt_dist="lognormal:1",
             tp=[1, 2], weights=["bf16", "fp8"], slos=["ttft_p90=2s"])  # fmt: skip


def test_workers_give_the_rows_one_process_gives_in_its_order():
    one = plan(**ASKED, jobs=1).to_dict()
    three = plan(**ASKED, jobs=3).to_dict()
    assert json.dumps(three, sort_keys=True) == json.dumps(one, sort_keys=True)
    assert len(one["configs"]) >= 8  # the search had work to share: 3 GPUs x 2 formats x 2 layouts, less refusals


def test_the_default_takes_workers_only_where_lengths_vary(monkeypatch):
    monkeypatch.setattr(workers, "usable_cpus", lambda: 16)  # this process may use 16, whatever the box
    monkeypatch.setattr(workers.sys, "platform", "linux")
    monkeypatch.setattr(workers.threading, "active_count", lambda: 1)
    fixed = Traffic(LengthDist("fixed", 1000), LengthDist("fixed", 200), rate_rps=1.0)
    varied = Traffic(LengthDist("lognormal", 1000, 1.0), LengthDist("fixed", 200), rate_rps=1.0)
    assert search._workers(None, 40, fixed) == 1  # milliseconds a sizing: a pool's start would cost more
    assert search._workers(None, 40, varied) == 16  # one per CPU this process may run on
    assert search._workers(None, 5, varied) == 5  # never more than the configurations
    assert search._workers(None, 1, varied) == 1
    assert search._workers(4, 40, fixed) == 4 and search._workers(4, 2, varied) == 2  # as asked, up to the work


def test_the_default_forks_no_threaded_process_and_none_off_linux(monkeypatch):
    varied = Traffic(LengthDist("lognormal", 1000, 1.0), LengthDist("fixed", 200), rate_rps=1.0)
    monkeypatch.setattr(workers, "usable_cpus", lambda: 16)  # this process may use 16, whatever the box
    monkeypatch.setattr(workers.sys, "platform", "linux")
    monkeypatch.setattr(workers.threading, "active_count", lambda: 3)  # a notebook's kernel: forking it can deadlock
    assert search._workers(None, 40, varied) == 1
    monkeypatch.setattr(workers.threading, "active_count", lambda: 1)
    monkeypatch.setattr(workers.sys, "platform", "darwin")  # a spawned worker would import the caller's script
    assert search._workers(None, 40, varied) == 1
    assert search._workers(8, 40, varied) == 8  # asked for: taken anywhere


@pytest.mark.parametrize(
    ("jobs", "said"),
    [
        (0, r"must be a whole number in 1\.\.1,024 \(got 0\)"),
        (-3, r"must be a whole number in 1\.\.1,024 \(got -3\)"),
        (2000, r"must be a whole number in 1\.\.1,024 \(got 2000\)"),
        (1.5, r"must be an integer or None \(got 1\.5\)"),  # the API's own type check, before the range
        (True, r"must be an integer or None \(got bool True\)"),
    ],
)
def test_a_worker_count_outside_1_to_1024_is_refused_by_name(jobs, said):
    with pytest.raises(UsageError, match=rf"^jobs: {said}$"):
        plan(**ASKED, jobs=jobs)


def test_the_flag_refuses_zero_in_one_line_with_exit_2(cli):
    r = cli("plan", "-m", "llama-3.2-3b", "-g", "h100-sxm", "--rate", "1", "--jobs", "0")
    assert r.exit_code == 2 and r.stdout == ""
    assert r.stderr.count("\n") == 1 and "--jobs" in r.stderr and "greater than or equal to 1" in r.stderr


def test_running_the_package_as_a_module_by_import_starts_no_cli(monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", ["tokcost", "--version"])  # what a spawned worker would re-run
    runpy.run_module("tokcost", run_name="__mp_main__")
    assert capsys.readouterr().out == ""


@pytest.mark.parametrize("jobs", [1, 2])
def test_a_configuration_that_fails_mid_gpu_ends_that_gpus_rows_only(tmp_path, jobs):
    """A GPU with no network, 2 to a node: its 3-stage pipeline's send cannot leave the node, which stops its rows
    (refused in one row, as one pass stops there); the next GPU's rows are its own, every one of them."""
    spec = (Path(__file__).parents[1] / "tokcost/specs/gpus/h100-sxm.yaml").read_text(encoding="utf-8")
    lines = [line for line in spec.splitlines() if not line.startswith("network:")]
    nonet = tmp_path / "nonet.yaml"
    nonet.write_text("\n".join(line.replace("name: h100-sxm", "name: nonet", 1) if line.startswith("name:") else line
                               for line in lines) + "\ngpus_per_node: 2\n", encoding="utf-8")  # fmt: skip
    out = plan(model="llama-3.1-8b", gpus=[str(nonet), "h100-sxm"], tp=[1, 2], pp=[1, 2, 3], rate_rps=5.0,
               jobs=jobs).to_dict()  # fmt: skip
    by_gpu = {}
    for config in out["configs"]:
        by_gpu.setdefault(config["gpu"], []).append(config)
    assert sorted(c["layout"] for c in by_gpu["h100-sxm"]) == ["PP2", "PP3", "TP1", "TP2", "TP2xPP2", "TP2xPP3"]
    assert not any("network" in json.dumps(c) and "no network" in json.dumps(c) for c in by_gpu["h100-sxm"])
    refused = [c for c in by_gpu["nonet"] if "no network is known" in json.dumps(c)]
    assert len(refused) == 1 and len(by_gpu["nonet"]) == 4  # TP1, TP2 and PP2 sized, then the refusal


def _pid(*_args):  # noqa: ANN002  stands in for a sizing: which process ran it
    return os.getpid()


def _workers_seen_from_a_daemon(_):  # noqa: ANN001
    varied = Traffic(LengthDist("lognormal", 1000, 1.0), LengthDist("fixed", 200), rate_rps=1.0)
    return search._workers(4, 10, varied), search._workers(None, 10, varied)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the workers fork on Linux")
def test_asked_for_workers_the_sizings_run_in_other_processes(monkeypatch):
    monkeypatch.setattr(search, "_sized", _pid)  # a forked worker inherits the stand-in
    fixed = Traffic(LengthDist("fixed", 100), LengthDist("fixed", 10), rate_rps=1.0)
    pids = search._size_all(None, fixed, [], None, [None] * 6, jobs=2)  # type: ignore[arg-type]
    assert len(pids) == 6 and os.getpid() not in pids  # not a silent fall back to this process
    assert search._size_all(None, fixed, [], None, [None] * 3, jobs=1) == [os.getpid()] * 3  # type: ignore[arg-type]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the pool forks on Linux")
def test_a_daemonic_process_takes_no_workers_even_when_asked():
    """A multiprocessing.Pool's worker may not start children: plan(...) called there sizes in that process."""
    import multiprocessing

    with multiprocessing.get_context("fork").Pool(1) as pool:
        assert pool.map(_workers_seen_from_a_daemon, [0]) == [(1, 1)]


@pytest.mark.parametrize(("cpu_max", "cpus"), [("200000 100000\n", 2), ("max 100000\n", 16), ("50000 100000\n", 1)])
def test_a_containers_cpu_quota_caps_the_cpus_a_plan_counts(monkeypatch, cpu_max, cpus):
    class Quota:  # /sys/fs/cgroup/cpu.max as a container's cgroup v2 states it
        def __init__(self, path: str) -> None:
            assert path == "/sys/fs/cgroup/cpu.max"

        def read_text(self, encoding: str) -> str:
            return cpu_max

    monkeypatch.setattr(workers.os, "sched_getaffinity", lambda _pid: set(range(16)), raising=False)
    monkeypatch.setattr(workers, "Path", Quota)
    assert workers.usable_cpus() == cpus


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the workers fork on Linux")
@pytest.mark.parametrize("jobs", [1, 2])
def test_progress_counts_every_sizing_once_in_order_whatever_the_workers(monkeypatch, jobs):
    monkeypatch.setattr(search, "_sized", _pid)
    fixed = Traffic(LengthDist("fixed", 100), LengthDist("fixed", 10), rate_rps=1.0)
    seen: list[tuple[int, int]] = []
    rows = search._size_all(None, fixed, [], None, [None] * 5, jobs, lambda d, t: seen.append((d, t)))  # type: ignore[arg-type]
    assert len(rows) == 5 and seen == [(1, 5), (2, 5), (3, 5), (4, 5), (5, 5)]


class _Terminal:
    def __init__(self, tty: bool) -> None:
        self.tty, self.text = tty, ""

    def isatty(self) -> bool:
        return self.tty

    def write(self, text: str) -> None:
        self.text += text

    def flush(self) -> None:
        pass


def test_a_long_plan_shows_how_far_it_is_on_a_terminal_only():
    # a plan over every GPU with a length distribution runs for minutes: a terminal sees one line that counts the
    # sizings, from 3 s on, cleared at the end; a pipe (a log, a test, JSON read by a script) sees nothing
    import time

    from tokcost.cli.render import PROGRESS_AFTER_S, Progress

    late, early = time.perf_counter() - PROGRESS_AFTER_S - 40, time.perf_counter()
    terminal = _Terminal(True)
    shown = Progress(terminal, late)
    shown(12, 88)
    shown.clear()
    assert terminal.text.startswith("\rsized 12 of 88 configurations (4") and terminal.text.endswith("\r\033[K")
    for stream, started in ((_Terminal(False), late), (_Terminal(True), early)):
        quiet = Progress(stream, started)
        quiet(1, 2)
        quiet.clear()
        assert stream.text == ""
