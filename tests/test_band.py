"""The 80% band beside "expected": one engine place (engine/band.py) read by estimate, compare and plan, in every
format; an era the data does not pin down carries a wider band and says whose."""

from __future__ import annotations

import csv
import io

import pytest

from tokcost.engine.band import WIDEST, band_of, rate_band, time_band
from tokcost.engine.estimate import estimate
from tokcost.engine.workload import Workload
from tokcost.hardware.library import load_gpu
from tokcost.models.library import load_model
from tokcost.profiles import Band, load_engine


def test_a_time_band_scales_the_time_and_a_rate_band_inverts_it():
    band = Band(low=0.8, high=1.5)
    assert time_band(2.0, band) == (1.6, 3.0)
    assert rate_band(150.0, band) == pytest.approx((100.0, 187.5))


def test_estimate_carries_its_era_band_on_its_platform():
    model, wl = load_model("llama-3.1-8b"), Workload(batch=1, prompt_tokens=512, output_tokens=64)
    vllm = load_engine("vllm")
    e = estimate(model, load_gpu("h100-sxm"), wl, engine=vllm)
    assert e.band == vllm.band and e.band.rows > 0 and "vllm@v1" in e.band.basis
    rocm = estimate(model, load_gpu("mi300x"), wl, engine=load_engine("vllm@0.6"))
    assert rocm.band == load_engine("vllm@v0").band_on("rocm")


def test_a_profile_without_a_band_gets_the_widest_and_says_so(tmp_path):
    path = tmp_path / "mine.yaml"
    body = "name: mine\nsource: my run, 2026-12-01\nnewest: main\neras:\n  main:\n    step_overhead_us: 50.0\n"
    path.write_text(body, encoding="utf-8")
    mine = load_engine(str(path))
    assert band_of(mine, "cuda") == WIDEST and "no left-out rows" in WIDEST.basis


def test_the_cli_shows_the_band_in_json_table_and_csv(cli):
    args = ("estimate", "-m", "llama-3.1-8b", "-g", "h100-sxm", "--engine", "vllm")
    data = cli(*args, "--format", "json").json()
    x, band = data["expected"], data["expected"]["band"]
    assert x["engine"] == "vllm@v1"
    assert band["tpot_s"] == pytest.approx(
        [x["tpot_s"] * band["time_low_factor"], x["tpot_s"] * band["time_high_factor"]]
    )
    assert band["decode_tokens_per_s"][0] < x["decode_tokens_per_s"] < band["decode_tokens_per_s"][1]
    table = cli(*args)
    assert table.exit_code == 0 and "expected 80% band" in table.stdout and "80% band: vllm@v1" in table.stdout
    rows = list(csv.DictReader(io.StringIO(cli("compare", "-m", "llama-3.1-8b", "-g", "h100-sxm,mi300x", "--engine",
                                               "vllm", "--format", "csv").stdout)))  # fmt: skip
    assert rows and all(r["expected_tpot_s_band"] for r in rows)


def test_plan_json_puts_the_band_under_expected(cli):
    result = cli("plan", "-m", "llama-3.1-8b", "-g", "h100-sxm", "--rate", "2", "--engine", "vllm", "--format", "json")
    assert result.exit_code == 0, result.stderr
    config = result.json()["configs"][0]
    band, x = config["expected"]["band"], config["expected"]
    assert band["ttft_s"]["p90"] == pytest.approx([x["ttft_s"]["p90"] * band["time_low_factor"],
                                                   x["ttft_s"]["p90"] * band["time_high_factor"]])  # fmt: skip


@pytest.mark.parametrize(("gpu", "engine"), [("a40", "mlc"), ("a40", "llama.cpp"), ("a40", "sglang")])
def test_no_end_of_the_band_passes_the_ceiling(gpu, engine):
    # an era whose left-out rows ran faster than its expected (band low < 1) would put its fast end past the ceiling
    # (MLC on an A40: a band from 0.801 of expected's time where the ceiling's is 0.844 of it); no run beats the
    # ceiling, so the band stops there
    from tokcost.engine.report import band_dict

    e = estimate(load_model("llama-3.1-8b"), load_gpu(gpu), Workload(), engine=load_engine(engine))
    assert e.band.low < e.ceiling.tpot_s / e.expected.tpot_s  # the unbounded band would pass it here
    spans, c = band_dict(e), e.ceiling
    for key in ("ttft_s", "tpot_s", "e2e_s"):
        assert spans[key][0] >= getattr(c, key) * (1 - 1e-12) and spans[key][1] >= spans[key][0]
    assert spans["decode_tokens_per_s"][1] <= c.decode_tokens_per_s * (1 + 1e-12)
    assert spans["tpot_s"][0] == pytest.approx(c.tpot_s)  # the fast end sits at the ceiling, not beyond
