"""The CLI end to end: output parsed back, files never overwritten, errors one line, no torch at start-up."""

from __future__ import annotations

import csv
import io
import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tokcost.catalog import builtin_names

ASSETS = Path(__file__).parent / "assets"


def test_specs_list_json(cli):
    r = cli("specs", "list", "--format", "json")
    assert r.exit_code == 0, r.stderr
    data = r.json()
    assert data["models"] == builtin_names("models") and data["gpus"] == builtin_names("gpus")
    assert cli("specs", "list", "--kind", "gpus", "--format", "json").json() == {"gpus": builtin_names("gpus")}


def test_specs_list_table_names_every_spec(cli):
    r = cli("specs", "list")
    assert r.exit_code == 0
    for name in builtin_names("models") + builtin_names("gpus"):
        assert name in r.stdout


def test_specs_list_shows_each_checkpoints_formats_as_shipped(cli):
    out = cli("specs", "list", "--kind", "models").stdout
    rows = {}
    for line in out.splitlines():
        cells = [c.strip() for c in line.strip("│┃ ").split("│")]
        if len(cells) == 6:
            rows[cells[0]] = cells[5]
    assert rows["llama-3.1-8b"] == "bf16" and rows["deepseek-r1"] == "fp8"
    assert rows["llama-3.1-405b-fp8"] == "fp8*"  # Meta's checkpoint: FP8 MLPs, BF16 attention
    assert rows["gpt-oss-120b"] == "bf16*"  # MXFP4 experts
    assert "* attention's or the experts' weights ship in another format" in " ".join(out.split())


def test_specs_show_model_json_has_yaml_keys_and_derived_counts(cli):
    r = cli("specs", "show", "llama-3.1-8b", "--format", "json")
    assert r.exit_code == 0, r.stderr
    data = r.json()
    assert data["layers"] == 32 and data["kv_heads"] == 8 and data["head_dim"] == 128
    assert data["params_total"] == 8_030_261_248
    assert data["params_active"] == data["params_total"]
    assert data["params_embedding"] == 128_256 * 4096
    assert data["kv_bytes_per_token"] == 2 * 32 * 8 * 128 * 2


def test_specs_show_gpu_json_includes_source(cli):
    data = cli("specs", "show", "h100-sxm", "--format", "json").json()
    assert data["memory_bandwidth_gb_s"] == 3350 and "nvidia" in data["source"].lower()


def test_specs_show_table(cli):
    r = cli("specs", "show", "mixtral-8x7b")
    assert r.exit_code == 0 and "params_active" in r.stdout and "12,879,925,248" in r.stdout


def test_specs_validate_ok_and_bad(cli, tmp_path):
    good = tmp_path / "gpu.yaml"
    good.write_text(yaml.safe_dump(cli("specs", "show", "l4", "--format", "json").json()))
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\nsource: y\nmemory_gb: -1\n")
    r = cli("specs", "validate", str(good), str(bad))
    assert r.exit_code == 2
    lines = r.stdout.strip().splitlines()
    assert lines[0].startswith(f"{good}: OK")
    assert lines[1].startswith(f"{bad}: ") and "memory_gb" in lines[1]


def test_specs_import_writes_yaml_that_loads_and_refuses_to_overwrite(cli, tmp_path):
    out = tmp_path / "m.yaml"
    r = cli("specs", "import", str(ASSETS / "hf" / "llama.json"), "-o", str(out), "--name", "my-llama")
    assert r.exit_code == 0, r.stderr
    data = cli("specs", "show", str(out), "--format", "json").json()
    assert data["name"] == "my-llama" and data["params_total"] == 1_235_814_400  # Llama-3.2-1B
    before = out.read_text()
    r = cli("specs", "import", str(ASSETS / "hf" / "llama.json"), "-o", str(out))
    assert r.exit_code == 2 and "--force" in r.stderr and out.read_text() == before
    assert cli("specs", "import", str(ASSETS / "hf" / "llama.json"), "-o", str(out), "--force").exit_code == 0


def test_hf_config_accepted_wherever_a_model_is(cli):
    r = cli("estimate", "-m", str(ASSETS / "hf" / "mixtral.json"), "-g", "h200", "--format", "json")
    assert r.exit_code == 0, r.stderr
    assert r.json()["memory"]["weights_bytes_per_gpu"] == 46_702_792_704 * 2


ESTIMATE_KEYS = {
    "memory": {"weights_bytes_per_gpu", "kv_cache_bytes_per_gpu", "workspace_bytes_per_gpu", "reserve_bytes_per_gpu",
               "used_bytes_per_gpu", "capacity_bytes_per_gpu", "weights_bytes_total", "kv_cache_bytes_total",
               "kv_bytes_per_token_total", "fits", "max_batch", "max_context", "min_gpus", "min_layout"},
    "scenario": {"ttft_s", "tpot_s", "e2e_s", "decode_tokens_per_s", "prefill_bound", "decode_bound",
                 "usd_per_million_input_tokens", "usd_per_million_output_tokens", "joules_per_output_token"},
}  # fmt: skip


def test_estimate_json_keys_and_values(cli):
    r = cli("estimate", "-m", "llama-3.1-8b", "-g", "h100-sxm", "--format", "json")
    assert r.exit_code == 0, r.stderr
    data = r.json()
    assert ESTIMATE_KEYS["memory"] <= set(data["memory"])
    assert {"critical_batch_compute", "critical_batch_kv", "warnings", "layout"} <= set(data)
    # every byte count is an integer and says its base
    byte_keys = [k for k in data["memory"] if "bytes" in k]
    assert all(k.endswith(("_per_gpu", "_total")) and isinstance(data["memory"][k], int) for k in byte_keys)
    for scenario in ("ceiling", "expected"):
        s = data[scenario]
        assert ESTIMATE_KEYS["scenario"] <= set(s)
        assert {"flops_per_gpu", "bytes_per_gpu", "seconds", "components"} <= set(s["prefill"])
        assert {"weights", "attention"} <= set(s["decode_step"]["components"])
    assert data["expected"]["provenance"].startswith("measured: copy 0.87")  # the H100 SXM's sustained block
    # decode reads every weight but the embedding table (8.03B params - 128,256 x 4,096), at 2 bytes
    weights = data["ceiling"]["decode_step"]["components"]["weights"]["bytes_per_gpu"]
    assert weights == pytest.approx((8_030_261_248 - 128_256 * 4096) * 2, rel=0.003)  # + activations of one row
    assert data["expected"]["tpot_s"] >= data["ceiling"]["tpot_s"]
    assert data["ceiling"]["e2e_s"] == pytest.approx(data["ceiling"]["ttft_s"] + 255 * data["ceiling"]["tpot_s"])


def test_a_pipelined_step_breakdown_adds_up_by_hand(cli):
    """With pipeline stages, each part's time is one stage's, as its FLOPs and bytes are: 8.03 GB of the slowest
    stage's weights at 3.35 TB/s is that part's time, and the step takes it once per stage-time."""
    args = ("estimate", "-m", "llama-3.1-8b", "-g", "h100-sxm", "--pp", "2")
    data = cli(*args, "--format", "json").json()
    step = data["ceiling"]["decode_step"]
    weights, factor = step["components"]["weights"], step["pipeline"]["stage_times"]
    assert weights["stage_seconds"] == pytest.approx(weights["bytes_per_gpu"] / 3.35e12, rel=0.01)
    assert weights["seconds"] == pytest.approx(weights["stage_seconds"] * factor)
    assert step["seconds"] == pytest.approx(factor * step["pipeline"]["stage_seconds"])
    table = cli(*args, "--format", "markdown").stdout
    row = next(line for line in table.splitlines() if line.startswith("| weights |") and "GFLOP" in line)
    assert f"| {weights['stage_seconds'] * 1e3:.3f} ms |" in row
    assert f"step = {factor:.3g} stage-times x {step['pipeline']['stage_seconds'] * 1e3:.3f} ms" in table


def test_estimate_table_and_markdown_agree_with_json(cli):
    data = cli("estimate", "-m", "llama-3.1-8b", "-g", "h100-sxm", "--format", "json").json()
    table = cli("estimate", "-m", "llama-3.1-8b", "-g", "h100-sxm")
    assert table.exit_code == 0
    assert f"{data['ceiling']['decode_tokens_per_s']:,.1f}" in table.stdout
    assert "decode is memory-bound" in table.stdout
    md = cli("estimate", "-m", "llama-3.1-8b", "-g", "h100-sxm", "--format", "markdown").stdout
    assert "| metric | ceiling | expected |" in md and "|:---|---:|---:|" in md
    assert f"| decode tokens/s | {data['ceiling']['decode_tokens_per_s']:,.1f} |" in md


def test_estimate_csv_is_one_row(cli):
    text = cli("estimate", "-m", "llama-3.1-8b", "-g", "h100-sxm", "--format", "csv").stdout
    rows = list(csv.DictReader(io.StringIO(text)))
    assert len(rows) == 1 and float(rows[0]["ceiling.tpot_s"]) > 0


def test_explain_shows_the_arithmetic(cli):
    r = cli("estimate", "-m", "llama-2-7b", "-g", "h100-sxm", "--explain")
    assert r.exit_code == 0
    assert "2 x 32 layers x 32 KV heads x 128 x 2 B = 524,288 B" in r.stdout
    assert "/ 3.350 TB/s" in r.stdout and "decode tokens/s: 1 /" in r.stdout


def test_explain_in_json_is_a_list_and_in_csv_goes_to_stderr(cli):
    r = cli("estimate", "-m", "llama-3.1-8b", "-g", "h100-sxm", "--explain", "--format", "json")
    assert r.exit_code == 0
    data = r.json()  # the whole stdout is one JSON document
    assert isinstance(data["explain"], list) and any("ridge point" in line for line in data["explain"])
    c = cli("estimate", "-m", "llama-3.1-8b", "-g", "h100-sxm", "--explain", "--format", "csv")
    assert len(list(csv.DictReader(io.StringIO(c.stdout)))) == 1 and "ridge point" in c.stderr


def test_warnings_go_to_stderr_and_into_json(cli):
    args = ("estimate", "-m", "llama-3.1-8b", "-g", "h100-sxm", "--prompt", "200000")
    table = cli(*args)
    assert "max_context" in table.stderr and "max_context" not in table.stdout
    data = cli(*args, "--format", "json").json()
    assert any("max_context" in w for w in data["warnings"])


@pytest.mark.parametrize(("gpu", "said"), [("a100-80gb-sxm", True), ("h100-sxm", False)])
def test_a_checkpoints_compute_the_gpu_cannot_run_is_said(cli, gpu, said):
    # an FP8 checkpoint (compute_dtype fp8) on an A100, which has no FP8 peak, multiplies at bf16: priced so, and it
    # had said nothing (the same request by flag is said, above); on an H100 it runs at fp8, nothing to say
    data = cli("estimate", "-m", "llama-3.1-405b-fp8", "-g", gpu, "--gpus", "8", "--format", "json").json()
    assert data["precision"]["compute"] == ("bf16" if said else "fp8")
    line = "llama-3.1-405b-fp8's compute_dtype fp8: a100-80gb-sxm has no fp8 peak, so its matmuls run at bf16"
    assert any(w.startswith(line) for w in data["warnings"]) is said


@pytest.mark.parametrize(
    ("extra", "changes"),
    [((), False), (("--weights", "int4"), True), (("--weights", "fp8"), True), (("--kv-dtype", "fp8"), True)],
)
def test_a_compute_dtype_that_no_matmul_runs_at_is_said(cli, extra, changes):
    # 16-bit weights multiply at the 16-bit peak whatever --compute-dtype says: the times are bf16's, and a warning
    # says so; with weights that dequantize or run natively (int4, fp8), or an FP8 cache's attention, it applies
    args = ("estimate", "-m", "llama-3.1-8b", "-g", "h100-sxm", "--format", "json", *extra)
    fp8, bf16 = cli(*args, "--compute-dtype", "fp8").json(), cli(*args, "--compute-dtype", "bf16").json()
    said = any("--compute-dtype fp8 changes nothing" in w for w in fp8["warnings"])
    assert said is not changes
    same = fp8["ceiling"]["ttft_s"] == bf16["ceiling"]["ttft_s"]
    assert same is not changes
    # what is reported is what the matmuls ran at: the header, the JSON and --explain's ridge said fp8 while every
    # kernel divided by the bf16 peak
    assert (fp8["precision"]["compute"] == "fp8") is changes
    if not changes:
        assert fp8["precision"] == bf16["precision"] and fp8["critical_batch_compute"] == bf16["critical_batch_compute"]


def test_one_output_token_prints_no_tpot(cli):
    data = cli("estimate", "-m", "llama-3.1-8b", "-g", "h100-sxm", "--output", "1", "--format", "json").json()
    assert data["ceiling"]["tpot_s"] is None and data["expected"]["decode_step"] is None
    table = cli("estimate", "-m", "llama-3.1-8b", "-g", "h100-sxm", "--output", "1").stdout
    assert "TPOT" in table and "n/a" in table


def test_compare_rows(cli):
    r = cli("compare", "-m", "llama-3.1-70b,llama-3.1-8b", "-g", "h100-sxm,h200", "--format", "json")
    assert r.exit_code == 0, r.stderr
    rows = r.json()["rows"]
    assert [(x["model"], x["gpu"]) for x in rows] == [
        ("llama-3.1-70b", "h100-sxm"), ("llama-3.1-70b", "h200"), ("llama-3.1-8b", "h100-sxm"), ("llama-3.1-8b", "h200")
    ]  # fmt: skip
    # 70.55B x 2 bytes = 141.1 GB: more than one H100 (85.5 GB), and more than 90% of an H200 (150.8 GB)
    assert rows[0]["fits"] is False and rows[0]["min_gpus"] == 2 and rows[0]["usd_per_million_output_tokens"] is None
    assert rows[1]["fits"] is False and rows[1]["min_gpus"] == 2 and rows[2]["fits"] is True
    # same compute, more bandwidth: H200 decodes faster
    assert rows[3]["decode_tokens_per_s"] > rows[2]["decode_tokens_per_s"]
    assert rows[3]["ceiling_decode_tokens_per_s"] > rows[2]["ceiling_decode_tokens_per_s"]
    # one convention across the row and with sweep: unprefixed = expected, so its cost is priced on its own TPOT
    # (the row mixed the ceiling's TPOT with the expected cost under the same names)
    one = cli("estimate", "-m", "llama-3.1-8b", "-g", "h100-sxm", "--format", "json").json()
    row = rows[2]
    assert (row["ttft_s"], row["tpot_s"]) == (one["expected"]["ttft_s"], one["expected"]["tpot_s"])
    assert (row["ceiling_ttft_s"], row["ceiling_tpot_s"]) == (one["ceiling"]["ttft_s"], one["ceiling"]["tpot_s"])
    # $/1M output = $/hour / 3600 x TPOT / batch x 1e6 (batch 1)
    usd = row["price_per_hour_usd"] / 3600 * row["tpot_s"] * 1e6
    assert row["usd_per_million_output_tokens"] == pytest.approx(usd, rel=1e-3)
    table = cli("compare", "-m", "llama-3.1-8b", "-g", "h100-sxm,l4")
    assert table.exit_code == 0 and "l4" in table.stdout


def test_compare_takes_gpus_and_prices_per_gpu(cli):
    by_name = cli("compare", "-m", "llama-3.1-70b", "-g", "h100-sxm,h200", "--gpus", "h100-sxm=4,h200=2",
                  "--price", "h100-sxm=2,h200=3.5", "--format", "json").json()["rows"]  # fmt: skip
    aligned = cli("compare", "-m", "llama-3.1-70b", "-g", "h100-sxm,h200", "--gpus", "4,2", "--price", "2,3.5",
                  "--format", "json").json()["rows"]  # fmt: skip
    assert by_name == aligned
    assert [(r["gpus"], r["price_per_hour_usd"], r["fits"]) for r in by_name] == [(4, 2.0, True), (2, 3.5, True)]
    short = cli("compare", "-m", "llama-3.1-70b", "-g", "h100-sxm,h200", "--gpus", "4,2,1")
    assert short.exit_code == 2 and "3 values for 2 GPUs" in short.stderr
    table = cli("compare", "-m", "llama-3.1-70b", "-g", "h100-sxm").stdout
    assert "does not fit (needs 2)" in table


def test_sweep_marks_critical_batch_and_memory(cli):
    r = cli(
        "sweep", "-m", "llama-3.1-8b", "-g", "h100-sxm", "-b", "1,64,1024,4096", "--prompt", "128", "--format", "json"
    )
    assert r.exit_code == 0, r.stderr
    points = r.json()["points"]
    assert [p["batch"] for p in points] == [1, 64, 1024, 4096]
    assert points[-1]["fits"] is False and points[0]["fits"] is True
    critical = points[0]["critical_batch_compute"]
    assert critical is not None and 64 < critical < 1024
    assert [p["decode_bound"] for p in points][:2] == ["memory", "memory"]
    table = cli("sweep", "-m", "llama-3.1-8b", "-g", "h100-sxm", "-b", "1,1024,4096", "--prompt", "128",
                "-f", "markdown").stdout  # fmt: skip
    assert "matmuls compute-bound from batch" in table and "exceeds memory" in table
    # past both critical batches a row names both (it named the compute one alone)
    kv = points[0]["critical_batch_kv"]
    both = cli("sweep", "-m", "llama-3.1-8b", "-g", "h100-sxm", "-b", str(max(critical, kv)), "--prompt", "128",
               "-f", "markdown").stdout  # fmt: skip
    assert f"compute-bound from batch {critical}" in both and f"KV reads > weights from batch {kv}" in both


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["estimate", "-m", "llama-3.1-8b", "-g", "h100-sxm", "--batch", "0"], "--batch"),
        (["estimate", "-m", "llama-3.1-8b", "-g", "h100-sxm", "--prompt", "-1"], "--prompt"),
        (["estimate", "-m", "llama-3.1-8b", "-g", "h100-sxm", "--weights", "int3"], "int4"),
        (["estimate", "-m", "llama-3.1-8b", "-g", "h100-sxm", "--format", "xml"], "markdown"),
        (["estimate", "-m", "llama-3.1-8b", "-g", "h100-sxm", "--gpus", "0"], "--gpus"),
        (["estimate", "-m", "llama-3.1-8b", "-g", "h100-sxm", "--cached-prefix", "5000"], "--cached-prefix"),
        (["estimate", "-m", "llama-3.1-8b", "-g", "h100-sx"], "did you mean h100-sxm?"),
        (["estimate", "-m", "lama-3.1-8b", "-g", "h100-sxm"], "did you mean llama-3.1-8b?"),
        (["estimate", "-m", "llama-3.1-8b", "-g", "h100"], "did you mean one of h100-nvl, h100-pcie, h100-sxm?"),
        (["estimate", "-m", "", "-g", "h100-sxm"], "no model given"),
        (["sweep", "-m", "llama-3.1-8b", "-g", "h100-sxm", "-b", "1,x"], "--batch"),
        (["estimate", "-m", "llama-3.1-8b", "-g", "l4", "--compute-dtype", "fp4"], "--compute-dtype"),
        # the same range whichever command takes the flag (compare said only "must be above 0")
        (
            ["compare", "-m", "llama-3.1-8b", "-g", "h100-sxm", "--gpus", "0"],
            "--gpus: must be an integer from 1 to 4,096",
        ),
        (["compare", "-m", "llama-3.1-8b", "-g", "h100-sxm", "--gpus", "h100-sxm=5000"], "from 1 to 4,096 (got 5000)"),
        (
            ["measure", "-m", "llama-3.2-1b", "--layers", "0", "--device", "cpu"],
            "--layers: llama-3.2-1b has 16 layers; give 1..16",
        ),
    ],
)
def test_bad_flags_get_one_line_and_exit_2(cli, args, needle):
    r = cli(*args)
    assert r.exit_code == 2
    assert needle in r.stderr and len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr


COMMANDS = [["specs", "list"], ["specs", "show"], ["specs", "validate"], ["specs", "import"], ["estimate"],
            ["compare"], ["sweep"], ["plan"], ["measure"], ["calibrate"], ["validate"]]  # fmt: skip


@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
def test_every_command_has_help_with_an_example(cli, command):
    r = cli(*command, "--help")
    assert r.exit_code == 0, r.stderr
    assert "Example: tokcost" in r.stdout


@pytest.mark.slow  # a fresh interpreter; the quick tier keeps test_startup's import checks of estimate
def test_estimate_does_not_import_torch():
    code = (
        "import sys\nfrom tokcost.cli.app import main\n"
        "main(['estimate', '-m', 'llama-3.1-8b', '-g', 'h100-sxm', '--format', 'json'])\n"
        "assert 'torch' not in sys.modules, 'torch imported'\nprint('ok')"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip().endswith("ok")


@pytest.mark.slow  # a fresh interpreter; the quick tier runs `python -m tokcost` in test_bad_inputs
def test_python_dash_m_runs():
    out = subprocess.run([sys.executable, "-m", "tokcost", "specs", "list", "--format", "json"],
                         capture_output=True, text=True)  # fmt: skip
    assert out.returncode == 0 and "h100-sxm" in json.loads(out.stdout)["gpus"]


def test_built_in_names_ignore_case(cli):
    assert cli("estimate", "-m", "Llama-3.1-8B", "-g", "H100-SXM", "--format", "json").json()["gpu"] == "h100-sxm"


def test_a_gpu_file_with_a_typo_is_still_checked_as_a_gpu(cli, tmp_path):
    spec = cli("specs", "show", "l4", "--format", "json").json()
    spec["memory_bandwith_gb_s"] = spec.pop("memory_bandwidth_gb_s")
    path = tmp_path / "typo.yaml"
    path.write_text(yaml.safe_dump(spec))
    r = cli("specs", "validate", str(path))
    assert r.exit_code == 2 and "memory_bandwith_gb_s" in r.stdout and "memory_bandwidth_gb_s" in r.stdout


@pytest.mark.parametrize("width", [40, 60, 90, 140])
@pytest.mark.parametrize(
    "args",
    [
        ("estimate", "-m", "llama-3.1-70b", "-g", "h100-sxm", "--tp", "4", "--journey"),
        ("compare", "-m", "llama-3.1-8b,mixtral-8x7b", "-g", "h100-sxm,h200,l40s"),
        ("sweep", "-m", "llama-3.1-8b", "-g", "h100-sxm", "-b", "1,64,4096"),
    ],
)
def test_tables_never_cut_a_value_at_any_width(cli, monkeypatch, width, args):
    monkeypatch.setenv("COLUMNS", str(width))
    r = cli(*args)
    assert r.exit_code == 0, r.stderr
    assert "…" not in r.stdout
    box = [line for line in r.stdout.splitlines() if line[:1] in "┏┃┡│└"]
    assert box and all(len(line) <= width for line in box)  # the table fits; nothing is cropped at the edge
    if width < 90:
        assert "left out at" in r.stdout  # and says which columns it left out


def test_gpus_with_pipeline_stages_leaves_the_tensor_parallel_degree(cli):
    # --gpus is GPUs per replica (tp x pp x dp): 8 GPUs in 2 pipeline stages run TP 4 in each, as --tp 4 --pp 2 does
    by_gpus = cli("compare", "-m", "llama-3.1-70b", "-g", "h100-sxm", "--gpus", "8", "--pp", "2", "-f", "json")
    by_tp = cli("compare", "-m", "llama-3.1-70b", "-g", "h100-sxm", "--tp", "4", "--pp", "2", "-f", "json")
    assert by_gpus.exit_code == by_tp.exit_code == 0, by_gpus.stderr
    assert by_gpus.json() == by_tp.json() and "TP 4 x PP 2" in json.dumps(by_gpus.json())


@pytest.mark.parametrize("command", [("compare",), ("plan", "--rate", "1")])
def test_two_gpus_of_one_name_are_refused(cli, tmp_path, command):
    # a custom GPU file that kept a built-in's name (as `specs show h100-sxm -f yaml` writes it) would print as a
    # second h100-sxm row with other numbers
    mine = tmp_path / "mine.yaml"
    mine.write_text(
        cli("specs", "show", "h100-sxm", "-f", "yaml").stdout.replace(
            "price_per_hour_usd: 3.78", "price_per_hour_usd: 2.5"
        )
    )
    r = cli(command[0], "-m", "llama-3.1-8b", "-g", f"h100-sxm,{mine}", *command[1:])
    assert r.exit_code == 2 and "--gpu: two" in r.stderr and "named 'h100-sxm'" in r.stderr, r.stderr


def test_a_format_given_twice_in_another_case_is_priced_once(cli):
    rows = cli("compare", "-m", "llama-3.1-8b", "-g", "h100-sxm", "--weights", "bf16,BF16,Fp8", "-f", "json")
    assert [(r["weights"], r["kv_dtype"]) for r in rows.json()["rows"]] == [("bf16", "bf16"), ("fp8", "bf16")]
    points = cli("sweep", "-m", "llama-3.1-8b", "-g", "h100-sxm", "--kv-dtype", "fp8,FP8", "-b", "1", "-f", "csv")
    assert len(points.stdout.strip().splitlines()) == 2  # the header and one point
    plan = cli("plan", "-m", "llama-3.1-8b", "-g", "h100-sxm", "--tp", "1", "--rate", "2", "--weights", "FP8,fp8",
               "-f", "json")  # fmt: skip
    assert [c["weights"] for c in plan.json()["configs"]] == ["fp8"]


def test_specs_show_gives_an_mla_model_its_mla_dims_not_hidden_over_heads(cli):
    # DeepSeek-V3 showed head_dim 56 (7168 / 128), a dimension of none of its tensors: q/k are 128 + 64, v 128
    data = cli("specs", "show", "deepseek-v3", "--format", "json").json()
    assert "head_dim" not in data and data["mla"]["nope_head_dim"] + data["mla"]["rope_head_dim"] == 192
    assert data["kv_bytes_per_token"] == 61 * (512 + 64) * 2  # one latent and its rope key per layer, at bf16


def test_compare_rows_carry_the_workload_they_were_priced_at(cli):
    # an audit: compare's JSON and CSV had no batch or prompt, so a pasted CSV did not say what it priced
    rows = cli("compare", "-m", "llama-3.1-8b", "-g", "h100-sxm,h200", "-b", "8", "-p", "4096", "-f", "json").json()
    for row in rows["rows"]:
        assert (row["batch"], row["prompt_tokens"], row["output_tokens"], row["cached_prefix_tokens"]) == (
            8,
            4096,
            256,
            0,
        )
    header = cli("compare", "-m", "llama-3.1-8b", "-g", "h100-sxm", "-f", "csv").stdout.splitlines()[0].split(",")
    assert {"batch", "prompt_tokens", "output_tokens"} <= set(header)
