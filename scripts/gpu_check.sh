#!/usr/bin/env bash
# The GPU figures of the measure issue, in one run: calibrate the device, then measure llama-3.1-8b in bf16
# at batch 1, 8, 32, 64 (prompt 512, output 128, CUDA graphs), and the GPU-marked tests.
# Writes JSON, Markdown and the calibrated spec to docs/measurements/ (or $1). Needs torch with CUDA and
# this project importable (pip install -e . or PYTHONPATH=.). Each file is written once: nothing is replaced.
set -euo pipefail
out="${1:-docs/measurements}"
mkdir -p "$out"
export PYTHONUNBUFFERED=1
device=$(python -c "import torch; print(torch.cuda.get_device_name(0))" | tr -c 'A-Za-z0-9.\n' '-' | tr -s '-')
stem="$out/$(date -u +%Y-%m-%d)-${device}"

python -m tokcost calibrate --device cuda --out "$stem-calibrated.yaml"
python -m tokcost measure --model llama-3.1-8b --device cuda --dtype bf16 --mode graph \
    --batch 1,8,32,64 --prompt 512 --output 128 --repeats 5 \
    --save "$stem-llama-3.1-8b.json" --format markdown | tee "$stem-llama-3.1-8b.md"
python -m tokcost estimate --model llama-3.1-8b --gpu "$stem-calibrated.yaml" --batch 1 --prompt 512 --output 128 \
    --format markdown >> "$stem-llama-3.1-8b.md"
python -m pytest -q -m gpu tests/ | tail -3
