#!/usr/bin/env bash
# The README's test command, and what CI runs (.ci/run calls it): a virtual environment (created once, reused),
# torch's CPU build first, then tokcost with its dev, measure and plot extras, then lint, types and the tests.
# torch==2.13.0 first: the measure extra's plain `torch>=2.3` would otherwise pull a multi-GB CUDA build; with
# 2.13.0 installed it is already satisfied. On this project's machines pip finds that CPU wheel on disk
# (its pip configuration points at it); elsewhere TORCH_INDEX_URL names PyTorch's CPU index.
# Usage: bash scripts/test.sh [pytest args]   (TOKCOST_VENV=path picks another environment; default .venv)
set -euo pipefail
cd "$(dirname "$0")/.."

venv="${TOKCOST_VENV:-.venv}"
python="${PYTHON:-python3}"
if [ ! -x "$venv/bin/python" ]; then
    "$python" -m venv "$venv"
fi
. "$venv/bin/activate"
pip() { python -m pip --disable-pip-version-check -q "$@"; }

# TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu where pip would otherwise take the CUDA build
pip install "torch==2.13.0" ${TORCH_INDEX_URL:+--index-url "$TORCH_INDEX_URL"}  # already there: a no-op
pip install -e ".[dev,measure,plot]"

ruff check .
ruff format --check .
mypy --follow-imports=silent tokcost/engine  # the engine is typed strictly enough to check
python -m pytest -q "$@"
