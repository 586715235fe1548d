"""A spec's name is printed in tables, headers and the YAML that `specs show` writes: one line of printable text."""

from __future__ import annotations

from typing import Annotated

from pydantic import AfterValidator


def printable(value: str) -> str:
    """The name as given, refused if it holds a control character (a newline would inject a line into written YAML,
    an escape would reach the terminal)."""
    bad = next((c for c in value if not c.isprintable()), None)
    if bad is not None:
        raise ValueError(f"a name is one line of printable text; this one holds {bad!r}")
    return value


SpecName = Annotated[str, AfterValidator(printable)]
