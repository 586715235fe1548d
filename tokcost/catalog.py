"""Finding a spec by built-in name or by path; built-ins ship as package data under tokcost/specs/."""

from __future__ import annotations

import difflib
from importlib import resources
from pathlib import Path
from typing import Any, Literal

from tokcost.errors import SpecError
from tokcost.files import load_mapping

Kind = Literal["models", "gpus"]


def builtin_names(kind: Kind) -> list[str]:
    """Names of the built-in specs of one kind, sorted."""
    folder = resources.files("tokcost") / "specs" / kind
    return sorted(entry.name.removesuffix(".yaml") for entry in folder.iterdir() if entry.name.endswith(".yaml"))


def unknown_name(kind: Kind, name: str) -> SpecError:
    """An error that lists the known names, closest first."""
    names = builtin_names(kind)
    close = difflib.get_close_matches(name, names, n=3, cutoff=0.5)
    rest = [n for n in names if n not in close]
    hint = f"did you mean {close[0]}? " if close else ""
    singular = kind.removesuffix("s")
    return SpecError(name, f"not a built-in {singular} nor a file; {hint}known {kind}: {', '.join(close + rest)}")


def locate(kind: Kind, name_or_path: str) -> tuple[str, dict[str, Any]]:
    """(where, mapping) for a built-in name or a path to a YAML/JSON file."""
    if name_or_path in builtin_names(kind):
        entry = resources.files("tokcost") / "specs" / kind / f"{name_or_path}.yaml"
        with resources.as_file(entry) as path:
            return f"{kind}/{name_or_path}.yaml", load_mapping(Path(path))
    path = Path(name_or_path)
    looks_like_path = path.suffix in (".yaml", ".yml", ".json") or "/" in name_or_path or path.exists()
    if not looks_like_path:
        raise unknown_name(kind, name_or_path)
    return str(path), load_mapping(path)
