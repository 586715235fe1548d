"""One result, several renderings: rich table, GitHub Markdown, CSV, JSON. rich is imported only to draw a rich
table, so the machine-readable formats start without it."""

from __future__ import annotations

import csv
import io
import json
import math
import os
import shutil
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TextIO

if TYPE_CHECKING:
    from rich.console import Console

PIPED_WIDTH = 200
PROSE_AT = 40  # a column with a cell wider than this holds prose: it wraps instead of setting the width
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
    """One table through rich: every string goes in as Text (a name like "h100 [sxm]" is shown, never markup)."""
    from rich.table import Table as RichTable
    from rich.text import Text

    if t.header:
        out.print(Text(t.header, style="bold"))
    keep = _columns_that_fit(t, out.width)
    grid = RichTable(title=Text(t.title, style="bold"), title_justify="left")
    for i in keep:  # a value is never wrapped, folded or cut: columns that do not fit are left out instead
        if t.prose or _widest(t, i) > PROSE_AT:  # prose wraps at spaces, left-aligned, never truncated
            width = min(_widest(t, i), PROSE_AT)
            grid.add_column(Text(t.columns[i]), justify="left", overflow="fold", min_width=width)
        else:
            grid.add_column(Text(t.columns[i]), justify="left" if i == 0 else "right", no_wrap=True,
                            min_width=_widest(t, i))  # fmt: skip
    for row in t.rows:
        grid.add_row(*(Text(row[i]) for i in keep))
    out.print(grid)
    for note in _left_out(t, keep, out.width) + t.notes:
        out.print(Text(note))


def plain(t: Table, width: int) -> str:
    """A table as aligned text, one line per row (what a long table prints: rich lays out ~0.6 ms a row); numbers
    right-aligned, text left; columns that do not fit `width` whole are left out, last first, never cut."""
    widths = [_widest(t, i) for i in range(len(t.columns))]
    keep = list(range(len(t.columns)))
    while len(keep) > 2 and sum(widths[i] + 2 for i in keep) - 2 > width:
        keep.pop()
    left = {i for i in keep if i == 0 or t.prose or widths[i] > PROSE_AT}

    def line(cells: list[str]) -> str:
        padded = (cells[i].ljust(widths[i]) if i in left else cells[i].rjust(widths[i]) for i in keep)
        return "  ".join(padded).rstrip() + "\n"

    rule = line(["-" * w for w in widths])
    body = "".join(line(row) for row in t.rows)
    notes = "".join(note + "\n" for note in _left_out(t, keep, width) + t.notes)
    return (f"{t.header}\n" if t.header else "") + f"{t.title}\n" + line(t.columns) + rule + body + notes


def _left_out(t: Table, keep: list[int], width: int) -> list[str]:
    """The note naming the columns left out at this width, if any."""
    dropped = [t.columns[i] for i in range(len(t.columns)) if i not in keep]
    if not dropped:
        return []
    return [f"(left out at {width} columns: {', '.join(dropped)}; widen the terminal or use --format markdown or json)"]


def _widest(t: Table, i: int) -> int:
    return max(len(cell) for cell in (t.columns[i], *(row[i] for row in t.rows)))


def _columns_that_fit(t: Table, width: int) -> list[int]:
    """The columns that fit the terminal whole (3 characters of padding and border each), the first two always;
    the rest are left out, last first, so that no number is ever cut, folded or ellipsized."""
    keep = list(range(len(t.columns)))
    while len(keep) > 2 and sum(min(_widest(t, i), PROSE_AT) + 3 for i in keep) + 1 > width:
        keep.pop()
    return keep


def markdown(t: Table) -> str:
    """A GitHub-flavoured Markdown table with its title in bold and notes below."""

    def cells(values: list[str]) -> str:
        return "| " + " | ".join(v.replace("|", "\\|") for v in values) + " |"

    align = "|" + "|".join(":---" if i == 0 else "---:" for i in range(len(t.columns))) + "|"
    lines = ([t.header, ""] if t.header else []) + [
        f"**{t.title}**",
        "",
        cells(t.columns),
        align,
        *(cells(r) for r in t.rows),
    ]
    if t.notes:
        lines += ["", *t.notes]
    return "\n".join(lines)


def print_csv(rows: list[dict[str, Any]]) -> None:
    """Rows of flat dicts as CSV with a header: every key any row has, in first-seen order ('' where absent)."""
    buffer = io.StringIO()
    fields = list(dict.fromkeys(key for row in rows for key in row))
    writer = csv.DictWriter(buffer, fieldnames=fields, restval="", lineterminator="\n")
    writer.writeheader()
    writer.writerows({k: "" if v is None else v for k, v in row.items()} for row in rows)
    sys.stdout.write(buffer.getvalue())


def write_rows(rows: Iterable[Sequence[Any]], columns: Sequence[str], fmt: str, out: TextIO) -> int:
    """Rows written as they come, as CSV (a header line, then a line per row) or JSON Lines (an object per row):
    memory holds one row, whatever the count. Returns the count; a non-finite number is refused, never written."""
    writer = csv.writer(out, lineterminator="\n") if fmt == "csv" else None
    if writer is not None:
        writer.writerow(columns)
    count = 0
    for row in rows:
        if writer is not None:
            writer.writerow(["" if v is None else _finite(v) for v in row])
        else:
            out.write(json.dumps(dict(zip(columns, map(_finite, row), strict=True)), allow_nan=False) + "\n")
        count += 1
    return count


def _finite(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"refusing to print a non-finite number ({value}); this is a tokcost bug")
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def json_text(data: Any) -> str:
    """Pretty JSON with stable key order; NaN and infinity are refused, never written."""
    return json.dumps(_finite(data), indent=2, allow_nan=False) + "\n"


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
