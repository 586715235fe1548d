"""The published rows as data: schema (source_id, engine, layout, mixed MoE formats), each metric's formula, and
the coverage issue 12 asks for, checked on the shipped file."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import pytest
import yaml

from tokcost.errors import SpecError
from tokcost.formats import bits_of
from tokcost.models.library import load_model
from tokcost.validation.cells import cell_of
from tokcost.validation.compare import WaveTimes, check_shipped_formats, predict_metric, run_metric, workload_of
from tokcost.validation.data import load_rows, parse_rows

DATA = Path(__file__).resolve().parents[1] / "tokcost" / "validation" / "published.yaml"


@pytest.fixture(scope="module")
def rows():
    return load_rows(DATA)


@pytest.fixture(scope="module")
def by_id(rows):
    return {r.id: r for r in rows}


def _raw(**changes: object) -> dict[str, object]:
    base: dict[str, object] = {
        "id": "r", "source_id": "s", "source": "somewhere", "quote": "| 1 |", "model": "llama-2-7b",
        "gpu": "h100-sxm", "gpus": 1, "weights": "bf16", "kv": "bf16", "compute": "bf16", "batch": 4,
        "prompt_tokens": 100, "output_tokens": 11, "framework": "vllm", "engine": "vllm",
        "metric": "tpot_ms", "value": 1.0, "engine_version": "0.8.5", "graphs": True, "measured_at": "server",
    }  # fmt: skip
    base.update(changes)
    return base


# ---- each metric is one formula over the workload -------------------------------------------------------------


@pytest.mark.parametrize(
    ("metric", "expected"),
    [
        # TTFT 0.5 s, TPOT 0.02 s, B = 4, P = 100, O = 11: e2e = 0.5 + 10 x 0.02 = 0.7 s
        ("decode_tokens_per_s_per_sequence", 50.0),
        ("output_tokens_per_s_per_request", 11 / 0.7),
        ("tpot_ms", 20.0),
        ("itl_ms", 20.0),
        ("ttft_ms", 500.0),
        ("e2e_ms", 700.0),
        ("tpot_s", 0.02),
        ("ttft_s", 0.5),
        ("e2e_s", 0.7),
        ("throughput_tokens_per_s", 4 * 11 / 0.7),
        ("throughput_tokens_per_s_per_gpu", 4 * 11 / 0.7 / 2),
        ("total_throughput_tokens_per_s", 4 * (100 + 11) / 0.7),
        ("prefill_tokens_per_s", 4 * 100 / 0.5),
        ("run_s", 0.7),  # one wave: the whole run ends with its requests
    ],
)
def test_each_metric_is_its_published_formula(metric, expected):
    row = parse_rows({"rows": [_raw(metric=metric, gpus=2)]}, "t.yaml")[0]
    assert predict_metric(row, ttft_s=0.5, tpot_s=0.02) == pytest.approx(expected)


def test_an_offline_runs_wall_time_adds_its_waves_end_to_end():
    # 10 requests run as 2 waves of 4 then 1 of 2: 0.7 + 0.7 + (0.3 + 10 x 0.01) = 1.8 s to the last token, while
    # the mean request's e2e counts each request's own finish: (4 x 0.7 + 4 x 1.4 + 2 x 1.8) / 10 = 1.2 s
    row = parse_rows({"rows": [_raw(metric="run_s", batch=10)]}, "t.yaml")[0]
    waves = (WaveTimes(4, 2, 0.5, 0.02), WaveTimes(2, 1, 0.3, 0.01))
    assert run_metric(row, waves) == pytest.approx(1.8)
    e2e = parse_rows({"rows": [_raw(metric="e2e_s", batch=10)]}, "t.yaml")[0]
    assert run_metric(e2e, waves) == pytest.approx(1.2)
    assert not row.higher_is_better


def test_rates_are_higher_is_better_and_times_are_not():
    rows = parse_rows({"rows": [_raw(id="a", metric="prefill_tokens_per_s"), _raw(id="b", metric="e2e_s")]}, "t")
    assert [r.higher_is_better for r in rows] == [True, False]


# ---- schema -----------------------------------------------------------------------------------------------------


def test_layout_must_divide_the_gpus():
    ok = parse_rows({"rows": [_raw(gpus=16, pp=2, dp=2)]}, "t.yaml")[0]
    assert ok.tp == 4
    with pytest.raises(SpecError) as err:
        parse_rows({"rows": [_raw(gpus=6, pp=4)]}, "t.yaml")
    assert str(err.value).startswith("t.yaml: rows[0] (r): ")
    assert "multiple of pp x dp" in str(err.value)


@pytest.mark.parametrize("missing", ["source_id", "engine"])
def test_source_id_and_engine_are_required(missing):
    raw = _raw()
    del raw[missing]
    with pytest.raises(SpecError, match=missing):
        parse_rows({"rows": [raw]}, "t.yaml")


@pytest.mark.parametrize(
    ("key", "bad"),
    [("measured_at", "gpu"), ("graphs", "yes"), ("graphs", 1), ("scheduler_steps", 0), ("engine_version", "")],
)
def test_run_conditions_reject_bad_values(key, bad):
    # a harness outside server/client, a graphs flag that is not a bool, no steps, an empty version
    with pytest.raises(SpecError, match=key):
        parse_rows({"rows": [_raw(**{key: bad})]}, "t.yaml")


def test_unstated_run_conditions_are_null_not_guessed():
    row = parse_rows({"rows": [_raw(engine_version=None, graphs=None, measured_at="client")]}, "t.yaml")[0]
    assert (row.engine_version, row.graphs, row.scheduler_steps, row.chunked_prefill) == (None, None, None, None)


def test_unknown_engine_lists_the_profiles():
    with pytest.raises(SpecError, match="torch-compile"):
        parse_rows({"rows": [_raw(engine="deepspeed")]}, "t.yaml")


@pytest.mark.parametrize(
    ("framework", "engine"),
    [("vllm", "tensorrt-llm"), ("mlc-llm", "generic"), ("tgi", "vllm"), ("nim", "sglang"), ("exllamav2", "vllm")],
)
def test_a_row_priced_with_another_engine_than_its_framework_is_refused(framework, engine):
    # the row's engine picks the profile that prices it: a vLLM run is not TensorRT-LLM's, MLC has its own
    with pytest.raises(
        SpecError, match=f"rows\\[0\\] \\(r\\): .*framework {framework} is priced with engine .*not {engine}"
    ):
        parse_rows({"rows": [_raw(framework=framework, engine=engine)]}, "t.yaml")


@pytest.mark.parametrize(("engine", "era"), [("tensorrt-llm", "inflight"), ("vllm", "v0")])
def test_a_nim_row_is_priced_by_the_backend_it_names(engine, era):
    # NIM 1.8.0 is NIM's version, not vLLM's: its vLLM backend takes the unstated version's era
    row = parse_rows({"rows": [_raw(framework="nim", engine=engine, engine_version="1.8.0")]}, "t.yaml")[0]
    cell = cell_of(framework=row.framework, engine=row.engine, version=row.engine_version, graphs=row.graphs,
                   platform="cuda")  # fmt: skip
    assert (cell.engine, cell.era) == (engine, era)


def test_experts_format_runs_the_checkpoint_as_shipped():
    model = load_model("gpt-oss-120b")  # bf16 attention, MXFP4 experts as shipped
    shipped = parse_rows({"rows": [_raw(model="gpt-oss-120b", experts="fp4")]}, "t")[0]
    check_shipped_formats(shipped, model)
    assert workload_of(shipped).weights_dtype is None  # the model spec's dtypes decide
    wrong = parse_rows({"rows": [_raw(model="gpt-oss-120b", weights="fp8", experts="fp4")]}, "t")[0]
    with pytest.raises(SpecError, match="experts"):
        check_shipped_formats(wrong, model)


# ---- the shipped data ----------------------------------------------------------------------------------------


def test_formats_are_the_published_layouts(by_id):
    # gpt-fast int4: one bf16 scale and one bf16 zero per 32 weights -> 4 + 32/32 bits
    assert bits_of(by_id["gptfast-llama2-7b-int4-tp1"].weights) == 5.0
    # torchao int4wo-64: tinygemm's bf16 scale + zero per 64 -> 4.5 bits; MLC q4f16_1: fp16 scale per 32 -> 4.5
    assert bits_of(by_id["torchao-llama2-7b-int4wo64-a100"].weights) == 4.5
    assert by_id["mlc-llama2-7b-int4-rtx4090"].weights == "int4-g32-sym"


def test_coverage_issue_12_asks_for(rows):
    used = [r for r in rows if r.exclude is None]
    assert len(rows) >= 150
    assert len({r.source_id for r in rows}) >= 8
    assert len({r.gpu for r in rows}) >= 10
    assert {"mi300x", "rtx-4090", "h200", "b200"} <= {r.gpu for r in used}
    assert {"l4", "a10g"} & {r.gpu for r in used}
    engines = Counter(r.engine for r in used)
    assert set(engines) == {"vllm", "sglang", "tensorrt-llm", "llama.cpp", "torch-compile", "mlc", "tgi"}
    assert min(r.batch for r in used) == 1 and max(r.batch for r in used) >= 256
    assert max(r.prompt_tokens for r in used) >= 32_000
    assert {1, 2, 4, 8} <= {r.tp for r in used}
    formats = {r.weights for r in used} | {r.experts for r in used if r.experts}
    assert {"fp8", "int8", "int4-g128", "q4_0"} <= formats


def test_one_source_id_per_publication(rows):
    # rows sharing a source_id come from one publication: the same repository or address
    sources: dict[str, set[str]] = {}
    for r in rows:
        sources.setdefault(r.source_id, set()).add(r.source.strip("'").split()[0])
    multi = {sid: s for sid, s in sources.items() if len(s) > 1}
    assert not multi, multi


# Sources that issues 12 and 19 keep for independent checks, by a name their address or path carries
RESERVED = ("AutoAWQ", "XiongjieDai", "llama.cpp/pull/4766", "llama.cpp/pull/16834", "a100_fp16", "speed_benchmark",
            "speed-benchmark", "dev-docker", "TensorRT-Model-Optimizer", "MLPerf", "mlcommons", "fp8-kvcache",
            "cookbook", "gpustack", "tt-inference-server", "ai-benchmarks")  # fmt: skip


def test_reserved_sources_stay_out(rows):
    # issues 12 and 19 keep these for an independent check: no row may be read from them
    for r in rows:
        source = r.source.lower()
        assert not any(name.lower() in source for name in RESERVED), r.id
        trtllm = source.strip("'").startswith("nvidia/tensorrt-llm")
        if trtllm and "docs/source/performance.md" in source:
            assert "v0.9.0" in r.source, r.id  # TensorRT-LLM performance.md v0.5 / v0.6.x revisions are reserved
        if trtllm and "perf-overview" in source:  # revisions after 1.0 are reserved
            revision = re.search(r"v(\d+)\.(\d+)[.\d]* revision", r.source)
            assert revision and (int(revision[1]), int(revision[2])) <= (1, 0), r.id
        if trtllm:  # its DeepSeek-R1-on-B200 tech blogs are reserved
            assert "deepseek" not in source, r.id


def test_every_row_records_version_graphs_and_harness(rows):
    # issue 19: the era of a row's engine is read from its version, graphs and harness; an unstated one says so
    raw = yaml.load(DATA.read_text(encoding="utf-8"), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))["rows"]
    for item in raw:  # the keys are written out on every shipped row, null included (a user's file may omit them)
        assert {"engine_version", "graphs", "measured_at"} <= set(item), item["id"]
    for r in rows:
        if r.engine_version is None:
            assert "engine_version:" in r.notes, r.id
        if r.graphs is None:
            assert "graphs:" in r.notes, r.id
        if r.graphs is False:  # eager: the flag or the build that lacks graphs is named
            assert "--enforce-eager" in r.notes or "graphs: False" in r.notes, r.id
    assert {r.measured_at for r in rows} == {"server", "client"}


HOPPER = {"h100-sxm", "h100-pcie", "h100-nvl", "h200"}


def _version(text: str | None) -> tuple[int, int] | None:
    """Major and minor of a printed version ("0.11.1" -> (0, 11)); None for commits, builds and the unstated."""
    found = re.match(r"v?(\d+)\.(\d+)", text or "")
    return (int(found[1]), int(found[2])) if found else None


def _sources(rows, framework: str, since: tuple[int, int], gpus: set[str]) -> set[str]:
    """Sources with rows of `framework` at `since` or newer on `gpus`."""
    return {
        r.source_id
        for r in rows
        if r.framework == framework and r.gpu in gpus and (_version(r.engine_version) or (0, 0)) >= since
    }


def test_coverage_issue_19_asks_for(rows):
    # issue 19 item 6: more and newer rows, so that an engine era's parameters rest on 2+ sources
    assert len(rows) >= 336 and len({r.source_id for r in rows}) >= 26
    assert len(_sources(rows, "vllm", (0, 8), HOPPER)) >= 2  # vLLM V1 on Hopper
    assert len(_sources(rows, "sglang", (0, 4), HOPPER)) >= 2
    assert len(_sources(rows, "tensorrt-llm", (0, 17), HOPPER)) >= 2
    assert _sources(rows, "vllm", (0, 8), {"b200"}) and _sources(rows, "vllm", (0, 6), {"mi300x"})
    v1 = [r for r in rows if r.source_id in _sources(rows, "vllm", (0, 8), HOPPER) and r.gpu in HOPPER]
    assert max(r.batch for r in v1) >= 8 * min(r.batch for r in v1)  # bytes per step spread within the cell
    ttft_only = {r.source_id for r in rows if r.metric in ("ttft_ms", "ttft_s", "prefill_tokens_per_s")}
    assert len(ttft_only) >= 4
    tps: dict[tuple[object, ...], set[int]] = {}
    for r in rows:  # one workload (source, model, GPU, format, lengths) across tensor-parallel degrees
        tps.setdefault((r.source_id, r.model, r.gpu, r.weights, r.prompt_tokens, r.output_tokens), set()).add(r.tp)
    assert any({1, 2, 4, 8} <= found for found in tps.values())  # a TP 1-2-4-8 sweep
    eager_and_graphs = {r.source_id for r in rows if r.graphs is False} & {r.source_id for r in rows if r.graphs}
    assert eager_and_graphs  # one publication measures the same build with graphs off and on


def test_a_pattern_a_text_field_must_match_is_stated(tmp_path):
    # an engine file named my_engine.yaml takes its name from the file: the rule it breaks is the name's pattern
    from tokcost.profiles import load_engine

    path = tmp_path / "my_engine.yaml"
    path.write_text("source: mine\nstep_overhead_us: 100\n")
    with pytest.raises(SpecError, match=r"name: must be text .*, matching the pattern \^\[a-z0-9\]"):
        load_engine(str(path))
