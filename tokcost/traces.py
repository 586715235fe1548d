"""Request traces for `tokcost plan --trace`: JSONL, one request a line, read through files.py's bounded reader.

A line is an object with integer `prompt_tokens` and `output_tokens` (1 to 100,000,000) and, on every line or
none, `arrival_s` (seconds from 0). The file is opened without blocking (a FIFO is refused unread) and read up
to MAX_TRACE_BYTES, so a trace too large for the search (over MAX_TRACE_ROWS requests) is refused before any
work, with its name; each bad line is named by its number and key.
"""

from __future__ import annotations

import difflib
import json
from dataclasses import dataclass
from pathlib import Path

from tokcost.errors import SpecError, UsageError
from tokcost.files import read_text

MAX_TRACE_ROWS = 100_000  # requests in one trace; its lengths become the plan's distributions
MAX_TRACE_BYTES = 16_000_000  # ~100,000 lines of three keys, with room for extra keys
MAX_TOKENS = 100_000_000


@dataclass(frozen=True, slots=True)
class Trace:
    """A trace's requests: their lengths and (when every line has one) their arrival times, in arrival order."""

    path: Path
    prompts: tuple[int, ...]
    outputs: tuple[int, ...]
    arrivals_s: tuple[float, ...] = ()


def _count(item: dict, key: str, where: str) -> int:
    if key not in item:
        raise UsageError(f"{where}: {key}: missing; every line gives prompt_tokens and output_tokens")
    value = item[key]
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_TOKENS:
        raise UsageError(f"{where}: {key}: must be an integer from 1 to {MAX_TOKENS:,} (got {value!r:.40})")
    return value


def _arrival(item: dict, where: str) -> float | None:
    value = item.get("arrival_s")
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < 1e9:
        raise UsageError(f"{where}: arrival_s: must be a number of seconds from 0 (got {value!r:.40})")
    return float(value)


class _Twice(Exception):
    """A key given twice in one line's object (json keeps the last, silently)."""

    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key


_READ = ("prompt_tokens", "output_tokens", "arrival_s")  # the keys a trace line is read for


def _unique(pairs: list[tuple[str, object]]) -> dict[str, object]:
    """An object's pairs as a dict, refusing a repeated key that is read; other keys, and what they hold, are the
    trace's own (any object of the line passes here, nested ones too)."""
    out: dict[str, object] = {}
    for key, value in pairs:
        if key in out and key in _READ:
            raise _Twice(key)
        out[key] = value
    return out


def _near_misses(item: dict, where: str) -> None:
    """Refuse a key one slip from a key the trace is read for that the line lacks (`arival_s`, `arrival_ms`): it
    would be kept as the trace's own and its value dropped without a word. Other keys (ids, text) pass."""
    for key in item:
        if key in _READ or not isinstance(key, str):
            continue
        close = difflib.get_close_matches(key, [k for k in _READ if k not in item], n=1, cutoff=0.8)
        if close:
            raise UsageError(f"{where}: key {key!r:.40} is not read; did you mean {close[0]}? (a trace reads "
                             f"{', '.join(_READ)}; other keys are kept as the trace's own)")  # fmt: skip


def read_trace(path: Path, flag: str = "--trace") -> Trace:
    """A trace's requests, or a one-line error naming the file, the line and the key (`flag` names the input: the
    API's `trace`)."""
    try:
        text = read_text(path, max_bytes=MAX_TRACE_BYTES, kind="trace", expect=".jsonl trace")
    except SpecError as exc:
        raise UsageError(f"{flag} {exc}") from None
    prompts: list[int] = []
    outputs: list[int] = []
    arrivals: list[float] = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        where = f"{flag} {path}: line {number}"
        if len(prompts) == MAX_TRACE_ROWS:
            raise UsageError(f"{flag} {path}: more than {MAX_TRACE_ROWS:,} requests; give at most {MAX_TRACE_ROWS:,}")
        try:
            item = json.loads(line, object_pairs_hook=_unique)
        except (ValueError, RecursionError) as exc:  # JSONDecodeError, or an integer past Python's 4,300 digits
            reason = (exc.msg if isinstance(exc, json.JSONDecodeError) else "nested too deep"
                      if isinstance(exc, RecursionError) else "a number of more than 4,300 digits")  # fmt: skip
            raise UsageError(f"{where}: not JSON ({reason})") from None
        except _Twice as exc:
            raise UsageError(f"{where}: key {exc.key!r:.40} appears twice; give it once") from None
        if not isinstance(item, dict):
            raise UsageError(f"{where}: expected an object with prompt_tokens and output_tokens")
        _near_misses(item, where)
        prompts.append(_count(item, "prompt_tokens", where))
        outputs.append(_count(item, "output_tokens", where))
        arrival = _arrival(item, where)
        if arrival is not None:
            arrivals.append(arrival)
    if not prompts:
        raise UsageError(f"{flag} {path}: no requests in the trace")
    if arrivals and len(arrivals) != len(prompts):
        raise UsageError(
            f"{flag} {path}: arrival_s on {len(arrivals):,} of {len(prompts):,} lines; give it on all or none"
        )
    if arrivals:  # in arrival order, each request keeping its own lengths
        order = sorted(range(len(arrivals)), key=arrivals.__getitem__)
        prompts, outputs = [prompts[i] for i in order], [outputs[i] for i in order]
        arrivals = [arrivals[i] for i in order]
    return Trace(path, tuple(prompts), tuple(outputs), tuple(arrivals))
