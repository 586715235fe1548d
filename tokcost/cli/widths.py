"""How a table fits a terminal's width: wrap text at spaces, leave out columns by a stated priority, never cut.

A value is never cut, folded or ellipsized ("131,0" for 131,072 is a wrong number). Fitting goes in this order:
1. every column at its widest cell, if that fits;
2. text wraps at spaces: the first column (the row's label) and text columns (prose, or named in the table's
   `wrap`) narrow to their longest word;
3. columns are left out, those the table names in `drop` first, then the last first, its `answer` columns
   last (the first two stay); before an answer column goes, the columns in `wrap_last` wrap at spaces too; the
   table's note says which columns went;
4. as a last resort the second column wraps at spaces too, and a word longer than the terminal leaves room
   for (a 49-character row id at 60 columns) folds onto the next line, every character kept.
A prose table (specs, reasons) may fold a word longer than PROSE_AT (a URL); no other word folds before step 4.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tokcost.cli.render import Table

PROSE_AT = 40  # a column with a cell wider than this holds prose: it wraps instead of setting the width
READABLE = 12  # characters a wrapped text column keeps before another column is left out
MIN_FOLD = 8  # the narrowest a column folds to when even its words do not fit


@dataclass(frozen=True)
class Fit:
    """The columns kept (indexes, in order), each one's width, and which of them wrap at spaces."""

    keep: list[int]
    widths: dict[int, int]
    wraps: set[int]
    total: int  # characters a line takes, borders and padding included (over the width only below MIN_FOLD)


def cell_text(text: str) -> str:
    """User text as one printable line: a newline, tab or escape code in a name is shown escaped, never obeyed
    (a name with a newline would split its row)."""
    return text if text.isprintable() else "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def _cells(t: Table, i: int) -> list[str]:
    """Column `i` as printed: its header and cells."""
    return [cell_text(cell) for cell in (t.columns[i], *(row[i] for row in t.rows))]


def widest(t: Table, i: int) -> int:
    """The widest cell of column `i`, its header included."""
    return max(len(cell) for cell in _cells(t, i))


def _longest_word(t: Table, i: int) -> int:
    return max((len(word) for cell in _cells(t, i) for word in cell.split()), default=1)


def is_prose(t: Table, i: int) -> bool:
    """Text, not numbers: a prose table's columns, a column with a cell wider than PROSE_AT, one `t.wrap` names."""
    return t.prose or t.columns[i] in t.wrap or widest(t, i) > PROSE_AT


def _positions(t: Table, names: tuple[str, ...]) -> list[int]:
    """The indexes of the columns `names` lists that the table has, in the order named."""
    return [t.columns.index(name) for name in names if name in t.columns]


def _order(t: Table) -> list[int]:
    """Columns in the order they are left out: those `t.drop` names first, then the last first, `t.answer`'s
    last (never 0 and 1)."""
    named, answer = _positions(t, t.drop), set(_positions(t, t.answer))
    order = [*named, *(i for i in range(len(t.columns) - 1, 1, -1) if i not in named)]
    return [i for i in order if i not in answer] + [i for i in order if i in answer]


def fit(t: Table, width: int, per_column: int, border: int) -> Fit:
    """The widest layout of `t` within `width` (`per_column`: padding and rule per column; `border`: once)."""
    natural = {i: widest(t, i) for i in range(len(t.columns))}
    wraps = {i for i in natural if i == 0 or t.prose or t.columns[i] in t.wrap or natural[i] > PROSE_AT}
    # a word never breaks, but in a prose table (specs, reasons) a word longer than PROSE_AT (a URL) folds
    least = {i: min(_longest_word(t, i), PROSE_AT if t.prose else natural[i]) if i in wraps else natural[i]
             for i in natural}  # fmt: skip
    # while columns can still be left out, text keeps a readable width (a few words a line)
    readable = {i: max(least[i], min(natural[i], READABLE)) for i in natural}
    keep, dropping = list(natural), _order(t)
    answer, late = set(_positions(t, t.answer)), set(_positions(t, t.wrap_last)) - wraps

    def needs(columns: list[int], sizes: dict[int, int]) -> int:
        return sum(sizes[i] + per_column for i in columns) + border

    while needs(keep, readable) > width and dropping:
        if dropping[0] in answer and late:  # the answer's text wraps before one of its columns goes
            for i in late:
                wraps.add(i)
                least[i] = min(_longest_word(t, i), natural[i])
                readable[i] = max(least[i], min(natural[i], READABLE))
            late = set()
            continue
        keep.remove(dropping.pop(0))
    if needs(keep, least) > width and len(keep) > 1:  # the last resort: the second column wraps too
        wraps.add(keep[1])
        least[keep[1]] = min(_longest_word(t, keep[1]), natural[keep[1]])
    over = needs(keep, least) - width
    if over > 0:  # words longer than the terminal allows (long ids): they fold, whole, inside the table's frame
        for i in sorted(set(keep) & wraps, key=lambda i: -least[i]):
            cut = min(over, least[i] - MIN_FOLD)
            if cut > 0:
                least[i], over = least[i] - cut, over - cut
    base = readable if needs(keep, readable) <= width else least  # text keeps a few words a line where it can
    widths = {i: base[i] for i in keep}
    spare = width - needs(keep, widths)
    for i in sorted((i for i in keep if i in wraps), key=lambda i: natural[i] - least[i]):  # the least short first
        grow = min(max(spare, 0), natural[i] - widths[i])
        widths[i] += grow
        spare -= grow
    return Fit(keep, widths, wraps & set(keep), needs(keep, widths))


def left_out(t: Table, kept: list[int], width: int) -> list[str]:
    """The note naming the columns left out at this width, if any."""
    dropped = [t.columns[i] for i in range(len(t.columns)) if i not in kept]
    if not dropped:
        return []
    return [f"(left out at {width} columns: {', '.join(dropped)}; widen the terminal or use --format markdown or json)"]
