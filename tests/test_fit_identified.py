"""A free value the rows leave flat is found and goes back to its prior (fit.spreads, fit.fit_identified).

Synthetic cases on the fit's own objective: a step cost the rows pin (every row's time grows with it) beside a
per-kernel gap that no row reads. The gate cannot tell them apart (it counts sources and work); the curvature
can: the gap's spread is unbounded with its own prior left out, the step cost's a few percent."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest

from tokcost.validation.cells import Cell
from tokcost.validation.fit import fit, fit_identified, spreads
from tokcost.validation.space import LOOSE_SPREAD, Space

STEP_US = 400.0  # the value the synthetic rows were measured at (the prior centre of TensorRT-LLM's is elsewhere)
KEYS = ("step_us", "kernel_us")


class _Case(SimpleNamespace):
    def time_error(self, predicted: float) -> float:
        return math.log(predicted / self.row.value)


class _Pricer:
    """Time of a case: 1 ms plus its steps x the step cost; the per-kernel gap enters nothing."""

    def predict(self, case: _Case, values: dict[str, float]) -> float:
        return 1e-3 + case.steps * values["step_us"] * 1e-6


def _cases() -> list[_Case]:
    hardware = SimpleNamespace(gemm_for=lambda _dtype: None, copy_bandwidth=SimpleNamespace(fraction=0.8))
    out = []
    for source in ("a", "b", "c"):
        for steps in (1, 4, 16):
            row = SimpleNamespace(source_id=source, value=1e-3 + steps * STEP_US * 1e-6, higher_is_better=False)
            out.append(_Case(row=row, cell=Cell("tensorrt-llm", "inflight", "cuda"), keys=KEYS, steps=steps,
                             gpu=SimpleNamespace(hardware=hardware),
                             deployment=SimpleNamespace(precision=SimpleNamespace(compute="bf16"))))  # fmt: skip
    return out


def _space(cases: list[_Case]) -> Space:
    space = Space(cases)  # type: ignore[arg-type]
    space.free = tuple(f"tensorrt-llm.inflight.{k}" for k in KEYS)  # both past the gate
    return space


def test_a_value_no_row_reads_spreads_without_bound_one_every_row_reads_is_pinned():
    cases = _cases()
    space = _space(cases)
    result = fit(cases, space=space, pricer=_Pricer())  # type: ignore[arg-type]
    assert result.values["tensorrt-llm.inflight.step_us"] == pytest.approx(STEP_US, rel=0.02)
    spread = spreads(cases, space, result, _Pricer())  # type: ignore[arg-type]
    assert spread["tensorrt-llm.inflight.step_us"] < 0.1 < LOOSE_SPREAD < spread["tensorrt-llm.inflight.kernel_us"]


def test_fit_identified_sends_the_flat_value_back_to_its_prior_centre_and_keeps_the_pinned_one():
    cases = _cases()
    space = _space(cases)
    result = fit_identified(cases, space, _Pricer())  # type: ignore[arg-type]
    gap = space.params["tensorrt-llm.inflight.kernel_us"]
    assert space.loose == ("tensorrt-llm.inflight.kernel_us",)
    assert space.free == ("tensorrt-llm.inflight.step_us",)
    assert result.values["tensorrt-llm.inflight.kernel_us"] == gap.prior.centre
    assert result.values["tensorrt-llm.inflight.step_us"] == pytest.approx(STEP_US, rel=0.02)


@pytest.mark.slow  # the full fit on every published row, twice or more (about half a minute)
def test_the_shipped_fit_frees_only_values_its_rows_pin_and_labels_the_rest():
    from pathlib import Path

    import yaml

    from tokcost.cli.validate_cmd import load_specs
    from tokcost.eras import builtin_files
    from tokcost.validation.cases import Pricer, prepare
    from tokcost.validation.data import load_rows

    root = Path(__file__).resolve().parents[1]
    data = root / "tokcost" / "validation" / "published.yaml"
    rows = load_rows(data)
    models, gpus = load_specs(rows, str(data))
    profiles = {(n, era): f.profile(era) for n, f in builtin_files().items() for era in f.eras}
    cases = prepare(rows, models, gpus, profiles)
    space, pricer = Space(cases), Pricer()
    space.gate(cases, pricer)
    result = fit_identified(cases, space, pricer)
    assert space.loose, "the shipped rows leave some gated value flat (TensorRT-LLM's per-kernel gap)"
    assert max(spreads(cases, space, result, pricer).values()) <= LOOSE_SPREAD
    readme = (root / "validation" / "README.md").read_text(encoding="utf-8")
    for name in space.loose:
        key = space.params[name].key
        engine, era = name.removesuffix(f".{key}").rsplit(".", 1)  # engine names have dots: llama.cpp.eager...
        assert f"`{name}`" in readme
        shipped = yaml.safe_load((root / "tokcost" / "specs" / "engines" / f"{engine}.yaml").read_text())
        assert shipped["eras"][era]["basis"][key] != "fitted"  # its parent's value or its prior, and it says so
