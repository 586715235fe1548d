"""Reading spec files safely and writing results without ever losing what the user had.

Reads: a regular file, bounded size, UTF-8 text only, `yaml` safe loading only (no tag can run code),
bounded nesting, a bounded number of aliases and a bounded expansion (an alias bomb expands
exponentially once anything walks it), no duplicate keys. Validation errors become one line that
names the file, the key and what the key allows. Writes: temporary file + rename, and an existing
file is replaced only with `force`.
"""

from __future__ import annotations

import difflib
import json
import os
import tempfile
import types
from pathlib import Path
from typing import Any, Literal, Union, get_args, get_origin

import yaml
from pydantic import BaseModel, ValidationError
from pydantic.fields import FieldInfo
from pydantic_core import ErrorDetails

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


# ---- validation errors as one line -----------------------------------------------------------

_TYPE_WORDS = {
    "int_parsing": "an integer", "int_type": "an integer", "int_from_float": "a whole number",
    "float_parsing": "a number", "float_type": "a number", "finite_number": "a finite number",
    "bool_parsing": "true or false", "bool_type": "true or false", "string_type": "text",
    "dict_type": "a mapping of keys", "model_type": "a mapping of keys", "model_attributes_type": "a mapping of keys",
    "list_type": "a list",
}  # fmt: skip


_LIMITS = ("ge", "gt", "le", "lt", "min_length", "max_length")


def _number(value: float) -> str:
    return f"{value:,}" if isinstance(value, int) or value != int(value) else f"{int(value):,}"


def allowed(field: FieldInfo) -> str:
    """What a field accepts, in words: 'an integer from 1 to 10,000', 'a number above 0 and at most 1', ..."""
    kinds = [a for a in get_args(field.annotation) if a is not type(None)]
    optional = get_origin(field.annotation) in (Union, types.UnionType)
    base = kinds[0] if optional and len(kinds) == 1 else field.annotation
    if get_origin(base) is Literal:
        return "one of: " + ", ".join(str(v) for v in get_args(base))
    if optional and len(kinds) > 1:  # a union such as Literal[...] | list[int]
        return " or ".join(allowed(FieldInfo.from_annotation(k)) for k in kinds)
    if isinstance(base, type) and issubclass(base, BaseModel):
        return f"a mapping with keys: {', '.join(_keys(base))}"
    if get_origin(base) is list:
        return "a list of " + {int: "integers", str: "names"}.get(get_args(base)[0], "values")
    if get_origin(base) is dict:
        return "a mapping of keys to values"
    limits = {k: getattr(m, k) for m in field.metadata for k in _LIMITS if getattr(m, k, None) is not None}
    if base is str:
        low, high = limits.get("min_length", 0), limits.get("max_length")
        return f"text of at most {high:,} characters" + (", not empty" if low else "") if high else "text"
    words: dict[Any, str] = {int: "an integer", float: "a number", bool: "true or false"}
    word = words.get(base, str(base))
    low = (f"at least {_number(limits['ge'])}" if "ge" in limits else
           f"above {_number(limits['gt'])}" if "gt" in limits else None)  # fmt: skip
    high = (f"at most {_number(limits['le'])}" if "le" in limits else
            f"below {_number(limits['lt'])}" if "lt" in limits else None)  # fmt: skip
    if "ge" in limits and "le" in limits:
        return f"{word} from {_number(limits['ge'])} to {_number(limits['le'])}"
    return " ".join([word, " and ".join(x for x in (low, high) if x)]).strip()


def _keys(model: type[BaseModel]) -> list[str]:
    return [info.alias or name for name, info in model.model_fields.items()]


def _inner_model(field: FieldInfo) -> type[BaseModel] | None:
    for kind in (field.annotation, *get_args(field.annotation)):
        if isinstance(kind, type) and issubclass(kind, BaseModel):
            return kind
    return None


def _resolve(schema: type[BaseModel], loc: tuple[Any, ...]) -> tuple[type[BaseModel], FieldInfo | None, int]:
    """Walk `loc` through nested models: (the model holding the last key found, its field, keys consumed)."""
    model, field, used = schema, None, 0
    for part in loc:
        by_key = {info.alias or name: info for name, info in model.model_fields.items()}
        if part not in by_key:
            break
        field, used = by_key[part], used + 1
        inner = _inner_model(field)
        if inner is None:
            break
        model = inner
    return model, field, used


def _schema_named(title: str) -> type[BaseModel] | None:
    from tokcost.hardware.spec import GpuSpec  # lazy: the spec modules do not import this one
    from tokcost.models.spec import ModelSpec

    return {cls.__name__: cls for cls in (ModelSpec, GpuSpec)}.get(title)


def _shown(value: Any) -> str:
    """A short repr that never walks a large or aliased structure."""
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, (list, tuple, set)):
        return "a list"
    if isinstance(value, str) and len(value) > 40:
        return repr(value[:40]) + "..."
    return f"{value!r:.60}"


def field_message(error: ErrorDetails, schema: type[BaseModel] | None) -> tuple[str | None, str]:
    """(dotted key, message) for one pydantic error, saying what the key allows."""
    loc = tuple(error["loc"])
    kind = error["type"]
    model, field, used = _resolve(schema, loc) if schema else (None, None, 0)
    # a union such as `all | even | odd | list[int]` reports one error per branch: describe the whole field
    kinds = [a for a in get_args(field.annotation) if a is not type(None)] if field else []
    union = used < len(loc) and kind != "extra_forbidden" and len(kinds) > 1
    key = ".".join(str(p) for p in (loc[:used] if union else loc))
    if kind == "extra_forbidden":
        names = _keys(model) if model else []
        close = difflib.get_close_matches(str(loc[used]), names, n=1, cutoff=0.6)
        hint = f"did you mean {close[0]}? " if close else ""
        return key or None, f"unknown key; {hint}allowed keys: {', '.join(names)}" if names else "unknown key"
    if kind == "missing":
        return key or None, "required key is missing" + (f"; give {allowed(field)}" if field else "")
    if kind == "value_error":  # our own validators: their message already says what is allowed
        message = error["msg"].removeprefix("Value error, ")
        return key or None, message
    if field is not None and (used == len(loc) or union):
        message = f"must be {allowed(field)}"
    elif kind in _TYPE_WORDS:
        message = f"must be {_TYPE_WORDS[kind]}"
    else:
        message = error["msg"]
    if "input" in error:
        message += f" (got {_shown(error['input'])})"
    return key or None, message


def validation_error(where: str, exc: ValidationError, schema: type[BaseModel] | None = None) -> SpecError:
    """The first pydantic error as `file: key: message` saying what is allowed (the rest counted by key)."""
    schema = schema or _schema_named(exc.title)
    # an unknown key first: it is usually a typo of the key reported missing
    errors = sorted(exc.errors(), key=lambda e: e["type"] != "extra_forbidden")
    field, message = field_message(errors[0], schema)
    others = {field_message(e, schema)[0] for e in errors[1:]} - {field}
    suggested = message.partition("did you mean ")[2].partition("?")[0]
    if suggested and field:  # the missing key the typo stands for is the same mistake
        others.discard(".".join([*field.split(".")[:-1], suggested]))
    if others:
        message += f" (and {len(others)} more key{'s' if len(others) > 1 else ''} wrong)"
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
