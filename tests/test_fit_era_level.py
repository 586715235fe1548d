"""An era's own values carry its level, not its sources' offsets (fit.Objective's zero-sum groups).

Synthetic rows on the fit's own objective: two eras of one engine on CUDA, three sources each, every row a time
inversely proportional to the era's GEMM share, so that a source's offset and the share are the same direction.
Summed over the engine, one era's offsets could all sit low and the other's high, and neither era's share would
reach what its rows say; summed per era, each share must."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest

from tokcost.validation.cells import Cell
from tokcost.validation.fit import Objective, fit
from tokcost.validation.space import Space

# the GEMM share each era's rows were timed at: one over its prior centre (1.0), one under
MEASURED = {"v0": 1.05, "v1": 0.6}


class _Case(SimpleNamespace):
    def time_error(self, predicted: float) -> float:
        return math.log(predicted / self.row.value)


class _Pricer:
    """Time of a case: its work at the era's GEMM share."""

    def predict(self, case: _Case, values: dict[str, float]) -> float:
        return case.work_s / values["c.gemm"]


def _cases(platform: str = "cuda") -> list[_Case]:
    hardware = SimpleNamespace(gemm_for=lambda _dtype: None, copy_bandwidth=SimpleNamespace(fraction=0.8))
    out = []
    for era, share in MEASURED.items():
        for source in ("a", "b", "c"):
            for work_s in (1e-3, 4e-3, 16e-3):
                row = SimpleNamespace(source_id=f"{era}-{source}", value=work_s / share, higher_is_better=False)
                out.append(_Case(row=row, cell=Cell("vllm", era, platform), keys=("c.gemm",), work_s=work_s,
                                 gpu=SimpleNamespace(hardware=hardware),
                                 deployment=SimpleNamespace(precision=SimpleNamespace(compute="bf16"))))  # fmt: skip
    return out


def test_each_era_reaches_the_share_its_rows_were_timed_at():
    cases = _cases()
    space = Space(cases)  # type: ignore[arg-type]
    space.free = ("vllm.v0.c.gemm", "vllm.v1.c.gemm")
    result = fit(cases, space=space, pricer=_Pricer())  # type: ignore[arg-type]
    for era, share in MEASURED.items():
        assert result.values[f"vllm.{era}.c.gemm"] == pytest.approx(share, rel=0.03), era
    assert all(abs(u) < 0.01 for u in result.offsets.values())  # no source sits off: its era's value moved


def test_offsets_sum_to_zero_per_era_on_cuda_and_per_engine_on_rocm():
    cuda = Objective(_cases(), Space(_cases()), _Pricer())  # type: ignore[arg-type]
    assert sorted(len(g) for g in cuda.groups) == [3, 3]  # each era's three sources
    rocm = Objective(_cases("rocm"), Space(_cases("rocm")), _Pricer())  # type: ignore[arg-type]
    assert [len(g) for g in rocm.groups] == [6]  # the engine's gap on ROCm carries both eras' level there
