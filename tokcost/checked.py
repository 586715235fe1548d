"""The Python API's arguments checked as the command line checks its flags: one line, tokcost's own error.

pydantic's `validate_call` checks every argument against its annotation, strictly (a bool is never a count, a
str is never a list of names, a dict is never a Workload); a wrong one becomes a UsageError that names the
keyword, what it takes and what it got. Values are then checked by the path the CLI shares (tokcost/inputs.py,
serving/inputs.py), and an engine message worded with a flag (`--tp: ...`) names the keyword instead.
"""

from __future__ import annotations

import functools
import inspect
import os
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from typing import Annotated, Any, TypeVar, Union, get_args, get_origin

from pydantic import ConfigDict, ValidationError, validate_call

from tokcost.errors import SpecError, UsageError
from tokcost.inputs import api_message
from tokcost.plain import plain

F = TypeVar("F", bound=Callable[..., Any])
_STRICT = ConfigDict(strict=True, arbitrary_types_allowed=True)
_WORDS = {int: "an integer", float: "a number", str: "text", bool: "True or False", type(None): "None",
          os.PathLike: "a path"}  # fmt: skip


def words(annotation: Any) -> str:
    """What an annotation takes, in a reader's words: 'a ModelSpec or text or a path', 'a list of integers'."""
    origin, args = get_origin(annotation), get_args(annotation)
    if origin is Annotated:  # InstanceOf[X]
        return words(args[0])
    if origin in (Union, types.UnionType):
        return " or ".join(dict.fromkeys(words(a) for a in args))
    if origin in (list, tuple, Sequence):
        return f"a list of {_plural(words(args[0]))}"
    if origin in (dict, Mapping):
        return f"a mapping of {_plural(words(args[0]))} to {_plural(words(args[1]))}"
    if annotation in _WORDS:
        return _WORDS[annotation]
    name = getattr(annotation, "__name__", str(annotation))
    return f"an {name}" if name[:1] in "AEIOU" else f"a {name}"


def _plural(phrase: str) -> str:
    """'an integer' -> 'integers', 'a ModelSpec or text' -> 'ModelSpecs or text'."""
    out = []
    for part in phrase.split(" or "):
        head = part.removeprefix("an ").removeprefix("a ")
        out.append(head if head == part or head.startswith("list") else head + "s")
    return " or ".join(out)


def _got(value: Any) -> str:
    shown = f"{value!r:.40}" + ("..." if len(repr(value)) > 40 else "")
    return shown if isinstance(value, (int, float, str)) and not isinstance(value, bool) else (
        f"{type(value).__name__} {shown}")  # fmt: skip


def argument_error(exc: ValidationError, hints: dict[str, Any], arguments: Mapping[str, Any]) -> UsageError:
    """The first wrong argument (or item of a list argument) as `name: must be ... (got ...)`."""
    errors = exc.errors()
    name = str(errors[0]["loc"][0])
    value: Any = arguments.get(name)
    if isinstance(value, Sequence) and not isinstance(value, str):  # a list: name its first wrong item
        indexes = [part for e in errors for part in e["loc"][1:] if isinstance(part, int) and part < len(value)]
        if indexes:
            return UsageError(f"{name}[{indexes[0]}]: {_got(value[indexes[0]])} is not {words(_item(hints[name]))}")
    return UsageError(f"{name}: must be {words(hints[name])} (got {_got(value)})")


def _item(annotation: Any) -> Any:
    """The item type of the list branch of `annotation` (`X | Sequence[X]` -> X)."""
    for branch in (annotation, *get_args(annotation)):
        if get_origin(branch) in (list, tuple, Sequence):
            return get_args(branch)[0]
    return annotation


def checked(function: F) -> F:
    """`function` with its keyword arguments type-checked (strictly) and every refusal one UsageError line."""
    validated = validate_call(config=_STRICT)(function)
    signature = inspect.signature(function)
    hints = typing.get_type_hints(function, include_extras=True)

    @functools.wraps(function)
    def call(*args: Any, **kwargs: Any) -> Any:
        signature.bind(*args, **kwargs)  # a positional or unknown argument: Python's own TypeError, as unchecked
        kwargs = {k: plain(v) for k, v in kwargs.items()}
        try:
            return validated(*args, **kwargs)
        except ValidationError as exc:
            if exc.title != validated.__name__:  # raised inside the call, by a model it built: not an argument
                raise
            raise argument_error(exc, hints, kwargs) from None
        except UsageError as exc:
            raise UsageError(api_message(str(exc))) from None
        except SpecError as exc:  # a spec named for the wrong keyword, or not found: its hint in the API's words
            if api_message(exc.message) == exc.message:
                raise
            raise SpecError(exc.where, api_message(exc.message), exc.field) from None

    return typing.cast(F, call)
