"""Flags that would be ignored, and messages that say the right thing once (issue 22, classes 3 and 5).

A flag that asks for something that will not happen is refused before any work; one that describes hardware
the layout never uses is kept with a warning. A key is never said twice, a name of another kind says what it
is, a user's name cannot split a row or a warning, counts print as integers, and a request past the model's
context says so in the table itself.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tokcost.errors import SpecError

ROOT = Path(__file__).resolve().parents[1]
M, G = "llama-3.1-8b", "h100-sxm"
ODD_MODEL = """\
name: "evil | name | x"
layers: 4
hidden_size: 512
attention_heads: 8
kv_heads: 2
intermediate_size: 1536
vocab_size: 32000
max_context: 4096
"""


def test_a_key_is_never_said_twice():
    assert str(SpecError("rows.yaml", "rows: give a non-empty list", field="rows")) == (
        "rows.yaml: rows: give a non-empty list"
    )
    assert (
        str(SpecError("rows.yaml", "give a non-empty list", field="rows")) == "rows.yaml: rows: give a non-empty list"
    )


def test_validate_data_without_rows_names_the_key_once(cli, tmp_path):
    data = tmp_path / "rows.yaml"
    data.write_text("rows: []\n")
    r = cli("validate", "--data", str(data))
    assert r.exit_code == 2 and r.stderr == f"error: {data}: rows: give a non-empty list\n"


@pytest.mark.parametrize(
    "args",
    [
        ("estimate", "-m", M, "-g", G, "--network", "roce-400"),
        ("compare", "-m", M, "-g", f"{G},h200", "--network", "roce-400"),
        ("sweep", "-m", M, "-g", G, "-b", "1,8", "--network", "roce-400"),
    ],
)
def test_a_network_no_layout_crosses_is_kept_with_a_warning(cli, args):
    r = cli(*args)
    assert r.exit_code == 0, r.stderr
    assert "warning: --network roce-400: the layout (1 GPU) stays inside one node of 8; the network is not used" in (
        r.stderr
    )
    across = cli(*args, "--tp", "16") if args[0] != "compare" else cli(*args, "--gpus", "16")
    assert "llama-3.1-8b" in across.stdout + across.stderr
    assert "the network is not used" not in across.stderr  # 16 GPUs span two nodes: the network carries traffic


def test_measure_refuses_a_cpu_graph_and_a_long_prompt_before_torch_loads(tmp_path):
    code = (
        "import sys, io, contextlib\n"
        "from tokcost.cli.app import main\n"
        "for argv in (['measure', '-m', 'llama-3.2-1b', '--device', 'cpu', '--mode', 'graph'],\n"
        "             ['measure', '-m', 'llama-2-7b', '--device', 'cpu', '-p', '200000'],\n"
        "             ['calibrate', '--device', 'cpu', '--force']):\n"
        "    with contextlib.redirect_stderr(io.StringIO()):\n"
        "        assert main(argv) == 2, argv\n"
        "print('torch' in sys.modules)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"  # refused before any work: torch never imported


def test_a_name_of_another_kind_says_what_it_is(cli):
    for args, message in [
        (("estimate", "-m", M, "-g", "ib-ndr-400"), "ib-ndr-400: this is a built-in network, not a GPU; pass it to "
                                                   "--network (tokcost specs show ib-ndr-400 shows it)"),
        (("estimate", "-m", "vllm", "-g", G), "vllm: this is a built-in serving engine, not a model; pass it to "
                                             "--engine"),
    ]:  # fmt: skip
        r = cli(*args)
        assert r.exit_code == 2 and r.stderr.startswith(f"error: {message}"), r.stderr
        assert "rtx-4090" not in r.stderr  # a near spelling of another kind is never suggested


def test_specs_show_and_list_every_kind(cli):
    network = cli("specs", "show", "ib-ndr-400", "-f", "json").json()
    assert (network["name"], network["gb_s"], network["kind"]) == ("ib-ndr-400", 50.0, "infiniband")
    assert cli("specs", "show", "vllm", "-f", "json").json()["name"] == "vllm"
    assert "network spec: ib-ndr-400" in cli("specs", "show", "ib-ndr-400").stdout
    listed = cli("specs", "list", "--kind", "networks", "-f", "json").json()
    assert listed == {"networks": ["eth-100", "ib-hdr-200", "ib-ndr-400", "ib-xdr-800", "roce-200", "roce-400"]}
    assert "vllm" in cli("specs", "list", "--kind", "engines").stdout
    template = cli("specs", "show", "roce-400", "-f", "yaml").stdout
    assert "--network my-network.yaml" in template and "name: roce-400" in template


def test_specs_show_prints_counts_as_integers(cli):
    # 2 x 32 layers x 8 KV heads x 128 x 2 bytes = 131,072 bytes per token (the DESIGN.md formula)
    assert cli("specs", "show", M, "-f", "json").json()["kv_bytes_per_token"] == 131_072
    assert isinstance(cli("specs", "show", M, "-f", "json").json()["kv_bytes_per_token"], int)
    row = next(line for line in cli("specs", "show", M).stdout.splitlines() if "kv_bytes_per_token" in line)
    assert "131,072" in row and "131072.0" not in row


def test_a_name_with_a_pipe_keeps_its_row(cli, tmp_path):
    # (a newline is refused in the spec itself: test_bad_inputs.py, a name is one line of printable text)
    model = tmp_path / "odd.yaml"
    model.write_text(ODD_MODEL)
    md = cli("compare", "-m", f"{model},llama-3.2-1b", "-g", G, "-f", "markdown")
    assert md.exit_code == 0, md.stderr
    rows = [line for line in md.stdout.splitlines() if line.startswith("| ")]
    assert len(rows) == 3 and rows[1].startswith("| evil \\| name \\| x | h100-sxm |")  # header + two rows
    assert {len(re.split(r"(?<!\\)\|", line)) for line in rows} == {15}  # 13 cells (the 80% band too) between pipes
    table = cli("compare", "-m", str(model), "-g", G)
    assert "evil | name | x" in table.stdout
    warned = cli("estimate", "-m", str(model), "-g", G, "-p", "5000")  # past its 4,096-token context: a warning
    assert all(line.startswith("warning: ") for line in warned.stderr.splitlines()) and "evil | name" in warned.stderr


def test_a_request_past_the_context_says_so_in_the_table(cli):
    r = cli("estimate", "-m", M, "-g", G, "-p", "200000")
    assert r.exit_code == 0
    assert "past the context: the prompt alone (200,000 tokens) exceeds llama-3.1-8b's 131,072" in r.stdout
    assert "max_context" in r.stderr  # and the warning, as before
    inside = cli("estimate", "-m", M, "-g", G, "-p", "130000", "-o", "1000")
    assert "past the context: prompt + output (131,000 tokens)" not in inside.stdout
    assert "past the context" not in cli("estimate", "-m", M, "-g", G).stdout


def test_a_gpu_listed_twice_in_two_cases_is_refused_with_what_to_do(cli):
    r = cli("compare", "-m", "llama-3.1-8b", "-g", "h100-sxm,H100-SXM")
    assert r.exit_code == 2 and r.stdout == ""
    assert r.stderr == ("error: --gpu: two specs are named 'h100-sxm': list each once (names match in any case), and "
                        "give a spec file a name of its own (its name: key)\n")  # fmt: skip


@pytest.mark.parametrize(
    ("args", "flag", "what"),
    [
        (("compare", "-m", "llama-3.1-8b", "-g", "h100-sxm,h100-sxm", "--gpus", "1,2"), "--gpu", "specs"),
        (("compare", "-m", "llama-3.1-8b,llama-3.1-8b", "-g", "h100-sxm"), "--model", "specs"),
        (("plan", "-m", "llama-3.1-8b", "-g", "h100-sxm,h100-sxm", "--rate", "1"), "--gpu", "specs"),
    ],
)
def test_a_spec_listed_twice_in_one_case_is_refused_as_in_two(cli, args, flag, what):
    # it was merged without a word, so `--gpus 1,2` then read "2 values for 1 GPUs", and a second price was lost
    r = cli(*args)
    assert r.exit_code == 2 and r.stdout == ""
    name = "llama-3.1-8b" if flag == "--model" else "h100-sxm"
    assert r.stderr.startswith(
        f"error: {flag}: two {what} are named {name!r}: list each once (names match in any case)"
    )
    assert len(r.stderr.splitlines()) == 1


def test_names_differing_only_in_the_list_still_compare(cli):
    r = cli("compare", "-m", "llama-3.1-8b", "-g", "h100-sxm,h200", "--gpus", "1,2", "-f", "json")
    assert r.exit_code == 0
    assert sorted((row["gpu"], row["gpus"]) for row in r.json()["rows"]) == [("h100-sxm", 1), ("h200", 2)]


def test_compare_takes_all_as_plan_does(cli):
    from tokcost.hardware.library import builtin_gpus

    r = cli("compare", "-m", "llama-3.1-8b", "-g", "all", "-f", "json")
    assert r.exit_code == 0, r.stderr
    assert [row["gpu"] for row in r.json()["rows"]] == builtin_gpus()  # one row each, in the built-ins' order


def test_the_smallest_layout_advice_says_what_it_leaves_out():
    # Mixtral on 2 x H100 with EP 2 and 8 redundant experts does not fit; "needs 2 GPUs (TP 2)" had read as the layout
    # already in use: the search tries plain TP and pipeline layouts, without the copies that overflow it
    from tokcost.engine.estimate import estimate
    from tokcost.engine.workload import Workload
    from tokcost.hardware.library import load_gpu
    from tokcost.models.library import load_model

    e = estimate(load_model("mixtral-8x7b"), load_gpu("h100-sxm"), Workload(tp=2, ep=2, redundant_experts=8))
    line = next(w for w in e.warnings if w.startswith("does not fit"))
    assert line.endswith("needs 2 GPUs (TP 2), without this layout's redundant experts and expert parallelism")
    plain = estimate(load_model("mixtral-8x7b"), load_gpu("h100-sxm"), Workload())
    assert next(w for w in plain.warnings if w.startswith("does not fit")).endswith("needs 2 GPUs (TP 2)")


def test_a_tp_refusal_lists_every_valid_degree_past_64_too():
    # DeepSeek-V3's 128 heads: the list stopped at 64 while --tp 128 runs
    from tokcost.engine.layout import Layout, layout_problem
    from tokcost.models.library import load_model

    problem = layout_problem(load_model("deepseek-v3"), Layout(tp=3))
    assert problem is not None and problem.endswith("valid degrees: 1, 2, 4, 8, 16, 32, 64, 128")
    assert layout_problem(load_model("deepseek-v3"), Layout(tp=128)) is None


def test_a_gpu_without_link_is_refused_for_any_layout_of_two_gpus(cli, tmp_path):
    # a pipeline of 2 on a spec with no link was refused as "--tp: ..."; plan's row named neither spec nor fix
    spec = tmp_path / "mini.yaml"
    spec.write_text("name: no-link-gpu\nsource: hand-written\nmemory_gb: 80\nmemory_bandwidth_gb_s: 3350\n"
                    "peak_tflops:\n  bf16: 989.4\ntdp_w: 700\n")  # fmt: skip
    r = cli("estimate", "-m", "llama-3.1-8b", "-g", str(spec), "--pp", "2")
    assert r.exit_code == 2 and "--gpus: this GPU spec has no link" in r.stderr and "2 GPUs (--tp, --pp" in r.stderr
    r = cli("plan", "-m", "llama-3.1-8b", "-g", str(spec), "--rate", "1", "--tp", "2")
    assert r.exit_code == 2 and "no-link-gpu's spec lists none (add link: {kind" in r.stderr and "(--tp 1)" in r.stderr
