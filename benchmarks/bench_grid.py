"""How fast the engine prices grids, and what that buys the commands built on it (timings here, never in tests).

Every figure is a ratio against a reference measured in the same run, so that a loaded machine moves both:
1. Start-up: `python -c pass` (the reference) and `tokcost estimate -m llama-3.1-8b -g h100-sxm`.
2. A 10,000-point sweep (100 batches x 100 prompts, llama-3.1-8b on h100-sxm): the engine alone (iter_sweep in
   one process), and `tokcost sweep ... --format csv` beyond start-up (minus a one-point sweep).
3. 1,000,000 points (1,000 x 1,000) streamed from iter_sweep to CSV on /dev/null in a child process, a tuple per
   point through csv.writer as the CLI streams them: seconds and the child's peak RSS.
4. `tokcost plan --simulate` on the README example against the same plan without --simulate (the closed form).
5. `tokcost validate` against `tokcost estimate`.
Wall and CPU seconds are medians over --runs; CPU is the child's user + system time (what the machine's load does
not inflate). Targets (issue 21): 10k points <= 0.5 s beyond start-up; 1M points <= 30 s under 200 MB; simulate
<= 2x the closed form; validate <= 3x estimate.

Run: python benchmarks/bench_grid.py [--runs 3] [--skip-million]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import time

PLAN = [
    "plan", "-m", "llama-3.1-70b", "--rate", "20", "--prompt", "2048", "--output", "300", "--slo", "ttft_p90=500ms",
    "--slo", "tpot_p90=40ms", "--gpu", "h100-sxm,h200,mi300x,l40s", "--tp", "1,2,4,8", "--weights", "bf16,fp8",
    "--top", "6", "--format", "json",
]  # fmt: skip
BATCHES = ",".join(str(b) for b in range(1, 101))
PROMPTS = ",".join(str(128 * p) for p in range(1, 101))
SWEEP = ["sweep", "-m", "llama-3.1-8b", "-g", "h100-sxm", "--output", "256", "--format", "csv"]
MILLION = """
import csv, math, os, resource, sys, time
from operator import attrgetter
from tokcost.engine.sweep import POINT_FIELDS, iter_sweep
from tokcost.engine.workload import Workload
from tokcost.hardware.library import load_gpu
from tokcost.models.library import load_model
start = time.perf_counter()
points = iter_sweep(load_model("llama-3.1-8b"), load_gpu("h100-sxm"), Workload(output_tokens=256),
                    batches=list(range(1, 1001)), prompts=[64 * p for p in range(1, 1001)])
row = attrgetter(*POINT_FIELDS)  # as the CLI streams them: a tuple per point, csv.writer, finite numbers only
with open(os.devnull, "w", newline="") as sink:
    out = csv.writer(sink, lineterminator="\\n")
    out.writerow(POINT_FIELDS)
    n = 0
    for point in points:
        values = row(point)
        assert all(math.isfinite(v) for v in values if isinstance(v, float))
        out.writerow(["" if v is None else v for v in values])
        n += 1
print(n, time.perf_counter() - start, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
"""
TEN_THOUSAND = """
import time
from tokcost.engine.sweep import iter_sweep
from tokcost.engine.workload import Workload
from tokcost.hardware.library import load_gpu
from tokcost.models.library import load_model
model, gpu = load_model("llama-3.1-8b"), load_gpu("h100-sxm")
start = time.process_time()
n = sum(1 for _ in iter_sweep(model, gpu, Workload(output_tokens=256), batches=list(range(1, 101)),
                              prompts=[128 * p for p in range(1, 101)]))
print(n, time.process_time() - start)
"""


def run(args: list[str]) -> tuple[float, float, str]:
    """(wall seconds, child CPU seconds, stdout) of one child process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(args, check=True, capture_output=True, text=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), done.stdout


def median_run(args: list[str], runs: int) -> tuple[float, float]:
    """Median (wall, CPU) seconds of `runs` runs (after one warm-up that writes the bytecode caches)."""
    run(args)
    samples = [run(args)[:2] for _ in range(runs)]
    return statistics.median(s[0] for s in samples), statistics.median(s[1] for s in samples)


def tokcost(*args: str) -> list[str]:
    """The command line of one tokcost run."""
    return [sys.executable, "-m", "tokcost", *args]


def line(name: str, wall: float, cpu: float, ratio: str) -> None:
    """One figure: its wall and CPU seconds and its ratio."""
    print(f"{name:30s} {wall:8.3f} s wall {cpu:8.3f} s CPU   {ratio}")


def main() -> None:
    """Measure and print every figure as a ratio against its reference."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--skip-million", action="store_true")
    args = parser.parse_args()
    runs = args.runs
    print(f"machine: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}; medians of {runs} runs")
    bare = median_run([sys.executable, "-c", "pass"], runs)
    estimate = median_run(tokcost("estimate", "-m", "llama-3.1-8b", "-g", "h100-sxm"), runs)
    line("python -c pass", *bare, "(the start-up reference)")
    line("tokcost estimate", *estimate, f"{estimate[0] / bare[0]:.1f}x / {estimate[1] / bare[1]:.1f}x python -c pass")

    engine = statistics.median(float(run([sys.executable, "-c", TEN_THOUSAND])[2].split()[1]) for _ in range(runs))
    one = median_run(tokcost(*SWEEP, "-b", "1"), runs)
    grid = median_run(tokcost(*SWEEP, "-b", BATCHES, "--context", PROMPTS), runs)
    beyond = (grid[0] - one[0], grid[1] - one[1])
    line("10k-point sweep, engine", engine, engine, f"in process: {engine / bare[1]:.1f}x python -c pass (CPU)")
    line("10k-point sweep -f csv", *beyond, f"beyond a one-point sweep: {beyond[0] / bare[0]:.1f}x python -c pass")
    if not args.skip_million:
        _, cpu, out = run([sys.executable, "-c", MILLION])
        points, seconds, rss_kb = out.split()
        line(f"{int(points):,} points to csv", float(seconds), cpu,
             f"peak RSS {int(rss_kb) / 1024:.0f} MB; {cpu / engine:.0f}x the 10k engine sweep")  # fmt: skip

    closed = median_run(tokcost(*PLAN), runs)
    simulate = median_run(tokcost(*PLAN, "--simulate"), runs)
    line("plan (README example)", *closed, "(the closed form)")
    line(
        "plan --simulate", *simulate, f"{simulate[0] / closed[0]:.2f}x / {simulate[1] / closed[1]:.2f}x the closed form"
    )
    validate = median_run(tokcost("validate"), runs)
    ratio = f"{validate[0] / estimate[0]:.2f}x / {validate[1] / estimate[1]:.2f}x tokcost estimate"
    line("tokcost validate", *validate, ratio)


if __name__ == "__main__":
    main()
