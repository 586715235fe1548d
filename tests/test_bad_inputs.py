"""The bad-input corpus: every mistake in tests/bad_inputs/cases.yaml gets one helpful line and exit code 2.

A case names the file (or flag) at fault, the key, and what is allowed; nothing in a spec ever runs.
Files awkward to commit (binary, UTF-16, oversized, a FIFO, a folder) are written here into tmp_path.
"""

from __future__ import annotations

import functools
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from tiers import slow_except

ROOT = Path(__file__).parents[1]
CORPUS = ROOT / "tests" / "bad_inputs"
CASES = yaml.safe_load((CORPUS / "cases.yaml").read_text(encoding="utf-8"))
MAX_LINES = 3
PWNED = "tokcost-was-pwned"  # what the !!python/ cases would create if their tag ever ran

VALID_MODEL = """\
name: tiny-llama
layers: 4
hidden_size: 512
attention_heads: 8
kv_heads: 2
intermediate_size: 1536
vocab_size: 32000
max_context: 4096
"""


@functools.cache
def _first_shipped_row() -> dict:
    """The first row of the shipped published.yaml, read once (libyaml where PyYAML has it: 0.75 MB)."""
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    text = (ROOT / "tokcost" / "validation" / "published.yaml").read_text(encoding="utf-8")
    return yaml.load(text, Loader=loader)["rows"][0]


def _rows(**changes: object) -> str:
    """A published-measurements file of one row: the first shipped row with `changes`."""
    return yaml.safe_dump({"rows": [{**_first_shipped_row(), **changes}]})


def _fifo(path: Path) -> None:
    if not hasattr(os, "mkfifo"):
        pytest.skip("no FIFOs on this platform")
    os.mkfifo(path)  # reading it would block forever: tokcost must refuse it unread


# Files awkward to commit: each writes the case's file at `path` ("nothing" leaves it absent)
MAKE = {
    "binary": lambda p: p.write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(range(256))),
    "utf16": lambda p: p.write_bytes(VALID_MODEL.encode("utf-16")),  # with a byte-order mark, as Windows saves it
    "latin1": lambda p: p.write_bytes(VALID_MODEL.replace("tiny-llama", "tiny-llama-caf\xe9").encode("latin-1")),
    "oversized": lambda p: p.write_text(VALID_MODEL + "notes: " + "x" * 1_100_000 + "\n"),
    "many_aliases": lambda p: p.write_text("a: &a 1\nb: [" + ", ".join(["*a"] * 150) + "]\n"),
    # 200 levels of block mappings: no brackets, so only the parse can catch it
    "deep_block": lambda p: p.write_text(
        "a:\n" + "".join(" " * i + "b:\n" for i in range(1, 200)) + " " * 200 + "c: 1\n"
    ),
    "directory": Path.mkdir,
    "fifo": _fifo,
    "nothing": lambda p: None,
    "huge_int": lambda p: p.write_text(
        "name: x\nsource: y\nlayers: " + "9" * 5000 + "\n"
    ),  # int() would take 4,300 max
    "huge_hex": lambda p: p.write_text("name: x\nsource: y\nlayers: 0x" + "f" * 5000 + "\n"),
    # ~900 KB of base 60: YAML 1.1 spent 30 s converting it; YAML 1.2 reads text
    "base60_big": lambda p: p.write_text(VALID_MODEL.replace("layers: 4", "layers: " + ":".join(["59"] * 290_000))),
    "hf_huge_int": lambda p: p.write_text('{"model_type": "llama", "num_hidden_layers": ' + "9" * 5000 + "}"),
    "many_values": lambda p: p.write_text("name: x\nlist: [" + "1, " * 25_000 + "]\n"),
    "dangling_symlink": lambda p: p.symlink_to(p.parent / "no-such-target.yaml"),
    "upper_json": lambda p: p.write_text((CORPUS / "hf_duplicate_key.json").read_text()),
    "data_row_fp4": lambda p: p.write_text(_rows(id="bad-row", compute="fp4")),
    "data_row_bool": lambda p: p.write_text(_rows(id="bool-row", gpus=True)),
    "data_row_two_nodes": lambda p: p.write_text(_rows(id="wide-row", gpus=16)),
    "data_no_rows": lambda p: p.write_text("rows: []\n"),
    # plan traces: one line past the bound on requests; a bad second line; lengths with no arrival times
    "trace_too_long": lambda p: p.write_text('{"prompt_tokens": 100, "output_tokens": 10}\n' * 100_001),
    "trace_bad_row": lambda p: p.write_text('{"prompt_tokens": 10, "output_tokens": 5}\n{"prompt_tokens": 0}\n'),
    "trace_no_arrival": lambda p: p.write_text('{"prompt_tokens": 10, "output_tokens": 5}\n'),
    "trace_one_instant": lambda p: p.write_text(
        '{"prompt_tokens": 10, "output_tokens": 5, "arrival_s": 1}\n'
        '{"prompt_tokens": 20, "output_tokens": 5, "arrival_s": 1}\n'
    ),
}


def _hf(argv: list[str]) -> list[str]:
    """`{hf}` stands for the HuggingFace fixtures' folder."""
    return [arg.replace("{hf}", str(ROOT / "tests" / "assets" / "hf")) for arg in argv]


def _argv(case: dict, tmp_path: Path) -> tuple[list[str], str | None]:
    """The case's argv with {file} filled in, and the file's name the message must mention."""
    name = case.get("file")
    if name is None:
        return _hf(case["argv"]), None
    if "make" in case:
        path = tmp_path / name
        MAKE[case["make"]](path)
    else:
        path = CORPUS / name
    return [str(path) if arg == "{file}" else arg for arg in _hf(case["argv"])], name


def _check(case: dict, code: int, output: str, name: str | None) -> None:
    assert "Traceback" not in output, output
    assert code == 2, f"exit code {code}, want 2:\n{output}"
    lines = output.strip().splitlines()
    assert 1 <= len(lines) <= MAX_LINES, output
    for expected in ([name] if name else []) + case["expect"]:
        assert expected in output, f"{expected!r} not in:\n{output}"
    if "nan" not in case["expect"]:  # NaN is printed only to quote the value at fault
        assert not re.search(r"\bnan\b", output, re.IGNORECASE), output


def test_corpus_is_large_and_every_file_is_used():
    ids = [case["id"] for case in CASES]
    assert len(ids) >= 40 and len(set(ids)) == len(ids)
    used = {case["file"] for case in CASES if "file" in case and "make" not in case}
    on_disk = {p.name for p in CORPUS.iterdir()} - {"cases.yaml"}
    assert on_disk == used, f"unused: {on_disk - used}; missing: {used - on_disk}"


@pytest.mark.parametrize("case", CASES, ids=[case["id"] for case in CASES])
def test_bad_input_gets_one_helpful_line(case, cli, tmp_path, monkeypatch):
    (tmp_path / "case").mkdir()  # generated files go here; the working directory stays empty
    argv, name = _argv(case, tmp_path / "case")
    monkeypatch.chdir(tmp_path)
    r = cli(*argv)
    _check(case, r.exit_code, r.stdout + r.stderr, name)
    assert r.stderr.count("\n") <= MAX_LINES
    assert not (tmp_path / PWNED).exists(), "a YAML tag ran code"


# each a fresh interpreter: the quick tier runs a file's case and a flag's (every case runs in-process above too)
SUBPROCESS_CASES = ["python-tag", "alias-bomb", "utf16-file", "hf-truncated", "batch-zero", "gpu-name-typo"]
QUICK = {"python-tag", "batch-zero"}


@pytest.mark.parametrize("case_id", slow_except(QUICK, SUBPROCESS_CASES))
def test_bad_input_in_a_real_process_prints_no_traceback(case_id, tmp_path):
    case = next(c for c in CASES if c["id"] == case_id)
    argv, name = _argv(case, tmp_path)
    env = {**os.environ, "COLUMNS": "200", "PYTHONPATH": str(Path(__file__).parents[1])}
    proc = subprocess.run(
        [sys.executable, "-m", "tokcost", *argv], capture_output=True, text=True, cwd=tmp_path, env=env, timeout=60
    )
    _check(case, proc.returncode, proc.stdout + proc.stderr, name)
    assert not (tmp_path / PWNED).exists(), "a YAML tag ran code"


# ---- user text prints literally (issue 14, class 2) ----

MARKUP_GPU = """\
name: h100 [sxm]
source: "[link=https://example.com]datasheet[/link]"
memory_gb: 80
memory_bandwidth_gb_s: 3350
peak_tflops: {bf16: 989.4}
notes: "see [/link] and [bold]this[/bold] :smile:"
"""


def test_user_text_is_printed_literally_never_as_markup(cli, tmp_path):
    gpu = tmp_path / "gpu.yaml"
    gpu.write_text(MARKUP_GPU)
    model = tmp_path / "model.yaml"
    model.write_text(VALID_MODEL.replace("tiny-llama", "'tiny [v2]'") + "notes: '[/]'\n")
    r = cli("specs", "validate", str(gpu), str(model))
    assert r.exit_code == 0 and r.stdout == f"{gpu}: OK (gpu h100 [sxm])\n{model}: OK (model tiny [v2])\n"
    shown = cli("specs", "show", str(gpu))
    assert shown.exit_code == 0, shown.stderr
    for text in ("gpu spec: h100 [sxm]", "see [/link] and [bold]this[/bold] :smile:", "[link=https://example.com]"):
        assert text in shown.stdout
    assert "[/]" in cli("specs", "show", str(model)).stdout
    r = cli("estimate", "-m", str(model), "-g", str(gpu))
    assert r.exit_code == 0 and "tiny [v2] on 1x h100 [sxm]" in r.stdout


def test_control_characters_in_user_text_are_shown_escaped(cli, tmp_path):
    gpu = tmp_path / "gpu.yaml"
    gpu.write_text(MARKUP_GPU.replace("see [/link]", "bell\\a and \\e[31mred"))
    out = cli("specs", "show", str(gpu)).stdout
    assert "bell\\x07 and \\x1b[31mred" in out and "\x1b" not in out and "\x07" not in out


# ---- output that cannot be written or encoded (class 3) ----


def _run(*args: str, **kwargs) -> subprocess.CompletedProcess:
    env = {**os.environ, "COLUMNS": "200", "PYTHONPATH": str(ROOT), **kwargs.pop("env", {})}
    return subprocess.run([sys.executable, "-m", "tokcost", *args], env=env, text=True, timeout=60, **kwargs)


def test_stdout_that_cannot_encode_a_character_does_not_crash():
    r = _run("estimate", "-m", "llama-3.1-8b", "-g", "h100-sxm", capture_output=True, env={"PYTHONIOENCODING": "ascii"})
    assert (r.returncode, r.stderr) == (0, "")
    assert "llama-3.1-8b on 1x h100-sxm ? batch 1 ? prompt 1,024" in r.stdout  # "·" could not be encoded


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full")
def test_a_full_stdout_is_one_line_not_a_traceback():
    with open("/dev/full", "w") as full:
        r = _run("specs", "list", stdout=full, stderr=subprocess.PIPE)
    assert (r.returncode, r.stderr) == (2, "error: output: No space left on device\n")


def _closed(fd: int) -> None:  # in the child before exec: the descriptor a shell's `>&-` closes
    os.close(fd)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("args", "fd", "code", "message"),
    [
        (("estimate", "-m", "llama-3.1-8b", "-g", "h100-sxm", "-f", "json"), 1, 2, "error: output: stdout is closed\n"),
        (("sweep", "-m", "llama-3.1-8b", "-g", "h100-sxm", "-f", "csv"), 1, 2, "error: output: stdout is closed\n"),
        (("--version",), 1, 2, "error: output: stdout is closed\n"),  # answered before the app loads
        (("estimate", "-m", "no-such-model", "-g", "h100-sxm"), 2, 2, None),  # the line goes nowhere; the code stays
        (("estimate", "-m", "llama-3.1-405b", "-g", "l4", "-f", "json"), 2, 0, None),  # only a warning: still 0
    ],
)  # fmt: skip
def test_a_closed_stdout_or_stderr_keeps_the_exit_code_and_no_traceback(args, fd, code, message):
    # the audit of 2026-12-05: `>&-` gave an AttributeError traceback (exit 1), `2>&-` exit 1 for any message
    pipes = {"stderr": subprocess.PIPE} if fd == 1 else {"stdout": subprocess.PIPE}  # the other one is closed
    r = _run(*args, preexec_fn=lambda: _closed(fd), **pipes)
    assert r.returncode == code
    if message is not None:
        assert r.stderr == message


@pytest.mark.parametrize("name", ["evil\nlayers: 1", "a\x1b[31mred", "tab\there"])
@pytest.mark.parametrize(("kind", "spec"), [("model", "llama-3.1-8b"), ("gpu", "h100-sxm")])
def test_a_spec_name_with_a_control_character_is_refused(cli, tmp_path, kind, spec, name):
    # the audit of 2026-12-05: `specs validate` took it, and `specs show -f yaml` then wrote a header comment whose
    # newline made a second `layers:` key (an escape reached the terminal)
    shown = cli("specs", "show", spec, "-f", "yaml")
    assert shown.exit_code == 0
    data = yaml.safe_load(shown.stdout)
    data["name"] = name
    path = tmp_path / f"{kind}.yaml"
    path.write_text(yaml.safe_dump(data))
    r = cli("specs", "validate", str(path))
    assert r.exit_code == 2 and "name: a name is one line of printable text" in r.stdout  # validate's one line
    assert len(r.stdout.strip().splitlines()) == 1


def test_a_flat_engine_file_is_told_about_its_own_keys(cli, tmp_path):
    # `specs show vllm -f yaml` writes one era's keys at the top (no `eras:`); the audit of 2026-12-05 found its errors
    # named `eras.main.step_overhead_us`, a key the file does not have
    data = yaml.safe_load(cli("specs", "show", "vllm", "-f", "yaml").stdout)
    assert "eras" not in data and "step_overhead_us" in data
    data["step_overhead_us"] = -1
    path = tmp_path / "engine.yaml"
    path.write_text(yaml.safe_dump(data))
    r = cli("specs", "validate", str(path))
    assert (
        r.exit_code == 2 and f"{path}: step_overhead_us: must be a number from 0" in r.stdout and "eras" not in r.stdout
    )


# ---- specs import: a folder's name never breaks the YAML it writes (class 9) ----


@pytest.mark.parametrize(("folder", "name"), [("evil\nname: pwned", "evil name: pwned"), ("x" * 240, "x" * 200)])
def test_a_folder_name_cannot_inject_a_line_or_outgrow_the_name(cli, tmp_path, folder, name):
    config = tmp_path / folder / "config.json"
    config.parent.mkdir()
    config.write_text((ROOT / "tests" / "assets" / "hf" / "llama.json").read_text())
    r = cli("specs", "import", str(config), "-o", str(tmp_path / "m.yaml"))
    assert r.exit_code == 0, r.stderr
    lines = (tmp_path / "m.yaml").read_text().splitlines()
    assert lines[0].startswith('# imported by tokcost from "') and lines[1].startswith("name: ")
    assert yaml.safe_load("\n".join(lines))["name"] == name
    assert cli("specs", "validate", str(tmp_path / "m.yaml")).exit_code == 0


def test_a_measure_report_passed_as_a_spec_says_what_it_is(cli, tmp_path):
    # the audit of 2026-12-05: `-m run.json` (measure --save's report) answered "model: unknown key; did you mean moe?"
    report = tmp_path / "run.json"
    keys = ("model", "layers", "device", "probes", "allreduce", "datasheet_gpu", "runs", "notes", "complete")
    report.write_text(json.dumps({k: None for k in keys} | {"model": "llama-3.2-1b", "layers": 2, "runs": []}))
    said = f"{report}: this is a measure report (what tokcost measure --save writes), not "
    r = cli("estimate", "-m", str(report), "-g", "h100-sxm")
    assert r.exit_code == 2 and r.stderr == f"error: {said}a tokcost model spec\n"
    r = cli("estimate", "-m", "llama-3.2-1b", "-g", str(report))
    assert r.exit_code == 2 and r.stderr == f"error: {said}a GPU spec\n"


def test_specs_validate_names_each_kind_of_file_by_its_keys(cli):
    # a file's kind follows from the keys only that kind has, never from its name or folder
    engine, network = CORPUS / "engine_profile.yaml", CORPUS / "network_spec.yaml"
    r = cli("specs", "validate", str(engine), str(network))
    assert r.exit_code == 0 and r.stdout == f"{engine}: OK (engine my-engine)\n{network}: OK (network my-fabric)\n"
