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


def test_the_readme_quotes_the_ep72_decode_row_as_validate_prices_it(cli):
    """The prose figure of SGLang's EP 72 decode is not generated: it must follow the multinode row it quotes."""
    text = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")
    said = re.search(r"measured ([\d,]+) tokens/s a node; tokcost's\s+expected is ([\d,]+) \(([+−-][\d.]+)%\) "
                     r"under a ([\d,]+) ceiling", text)  # fmt: skip
    assert said, "the EP 72 sentence moved"
    row = next(r for r in cli("validate", "-f", "json").json()["multinode"]
               if r["id"] == "sglang-large-ep-decode-ep72-in2000")  # fmt: skip
    measured, expected, error, ceiling = said.groups()
    assert (int(measured.replace(",", "")), int(expected.replace(",", "")), int(ceiling.replace(",", ""))) == (
        round(row["measured"]), round(row["expected"]), round(row["ceiling"]))  # fmt: skip
    assert float(error.replace("−", "-")) == pytest.approx(100 * row["error"], abs=0.05)


def test_the_readme_quotes_pr_14764_s_prefill_as_estimate_prices_it(cli):
    """The prose figure of SGLang's DeepSeek prefill (PR 14764's bench_one_batch: 16 prompts of 512 tokens on 8 x H200
    at TP 8, engine-level) is not generated: it must follow what estimate prints for that batch."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    said = re.search(r"PR 14764: [\d,]+-[\d,]+; tokcost ([\d,]+)\)", text)
    assert said, "the PR 14764 sentence moved"
    out = cli("estimate", "-m", "deepseek-r1", "-g", "h200", "--tp", "8", "-b", "16", "-p", "512", "-o", "16",
              "--engine", "sglang", "-f", "json").json()  # fmt: skip
    assert int(said.group(1).replace(",", "")) == round(16 * 512 / out["expected"]["ttft_s"], -2)
