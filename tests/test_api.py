"""The Python API: documented imports, keyword-only calls, typed results whose to_dict() is the CLI's JSON."""

from __future__ import annotations

import inspect
import json
import os
import subprocess
import sys
from importlib import resources
from pathlib import Path

import pytest

import tokcost
from tokcost import (
    ComparisonResult,
    EstimateResult,
    SweepResult,
    TokcostError,
    Workload,
    compare,
    estimate,
    load_engine,
    load_gpu,
    load_model,
    load_network,
    sweep,
)
from tokcost.engine.estimate import Estimate
from tokcost.errors import FileExistsRefusal

ROOT = Path(__file__).resolve().parents[1]


def as_json(data: dict) -> dict:
    """What a dict becomes once printed as JSON and read back (tuples become lists)."""
    return json.loads(json.dumps(data))


def test_the_readme_example_runs_and_is_typed():
    result = estimate(model=load_model("llama-3.1-8b"), gpu=load_gpu("h100-sxm"), workload=Workload(batch=8))
    assert isinstance(result, EstimateResult) and isinstance(result, Estimate)
    assert result.workload.batch == 8
    # batch 8 shares the weight stream: 8 sequences' tokens per step, far more than 1/8 of batch 1's rate
    alone = estimate(model="llama-3.1-8b", gpu="h100-sxm")
    assert result.expected.decode_tokens_per_s > 7 * alone.expected.decode_tokens_per_s


def test_estimate_to_dict_is_the_cli_json(cli):
    args = [
        "-m",
        "mixtral-8x7b",
        "-g",
        "h100-sxm",
        "--gpus",
        "2",
        "-b",
        "16",
        "--weights",
        "fp8",
        "--engine",
        "generic",
    ]
    printed = cli("estimate", *args, "--journey", "-f", "json")
    assert printed.exit_code == 0, printed.stderr
    wl = Workload(batch=16, tp=2, weights_dtype="fp8")
    result = estimate(model="mixtral-8x7b", gpu="h100-sxm", workload=wl, engine="generic")
    assert as_json(result.to_dict(journey=True)) == printed.json()
    assert "journey" not in result.to_dict()
    explained = cli("estimate", *args, "--explain", "-f", "json")  # the API had no way to ask for its lines
    assert as_json(result.to_dict(explain=True)) == explained.json() and explained.json()["explain"]


def test_estimate_takes_specs_or_names_and_the_cli_defaults():
    by_name = estimate(model="llama-3.1-70b", gpu="h100-sxm", workload=Workload(tp=4))
    by_spec = estimate(
        model=load_model("llama-3.1-70b"),
        gpu=load_gpu("h100-sxm"),
        workload=Workload(tp=4),
        network=load_network("ib-ndr-400"),  # h100-sxm's own default network
        engine=load_engine("generic"),
    )
    assert by_name.to_dict() == by_spec.to_dict()


def test_compare_to_dict_is_the_cli_json(cli):
    printed = cli(
        "compare", "-m", "llama-3.1-8b,mixtral-8x7b", "-g", "h100-sxm,l40s", "--gpus", "h100-sxm=2", "-f", "json"
    )
    assert printed.exit_code == 0, printed.stderr
    result = compare(
        models=["llama-3.1-8b", "mixtral-8x7b"],
        gpus=["h100-sxm", "l40s"],
        workload={"h100-sxm": Workload(tp=2), "l40s": Workload()},
    )
    assert isinstance(result, ComparisonResult) and len(result) == 4
    assert [(e.model.name, e.gpu.name) for e in result] == [
        ("llama-3.1-8b", "h100-sxm"),
        ("llama-3.1-8b", "l40s"),
        ("mixtral-8x7b", "h100-sxm"),
        ("mixtral-8x7b", "l40s"),
    ]
    assert as_json(result.to_dict()) == printed.json()


def test_compare_takes_format_lists_as_the_flags_do(cli):
    # compare --weights bf16,fp8 --kv-dtype fp8 priced every combination, and the API took one Workload only
    printed = cli("compare", "-m", "llama-3.1-8b,mixtral-8x7b", "-g", "h100-sxm,l40s", "--weights", "bf16,fp8",
                  "--kv-dtype", "FP8", "-f", "json")  # fmt: skip
    assert printed.exit_code == 0, printed.stderr
    result = compare(models=["llama-3.1-8b", "mixtral-8x7b"], gpus=["h100-sxm", "l40s"], weights=["bf16", "fp8"],
                     kv_dtypes="FP8")  # fmt: skip
    assert as_json(result.to_dict()) == printed.json() and len(result) == 8
    assert [e.precision.weights for e in result][:2] == ["bf16", "fp8"]
    with pytest.raises(TokcostError, match=r"^workload.weights_dtype: the formats listed replace it"):
        compare(models="llama-3.1-8b", gpus="h100-sxm", weights="fp8", workload=Workload(weights_dtype="int4"))


def test_sweep_to_dict_is_the_cli_json(cli):
    printed = cli(
        "sweep", "-m", "llama-3.1-8b", "-g", "h100-sxm", "-b", "1,8,64", "--context", "512,4096", "-f", "json"
    )
    assert printed.exit_code == 0, printed.stderr
    result = sweep(model="llama-3.1-8b", gpu="h100-sxm", batches=[1, 8, 64], prompts=[512, 4096])
    assert isinstance(result, SweepResult) and len(result) == 6
    assert as_json(result.to_dict()) == printed.json()


def test_a_sweep_with_a_prefix_cache_records_it_and_prices_it_as_estimate_does(cli):
    # the API took a workload's prefix and priced it, but the points did not say so and the CLI had no flag for it
    printed = cli("sweep", "-m", "llama-3.1-8b", "-g", "h100-sxm", "-b", "1,8", "--context", "1024,2048",
                  "--cached-prefix", "512", "-f", "json")  # fmt: skip
    assert printed.exit_code == 0, printed.stderr
    result = sweep(model="llama-3.1-8b", gpu="h100-sxm", batches=[1, 8], prompts=[1024, 2048],
                   workload=Workload(cached_prefix_tokens=512))  # fmt: skip
    assert as_json(result.to_dict()) == printed.json()
    assert {p["cached_prefix_tokens"] for p in printed.json()["points"]} == {512}
    for p in result:
        alone = estimate(
            model="llama-3.1-8b",
            gpu="h100-sxm",
            workload=Workload(batch=p.batch, prompt_tokens=p.prompt_tokens, cached_prefix_tokens=512),
        )
        assert p.ttft_s == pytest.approx(alone.to_dict()["expected"]["ttft_s"], rel=1e-9)
    cold = sweep(model="llama-3.1-8b", gpu="h100-sxm", batches=[8], prompts=[2048])
    assert cold[0].ttft_s > 1.2 * result[3].ttft_s and cold[0].cached_prefix_tokens == 0


def test_a_workload_value_the_grid_replaces_is_refused_not_dropped():
    with pytest.raises(TokcostError, match=r"^workload.batch: batches gives the sweep's batches"):
        sweep(model="llama-3.1-8b", gpu="h100-sxm", batches=[1], workload=Workload(batch=64))
    with pytest.raises(TokcostError, match=r"^workload.prompt_tokens: prompts gives the sweep's prompts"):
        sweep(model="llama-3.1-8b", gpu="h100-sxm", batches=[1], prompts=[2048], workload=Workload(prompt_tokens=4096))
    kept = sweep(model="llama-3.1-8b", gpu="h100-sxm", batches=[1], workload=Workload(prompt_tokens=4096))
    assert kept[0].prompt_tokens == 4096  # without prompts, the workload's prompt is the sweep's one


def test_sweep_needs_a_decode_step():
    with pytest.raises(TokcostError, match="give 2 to 100,000,000 output tokens"):
        sweep(model="llama-3.1-8b", gpu="h100-sxm", batches=[1], workload=Workload(output_tokens=1))


@pytest.mark.parametrize("function", [estimate, compare, sweep, tokcost.plan])
def test_every_argument_is_keyword_only(function):
    parameters = inspect.signature(function).parameters.values()
    assert all(p.kind is inspect.Parameter.KEYWORD_ONLY for p in parameters)
    with pytest.raises(TypeError):
        function("llama-3.1-8b", "h100-sxm")  # a model and a GPU name are both strings: no silent swap


@pytest.mark.slow  # matplotlib draws three pictures
def test_results_plot_and_journey(tmp_path):
    pytest.importorskip("matplotlib")
    result = estimate(model="llama-3.1-8b", gpu="h100-sxm")
    rows = result.journey().decode
    assert sum(r.ceiling_s for r in rows) == pytest.approx(result.ceiling.decode_step.seconds)
    assert result.plot(tmp_path / "r.png").read_bytes()[:4] == b"\x89PNG"
    swept = sweep(model="llama-3.1-8b", gpu="h100-sxm", batches=[1, 4])
    assert "TPOT (ms)" in swept.plot(tmp_path / "s.svg").read_text()
    # what the user wrote is never replaced unless asked, as the CLI's --plot needs --force
    precious = tmp_path / "precious.png"
    precious.write_bytes(b"mine")
    with pytest.raises(FileExistsRefusal, match=r"already exists; pass force=True to replace it"):
        result.plot(precious)
    assert precious.read_bytes() == b"mine"
    assert result.plot(precious, force=True).read_bytes()[:4] == b"\x89PNG"


def test_every_export_resolves_and_import_tokcost_stays_light():
    for name in tokcost.__all__:
        assert getattr(tokcost, name) is not None, name
    assert set(tokcost.__all__) <= set(dir(tokcost))
    with pytest.raises(AttributeError):
        tokcost.no_such_name  # noqa: B018
    heavy = ("pydantic", "typer", "tokcost.engine.estimate")
    code = f"import sys, tokcost; print(sorted(m for m in {heavy!r} if m in sys.modules))"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True, cwd=ROOT)
    assert out.stdout.strip() == "[]"


@pytest.mark.slow  # matplotlib draws the README's picture (the quick tier draws a plan's in test_plan_cli)
def test_the_readme_python_api_section_runs(tmp_path, monkeypatch, capsys):
    pytest.importorskip("matplotlib")  # it ends with result.plot(...)
    text = (ROOT / "README.md").read_text()
    section = text[text.index("## Python API") :]
    code = section[
        section.index("```python\n") + len("```python\n") : section.index("```\n", section.index("```python"))
    ]
    monkeypatch.chdir(tmp_path)
    exec(compile(code, "README.md (Python API)", "exec"), {})
    assert "LM head" in capsys.readouterr().out  # the journey loop printed the stages
    assert (tmp_path / "roofline.png").read_bytes()[:4] == b"\x89PNG"


def test_plan_to_dict_is_the_cli_json(cli):
    from tokcost import PlanResult, plan

    args = ["-m", "llama-3.1-8b", "-g", "h100-sxm,l40s", "--concurrency", "64", "--prompt", "2000", "--output",
            "300", "--slo", "ttft_p90=1s", "--slo", "tpot_p90=50ms", "--price", "l40s=1.2", "--tp", "1,2"]  # fmt: skip
    printed = cli("plan", *args, "-f", "json")
    assert printed.exit_code == 0, printed.stderr
    slos = ["ttft_p90=1s", "tpot_p90=50ms"]
    result = plan(model="llama-3.1-8b", gpus=["h100-sxm", "l40s"], concurrency=64, prompt_tokens=2000,
                  output_tokens=300, slos=slos, prices={"l40s": 1.2}, tp=[1, 2])  # fmt: skip
    assert isinstance(result, PlanResult)
    assert as_json(result.to_dict()) == printed.json()
    top = result.rows[0].expected
    assert top.meets_slo and top.tpot_s["p90"] <= 0.05 and top.usd_per_hour is not None


def test_plan_takes_one_price_for_every_gpu_as_the_flag_does(cli):
    # `--price 2` prices every GPU; prices=2.0 was refused as not a mapping
    from tokcost import plan

    printed = cli("plan", "-m", "llama-3.1-8b", "-g", "h100-sxm,h200", "--rate", "1", "--tp", "1", "--price", "2",
                  "-f", "json")  # fmt: skip
    assert printed.exit_code == 0, printed.stderr
    result = plan(model="llama-3.1-8b", gpus=["h100-sxm", "h200"], rate_rps=1, tp=1, prices=2.0)
    assert as_json(result.to_dict()) == printed.json()
    assert {(c["gpu"], c["expected"]["usd_per_hour"] / c["expected"]["gpus"]) for c in printed.json()["configs"]} == {
        ("h100-sxm", 2.0),
        ("h200", 2.0),
    }


def test_a_gpu_named_in_capitals_takes_its_price(cli, tmp_path):
    # prices were keyed by the lower-cased name, so a spec named My-GPU was "not among gpus (My-GPU)"
    from tokcost import plan

    spec = (resources.files("tokcost") / "specs" / "gpus" / "h100-sxm.yaml").read_text()
    path = tmp_path / "mygpu.yaml"
    path.write_text(spec.replace("\nname: h100-sxm\n", "\nname: My-GPU\n", 1))
    for prices in (2.0, {"my-gpu": 2.0}, {"My-GPU": 2.0}):
        rows = plan(model="llama-3.1-8b", gpus=[str(path)], rate_rps=1, tp=1, prices=prices).to_dict()["configs"]
        assert [(c["gpu"], c["expected"]["usd_per_hour"] / c["expected"]["gpus"]) for c in rows] == [("My-GPU", 2.0)]
    printed = cli(
        "plan", "-m", "llama-3.1-8b", "-g", str(path), "--rate", "1", "--tp", "1", "--price", "2", "-f", "json"
    )
    assert printed.exit_code == 0, printed.stderr
    assert printed.json()["configs"][0]["expected"]["usd_per_hour"] == pytest.approx(
        2.0 * printed.json()["configs"][0]["expected"]["gpus"]
    )


def test_plan_takes_every_search_flag_as_a_keyword(cli):
    # pipeline stages, both modes, a compute dtype and the chunk search: the same JSON as the command line
    from tokcost import plan

    args = ["-m", "llama-3.1-70b", "-g", "h100-sxm", "--rate", "2", "--slo", "tpot_p90=60ms", "--tp", "2,4", "--pp",
            "1,2", "--mode", "both", "--weights", "fp8", "--compute-dtype", "fp8", "--chunk", "search"]  # fmt: skip
    printed = cli("plan", *args, "-f", "json")
    assert printed.exit_code == 0, printed.stderr
    result = plan(model="llama-3.1-70b", gpus="h100-sxm", rate_rps=2, slos="tpot_p90=60ms", tp=[2, 4], pp=[1, 2],
                  mode="both", weights="fp8", compute_dtypes="fp8", chunks="search")  # fmt: skip
    assert as_json(result.to_dict()) == printed.json()
    assert {c["mode"] for c in printed.json()["configs"]} == {"aggregated", "disaggregated"}
    with pytest.raises(TokcostError, match=r"^mode: disaggregated plans need rate_rps"):
        plan(model="llama-3.1-8b", gpus="h100-sxm", concurrency=8, mode="disaggregated")


def test_plan_refuses_in_keywords_not_flags():
    from tokcost import plan

    with pytest.raises(TokcostError, match=r"^think_time_s: a think time paces closed-loop users; give it with "):
        plan(model="llama-3.1-8b", gpus=["h100-sxm"], rate_rps=2.0, think_time_s=1.0)
    with pytest.raises(TokcostError, match=r"^slos: ttft_p90 given twice"):
        plan(model="llama-3.1-8b", gpus=["h100-sxm"], rate_rps=2.0, slos=["ttft_p90=1s", "ttft_p90=2s"])
    with pytest.raises(TokcostError, match=r"^tp: each value must be an integer from 1 to 4,096 \(got 0\)"):
        plan(model="llama-3.1-8b", gpus=["h100-sxm"], rate_rps=2.0, tp=[0])
    with pytest.raises(TokcostError, match=r"^seed: seeds the simulation; give it with simulate"):
        plan(model="llama-3.1-8b", gpus=["h100-sxm"], rate_rps=2.0, seed=5)  # it had run, the seed unused


def test_a_hint_inside_a_refusal_is_in_the_apis_words():
    # the command line's hint names a flag (pass it to --gpu (-g), use --ep 1); the API's names the keyword
    from tokcost import Workload, estimate

    with pytest.raises(TokcostError, match=r"^h100-sxm: this is a built-in GPU, not a model; pass it as gpu "):
        estimate(model="h100-sxm", gpu="h100-sxm")
    with pytest.raises(TokcostError, match=r"^ep: llama-3.1-8b has no routed experts; .*\(use ep=1\)$"):
        estimate(model="llama-3.1-8b", gpu="h100-sxm", workload=Workload(ep=2))


def test_a_plot_path_of_the_wrong_type_is_one_line():
    from tokcost import estimate

    with pytest.raises(TokcostError, match=r"^path: must be a file name ending \.png or \.svg.*\(got int 123\)"):
        estimate(model="llama-3.1-8b", gpu="h100-sxm").plot(123)
    # a flag that is not a bool is refused, not taken for True ("yes") or False ("")
    with pytest.raises(TokcostError, match=r"^journey: must be True or False \(got str 'yes'\)$"):
        estimate(model="llama-3.1-8b", gpu="h100-sxm").plot("x.png", journey="yes")
    with pytest.raises(TokcostError, match=r"^force: must be True or False \(got int 1\)$"):
        sweep(model="llama-3.1-8b", gpu="h100-sxm", batches=[1, 8]).plot("x.png", force=1)


def test_plan_takes_slos_as_a_comma_list_as_the_cli_does():
    # the CLI's --slo takes "a,b"; the API's slos refused it as "not a duration"
    from tokcost import plan

    listed = plan(model="llama-3.1-8b", gpus="h100-sxm", rate_rps=2, slos="ttft_p90=500ms,tpot_p90=40ms", tp=[1])
    separate = plan(model="llama-3.1-8b", gpus="h100-sxm", rate_rps=2, slos=["ttft_p90=500ms", "tpot_p90=40ms"], tp=[1])
    assert listed.to_dict()["slo"] == separate.to_dict()["slo"] == {"ttft_p90": 0.5, "tpot_p90": 0.04}


def test_a_per_gpu_workload_mapping_that_leaves_a_gpu_out_is_refused():
    # an audit: the GPU left out was priced at the default workload beside the other's, and nothing said so
    from tokcost import compare
    from tokcost.engine.workload import Workload
    from tokcost.errors import UsageError

    with pytest.raises(UsageError, match=r"workload: no entry for 'h200'"):
        compare(models="llama-3.1-8b", gpus=["h100-sxm", "h200"], workload={"h100-sxm": Workload(batch=64)})


def test_iter_sweep_refuses_a_layout_before_the_first_point_naming_its_keyword():
    # an audit: the call succeeded and next() raised the command line's "--tp: 3 does not divide ..."
    from tokcost import iter_sweep
    from tokcost.engine.workload import Workload
    from tokcost.errors import UsageError

    with pytest.raises(UsageError, match=r"^tp: 3 does not divide"):
        iter_sweep(model="llama-3.1-8b", gpu="h100-sxm", batches=[1], workload=Workload(tp=3))
