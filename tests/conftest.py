"""Shared fixtures: run the CLI in-process with captured output, at a fixed terminal width."""

from __future__ import annotations

import contextlib
import io
import json
from dataclasses import dataclass

import pytest

from tokcost.cli.app import main


@dataclass
class CliResult:
    """What one CLI run printed and returned."""

    exit_code: int
    stdout: str
    stderr: str

    def json(self):
        """stdout parsed as JSON."""
        return json.loads(self.stdout)


@pytest.fixture(autouse=True)
def _fixed_width(monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")


@pytest.fixture
def cli():
    """cli(*args) runs `tokcost args...` in-process and returns a CliResult."""

    def run(*args: str) -> CliResult:
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(list(args))
        return CliResult(code, out.getvalue(), err.getvalue())

    return run
