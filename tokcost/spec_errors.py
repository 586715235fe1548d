"""Pydantic validation errors as one line: `file: key: what the key allows (got X)`, with a suggestion.

Pydantic finds every error (strict types: a bool or a string is never a number); what it cannot do is say,
in a reader's words, everything a key accepts ("an integer from 1 to 10,000", not only the bound that
failed) and which key a typo stood for. That is all this module adds.
"""

from __future__ import annotations

import difflib
import types
from typing import Annotated, Any, Literal, TypeVar, Union, get_args, get_origin

from pydantic import BaseModel, ValidationError
from pydantic.fields import FieldInfo
from pydantic_core import ErrorDetails

from tokcost.errors import SpecError

Schema = TypeVar("Schema", bound=BaseModel)
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


def _options(annotation: Any) -> list[Any]:
    """The branches of `A | B | None` (without None); [] for anything that is not a union."""
    if get_origin(annotation) not in (Union, types.UnionType):
        return []
    return [a for a in get_args(annotation) if a is not type(None)]


def allowed(field: FieldInfo) -> str:
    """What a field accepts, in words: 'an integer from 1 to 10,000', 'a number above 0 and at most 1', ..."""
    kinds = _options(field.annotation)
    if len(kinds) > 1:  # a union such as Literal[...] | list[int]
        return " or ".join(allowed(FieldInfo.from_annotation(k)) for k in kinds)
    base = kinds[0] if kinds else field.annotation
    inner: list[Any] = []  # an Annotated branch's own constraints: `Annotated[int, Field(ge=0)] | None`
    if get_origin(base) is Annotated:  # e.g. FormatName: text
        base, *inner = get_args(base)
        inner = [m for x in inner for m in (x.metadata if isinstance(x, FieldInfo) else [x])]
    if get_origin(base) is Literal:
        return "one of: " + ", ".join(str(v) for v in get_args(base))
    if isinstance(base, type) and issubclass(base, BaseModel):
        return f"a mapping with keys: {', '.join(_keys(base))}"
    if get_origin(base) is list:
        item = get_args(base)[0]
        plain = {int: "integers", str: "names"}.get(item)
        counts = [getattr(m, k, None) for m in [*field.metadata, *inner] for k in ("min_length", "max_length")]
        low = max((c for c in counts[::2] if c is not None), default=None)
        high = min((c for c in counts[1::2] if c is not None), default=None)
        size = (f"{low} " if low is not None and low == high else f"{low} to {high} " if low and high else
                f"at least {low} " if low else f"at most {high} " if high else "")  # fmt: skip
        if plain:
            return f"a list of {size}{plain}"
        return f"a list of {size}values" + ("" if item is Any else f", each {allowed(FieldInfo.from_annotation(item))}")
    if get_origin(base) is dict:
        least = any(getattr(m, "min_length", None) for m in [*field.metadata, *inner])
        return ("a non-empty " if least else "a ") + "mapping of keys to values"
    limits = {k: getattr(m, k) for m in [*field.metadata, *inner] for k in _LIMITS if getattr(m, k, None) is not None}
    if base is str:
        low, high = limits.get("min_length", 0), limits.get("max_length")
        pattern = next((m.pattern for m in [*field.metadata, *inner] if getattr(m, "pattern", None)), None)
        text = f"text of at most {high:,} characters" + (", not blank" if low else "") if high else "text"
        return text + (f", matching the pattern {pattern}" if pattern else "")
    words: dict[Any, str] = {int: "an integer", float: "a number", bool: "true or false"}
    word = words.get(base, str(base))
    if "ge" in limits and "le" in limits:
        return f"{word} from {_number(limits['ge'])} to {_number(limits['le'])}"
    low = (f"at least {_number(limits['ge'])}" if "ge" in limits else
           f"above {_number(limits['gt'])}" if "gt" in limits else None)  # fmt: skip
    high = (f"at most {_number(limits['le'])}" if "le" in limits else
            f"below {_number(limits['lt'])}" if "lt" in limits else None)  # fmt: skip
    return " ".join([word, " and ".join(x for x in (low, high) if x)]).strip()


def _keys(model: type[BaseModel]) -> list[str]:
    return [info.alias or name for name, info in model.model_fields.items()]


def _resolve(schema: type[BaseModel], loc: tuple[Any, ...]) -> tuple[type[BaseModel], FieldInfo | None, int]:
    """Walk `loc` through nested models, and through a mapping of models by its keys (an engine's `eras`): (the
    model holding the last key found, its field, keys consumed)."""
    model, field, used = schema, None, 0
    while used < len(loc):
        by_key = {info.alias or name: info for name, info in model.model_fields.items()}
        if loc[used] not in by_key:
            break
        field, used = by_key[loc[used]], used + 1
        keyed = get_origin(field.annotation) is dict and used < len(loc)  # `eras.main.kernels`: `main` is a name
        kinds = get_args(field.annotation)[1:] if keyed else (field.annotation, *_options(field.annotation))
        inner = next((k for k in kinds if isinstance(k, type) and issubclass(k, BaseModel)), None)
        if inner is None:
            break
        model, used = inner, used + int(keyed)
    return model, field, used


def _shown(value: Any) -> str:
    """A short repr that never walks a large structure."""
    if isinstance(value, dict):
        return "a mapping" if value else "an empty mapping"
    if isinstance(value, (list, tuple, set, frozenset)):
        return f"a list of {len(value)}" if value else "an empty list"
    if isinstance(value, str) and len(value) > 40:
        return repr(value[:40]) + "..."
    return f"{value!r:.60}"


def field_message(error: ErrorDetails, schema: type[BaseModel] | None) -> tuple[str | None, str]:
    """(dotted key, message) for one pydantic error, saying what the key allows."""
    loc, kind = tuple(error["loc"]), error["type"]
    model, field, used = _resolve(schema, loc) if schema else (None, None, 0)
    # a union such as `all | even | odd | list[int]` reports one error per branch: describe the whole field
    union = field is not None and used < len(loc) and kind != "extra_forbidden" and len(_options(field.annotation)) > 1
    key = ".".join(str(p) for p in (loc[:used] if union else loc)) or None
    if kind == "extra_forbidden":
        names = _keys(model) if model else []
        close = difflib.get_close_matches(str(loc[used]), names, n=1, cutoff=0.6)
        hint = f"did you mean {close[0]}? " if close else ""
        return key, f"unknown key; {hint}allowed keys: {', '.join(names)}" if names else "unknown key"
    if kind == "missing":
        return key, "required key is missing" + (f"; give {allowed(field)}" if field else "")
    if kind == "value_error":  # our own validators: their message already says what is allowed
        return key, error["msg"].removeprefix("Value error, ")
    if field is not None and (used == len(loc) or union):
        message = f"must be {allowed(field)}"
    else:  # a value inside a mapping or list (provenance.x, peak_tflops.bf16): its own type
        message = f"must be {_TYPE_WORDS[kind]}" if kind in _TYPE_WORDS else error["msg"]
    return key, message + (f" (got {_shown(error['input'])})" if "input" in error else "")


def validation_error(where: str, exc: ValidationError, schema: type[BaseModel] | None = None) -> SpecError:
    """The first pydantic error as `file: key: message` saying what is allowed (the rest counted by key)."""
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


def validated(schema: type[Schema], where: str, data: dict[str, Any]) -> Schema:
    """`schema` validated from a file's mapping, or the SpecError naming the file, the key and what it allows."""
    try:
        return schema.model_validate(data)
    except ValidationError as exc:
        raise validation_error(where, exc, schema) from None
