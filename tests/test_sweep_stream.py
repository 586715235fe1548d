"""Big sweeps: csv and jsonl rows are written as they are priced (never held), bounded before any work, written
to --out whole or not at all; long tables print plain. Values are the engine's own (the held JSON's)."""

from __future__ import annotations

import csv
import io
import json
import re
import sys
from dataclasses import fields, replace

import pytest

import tokcost.cli.sweep_cmd as sweep_cmd
from tokcost.cli.render import RICH_ROWS, write_rows
from tokcost.engine.sweep import SweepPoint, iter_sweep
from tokcost.errors import TokcostError

SWEEP = ("sweep", "-m", "llama-3.1-8b", "-g", "h100-sxm", "-b", "1,8,64", "--context", "512,4096")
BOX = re.compile("[─│┃━┏┌╭]")


def _csv(text: str) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(text)))


def _as_csv_cell(value) -> str:
    return "" if value is None else str(value)


def test_csv_rows_are_the_json_points_in_order(cli):
    held = cli(*SWEEP, "-f", "json").json()["points"]
    streamed = cli(*SWEEP, "-f", "csv")
    assert streamed.exit_code == 0, streamed.stderr
    rows = _csv(streamed.stdout)
    assert list(rows[0]) == [f.name for f in fields(SweepPoint)] == list(held[0])
    coordinates = [(int(r["prompt_tokens"]), int(r["batch"])) for r in rows]
    assert coordinates == [(512, 1), (512, 8), (512, 64), (4096, 1), (4096, 8), (4096, 64)]  # prompts outermost
    assert rows == [{k: _as_csv_cell(v) for k, v in p.items()} for p in held]  # floats as repr: exact


def test_jsonl_lines_are_the_json_points(cli):
    held = cli(*SWEEP, "-f", "json").json()["points"]
    streamed = cli(*SWEEP, "-f", "jsonl")
    assert streamed.exit_code == 0, streamed.stderr
    assert [json.loads(line) for line in streamed.stdout.splitlines()] == held


def test_rows_are_written_before_the_next_point_is_priced(cli, monkeypatch):
    """Each row reaches stdout before the engine is asked for the next point: memory holds one point."""
    seen: list[int] = []

    def lines() -> int:
        return len(sys.stdout.getvalue().splitlines())  # the cli fixture's captured stdout

    def watched(*args, **kwargs):
        for i, point in enumerate(iter_sweep(*args, **kwargs)):
            seen.append(lines())  # lines written when point i is handed over
            yield point
            assert lines() == i + 2  # the header and rows 0..i, before point i+1 is priced

    monkeypatch.setattr(sweep_cmd, "iter_sweep", watched)
    result = cli(*SWEEP, "-f", "csv")
    assert result.exit_code == 0, result.stderr
    # the first point is priced before anything is written (what the engine refuses leaves stdout empty)
    assert seen == [0, 2, 3, 4, 5, 6] and len(result.stdout.splitlines()) == 7


def test_a_model_the_engine_refuses_writes_no_header(cli):
    r = cli("sweep", "-m", "llama-3.1-8b", "-g", "h100-sxm", "-b", "1,8", "--tp", "3", "-f", "csv")
    assert r.exit_code == 2 and r.stdout == "" and "does not divide" in r.stderr


def _cheap_points(*args, batches, prompts, **kwargs):
    """The CLI's bounds, not the engine's speed, are under test: one real point, repeated with each coordinate."""
    first = next(iter_sweep(*args, batches=[1], prompts=[128], **kwargs))
    return (replace(first, batch=b, prompt_tokens=p) for p in prompts for b in batches)


def test_csv_streams_past_the_held_bound_that_a_table_refuses(cli, monkeypatch):
    monkeypatch.setattr(sweep_cmd, "iter_sweep", _cheap_points)
    batches = ",".join(str(b) for b in range(1, sweep_cmd.MAX_HELD_POINTS + 2))  # one point over
    table = cli("sweep", "-m", "llama-3.1-8b", "-g", "h100-sxm", "-b", batches)
    assert table.exit_code == 2 and table.stdout == ""
    assert table.stderr == (
        "error: --batch: 10,001 --batch values x 1 --context values make 10,001 points; at most 10,000 per run "
        "with -f table (-f csv or -f jsonl streams up to 10,000,000)\n"
    )
    streamed = cli("sweep", "-m", "llama-3.1-8b", "-g", "h100-sxm", "-b", batches, "-f", "csv")
    assert streamed.exit_code == 0, streamed.stderr
    assert len(streamed.stdout.splitlines()) == 1 + 10_001


def test_the_streamed_bound_is_refused_before_any_work(cli, monkeypatch):
    def no_work(*args, **kwargs):
        raise AssertionError("a spec was loaded for a refused grid")

    monkeypatch.setattr(sweep_cmd, "load_model", no_work)
    batches = ",".join(str(b) for b in range(1, 10_001))
    contexts = ",".join(str(c) for c in range(1, 1_002))
    r = cli("sweep", "-m", "llama-3.1-8b", "-g", "h100-sxm", "-b", batches, "--context", contexts, "-f", "jsonl")
    assert r.exit_code == 2
    assert r.stderr == ("error: --batch: 10,000 --batch values x 1,001 --context values make 10,010,000 points; "
                        "at most 10,000,000 per run\n")  # fmt: skip


def test_plot_holds_the_points_so_the_held_bound_applies(cli, tmp_path):
    pytest.importorskip("matplotlib")
    batches = ",".join(str(b) for b in range(1, 10_002))
    r = cli(
        "sweep", "-m", "llama-3.1-8b", "-g", "h100-sxm", "-b", batches, "-f", "csv", "--plot", str(tmp_path / "s.png")
    )
    assert r.exit_code == 2 and "at most 10,000 per run with --plot" in r.stderr


def test_help_states_both_bounds(cli):
    text = " ".join(cli("sweep", "--help").stdout.replace("│", " ").split())
    assert "up to 10,000 points" in text and "up to 10,000,000" in text and "jsonl" in text


def test_out_writes_the_file_whole_and_never_replaces_one_without_force(cli, tmp_path):
    out = tmp_path / "sweep.csv"
    r = cli(*SWEEP, "-f", "csv", "--out", str(out))
    assert (r.exit_code, r.stdout) == (0, "")
    assert out.read_text() == cli(*SWEEP, "-f", "csv").stdout
    out.write_text("mine\n")
    again = cli(*SWEEP, "-f", "csv", "--out", str(out))
    assert again.exit_code == 2 and "already exists; pass --force" in again.stderr
    assert out.read_text() == "mine\n"
    forced = cli(*SWEEP, "-f", "csv", "--out", str(out), "--force")
    assert forced.exit_code == 0, forced.stderr
    assert len(out.read_text().splitlines()) == 7  # the header and 6 points
    mixed = cli(*SWEEP, "-f", "jsonl", "--out", str(out), "--force")  # JSON lines under a .csv name: refused
    assert mixed.exit_code == 2 and "names a .csv file but -f jsonl writes jsonl" in mixed.stderr
    assert [p.name for p in tmp_path.iterdir()] == ["sweep.csv"]


@pytest.mark.parametrize("fmt", ["json", "markdown"])
def test_out_takes_the_held_renderings_too(cli, tmp_path, fmt):
    out = tmp_path / f"sweep.{fmt}"
    assert cli(*SWEEP, "-f", fmt, "--out", str(out)).exit_code == 0
    assert out.read_text() == cli(*SWEEP, "-f", fmt).stdout


def test_out_refuses_the_rich_table(cli, tmp_path):
    r = cli(*SWEEP, "--out", str(tmp_path / "t.txt"))
    assert (r.exit_code, r.stderr) == (2, "error: --out: writes csv, jsonl, json or markdown; add -f csv (or another "
                                          "of them)\n")  # fmt: skip
    assert list(tmp_path.iterdir()) == []


def test_a_failure_mid_stream_leaves_no_file_and_no_temporary(cli, tmp_path, monkeypatch):
    out = tmp_path / "sweep.csv"
    progress: list[list[str]] = []

    def failing(*args, **kwargs):
        for i, point in enumerate(iter_sweep(*args, **kwargs)):
            progress.append(sorted(p.name for p in tmp_path.iterdir()))
            if i == 3:
                raise TokcostError("the engine failed at point 3")
            yield point

    monkeypatch.setattr(sweep_cmd, "iter_sweep", failing)
    r = cli(*SWEEP, "-f", "csv", "--out", str(out))
    assert (r.exit_code, r.stderr) == (2, "error: the engine failed at point 3\n")
    assert progress[0] == []  # the first point is priced before the file is opened
    assert all(len(names) == 1 and names[0].endswith(".tmp") for names in progress[1:])  # streamed to a temporary
    assert list(tmp_path.iterdir()) == []


def test_an_interrupted_stream_says_nothing_was_written(cli, tmp_path, monkeypatch):
    out = tmp_path / "sweep.jsonl"

    def interrupted(*args, **kwargs):
        yield next(iter_sweep(*args, **kwargs))
        raise KeyboardInterrupt

    monkeypatch.setattr(sweep_cmd, "iter_sweep", interrupted)
    r = cli(*SWEEP, "-f", "jsonl", "--out", str(out))
    assert (r.exit_code, r.stderr) == (130, f"interrupted: nothing was written to {out}\n")
    assert list(tmp_path.iterdir()) == []


def test_a_long_table_prints_plain_with_every_row_and_a_hint(cli, monkeypatch):
    monkeypatch.setattr(sweep_cmd, "iter_sweep", _cheap_points)
    batches = ",".join(str(b) for b in range(1, RICH_ROWS + 2))
    r = cli("sweep", "-m", "llama-3.1-8b", "-g", "h100-sxm", "-b", batches)
    assert r.exit_code == 0, r.stderr
    assert not BOX.search(r.stdout)
    lines = r.stdout.splitlines()
    head = lines.index(next(line for line in lines if line.startswith("batch")))
    assert lines[head].split() == ["batch", "prompt", "TTFT", "TPOT", "tokens/s", "ceiling", "tok/s", "$/1M", "in",
                                   "$/1M", "out", "memory/GPU", "bound", "note"]  # fmt: skip
    rows = lines[head + 2 : head + 2 + RICH_ROWS + 1]
    assert [int(row.split()[0].replace(",", "")) for row in rows] == list(range(1, RICH_ROWS + 2))
    assert "-f csv or -f jsonl writes each as it is computed" in r.stdout
    short = cli("sweep", "-m", "llama-3.1-8b", "-g", "h100-sxm", "-b", "1,2")
    assert BOX.search(short.stdout) and "-f csv or -f jsonl" not in short.stdout


def test_a_plain_table_leaves_out_columns_that_do_not_fit_and_says_so(cli, monkeypatch):
    monkeypatch.setenv("COLUMNS", "60")
    monkeypatch.setattr(sweep_cmd, "iter_sweep", _cheap_points)
    batches = ",".join(str(b) for b in range(1, RICH_ROWS + 2))
    out = cli("sweep", "-m", "llama-3.1-8b", "-g", "h100-sxm", "-b", batches).stdout
    table = [line for line in out.splitlines() if not line.startswith("(")][1:]
    assert max(len(line) for line in table) <= 60
    left_out = out.split("(left out at 60 columns:")[1].split(";")[0]
    assert "ceiling tok/s" in left_out and "note" not in left_out  # the note (a memory limit's only word) stays


def test_write_rows_refuses_a_non_finite_number():
    with pytest.raises(ValueError, match="non-finite"):
        write_rows([(1, float("nan"))], ["a", "b"], "csv", io.StringIO())
    with pytest.raises(ValueError, match="non-finite"):
        write_rows([(1, float("inf"))], ["a", "b"], "jsonl", io.StringIO())
    out = io.StringIO()
    assert write_rows([(1, None), (2, 0.5)], ["a", "b"], "csv", out) == 2
    assert out.getvalue() == "a,b\n1,\n2,0.5\n"


def test_each_point_names_its_layout_and_engine_as_compare_does(cli):
    # a pasted row must say what it priced: the same figure at TP 8 and at DP 8 x EP 8 with copies differs
    args = ("-m", "deepseek-v3", "-g", "h200", "--tp", "8", "--ep", "8", "--redundant-experts", "8", "--engine", "vllm")
    rows = _csv(cli("sweep", *args, "-b", "1", "-f", "csv").stdout)
    pair = cli("compare", *args, "-f", "json").json()["rows"][0]
    assert rows[0]["layout"] == pair["layout"] == "TP 8 x EP 8 (+8 redundant experts)"
    assert rows[0]["expected_engine"] == pair["expected_engine"] != "generic"
    assert float(rows[0]["tpot_s"]) > float(rows[0]["ceiling_tpot_s"])


@pytest.mark.parametrize("layout", [(), ("--tp", "2"), ("--pp", "2"), ("--engine", "vllm")])
def test_each_points_ttft_and_input_cost_are_estimates(cli, layout):
    """A sweep over prompt lengths answers TTFT too: each point's TTFT and $/1M input are what estimate prints for
    that batch and prompt (one function prices both), under expected and the ceiling."""
    base = ("-m", "llama-3.1-8b", "-g", "h100-sxm", *layout)
    points = cli("sweep", *base, "-b", "1,16", "--context", "1024,4096", "-f", "json").json()["points"]
    assert len(points) == 4
    for p in points:
        e = cli("estimate", *base, "-b", str(p["batch"]), "-p", str(p["prompt_tokens"]), "-f", "json").json()
        assert p["ttft_s"] == pytest.approx(e["expected"]["ttft_s"], rel=1e-12)
        assert p["ceiling_ttft_s"] == pytest.approx(e["ceiling"]["ttft_s"], rel=1e-12)
        assert p["usd_per_million_input_tokens"] == pytest.approx(e["expected"]["usd_per_million_input_tokens"])
    assert points[1]["ttft_s"] > points[0]["ttft_s"] and points[3]["ttft_s"] > points[1]["ttft_s"]  # more prefill


def test_a_point_that_does_not_fit_leaves_its_cost_blank_not_n_a(cli):
    # n/a is "no price"; a deployment that does not fit has no cost (an audit found sweep printing n/a, compare blank
    # and estimate "does not fit" for the same 70B on one H100)
    table = cli("sweep", "-m", "llama-3.1-70b", "-g", "h100-sxm", "-f", "markdown")
    assert table.exit_code == 0, table.stderr
    row = next(line for line in table.stdout.splitlines() if "exceeds memory" in line)
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[6:8] == ["", ""] and "n/a" not in row
    data = cli("sweep", "-m", "llama-3.1-70b", "-g", "h100-sxm", "-f", "json").json()
    point = data[0] if isinstance(data, list) else data["points"][0]
    assert point["usd_per_million_output_tokens"] is None and point["fits"] is False


def test_a_narrow_table_keeps_the_note_that_a_point_exceeds_memory(cli, monkeypatch):
    # an audit: at 80 columns the note column went first, and with it "exceeds memory", the only word that a
    # point past the memory limit is one (its cost cells are blank)
    monkeypatch.setenv("COLUMNS", "80")
    r = cli("sweep", "-m", "llama-3.1-8b", "-g", "h100-sxm", "-b", "1,2048")
    assert r.exit_code == 0, r.stderr
    assert "exceeds" in r.stdout and "memory (max batch 357)" in r.stdout


def test_a_sweep_streamed_to_a_file_counts_its_rows_on_a_terminal(monkeypatch):
    # a million points to --out run for minutes with nothing on screen: a terminal's stderr counts them, the last
    # count always shown (the line is throttled to twice a second), then cleared
    from tokcost.cli import render, sweep_cmd

    class Terminal:
        text = ""

        def isatty(self) -> bool:
            return True

        def write(self, text: str) -> None:
            Terminal.text += text

        def flush(self) -> None:
            pass

    monkeypatch.setattr(render, "PROGRESS_AFTER_S", 0.0)
    monkeypatch.setattr(sweep_cmd.sys, "stderr", Terminal())
    assert list(sweep_cmd._counted(iter("abc"), 3)) == ["a", "b", "c"]  # type: ignore[arg-type]
    assert Terminal.text.startswith("\rwrote 1 of 3 points (0 s)") and "\rwrote 3 of 3 points (0 s)" in Terminal.text
    assert Terminal.text.endswith("\r\033[K")
