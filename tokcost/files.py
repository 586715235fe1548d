"""Reading spec files safely and writing results without ever losing what the user had.

Reads: a regular file, bounded size, UTF-8 text only, `yaml` safe loading only (no tag can run code),
bounded nesting, a bounded number of aliases and a bounded expansion (an alias bomb expands
exponentially once anything walks it), no duplicate keys. Writes: temporary file + rename, and an existing
file is replaced only with `force`.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

import yaml

from tokcost.errors import FileExistsRefusal, SpecError

MAX_SPEC_BYTES = 1_000_000  # a spec is a few KB; a HF config.json at most tens of KB
MAX_YAML_ALIASES = 100  # real specs use none; bombs use thousands
MAX_NESTING = 32  # specs nest three levels; PyYAML's scanner is quadratic in flow depth, its composer recursive
MAX_EXPANDED_NODES = 100_000  # values after aliases are expanded; a HF config has a few hundred


def read_text(path: Path) -> str:
    """The text of a small UTF-8 regular file, or a SpecError naming what is wrong with it."""
    where = str(path)
    try:
        if not path.exists():
            raise SpecError(where, "no such file")
        if path.is_dir():
            raise SpecError(where, "is a directory; give a .yaml or config.json file")
        if not path.is_file():
            raise SpecError(where, "is not a regular file (a device, pipe or socket); give a .yaml or config.json file")
        with path.open("rb") as handle:
            raw = handle.read(MAX_SPEC_BYTES + 1)  # never more: the file may grow while we read
    except OSError as exc:
        raise SpecError(where, f"cannot be read: {exc.strerror or exc}") from None
    if len(raw) > MAX_SPEC_BYTES:
        raise SpecError(where, f"file is over {MAX_SPEC_BYTES:,} bytes; a spec must be at most {MAX_SPEC_BYTES:,}")
    if b"\x00" in raw:
        raise SpecError(where, "is a binary file (or UTF-16); save it as UTF-8 text")
    try:
        return raw.decode("utf-8-sig")  # a byte-order mark some editors write is dropped
    except UnicodeDecodeError as exc:
        raise SpecError(where, f"is not UTF-8 text (byte {exc.start}); save it as UTF-8") from None


def _bracket_depth(text: str) -> int:
    """Deepest nesting of [ and { in the raw text (quotes ignored): an upper bound checked before parsing."""
    depth = deepest = 0
    for char in text:
        if char in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif char in "]}":
            depth = max(depth - 1, 0)
    return deepest


def _check_aliases(text: str, where: str) -> None:
    try:
        aliases = sum(isinstance(tok, yaml.AliasToken) for tok in yaml.scan(text, Loader=yaml.SafeLoader))
    except yaml.YAMLError as exc:
        raise SpecError(where, _yaml_message(exc)) from None
    if aliases > MAX_YAML_ALIASES:
        raise SpecError(where, f"{aliases} YAML aliases; at most {MAX_YAML_ALIASES} are allowed in a spec")


def _check_node(node: yaml.Node, where: str) -> None:
    """Refuse deep nesting, duplicate keys and alias expansions past MAX_EXPANDED_NODES, in one linear walk."""
    sizes: dict[int, int] = {}  # id(node) -> expanded size; aliases share nodes, so memoizing keeps this linear

    def size(n: yaml.Node, depth: int) -> int:
        if depth > MAX_NESTING:
            raise SpecError(where, f"line {n.start_mark.line + 1}: nested more than {MAX_NESTING} levels deep")
        if id(n) in sizes:
            return sizes[id(n)]
        total = 1
        if isinstance(n, yaml.SequenceNode):
            total += sum(size(child, depth + 1) for child in n.value)
        elif isinstance(n, yaml.MappingNode):
            seen: set[str] = set()
            for key, value in n.value:
                if isinstance(key, yaml.ScalarNode) and key.value in seen:
                    raise SpecError(where, f"line {key.start_mark.line + 1}: key {key.value!r:.40} appears twice")
                seen.add(key.value if isinstance(key, yaml.ScalarNode) else "")
                total += size(key, depth + 1) + size(value, depth + 1)
        if total > MAX_EXPANDED_NODES:
            raise SpecError(
                where, f"YAML aliases expand to over {MAX_EXPANDED_NODES:,} values; a spec holds a few dozen"
            )
        sizes[id(n)] = total
        return total

    size(node, 0)


def _yaml_message(exc: yaml.YAMLError) -> str:
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
    if mark is not None:
        return f"line {mark.line + 1}, column {mark.column + 1}: YAML syntax error: {problem}"
    return f"YAML syntax error: {problem}"


def _load_yaml(text: str, where: str) -> Any:
    _check_aliases(text, where)
    loader = yaml.SafeLoader(text)  # safe: an unknown tag (!!python/...) is refused, never constructed
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _check_node(node, where)
        return loader.construct_document(node)
    except yaml.constructor.ConstructorError as exc:
        mark = f"line {exc.problem_mark.line + 1}: " if exc.problem_mark else ""
        tag = (exc.problem or "").rpartition("tag ")[2] or "a tag"
        raise SpecError(where, f"{mark}unsupported YAML tag {tag}; specs hold plain data only") from None
    except yaml.YAMLError as exc:
        raise SpecError(where, _yaml_message(exc)) from None
    finally:
        loader.dispose()


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    keys = [key for key, _ in pairs]
    for key in keys:
        if keys.count(key) > 1:
            raise ValueError(f"key {key!r:.40} appears twice")
    return dict(pairs)


def _load_json(text: str, where: str) -> Any:
    try:
        return json.loads(text, object_pairs_hook=_unique_keys)
    except json.JSONDecodeError as exc:
        raise SpecError(where, f"line {exc.lineno}, column {exc.colno}: invalid JSON: {exc.msg}") from None
    except ValueError as exc:  # a duplicate key, or a number too long to convert
        raise SpecError(where, f"invalid JSON: {exc}") from None


def load_mapping(path: Path) -> dict[str, Any]:
    """A YAML or JSON file whose top level is a mapping (JSON is YAML, but JSON errors read better)."""
    where = str(path)
    text = read_text(path)
    if not text.strip():
        raise SpecError(where, "file is empty; a spec is a mapping of keys such as name: ...")
    if _bracket_depth(text) > MAX_NESTING:
        raise SpecError(where, f"brackets nested more than {MAX_NESTING} levels deep; a spec nests three")
    try:
        data = _load_json(text, where) if path.suffix == ".json" else _load_yaml(text, where)
    except RecursionError:  # block nesting deep enough to exhaust the parser's recursion
        raise SpecError(where, f"nested more than {MAX_NESTING} levels deep; a spec nests three") from None
    if data is None:
        raise SpecError(where, "holds no data (only comments?); a spec is a mapping of keys such as name: ...")
    if not isinstance(data, dict):
        kind = "list" if isinstance(data, list) else "single value"
        raise SpecError(where, f"top level is a {kind}; a spec must be a mapping of keys such as name: ...")
    return data


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
