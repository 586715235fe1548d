"""Reading spec files safely and writing results without ever losing what the user had.

Reads: bounded size, text only, `yaml.safe_load` only, a bounded number of YAML aliases (an alias
bomb expands exponentially once anything walks it). Writes: temporary file + rename, and an
existing file is replaced only with `force`.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from tokcost.errors import FileExistsRefusal, SpecError

MAX_SPEC_BYTES = 1_000_000  # a spec is a few KB; a HF config.json at most tens of KB
MAX_YAML_ALIASES = 100  # real specs use none; bombs use thousands


def read_text(path: Path) -> str:
    """The text of a small UTF-8 file, or a SpecError naming what is wrong with it."""
    where = str(path)
    if not path.exists():
        raise SpecError(where, "no such file")
    if path.is_dir():
        raise SpecError(where, "is a directory; give a .yaml or config.json file")
    size = path.stat().st_size
    if size > MAX_SPEC_BYTES:
        raise SpecError(where, f"file is {size:,} bytes; a spec must be at most {MAX_SPEC_BYTES:,}")
    raw = path.read_bytes()
    if b"\x00" in raw:
        raise SpecError(where, "is a binary file (or UTF-16); save it as UTF-8 text")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SpecError(where, f"is not UTF-8 text (byte {exc.start}); save it as UTF-8") from None


def _count_aliases(text: str, where: str) -> None:
    try:
        aliases = sum(isinstance(tok, yaml.AliasToken) for tok in yaml.scan(text, Loader=yaml.SafeLoader))
    except yaml.YAMLError as exc:
        raise SpecError(where, _yaml_message(exc)) from None
    if aliases > MAX_YAML_ALIASES:
        raise SpecError(where, f"{aliases} YAML aliases; at most {MAX_YAML_ALIASES} are allowed in a spec")


def _yaml_message(exc: yaml.YAMLError) -> str:
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
    if mark is not None:
        return f"line {mark.line + 1}, column {mark.column + 1}: YAML syntax error: {problem}"
    return f"YAML syntax error: {problem}"


def load_mapping(path: Path) -> dict[str, Any]:
    """A YAML or JSON file whose top level is a mapping (JSON is YAML, but JSON errors read better)."""
    where = str(path)
    text = read_text(path)
    if not text.strip():
        raise SpecError(where, "file is empty; a spec is a mapping of keys such as name: ...")
    if path.suffix == ".json":
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise SpecError(where, f"line {exc.lineno}, column {exc.colno}: invalid JSON: {exc.msg}") from None
    else:
        _count_aliases(text, where)
        try:
            data = yaml.safe_load(text)
        except yaml.constructor.ConstructorError as exc:
            raise SpecError(where, f"unsupported YAML tag ({exc.problem}); specs hold plain data only") from None
        except yaml.YAMLError as exc:
            raise SpecError(where, _yaml_message(exc)) from None
    if not isinstance(data, dict):
        kind = type(data).__name__ if data is not None else "nothing"
        raise SpecError(where, f"top level is a {kind}; a spec must be a mapping of keys")
    return data


def validation_error(where: str, exc: ValidationError) -> SpecError:
    """The first pydantic error as `file: field: message` (the rest counted)."""
    errors = exc.errors()
    first = errors[0]
    field = ".".join(str(p) for p in first["loc"]) or None
    message = first["msg"].removeprefix("Value error, ")
    if first["type"] == "extra_forbidden":
        message = "unknown key"
    elif first["type"] == "missing":
        message = "required key is missing"
    if first["type"] not in ("extra_forbidden", "missing") and "input" in first:
        message += f" (got {first['input']!r:.60})"
    if len(errors) > 1:
        message += f" (and {len(errors) - 1} more error{'s' if len(errors) > 2 else ''})"
    return SpecError(where, message, field=field)


def write_new(path: Path, text: str, *, force: bool = False) -> None:
    """Write `text` atomically (temp file + rename); refuse to replace an existing file without force."""
    if path.is_dir():
        raise FileExistsRefusal(f"{path}: is a directory; give a file name")
    if path.exists() and not force:
        raise FileExistsRefusal(f"{path}: already exists; pass --force to replace it, or choose another name")
    directory = path.parent if str(path.parent) else Path(".")
    if not directory.is_dir():
        raise FileExistsRefusal(f"{path}: folder {directory} does not exist")
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
