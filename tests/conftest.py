"""Shared fixtures: run the CLI in-process with captured output, at a fixed terminal width; load-proof hypothesis.

The quick tier (`pytest -m "not slow"`) skips importing modules slow as a whole and runs property tests on at most
tiers.QUICK_MAX_EXAMPLES examples; the whole suite runs everything at the counts the tests state.
"""

from __future__ import annotations

import contextlib
import io
import json
import signal
from dataclasses import dataclass

import pytest
import tiers
from hypothesis import HealthCheck, settings

from tokcost.cli.app import main

# Property tests never depend on the machine's load: no deadline per example, and no failure when a loaded
# machine generates examples slowly (what a test sets itself, such as max_examples, still applies). They draw the
# same examples on every run (derandomize), so CI passes or fails on the code alone; `pytest
# --hypothesis-profile=explore --hypothesis-seed=N` draws new ones to hunt for counterexamples.
settings.register_profile("tokcost", deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True)
settings.load_profile("tokcost")
settings.register_profile("explore", parent=settings.get_profile("tokcost"), derandomize=False)
settings.register_profile("quick", parent=settings.get_profile("tokcost"), max_examples=tiers.QUICK_MAX_EXAMPLES)

# A shell starts a background job with SIGINT ignored (nohup: SIGHUP too), and a child process keeps an ignored
# signal: the tests that signal a child would see it run to the end. Undone here, every child starts with the default.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)
for _sig in (signal.SIGHUP, signal.SIGTERM) if hasattr(signal, "SIGHUP") else ():
    if signal.getsignal(_sig) is signal.SIG_IGN:
        signal.signal(_sig, signal.SIG_DFL)


@dataclass
class CliResult:
    """What one CLI run printed and returned."""

    exit_code: int
    stdout: str
    stderr: str

    def json(self):
        """stdout parsed as JSON."""
        return json.loads(self.stdout)


SLOW_MODULE = "\npytestmark = pytest.mark.slow"  # a module whose every test is in the slow tier says so at its top


def _quick(config) -> bool:
    """Whether this run is the quick tier, `pytest -m "not slow"`."""
    return config.getoption("markexpr") == "not slow"


def pytest_configure(config):
    """The quick tier runs property tests on fewer examples: those that state a count read it through tiers.examples."""
    if _quick(config):
        tiers.QUICK = True
        settings.load_profile("quick")


def pytest_ignore_collect(collection_path, config):
    """The quick tier (-m "not slow") does not import a module that is slow as a whole: torch alone takes seconds."""
    if _quick(config) and collection_path.suffix == ".py":
        return SLOW_MODULE in collection_path.read_text(encoding="utf-8") or None
    return None


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
