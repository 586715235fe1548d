"""Validation against published measurements: the data, the split by source, the mapping of each metric, the summary
the README shows, the fit and the specs it writes, and hand-derived cross-checks against the peer tools' formulas."""

from __future__ import annotations

import importlib.util
import math
import statistics
import sys
from pathlib import Path

import pytest

from tokcost.cli.app import app
from tokcost.cli.validate_cmd import DEFAULT_DATA, load_engines, load_specs, run_validation, validate
from tokcost.engine.estimate import deployment
from tokcost.engine.features import expected_distinct_experts
from tokcost.engine.workload import Workload
from tokcost.errors import SpecError
from tokcost.hardware.library import load_gpu
from tokcost.models.library import load_model
from tokcost.profiles import EFFICIENCY_RANGE, ENGINES, load_engine
from tokcost.validation.cases import Pricer, prepare
from tokcost.validation.compare import predict_metric
from tokcost.validation.data import (
    HELD_OUT_MIN_ROW_SHARE,
    HELD_OUT_SOURCES,
    Row,
    held_out_by_rule,
    load_rows,
    split_of,
)
from tokcost.validation.families import FAMILIES
from tokcost.validation.fit import COST_GRIDS_US, MIN_INFORMATIVE_ROWS, fit, is_cost, is_fraction, train_cases

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tokcost" / "validation" / "published.yaml"
# The held-out result recorded in validation/README.md when the fit was run once (train digest in every profile);
# a change here is a change of the model or the data, to be explained there, never a retune.
RECORDED = {"train_median": 0.115, "held_out_median": 0.135, "held_out_p90": 0.600}

if "validate" not in {c.name for c in app.registered_commands}:  # until cli/app.py registers it
    app.command("validate")(validate)


def _script(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up while the script is executed
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def rows() -> list[Row]:
    return load_rows(DATA)


@pytest.fixture(scope="module")
def validation():
    return run_validation(DATA)


@pytest.fixture(scope="module")
def fit_script():
    return _script("fit_expected")


@pytest.fixture(scope="module")
def fitted(fit_script):
    """The fit, run once for this module (about 20 s on 2 cores)."""
    return fit_script.run_fit()


@pytest.fixture(scope="module")
def cases(rows):
    models, gpus = load_specs(rows, str(DATA))
    return prepare(rows, models, gpus, load_engines(rows))


# ---- the data ---------------------------------------------------------------------------------------------


def test_data_loads_and_every_spec_resolves(rows):
    assert DEFAULT_DATA == DATA
    assert len(rows) >= 150
    models, gpus = load_specs(rows, str(DATA))
    assert {r.model for r in rows} == set(models) and {r.gpu for r in rows} == set(gpus)


def test_bad_row_names_file_row_and_field(tmp_path):
    text = DATA.read_text(encoding="utf-8").replace("  value: 104.9\n", "  value: -104.9\n", 1)
    bad = tmp_path / "bad.yaml"
    bad.write_text(text, encoding="utf-8")
    with pytest.raises(SpecError) as err:
        load_rows(bad)
    assert str(err.value).startswith(f"{bad}: rows[0] (gptfast-llama2-7b-bf16-tp1): value: ")


def test_unknown_model_names_the_row(tmp_path, cli):
    text = DATA.read_text(encoding="utf-8").replace("  model: llama-2-7b\n", "  model: llama-9-7b\n", 1)
    bad = tmp_path / "bad.yaml"
    bad.write_text(text, encoding="utf-8")
    result = cli("validate", "--data", str(bad))
    assert result.exit_code == 2
    assert "row gptfast-llama2-7b-bf16-tp1: model: llama-9-7b: not a built-in model" in result.stderr


# ---- the split: whole sources, by a rule fixed before fitting ------------------------------------------------


def test_the_rule_picks_the_recorded_held_out_sources(rows):
    # SHA-256 order of source_id until 3 sources, 3 engines and a quarter of the rows: the rule as written in
    # data.py picks exactly the sources the fit held out (a new source that sorts first would change this)
    assert held_out_by_rule(rows) == HELD_OUT_SOURCES
    held = [r for r in rows if r.source_id in HELD_OUT_SOURCES]
    assert len(HELD_OUT_SOURCES) >= 3 and len({r.engine for r in held}) >= 3
    assert len(held) >= HELD_OUT_MIN_ROW_SHARE * len(rows)


def test_a_held_out_source_is_held_out_whole(rows):
    for r in rows:
        assert (split_of(r) == "test") == (r.source_id in HELD_OUT_SOURCES), r.id
    pinned = rows[0].model_copy(update={"split": "test"})
    assert split_of(pinned) == "test" and split_of(rows[0]) == "train"


# ---- each metric as its source defines it -------------------------------------------------------------------


def test_metric_mapping(rows):
    by_id = {r.id: r for r in rows}
    ttft, tpot = 0.010, 0.002
    gptfast = by_id["gptfast-llama2-7b-bf16-tp1"]  # tokens / wall time of generate(), prefill included
    assert predict_metric(gptfast, ttft, tpot) == pytest.approx(200 / (0.010 + 199 * 0.002))
    mlc = by_id["mlc-llama2-7b-int4-rtx4090"]  # decode rate alone
    assert predict_metric(mlc, ttft, tpot) == pytest.approx(500)
    trt = by_id["trtllm090-h100-mixtral-tp2-bs512-128-128"]  # out_tps = O x B / total_latency / tp
    assert predict_metric(trt, ttft, tpot) == pytest.approx(512 * 128 / (0.010 + 127 * 0.002) / 2)
    nim = by_id["nim183-llama33-70b-tp2-isl5000-c5-throughput"]  # system total, not per GPU
    assert predict_metric(nim, ttft, tpot) == pytest.approx(5 * 500 / (0.010 + 499 * 0.002))
    assert predict_metric(by_id["nim183-llama33-70b-tp2-isl5000-c1-itl"], ttft, tpot) == pytest.approx(2.0)
    assert predict_metric(by_id["trtllm090-h200-llama2-7b-ttft-isl128"], ttft, tpot) == pytest.approx(10.0)


# ---- the summary the README shows ---------------------------------------------------------------------------


def test_summary_holds_the_recorded_result(validation):
    results, summary = validation
    assert summary.rows_used == summary.rows_total - len(summary.excluded) >= 150
    assert summary.violations == ()  # nothing measured beats the datasheet ceiling
    held_out = [abs(r.error) for r in results if r.used and r.split == "test"]
    train = [abs(r.error) for r in results if r.used and r.split == "train"]
    # the numbers validation/README.md records (issue 12's targets, 12% / 30% held out, are missed: the README
    # says by how much and why); these guard the recorded result, they are not the target
    assert round(statistics.median(train), 3) == RECORDED["train_median"]
    assert round(statistics.median(held_out), 3) == RECORDED["held_out_median"]
    ordered = sorted(held_out)
    rank = (len(ordered) - 1) * 0.9
    p90 = ordered[math.floor(rank)] + (ordered[math.ceil(rank)] - ordered[math.floor(rank)]) * (rank % 1)
    assert round(p90, 3) == RECORDED["held_out_p90"]


def test_each_row_is_priced_with_its_own_engine(validation):
    results, summary = validation
    assert all(r.engine == r.row.engine for r in results)
    groups = {g.group for g in summary.groups}
    for name in ENGINES:
        assert f"engine: {name}" in groups
    assert {f"family: {f}" for f in FAMILIES} <= groups
    assert {"class: tensor parallel (TP > 1)", "class: MoE", "class: weight-only (dequantizing kernels)"} <= groups
    assert any(g.startswith("class: long context") for g in groups)
    assert {f"source: {s}" for s in HELD_OUT_SOURCES} <= groups


@pytest.mark.slow  # a whole validate run, twice (the quick tier keeps the in-process checks)
def test_engine_flag_overrides_every_row(cli):
    result = cli("validate", "--engine", "llama.cpp", "--format", "json")
    assert result.exit_code == 0, result.stderr
    data = result.json()
    assert data["engine"] == "llama.cpp" and {r["engine"] for r in data["rows"]} == {"llama.cpp"}
    bad = cli("validate", "--engine", "deepspeed")
    assert bad.exit_code == 2 and "known engines" in bad.stderr


def test_expected_is_never_faster_than_the_ceiling(validation):
    results, _ = validation
    for r in results:
        faster = r.expected > r.ceiling if r.row.higher_is_better else r.expected < r.ceiling
        assert not faster, r.row.id


@pytest.mark.slow  # a whole validate run
def test_readme_section_is_what_the_script_generates():
    readme = ROOT / "README.md"
    text = readme.read_text(encoding="utf-8") if readme.is_file() else ""
    fresh = _script("update_readme_validation").render(text)
    if fresh is None:
        pytest.skip("README.md has no validation markers")
    assert fresh == text, "run: python scripts/update_readme_validation.py"


@pytest.mark.slow  # a whole validate run
def test_cli_json_reproduces_the_summary(cli, validation):
    result = cli("validate", "--format", "json")
    assert result.exit_code == 0, result.stderr
    data = result.json()
    _, summary = validation
    assert len(data["rows"]) == summary.rows_total
    assert data["summary"]["violations"] == []
    assert data["summary"]["groups"][0]["median_abs_error"] == pytest.approx(summary.groups[0].median_abs_error)
    assert {m["id"] for m in data["multinode"] if m["not_priced"] and "h800" in m["not_priced"]}


# ---- the fit ------------------------------------------------------------------------------------------------


@pytest.mark.slow  # the fit (about 40 s on 2 cores)
def test_the_fit_prices_each_row_as_validate_does(rows, validation, cases, fitted):
    # the fit runs on the engine: its prediction of a row under the fitted values is what validate prints with the
    # specs and profiles the fit wrote (the values -> profile mapping, the waves, the exact decode mean)
    results, _ = validation
    expected = {r.row.id: r.expected for r in results}
    pricer = Pricer()
    for case in cases:
        predicted = pricer.predict(case, fitted.result.values)
        assert predicted == pytest.approx(expected[case.row.id], rel=1e-12), case.row.id


@pytest.mark.slow
def test_specs_carry_what_the_fit_produces(fit_script, fitted):
    # every achievable: block, every engine profile and the README's generated block are the script's output
    writes = fit_script.planned_writes(fitted)
    stale = [str(p.relative_to(ROOT)) for p, text in writes.items() if p.read_text(encoding="utf-8") != text]
    assert not stale, f"run: python scripts/fit_expected.py ({stale})"
    assert len(writes) == sum(len(m) for m in FAMILIES.values()) + len(ENGINES) + 1


@pytest.mark.slow
def test_fitted_values_are_physical(fitted):
    result = fitted.result
    for name, value in result.values.items():
        if is_fraction(name):
            assert 0.1 <= value <= 0.9, name  # a family's fraction stays below the datasheet
        elif is_cost(name):
            grid = COST_GRIDS_US[name.rsplit(".", 1)[-1]]
            assert min(grid) <= value <= max(grid), name
        else:
            assert EFFICIENCY_RANGE[0] <= value <= EFFICIENCY_RANGE[1], name
        if name in result.free:
            assert result.informed[name] >= MIN_INFORMATIVE_ROWS, name
        else:
            assert value == (0.0 if is_cost(name) else 1.0) or is_fraction(name), name  # fixed at its start
    generic = load_engine("generic").kernels
    assert generic.dense_gemm == {} and generic.weight_only_gemm == {} and generic.decode_attention == 1.0


@pytest.mark.slow
def test_profiles_record_the_train_digest(fitted):
    for name in ENGINES:
        profile = load_engine(name)
        assert profile.source.strip() and fitted.result.data_digest in profile.fit, name
    for members in FAMILIES.values():
        for gpu in members:
            ach = load_gpu(gpu).achievable
            assert ach.basis == "fitted" and fitted.result.data_digest in ach.source, gpu
            assert ach.allreduce_latency_us is None and ach.weight_only_quant_bandwidth is None, gpu


def test_fit_sees_only_train_rows(cases):
    # a fit on a small subset is unchanged when a held-out row's measurement changes: it never reads it
    subset = [c for c in cases if c.engine == "torch-compile"][:12]
    held = [c for c in cases if c.row.source_id in HELD_OUT_SOURCES][:6]
    base = fit(subset + held)
    moved = [c.__class__(**{**{f: getattr(c, f) for f in c.__dataclass_fields__},
                            "row": c.row.model_copy(update={"value": c.row.value * 3})}) for c in held]  # fmt: skip
    again = fit(subset + moved)
    assert base.values == again.values and base.train_rows == len(train_cases(subset)) == 12


def test_rewriting_achievable_keeps_every_other_byte(fit_script):
    text = (ROOT / "tokcost" / "specs" / "gpus" / "h100-sxm.yaml").read_text(encoding="utf-8")
    ach = load_gpu("h100-sxm").achievable.model_copy(update={"bandwidth": 0.5})
    new = fit_script.replace_achievable(text, ach)
    head, tail = text.split("achievable:\n")[0], text.split("\ndevice_names:")[1]
    assert new.startswith(head + "achievable:\n  bandwidth: 0.5\n") and new.endswith("\ndevice_names:" + tail)


# ---- hand-derived cross-checks against the peers' published formulas --------------------------------------


def test_kv_bytes_per_token_llama2_70b():
    # DESIGN.md worked number; LLM-Viewer and llm-analysis use the same 2 x layers x kv_heads x head_dim x bytes
    assert load_model("llama-2-70b").kv_bytes_per_token("bf16") == 2 * 80 * 8 * 128 * 2 == 327_680


def _decode(model_name: str, batch: int, cached: int, **wl):
    d = deployment(load_model(model_name), load_gpu("h100-sxm"), Workload(**wl))
    return d.decode(d.rates("ceiling"), batch=batch, cached=cached)


def test_decode_weight_bytes_skip_the_embedding_table():
    # tokcost reads the LM head and only the B looked-up embedding rows, not the whole table; LLM-Viewer and
    # llm-analysis count the full embedding as read (vocab x hidden x 2 = 262 MB more for Llama-2-7B, ~2%).
    m = load_model("llama-2-7b")
    step = _decode("llama-2-7b", 1, 100)
    weights = sum(p.stage.count * p.stage.weight_bytes for p in step.stages)
    lookup = next(p.stage for p in step.stages if p.stage.name == "embedding lookup")
    assert m.params_total == 6_738_415_616  # the published Llama-2-7B count
    assert weights + lookup.bytes_read == (m.params_total - m.vocab_size * m.hidden_size + 1 * m.hidden_size) * 2


def test_prefill_attention_flops_are_causal_halved():
    # 4 x layers x heads x head_dim FLOPs per (query, key) pair; causal: position i sees i keys, P(P+1)/2 pairs.
    # Peers that charge the full P^2 square (LLM-Viewer's prefill) count ~2x the attention FLOPs.
    prompt = 2048
    d = deployment(load_model("llama-2-7b"), load_gpu("h100-sxm"), Workload())
    pre = d.prefill(d.rates("ceiling"), batch=1, prompt=prompt, cached=0)
    flops = sum(p.stage.count * p.stage.flops for p in pre.stages if p.stage.kind == "attention")
    assert flops == 4 * 32 * 32 * 128 * prompt * (prompt + 1) / 2


def test_moe_reads_distinct_experts():
    # E x (1 - (1 - k/E)^B): one token touches k experts, a large batch all E; peers charge k x B or all E.
    assert expected_distinct_experts(8, 2, 1) == 2
    assert expected_distinct_experts(8, 2, 512) == pytest.approx(8)
    m = load_model("mixtral-8x7b")

    def experts(batch: int) -> float:
        return sum(p.stage.count * p.stage.weight_bytes for p in _decode("mixtral-8x7b", batch, 100).stages
                   if p.stage.kind == "experts")  # fmt: skip

    per_expert_bytes = m.layers * m.params_per_expert * 2
    assert experts(512) - experts(1) == pytest.approx(6 * per_expert_bytes)
