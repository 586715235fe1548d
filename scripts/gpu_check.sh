#!/usr/bin/env bash
# The measure issue's GPU figures in one run (under 8 minutes on one GPU), written to docs/measurements/ (or $1):
#   1. tokcost measure of llama-3.1-8b in bf16 at batch 1, 8, 32, 64 (prompt 512, output 128; compile mode,
#      the CUDA default: fused blocks captured as CUDA graphs per KV bucket), with MBU, the calibrated
#      prediction per batch, energy from the GPU's counter over decode only;
#   2. tokcost calibrate (llama-3.1-8b shapes and depth) -> a measured GPU spec;
#   3. the GPU-marked tests (CUDA graphs and compile agree with eager, MoE and windows included);
#   4. with 2 or more GPUs: tokcost measure --tp 2 over NCCL, with the all-reduce probe;
#   5. if time is left: batch 1 in graph mode (unfused), for the fused-vs-unfused gap;
#   6. if time is left: qwen3-30b-a3b at batch 1 and 8 (routed experts through grouped matmuls, calibrated).
# Needs torch with CUDA and this project importable (pip install -e ".[measure]" or PYTHONPATH=.).
# Each file is created once (a timestamp in its name): nothing is replaced. Never edit the figures by hand.
set -uo pipefail
out="${1:-docs/measurements}"
budget_s="${GPU_CHECK_BUDGET_S:-400}"  # stop starting new steps past this (the lender allows 8 minutes)
py="${PYTHON:-$(command -v python3 || command -v python)}"  # GPU images often ship python3 alone; PYTHON= overrides
mkdir -p "$out"
export PYTHONUNBUFFERED=1 PYTHONPATH="${PYTHONPATH:-.}"
gpus=$("$py" -c "import torch; print(torch.cuda.device_count())")
if [ "${gpus:-0}" -lt 1 ]; then echo "gpu_check: torch sees no CUDA GPU" >&2; exit 2; fi
device=$("$py" -c "import torch; print(torch.cuda.get_device_name(0))" | tr -c 'A-Za-z0-9.\n' '-' | tr -s '-')
stem="$out/$(date -u +%Y-%m-%dT%H%MZ)-${device}"
log="$stem-gpu-check.log"
start=$SECONDS

run() {  # run LIMIT_S NAME CMD...: one step, time-limited, logged; a failed step does not stop the others
  local limit=$1 name=$2
  shift 2
  if [ $((SECONDS - start)) -ge "$budget_s" ]; then echo "== $name: skipped (budget spent)" | tee -a "$log" >&2; return; fi
  echo "== $name ($((SECONDS - start)) s in): $*" | tee -a "$log" >&2
  timeout -s INT -k 30 "$limit" "$@" 2>>"$log"  # SIGINT: measure saves what finished, like Ctrl-C
  echo "== $name: exit $? at $((SECONDS - start)) s" | tee -a "$log" >&2
}

{ nvidia-smi --query-gpu=name,uuid,driver_version,memory.total,power.limit,clocks.max.memory --format=csv || true
  "$py" -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)"; } >>"$log" 2>&1

run 220 "measure llama-3.1-8b" "$py" -m tokcost measure --model llama-3.1-8b --device cuda --dtype bf16 \
    --batch 1,8,32,64 --prompt 512 --output 128 --repeats 5 --save "$stem-llama-3.1-8b.json" --format markdown \
    >"$stem-llama-3.1-8b.md"
run 80 "calibrate" "$py" -m tokcost calibrate --device cuda --model llama-3.1-8b --out "$stem-calibrated.yaml"
run 120 "gpu tests" sh -c "'$py' -m pytest -q -m gpu tests/ | tail -5 >'$stem-gpu-tests.txt'"
if [ "$gpus" -ge 2 ]; then
  run 150 "measure llama-3.1-8b --tp 2" "$py" -m tokcost measure --model llama-3.1-8b --device cuda --dtype bf16 \
      --tp 2 --batch 1,8 --prompt 512 --output 64 --repeats 3 --save "$stem-llama-3.1-8b-tp2.json" \
      --format markdown >"$stem-llama-3.1-8b-tp2.md"
fi
run 70 "measure batch 1, graph mode" "$py" -m tokcost measure --model llama-3.1-8b --device cuda --dtype bf16 \
    --mode graph --batch 1 --prompt 512 --output 128 --repeats 3 --save "$stem-llama-3.1-8b-graph.json" \
    --format markdown >"$stem-llama-3.1-8b-graph.md"
run 150 "measure qwen3-30b-a3b" "$py" -m tokcost measure --model qwen3-30b-a3b --device cuda --dtype bf16 \
    --batch 1,8 --prompt 512 --output 64 --repeats 3 --save "$stem-qwen3-30b-a3b.json" \
    --format markdown >"$stem-qwen3-30b-a3b.md"
if [ -f "$stem-calibrated.yaml" ]; then
  "$py" -m tokcost estimate --model llama-3.1-8b --gpu "$stem-calibrated.yaml" --batch 1 --prompt 512 --output 128 \
      --format markdown >>"$stem-llama-3.1-8b.md" 2>>"$log"
fi
echo "gpu_check: $((SECONDS - start)) s; files: $stem-*" | tee -a "$log"
