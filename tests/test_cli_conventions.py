"""What a shell user expects: completion, help with examples that run, plain usage lines, COLUMNS, YAML templates."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from tokcost.cli.app import EXAMPLES, cli_command
from tokcost.hardware.library import builtin_gpus, load_gpu
from tokcost.models.library import builtin_models, load_model

ROOT = Path(__file__).resolve().parents[1]
NOT_RUN = ("measure", "calibrate", "--install-completion")  # need torch and time, or change the user's shell


def command_paths(command=None, path=()) -> list[tuple[str, ...]]:
    """Every command of the CLI as the words that call it, the root first."""
    command = command or cli_command(loaded=True)
    out = [path]
    for name, sub in getattr(command, "commands", {}).items():
        out += command_paths(sub, (*path, name))
    return out


@pytest.mark.parametrize("path", command_paths(), ids=lambda p: " ".join(p) or "tokcost")
def test_help_has_plain_usage_and_examples(cli, path):
    result = cli(*path, "--help")
    assert result.exit_code == 0, result.stderr
    usage = next(line for line in result.stdout.splitlines() if "Usage:" in line)
    assert "{" not in usage and "<" not in usage, usage  # no {name} placeholders, no <list[Path]>
    assert "<bool>" not in result.stdout  # a flag takes no value
    assert "Examples:\n" in "\n".join(line.strip() for line in result.stdout.splitlines()), path
    after = result.stdout[result.stdout.index("Examples:") :].splitlines()[1:]
    assert after and after[0].strip().startswith(" ".join(("tokcost", *path))), path


def test_each_group_and_command_of_the_app_has_an_examples_section():
    for name, lines in EXAMPLES.items():
        assert lines, name
        assert all(line.startswith("tokcost ") for line in lines), name
    assert set(EXAMPLES) == {"tokcost", *(p[0] for p in command_paths() if p)}


def test_help_honours_columns(cli, monkeypatch):
    monkeypatch.setenv("COLUMNS", "64")
    result = cli("estimate", "--help")
    assert result.exit_code == 0
    assert max(len(line.rstrip()) for line in result.stdout.splitlines()) <= 64


@pytest.mark.slow  # every example of every --help, plots and plans included
def test_examples_run_as_written(cli, tmp_path, monkeypatch):
    pytest.importorskip("matplotlib")  # the examples draw plots
    monkeypatch.chdir(tmp_path)  # the examples write my-gpu.yaml, roofline.png, ...
    ran = 0
    every = [line for lines in EXAMPLES.values() for line in lines]
    for line in sorted(every, key=lambda line: ">" not in line):  # what writes a file runs before what reads it
        words = shlex.split(line.split("#")[0])[1:]
        if any(word in NOT_RUN for word in words) or words[:1] == ["validate"]:  # validate: test_validation
            continue
        target = None
        if ">" in words:
            words, target = words[: words.index(">")], words[words.index(">") + 1]
        result = cli(*words)
        assert result.exit_code == 0, f"{line}: {result.stderr}"
        if target:
            Path(target).write_text(result.stdout)
        ran += 1
    assert ran >= 8
    assert Path("roofline.png").read_bytes()[:4] == b"\x89PNG"
    assert "<svg" in Path("compare.svg").read_text()


def test_shell_completion_completes_commands_and_flags():
    env = {**os.environ, "PYTHONPATH": str(ROOT), "_TOKCOST_COMPLETE": "complete_bash"}

    def complete(words: str) -> list[str]:
        cword = str(len(words.split()) - 1)
        run = subprocess.run([sys.executable, "-m", "tokcost"], env={**env, "COMP_WORDS": words, "COMP_CWORD": cword},
                             capture_output=True, text=True, cwd=ROOT)  # fmt: skip
        return run.stdout.split()

    assert complete("tokcost es") == ["estimate"]
    assert complete("tokcost specs sh") == ["show"]
    assert "--plot" in complete("tokcost estimate --pl")


def test_show_completion_prints_a_script():
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    # typer detects the shell from the parent processes, as when a user types it: a bash runs the command (the
    # second command keeps bash from exec-ing the first), whatever launched the tests
    run = subprocess.run(["bash", "-c", '"$0" -m tokcost --show-completion; exit $?', sys.executable], env=env,
                         capture_output=True, text=True, cwd=ROOT)  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert "_TOKCOST_COMPLETE=complete_bash" in run.stdout


@pytest.mark.parametrize(
    ("name", "loader"),
    [(n, load_model) for n in builtin_models()] + [(n, load_gpu) for n in builtin_gpus()],
)
def test_specs_show_yaml_round_trips_as_a_template(cli, tmp_path, name, loader):
    result = cli("specs", "show", name, "-f", "yaml")
    assert result.exit_code == 0, result.stderr
    assert result.stdout.startswith("# tokcost ")
    path = tmp_path / "mine.yaml"
    path.write_text(result.stdout)
    original, copy = loader(name), loader(str(path))
    assert copy.model_dump() == original.model_dump()
    if hasattr(original, "expected_provenance"):
        assert copy.expected_provenance == original.expected_provenance
    assert cli("specs", "validate", str(path)).exit_code == 0


def test_an_engine_eras_template_names_the_era_and_what_a_file_of_one_era_cannot_carry(cli):
    # `specs show vllm@v0 -f yaml` said "as `tokcost specs show vllm -f yaml` prints it", which prints V1; and
    # llama.cpp's graphs era runs tensor-split stages as its eager era, which a file of one era cannot name
    v0 = cli("specs", "show", "vllm@v0", "-f", "yaml")
    assert v0.exit_code == 0 and "as `tokcost specs show vllm@v0 -f yaml` prints it" in v0.stdout
    graphs = cli("specs", "show", "llama.cpp", "-f", "yaml").stdout
    assert "spec 'llama.cpp@graphs'" in graphs and "runs tensor-split stages as era 'eager'" in graphs
    plain = cli("specs", "show", "torch-compile", "-f", "yaml").stdout  # one era: no @ to name
    assert "as `tokcost specs show torch-compile -f yaml` prints it" in plain and "tensor-split" not in plain


def test_specs_show_prose_is_left_aligned_and_never_cut(cli, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    result = cli("specs", "show", "h100-sxm")
    assert result.exit_code == 0
    assert "…" not in result.stdout
    assert re.search(r"│ name +│ h100-sxm +│", result.stdout)  # left-aligned: the value right after the border
    spec = load_gpu("h100-sxm")
    cells = "".join(line.split("│")[2] for line in result.stdout.splitlines() if line.count("│") == 3)
    squeeze = re.compile(r"\s+")
    assert squeeze.sub("", spec.source) in squeeze.sub("", cells)  # every URL whole, only folded


def test_no_machine_paths_in_built_in_specs():
    machine_path = re.compile(r"(?<![\w.:/~-])(?:~/|/(?:work|home|Users|root|tmp|opt|mnt|var|private|srv)/)|[A-Z]:\\")
    files = sorted((ROOT / "tokcost" / "specs").rglob("*.yaml")) + sorted(
        (ROOT / "tokcost" / "validation").glob("*.yaml")
    )
    assert len(files) > 40
    found = [f"{f.relative_to(ROOT)}: {m.group(0)}" for f in files for m in machine_path.finditer(f.read_text())]
    assert found == []


def test_readme_pictures_exist_for_each_plot_block():
    text = (ROOT / "README.md").read_text()
    images = re.findall(r"<!-- plot: tokcost .*?--plot (\S+) -->", text)
    assert len(images) >= 3
    for image in images:
        assert f"]({image})" in text, image  # the block shows its picture (scripts/update_readme.py)
        assert (ROOT / image).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", image


@pytest.mark.parametrize("name", ["vllm", "vllm@v0", "tensorrt-llm@static", "llama.cpp@eager", "llama.cpp", "sglang",
                                  "generic"])  # fmt: skip
def test_an_engine_era_shown_as_yaml_loads_back_as_a_profile_of_its_own(cli, tmp_path, name):
    # the era as a file (--engine FILE): every value the era prices with, its name the file's
    from tokcost.profiles import load_engine

    result = cli("specs", "show", name, "-f", "yaml")
    assert result.exit_code == 0, result.stderr
    path = tmp_path / "mine.yaml"
    path.write_text(result.stdout)
    assert cli("specs", "validate", str(path)).exit_code == 0
    original, copy = load_engine(name), load_engine(str(path))
    # a file of one era has no other era for a split stage to run as (llama.cpp's graphs era names its eager one)
    assert copy.model_dump(exclude={"era", "tensor_split_era"}) == original.model_dump(
        exclude={"era", "tensor_split_era"}
    )
    assert copy.tensor_split is None


def test_engine_help_names_every_builtin_engine():
    # --engine's help listed 6 of the 9 engines (lmdeploy, tgi and mlc missing): it now names each built-in one
    from tokcost.cli.options import EngineOpt
    from tokcost.eras import builtin_files

    help_text = EngineOpt.__metadata__[0].help
    for name in builtin_files():
        assert re.search(rf"(^|[ :(]){re.escape(name)}[,;@ ]", help_text), name
