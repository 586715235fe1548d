"""The fit's Pricer keeps each candidate's Rates by the values of a case's keys; two cases of one cell that read
different keys (an int4 row's m.wo.int4, an int8 row's m.wo.int8) at equal values must not share them: when they
did, the gate's probe of m.wo.int4 on gpt-fast's and torchao's int4 rows returned the int8 rows' Rates, moved
nothing, and m.wo.int4 was never found identified."""

from __future__ import annotations

import pytest

from tokcost.cli.validate_cmd import load_specs
from tokcost.validation.cases import Pricer, prepare
from tokcost.validation.data import parse_rows
from tokcost.validation.run import shipped_profiles


def _cases():
    """Two batch-1 decode rows of Llama-2-7B under torch.compile on one A100: int8 and int4 weight-only."""
    rows = [{"id": f"r-{fmt}", "source_id": "s", "source": "somewhere", "quote": "| 1 |", "model": "llama-2-7b",
             "gpu": "a100-80gb-sxm", "gpus": 1, "weights": fmt, "kv": "bf16", "compute": "bf16", "batch": 1,
             "prompt_tokens": 16, "output_tokens": 200, "framework": "gpt-fast", "engine": "torch-compile",
             "measured_at": "server", "metric": "output_tokens_per_s_per_request", "value": 150.0}
            for fmt in ("int8", "int4-g32-z16")]  # fmt: skip
    parsed = parse_rows({"rows": rows}, "t.yaml")
    models, gpus = load_specs(parsed, "t.yaml")
    return prepare(parsed, models, gpus, shipped_profiles())


def test_cases_that_read_different_keys_at_equal_values_do_not_share_rates():
    int8, int4 = _cases()
    assert "m.wo.int8" in int8.keys and "m.wo.int4" in int4.keys
    assert len(int8.keys) == len(int4.keys)  # the same tuple of values, position by position
    base = {k: 1.0 for k in int4.keys} | {"step_us": 100.0, "seq_us": 1.0, "kernel_us": 1.5}
    pricer = Pricer()
    pricer.predict(int8, {**base, "m.wo.int8": 0.5})  # the int8 row's probe first, as the gate meets them
    slow = pricer.predict(int4, {**base, "m.wo.int4": 0.5})
    fresh = Pricer().predict(int4, {**base, "m.wo.int4": 0.5})
    assert slow == pytest.approx(fresh)
    # and the probe moves the int4 row: its weight stream is most of a batch-1 step (tokens/s falls)
    assert slow < 0.75 * Pricer().predict(int4, base)
