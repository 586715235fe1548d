"""Side-by-side timings, reported as ratios from one run (never asserted in tests).

1. Cold start: `tokcost estimate` (fresh interpreter, JSON out) against a bare `python -c pass`.
2. A 10,000-point sweep (1,000 batch sizes x 10 prompt lengths) through the engine.

Run: python benchmarks/bench_cli.py [--runs 15]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time


def wall(cmd: list[str], runs: int) -> float:
    """Median wall seconds of `cmd` over `runs` fresh processes (after one warm-up for the page cache)."""
    subprocess.run(cmd, check=True, capture_output=True)
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run(cmd, check=True, capture_output=True)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def sweep_seconds() -> float:
    """Seconds for a 10,000-point sweep of llama-3.1-8b on h100-sxm."""
    from tokcost.engine.sweep import sweep
    from tokcost.engine.workload import Workload
    from tokcost.hardware.library import load_gpu
    from tokcost.models.library import load_model

    model, gpu = load_model("llama-3.1-8b"), load_gpu("h100-sxm")
    prompts = [128, 512, 1024, 2048, 4096, 8192, 16384, 32768, 65536, 100_000]
    start = time.perf_counter()
    points = sweep(model, gpu, Workload(), batches=list(range(1, 1001)), prompts=prompts)
    elapsed = time.perf_counter() - start
    assert len(points) == 10_000
    return elapsed


def main() -> None:
    """Print the medians and their ratio."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=15)
    args = parser.parse_args()
    bare = wall([sys.executable, "-c", "pass"], args.runs)
    estimate = wall(
        [sys.executable, "-m", "tokcost", "estimate", "-m", "llama-3.1-8b", "-g", "h100-sxm", "--format", "json"],
        args.runs,
    )
    print(f"python -c pass            median {bare * 1e3:7.1f} ms")
    print(
        f"tokcost estimate (json)   median {estimate * 1e3:7.1f} ms   ({estimate / bare:.1f}x bare python,"
        f" +{(estimate - bare) * 1e3:.0f} ms)"
    )
    print(f"sweep, 10,000 points             {sweep_seconds():7.2f} s")


if __name__ == "__main__":
    main()
