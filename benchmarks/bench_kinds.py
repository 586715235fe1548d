"""What the layer kinds cost the grid path: a 10,000-point sweep per kind, as a ratio to a dense model's in one run.

Each model's 10,000 points (100 batches x 100 prompt lengths of 1k..100k, h200) are priced by iter_sweep in a
fresh child process; the figure is the child's CPU seconds (what the machine's load does not inflate), the median
over --runs, and its ratio to llama-3.1-8b's measured beside it. A chunked model (Llama-4 Scout) has a regime
per 8,192-token chunk for each batch; a state model one more (its first state read). --against CHECKOUT prices
the same points in another tree (e.g. main) for the models it can price.

Run: python benchmarks/bench_kinds.py [--runs 3] [--against /work/main]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CASES = [("llama-3.1-8b", 1), ("gemma-3-27b", 2), ("llama-4-scout", 4), ("qwen3-next-80b-a3b", 4), ("nemotron-h-8b", 1)]
CHILD = """
import sys, time
from tokcost.engine.sweep import iter_sweep
from tokcost.engine.workload import Workload
from tokcost.hardware.library import load_gpu
from tokcost.models.library import load_model
model, gpu = load_model(sys.argv[1]), load_gpu("h200")
batches, prompts = list(range(1, 101)), [1024 * (i + 1) for i in range(100)]
start = time.process_time()
points = sum(1 for _ in iter_sweep(model, gpu, Workload(tp=int(sys.argv[2])), batches=batches, prompts=prompts))
print(time.process_time() - start)
"""


def cpu_seconds(tree: Path, model: str, tp: int) -> float | None:
    """One child's CPU seconds for the 10,000 points (None: that tree refuses the model)."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    # run from the tree itself: `python -c` puts the working directory ahead of PYTHONPATH
    out = subprocess.run([sys.executable, "-c", CHILD, model, str(tp)], env=env, cwd=tree, capture_output=True,
                         text=True)  # fmt: skip
    return float(out.stdout) if out.returncode == 0 else None


def main() -> None:
    """Print each model's median CPU seconds and its ratio to the dense reference, per tree."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--against", type=Path)
    args = parser.parse_args()
    trees = [ROOT] + ([args.against] if args.against else [])
    times: dict[tuple[Path, str], list[float]] = {}
    for _ in range(args.runs):  # interleaved, so that load moves every figure alike
        for tree in trees:
            for model, tp in CASES:
                seconds = cpu_seconds(tree, model, tp)
                if seconds is not None:
                    times.setdefault((tree, model), []).append(seconds)
    for tree in trees:
        reference = statistics.median(times[(tree, CASES[0][0])])
        for model, tp in CASES:
            found = times.get((tree, model))
            shown = (
                f"{statistics.median(found):.3f} s CPU, {statistics.median(found) / reference:.2f}x"
                if found
                else "refused"
            )
            print(f"{tree.name:>10}  {model:<20} TP {tp}: {shown}")


if __name__ == "__main__":
    main()
