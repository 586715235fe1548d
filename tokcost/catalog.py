"""Finding a spec by built-in name or by path; built-ins ship as package data under tokcost/specs/."""

from __future__ import annotations

import difflib
from importlib import resources
from pathlib import Path
from typing import Any, Literal

from tokcost.errors import SpecError
from tokcost.files import load_mapping

Kind = Literal["models", "gpus", "networks", "engines"]


def builtin_names(kind: Kind) -> list[str]:
    """Names of the built-in specs of one kind, sorted."""
    folder = resources.files("tokcost") / "specs" / kind
    return sorted(entry.name.removesuffix(".yaml") for entry in folder.iterdir() if entry.name.endswith(".yaml"))


def suggest(names: list[str], name: str) -> tuple[str, list[str]]:
    """('did you mean ...? ', closest names first): names the input starts, then near spellings."""
    wanted = name.lower()
    starting = [n for n in names if n.startswith(wanted)]
    close = starting + [n for n in difflib.get_close_matches(wanted, names, n=3, cutoff=0.5) if n not in starting]
    if len(starting) > 1:
        return f"did you mean one of {', '.join(starting)}? ", close
    return (f"did you mean {close[0]}? " if close else ""), close


def unknown_name(kind: Kind, name: str) -> SpecError:
    """An error that lists the known names, closest first."""
    names = builtin_names(kind)
    hint, close = suggest(names, name)
    rest = [n for n in names if n not in close]
    singular = kind.removesuffix("s")
    return SpecError(name, f"not a built-in {singular} nor a file; {hint}known {kind}: {', '.join(close + rest)}")


def locate(kind: Kind, name_or_path: str) -> tuple[str, dict[str, Any]]:
    """(where, mapping) for a built-in name (any case) or a path to a YAML/JSON file."""
    if not name_or_path.strip():
        singular = kind.removesuffix("s")
        raise SpecError("(empty)", f"no {singular} given; name a built-in {singular} or a file")
    if name_or_path.lower() in builtin_names(kind):
        name_or_path = name_or_path.lower()
        entry = resources.files("tokcost") / "specs" / kind / f"{name_or_path}.yaml"
        with resources.as_file(entry) as path:
            return f"{kind}/{name_or_path}.yaml", load_mapping(Path(path))
    path = Path(name_or_path)
    looks_like_path = path.suffix in (".yaml", ".yml", ".json") or "/" in name_or_path or path.exists()
    if not looks_like_path:
        raise unknown_name(kind, name_or_path)
    return str(path), load_mapping(path)
