"""Price NVIDIA AI Configurator's measured serving points with plan's serving model, on demand.

ai-dynamo/aiconfigurator publishes the points it checks its own predictions against
(aic-core/src/aiconfigurator_core/systems/silicon_sample.csv: one aggregated or disaggregated configuration at one
concurrency a row, aiperf closed loops at fixed lengths, client-side TTFT and TPOT). This script reads that file
from a path you give (tokcost ships none of it), keeps the aggregated rows whose model and GPU tokcost ships, with
tensor parallelism of at most 8 and no attention-DP, and predicts each with the serving check's own path
(scripts/serving_validation.py: the engine era from framework and version, validate_serving), then prints the
median |error| per engine and metric, and per configuration with --setups. Five of its setups, chosen by a stated
rule, are rows of tokcost/validation/serving.yaml; this prices the rest. The file states neither the engines'
scheduler flags nor the KV cache format, so each row is priced at the engine's defaults with a 16-bit cache.

Usage: python scripts/check_silicon_sample.py PATH/silicon_sample.csv [--backend vllm|sglang|trtllm ...]
       [--finite] [--setups]
  --finite  price each point as a finite run of 20 x C requests (AI Configurator's benchmark template) by
            simulation, not plan's closed form
"""

from __future__ import annotations

import argparse
import csv
import statistics
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from serving_validation import grade  # noqa: E402

from tokcost.serving.validate import ServingResult  # noqa: E402
from tokcost.validation.serving_data import ServingRow, ServingSetup  # noqa: E402

# the file's model_path and system names -> tokcost built-ins (checkpoints run as shipped where `experts` is set)
MODELS = {
    "meta-llama/Llama-3.1-8B-Instruct": "llama-3.1-8b",
    "meta-llama/Llama-3.1-70B": "llama-3.1-70b",
    "Qwen/Qwen3-32B": "qwen3-32b",
    "openai/gpt-oss-120b": "gpt-oss-120b",
    "Qwen/Qwen3-235B-A22B-FP8": "qwen3-235b-a22b",
    "deepseek-ai/DeepSeek-R1": "deepseek-r1",
    "deepseek-ai/DeepSeek-V3": "deepseek-v3",
}
GPUS = {"h100_sxm": "h100-sxm", "h200_sxm": "h200", "b200_sxm": "b200", "b300_sxm": "b300", "gb200": "gb200"}
ENGINES = {"vllm": "vllm", "sglang": "sglang", "trtllm": "tensorrt-llm"}
WEIGHTS = {"": "bf16", "fp8": "fp8", "fp8_block": "fp8", "nvfp4": "fp4"}  # gemm_quant_mode -> weight format
NEWEST = {"vllm": "0.19.0", "sglang": "0.5.9", "trtllm": "1.2.0"}  # a row with no version: the file's newest


def _setup(row: dict[str, str], key: str) -> ServingSetup:
    tp, engine = int(row["tp_size"]), ENGINES[row["backend"]]
    shipped_moe = MODELS[row["model_path"]] == "gpt-oss-120b"  # MXFP4 experts beside bf16 attention, as shipped
    return ServingSetup(
        id=key, source_id="aiconfigurator-silicon-sample", source=row["id"], model=MODELS[row["model_path"]],
        gpu=GPUS[row["system"]], gpus=tp, tp=tp, nodes=1, prefill_decode="aggregated",
        weights="bf16" if shipped_moe else WEIGHTS[row["gemm_quant_mode"]], experts="fp4" if shipped_moe else None,
        kv="bf16", engine=engine, framework=engine, engine_version=row["backend_version"] or NEWEST[row["backend"]],
        graphs=None, prompt_dist="fixed", output_dist="fixed", length_means="nominal", measured_at="client",
    )  # fmt: skip


def _rows(row: dict[str, str], key: str, finite: bool) -> list[ServingRow]:
    users = int(row["batch_size"])
    return [
        ServingRow(
            id=f"{key}-c{users}-{metric[:4]}",
            setup=key,
            quote=row["id"],
            arrival="closed_loop",
            concurrency=users,
            num_requests=20 * users if finite else None,
            prompt_tokens_mean=float(row["isl"]),
            output_tokens_mean=float(row["osl"]),
            metric=metric,
            statistic="unstated",
            value=float(row[column]),
        )
        for metric, column in (("ttft_ms", "silicon_ttft_ms"), ("tpot_ms", "silicon_tpot_ms"))
    ]


def priced(path: Path, backends: set[str], finite: bool) -> list[ServingResult]:
    """Every kept row of the file against the serving model, one setup per configuration and length pair."""
    setups: dict[str, ServingSetup] = {}
    rows: dict[str, list[ServingRow]] = defaultdict(list)
    with path.open(newline="", encoding="utf-8") as f:
        for row in csv.DictReader(f):
            keep = row["mode"] == "agg" and row["backend"] in backends and row["model_path"] in MODELS
            if not keep or row["system"] not in GPUS or not 1 <= int(row["tp_size"] or 0) <= 8:
                continue
            if int(row["attention_dp_size"] or 1) > 1 or int(row["moe_ep_size"] or 1) > 1:
                continue
            parts = (row["model_path"], row["system"], row["backend"], row["backend_version"] or "newest",
                     row["gemm_quant_mode"] or "bf16", f"tp{row['tp_size']}", f"{row['isl']}x{row['osl']}")  # fmt: skip
            key = "-".join(parts).lower().replace("/", "-").replace("_", "-")
            setups.setdefault(key, _setup(row, key))
            seen = {r.concurrency for r in rows[key]}
            if int(row["batch_size"]) not in seen:  # the first of a repeated point, as serving.yaml takes it
                rows[key] += _rows(row, key, finite)
    return grade(setups, [row for own in rows.values() for row in own])[0]


def table(results: list[ServingResult], by_setup: bool) -> str:
    """Markdown: rows, median |error| and median signed error per engine and metric (and per setup)."""
    groups: dict[str, list[float]] = defaultdict(list)
    for r in results:
        if r.error is None:
            continue
        groups[f"{r.setup.engine} · {r.row.metric}"].append(r.error)
        if by_setup:
            groups[f"{r.setup.id} · {r.row.metric}"].append(r.error)
    lines = ["| group | rows | median abs error | median error |", "|:---|---:|---:|---:|"]
    for name, errors in sorted(groups.items()):
        lines.append(f"| {name} | {len(errors)} | {statistics.median(abs(e) for e in errors):.1%} | "
                     f"{statistics.median(errors):+.1%} |")  # fmt: skip
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("csv", type=Path)
    parser.add_argument("--backend", action="append", choices=sorted(ENGINES), help="repeat for several (default all)")
    parser.add_argument("--finite", action="store_true", help="simulate 20 x C requests instead of the closed form")
    parser.add_argument("--setups", action="store_true", help="a line per configuration too")
    args = parser.parse_args(argv)
    if not args.csv.is_file():
        parser.error(f"{args.csv}: no such file (silicon_sample.csv from ai-dynamo/aiconfigurator)")
    print(table(priced(args.csv, set(args.backend or ENGINES), args.finite), args.setups))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
