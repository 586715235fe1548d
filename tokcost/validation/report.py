"""The generated part of validation/README.md: the split, the fitted values, errors before and after, the hard class.

Every number here is computed from the data, the shipped specs and the fit (scripts/fit_expected.py writes it;
tests/test_validation.py checks that it regenerates). Errors are |expected / measured - 1| of the used rows;
"held-out" rows come from the sources the split holds out whole (tokcost/validation/data.py), never seen by the fit.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from tokcost.hardware.library import load_gpu
from tokcost.hardware.spec import Achievable, GpuSpec
from tokcost.models.spec import ModelSpec
from tokcost.profiles import ENGINES, GENERIC, EngineProfile
from tokcost.validation.compare import RowResult, compare_rows, percentile, row_classes
from tokcost.validation.data import HELD_OUT_SOURCES, Row
from tokcost.validation.families import FAMILIES, family_of
from tokcost.validation.fit import FitResult
from tokcost.validation.multinode import MultinodeResult, price_multinode
from tokcost.validation.serving_data import load_multinode

MULTINODE = Path(__file__).resolve().parent / "multinode.yaml"
# The targets of issue 12, on held-out sources.
TARGET_MEDIAN, TARGET_P90, TARGET_ENGINE_MEDIAN = 0.12, 0.30, 0.20
# "Before": the hand-set values every spec carried before any fit (engine-blind), and the engine-blind fit of
# issue 10 as it shipped (fitted on 77 rows split by row hash; b200 and mi300x kept the hand-set values).
HAND_SET = Achievable(bandwidth=0.8, compute=0.7, step_overhead_us=20.0)
PREVIOUS_FIT: dict[str, Achievable] = {
    family: Achievable(bandwidth=bw, compute=c, step_overhead_us=20.0, request_overhead_us=3750.0,
                       allreduce_latency_us=29.0, weight_only_quant_bandwidth=0.52)
    for family, (bw, c) in {"hopper": (0.57, 0.52), "ampere": (0.71, 0.69), "ada": (0.71, 0.51)}.items()
} | {"blackwell": HAND_SET, "cdna3": HAND_SET}  # fmt: skip
FIXED_EFFICIENCIES = ("decode attention", "MoE grouped GEMM", "collective bandwidth")


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{v:.1%}"


def _abs(results: Sequence[RowResult], split: str | None = None) -> list[float]:
    return [abs(r.error) for r in results if r.used and (split is None or r.split == split)]


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def _p90(values: list[float]) -> float | None:
    return percentile(values, 90) if values else None


def with_achievable(gpus: Mapping[str, GpuSpec], blocks: Mapping[str, Achievable]) -> dict[str, GpuSpec]:
    """The GPU specs with each family's block in place (GPUs outside every family unchanged)."""
    out = {}
    for name, gpu in gpus.items():
        block = blocks.get(family_of(name) or "")
        out[name] = gpu if block is None else gpu.model_copy(update={"achievable": block})
    return out


def _split_lines(rows: Sequence[Row]) -> list[str]:
    used = [r for r in rows if r.exclude is None]
    held = [r for r in used if r.source_id in HELD_OUT_SOURCES]
    engines = sorted({r.engine for r in held})
    return [
        f"**Split** (fixed before fitting; `tokcost/validation/data.py`): whole sources are held out, taken in "
        "SHA-256 order of their `source_id` until at least 3 sources, 3 engines and a quarter of the rows are "
        f"covered: **{', '.join(sorted(HELD_OUT_SOURCES))}**. {len(used) - len(held)} train rows from "
        f"{len({r.source_id for r in used}) - len(HELD_OUT_SOURCES)} sources, {len(held)} held-out rows "
        f"({', '.join(engines)}).",
        "",
    ]


def _family_table(result: FitResult) -> list[str]:
    lines = ["| family | GPUs | train rows | bandwidth | compute |", "|:---|:---|---:|---:|---:|"]
    for family, members in FAMILIES.items():
        cells = []
        for p in ("bandwidth", "compute"):
            name = f"gpu.{family}.{p}"
            how = "fitted" if name in result.free else "start"
            cells.append(f"{result.value(name):.2f} ({how}, {result.informed.get(name, 0)})")
        lines.append(f"| {family} | {', '.join(members)} | {result.train_rows_by_family.get(family, 0)} | "
                     f"{' | '.join(cells)} |")  # fmt: skip
    return lines


def _engine_table(result: FitResult, engines: Mapping[str, EngineProfile]) -> list[str]:
    lines = [
        "| engine | train rows | step (us) | request (us) | per collective (us) | efficiencies (fitted) |",
        "|:---|---:|---:|---:|---:|:---|",
    ]
    for name in ENGINES:
        p = engines[name]
        effs = [f"dense {d} {v:.2f}" for d, v in sorted(p.kernels.dense_gemm.items())]
        effs += [f"weight-only {d} {v:.2f}" for d, v in sorted(p.kernels.weight_only_gemm.items())]
        for label, value in zip(FIXED_EFFICIENCIES, (p.kernels.decode_attention, p.kernels.moe_grouped_gemm,
                                                      p.kernels.collective), strict=True):  # fmt: skip
            if value != 1.0:
                effs.append(f"{label} {value:.2f}")
        lines.append(
            f"| {name} | {result.train_rows_by_engine.get(name, 0)} | {p.step_overhead_us or 0:g} | "
            f"{p.request_overhead_us or 0:g} | {p.collective_overhead_us:g} | {', '.join(effs) or 'identity'} |"
        )
    return lines


def _models_table(label_results: Sequence[tuple[str, list[RowResult]]]) -> list[str]:
    lines = ["| model | train median | train p90 | held-out median | held-out p90 |", "|:---|---:|---:|---:|---:|"]
    for label, results in label_results:
        train, test = _abs(results, "train"), _abs(results, "test")
        lines.append(f"| {label} | {_pct(_median(train))} | {_pct(_p90(train))} | {_pct(_median(test))} | "
                     f"{_pct(_p90(test))} |")  # fmt: skip
    return lines


def _groups_table(results: list[RowResult], models: Mapping[str, ModelSpec]) -> list[str]:
    used = [r for r in results if r.used]
    classes = {r.row.id: row_classes(r, models) for r in used}
    keys: list[tuple[str, Callable[[RowResult], list[str]]]] = [
        ("engine", lambda r: [r.engine]),
        ("family", lambda r: [family_of(r.row.gpu) or r.row.gpu]),
        ("class", lambda r: [c.removeprefix("class: ") for c in classes[r.row.id]]),
        ("source", lambda r: [r.row.source_id + (" (held out)" if r.row.source_id in HELD_OUT_SOURCES else "")]),
    ]
    lines = [
        "| group | train n | train median | held-out n | held-out median | held-out p90 |",
        "|:---|---:|---:|---:|---:|---:|",
    ]
    for label, key in keys:
        values = list(dict.fromkeys(v for r in used for v in key(r)))
        for value in sorted(values) if label != "class" else values:
            members = [r for r in used if value in key(r)]
            train, test = _abs(members, "train"), _abs(members, "test")
            lines.append(f"| {label}: {value} | {len(train)} | {_pct(_median(train))} | {len(test)} | "
                         f"{_pct(_median(test))} | {_pct(_p90(test))} |")  # fmt: skip
    return lines


def _targets(results: list[RowResult]) -> list[str]:
    test = _abs(results, "test")
    median, p90 = _median(test) or 0.0, _p90(test) or 0.0
    by_engine = {e: _median(_abs([r for r in results if r.engine == e], "test")) for e in ENGINES}
    over = {e: m for e, m in by_engine.items() if m is not None and m > TARGET_ENGINE_MEDIAN}
    violations = [r.row.id for r in results if r.used and r.violation]

    def verdict(ok: bool) -> str:
        return "met" if ok else "**missed**"

    engines = ", ".join(f"{e} {m:.1%}" for e, m in by_engine.items() if m is not None)
    return [
        f"Targets on held-out sources (issue 12): median {median:.1%} (target {TARGET_MEDIAN:.0%}: "
        f"{verdict(median <= TARGET_MEDIAN)}); p90 {p90:.1%} (target {TARGET_P90:.0%}: {verdict(p90 <= TARGET_P90)}); "
        f"every engine's median at most {TARGET_ENGINE_MEDIAN:.0%} ({engines}: {verdict(not over)}); "
        f"ceiling violations {len(violations)} ({verdict(not violations)}).",
        "",
    ]


def multinode_results(
    models: Mapping[str, ModelSpec], gpus: Mapping[str, GpuSpec], engines: Mapping[str, EngineProfile]
) -> list[MultinodeResult]:
    """Every multinode row priced with the fitted specs (the GPUs they name loaded when the rows do not)."""
    rows = load_multinode(MULTINODE)
    from tokcost.models.library import load_model

    all_models = {**{r.model: load_model(r.model) for r in rows if r.model not in models}, **models}
    all_gpus = dict(gpus)
    for r in rows:
        if r.gpu not in all_gpus and r.gpu not in ("h800",):
            gpu = load_gpu(r.gpu)
            family = family_of(r.gpu)
            same = next((g for n, g in gpus.items() if family_of(n) == family), None)
            all_gpus[r.gpu] = gpu if same is None else gpu.model_copy(update={"achievable": same.achievable})
    return [price_multinode(r, all_models, all_gpus, engines[r.engine]) for r in rows]


def _multinode_table(results: list[MultinodeResult]) -> list[str]:
    lines = [
        "| row | layout | metric | measured | ceiling | expected | error |",
        "|:---|:---|:---|---:|---:|---:|---:|",
    ]
    for m in results:
        r = m.row
        layout = f"{r.gpus} x {r.gpu}, tp{r.tp} ep{r.ep} dp{r.dp}, {r.instances} inst., {r.nodes} node(s), {m.network}"
        if m.expected is None:
            lines.append(f"| {r.id} | {layout} | {r.metric} | {r.value:,.6g} | - | - | not priced: {m.reason} |")
            continue
        assert m.ceiling is not None and m.error is not None
        flag = " (beats the ceiling)" if m.violation else ""
        lines.append(f"| {r.id} | {layout} | {r.metric} | {r.value:,.6g} | {m.ceiling:,.0f} | {m.expected:,.0f} | "
                     f"{m.error:+.1%}{flag} |")  # fmt: skip
    priced = [abs(m.error) for m in results if m.error is not None]
    lines += ["", f"Multinode rows priced: {len(priced)} of {len(results)}; median |error| "
              f"{_pct(_median(priced))} (the hard class: never fitted on)."]  # fmt: skip
    return lines


def fit_markdown(
    result: FitResult,
    rows: list[Row],
    models: Mapping[str, ModelSpec],
    gpus: Mapping[str, GpuSpec],
    engines: Mapping[str, EngineProfile],
) -> str:
    """The generated block of validation/README.md for the fitted specs `gpus` and profiles `engines`."""
    fitted = compare_rows(rows, models, gpus, engines)
    untuned = [RowResult(r.row, r.split, r.ceiling, r.ceiling, r.engine, r.waves) for r in fitted]
    hand_set = compare_rows(rows, models, with_achievable(gpus, dict.fromkeys(FAMILIES, HAND_SET)), engines, GENERIC)
    previous = compare_rows(rows, models, with_achievable(gpus, PREVIOUS_FIT), engines, GENERIC)
    lines = [
        f"Generated by `python scripts/fit_expected.py` (train digest `{result.data_digest}`, {result.train_rows} "
        f"train rows; the fit converged in {result.sweeps} sweeps, train mean |log error| {result.train_loss:.3f}).",
        "",
        *_split_lines(rows),
        "GPU families (the hardware): value (fitted, or left at its start; train rows that inform it).",
        "",
        *_family_table(result),
        "",
        "Engine profiles (what the engine adds): fixed costs and the efficiencies the fit moved from 1; every other "
        "efficiency is 1.",
        "",
        *_engine_table(result, engines),
        "",
        *_models_table(
            [
                ("untuned: ceiling (datasheet peaks, no overhead)", untuned),
                (
                    f"hand-set, engine-blind ({HAND_SET.bandwidth:g}, {HAND_SET.compute:g}, "
                    f"{HAND_SET.step_overhead_us:g} us)",
                    hand_set,
                ),
                ("previous fit (issue 10, engine-blind)", previous),
                ("**fitted: hardware x engine**", fitted),
            ]
        ),  # fmt: skip
        "",
        *_targets(fitted),
        *_groups_table(fitted, models),
        "",
        "Multi-node and expert-parallel rows (`multinode.yaml`), priced with their layouts and the fitted profiles:",
        "",
        *_multinode_table(multinode_results(models, gpus, engines)),
    ]
    return "\n".join(lines) + "\n"
