"""Tables at 80 and 60 columns: text wraps at spaces, columns are left out by priority, no value is ever cut.

Each command's tables are printed wide (200 columns) and narrow, parsed back column by column, and every
column the narrow table keeps must hold exactly the words of the wide one ("131,0" for 131,072 fails); every
column it drops is named in its note (issue 22, class 6).
"""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tokcost.cli.render import Table, plain
from tokcost.cli.widths import MIN_FOLD, fit

COMMANDS = [
    ("estimate", "-m", "llama-3.1-8b", "-g", "h100-sxm", "--journey"),
    ("estimate", "-m", "llama-3.1-70b", "-g", "h100-sxm", "--tp", "4", "--cached-prefix", "512"),
    ("compare", "-m", "llama-3.1-8b,mixtral-8x7b", "-g", "h100-sxm,h200,l40s"),
    ("sweep", "-m", "llama-3.1-8b", "-g", "h100-sxm", "-b", "1,64,4096", "--context", "1024,32768"),
    ("plan", "-m", "llama-3.1-8b", "-g", "h100-sxm,l40s", "--rate", "5", "--slo", "tpot_p90=50ms", "--tp", "1,2"),
    ("plan", "-m", "llama-3.1-8b", "-g", "h100-sxm", "--rate", "30", "--mode", "both", "--slo", "tpot_p90=20ms"),
    ("specs", "list"),
    ("specs", "show", "deepseek-v3"),
    ("specs", "show", "h100-sxm"),
    pytest.param(("validate",), marks=pytest.mark.slow),  # every published row priced
]


def tables(text: str) -> list[dict[str, list[str]]]:
    """Every rich table in `text` as {column: the words of its cells, top to bottom}, and the left-out note."""
    found, current = [], None
    for line in text.splitlines():
        if line.startswith("┏"):
            current = {"header": [], "rows": []}
        elif current is not None and line.startswith(("┃", "│")):
            current["header" if line.startswith("┃") else "rows"].append(line.strip("┃│").split(line[0]))
        elif current is not None and line.startswith("└"):
            columns = range(len(current["header"][0]))
            names = [" ".join(" ".join(h[i] for h in current["header"]).split()) for i in columns]
            found.append({name: " ".join(r[i] for r in current["rows"]).split() for i, name in enumerate(names)})
            current = None
    return found


@pytest.mark.parametrize("width", [80, 60])
@pytest.mark.parametrize("args", COMMANDS, ids=lambda a: " ".join(a[:3]))
def test_every_value_is_whole_at_80_and_60_columns(cli, monkeypatch, args, width):
    wide = cli(*args)
    assert wide.exit_code == 0, wide.stderr
    monkeypatch.setenv("COLUMNS", str(width))
    narrow = cli(*args)
    assert narrow.exit_code == 0, narrow.stderr
    assert "…" not in narrow.stdout
    reference, shown = tables(wide.stdout), tables(narrow.stdout)
    assert len(shown) == len(reference) > 0
    for full, cut in zip(reference, shown, strict=True):
        assert set(cut) <= set(full) and list(full)[:2] == list(cut)[:2]  # the first two columns always stay
        for column, words in cut.items():
            assert "".join(words) == "".join(full[column]), f"{args} at {width}: column {column!r} lost a character"
            if args[0] not in ("specs", "validate"):  # no URL or long row id to fold: every word whole on a line
                assert words == full[column], f"{args} at {width}: column {column!r} differs"
        notes = " ".join(narrow.stdout.split())  # a note wraps at spaces like any text
        said = re.findall(rf"left out at {width} columns: (.*?); widen", notes)
        for column in set(full) - set(cut):
            assert any(column in names.split(", ") for names in said), column
    boxes = [line for line in narrow.stdout.splitlines() if line[:1] in "┏┃┡│└"]
    assert max(len(line) for line in boxes) <= width  # each table fits, so nothing was cropped at the edge


def test_the_memory_table_keeps_131072_and_yes_at_80_columns(cli, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    memory = next(t for t in tables(cli("estimate", "-m", "llama-3.1-8b", "-g", "h100-sxm").stdout) if "item" in t)
    assert "131,072" in memory["value"] and "yes" in memory["value"]  # were printed as "131,0" and "y"


def test_compare_keeps_the_answer_at_80_columns(cli, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    r = cli("compare", "-m", "llama-3.1-8b,mixtral-8x7b", "-g", "h100-sxm,h200,l40s")
    (table,) = tables(r.stdout)
    assert list(table)[:2] == ["model", "gpu"] and {"fits", "TPOT", "tokens/s", "$/1M out"} <= set(table)
    assert "left out at 80 columns: GPUs, TTFT, 80% band, ceiling tok/s" in " ".join(r.stdout.split())  # in order


@pytest.mark.parametrize(
    "args",
    [("-g", "h100-sxm", "--rate", "30", "--mode", "both", "--slo", "ttft_p90=300ms", "--slo", "tpot_p90=20ms"),
     ("-g", "h100-sxm,a10", "--rate", "5", "--slo", "ttft_p90=40ms", "--slo", "tpot_p90=30ms", "--tp", "1,2")],
    ids=["a disaggregated fleet's long label", "a GPU's long reason for no fleet"],
)  # fmt: skip
def test_plan_keeps_its_answer_at_80_columns(cli, monkeypatch, args):
    monkeypatch.setenv("COLUMNS", "80")
    r = cli("plan", "-m", "llama-3.1-8b", *args)
    assert r.exit_code == 0, r.stderr
    answer = {"GPUs", "$/hour", "p90 TTFT", "p90 TPOT", "binding"}
    shown = tables(r.stdout)
    assert answer <= set(shown[0]) and list(shown[0])[:2] == ["#", "fleet"]  # the fleets, ranked
    if "Cheapest per GPU type" in r.stdout:  # the second table, its reasons wrapped at spaces
        assert answer <= set(shown[1]) and "missed even at zero load" in " ".join(shown[1]["binding"])
    assert max(len(line) for line in r.stdout.splitlines() if line[:1] in "┏┃┡│└") <= 80


def test_a_column_wraps_last_only_to_keep_an_answer_column():
    rows = [["1", "a long label of words", "12", "x"], ["2", "short", "3", "y"]]
    t = Table("t", ["#", "fleet", "n", "extra"], rows, answer=("n",), wrap_last=("fleet",))
    wide = fit(t, 60, per_column=3, border=1)  # room for all: nothing wraps
    assert wide.keep == [0, 1, 2, 3] and 1 not in wide.wraps
    mid = fit(t, 36, per_column=3, border=1)  # "extra" goes first, the label stays whole
    assert mid.keep == [0, 1, 2] and 1 not in mid.wraps
    narrow = fit(t, 30, per_column=3, border=1)  # then the label wraps rather than "n" going
    assert narrow.keep == [0, 1, 2] and 1 in narrow.wraps


def test_compare_of_several_formats_keeps_the_answer_at_80_columns(cli, monkeypatch):
    args = ("compare", "-m", "llama-3.1-70b,mixtral-8x7b", "-g", "h100-sxm,l40s", "-b", "8", "--weights", "fp8,bf16")
    wide = cli(*args, "-f", "markdown").stdout  # its own column in a document
    assert "| model | gpu | weights/KV/compute |" in wide
    monkeypatch.setenv("COLUMNS", "80")
    (table,) = tables(cli(*args).stdout)  # under the model's name on a terminal, wrapped at spaces
    assert list(table)[:2] == ["model, weights / KV / compute", "gpu"]
    assert {"fits", "TPOT", "tokens/s", "$/1M out"} <= set(table)
    assert table["model, weights / KV / compute"][:2] == ["llama-3.1-70b", "fp8/bf16/fp8"]


CELL = st.text(alphabet="ab1,. ", min_size=0, max_size=30).map(lambda s: " ".join(s.split()))


@given(
    columns=st.integers(2, 8).flatmap(lambda n: st.lists(CELL.filter(bool), min_size=n, max_size=n)),
    data=st.data(),
    width=st.integers(20, 120),
)
def test_fit_keeps_words_whole_until_only_two_columns_are_left(columns, data, width):
    rows = data.draw(st.lists(st.lists(CELL, min_size=len(columns), max_size=len(columns)), max_size=6))
    t = Table("t", columns, rows, wrap=tuple(data.draw(st.sets(st.sampled_from(columns)))))
    layout = fit(t, width, per_column=3, border=1)
    cells = {i: [columns[i], *(r[i] for r in rows)] for i in range(len(columns))}
    assert layout.keep[:2] == [0, 1]
    folded = False
    for i in layout.keep:
        if i not in layout.wraps:  # a number or a short text: one line, whole
            assert layout.widths[i] >= max(len(cell) for cell in cells[i])
        elif layout.widths[i] < max(len(w) for cell in cells[i] for w in cell.split() or [""]):
            folded = True  # a word folds onto the next line only as the last resort
    if folded or layout.total > width:
        assert layout.keep == [0, 1]
    if layout.total > width:  # wider than the terminal only when every folding column is at its narrowest
        assert all(layout.widths[i] <= MIN_FOLD for i in layout.wraps)
    text = plain(t, width)
    if not folded:  # the plain rendering holds every word of every kept cell, whole
        words = set(text.split())
        assert all(word in words for row in rows for i in layout.keep for word in row[i].split())
