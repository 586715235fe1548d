"""One result, several renderings: rich table, GitHub Markdown, CSV, JSON. rich is imported only to draw a rich
table, so the machine-readable formats start without it."""

from __future__ import annotations

import csv
import io
import json
import math
import os
import re
import shutil
import sys
import textwrap
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TextIO

from tokcost.cli.widths import cell_text, fit, is_prose, left_out
from tokcost.errors import Unprintable

if TYPE_CHECKING:
    from rich.console import Console

PIPED_WIDTH = 200
FLASH_OFF = " · flash attention off (scores through memory)"  # every title of a workload priced unfused


def flash_note(fused: bool) -> str:
    """What a table's title adds for a workload priced with flash attention off ('' when fused)."""
    return "" if fused else FLASH_OFF


RICH_ROWS = 200  # rich lays a table out at ~0.6 ms a row: a longer one prints as plain aligned text


@dataclass
class Table:
    """A titled grid of already-formatted cells, with notes printed under it."""

    title: str
    columns: list[str]
    rows: list[list[str]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    header: str = ""
    prose: bool = False  # cells of text, not numbers: left-aligned, long words folded, never cut with an ellipsis
    drop: tuple[str, ...] = ()  # columns left out first on a narrow terminal, in this order (then the last first)
    wrap: tuple[str, ...] = ()  # columns of text (not numbers) that wrap at spaces on a narrow terminal
    answer: tuple[str, ...] = ()  # columns left out only after every other (the first two always stay)
    wrap_last: tuple[str, ...] = ()  # text columns that wrap at spaces only before an answer column would go


def console() -> Console:
    """A console on the current stdout (resolved at call time, so tests can capture it)."""
    from rich.console import Console

    # piped output (files, docs) gets a wide canvas instead of rich's 80-column default; COLUMNS still wins
    wide = None if sys.stdout.isatty() or os.environ.get("COLUMNS") else PIPED_WIDTH
    return Console(file=sys.stdout, highlight=False, soft_wrap=False, width=wide)


def print_tables(tables: list[Table], fmt: str) -> None:
    """Render tables as rich (table) or Markdown (markdown); a table of more than RICH_ROWS rows prints plain."""
    if fmt == "markdown":
        sys.stdout.write("\n\n".join(markdown(t) for t in tables) + "\n")
        return
    out = None
    for t in tables:
        if len(t.rows) > RICH_ROWS:  # COLUMNS, else the terminal's width, else (piped) PIPED_WIDTH, as rich does
            sys.stdout.write(plain(t, shutil.get_terminal_size((PIPED_WIDTH, 24)).columns))
            continue
        out = out or console()
        _print_rich(t, out)


def _print_rich(t: Table, out: Console) -> None:
    """One table through rich: every string goes in as Text (a name like "h100 [sxm]" is shown, never markup),
    laid out by widths.fit (text wraps at spaces, columns left out by priority, no value ever cut)."""
    from rich.table import Table as RichTable
    from rich.text import Text

    if t.header:
        out.print(Text(cell_text(t.header), style="bold"))
    layout = fit(t, out.width, per_column=3, border=1)  # each column: a space either side and a rule
    grid = RichTable(title=Text(cell_text(t.title), style="bold"), title_justify="left")
    for i in layout.keep:
        left = i == 0 or is_prose(t, i)
        grid.add_column(Text(t.columns[i]), justify="left" if left else "right", width=layout.widths[i],
                        no_wrap=i not in layout.wraps, overflow="fold")  # fmt: skip
    for row in t.rows:
        grid.add_row(*(Text(cell_text(row[i])) for i in layout.keep))
    out.print(grid, crop=False)  # wider than the terminal only on one narrower than two folded columns
    for note in left_out(t, layout.keep, out.width) + t.notes:
        out.print(Text(cell_text(note)))


def plain(t: Table, width: int) -> str:
    """A table as aligned text (what a long table prints: rich lays out ~0.6 ms a row); numbers right-aligned,
    text left and wrapped at spaces, columns left out by priority, as widths.fit lays them out; never cut."""
    layout = fit(t, width, per_column=2, border=-2)  # two spaces between columns
    left = {i for i in layout.keep if i == 0 or is_prose(t, i)}

    def lines(cells: list[str]) -> str:
        wrapped = {i: _wrap(cell_text(cells[i]), layout.widths[i]) if i in layout.wraps else [cell_text(cells[i])]
                   for i in layout.keep}  # fmt: skip
        out = ""
        for n in range(max(len(parts) for parts in wrapped.values())):
            parts = [wrapped[i][n] if n < len(wrapped[i]) else "" for i in layout.keep]
            padded = (p.ljust(layout.widths[i]) if i in left else p.rjust(layout.widths[i])
                      for i, p in zip(layout.keep, parts, strict=True))  # fmt: skip
            out += "  ".join(padded).rstrip() + "\n"
        return out

    rule = lines(["-" * layout.widths.get(i, 0) for i in range(len(t.columns))])
    body = "".join(lines(row) for row in t.rows)
    notes = "".join(cell_text(note) + "\n" for note in left_out(t, layout.keep, width) + t.notes)
    header = f"{cell_text(t.header)}\n" if t.header else ""
    return header + f"{cell_text(t.title)}\n" + lines(t.columns) + rule + body + notes


def _wrap(text: str, width: int) -> list[str]:
    """Text wrapped at spaces into lines of `width`; a word is never split (widths.fit makes room for it)."""
    return textwrap.wrap(text, width, break_long_words=False, break_on_hyphens=False) or [""]


def markdown(t: Table) -> str:
    """A GitHub-flavoured Markdown table with its title in bold and notes below."""

    def cells(values: list[str]) -> str:
        return "| " + " | ".join(cell_text(v).replace("|", "\\|") for v in values) + " |"

    align = "|" + "|".join(":---" if i == 0 else "---:" for i in range(len(t.columns))) + "|"
    lines = ([cell_text(t.header), ""] if t.header else []) + [
        f"**{cell_text(t.title)}**",
        "",
        cells(t.columns),
        align,
        *(cells(r) for r in t.rows),
    ]
    if t.notes:
        lines += ["", *map(cell_text, t.notes)]
    return "\n".join(lines)


def print_csv(rows: list[dict[str, Any]]) -> None:
    """Rows of flat dicts as CSV with a header: every key any row has, in first-seen order ('' where absent); a key
    that is null wherever it is bare, and dotted in another row (a figure one row has and another has not), keeps only
    its dotted columns."""
    buffer = io.StringIO()
    fields = list(dict.fromkeys(key for row in rows for key in row))
    parents = {key.rsplit(".", i)[0] for key in fields for i in range(1, key.count(".") + 1)}  # "a.b.c": a.b, a
    fields = [f for f in fields if f not in parents or any(row.get(f) is not None for row in rows)]
    writer = csv.DictWriter(buffer, fieldnames=fields, restval="", lineterminator="\n")
    writer.writeheader()
    kept = set(fields)  # a null parent left out of the header is left out of its row too
    writer.writerows({k: _csv_cell(v, k) for k, v in row.items() if k in kept} for row in rows)
    sys.stdout.write(buffer.getvalue())


def _csv_cell(value: Any, key: str) -> Any:
    """A CSV cell: empty for None, JSON for a list (a layer plan, warnings), else the checked value."""
    if value is None:
        return ""
    if isinstance(value, (list, tuple, dict)):
        return json.dumps(value, separators=(",", ":"))
    return checked(value, key)


def write_rows(rows: Iterable[Sequence[Any]], columns: Sequence[str], fmt: str, out: TextIO) -> int:
    """Rows written as they come, as CSV (a header line, then a line per row) or JSON Lines (an object per row):
    memory holds one row, whatever the count. Returns the count; a number that cannot be right is refused."""
    writer = csv.writer(out, lineterminator="\n") if fmt == "csv" else None
    if writer is not None:
        writer.writerow(columns)
    count = 0
    for row in rows:
        if writer is not None:
            writer.writerow(["" if v is None else checked(v, key) for key, v in zip(columns, row, strict=True)])
        else:
            out.write(json.dumps(checked(dict(zip(columns, row, strict=True))), allow_nan=False) + "\n")
        count += 1
    return count


# Keys naming a time, rate, cost, energy, size or count (units in names): their values are never negative
_UNSIGNED = re.compile(r"(?:^|_)(?:s|seconds|times|per_s|usd|bytes|flops|tokens?|joules|gpus?|batch)(?:_|$)")


def checked(value: Any, key: str = "") -> Any:
    """`value` (a number, or dicts and lists of them) as it may be printed: every number finite, and none negative
    under a key that names a time, rate, cost, energy, size or count (the rule fmt applies to tables); otherwise
    errors.Unprintable, never a wrong number on the page."""
    if isinstance(value, dict):
        return {k: checked(v, str(k)) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [checked(v, key) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        raise Unprintable(f"refusing to print {key or 'a number'} = {value}: a non-finite number (a tokcost bug)")
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value < 0 and _UNSIGNED.search(key):
        raise Unprintable(f"refusing to print {key} = {value}: a negative {key} cannot be right (a tokcost bug)")
    return value


def json_text(data: Any) -> str:
    """Pretty JSON with stable key order; NaN and infinity are refused, never written."""
    return json.dumps(checked(data), indent=2, allow_nan=False) + "\n"


def print_json(data: Any) -> None:
    """JSON on stdout."""
    sys.stdout.write(json_text(data))


def flatten(data: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested dicts as one level of dotted keys (for CSV)."""
    flat: dict[str, Any] = {}
    for key, value in data.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            flat.update(flatten(value, f"{name}."))
        else:
            flat[name] = value
    return flat


PROGRESS_AFTER_S = 3.0  # a command that takes longer shows how far it is (a plan over every GPU with a length
# distribution, a sweep of a million points to a file: minutes)


class Progress:
    """`sized 12 of 88 configurations (40 s)` on one line of a terminal's stderr while a command runs, from
    PROGRESS_AFTER_S on and at most twice a second (a command of seconds shows none; piped, a log or a test, shows
    none), cleared at the end."""

    def __init__(
        self, stream: TextIO, started: float, what: str = "sized {done:,} of {total:,} configurations"
    ) -> None:
        self.stream, self.started, self.what, self.shown, self.last = stream, started, what, False, 0.0
        self.live = stream.isatty()

    def __call__(self, done: int, total: int) -> None:
        now = time.perf_counter()
        elapsed = now - self.started
        if not self.live or elapsed < PROGRESS_AFTER_S or (now - self.last < 0.5 and done < total):
            return
        self.stream.write(f"\r{self.what.format(done=done, total=total)} ({elapsed:,.0f} s)")
        self.stream.flush()
        self.shown, self.last = True, now

    def clear(self) -> None:
        if self.shown:
            self.stream.write("\r\033[K")
            self.stream.flush()
