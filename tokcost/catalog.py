"""Finding a spec by built-in name or by path, and telling the kinds of spec file and a HF config apart.

Built-ins ship as package data under tokcost/specs/. What a file is follows from its keys, never from its
name: a GPU spec passed as a model is named as such, and a stray `model_type` line does not turn a tokcost
model spec into a HuggingFace config.
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Iterable
from functools import cache
from pathlib import Path
from typing import Any, Literal

from tokcost.errors import SpecError, UsageError
from tokcost.files import PACKAGE, load_mapping

Kind = Literal["models", "gpus", "networks", "engines"]
FileKind = Literal["models", "gpus", "networks", "engines", "hf", "reports"]
SPEC_SUFFIXES = (".yaml", ".yml", ".json")
SPECS = PACKAGE / "specs"  # the built-ins, package data

# Keys only a HuggingFace config.json has (transformers' PretrainedConfig and the decoder configs)
HF_KEYS = frozenset({
    "model_type", "architectures", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
    "max_position_embeddings", "torch_dtype", "transformers_version", "rms_norm_eps", "hidden_act",
    "rope_theta", "quantization_config", "tie_word_embeddings",
})  # fmt: skip
# Keys a tokcost model spec shares with a HF config (they decide nothing)
_SHARED_WITH_HF = frozenset({"hidden_size", "intermediate_size", "vocab_size", "head_dim", "sliding_window",
                             "attention_bias", "dtype"})  # fmt: skip


def builtin_names(kind: Kind) -> list[str]:
    """Names of the built-in specs of one kind, sorted."""
    # the package's own folder (as files.is_builtin reads it): a listing, not importlib.resources' reader (~1 ms)
    return sorted(name.removesuffix(".yaml") for name in os.listdir(SPECS / kind) if name.endswith(".yaml"))


def suggest(names: list[str], name: str) -> tuple[str, list[str]]:
    """('did you mean ...? ', closest names first): names the input starts, then near spellings."""
    wanted = name.strip().lower()
    starting = [n for n in names if n.startswith(wanted)]
    close = starting + [n for n in difflib.get_close_matches(wanted, names, n=3, cutoff=0.5) if n not in starting]
    if len(starting) > 1:
        return f"did you mean one of {', '.join(starting)}? ", close
    return (f"did you mean {close[0]}? " if close else ""), close


def shown(name: str, limit: int = 80) -> str:
    """A name as an error quotes it: on one line, and clipped when longer than `limit`."""
    flat = name.encode("unicode_escape").decode("ascii") if not name.isprintable() else name
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


# Where a built-in of each kind goes: a name given where another kind is wanted says what it is and where it goes
_KIND_FLAG = {"models": "--model (-m)", "gpus": "--gpu (-g)", "networks": "--network", "engines": "--engine"}
_SINGULAR = {"models": "model", "gpus": "GPU", "networks": "network", "engines": "serving engine"}


def kind_of_name(name: str) -> Kind | None:
    """The kind of the built-in spec called `name` (any case), or None: names are unique across kinds."""
    key = name.strip().lower()
    kinds: tuple[Kind, ...] = ("models", "gpus", "networks", "engines")
    return next((kind for kind in kinds if key in builtin_names(kind)), None)


def unknown_name(kind: Kind, name: str) -> SpecError:
    """An error that says what a built-in of another kind is, else lists the known names, closest first."""
    singular = kind.removesuffix("s")
    other = kind_of_name(name)
    if other is not None and other != kind:
        key = name.strip().lower()
        return SpecError(key, f"this is a built-in {_SINGULAR[other]}, not a {_SINGULAR[kind]}; pass it to "
                              f"{_KIND_FLAG[other]} (tokcost specs show {key} shows it)")  # fmt: skip
    names = builtin_names(kind)
    parts = [p.strip().lower() for p in name.split(",")]
    if len(parts) > 1 and all(p in names for p in parts):  # a list where one name goes: compare and plan take lists
        flag = _KIND_FLAG[kind].split()[0]
        return SpecError(shown(name), f"one {_SINGULAR[kind]} goes here; {len(parts)} side by side are tokcost "
                                      f"compare's (its {flag} takes a comma-separated list)")  # fmt: skip
    hint, close = suggest(names, name)
    rest = [n for n in names if n not in close]
    known = ", ".join(close + rest)
    return SpecError(shown(name), f"not a built-in {singular} nor a file; {hint}known {kind}: {known}")


def looks_like_path(text: str) -> bool:
    """A spec file's name (any case of .yaml/.json), a path with a folder, or something that exists."""
    # os.path.exists is False for a name the OS refuses (too long, NUL), where Path.exists raises
    return Path(text).suffix.lower() in SPEC_SUFFIXES or "/" in text or os.sep in text or os.path.exists(text)


def spelling(value: object) -> str:
    """A spec's name or path as text: a str, or a path (os.PathLike, as the flags' files are); anything else is refused
    in one line naming the argument."""
    if isinstance(value, os.PathLike):
        value = os.fspath(value)
    if not isinstance(value, str):
        kind = type(value).__name__
        raise UsageError(f"name_or_path: a built-in name or a file path (str or pathlib.Path), not {kind}")
    return value


def locate(kind: Kind, name_or_path: str) -> tuple[str, dict[str, Any]]:
    """(where, mapping) for a built-in name (any case) or a path to a YAML/JSON file."""
    name_or_path = spelling(name_or_path)
    singular = kind.removesuffix("s")
    if not name_or_path.strip():
        raise SpecError("(empty)", f"no {singular} given; name a built-in {singular} or a file")
    key = name_or_path.strip().lower()
    if key in builtin_names(kind):
        return f"{kind}/{key}.yaml", load_mapping(SPECS / kind / f"{key}.yaml")
    if not looks_like_path(name_or_path):
        raise unknown_name(kind, name_or_path)
    if not os.path.lexists(name_or_path):  # say which input it was: a command reads several kinds of spec
        what = "GPU" if singular == "gpu" else singular
        raise SpecError(name_or_path, f"no such file; the {what} is a built-in name or a spec file (tokcost specs "
                                      f"list --kind {kind})")  # fmt: skip
    return name_or_path, load_mapping(Path(name_or_path))


@cache
def _markers() -> dict[FileKind, frozenset[str]]:
    """Each kind's own keys: its fields that no other kind of file has."""
    from tokcost.eras import EngineFile
    from tokcost.hardware.spec import GpuSpec, Link  # lazy: the spec modules import nothing of tokcost's loading
    from tokcost.models.spec import ModelSpec
    from tokcost.profiles import EngineProfile

    fields: dict[FileKind, set[str]] = {
        kind: {info.alias or name for name, info in spec.model_fields.items()}
        for kind, spec in (("models", ModelSpec), ("gpus", GpuSpec), ("networks", Link), ("engines", EngineProfile))
    }  # fmt: skip
    fields["engines"] |= set(EngineFile.model_fields)  # an engine's file of eras (`newest`, `eras`), or one flat era
    own: dict[FileKind, frozenset[str]] = {
        kind: frozenset(keys.difference(*(other for k, other in fields.items() if k != kind)))
        for kind, keys in fields.items()
    }  # fmt: skip
    everything = set().union(*fields.values())
    return {**own, "models": own["models"] - _SHARED_WITH_HF - HF_KEYS, "hf": HF_KEYS,
            "reports": REPORT_KEYS - everything}  # fmt: skip


def kind_of(data: dict[str, Any]) -> FileKind | None:
    """Which kind of file holds these keys: the kind with the most keys of its own; None when none or a tie."""
    scores = sorted(((len(keys & data.keys()), kind) for kind, keys in _markers().items()), reverse=True)
    (best, kind), (second, _) = scores[0], scores[1]
    return kind if best > second else None


_WHAT = {"models": "a tokcost model spec", "gpus": "a GPU spec", "networks": "a network spec",
         "engines": "an engine profile", "hf": "a HuggingFace model config",
         "reports": "a measure report (what tokcost measure --save writes)"}  # fmt: skip
_FLAG = {"models": "--model (-m)", "gpus": "--gpu (-g)", "networks": "--network", "engines": "--engine",
         "hf": "--model (-m)"}  # fmt: skip
# the keys of measure's saved report (measure/session.py MeasureOutcome.as_dict): an output, no flag reads it
REPORT_KEYS = frozenset({"device", "probes", "allreduce", "datasheet_gpu", "runs", "complete"})


def expect_kind(where: str, data: dict[str, Any], *wanted: FileKind, hint: bool = True) -> FileKind | None:
    """The file's kind when it is one of `wanted` (or undecided); else an error saying what it is."""
    kind = kind_of(data)
    if kind is None or kind in wanted:
        return kind
    tail = f"; pass it to {_FLAG[kind]}" if hint and kind in _FLAG else ""  # a report: no flag reads it
    raise SpecError(where, f"this is {_WHAT[kind]}, not {_WHAT[wanted[0]]}{tail}")


def repeated_name(specs: Iterable[Any]) -> str | None:
    """The first name two of `specs` share (a custom file that kept a built-in's name prints as that built-in,
    and a per-GPU --price or --gpus would reach only one of them), or None."""
    seen: set[str] = set()
    for spec in specs:
        if spec.name in seen:
            return spec.name
        seen.add(spec.name)
    return None
