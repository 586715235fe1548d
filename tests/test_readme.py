"""The README's tour is the live CLI's output (regenerate with scripts/update_readme.py)."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _script():
    spec = importlib.util.spec_from_file_location("update_readme", ROOT / "scripts" / "update_readme.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow  # every tour command, two four-GPU plans among them (the quick tier checks each command exists)
def test_readme_tour_matches_the_live_cli():
    text = (ROOT / "README.md").read_text()
    assert "<!-- tour:" in text
    assert _script().render(text) == text, "README drifted: run python scripts/update_readme.py"


def test_readme_names_the_two_commands():
    text = (ROOT / "README.md").read_text()
    assert "pip install -e . && tokcost estimate --model llama-3.1-8b --gpu h100-sxm" in text
    assert "bash scripts/test.sh" in text  # the test command (issue 15: torch's CPU build before the extras)


def test_readme_bash_examples_name_real_commands(cli):
    text = (ROOT / "README.md").read_text()
    commands = set(re.findall(r"^tokcost (\w+)", text, re.M))
    for command in commands:
        assert cli(command, "--help").exit_code == 0, command
