"""scripts/check_silicon_sample.py prices AI Configurator's silicon rows on the serving check's own path."""

from __future__ import annotations

import csv
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

import check_silicon_sample as check  # noqa: E402
from serving_validation import grade  # noqa: E402

from tokcost.validation.serving_data import load_serving  # noqa: E402

COLUMNS = ["id", "backend", "backend_version", "model_path", "system", "precision", "mode", "isl", "osl",
           "gemm_quant_mode", "batch_size", "tp_size", "attention_dp_size", "moe_ep_size", "silicon_ttft_ms",
           "silicon_tpot_ms"]  # fmt: skip
QWEN = {"backend": "vllm", "backend_version": "0.12.0", "model_path": "Qwen/Qwen3-32B", "system": "h100_sxm",
        "precision": "", "mode": "agg", "isl": "1024", "osl": "1024", "gemm_quant_mode": "", "tp_size": "2",
        "attention_dp_size": "", "moe_ep_size": "0"}  # fmt: skip


def _write(path: Path, rows: list[dict[str, str]]) -> Path:
    with path.open("w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=COLUMNS)
        writer.writeheader()
        writer.writerows(rows)
    return path


@pytest.fixture(scope="module")
def priced(tmp_path_factory):
    rows = [
        {**QWEN, "id": "a", "batch_size": "8", "silicon_ttft_ms": "154.343741", "silicon_tpot_ms": "15.9005368625"},
        {**QWEN, "id": "b", "batch_size": "8", "silicon_ttft_ms": "999", "silicon_tpot_ms": "99"},  # a repeat
        {**QWEN, "id": "c", "batch_size": "8", "attention_dp_size": "2", "silicon_ttft_ms": "1",
         "silicon_tpot_ms": "1"},
        {**QWEN, "id": "d", "batch_size": "8", "model_path": "MiniMaxAI/MiniMax-M2.5", "silicon_ttft_ms": "1",
         "silicon_tpot_ms": "1"},
    ]  # fmt: skip
    return check.priced(_write(tmp_path_factory.mktemp("aic") / "silicon.csv", rows), {"vllm"}, finite=False)


def test_keeps_the_first_of_a_repeated_point_and_drops_what_it_cannot_price(priced):
    assert sorted((r.row.metric, r.row.value) for r in priced) == [("tpot_ms", 15.9005368625), ("ttft_ms", 154.343741)]
    assert all(r.error == pytest.approx(r.predicted / r.row.value - 1) for r in priced)


def test_a_point_prices_as_the_same_point_in_serving_yaml(priced):
    """The row is aic-vllm0120-qwen3-32b-2xh100-1k1k's 8-user point: the script and the serving check agree."""
    setups, rows = load_serving(ROOT / "tokcost" / "validation" / "serving.yaml")
    setup = setups["aic-vllm0120-qwen3-32b-2xh100-1k1k"]
    own = [r for r in rows if r.setup == setup.id and r.concurrency == 8]
    found, _ = grade({setup.id: setup}, own)
    expected = {r.row.metric: r.predicted for r in found}
    assert {r.row.metric: r.predicted for r in priced} == pytest.approx(expected, rel=1e-12)


def test_the_table_reads_back(priced):
    lines = check.table(priced, by_setup=False).splitlines()
    ttft = next(line for line in lines if "ttft_ms" in line).split("|")
    error = next(r.error for r in priced if r.row.metric == "ttft_ms")
    assert int(ttft[2]) == 1 and float(ttft[3].strip().rstrip("%")) == pytest.approx(abs(error) * 100, abs=0.05)


def test_a_missing_file_is_one_line_exit_2(tmp_path, capsys):
    with pytest.raises(SystemExit) as stop:
        check.main([str(tmp_path / "none.csv")])
    assert stop.value.code == 2 and "no such file" in capsys.readouterr().err
