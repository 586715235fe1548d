"""Engine eras: `--engine name@era` resolves to one era of an engine's file, every published row maps to a cell
that exists, and engine files are strict (a typo is refused in one line naming the file and the key)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tokcost.eras import builtin_files, load_profile, version_key
from tokcost.errors import SpecError
from tokcost.hardware.library import load_gpu
from tokcost.profiles import ENGINES, GENERIC, IDENTITY, load_engine
from tokcost.validation.cases import row_cell
from tokcost.validation.cells import cell_of, profiles_for, version_of
from tokcost.validation.data import load_rows
from tokcost.validation.serving_data import load_serving

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tokcost" / "validation" / "published.yaml"


def test_every_builtin_engine_has_a_file_with_its_newest_era():
    files = builtin_files()
    assert set(files) == set(ENGINES)
    assert {"eager", "v0", "v1"} <= set(files["vllm"].eras) and files["vllm"].newest == "v1"
    assert {"static", "inflight"} <= set(files["tensorrt-llm"].eras)
    assert load_engine("vllm").label == "vllm@v1"


@pytest.mark.parametrize(
    ("spelled", "label"),
    [
        ("vllm", "vllm@v1"),
        ("vllm@v0", "vllm@v0"),
        ("vllm@0.6", "vllm@v0"),
        ("vllm@0.6.3.post1", "vllm@v0"),
        ("vllm@0.5.4", "vllm@v0"),
        ("vllm@0.2.1", "vllm@eager"),
        ("vllm@enforce-eager", "vllm@enforce-eager"),
        ("vllm@0.2.6", "vllm@v0"),  # CUDA graphs by default from here (PR 1926, 2023-12-17)
        ("vllm@0.10.1", "vllm@v1"),
        ("tensorrt-llm@0.9", "tensorrt-llm@static"),
        ("tensorrt-llm@0.10", "tensorrt-llm@inflight"),
        ("llama.cpp@b2000", "llama.cpp@eager"),  # a build tag, as llama.cpp names its releases
        ("llama.cpp@b3891", "llama.cpp@graphs"),
        ("llama.cpp@2800", "llama.cpp@graphs"),
    ],
)
def test_an_era_is_named_or_spelled_by_a_version_it_covers(spelled, label):
    assert load_profile(spelled).label == label


def test_an_unknown_era_lists_the_known_ones():
    with pytest.raises(SpecError) as err:
        load_profile("vllm@v9")
    text = str(err.value)
    assert "no era 'v9' of vllm" in text and "vllm@eager (before 0.2.6)" in text
    assert "vllm@enforce-eager (0.2.6 on, without graphs)" in text  # 0.2.6 on runs with graphs in v0 and v1
    assert "vllm@v1 (0.8 on)" in text
    known = builtin_files()["llama.cpp"].known()
    assert "llama.cpp@eager (before 2800, or without graphs, or split across GPUs)" in known  # a row split runs eager
    # a built-in's era is named as spelled, not by the file inside tokcost that lists its eras
    assert text.startswith("vllm@v9: no era") and "engines/vllm.yaml" not in text and err.value.field is None


def test_a_version_that_several_eras_cover_names_none_of_them():
    # lmdeploy's two backends state no versions, so a version cannot tell them apart (it picked the last one, turbomind)
    assert builtin_files()["lmdeploy"].eras_covering("0.6") == ["pytorch", "turbomind"]
    with pytest.raises(SpecError) as err:
        load_profile("lmdeploy@0.6")
    text = str(err.value)
    assert text.startswith("lmdeploy@0.6: version 0.6 lies in 2 of lmdeploy's eras (pytorch, turbomind)")
    assert "name one" in text and "lmdeploy@turbomind (every version)" in text
    assert load_profile("lmdeploy@turbomind").label == "lmdeploy@turbomind"
    assert load_profile("mlc@0.1").label == "mlc"  # one era that covers every version: the version is no choice


@pytest.mark.parametrize(
    ("spelled", "eras"),
    [("vllm@0", "eager, v0, v1"), ("vllm@0.2", "eager, v0"), ("tensorrt-llm@0", "static, inflight")],
)
def test_a_short_version_that_spans_eras_names_none_of_them(spelled, eras):
    # 0.2 stands for 0.2.0 up to 0.3: vLLM ran eager before 0.2.6 and with graphs (V0) from it, so it names no era
    with pytest.raises(SpecError) as err:
        load_profile(spelled)
    assert f"spans {len(eras.split(', '))} of" in str(err.value) and f"({eras})" in str(err.value)


@pytest.mark.parametrize("spelled", ["vllm@0.x", "vllm@1e9", "vllm@0.6-foo", "vllm@0.6.3abc", "vllm@0.6.3.post1x"])
def test_a_version_with_trailing_text_is_no_version(spelled):
    # its leading digits alone would pick an era the user never named (0.x read as 0, 1e9 as 1)
    with pytest.raises(SpecError, match="no era"):
        load_profile(spelled)


@pytest.mark.parametrize(
    ("spelled", "label"),
    [("vllm@0.6.3.dev116+g151ef4ef", "vllm@v0"), ("vllm@1.0.0rc4", "vllm@v1"), ("vllm@0.7", "vllm@v0")],
)
def test_release_tags_and_a_short_version_inside_one_era_still_name_it(spelled, label):
    assert load_profile(spelled).label == label


def test_versions_compare_as_numbers():
    assert version_key("0.10.1") > version_key("0.9.2") and version_key("v1.0.0rc4") == (1, 0, 0)
    assert version_key("abc123") is None
    assert version_of("NIM llama-3.3-70b-instruct 1.8.0") == (1, 8, 0) and version_of(None) is None


def test_generic_is_the_identity_with_no_cost():
    generic = load_engine("generic")
    assert generic.kernels == IDENTITY == GENERIC.kernels
    assert (generic.step_overhead_us, generic.request_overhead_us, generic.launch_overhead_us) == (0, 0, 0)


def test_every_published_row_maps_to_an_era_its_engine_file_has():
    rows = load_rows(DATA)
    files = builtin_files()
    gpus = {name: load_gpu(name) for name in {r.gpu for r in rows}}  # each GPU loaded once, not once a row
    seen = set()
    for row in rows:
        cell = row_cell(row, gpus[row.gpu])
        assert cell.engine in files and cell.era in files[cell.engine].eras, row.id
        assert cell.platform == gpus[row.gpu].platform, row.id
        seen.add((cell.engine, cell.era))
    # the data speaks for the eras the issue names: vLLM eager, V0 and V1; TensorRT-LLM static and in-flight
    assert {("vllm", "eager"), ("vllm", "enforce-eager"), ("vllm", "v0"), ("vllm", "v1"), ("tensorrt-llm", "static"),
            ("tensorrt-llm", "inflight")} <= seen  # fmt: skip


def test_every_serving_setup_maps_to_an_era():
    files = builtin_files()
    setups, _ = load_serving(ROOT / "tokcost" / "validation" / "serving.yaml")
    for setup in setups.values():
        gpu = load_gpu(setup.gpu)
        cell = cell_of(framework=setup.framework, engine=setup.engine, version=setup.engine_version,
                       graphs=setup.graphs, platform=gpu.platform)  # fmt: skip
        assert cell.engine in files and cell.era in files[cell.engine].eras, setup.id


@pytest.mark.parametrize(
    ("framework", "version", "graphs", "platform", "cell"),
    [
        ("vllm", "0.5.3", None, "cuda", ("vllm", "v0")),  # CUDA graphs by default from 0.2.6
        ("vllm", "0.2.1", None, "cuda", ("vllm", "eager")),  # 2023: no graphs to turn on
        ("vllm", "acbed3e (a 2023-10 commit of the 0.2 series)", False, "cuda", ("vllm", "eager")),
        ("vllm", "0.6.3.post1", False, "cuda", ("vllm", "enforce-eager")),  # --enforce-eager
        ("vllm", None, False, "rocm", ("vllm", "enforce-eager")),  # an unstated build run without graphs
        ("vllm", "0.6.3.post1", True, "rocm", ("vllm", "v0")),
        ("vllm", "0.8.5", None, "cuda", ("vllm", "v1")),
        ("tensorrt-llm", "0.9.0", None, "cuda", ("tensorrt-llm", "static")),
        ("nim", "1.8.0", None, "cuda", ("tensorrt-llm", "inflight")),
        ("llama.cpp", "b1500", None, "cuda", ("llama.cpp", "eager")),
        ("llama.cpp", "b3000", None, "cuda", ("llama.cpp", "graphs")),
        ("llama.cpp", "b3000", None, "rocm", ("llama.cpp", "eager")),
        ("gpt-fast", None, None, "cuda", ("torch-compile", "main")),
        ("deepspeed-mii", "0.2", None, "cuda", ("generic", "identity")),
    ],
)
def test_the_cell_rules(framework, version, graphs, platform, cell):
    engine = profiles_for(framework)[0]
    got = cell_of(framework=framework, engine=engine, version=version, graphs=graphs, platform=platform)
    assert (got.engine, got.era) == cell and got.platform == platform


def _engine_file(tmp_path, body: str) -> str:
    path = tmp_path / "mine.yaml"
    path.write_text(body, encoding="utf-8")
    return str(path)


GOOD = """name: mine
source: my own measurement, 2026-12-01
newest: main
eras:
  main:
    step_overhead_us: 100.0
    kernels:
      memory:
        gemv: 0.9
"""


def test_a_user_engine_file_loads_and_spells_its_era(tmp_path):
    path = _engine_file(tmp_path, GOOD)
    assert load_engine(path).kernels.memory.gemv == 0.9
    assert load_engine(f"{path}@main").step_overhead_us == 100.0


def test_specs_show_reads_an_engine_files_era_as_engine_does(cli, tmp_path):
    # `specs show FILE@ERA` said "not a built-in spec nor a file" where --engine FILE@ERA worked
    path = _engine_file(tmp_path, GOOD.replace("eras:\n", "eras:\n  slow:\n    step_overhead_us: 900.0\n"))
    slow = cli("specs", "show", f"{path}@slow", "-f", "json")
    assert slow.exit_code == 0, slow.stderr
    assert (slow.json()["era"], slow.json()["step_overhead_us"]) == ("slow", 900.0)
    main = cli("specs", "show", path, "-f", "json").json()
    assert (main["era"], main["step_overhead_us"]) == ("main", 100.0)
    bad = cli("specs", "show", f"{path}@fast")
    assert bad.exit_code == 2 and "no era 'fast'" in bad.stderr


def test_specs_show_names_the_era_it_shows_and_the_others(cli, tmp_path):
    # a file of eras showed its newest under the engine's bare name, with no word of the others
    shown = " ".join(cli("specs", "show", "vllm@0.6").stdout.split())
    assert "engine spec: vllm@v0" in shown
    assert "other eras: vllm@eager, vllm@enforce-eager, vllm@v1 (tokcost specs show vllm@ERA)" in shown
    path = _engine_file(tmp_path, GOOD.replace("eras:\n", "eras:\n  slow:\n    step_overhead_us: 900.0\n"))
    mine = " ".join(cli("specs", "show", path).stdout.split())
    assert "engine spec: mine@main" in mine and "other eras: mine@slow" in mine
    assert "other eras" not in cli("specs", "show", "sglang").stdout  # one era: nothing else to show


@pytest.mark.parametrize(
    ("old", "new", "field"),
    [
        ("step_overhead_us: 100.0", "step_overhead_us: true", "step_overhead_us"),
        ("step_overhead_us: 100.0", "step_overhead_us: '100'", "step_overhead_us"),
        ("step_overhead_us: 100.0", "step_overhead_us: 100.0\n    sequence_overhead_us: -5", "sequence_overhead_us"),
        ("source: my own measurement, 2026-12-01", "source: '  '", "source"),
        ("gemv: 0.9", "gemv: 0.9\n        BF16: 0.8", "BF16"),
        ("gemv: 0.9", "gemv: 0.9\n        weight_only: {awq: 0.8}", "awq"),
        ("gemv: 0.9", "gemv: 9", "gemv"),
    ],
)
def test_a_bad_engine_file_is_refused_naming_the_file_and_key(tmp_path, old, new, field):
    path = _engine_file(tmp_path, GOOD.replace(old, new))
    with pytest.raises(SpecError) as err:
        load_engine(path)
    text = str(err.value)
    assert text.startswith(path) and field in text and "\n" not in text.strip()


def test_llama_cpp_says_what_tp_means_where_a_layout_uses_it():
    # llama.cpp splits layers by default (--split-mode layer): TP prices its row/tensor split, and says so
    from tokcost.engine.estimate import estimate
    from tokcost.engine.workload import Workload
    from tokcost.hardware.library import load_gpu
    from tokcost.models.library import load_model

    model, gpu = load_model("llama-3.1-70b"), load_gpu("rtx-4090")
    int4 = {"weights_dtype": "int4"}

    def notes(spelled, **layout):
        e = estimate(model, gpu, Workload(**int4, **layout), engine=load_profile(spelled))
        return [w for w in e.warnings if "--split-mode layer" in w]

    assert len(notes("llama.cpp", tp=4)) == 1 and "--pp" in notes("llama.cpp", tp=4)[0]
    assert notes("llama.cpp@2000", tp=4)[0].startswith("llama.cpp@eager: TP prices its row split")
    assert notes("llama.cpp", pp=4) == [] and notes("vllm", tp=4) == []


def test_a_commit_hash_is_no_version_and_a_range_is_checked(tmp_path):
    # 9476b01 is a llama.cpp commit, not build 9476; v0.6.3 is 0.6.3; an era's range runs forwards, one era a version
    for spelled in ("llama.cpp@9476b01", "tensorrt-llm@1a2b3c4"):
        with pytest.raises(SpecError, match="no era"):
            load_profile(spelled)
    assert load_profile("vllm@v0.6.3").label == "vllm@v0"
    import yaml

    shipped = yaml.safe_load((Path(__file__).parents[1] / "tokcost" / "specs" / "engines" / "vllm.yaml").read_text())
    inverted = {
        **shipped,
        "eras": {**shipped["eras"], "v0": {**shipped["eras"]["v0"], "versions": {"since": "0.8", "before": "0.6"}}},
    }
    overlap = {
        **shipped,
        "eras": {**shipped["eras"], "v0": {**shipped["eras"]["v0"], "versions": {"since": "0.6", "before": "0.9"}}},
    }
    for data, needle in ((inverted, "must come before"), (overlap, "both cover some versions")):
        path = tmp_path / "my-vllm.yaml"
        path.write_text(yaml.safe_dump(data))
        with pytest.raises(SpecError, match=needle):
            load_profile(str(path))
