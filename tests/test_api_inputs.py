"""The Python API refuses what the CLI refuses, by the same path, in one line naming the keyword (issue 22).

Every wrong type is a TokcostError (never an AttributeError deep in the engine), every value the CLI refuses
is refused with the CLI's message under the keyword's name, a list argument takes one value as a list of one,
and a sweep is bounded as the CLI's held formats are.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tokcost import (
    TokcostError,
    Workload,
    compare,
    estimate,
    iter_sweep,
    load_engine,
    load_gpu,
    load_model,
    plan,
    sweep,
)
from tokcost.inputs import MAX_GRID_POINTS, MAX_STREAMED_POINTS

M, G = "llama-3.1-8b", "h100-sxm"


def one_line(exc: pytest.ExceptionInfo) -> str:
    message = str(exc.value)
    assert isinstance(exc.value, TokcostError) and "\n" not in message
    return message


@pytest.mark.parametrize(
    ("call", "expected"),
    [
        (lambda: estimate(model=123, gpu=G), "model: must be a ModelSpec or text or a path (got 123)"),
        (lambda: estimate(model=M, gpu=1.5), "gpu: must be a GpuSpec or text or a path (got 1.5)"),
        (lambda: estimate(model=M, gpu=G, workload={"batch": 4}), "workload: must be a Workload or None (got dict"),
        (lambda: estimate(model=M, gpu=G, network=5), "network: must be a Link or text or a path or None (got 5)"),
        (lambda: estimate(model=M, gpu=G, engine=5), "engine: must be an EngineProfile or text or a path or None"),
        (lambda: estimate(model=None, gpu=G), "model: must be a ModelSpec or text or a path (got NoneType None)"),
        (lambda: estimate(model={"name": "x"}, gpu=G), "model: must be a ModelSpec"),  # a dict is never a spec
        (lambda: compare(models=[M, 3], gpus=[G]), "models[1]: 3 is not a ModelSpec or text or a path"),
        (lambda: compare(models=M, gpus=[G], workload=[Workload()]), "workload: must be a Workload or a mapping"),
        (lambda: sweep(model=M, gpu=G, batches="1,2"), "batches: must be an integer or a list of integers (got '1,2')"),
        (lambda: sweep(model=M, gpu=G, batches=[1, 1.5]), "batches[1]: 1.5 is not an integer"),
        (lambda: sweep(model=M, gpu=G, batches=[True]), "batches[0]: bool True is not an integer"),
        # iter_sweep is checked before its first point (it raised AttributeError on a name, TypeError on an int)
        (lambda: iter_sweep(model=M, gpu=G, batches="18"), "batches: must be an integer or a list of integers"),
        (lambda: iter_sweep(model=M, gpu=G, batches=[0]), "batches: must be an integer from 1 to 1,000,000 (got 0)"),
        (lambda: iter_sweep(model=M, gpu=G, batches=[1], workload={}), "workload: must be a Workload or None"),
        (lambda: plan(model=M, gpus=[3], rate_rps=1.0), "gpus[0]: 3 is not a GpuSpec or text or a path"),
        (lambda: plan(model=M, gpus=G, concurrency=True), "concurrency: must be an integer or None (got bool True)"),
        (lambda: compare(models=[], gpus=[G]), "models: an empty list; give at least one value"),
        # these returned a plan of no rows, where tp=[] was refused
        (lambda: plan(model=M, gpus=G, rate_rps=1.0, weights=[]), "weights: an empty list; give at least one value"),
        (lambda: plan(model=M, gpus=G, rate_rps=1.0, kv_dtypes=[]), "kv_dtypes: an empty list"),
        (lambda: plan(model=M, gpus=G, rate_rps=1.0, compute_dtypes=[]), "compute_dtypes: an empty list"),
        (
            lambda: compare(models=M, gpus=[G], workload={"h100": Workload(tp=2)}),
            "workload: 'h100' is not one of the gpus' names: h100-sxm",
        ),  # it silently took the default
        # these returned two equal rows where the CLI refuses the repeat
        (lambda: compare(models=M, gpus=[G, G]), "gpus: two specs are named 'h100-sxm': list each once"),
        (lambda: compare(models=[M, M.upper()], gpus=G), "models: two specs are named 'llama-3.1-8b': list each once"),
        (lambda: plan(model=M, gpus=[G, G], rate_rps=1.0), "gpus: two specs are named 'h100-sxm': list each once"),
        # one number for every GPU is checked as one, not under a GPU's name
        (lambda: plan(model=M, gpus=G, rate_rps=1.0, prices=-1.0), "prices: USD per GPU-hour must be a number from 0"),
        (lambda: plan(model=M, gpus=G, rate_rps=1.0, slos=["ttft=1s"]), "slos: 'ttft=1s' is not METRIC_PCT=VALUE"),
        (lambda: plan(model=M, gpus=G, rate_rps=1.0, slos=["ttft_p90=0s"]), "slos: '0s' must be above 0"),
        (lambda: plan(model=M, gpus=G, rate_rps=1.0, trace="no-such.jsonl"), "trace no-such.jsonl: no such file"),
        (lambda: load_model(123), "name_or_path: a built-in name or a file path (str or pathlib.Path), not int"),
        (lambda: load_gpu(None), "name_or_path: a built-in name or a file path (str or pathlib.Path), not NoneType"),
    ],
)
def test_a_wrong_type_is_one_line_naming_the_keyword(call, expected):
    with pytest.raises(TokcostError) as exc:
        call()
    assert one_line(exc).startswith(expected)


def test_a_path_object_is_a_path():
    with pytest.raises(TokcostError) as exc:
        estimate(model=Path("no-such-model.yaml"), gpu=G)
    assert one_line(exc).startswith("no-such-model.yaml: no such file; the model is a built-in name or a spec file")
    # the loaders take one too, as the README says (they called .strip() on it)
    spec = Path(__file__).parents[1] / "tokcost" / "specs" / "models" / "llama-3.1-8b.yaml"
    assert load_model(spec) == load_model(M) and load_gpu(Path(G)) == load_gpu(G)
    assert load_engine(Path("vllm@v0")).label == "vllm@v0"


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        ({"batch": True}, "batch: must be an integer from 1 to 1,000,000 (got True)"),  # a bool is never a count
        ({"batch": 2.0}, "batch: must be an integer from 1 to 1,000,000 (got 2.0)"),
        ({"prompt_tokens": "4"}, "prompt_tokens: must be an integer from 1 to 100,000,000 (got '4')"),
        ({"price_per_hour_usd": True}, "price_per_hour_usd: must be a number from 0 to 100,000 (got True)"),
        ({"batchh": 4}, "batchh: unknown key; did you mean batch?"),
        ({"prompt_tokens": 100, "cached_prefix_tokens": 100}, "cached_prefix_tokens: cached prefix (100) must be"),
    ],
)
def test_workload_is_strict_and_says_so_in_one_line(values, expected):
    with pytest.raises(TokcostError) as exc:
        Workload(**values)
    assert one_line(exc).startswith(expected)


def test_a_workload_error_is_the_cli_message_under_the_keyword(cli):
    r = cli("estimate", "-m", M, "-g", G, "--batch", "0")
    with pytest.raises(TokcostError) as exc:
        Workload(batch=0)
    assert r.stderr == f"error: --{one_line(exc)}\n"  # "--batch: must be ..." and "batch: must be ..."


@pytest.mark.parametrize(
    ("kwargs", "expected"),
    [
        ({"batches": [0]}, "batches: must be an integer from 1 to 1,000,000 (got 0)"),  # was a ZeroDivisionError
        ({"batches": [4, -5]}, "batches: must be an integer from 1 to 1,000,000 (got -5)"),  # was negative tokens/s
        ({"batches": []}, "batches: an empty list"),
        ({"batches": 1, "prompts": [4096, 10], "workload": Workload(cached_prefix_tokens=500)},
         "cached_prefix_tokens: cached prefix (500) must be shorter than the prompt (10)"),  # was max batch 10,000,000
        ({"batches": [1], "workload": Workload(output_tokens=1)}, "workload.output_tokens: sweep prices decode steps"),
        ({"batches": list(range(1, 101)), "prompts": list(range(1, 102))},
         f"batches: 100 batches x 101 prompts make 10,100 points; at most {MAX_GRID_POINTS:,} per run"),
    ],
)  # fmt: skip
def test_sweep_checks_every_point_and_its_size_before_any_work(kwargs, expected):
    with pytest.raises(TokcostError) as exc:
        sweep(model=M, gpu=G, **kwargs)
    assert one_line(exc).startswith(expected)


def test_sweep_merges_repeated_values_as_the_cli_does():
    result = sweep(model=M, gpu=G, batches=[8, 1, 8], prompts=512)
    assert [(p.batch, p.prompt_tokens) for p in result] == [(8, 512), (1, 512)]


def test_a_range_is_a_list_of_ints_as_python_reads_it():
    ranged = sweep(model=M, gpu=G, batches=range(1, 5), prompts=range(512, 1025, 512))
    listed = sweep(model=M, gpu=G, batches=[1, 2, 3, 4], prompts=[512, 1024])
    assert ranged.to_dict() == listed.to_dict() and len(ranged) == 8
    with pytest.raises(TokcostError) as exc:
        sweep(model=M, gpu=G, batches=range(0, 2))
    assert one_line(exc).startswith("batches")


def test_one_value_is_a_list_of_one_everywhere_a_list_is_taken():
    one = compare(models=M, gpus=G)
    listed = compare(models=[load_model(M)], gpus=[load_gpu(G)])
    assert one.to_dict() == listed.to_dict() and len(one) == 1
    assert sweep(model=M, gpu=G, batches=8).to_dict() == sweep(model=M, gpu=G, batches=[8]).to_dict()


def test_one_gpu_and_one_slo_plan_as_lists_of_one():
    kwargs = {"model": M, "rate_rps": 1.0, "prompt_tokens": 512, "output_tokens": 64, "tp": 1, "weights": "bf16"}
    single = plan(gpus=G, slos="ttft_p90=1s", **kwargs)
    listed = plan(gpus=[G], slos=["ttft_p90=1s"], **{**kwargs, "tp": [1], "weights": ["bf16"]})
    assert single.to_dict() == listed.to_dict()


@pytest.mark.parametrize(
    ("workload", "expected"),
    [
        (Workload(tp=3), "tp: 3 does not divide llama-3.1-8b's 32 attention heads"),
        (Workload(compute_dtype="fp4"), "compute_dtype: h100-sxm lists no dense peak for fp4"),
        (Workload(ep=2), "ep: llama-3.1-8b has no routed experts"),
    ],
)
def test_an_engine_refusal_names_the_keyword_not_the_flag(workload, expected, cli):
    with pytest.raises(TokcostError) as exc:
        estimate(model=M, gpu=G, workload=workload)
    assert one_line(exc).startswith(expected)


def test_plot_without_matplotlib_names_the_extra_not_a_flag(monkeypatch, tmp_path):
    result = estimate(model=M, gpu=G)
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # as if the plot extra were not installed
    for draw in (lambda: result.plot(tmp_path / "r.png"), result.figure):
        with pytest.raises(TokcostError) as exc:
            draw()
        message = one_line(exc)
        assert message.startswith("plot(): matplotlib is not installed; pip install 'tokcost[plot]'")
        assert "--plot" not in message
    assert not (tmp_path / "r.png").exists()


def test_positional_and_unknown_arguments_stay_python_type_errors():
    with pytest.raises(TypeError):
        estimate(M, G)  # a model and a GPU name are both strings: no silent swap
    with pytest.raises(TypeError):
        estimate(model=M, gpu=G, batch=8)  # batch belongs in the Workload


def test_iter_sweep_streams_a_grid_too_large_to_hold_with_sweeps_own_points():
    big = list(range(1, 101)), list(range(128, 128 * 201, 128))  # 20,000 points: past what sweep holds
    with pytest.raises(TokcostError, match=r"20,000 points; at most 10,000 per run \(iter_sweep"):
        sweep(model=M, gpu=G, batches=big[0], prompts=big[1])
    points = iter_sweep(model=M, gpu=G, batches=big[0], prompts=big[1])
    first = [next(points) for _ in range(3)]
    held = sweep(model=M, gpu=G, batches=[1, 2, 3], prompts=[128]).points
    assert first == list(held)  # prompts outermost, the same engine path
    assert iter_sweep(model=M, gpu=G, batches=8).__next__().batch == 8  # one value is a list of one
    with pytest.raises(TokcostError, match="10,000,000"):
        iter_sweep(
            model=M, gpu=G, batches=list(range(1, 10_001)), prompts=list(range(1, MAX_STREAMED_POINTS // 10_000 + 2))
        )


def test_workload_gpus_none_is_not_given():
    # it said "gpus: unknown key; allowed keys: ..." and left gpus out of the list it allowed
    assert Workload(gpus=None) == Workload() and Workload(gpus=None, tp=2, pp=2).gpus == 4
    assert Workload(gpus=4, pp=2).tp == 2


def test_gpus_all_is_every_builtin_gpu_as_the_flag_takes_it():
    from tokcost.hardware.library import builtin_gpus

    # it raised "all: not a built-in gpu", where -g all works on the command line
    assert [r.gpu.name for r in compare(models=M, gpus="all")] == builtin_gpus()
    gpus = {c["gpu"] for c in plan(model=M, gpus="All", rate_rps=2.0).to_dict()["configs"]}
    assert gpus == set(builtin_gpus())
    with pytest.raises(TokcostError) as exc:
        compare(models=M, gpus=["all", G])
    assert one_line(exc) == "gpus: 'all' stands alone (every built-in GPU); drop it, or give only it"


def test_an_unknown_compute_dtype_is_refused_as_one_not_as_a_missing_peak():
    # it said "h100-sxm lists no dense peak for foo"
    with pytest.raises(TokcostError) as exc:
        Workload(compute_dtype="foo")
    assert one_line(exc) == (
        "compute_dtype: must be one of: fp64, fp32, tf32, bf16, fp16, fp8, int8, fp4, int4 (got 'foo')"
    )


def test_a_workload_per_gpu_takes_the_name_in_any_case_as_the_flags_do():
    # plan(prices={"H100-SXM": 2}) and --gpus took it; compare's workload mapping refused it
    assert compare(models="llama-3.1-70b", gpus=[G], workload={"H100-SXM": Workload(tp=2)})[0].layout.tp == 2
    with pytest.raises(TokcostError) as exc:
        compare(models=M, gpus=[G], workload={"H100-SXM": Workload(tp=2), G: Workload(tp=4)})
    assert one_line(exc) == "workload: two keys name one GPU; give each of h100-sxm once"


def test_a_frozen_workload_refuses_assignment_in_one_line_saying_how_to_make_another():
    w = Workload(batch=2)
    with pytest.raises(TokcostError) as exc:
        w.batch = 8  # pydantic's multi-line ValidationError, not a TokcostError
    assert one_line(exc).startswith("batch: a Workload is frozen (estimates hold it); make another: ")
    assert w.batch == 2 and Workload(**{**w.model_dump(exclude={"gpus"}), "batch": 8}).batch == 8


def test_a_compute_dtype_in_any_case_is_the_flags_dtype():
    # the flags of compare, sweep and plan took FP8 as fp8, and estimate's, the Workload and plan(compute_dtypes=)
    # refused it, while every storage format was taken in any case
    assert Workload(compute_dtype="FP8").compute_dtype == "fp8"
    upper = plan(model=M, gpus=G, rate_rps=1.0, weights="fp8", compute_dtypes="FP8")
    lower = plan(model=M, gpus=G, rate_rps=1.0, weights="fp8", compute_dtypes="fp8")
    assert upper.to_dict() == lower.to_dict()
    with pytest.raises(TokcostError) as exc:
        plan(model=M, gpus=G, rate_rps=1.0, compute_dtypes="fp9")
    assert one_line(exc).startswith("compute_dtypes: must be one of: fp64")


@pytest.mark.parametrize(
    ("call", "expected"),
    [
        (lambda m, g: estimate(model=m, gpu=g.model_copy(update={"memory_bandwidth_gb_s": 0})),
         "gpu 'h100-sxm': memory_bandwidth_gb_s: must be a number from 0.001"),  # was a ZeroDivisionError
        (lambda m, g: estimate(model=m.model_copy(update={"hidden_size": -4096}), gpu=g),
         "model 'llama-3.1-8b': hidden_size: must be an integer from 1"),  # was a TPOT of 30 us
        (lambda m, g: estimate(model=m, gpu=g, workload=Workload().model_copy(update={"batch": -4})),
         "batch: must be an integer from 1"),  # was a normal-looking 5.36 ms
        (lambda m, g: plan(model=m, gpus=g.model_copy(update={"memory_bandwidth_gb_s": -1}), rate_rps=1.0),
         "gpu 'h100-sxm': memory_bandwidth_gb_s"),
        (lambda m, g: compare(models=m.model_copy(update={"attention_heads": 0}), gpus=g),
         "model 'llama-3.1-8b': attention_heads"),  # was a StopIteration
    ],
)  # fmt: skip
def test_a_spec_tweaked_with_model_copy_is_checked_as_a_file_is(call, expected):
    # pydantic's model_copy(update=...) skips validation, so the API reads every spec and workload object again
    with pytest.raises(TokcostError) as exc:
        call(load_model(M), load_gpu(G))
    assert one_line(exc).startswith(expected)


def test_numpy_integers_and_vectors_are_ints_as_python_reads_them():
    # numpy's int64 is an Integral; strict validation had said "np.int64(8) is not an integer"
    np = pytest.importorskip("numpy")
    assert Workload(batch=np.int64(8)).batch == 8 and type(Workload(batch=np.int64(8)).batch) is int
    listed = sweep(model=M, gpu=G, batches=[1, 2, 3], prompts=[512, 1024])
    assert sweep(model=M, gpu=G, batches=np.arange(1, 4), prompts=[np.int32(512), 1024]).to_dict() == listed.to_dict()
    with pytest.raises(TokcostError):
        sweep(model=M, gpu=G, batches=[np.float64(1.5)])  # a float is no batch, whichever library made it
