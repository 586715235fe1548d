"""Big sweeps from the CLI: seconds beyond start-up and peak memory, against references measured in the same run.

Every figure is a fresh `tokcost sweep` (bytecode cached), its median over the rounds:
1. reference: a 1-point sweep to csv, i.e. start-up, spec loading and one point;
2. 10,000 points (1,000 batches x 10 prompt lengths) to csv: seconds beyond the reference (target <= 0.5 s),
   and the same points as a table on a pipe (plain text past 200 rows) and as JSON, which hold every point;
3. the big grid (default 1,000,000 points: 1,000 batches x 1,000 prompt lengths) streamed to csv, once: wall
   seconds and peak RSS (targets <= 30 s and < 200 MB), beside the 10,000-point csv run's RSS.
Peak RSS is the child's own (os.wait4). The engine's speed is the `grid` work's (benchmarks/bench_grid.py).

Run: python benchmarks/bench_sweep.py [--rounds 3] [--big 1000000] [--against CHECKOUT]   (--big 0 skips step 3;
--against also runs the 10,000-point stdout renderings in another checkout, e.g. main's)
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SWEEP = ["-m", "tokcost", "sweep", "-m", "llama-3.1-8b", "-g", "h100-sxm"]
PROMPTS_10 = [128, 512, 1024, 2048, 4096, 8192, 16384, 32768, 65536, 100_000]


def _csv_list(values: list[int]) -> str:
    return ",".join(str(v) for v in values)


def _env(tree: Path) -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": str(tree), "COLUMNS": "120"}
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # bytecode cached, as an installed tokcost runs
    return env


def once(args: list[str], tree: Path = ROOT) -> tuple[float, float]:
    """(wall seconds, peak RSS in MB) of one fresh interpreter running `args` in `tree`, its stdout discarded."""
    start = time.perf_counter()
    proc = subprocess.Popen([sys.executable, *args], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            env=_env(tree), cwd=tree)  # fmt: skip
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    if status != 0:
        raise SystemExit(f"failed: {' '.join(args)}: {proc.stderr.read().decode() if proc.stderr else ''}")
    return wall, usage.ru_maxrss / 1024  # Linux reports kilobytes


def medians(runs: dict[str, tuple[list[str], Path]], rounds: int) -> dict[str, tuple[float, float]]:
    """Median (wall, peak RSS) of each run over interleaved rounds, after a warm-up round."""
    seen: dict[str, list[tuple[float, float]]] = {name: [] for name in runs}
    for i in range(rounds + 1):
        for name, (args, tree) in runs.items():
            result = once(args, tree)
            if i:
                seen[name].append(result)
    return {n: (statistics.median(w for w, _ in v), statistics.median(r for _, r in v)) for n, v in seen.items()}


def main() -> None:
    """Print each run's wall time, its excess over the 1-point reference, and its peak RSS."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--big", type=int, default=1_000_000, help="points of the streamed run (1,000 x big/1,000)")
    parser.add_argument("--against", type=Path, help="also run the 10,000-point stdout runs in this checkout")
    args = parser.parse_args()
    load = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as folder:
        out = Path(folder) / "sweep.csv"
        grid = ["-b", _csv_list(list(range(1, 1001))), "--context", _csv_list(PROMPTS_10)]
        runs = {
            "1 point, csv (reference)": ([*SWEEP, "-b", "1", "-f", "csv", "--out", str(out), "--force"], ROOT),
            "10,000 points, csv --out": ([*SWEEP, *grid, "-f", "csv", "--out", str(out), "--force"], ROOT),
        }
        held = {"csv stdout": ["-f", "csv"], "table": [], "json": ["-f", "json"]}
        runs.update({f"10,000 points, {name}": ([*SWEEP, *grid, *extra], ROOT) for name, extra in held.items()})
        if args.against:
            tree = args.against.resolve()
            runs.update({f"{tree.name}: 10,000, {n}": ([*SWEEP, *grid, *extra], tree) for n, extra in held.items()})
        result = medians(runs, args.rounds)
        print(f"{platform.python_implementation()} {platform.python_version()}, {os.cpu_count()} CPUs, "
              f"load {load:.2f} at start, {args.rounds} rounds; medians")  # fmt: skip
        reference = "1 point, csv (reference)"
        ref_wall = result[reference][0]
        for name, (wall, rss) in result.items():
            beyond = f"+{wall - ref_wall:6.2f} s beyond start-up" if name != reference else " " * 26
            print(f"{name:30} {wall:7.2f} s  {beyond}  {wall / ref_wall:6.1f}x   peak RSS {rss:6.1f} MB")
        if args.big:
            contexts = [100 * (i + 1) for i in range(max(args.big // 1000, 1))]
            big = [*SWEEP, "-b", _csv_list(list(range(1, 1001))), "--context", _csv_list(contexts), "-f", "csv"]
            wall, rss = once([*big, "--out", str(out), "--force"], ROOT)
            points = 1000 * len(contexts)
            print(f"{points:,} points, csv --out   {wall:7.2f} s  (+{wall - ref_wall:.2f} s beyond start-up, "
                  f"{(wall - ref_wall) / points * 1e6:.1f} us a point)   peak RSS {rss:6.1f} MB "
                  f"({rss / result['10,000 points, csv --out'][1]:.2f}x the 10,000-point run's)")  # fmt: skip


if __name__ == "__main__":
    main()
