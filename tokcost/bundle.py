"""Built-in specs as parsed data, from one packaged file, so that a run reads no YAML and never imports PyYAML.

`specs/bundle.json` holds, for each built-in spec file (`specs/<kind>/<name>.yaml`), the CRC-32 of its text and
the mapping the strict loader reads from it; `python scripts/build_bundle.py` writes it, and a test holds it equal
to parsing every file. An entry is used only while its file's text still has that CRC, so a built-in edited in
place is parsed from its YAML, as it was before the bundle existed. Parsing is what this saves (PyYAML's import
and libyaml's parse, ~15 ms of each start); every spec is still validated by its pydantic model when it loads.
"""

from __future__ import annotations

import copy
import json
import zlib
from functools import cache
from pathlib import Path
from typing import Any

BUNDLE = Path(__file__).resolve().parent / "specs" / "bundle.json"
SOURCES = "specs/*/*.yaml"  # the files it holds, relative to the package


def crc(text: str) -> int:
    """The CRC-32 of a file's text as UTF-8: what says the bundle's entry is still that file's."""
    return zlib.crc32(text.encode("utf-8"))


@cache
def _entries() -> dict[str, list[Any]]:
    """{relative path: [crc, mapping]} from the bundle; empty when there is none (the YAML is read instead)."""
    try:
        return dict(json.loads(BUNDLE.read_text(encoding="utf-8"))["files"])
    except (OSError, ValueError, KeyError, TypeError):
        return {}


def parsed(relative: str, text: str) -> dict[str, Any] | None:
    """The mapping of built-in file `relative` (e.g. `specs/gpus/h100-sxm.yaml`) whose text is `text`, or None."""
    entry = _entries().get(relative)
    if entry is None or entry[0] != crc(text):
        return None
    return copy.deepcopy(entry[1])  # each load gets its own: a caller may change what it was given


def build() -> str:
    """The bundle's text: every built-in spec file as the strict loader reads it (libyaml's), sorted by path."""
    from tokcost.files import PACKAGE, read_text
    from tokcost.yaml_read import BuiltinLoader, load_yaml

    files = {}
    for path in sorted(PACKAGE.glob(SOURCES)):
        text = read_text(path)
        files[path.relative_to(PACKAGE).as_posix()] = [crc(text), load_yaml(text, str(path), BuiltinLoader)]
    return json.dumps({"about": (__doc__ or "").splitlines()[0], "files": files}, indent=1) + "\n"
