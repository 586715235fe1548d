"""An empty value is a mistake, not "the default": `--engine ''`, `--network ''`, `--prompt-dist ''` ran with the
generic engine, the GPU's network and fixed lengths, exit 0 (the sweep of 2026-12-03); and measure's advice for a
prompt and answer past the model's context is advice that works; a trace line that repeats or leaves out a length
says so (it kept the last of two, or read a missing one as None)."""

from __future__ import annotations

import re

import pytest

from tokcost.cli.measure_cmd import MIN_OUTPUT, check_context
from tokcost.errors import UsageError
from tokcost.models.library import load_model


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (("estimate", "-m", "llama-3.1-8b", "-g", "h100-sxm", "--engine", ""), "no engine given"),
        (("estimate", "-m", "llama-3.1-8b", "-g", "h100-sxm", "--network", ""), "no network given"),
        (("plan", "-m", "llama-3.1-8b", "--rate", "1", "--gpu", "h100-sxm", "--prompt-dist", ""), "--prompt-dist"),
        (("plan", "-m", "llama-3.1-8b", "--rate", "1", "--gpu", "h100-sxm", "--output-dist", ""), "--output-dist"),
    ],
)
def test_an_empty_value_is_refused(cli, args, says):
    out = cli(*args)
    assert out.exit_code == 2 and says in out.stderr and "Traceback" not in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize(("prompt", "output"), [(100, 5000), (100, 4095), (5000, 100), (4000, 4000)])
def test_measure_s_context_advice_fits(prompt, output):
    spec = load_model("llama-2-7b")  # 4,096 tokens
    with pytest.raises(UsageError) as err:
        check_context(spec, prompt, output)
    advice = dict(re.findall(r"--(prompt|output) ([\d,]+) or less", str(err.value)))
    assert advice
    named = {k: int(v.replace(",", "")) for k, v in advice.items()}
    if "prompt" in named:  # the prompt it names fits beside the output asked for
        assert named["prompt"] >= 1 and named["prompt"] + output == 4096
    if "output" in named:
        assert named["output"] >= MIN_OUTPUT and prompt + named["output"] == 4096


@pytest.mark.parametrize(
    ("line", "says"),
    [
        ('{"prompt_tokens": 10, "prompt_tokens": 5, "output_tokens": 5}', "key 'prompt_tokens' appears twice"),
        ('{"prompt_tokens": 10}', "output_tokens: missing"),
    ],
)
def test_a_trace_line_with_a_repeated_or_missing_length_is_named(cli, tmp_path, line, says):
    # json keeps the last of two equal keys and get() reads a missing one as None: the line says which
    trace = tmp_path / "t.jsonl"
    trace.write_text(line + "\n", encoding="utf-8")
    out = cli("plan", "-m", "llama-3.1-8b", "--rate", "1", "--gpu", "h100-sxm", "--trace", str(trace))
    assert out.exit_code == 2 and f"{trace}: line 1: {says}" in out.stderr


def test_a_trace_keeps_its_own_other_keys(cli, tmp_path):
    trace = tmp_path / "t.jsonl"  # production traces carry ids and hashes beside the lengths: read, not refused
    trace.write_text('{"prompt_tokens": 100, "output_tokens": 20, "hash_ids": [1, 2]}\n' * 3, encoding="utf-8")
    out = cli("plan", "-m", "llama-3.1-8b", "--rate", "1", "--gpu", "h100-sxm", "--trace", str(trace), "-f", "json")
    assert out.exit_code == 0, out.stderr


@pytest.mark.parametrize("kv", ["q4_k_m", "nf4", "fp8-block"])
def test_a_weight_only_format_is_no_kv_cache_format(cli, kv):
    out = cli("estimate", "-m", "llama-3.1-8b", "-g", "h100-sxm", "--kv-dtype", kv)
    assert out.exit_code == 2 and f"--kv-dtype: {kv} quantizes weights, not a KV cache" in out.stderr
    assert "q8_0" in out.stderr and "fp8," in out.stderr  # the formats a cache takes


@pytest.mark.parametrize("kv", ["q8_0", "q4_0", "fp8", "int4", "nvfp4"])
def test_the_cache_formats_engines_offer_are_taken(cli, kv):
    assert cli("estimate", "-m", "llama-3.1-8b", "-g", "h100-sxm", "--kv-dtype", kv, "-f", "json").exit_code == 0


def test_validate_refuses_an_empty_engine(cli):
    out = cli("validate", "--engine", "")
    assert out.exit_code == 2 and "no engine given" in out.stderr


def test_a_trace_s_own_objects_may_repeat_their_keys(cli, tmp_path):
    trace = tmp_path / "t.jsonl"  # only the keys tokcost reads must be given once
    trace.write_text('{"prompt_tokens": 100, "output_tokens": 20, "meta": {"tag": 1, "tag": 2}}\n', encoding="utf-8")
    out = cli("plan", "-m", "llama-3.1-8b", "--rate", "1", "--gpu", "h100-sxm", "--trace", str(trace), "-f", "json")
    assert out.exit_code == 0, out.stderr


def test_prefill_apart_explains_kappa_as_one(cli):
    out = cli("plan", "-m", "llama-3.1-8b", "-g", "h100-sxm", "--rate", "20", "--prompt", "2048", "--output", "300",
              "--prefill", "apart", "--explain")  # fmt: skip
    assert out.exit_code == 0, out.stderr
    assert "kappa = 1 (prefill apart" in out.stdout and "kappa = 1 - T0 / Tp" not in out.stdout
