"""How long `tokcost plan` takes, and what its step-time curves save (timings here, never in tests).

1. The issue's size: 14 GPUs x 4 TP degrees x 3 weight formats (all built-in GPUs, TP 1,2,4,8, bf16/fp8/int4),
   llama-3.1-70b at 20 req/s, 2k in / 300 out, p90 TTFT 500 ms and p90 TPOT 40 ms, chunks searched.
2. The README's command (4 GPUs x 4 TP x 2 formats) in a fresh interpreter, end to end.
3. Engine calls: how many passes (Steps.cost) the curves needed, against one call per use.
4. The largest inputs plan accepts (issue 22: each must finish in under 30 s on two cores): a 600-point dense
   search, an MoE search at the weighted bound, a 100,000-request trace, and a simulation at 60,000 prefill steps.
5. Closed loops whose state sits near the prefill queue's edge (one- and two-token answers, tiny prompts, a lone
   user of short ones): the slowest plans a random search found (--closed-edge prints these alone).

Run: python benchmarks/bench_plan.py [--runs 3] [--largest-only] [--closed-edge]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time

ISSUE_COMMAND = [
    "plan", "-m", "llama-3.1-70b", "--rate", "20", "--prompt", "2048", "--output", "300",
    "--slo", "ttft_p90=500ms", "--slo", "tpot_p90=40ms", "--gpu", "h100-sxm,h200,mi300x,l40s",
    "--tp", "1,2,4,8", "--weights", "bf16,fp8", "--format", "json",
]  # fmt: skip


def full_search_seconds(runs: int) -> tuple[float, int, int, int]:
    """(median seconds, configurations, engine calls, curve evaluations) for the 14 x 4 x 3 search."""
    from tokcost.hardware.library import builtin_gpus, load_gpu, load_network
    from tokcost.models.library import load_model
    from tokcost.serving import curve, search, steps
    from tokcost.serving.traffic import LengthDist, Slo, Traffic

    model = load_model("llama-3.1-70b")
    gpus = tuple(load_gpu(name) for name in builtin_gpus())
    traffic = Traffic(LengthDist("fixed", 2048), LengthDist("fixed", 300), rate_rps=20)
    slos = [Slo("ttft", "p90", 0.5), Slo("tpot", "p90", 0.04)]
    space = search.Space(
        gpus=gpus, tps=(1, 2, 4, 8), weights=("bf16", "fp8", "int4"), chunks=search.DEFAULT_CHUNKS,
        networks={g.name: load_network(g.network) for g in gpus if g.network},
    )  # fmt: skip
    calls = [0]
    evaluations = [0]
    original_cost, original_call = steps.Steps.cost, curve.Curve.__call__

    def counted_cost(self, segments):
        calls[0] += 1
        return original_cost(self, segments)

    def counted_call(self, b):
        evaluations[0] += 1
        return original_call(self, b)

    times = []
    for i in range(runs):
        if i == 0:  # count once, time the others without the counters' overhead
            steps.Steps.cost = counted_cost  # type: ignore[method-assign]
            curve.Curve.__call__ = counted_call  # type: ignore[method-assign]
        start = time.perf_counter()
        result = search.plan(model, traffic, slos, space)
        times.append(time.perf_counter() - start)
        steps.Steps.cost = original_cost  # type: ignore[method-assign]
        curve.Curve.__call__ = original_call  # type: ignore[method-assign]
    return statistics.median(times[1:] or times), len(result.rows), calls[0], evaluations[0]


def cli_seconds(runs: int) -> float:
    """Median wall seconds of the README command in a fresh interpreter."""
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run([sys.executable, "-m", "tokcost", *ISSUE_COMMAND], check=True, capture_output=True)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


LARGEST = {
    "600 search points (15 GPUs x TP x 10 chunks, llama-3.1-8b)": [
        "plan", "-m", "llama-3.1-8b", "--rate", "20", "--gpu", "all", "--weights", "bf16",
        "--chunk", "64,128,256,512,1024,2048,4096,8192,16384,32768"],
    "MoE near the weighted bound (deepseek-v3: 128 points x 4 chunks = 512)": [
        "plan", "-m", "deepseek-v3", "--rate", "5", "--gpu", "h100-sxm,h200,b200,mi300x", "--weights", "fp8",
        "--slo", "tpot_p90=80ms", "--chunk", "1024,2048,4096,8192"],
    "MoE on every GPU (mixtral-8x7b: 480 weighted points)": [
        "plan", "-m", "mixtral-8x7b", "--rate", "5", "--gpu", "all"],
    "100,000-request trace with arrival times": ["plan", "-m", "llama-3.1-8b", "--gpu", "h100-sxm", "--trace"],
    "simulation at 150,000 prefill steps (3 rows x 33,333 requests of 1.5 steps)": [
        "plan", "-m", "llama-3.1-8b", "--rate", "10", "--gpu", "h100-sxm", "--prompt", "1024", "--chunk", "2048",
        "--simulate", "--requests", "33333"],
    "simulation at 150,000 prefill steps of an MoE in pipeline stages (llama-4-maverick TP 8 PP 2)": [
        "plan", "-m", "llama-4-maverick", "--rate", "2", "--gpu", "h100-sxm", "--tp", "8", "--pp", "2", "--prompt",
        "8000", "--chunk", "512", "--output", "50", "--simulate", "--requests", "3000"],
}  # fmt: skip


_H100 = ["plan", "-m", "llama-3.1-8b", "--gpu", "h100-sxm", "--tp", "1"]
CLOSED_EDGE = {
    "1 user, exponential 50-token prompts, 10-token answers": [
        *_H100, "--concurrency", "1", "--prompt", "50", "--prompt-dist", "exponential", "--output", "10",
        "--headroom", "1"],
    "10 users, lognormal:2 500-token prompts, 1-token answers, chunk 8192": [
        *_H100, "--concurrency", "10", "--prompt", "500", "--prompt-dist", "lognormal:2", "--output", "1",
        "--output-dist", "lognormal:0.3", "--chunk", "8192", "--headroom", "1"],
    "100 users, no think time, 2-token prompts, 2-token answers": [
        *_H100, "--concurrency", "100", "--think-time", "0s", "--prompt", "2", "--prompt-dist", "lognormal:0.3",
        "--output", "2", "--output-dist", "exponential", "--headroom", "1"],
    "200,000 users, 0.5 s think time, 2-token prompts, 1-token answers, chunk 8192": [
        *_H100, "--concurrency", "200000", "--think-time", "0.5s", "--prompt", "2", "--prompt-dist", "lognormal:0.3",
        "--output", "1", "--output-dist", "lognormal:0.3", "--chunk", "8192", "--headroom", "0"],
    "20,000 users, exponential 50-token prompts, 1-token answers": [
        *_H100, "--concurrency", "20000", "--prompt", "50", "--prompt-dist", "exponential", "--output", "1",
        "--output-dist", "lognormal:0.3", "--headroom", "0"],
}  # fmt: skip


def commands_seconds(commands: dict[str, list[str]]) -> dict[str, float]:
    """Wall seconds of each command, in a fresh interpreter."""
    out = {}
    for name, argv in commands.items():
        start = time.perf_counter()
        subprocess.run([sys.executable, "-m", "tokcost", *argv, "--format", "json"], check=True, capture_output=True)
        out[name] = time.perf_counter() - start
    return out


def largest_seconds(tmp: str) -> dict[str, float]:
    """Wall seconds of each largest accepted input, in a fresh interpreter."""
    import json
    from pathlib import Path

    trace = Path(tmp) / "trace.jsonl"
    trace.write_text("".join(json.dumps({"prompt_tokens": 100 + i % 5000, "output_tokens": 1 + i % 700,
                                         "arrival_s": i * 0.01}) + "\n" for i in range(100_000)))  # fmt: skip
    return commands_seconds({name: [*args, str(trace)] if args[-1] == "--trace" else args
                             for name, args in LARGEST.items()})  # fmt: skip


def main() -> None:
    """Print the timings and the engine-call ratio."""
    import tempfile

    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--largest-only", action="store_true")
    parser.add_argument("--closed-edge", action="store_true")
    args = parser.parse_args()
    for name, seconds in commands_seconds(CLOSED_EDGE).items():
        print(f"closed loop near the prefill queue's edge: {name}: {seconds:6.2f} s")
    if args.closed_edge:
        return
    with tempfile.TemporaryDirectory() as tmp:
        for name, seconds in largest_seconds(tmp).items():
            print(f"largest accepted: {name}: {seconds:6.2f} s")
    if args.largest_only:
        return
    seconds, configs, calls, evaluations = full_search_seconds(args.runs + 1)
    print(f"14 GPUs x 4 TP x 3 formats ({configs} configurations, chunks searched): {seconds:6.2f} s")
    print(f"  engine pass calls {calls:,} for {evaluations:,} step times read off curves "
          f"({evaluations / max(calls, 1):,.0f}x fewer engine calls)")  # fmt: skip
    print(f"README command (4 GPUs x 4 TP x 2 formats), fresh interpreter: {cli_seconds(args.runs):6.2f} s")


if __name__ == "__main__":
    main()
