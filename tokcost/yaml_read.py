"""YAML as tokcost reads it: PyYAML's safe loader with YAML 1.2 core-schema scalars instead of YAML 1.1's.

Only true/false are booleans, no base 60 (`4:00`), no YAML 1.1 octal (`010` stays text; YAML 1.2's `0o10` is 8),
no `yes`/`on`; numbers longer than MAX_NUMBER_CHARS are refused before conversion. The composer, not a separate
walk, refuses aliases (no alias bomb can expand), nesting past MAX_NESTING, more than MAX_NODES values (which
bounds parse time as well as size), duplicate keys and keys that are not text. tokcost's own files (package data)
are parsed by libyaml with the same scalars and key checks (BuiltinLoader). PyYAML has resolver and composer hooks
but no limits; what is here is those limits. A module of its own so that a run that reads no YAML (built-in specs
come from their packaged bundle, tokcost.bundle) never imports PyYAML.
"""

from __future__ import annotations

import re
from typing import Any

import yaml

from tokcost.errors import SpecError
from tokcost.files import MAX_NESTING, MAX_NODES, MAX_NUMBER_CHARS

_CORE = "tag:yaml.org,2002:"
# YAML 1.2 core schema (yaml.org/spec/1.2.2 section 10.3.2): 0x hex and 0o octal; `010` stays text (8 or 10?)
_INT = re.compile(r"[-+]?(?:0|[1-9][0-9]*)|0x[0-9a-fA-F]+|0o[0-7]+")
_FLOAT = re.compile(
    r"[-+]?(?:\.[0-9]+|(?:0|[1-9][0-9]*)(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN)"
)


class _Refused(yaml.MarkedYAMLError):
    """Something a spec never needs, at a line of the file."""

    def __init__(self, node: yaml.Node | yaml.Event, problem: str) -> None:
        super().__init__(problem=problem, problem_mark=node.start_mark)


def _number(loader: yaml.SafeLoader, node: yaml.ScalarNode) -> int | float:
    """An int or float, refused before conversion when its text is longer than any spec figure."""
    if len(node.value) > MAX_NUMBER_CHARS:
        raise _Refused(node, f"a number of {len(node.value):,} characters; at most {MAX_NUMBER_CHARS} are allowed")
    construct = loader.construct_yaml_int if node.tag == _CORE + "int" else loader.construct_yaml_float
    return construct(node)


class _KeyChecks:
    """Keys are text and appear once (a mixin over PyYAML's SafeConstructor)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[str] = set()
        for key, _ in node.value:
            if not isinstance(key, yaml.ScalarNode):
                raise _Refused(key, "a list or mapping used as a key; a key is a name such as layers")
            if key.tag != _CORE + "str":
                raise _Refused(key, f"key {key.value!r:.40} is not text; a key is a name such as layers")
            if key.value in seen:
                raise _Refused(key, f"key {key.value!r:.40} appears twice")
            seen.add(key.value)
        return super().construct_mapping(node, deep)  # type: ignore[misc]


class SpecLoader(_KeyChecks, yaml.SafeLoader):
    """PyYAML's safe loader reading YAML 1.2 core-schema scalars, refusing what no spec needs."""

    yaml_implicit_resolvers: dict[str, list[tuple[str, re.Pattern[str]]]] = {}  # not YAML 1.1's: set below
    depth = nodes = 0

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node:
        event = self.peek_event()
        if isinstance(event, yaml.AliasEvent):
            raise _Refused(event, "YAML aliases (*name) are not allowed in a spec; write the value out")
        self.depth, self.nodes = self.depth + 1, self.nodes + 1
        if self.depth > MAX_NESTING:
            raise _Refused(event, f"nested more than {MAX_NESTING} levels deep; a spec nests three")
        if self.nodes > MAX_NODES:
            raise _Refused(event, f"more than {MAX_NODES:,} values; a spec holds a few dozen")
        try:
            return super().compose_node(parent, index)
        finally:
            self.depth -= 1


if yaml.__with_libyaml__:

    class BuiltinLoader(_KeyChecks, yaml.CSafeLoader):
        """libyaml's C parser (5x faster or more) with SpecLoader's scalars and key checks, for tokcost's own files only
        (built-in specs, validation data): a test holds both loaders equal on every one of them. The limits on
        aliases, nesting and size are SpecLoader's composer's; user files always go through it."""

        yaml_implicit_resolvers = SpecLoader.yaml_implicit_resolvers  # the same dict: filled below

else:  # pragma: no cover - a PyYAML built without libyaml
    BuiltinLoader = SpecLoader  # type: ignore[misc]


for _loader in (SpecLoader, BuiltinLoader):
    _loader.add_constructor(_CORE + "int", _number)
    _loader.add_constructor(_CORE + "float", _number)
for _tag, _pattern, _first in (
    ("null", r"~|null|Null|NULL|", ["~", "n", "N", ""]),
    ("bool", r"true|True|TRUE|false|False|FALSE", list("tTfF")),
    ("int", _INT.pattern, list("-+0123456789")),
    ("float", _FLOAT.pattern, list("-+.0123456789")),
):
    SpecLoader.add_implicit_resolver(_CORE + _tag, re.compile(f"^(?:{_pattern})$"), _first)


def load_yaml(text: str, where: str, loader: type[yaml.SafeLoader] = SpecLoader) -> Any:
    try:
        return yaml.load(text, Loader=loader)  # noqa: S506 - a SafeLoader (or CSafeLoader) with fewer types
    except yaml.constructor.ConstructorError as exc:  # an explicit tag no spec needs (!!python/..., !!set)
        line = f"line {exc.problem_mark.line + 1}: " if exc.problem_mark else ""
        tag = (exc.problem or "").rpartition("tag ")[2].removeprefix("'" + _CORE).strip("'") or "?"
        raise SpecError(where, f"{line}unsupported YAML tag !!{tag}; specs hold plain data only") from None
    except _Refused as exc:
        raise SpecError(where, f"line {exc.problem_mark.line + 1}: {exc.problem}") from None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        at = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        raise SpecError(where, f"{at}YAML syntax error: {exc.problem or exc.context}") from None
    except yaml.YAMLError as exc:
        raise SpecError(where, f"YAML syntax error: {str(exc).splitlines()[0]}") from None
