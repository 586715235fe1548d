"""tokcost's own YAML files as parsed data, from packaged bundles, so that a run reads no YAML and never imports PyYAML.

`specs/bundle.json` holds, for each built-in spec file (`specs/<kind>/<name>.yaml`), the CRC-32 of its text and
the mapping the strict loader reads from it; `validation/bundle.json` the same for the published data
(`validation/*.yaml`), apart so that a start reads only the specs'. `python scripts/build_bundle.py` writes both,
and a test holds them equal to parsing every file. An entry is used only while its file's text still has that
CRC, so a file edited in place is parsed from its YAML, as it was before the bundles existed. Parsing is what this
saves (PyYAML's import and libyaml's parse: ~15 ms of each start, ~100 ms of `validate`); every spec and row is
still validated by its pydantic model when it loads.
"""

from __future__ import annotations

import copy
import json
import zlib
from functools import cache
from pathlib import Path
from typing import Any

from tokcost.files import PACKAGE, read_text

# each bundle (its folder in the package) and the files it holds, relative to the package
SOURCES = {"specs": "specs/*/*.yaml", "validation": "validation/*.yaml"}


def bundle_path(folder: str) -> Path:
    """Where the bundle of `folder` (`specs` or `validation`) lies."""
    return PACKAGE / folder / "bundle.json"


def crc(text: str) -> int:
    """The CRC-32 of a file's text as UTF-8: what says the bundle's entry is still that file's."""
    return zlib.crc32(text.encode("utf-8"))


@cache
def _entries(folder: str) -> dict[str, list[Any]]:
    """{relative path: [crc, mapping]} from `folder`'s bundle; empty when there is none (the YAML is read instead)."""
    try:
        return dict(json.loads(bundle_path(folder).read_text(encoding="utf-8"))["files"])
    except (OSError, ValueError, KeyError, TypeError):
        return {}


def parsed(relative: str, text: str) -> dict[str, Any] | None:
    """The mapping of built-in file `relative` (e.g. `specs/gpus/h100-sxm.yaml`) whose text is `text`, or None."""
    folder = relative.partition("/")[0]
    entry = _entries(folder).get(relative) if folder in SOURCES else None
    if entry is None or entry[0] != crc(text):
        return None
    return copy.deepcopy(entry[1])  # each load gets its own: a caller may change what it was given


def build(folder: str) -> str:
    """The text of `folder`'s bundle: each of its files as the strict loader reads it (libyaml's), sorted by path."""
    from tokcost.yaml_read import BuiltinLoader, load_yaml  # PyYAML only to build

    files = {}
    for path in sorted(PACKAGE.glob(SOURCES[folder])):
        text = read_text(path)
        files[path.relative_to(PACKAGE).as_posix()] = [crc(text), load_yaml(text, str(path), BuiltinLoader)]
    return json.dumps({"about": (__doc__ or "").splitlines()[0], "files": files}, indent=1) + "\n"
