"""Start-up: each run imports only its command, --version imports nothing heavy, built-in YAML takes libyaml's path
with the same result as the strict loader. (Timings live in benchmarks/bench_startup.py, never here.)"""

from __future__ import annotations

import importlib
import inspect
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import typer
import yaml
from tiers import slow_except

from tokcost import bundle, files
from tokcost.cli.commands import COMMANDS
from tokcost.files import BUILTIN_FOLDERS, is_builtin, load_mapping
from tokcost.yaml_read import BuiltinLoader, SpecLoader

ROOT = Path(__file__).resolve().parents[1]
HEAVY = ("torch", "transformers", "matplotlib", "numpy")


def _modules_after(code: str) -> set[str]:
    """The modules a fresh interpreter holds after running `code` (which prints nothing else on stdout)."""
    tail = "\nimport json, sys\nsys.__stdout__.write(json.dumps(sorted(sys.modules)))\n"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "120"}
    run = subprocess.run([sys.executable, "-c", code + tail], capture_output=True, text=True, env=env, cwd=ROOT)
    assert run.returncode == 0, run.stderr
    return set(json.loads(run.stdout.splitlines()[-1]))


def _main(*args: str) -> str:
    return (
        "import contextlib, io\nfrom tokcost.cli.app import main\n"
        f"with contextlib.redirect_stdout(io.StringIO()):\n    assert main({list(args)!r}) == 0\n"
    )


@pytest.mark.parametrize("name", list(COMMANDS))
def test_each_listed_summary_is_the_first_line_of_the_commands_help(name):
    entry = COMMANDS[name]
    target = getattr(importlib.import_module(entry.module), entry.attribute)
    doc = target.info.help if isinstance(target, typer.Typer) else inspect.getdoc(target)
    assert entry.summary == doc.splitlines()[0]


def test_root_help_lists_every_command_without_importing_one(cli):
    result = cli("--help")
    assert result.exit_code == 0, result.stderr
    text = " ".join(result.stdout.replace("│", " ").split())
    for name, entry in COMMANDS.items():
        assert f"{name} {entry.summary.split(' Example:')[0]}" in text, name
    loaded = _modules_after(_main("--help"))
    assert not {entry.module for entry in COMMANDS.values()} & loaded


def test_estimate_imports_its_command_only_and_nothing_heavy():
    loaded = _modules_after(_main("estimate", "-m", "llama-3.1-8b", "-g", "h100-sxm"))
    assert "tokcost.cli.estimate_cmd" in loaded
    assert not {m.split(".")[0] for m in loaded} & set(HEAVY)
    assert not {m for m in loaded if m.startswith(("tokcost.serving", "tokcost.measure", "tokcost.validation"))}
    others = {entry.module for name, entry in COMMANDS.items() if name != "estimate"}
    assert not others & loaded
    assert "tokcost.plots.roofline" not in loaded  # no chart module without --plot
    assert "yaml" not in loaded  # the built-in specs come parsed from their bundle


@pytest.mark.slow  # a fresh interpreter; the quick tier keeps the estimate and --help import checks
def test_machine_readable_output_starts_without_rich():
    loaded = _modules_after(_main("estimate", "-m", "llama-3.1-8b", "-g", "h100-sxm", "-f", "json"))
    assert not {m for m in loaded if m.split(".")[0] == "rich"}


def test_version_imports_neither_typer_rich_pydantic_nor_yaml():
    code = (
        "import sys\nsys.argv = ['tokcost', '--version']\nfrom tokcost.cli.launch import run\n"
        "import atexit, json\natexit.register(lambda: sys.stderr.write(json.dumps(sorted(sys.modules))))\nrun()\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=ROOT)
    assert (out.returncode, out.stdout) == (0, "tokcost 0.1.0\n")
    loaded = {m.split(".")[0] for m in json.loads(out.stderr)}
    assert not loaded & {"typer", "rich", "pydantic", "yaml", *HEAVY}


def test_version_through_the_app_prints_the_same_line(cli):
    assert (cli("--version").exit_code, cli("--version").stdout) == (0, "tokcost 0.1.0\n")


def test_a_command_is_loaded_when_resolved_and_kept(cli):
    from tokcost.cli.app import cli_command

    root = cli_command()
    ctx = root.make_context("tokcost", ["sweep", "--help"], resilient_parsing=True)
    listed = root.commands["sweep"]
    name, command, rest = root.resolve_command(ctx, ["sweep", "-b", "1"])
    assert (name, rest) == ("sweep", ["-b", "1"])
    assert command is not listed and command is root.commands["sweep"]
    assert {p.name for p in command.params} >= {"model", "gpu", "batch", "context"}


def _typed(value):
    """A value with its types spelled out, so that 1 and 1.0 (and True) never compare equal."""
    if isinstance(value, dict):
        return {k: _typed(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_typed(v) for v in value]
    return (type(value).__name__, value)


BUILTIN_FILES = sorted(p for folder in BUILTIN_FOLDERS for p in folder.rglob("*.yaml"))
# the strict loader spends 0.3-1 s on each data file past 100 kB: those run in the whole suite, the specs in both tiers
SPEC_FILES = [p for p in BUILTIN_FILES if p.stat().st_size < 100_000]


def test_every_package_data_file_is_a_builtin():
    names = {p.relative_to(ROOT / "tokcost").as_posix() for p in BUILTIN_FILES}
    assert {"specs/gpus/h100-sxm.yaml", "specs/models/llama-3.1-8b.yaml", "specs/engines/generic.yaml",
            "specs/networks/ib-ndr-400.yaml", "validation/published.yaml"} <= names  # fmt: skip
    assert all(is_builtin(p) for p in BUILTIN_FILES)


@pytest.mark.parametrize(
    "path", slow_except(SPEC_FILES, BUILTIN_FILES), ids=lambda p: p.relative_to(ROOT / "tokcost").as_posix()
)
def test_libyaml_path_reads_each_builtin_exactly_as_the_strict_loader(path, tmp_path):
    copy = tmp_path / path.name  # the same file outside the package is a user file: the strict loader reads it
    copy.write_bytes(path.read_bytes())
    assert is_builtin(path) and not is_builtin(copy)
    text = path.read_text(encoding="utf-8")
    assert _typed(yaml.load(text, Loader=BuiltinLoader)) == _typed(load_mapping(copy))  # noqa: S506 - safe loaders


def _spy_yaml(monkeypatch):
    """The `builtin` flag of each YAML parse load_mapping makes, recorded."""
    used = []
    real = files._load_yaml

    def spy(text, where, builtin):
        used.append(builtin)
        return real(text, where, builtin)

    monkeypatch.setattr(files, "_load_yaml", spy)
    return used


def test_a_builtin_spec_comes_from_the_bundle_with_no_yaml_parsed(tmp_path, monkeypatch):
    used = _spy_yaml(monkeypatch)
    builtin = ROOT / "tokcost" / "specs" / "gpus" / "h100-sxm.yaml"
    copy = tmp_path / "h100-sxm.yaml"
    copy.write_bytes(builtin.read_bytes())
    first, user = load_mapping(builtin), load_mapping(copy)
    assert _typed(first) == _typed(user)
    assert used == [False]  # only the user's copy was parsed, by the strict loader
    first["memory_bandwidth_gb_s"] = 0  # each load gets its own mapping: changing one leaves the next whole
    assert load_mapping(builtin) == user


def test_a_builtin_edited_in_place_is_read_from_its_yaml(monkeypatch):
    used = _spy_yaml(monkeypatch)
    builtin = ROOT / "tokcost" / "specs" / "gpus" / "h100-sxm.yaml"
    key = builtin.relative_to(ROOT / "tokcost").as_posix()
    crc, data = bundle._entries("specs")[key]
    monkeypatch.setitem(bundle._entries("specs"), key, [crc ^ 1, {**data, "name": "stale"}])  # its CRC moved on
    assert load_mapping(builtin)["name"] == data["name"]
    assert used == [True]  # parsed from the file, by libyaml with the strict loader's scalars


@pytest.mark.parametrize("folder", ["specs", pytest.param("validation", marks=pytest.mark.slow)])
def test_each_packaged_bundle_is_its_files_as_the_strict_loader_reads_them(folder):
    path = bundle.bundle_path(folder)
    assert path.read_text(encoding="utf-8") == bundle.build(folder), "stale: run python scripts/build_bundle.py"
    entries = bundle._entries(folder)
    held = [p for p in BUILTIN_FILES if p.is_relative_to(ROOT / "tokcost" / folder)]
    assert held and sorted(entries) == [p.relative_to(ROOT / "tokcost").as_posix() for p in held]
    for path in held:
        crc, data = entries[path.relative_to(ROOT / "tokcost").as_posix()]
        text = path.read_text(encoding="utf-8")
        assert crc == bundle.crc(text)
        assert _typed(data) == _typed(yaml.load(text, Loader=SpecLoader)), path  # noqa: S506 - a safe loader


def test_the_published_rows_come_from_their_bundle(monkeypatch):
    used = _spy_yaml(monkeypatch)
    published = ROOT / "tokcost" / "validation" / "published.yaml"
    data = load_mapping(published)
    assert used == [] and len(data["rows"]) > 300  # no YAML parsed: the validation bundle's entry


def test_a_missing_or_broken_bundle_reads_every_spec_from_its_yaml(tmp_path, monkeypatch):
    builtin = ROOT / "tokcost" / "specs" / "models" / "llama-3.1-8b.yaml"
    expected = load_mapping(builtin)
    for text in (None, "{not json", '{"files": 3}'):
        broken = tmp_path / "bundle.json"
        broken.unlink(missing_ok=True)
        if text is not None:
            broken.write_text(text)
        monkeypatch.setattr(bundle, "bundle_path", lambda folder, broken=broken: broken)
        bundle._entries.cache_clear()
        assert load_mapping(builtin) == expected
    bundle._entries.cache_clear()


@pytest.mark.parametrize(
    "text",
    [
        "a: 010\nb: 4:00\nc: yes\nd: on\ne: 1_000\n",  # YAML 1.1's octal, base 60, booleans, underscores: text
        "a: 3.35e12\nb: .inf\nc: -.5\nd: 0x1F\ne: ~\nf: True\ng: 1e3\nh: '12'\ni: 0o17\nj: 0o9\n",
        "a: [1, 2.0, null]\nb: {c: false}\n",
    ],
)
def test_both_loaders_read_scalars_alike(text):
    assert _typed(yaml.load(text, Loader=BuiltinLoader)) == _typed(yaml.load(text, Loader=SpecLoader))  # noqa: S506


def test_yaml_1_2_hex_and_octal_are_integers_and_1_1_octal_is_text():
    # the audit of 2026-12-05: 0x20 read as 32 and 0o40 was refused as text, though both are YAML 1.2 integers
    read = yaml.load("a: 0x20\nb: 0o40\nc: 040\nd: 0o48\n", Loader=SpecLoader)  # noqa: S506
    assert read == {"a": 32, "b": 32, "c": "040", "d": "0o48"}


@pytest.mark.parametrize("text", ["a: 1\na: 2\n", "? [a]\n: 1\n", "1: x\n", f"a: {'9' * 101}\n"])
def test_both_loaders_refuse_duplicate_keys_keys_that_are_not_text_and_long_numbers(text):
    for loader in (SpecLoader, BuiltinLoader):
        with pytest.raises(yaml.MarkedYAMLError):
            yaml.load(text, Loader=loader)  # noqa: S506


def _launched(env_value: str | None) -> tuple[set[str], str]:
    """(modules loaded, the plugin loader's file) after `tokcost specs list` through the console script's run()."""
    code = (
        "import sys, json, contextlib, io\nsys.argv = ['tokcost', 'specs', 'list']\n"
        "from tokcost.cli.launch import run\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    try:\n        run()\n    except SystemExit as exit:\n        assert not exit.code, exit.code\n"
        "loader = sys.modules['pydantic.plugin._loader']\n"
        "sys.__stdout__.write(json.dumps([sorted(sys.modules), getattr(loader, '__file__', None) or '']))\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "PYDANTIC_DISABLE_PLUGINS"}
    if env_value is not None:
        env["PYDANTIC_DISABLE_PLUGINS"] = env_value
    run = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env={**env, "PYTHONPATH": str(ROOT)}, cwd=ROOT
    )
    assert run.returncode == 0, run.stderr
    modules, loader_file = json.loads(run.stdout.splitlines()[-1])
    return set(modules), loader_file


def test_the_cli_answers_pydantics_plugin_lookup_without_reading_package_metadata():
    modules, loader_file = _launched(None)
    assert loader_file == ""  # the stand-in, not pydantic's module
    assert "importlib.metadata" not in modules


def test_a_user_who_enables_pydantic_plugins_gets_pydantics_own_loader():
    modules, loader_file = _launched("")  # set, and naming no plugin to disable: plugins run
    assert loader_file.endswith("_loader.py")
    assert "importlib.metadata" in modules


def test_the_stand_in_gives_what_pydantic_imports_from_its_loader_and_the_same_answer(monkeypatch):
    import re

    import pydantic
    from pydantic.plugin import _loader

    from tokcost.cli import launch

    package = Path(pydantic.__file__).parent
    wanted = {name for path in package.rglob("*.py")
              for group in re.findall(r"from \.+(?:plugin\.)?_loader import ([\w, ]+)", path.read_text())
              for name in group.replace(" ", "").split(",")}  # fmt: skip
    assert wanted == {"get_plugins"}  # a new name pydantic reads from its loader needs the stand-in to give it
    monkeypatch.setenv("PYDANTIC_DISABLE_PLUGINS", "__all__")
    monkeypatch.delitem(sys.modules, "pydantic.plugin._loader")
    launch.skip_plugin_loader()
    stand_in = sys.modules["pydantic.plugin._loader"]
    assert tuple(stand_in.get_plugins()) == tuple(_loader.get_plugins()) == ()
