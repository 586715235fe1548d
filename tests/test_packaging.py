"""What a user installs works: `pip install .` and the wheel built from the sdist each run every command.

Offline and fast: one sdist and one wheel per session, built without build isolation from a copy of the tree
(no stale build/ folder can leak into them); fresh virtual environments without pip get tokcost installed by
this interpreter's pip with --no-deps, and reach tokcost's dependencies through a .pth line to this
interpreter's site-packages, after their own (so the tokcost imported is the installed one, which is checked).
"""

from __future__ import annotations

import email
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
IGNORED = (".git", ".venv", ".ci-venv", "build", "dist", "*.egg-info", "__pycache__", ".*_cache", ".hypothesis", "docs")

pytestmark = pytest.mark.slow  # not in the quick tier: builds and installs the wheel
pytest.importorskip("setuptools", minversion="77")  # the dev extra's; builds the SPDX license string


def run(args: list[str], cwd: Path, **kwargs) -> subprocess.CompletedProcess:
    """A subprocess without PYTHONPATH (nothing of the checkout may leak in), failing loudly."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"} | kwargs.pop("env", {})
    done = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, **kwargs)
    assert done.returncode == 0, f"{args}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done


def backend(call: str, cwd: Path, out: Path) -> Path:
    """Run a PEP 517 hook of setuptools in `cwd`; the file it wrote in `out`."""
    code = f"from setuptools import build_meta as b; print(b.{call}({str(out)!r}))"
    return out / run([sys.executable, "-c", code], cwd).stdout.strip().splitlines()[-1]


@pytest.fixture(scope="session")
def tree(tmp_path_factory) -> Path:
    """A copy of the checkout as `pip install .` would see it, minus caches and build leftovers."""
    src = tmp_path_factory.mktemp("src") / "tokcost"
    shutil.copytree(ROOT, src, ignore=shutil.ignore_patterns(*IGNORED))
    return src


@pytest.fixture(scope="session")
def wheel(tree, tmp_path_factory) -> Path:
    """The wheel built from the sdist, as a release would be (so the sdist must carry the data too)."""
    out = tmp_path_factory.mktemp("dist")
    sdist = backend("build_sdist", tree, out)
    with tarfile.open(sdist) as archive:
        safe = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}  # Python 3.10.12+ / 3.11.4+
        archive.extractall(out / "sdist", **safe)
    return backend("build_wheel", next((out / "sdist").iterdir()), out)


def fresh_venv(where: Path) -> Path:
    """A virtual environment with nothing installed; dependencies resolve to this interpreter's, after its own."""
    run([sys.executable, "-m", "venv", "--without-pip", str(where)], where.parent)
    python = where / "bin" / "python"
    purelib = run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], where.parent)
    paths = dict.fromkeys([sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]])
    (Path(purelib.stdout.strip()) / "zz_tokcost_test_deps.pth").write_text("\n".join(paths) + "\n")
    return python


def pip_install(python: Path, *what: str, cwd: Path) -> None:
    args = ["--no-deps", "--no-index", "--no-build-isolation", "--no-compile", "--disable-pip-version-check", "-q"]
    run([sys.executable, "-m", "pip", "--python", str(python), "install", *args, *what], cwd)


@pytest.fixture(scope="session")
def installs(tree, wheel, tmp_path_factory) -> dict[str, Path]:
    """Two fresh environments: `pip install .` of the tree, and the wheel built from the sdist."""
    base = tmp_path_factory.mktemp("envs")
    from_tree, from_wheel = fresh_venv(base / "tree"), fresh_venv(base / "wheel")
    pip_install(from_tree, ".", cwd=tree)  # not editable: what `pip install .` puts in site-packages
    pip_install(from_wheel, str(wheel), cwd=base)
    return {"pip install .": from_tree, "wheel": from_wheel}


DRIVER = """
import contextlib, io, json, sys
import tokcost
from tokcost.cli.app import main
results = []
for args in json.loads(sys.argv[1]):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(args)
    results.append({"args": args, "code": code, "stdout": out.getvalue(), "stderr": err.getvalue()})
print(json.dumps({"tokcost": tokcost.__file__, "results": results}))
"""


def commands(work: Path, plot: bool) -> list[list[str]]:
    """Every command once, reading the packaged specs (models, GPUs, networks, engines) and validation data."""
    shutil.copy(ROOT / "tests" / "assets" / "hf" / "llama.json", work / "config.json")
    estimate = ["estimate", "-m", "llama-3.1-405b", "-g", "h100-sxm", "--tp", "8", "--pp", "2", "--network",
                "ib-ndr-400", "--engine", "generic", "--journey", "-f", "json"]  # fmt: skip
    return [
        ["--help"],
        ["specs", "list", "-f", "json"],
        ["specs", "show", "mixtral-8x7b", "-f", "json"],
        ["specs", "import", str(work / "config.json"), "-o", str(work / "mine.yaml")],
        ["specs", "validate", str(work / "mine.yaml")],
        estimate + (["--plot", str(work / "roofline.png")] if plot else []),
        ["compare", "-m", "llama-3.1-8b,mixtral-8x7b", "-g", "h100-sxm,mi300x", "-f", "csv"],
        ["sweep", "-m", "llama-3.1-8b", "-g", "l40s", "-b", "1,8,64", "-f", "json"],
        ["validate", "-f", "json"],
        ["measure", "--help"],  # the real loop needs torch: tests/test_measure_* run it
        ["calibrate", "--help"],
    ]


@pytest.mark.parametrize("kind", ["pip install .", "wheel"])
def test_installed_tokcost_runs_every_command(installs, kind, tmp_path):
    python = installs[kind]
    version = run([str(python.parent / "tokcost"), "--version"], tmp_path)  # the console script
    assert version.stdout.strip() == "tokcost 0.1.0"
    plot = run([str(python), "-c", "import importlib.util as u; print(bool(u.find_spec('matplotlib')))"], tmp_path)
    args = commands(tmp_path, plot.stdout.strip() == "True")
    report = json.loads(run([str(python), "-c", DRIVER, json.dumps(args)], tmp_path).stdout)
    assert Path(report["tokcost"]).is_relative_to(python.parent.parent)  # the installed copy, not the checkout
    for r in report["results"]:
        assert r["code"] == 0, f"{kind}: tokcost {' '.join(r['args'])}: {r['stderr']}"
    validated = json.loads(report["results"][8]["stdout"])
    assert validated["summary"]["rows_used"] > 100  # the published rows shipped as package data
    assert json.loads(report["results"][5]["stdout"])["layout"]["nodes"] == 2  # 16 GPUs over the network spec


def test_wheel_and_sdist_carry_the_data_license_and_metadata(tree, wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    data = {p.relative_to(ROOT).as_posix() for p in (ROOT / "tokcost").glob("specs/*/*.yaml")}
    data |= {p.relative_to(ROOT).as_posix() for p in (ROOT / "tokcost").glob("validation/*.yaml")}
    assert {d.split("/")[2] for d in data if "/specs/" in d} == {"models", "gpus", "networks", "engines"}
    assert data <= names
    assert {"tokcost/py.typed", "tokcost/plots/roofline.py", "tokcost/specs/bundle.json",
            "tokcost/validation/bundle.json", "tokcost-0.1.0.dist-info/licenses/LICENSE"} <= names  # fmt: skip
    metadata = email.message_from_bytes(zipfile.ZipFile(wheel).read("tokcost-0.1.0.dist-info/METADATA"))
    assert metadata["License-Expression"] == "Apache-2.0"
    assert "plot" in metadata.get_all("Provides-Extra")
    assert "Apache License" in (ROOT / "LICENSE").read_text()[:200]
