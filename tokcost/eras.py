"""Engine files: every era of one serving engine, and `name@era` resolved to the profile of one era.

An engine file (tokcost/specs/engines/<name>.yaml) lists the engine's eras, oldest first; `newest` is the era
`--engine <name>` means. An era is spelled by its name (`vllm@v1`, `tensorrt-llm@static`) or by a version it covers
(`vllm@0.6.3` is v0): each era states the versions it covers (`since`, `before`), and an eager era also takes the
runs without CUDA/HIP graphs (`--enforce-eager`) that the data's cell rules send it (validation/cells.py). An unknown
era lists the known ones. A file without `eras` (a profile written before eras) is one era of its own keys. Files
are strict: a number is a number (never `true` or "100"), every key is one the schema knows (a format family, a link
class, a platform), every source is text that is not blank.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from tokcost.catalog import builtin_names, expect_kind, locate, looks_like_path, spelling
from tokcost.errors import SpecError, UsageError
from tokcost.profiles import EngineProfile, EraFields
from tokcost.spec_errors import validated

_FROZEN = ConfigDict(frozen=True, extra="forbid", strict=True, str_strip_whitespace=True)
ERA_NAME = re.compile(r"^[a-z0-9][a-z0-9.\-]*$")
VERSION = re.compile(r"^v?(\d+(?:\.\d+)*)")  # the leading dotted numbers: "0.6.3.post2" -> 0.6.3, "1.0.0rc4" -> 1.0.0
# a version as a user spells one, whole: dotted numbers, then PEP 440's pre-, post- and dev-release tags and a local
# label ("0.6.3.post2", "1.0.0rc4", "0.6.3.dev116+g151ef4ef"); "0.x", "1e9" or "0.6-foo" are none
SPELLED_VERSION = re.compile(r"^\d+(?:\.\d+)*(?:[.-]?(?:post|dev|rc|alpha|beta|a|b)\d*)*(?:\+[0-9a-z.]+)?$")


COMMIT = re.compile(r"^[0-9a-f]{7,40}$")  # a git commit (9476b01): hex digits, at least one a letter


def at_least(version: tuple[int, ...], since: tuple[int, ...]) -> bool:
    """Whether `version` is `since` or later, missing parts read as 0 (1 is 1.0, 0.14 is 0.14.0)."""
    width = max(len(version), len(since))
    return version + (0,) * (width - len(version)) >= since + (0,) * (width - len(since))


def version_key(text: str) -> tuple[int, ...] | None:
    """A version's leading numbers as a tuple to compare ((0, 6, 3)); None for a commit hash or a build tag."""
    key = text.strip().lower()
    if COMMIT.match(key) and not key.isdigit():  # its leading digits (9476 of 9476b01) are no version
        return None
    found = VERSION.match(key)
    return tuple(int(p) for p in found.group(1).split(".")) if found else None


class Versions(BaseModel):
    """The versions an era covers: from `since` (inclusive) up to `before` (exclusive); unset: unbounded."""

    model_config = _FROZEN

    since: str | None = Field(default=None, min_length=1, max_length=40)
    before: str | None = Field(default=None, min_length=1, max_length=40)

    @field_validator("since", "before")
    @classmethod
    def _a_version(cls, value: str | None) -> str | None:
        if value is not None and version_key(value) is None:
            raise ValueError(f"{value!r} is not a version; give dotted numbers such as 0.6 or 1.0")
        return value

    @model_validator(mode="after")
    def _a_range(self) -> Versions:
        if self.since and self.before and version_key(self.since) >= version_key(self.before):  # type: ignore[operator]
            raise ValueError(f"since ({self.since}) must come before before ({self.before}): no version lies in "
                             "[since, before)")  # fmt: skip
        return self

    def bounds(self) -> list[tuple[int, ...]]:
        """The range's stated ends as version keys."""
        return [version_key(v) for v in (self.since, self.before) if v]  # type: ignore[misc]

    def cover(self, version: tuple[int, ...]) -> bool:
        """True when `version` lies in [since, before)."""
        low = version_key(self.since) if self.since else None
        high = version_key(self.before) if self.before else None
        return (low is None or version >= low) and (high is None or version < high)

    @property
    def text(self) -> str:
        """'0.6 to before 0.8', 'before 0.6', '0.8 on', 'every version'."""
        if self.since and self.before:
            return f"{self.since} to before {self.before}"
        return f"before {self.before}" if self.before else f"{self.since} on" if self.since else "every version"


class EraSpec(EraFields):
    """One era as its file states it: its values, the versions it covers, and whether eager runs map to it."""

    versions: Versions = Versions()
    eager: bool = False  # runs without CUDA/HIP graphs (--enforce-eager) map here (by the cell rules)


class EngineFile(BaseModel):
    """Every era of one engine, oldest first, and the one `--engine <name>` means."""

    model_config = _FROZEN

    name: str = Field(min_length=1, max_length=100, pattern=r"^[a-z0-9][a-z0-9.\-]*$")
    source: str = Field(min_length=1, max_length=4000)
    newest: str = Field(min_length=1, max_length=100)
    eras: dict[str, EraSpec] = Field(min_length=1)
    fit: str = Field(default="", max_length=4000)
    notes: str = Field(default="", max_length=10_000)

    @field_validator("eras")
    @classmethod
    def _era_names(cls, value: dict[str, EraSpec]) -> dict[str, EraSpec]:
        bad = [k for k in value if not ERA_NAME.match(k)]
        if bad:
            raise ValueError(f"era name {bad[0]!r}: lower-case letters, digits, '.' and '-' (e.g. v1, static, 0.6)")
        return value

    @model_validator(mode="after")
    def _versions_map_to_one_era(self) -> EngineFile:
        """No version lies in two eras' stated ranges (eager eras aside, which a run's graphs setting picks; an era
        that states no range, as lmdeploy's two backends, is picked by its name)."""
        spans = [
            (name, v) for name, era in self.eras.items() if not era.eager and ((v := era.versions).since or v.before)
        ]
        for i, (first, a) in enumerate(spans):
            for second, b in spans[i + 1 :]:
                lows = [version_key(v.since) for v in (a, b) if v.since]
                highs = [version_key(v.before) for v in (a, b) if v.before]
                if not highs or not lows or max(lows) < min(highs):  # type: ignore[type-var]
                    raise ValueError(f"eras {first} ({a.text}) and {second} ({b.text}) both cover some versions; "
                                     "give each version one era")  # fmt: skip
        return self

    @model_validator(mode="after")
    def _newest_is_an_era(self) -> EngineFile:
        if self.newest not in self.eras:
            raise ValueError(f"newest: {self.newest!r} is not one of the eras: {', '.join(self.eras)}")
        for name, era in self.eras.items():
            split = era.tensor_split_era
            if split is not None and (split not in self.eras or self.eras[split].tensor_split_era is not None):
                others = [e for e, spec in self.eras.items() if e != name and spec.tensor_split_era is None]
                raise ValueError(f"eras.{name}.tensor_split_era: {split!r} is not one of the other eras that names "
                                 f"none itself: {', '.join(others) or 'none (drop the key)'}")  # fmt: skip
        return self

    def era_of(self, spelled: str) -> str | None:
        """The era `spelled` names: an era's name, or a version one era covers (eager eras aside); else None (a
        version that several eras cover, as lmdeploy's two backends that state no range, names none of them)."""
        key = spelled.strip().lower()
        if key in self.eras:
            return key
        found = self.eras_covering(key)
        return found[0] if len(found) == 1 else None

    def eras_covering(self, spelled: str) -> list[str]:
        """The eras whose versions cover the version `spelled` (`0.6.3`, `v0.6.3`, llama.cpp's `b3891`): those with
        graphs first, an eager era only where none other does; [] where it is no version."""
        key = spelled.strip().lower()
        build = key[:1] == "b" and key[1:].isdigit()  # a build tag (llama.cpp's b3891) is its build number
        dotted = key[:1] == "v" and key[1:2].isdigit() and "." in key  # v0.6.3 is 0.6.3 (v9 would be an era's name)
        if build or dotted:
            key = key[1:]
        version = version_key(key) if SPELLED_VERSION.match(key) else None  # `v9` is a name (none such)
        if version is None:
            return []
        # a version spelled short stands for every release it prefixes (0.2: 0.2.0 up to 0.3), so it names each era
        # whose range starts inside that span too (vLLM 0.2 is eager before 0.2.6 and V0 from it)
        upper = (*version[:-1], version[-1] + 1)
        starts = sorted({b for era in self.eras.values() for b in era.versions.bounds() if version < b < upper})
        found: list[str] = []
        for point in (version, *starts):
            for name in self._covering(point):
                if name not in found:
                    found.append(name)
        return found

    def _covering(self, version: tuple[int, ...]) -> list[str]:
        """The eras covering one version: those with graphs, an eager era only where none other does."""
        found = [name for name, era in self.eras.items() if not era.eager and era.versions.cover(version)]
        return found or [name for name, era in self.eras.items() if era.versions.cover(version)]

    def covers(self, name: str) -> str:
        """What maps to an era, in words: its versions, and for an eager era the runs without graphs ('0.2.6 on,
        without graphs' where those versions run with graphs in another era; 'before b2800, or without graphs'
        where the versions alone map here)."""
        era = self.eras[name]
        text = era.versions.text
        if era.eager:
            text = f"{text}, {'without' if self._taken(era.versions) else 'or without'} graphs"
        if any(e.tensor_split_era == name for e in self.eras.values()):  # another era's split stages run here
            text += ", or split across GPUs"
        return text

    def _taken(self, versions: Versions) -> bool:
        """Whether eras that are not eager cover every version of `versions` (so only a graphs setting maps here)."""
        low = version_key(versions.since) if versions.since else ()
        high = version_key(versions.before) if versions.before else None
        while high is None or low < high:
            found = [e.versions for e in self.eras.values() if not e.eager and e.versions.cover(low)]  # type: ignore[arg-type]
            if not found:
                return False
            if found[0].before is None:
                return True
            low = version_key(found[0].before)  # type: ignore[assignment]
        return True

    def known(self) -> str:
        """The eras and what spells them, for an error or a listing."""
        return "; ".join(f"{self.name}@{name} ({self.covers(name)})" for name in self.eras)

    def profile(self, era: str | None = None) -> EngineProfile:
        """One era's profile (the newest when `era` is None)."""
        name = era or self.newest
        fields = self.eras[name].model_dump(exclude={"versions", "eager"})
        notes = "\n".join(n for n in (self.notes, fields.pop("notes")) if n)
        split = self.profile(fields["tensor_split_era"]) if fields["tensor_split_era"] else None
        return EngineProfile.model_validate(
            {**fields, "name": self.name, "era": name if len(self.eras) > 1 else "", "source": self.source,
             "fit": self.fit, "notes": notes, "tensor_split": split}, strict=False
        )  # fmt: skip


def split_spelling(text: str) -> tuple[str, str | None]:
    """('vllm', '0.6') for 'vllm@0.6'; (text, None) for a file path or a name without '@'."""
    name, at, era = text.rpartition("@")
    if not at or not name or os.path.exists(text) or looks_like_path(era):  # a file whose name holds an '@'
        return text, None
    if "@" in name and not os.path.exists(name) and not looks_like_path(name):  # 'vllm@0.6@x': two eras named
        raise UsageError(f"--engine: {text!r} names more than one era; spell it NAME or NAME@ERA (vllm@0.6)")
    return name, era


def load_file(name_or_path: str) -> tuple[str, EngineFile]:
    """(where, the engine's file) for a built-in name or a YAML path."""
    where, data = locate("engines", name_or_path)
    expect_kind(where, data, "engines")  # a GPU, model or network file says what it is and which flag takes it
    try:
        return where, validated(EngineFile, where, _with_name(data, name_or_path))
    except SpecError as exc:  # a flat file (one era of its own keys) is told about its keys, not `eras.main.`'s
        if not _flat(data) or not (exc.field or "").startswith(f"eras.{FLAT_ERA}."):
            raise
        raise SpecError(exc.where, exc.message, field=exc.field.removeprefix(f"eras.{FLAT_ERA}.")) from None


FILE_KEYS = ("name", "source", "fit", "notes")
FLAT_ERA = "main"  # the one era a file without `eras` is


def _flat(data: dict[str, Any]) -> bool:
    """A profile written before eras: one era (FLAT_ERA) of its own top-level keys."""
    return "eras" not in data and "newest" not in data


def _with_name(data: dict[str, Any], name_or_path: str) -> dict[str, Any]:
    """A file without `name` takes its file name's stem (a user's copy of a profile); a file without `eras` (a
    profile written before eras) is one era, `main`, of its own keys."""
    if "name" not in data:
        data = {**data, "name": Path(name_or_path).stem.lower()}
    if not _flat(data):
        return data
    era = {k: v for k, v in data.items() if k not in FILE_KEYS}
    return {**{k: data[k] for k in FILE_KEYS if k in data}, "newest": FLAT_ERA, "eras": {FLAT_ERA: era}}


def load_profile(spelled: str) -> EngineProfile:
    """The profile `spelled` names: `vllm` (newest era), `vllm@v0`, `vllm@0.6.3`, or a YAML file (`file.yaml@era`)."""
    name, era = split_spelling(spelling(spelled))
    where, found = load_file(name)
    if era is None:
        return found.profile()
    chosen = found.era_of(era)
    if chosen is None:  # a built-in's era is named as the user spelled it (no file of theirs to point at)
        builtin = name in builtin_names("engines")
        several = found.eras_covering(era)
        stated = any(found.eras[e].versions.bounds() for e in several)
        why = (
            f"version {era} spans {len(several)} of {found.name}'s eras ({', '.join(several)}): give the full "
            "version or name the era"
            if len(several) > 1 and stated
            else f"version {era} lies in {len(several)} of {found.name}'s eras ({', '.join(several)}), which state "
            "no versions to tell them apart: name one"
            if len(several) > 1
            else f"no era {era!r} of {found.name}"
        )
        raise SpecError(spelled if builtin else where, f"{why}; known: {found.known()}",
                        field=None if builtin else "eras")  # fmt: skip
    return _as_built(found.profile(chosen), era if chosen != era.strip().lower() else None)


def schedules_ahead(profile: EngineProfile, version: tuple[int, ...]) -> bool:
    """Whether a build at `version` runs the profile's overlap scheduler: at or past `overlap_scheduling_since`."""
    since = version_key(profile.overlap_scheduling_since or "")
    return since is not None and at_least(version, since)


def _as_built(profile: EngineProfile, spelled_version: str | None) -> EngineProfile:
    """An era spelled by a version runs as that build: without the overlap scheduler where it predates it."""
    key = spelled_version.strip().lower().removeprefix("v") if spelled_version else ""
    version = version_key(key) if key else None
    profile = built_at(profile, version)
    if version is None or profile.overlap_scheduling_since is None or schedules_ahead(profile, version):
        return profile
    return profile.model_copy(update={"overlap_scheduling_since": None})


def built_at(profile: EngineProfile, version: tuple[int, ...] | None) -> EngineProfile:
    """The profile as a build at `version` runs: the fused-MoE kernel switches it has made (EraFields.moe_row_kernels)
    and its version, which the engine's memory rule reads (memory.engine_reserve); None: the era's newest build,
    which has made them all."""
    if version is None:
        return profile
    kept = tuple(s for s in profile.moe_row_kernels if at_least(version, version_key(s.since) or ()))
    return profile.model_copy(update={"moe_row_kernels": kept, "build": ".".join(map(str, version))})


def builtin_files() -> dict[str, EngineFile]:
    """Every built-in engine's file, by name."""
    return {name: load_file(name)[1] for name in builtin_names("engines")}
