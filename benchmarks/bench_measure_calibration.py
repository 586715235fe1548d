"""Does the calibration predict its own loop? Calibrated TPOT / measured TPOT for four widths on the CPU.

The measure issue's CPU target: at one thread on a quiet machine, the calibrated prediction (skeleton step
time + the loop's bytes / the loop's own stream rate) within +/-15% of measured TPOT for models of ~10 MB
to ~1 GB of weights. Timing thresholds belong here, not in the tests: this prints ratios and the noise
(step-time CV) behind each, and the machine's load average, so a reader can judge the figures.

    PYTHONPATH=. python benchmarks/bench_measure_calibration.py [--threads 1] [--batch 1,4] [--repeats 3]
        [--clock thread] [--quiet-load 0.5]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import time

from tokcost.measure import clock
from tokcost.measure.session import measure
from tokcost.models.spec import ModelSpec


def llama_like(name: str, hidden: int, layers: int) -> ModelSpec:
    """A Llama-shaped decoder: 64-wide heads, 4 query heads per KV head, SwiGLU of ~2.75 x hidden, 8k vocab."""
    heads = hidden // 64
    intermediate = (hidden * 11 // 4 + 63) // 64 * 64
    return ModelSpec(name=name, layers=layers, hidden_size=hidden, attention_heads=heads, kv_heads=max(heads // 4, 1),
                     intermediate_size=intermediate, vocab_size=8192, max_context=4096)  # fmt: skip


MODELS = [
    llama_like("w256", 256, 4),  # 14 MB of bf16 weights: fits the last-level cache of most servers
    llama_like("w512", 512, 4),  # 40 MB
    llama_like("w1024", 1024, 8),  # 214 MB
    llama_like("w2048", 2048, 12),  # 1.15 GB
]


def _wait_for_quiet(threshold: float, limit_s: float) -> float:
    """Seconds spent waiting for the load average to fall below `threshold` (0: do not wait)."""
    t0 = time.monotonic()
    while threshold and os.getloadavg()[0] >= threshold and time.monotonic() - t0 < limit_s:
        time.sleep(5)
    return time.monotonic() - t0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--batch", default="1")
    parser.add_argument("--prompt", type=int, default=32)
    parser.add_argument("--output", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", action="store_true", help="one JSON object per run instead of the table")
    parser.add_argument(
        "--quiet-load",
        type=float,
        default=0.0,
        help="before each model, wait (up to --wait seconds) for the 1-minute load average to drop below this",
    )
    parser.add_argument("--wait", type=float, default=600.0)
    parser.add_argument(
        "--clock",
        choices=("wall", "thread"),
        default="wall",
        help="thread: time by this thread's CPU time (one thread only), for a machine shared with "
        "other work; the scheduler's gaps do not count, memory contention still does",
    )
    args = parser.parse_args()
    batches = [int(b) for b in args.batch.split(",")]
    if args.clock == "thread" and args.threads != 1:
        parser.error("--clock thread needs --threads 1 (other threads' CPU time would not be counted)")
    print(
        f"# load average before: {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs; threads {args.threads}; "
        f"clock {args.clock}"
    )
    print(f"{'model':>6} {'weights':>9} {'batch':>5} {'measured':>10} {'IQR':>8} {'CV':>6} {'calibrated':>10} "
          f"{'ratio':>6} {'overhead':>9} {'stream':>10}")  # fmt: skip
    ratios = []
    for spec in MODELS:
        waited = _wait_for_quiet(args.quiet_load, args.wait)
        print(f"# {spec.name}: load average {os.getloadavg()[0]:.2f} at start (waited {waited:.0f} s)", file=sys.stderr)
        t0 = time.perf_counter()
        with clock.thread_cpu_clock() if args.clock == "thread" else contextlib.nullcontext():
            outcome = measure(spec, device="cpu", dtype="bf16", batches=batches, prompt_tokens=args.prompt,
                              output_tokens=args.output, repeats=args.repeats, mode="eager", threads=args.threads,
                              gpu=None, progress=lambda _m: None)  # fmt: skip
        for r in outcome.runs:
            lp, cal = r.loop, r.calibrated
            ratio = cal.tpot_s / lp.tpot_s if cal else float("nan")
            ratios.append((spec.name, lp.batch, ratio, lp.step.cv))
            if args.json:
                row = {"model": spec.name, "batch": lp.batch, "weights_bytes": lp.weight_bytes_measured,
                       "measured_tpot_s": lp.tpot_s, "calibrated_tpot_s": cal.tpot_s if cal else None,
                       "ratio": ratio, "step_cv": lp.step.cv, "calibration": r.calibration}  # fmt: skip
                print(json.dumps(row, default=str))
                continue
            print(f"{spec.name:>6} {lp.weight_bytes_measured / 1e6:7.1f}MB {lp.batch:>5} {lp.tpot_s * 1e3:8.3f}ms "
                  f"{lp.tpot.iqr * 1e3:6.3f}ms {lp.step.cv:6.1%} {cal.tpot_s * 1e3 if cal else float('nan'):8.3f}ms "
                  f"{ratio:6.3f} {r.calibration['step_overhead_s'] * 1e3:7.3f}ms "
                  f"{r.calibration['stream_bytes_per_s'] / 1e9:6.2f}GB/s"
                  + ("  (noisy)" if r.noisy else ""))  # fmt: skip
        print(f"#   {spec.name}: {time.perf_counter() - t0:.1f} s", file=sys.stderr)
    print(f"# load average after: {os.getloadavg()[0]:.2f}")
    inside = sum(1 for *_, ratio, _ in ratios if abs(ratio - 1) <= 0.15)
    print(f"# {inside} of {len(ratios)} within +/-15% (ratio = calibrated / measured TPOT)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
