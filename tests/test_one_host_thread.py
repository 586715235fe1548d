"""One host thread for every GPU: llama.cpp drives all the GPUs of its row split from one process and one thread,
so in an eager era the host launches each GPU's kernels in turn, and a TP group of n GPUs costs the host n launches
per kernel of one GPU's pass. Engines with a process per GPU launch side by side. Every path that prices a pass (the
compiled pass, the decode lines, the rate table, the fit's pricer) reads the same Rates.launch_s."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tokcost import Workload, load_gpu, load_model
from tokcost.cli.app import app
from tokcost.cli.validate_cmd import DEFAULT_DATA, load_specs
from tokcost.engine.decode import DecodeLines
from tokcost.engine.estimate import estimate
from tokcost.errors import SpecError
from tokcost.profiles import load_engine
from tokcost.validation.cases import Pricer, prepare, row_cell
from tokcost.validation.data import load_rows
from tokcost.validation.folds import load_folds
from tokcost.validation.run import cell_label, price_rows, shipped_profiles

LLAMA70 = load_model("llama-2-70b")
A100_PCIE = load_gpu("a100-80gb-pcie")
LLAMACPP = load_engine("llama.cpp@eager")


def _estimate(tp: int, engine=LLAMACPP):
    wl = Workload(prompt_tokens=8, output_tokens=256, tp=tp)
    return estimate(LLAMA70, A100_PCIE, wl, engine=engine)


def _launched(e) -> float:
    step = e.expected.decode_step
    rates = e.deployment.rates("expected")
    return rates.launched(sum(p.stage.count for p in step.stages if p.collective is None),
                          sum(p.stage.count for p in step.stages if p.collective is not None))  # fmt: skip


def test_the_host_launches_every_gpu_of_the_group_in_turn():
    assert LLAMACPP.one_host_thread and "ggml_cuda_op_mul_mat" in LLAMACPP.one_host_thread_source
    e = _estimate(8)
    rates = e.deployment.rates("expected")
    step = e.expected.decode_step
    # by hand: one GPU's pass launches (80 x 7 + 4) kernel rows x 4.3 + 80 x 2 all-reduces + the logits' gather; the
    # host launches them for each of the 8 GPUs, so the floor is 8 x that x the era's launch cost
    assert _launched(e) == pytest.approx(564 * 4.3 + 161)
    assert step.launch_s == pytest.approx(_launched(e) * 8 * LLAMACPP.launch_overhead_us * 1e-6)
    assert rates.launch_s(8, 1.0) == pytest.approx(8 * rates.launch_s(1, 1.0))
    assert step.launch_bound and e.expected.decode_bound == "host"
    assert step.seconds == pytest.approx(step.launch_s + step.overhead_s)
    # a process per GPU (the same era but one_host_thread off) launches side by side: an eighth of it
    apart = _estimate(8, LLAMACPP.model_copy(update={"one_host_thread": False}))
    assert apart.expected.decode_step.launch_s == pytest.approx(step.launch_s / 8)


def test_more_gpus_in_the_row_split_can_be_slower_as_published():
    # MLC's llama.cpp runs of Llama-2-70B fp16 on A100 PCIe: 11.1 tokens/s on 4 GPUs, 9.4 on 8 (tokcost's data):
    # the weight reads halve, the host's launches double; with a launch per GPU side by side, 8 would beat 4
    x4, x8 = _estimate(4), _estimate(8)
    assert x8.expected.tpot_s > x4.expected.tpot_s
    side_by_side = LLAMACPP.model_copy(update={"one_host_thread": False})
    assert _estimate(8, side_by_side).expected.tpot_s < _estimate(4, side_by_side).expected.tpot_s


def test_one_gpu_is_unchanged():
    one = _estimate(1)
    apart = _estimate(1, LLAMACPP.model_copy(update={"one_host_thread": False}))
    assert one.expected.tpot_s == apart.expected.tpot_s


def test_every_pricing_path_reads_the_same_launches():
    e = _estimate(8)
    d, rates = e.deployment, e.deployment.rates("expected")
    bound = d.bound(rates)
    assert bound.table.launch_s == rates.launch_s(8, 1.0)  # the rate table the grid and the fit's pricer read
    assert bound.launch_s([1.0] * 9)[0] == pytest.approx(_launched(e) * rates.launch_s(8, 1.0))
    cached = e.mean_decode_context
    assert cached is not None
    seconds, bound_name = DecodeLines(bound, 1).at(cached)
    assert seconds == pytest.approx(e.expected.decode_step.seconds, rel=1e-9)
    assert bound_name == "host"


def test_explain_states_the_serialized_launches():
    args = ["estimate", "-m", "llama-2-70b", "-g", "a100-80gb-pcie", "--gpus", "8", "--engine", "llama.cpp@eager",
            "--prompt", "8", "--output", "256", "--explain"]  # fmt: skip
    out = CliRunner().invoke(app, args)
    assert out.exit_code == 0, out.output
    line = next(x for x in out.output.splitlines() if "one host thread launches the kernels of all 8 GPUs" in x)
    each = LLAMACPP.launch_overhead_us
    found = re.search(r"8 x ([\d.]+) us = ([\d.]+) us", line)
    assert found, line
    assert float(found.group(1)) == pytest.approx(each, rel=1e-3)
    assert float(found.group(2)) == pytest.approx(8 * each, rel=1e-3)
    # the decode step by hand from the printed terms: the launches (kernels x each) set it, plus the host's costs,
    # and the table's TPOT is that (every step of the answer is host-bound, so the mean is the same)
    step = next(x for x in out.output.splitlines() if "decode step at the mean context" in x)
    m = re.search(r"the GPU's ([\d.]+) ms, ([\d,]+) kernels x ([\d.]+) us = ([\d.]+) ms of launches\): the launches "
                  r"set it, then \+ ([\d.]+) us on the host", step)  # fmt: skip
    assert m is not None, step
    gpu_ms, kernels, per_us, launches_ms, host_us = (float(g.replace(",", "")) for g in m.groups())
    assert kernels * per_us / 1e3 == pytest.approx(launches_ms, rel=1e-3) and gpu_ms < launches_ms
    tpot = next(x for x in out.output.splitlines() if x.startswith("│ TPOT"))
    expected_ms = float(tpot.split("│")[3].split()[0])
    assert launches_ms + host_us / 1e3 == pytest.approx(expected_ms, rel=2e-3)


def test_the_fits_pricer_reads_the_serialized_launches():
    # MLC's 2023 llama.cpp rows on 2, 4 and 8 GPUs: the fit's fast pricer, under the shipped values, gives what
    # validate prints for each (it builds its own rate tables, so it must read Rates.launch_s too)
    rows = [r for r in load_rows(DEFAULT_DATA) if r.source_id == "mlc-llm-perf-bench" and r.framework == "llama.cpp"
            and r.gpus > 1]  # fmt: skip
    assert {r.gpus for r in rows} == {2, 4, 8}
    models, gpus = load_specs(rows, str(DEFAULT_DATA))
    profiles, folds = shipped_profiles(), load_folds()
    expected = {r.row.id: r.expected for r in price_rows(rows, models, gpus, profiles)}
    pricer = Pricer()
    for case in prepare(rows, models, gpus, profiles):
        assert case.profile.one_host_thread
        values = folds.full.get(cell_label(case.cell), {})
        assert pricer.predict(case, values) == pytest.approx(expected[case.row.id], rel=1e-9), case.row.id


def test_a_row_split_runs_as_the_eager_era_whatever_the_build():
    # ggml-cuda turns CUDA graphs off for a split buffer, so llama.cpp's newest era prices a row split as its eager
    # era (tensor_split_era), one GPU as itself
    newest = load_engine("llama.cpp")
    assert newest.label == "llama.cpp@graphs" and newest.tensor_split is not None
    split, eager = _estimate(8, newest), _estimate(8)
    assert split.deployment.engine.label == "llama.cpp@eager"
    assert split.expected.tpot_s == eager.expected.tpot_s
    assert _estimate(1, newest).deployment.engine.label == "llama.cpp@graphs"
    # a published row of a graphs build on 2 GPUs is priced, and fitted, in the eager era's cell
    row = next(r for r in load_rows(DEFAULT_DATA) if r.source_id == "mlc-llm-perf-bench" and r.framework == "llama.cpp"
               and r.gpus == 2)  # fmt: skip
    later = row.model_copy(update={"engine_version": "b3000", "graphs": True})
    gpu = load_gpu(row.gpu)
    assert row_cell(later, gpu).era == "eager"
    assert row_cell(later.model_copy(update={"gpus": 1}), gpu).era == "graphs"


def test_a_split_era_must_be_another_era_of_the_file(tmp_path):
    text = (Path(__file__).resolve().parents[1] / "tokcost/specs/engines/llama.cpp.yaml").read_text()
    bad = tmp_path / "llama.cpp.yaml"
    bad.write_text(text.replace("tensor_split_era: eager", "tensor_split_era: graphs"))
    with pytest.raises(SpecError, match="tensor_split_era"):
        load_engine(str(bad))


def test_validate_with_one_engine_prices_a_split_row_as_its_era():
    # `tokcost validate --engine llama.cpp`: MLC's 8-GPU rows run as llama.cpp@eager, as an estimate of them does
    rows = [r for r in load_rows(DEFAULT_DATA) if r.source_id == "mlc-llm-perf-bench" and r.framework == "llama.cpp"
            and r.gpus == 8]  # fmt: skip
    models, gpus = load_specs(rows, str(DEFAULT_DATA))
    newest = price_rows(rows, models, gpus, shipped_profiles(), engine=load_engine("llama.cpp"))
    eager = price_rows(rows, models, gpus, shipped_profiles(), engine=load_engine("llama.cpp@eager"))
    assert [r.engine for r in newest] == ["llama.cpp@eager"] * len(rows)
    assert [r.expected for r in newest] == [r.expected for r in eager]
