"""Which tier this run is, for what a test module sets at import: the quick tier runs property tests on fewer examples.

The quick tier is `pytest -m "not slow"`; conftest.py sets QUICK before any test module is imported. The whole suite
(the README's command) runs every property test at the count the test states, and every parameter.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from typing import Any

import pytest

QUICK_MAX_EXAMPLES = 5  # a smoke test of each property, its simplest example first; the whole suite: the stated count
QUICK = False  # set by conftest.py: True under -m "not slow"


def examples(stated: int) -> int:
    """The examples a property test runs: its stated count, at most QUICK_MAX_EXAMPLES in the quick tier."""
    return min(stated, QUICK_MAX_EXAMPLES) if QUICK else stated


def slow_except(keep: Collection[Any], values: Iterable[Any]) -> list[Any]:
    """`values` as parameters, those not in `keep` marked slow: the quick tier runs only its representatives."""
    return [pytest.param(v, marks=() if v in keep else pytest.mark.slow) for v in values]
