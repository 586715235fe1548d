"""No command prints inf, NaN, a negative time or a negative rate for any input it accepts (issue 22, class 2).

Hypothesis draws estimate's, compare's and sweep's inputs across their whole accepted ranges (built-in models of
every family, every GPU, batches to 1,000,000, lengths to 100,000,000, every storage format, prices from zero)
and reads every rendering back: table, Markdown, JSON, CSV and JSON Lines. A run either prints only finite,
non-negative quantities, or refuses its input in one line before the work; the printer's own guard
(errors.Unprintable) never has to fire. plan has its own property test (test_plan_properties.py).
"""

from __future__ import annotations

import contextlib
import csv
import io
import json
import math
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tiers import examples

from tokcost import fmt
from tokcost.cli.app import main
from tokcost.cli.render import checked
from tokcost.engine import estimate as engine
from tokcost.errors import TokcostError, Unprintable

MODELS = ["llama-3.1-8b", "mixtral-8x7b", "deepseek-v3", "gemma-2-9b", "qwen3-next-80b-a3b", "nemotron-h-8b",
          "gpt-oss-20b", "llama-3.2-1b"]  # fmt: skip
GPUS = ["h100-sxm", "a100-80gb-sxm", "l40s", "mi300x", "b200", "rtx-4090", "l4", "h200"]
WEIGHTS = [None, "bf16", "fp8", "int8", "int4", "nvfp4", "q4_k_m", "int4-g32-sym"]
KV = [None, "bf16", "fp8", "int8"]
ENGINES = [None, "vllm", "sglang", "tensorrt-llm", "llama.cpp", "torch-compile"]
# a key naming a time, rate, cost, energy, size or count: its value is never negative
UNSIGNED = re.compile(r"(?:^|_)(?:s|seconds|per_s|usd|bytes|flops|tokens?|joules|gpus?|batch)(?:_|$)")
BAD_TEXT = re.compile(r"\b(?:inf|infinity|nan)\b|(?<![\w.\-/+])-\$?\d|\$-", re.IGNORECASE)

counts = st.one_of(st.integers(1, 64), st.integers(1, 1_000_000))
lengths = st.one_of(st.integers(1, 8192), st.integers(1, 100_000_000))
prices = st.sampled_from([None, "0", "0.000001", "2.5", "100000"])


def run(*args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(args))
    return code, out.getvalue(), err.getvalue()


def numbers(value: object, key: str = ""):
    """(key, number) for every number in a parsed JSON document."""
    if isinstance(value, dict):
        for k, v in value.items():
            yield from numbers(v, str(k))
    elif isinstance(value, list):
        for v in value:
            yield from numbers(v, key)
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        yield key, value


def assert_printable(rendering: str, text: str) -> None:
    if rendering in ("json", "jsonl"):
        docs = [json.loads(line) for line in text.splitlines()] if rendering == "jsonl" else [json.loads(text)]
        pairs = [pair for doc in docs for pair in numbers(doc)]
    elif rendering == "csv":
        rows = list(csv.DictReader(io.StringIO(text)))
        assert rows
        pairs = [(k, float(v)) for row in rows for k, v in row.items() if re.fullmatch(r"-?[\d.e+]+|-?inf|nan", v)]
    else:
        assert not BAD_TEXT.search(text), BAD_TEXT.search(text)
        return
    for key, value in pairs:
        assert math.isfinite(value), (key, value)
        assert value >= 0 or not UNSIGNED.search(key), (key, value)


def check(rendering: str, args: list[str]) -> None:
    code, out, err = run(*args, "-f", rendering)
    assert "Traceback" not in err and "refusing to print" not in err, err
    if code == 2:  # refused before the work, in one line
        assert out == "" and len(err.strip().splitlines()) == 1 and err.startswith("error: "), err
        return
    assert code == 0, err
    assert_printable(rendering, out)


@st.composite
def workload(draw) -> list[str]:
    batch, prompt, output = draw(counts), draw(lengths), draw(st.one_of(st.integers(1, 512), lengths))
    args = ["-m", draw(st.sampled_from(MODELS)), "-b", str(batch), "-p", str(prompt), "-o", str(output)]
    for flag, choices in (("--weights", WEIGHTS), ("--kv-dtype", KV), ("--engine", ENGINES), ("--price", prices)):
        value = draw(st.sampled_from(choices) if isinstance(choices, list) else choices)
        args += [flag, value] if value is not None else []
    if draw(st.booleans()):
        args += ["--cached-prefix", str(draw(st.integers(0, prompt - 1)))]
    if draw(st.booleans()):
        args += ["--tp", str(draw(st.sampled_from([2, 4, 8])))]
    return args


@settings(max_examples=examples(60))
@given(args=workload(), gpu=st.sampled_from(GPUS), rendering=st.sampled_from(["table", "markdown", "json", "csv"]),
       extra=st.sampled_from([[], ["--journey"], ["--explain"]]))  # fmt: skip
def test_estimate_prints_only_finite_non_negative_quantities(args, gpu, rendering, extra):
    check(rendering, ["estimate", *args, "-g", gpu, *extra])


@settings(max_examples=examples(40))
@given(args=workload(), gpus=st.lists(st.sampled_from(GPUS), min_size=1, max_size=3, unique=True),
       rendering=st.sampled_from(["table", "markdown", "json", "csv"]))  # fmt: skip
def test_compare_prints_only_finite_non_negative_quantities(args, gpus, rendering):
    check(rendering, ["compare", *args, "-g", ",".join(gpus)])


@settings(max_examples=examples(40))
@given(
    model=st.sampled_from(MODELS), gpu=st.sampled_from(GPUS),
    batches=st.lists(counts, min_size=1, max_size=4), contexts=st.lists(lengths, min_size=1, max_size=3),
    output=st.integers(1, 100_000), weights=st.sampled_from(WEIGHTS), price=prices,
    rendering=st.sampled_from(["table", "markdown", "json", "csv", "jsonl"]),
)  # fmt: skip
def test_sweep_prints_only_finite_non_negative_quantities(
    model, gpu, batches, contexts, output, weights, price, rendering
):
    args = ["sweep", "-m", model, "-g", gpu, "-b", ",".join(map(str, batches)),
            "--context", ",".join(map(str, contexts)), "-o", str(output)]  # fmt: skip
    args += ["--weights", weights] if weights else []
    args += ["--price", price] if price is not None else []
    check(rendering, args)


# ---- the printer's guard: one rule for tables (fmt) and documents (render.checked) ----


def test_the_guard_refuses_what_cannot_be_right_and_keeps_signed_figures():
    for bad in (-1e-9, math.inf, math.nan):
        for show in (fmt.ms, fmt.seconds, fmt.gb, fmt.usd, fmt.joules, fmt.rate, lambda v: fmt.si(v, "B")):
            with pytest.raises(Unprintable):
                show(bad)
    assert issubclass(Unprintable, TokcostError)  # the CLI prints it as one line, exit 2
    with pytest.raises(Unprintable, match="tpot_s = -0.5"):
        checked({"expected": {"tpot_s": -0.5}})
    with pytest.raises(Unprintable, match="non-finite"):
        checked({"points": [{"decode_tokens_per_s": math.inf}]})
    signed = {"error": -0.12, "ceiling_error": -0.5, "params_mismatch": -0.03}  # a signed figure stays
    assert checked(signed) == signed and fmt.rate(None) == "n/a" and fmt.ms(0.0) == "0.000 ms"


def test_a_wrong_number_reaching_the_printer_is_one_line_never_printed(monkeypatch):
    monkeypatch.setattr(engine, "usd_per_million_tokens", lambda *a, **k: -1.0)  # a bug, simulated
    for rendering in ("table", "json", "csv"):
        code, out, err = run("estimate", "-m", "llama-3.1-8b", "-g", "h100-sxm", "-f", rendering)
        assert code == 2 and err.startswith("error: refusing to print") and len(err.splitlines()) == 1, err
        assert "-1.0" not in out and "$-1" not in out
