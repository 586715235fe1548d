"""The Python API: `estimate`, `compare`, `sweep` and `plan` as functions, for notebooks and scripts.

Thin wrappers over the engine that load specs by name, apply the same defaults as the CLI (the GPU spec's
network between nodes, the generic serving-engine profile), and return typed results whose `.to_dict()` is
exactly the JSON the matching command prints with `--format json`, and whose `.plot(path)` draws what its
`--plot` draws. Every argument is keyword-only: a model and a GPU given as names are both strings, and a
sweep's batches and prompts are both lists of ints, so a swap must not pass silently.

Arguments are checked as the command line checks its flags, by the same path (tokcost/checked.py, inputs.py):
a wrong type or value is a TokcostError of one line naming the keyword. Where a command takes several values
(models, GPUs, batches, prompts, SLOs, formats), one value is a list of one: `compare(models="llama-3.1-8b",
gpus=["h100-sxm", "h200"])`. A sweep holds at most 10,000 points, as `tokcost sweep -f json` does.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, fields
from itertools import product
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from pydantic import InstanceOf

from tokcost.checked import checked
from tokcost.engine import estimate as _estimate
from tokcost.engine import sweep as _sweep
from tokcost.engine.journey import Journey
from tokcost.engine.journey import journey as journey_of
from tokcost.engine.report import compare_row, estimate_dict, journey_dict
from tokcost.engine.sweep import SweepPoint
from tokcost.engine.workload import Workload
from tokcost.errors import UsageError
from tokcost.hardware.library import builtin_gpus, load_gpu, network_for
from tokcost.hardware.spec import GpuSpec, Link
from tokcost.inputs import MAX_GRID_POINTS, MAX_STREAMED_POINTS, check_distinct_names, check_grid, sweep_grid
from tokcost.models.library import load_model
from tokcost.models.spec import ModelSpec
from tokcost.profiles import EngineProfile, engine_for
from tokcost.spec_errors import validated

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from tokcost.serving.search import Plan

# a spec, or a built-in name, or a path to a YAML file / HF config.json (a dict is never taken for a spec)
ModelLike = InstanceOf[ModelSpec] | str | os.PathLike
GpuLike = InstanceOf[GpuSpec] | str | os.PathLike
NetworkLike = InstanceOf[Link] | str | os.PathLike | None
EngineLike = InstanceOf[EngineProfile] | str | os.PathLike | None
WorkloadArg = InstanceOf[Workload] | None
T = TypeVar("T")
SWEEP_NAMES = {"batch": "batches", "prompt_tokens": "prompts", "output_tokens": "workload.output_tokens"}


def _model(model: ModelLike) -> ModelSpec:
    return _fresh(model, "model") if isinstance(model, ModelSpec) else load_model(os.fspath(model))


def _gpu(gpu: GpuLike) -> GpuSpec:
    return _fresh(gpu, "gpu") if isinstance(gpu, GpuSpec) else load_gpu(os.fspath(gpu))


S = TypeVar("S", ModelSpec, GpuSpec)


def _fresh(spec: S, keyword: str) -> S:
    """A spec object validated again: `model_copy(update=...)` (pydantic's way to tweak a frozen model) skips every
    check, so a bandwidth of 0 or a negative hidden size would reach the engine as a ZeroDivisionError or a negative
    time; re-read from its own fields, it is refused in one line naming the field, as a file is."""
    return validated(type(spec), f"{keyword} {spec.name!r:.40}", spec.model_dump(round_trip=True, exclude_unset=True))


def _workload(workload: Workload | None) -> Workload:
    """The workload validated again (`model_copy` skips its checks too, and marks what it updates as set), or the
    default; from the fields it sets, so that what the caller gave stays told apart from the defaults."""
    if workload is None:
        return Workload()
    return Workload(**workload.model_dump(round_trip=True, include=workload.model_fields_set - {"gpus"}))


def _path(value: Any) -> Any:
    """A path-like argument as the text the loaders take; anything else as it is."""
    return os.fspath(value) if isinstance(value, os.PathLike) else value


def _several(value: T | Sequence[T], one: type | tuple[type, ...]) -> list[T]:
    """A list argument as a list: one value (a name, a spec, a number) is a list of one."""
    return [value] if isinstance(value, one) else list(value)  # type: ignore[list-item, arg-type]


def _gpus(gpus: GpuLike | Sequence[GpuLike]) -> list[GpuLike]:
    """A list of GPUs, as `--gpu` takes them: "all" alone is every built-in GPU."""
    found = _several(gpus, (GpuSpec, str, os.PathLike))
    alls = [g for g in found if isinstance(g, str) and g.strip().lower() == "all"]
    if alls and len(found) > 1:
        raise UsageError("gpus: 'all' stands alone (every built-in GPU); drop it, or give only it")
    return list(builtin_gpus()) if alls else found


def _check_plot_path(path: object, **flags: object) -> None:
    """A picture's path is a str or a path, and its flags (journey, force) True or False; anything else is one
    line, not a TypeError from pathlib (nor "yes" taken for True)."""
    if isinstance(path, bool) or not isinstance(path, (str, os.PathLike)):
        raise UsageError(f"path: must be a file name ending .png or .svg, a str or a pathlib.Path (got "
                         f"{type(path).__name__} {path!r:.40})")  # fmt: skip
    for name, value in flags.items():
        if not isinstance(value, bool):
            raise UsageError(f"{name}: must be True or False (got {type(value).__name__} {value!r:.40})")


@dataclass(frozen=True, slots=True)
class EstimateResult(_estimate.Estimate):
    """An Estimate (every engine field: `.expected.tpot_s`, `.memory.max_batch`, ...) that renders itself."""

    def to_dict(self, *, journey: bool = False, explain: bool = False) -> dict[str, Any]:
        """What `tokcost estimate --format json` prints (with `journey`, what `--journey` adds; with `explain`, what
        `--explain` adds: its lines, and the journey, a section of the explanation)."""
        from tokcost.engine.explain import explanation_lines

        data = estimate_dict(self)
        if explain:
            data["explain"] = explanation_lines(self)
        if journey or explain:
            data["journey"] = journey_dict(journey_of(self))
        return data

    def journey(self) -> Journey:
        """One token's journey: the stages of a decode step and of the prefill, adding up to the pass times."""
        return journey_of(self)

    def figure(self, *, journey: bool = False) -> Figure:
        """The roofline chart (with `journey`, the journey's bars beside it) as a matplotlib Figure."""
        from tokcost import plots

        return plots.estimate_figure(self, journey=journey)

    def plot(self, path: Path | str, *, journey: bool = False, force: bool = False) -> Path:
        """Write the chart to a .png or .svg file, as `tokcost estimate --plot` does (an existing file is replaced
        only with `force`, as --force does)."""
        from tokcost import plots

        _check_plot_path(path, journey=journey, force=force)
        return plots.save(self.figure(journey=journey), path, force=force)


@checked
def estimate(
    *, model: ModelLike, gpu: GpuLike, workload: WorkloadArg = None, network: NetworkLike = None,
    engine: EngineLike = None,
) -> EstimateResult:  # fmt: skip
    """TTFT, TPOT, throughput, memory and cost of `workload` (default: batch 1, 1,024 in, 256 out)."""
    gpu_spec = _gpu(gpu)
    e = _estimate.estimate(
        _model(model), gpu_spec, _workload(workload), network_for(gpu_spec, _path(network)),
        engine_for(_path(engine)),
    )  # fmt: skip
    return EstimateResult(**{f.name: getattr(e, f.name) for f in fields(e)})


@dataclass(frozen=True, slots=True)
class ComparisonResult:
    """One estimate per (model, GPU) pair, models outermost, as `tokcost compare` lists them."""

    results: tuple[EstimateResult, ...]

    def __iter__(self) -> Iterator[EstimateResult]:
        return iter(self.results)

    def __len__(self) -> int:
        return len(self.results)

    def __getitem__(self, index: int) -> EstimateResult:
        return self.results[index]

    def to_dict(self) -> dict[str, Any]:
        """What `tokcost compare --format json` prints: one flat row per pair, and the warnings."""
        return {
            "rows": [compare_row(e) for e in self.results],
            "warnings": [f"{e.model.name} on {e.gpu.name}: {w}" for e in self.results for w in e.warnings],
        }

    def figure(self) -> Figure:
        """Grouped bars of TTFT, TPOT, tokens/s and $/1M per pair (ceiling and expected)."""
        from tokcost import plots

        return plots.compare_figure(self.results)

    def plot(self, path: Path | str, *, force: bool = False) -> Path:
        """Write the bars to a .png or .svg file, as `tokcost compare --plot` does."""
        from tokcost import plots

        _check_plot_path(path, force=force)
        return plots.save(self.figure(), path, force=force)


@checked
def compare(
    *, models: ModelLike | Sequence[ModelLike], gpus: GpuLike | Sequence[GpuLike],
    workload: InstanceOf[Workload] | Mapping[str, InstanceOf[Workload]] | None = None, network: NetworkLike = None,
    engine: EngineLike = None, weights: str | Sequence[str] | None = None, kv_dtypes: str | Sequence[str] | None = None,
    compute_dtypes: str | Sequence[str] | None = None,
) -> ComparisonResult:  # fmt: skip
    """Every model on every GPU (one of either is a list of one); `workload` is one for all, or one per GPU name
    (e.g. its own TP degree); `weights`, `kv_dtypes` and `compute_dtypes` price every combination of the formats
    listed, as compare's comma-separated flags do (each pair's rows in that order, weights outermost)."""
    from tokcost.serving.inputs import format_values

    model_list = _several(models, (ModelSpec, str, os.PathLike))
    gpu_list = _gpus(gpus)
    check_grid(("models", model_list), ("gpus", gpu_list))
    gpu_specs, profile = [_gpu(g) for g in gpu_list], engine_for(_path(engine))
    model_specs = [_model(m) for m in model_list]
    check_distinct_names(model_specs, "models")
    check_distinct_names(gpu_specs, "gpus")
    per_gpu: dict[str, Workload] = {}
    if isinstance(workload, Mapping):  # one per GPU name: a key naming no GPU would silently take the default
        names = [g.name for g in gpu_specs]
        by_name = {n.lower(): n for n in names}  # a name in any case, as the flags and plan's prices take it
        stray = [k for k in workload if k.strip().lower() not in by_name]
        if stray:
            raise UsageError(f"workload: {stray[0]!r} is not one of the gpus' names: {', '.join(names)}")
        per_gpu = {by_name[k.strip().lower()]: w for k, w in workload.items()}
        if len(per_gpu) < len(workload):
            raise UsageError(f"workload: two keys name one GPU; give each of {', '.join(names)} once")
        missing = [n for n in names if n not in per_gpu]  # it would be priced at the default workload, unsaid
        if missing:
            raise UsageError(f"workload: no entry for {missing[0]!r}; a mapping gives each of {', '.join(names)} one")
    lists = {field: format_values(None if v is None else _several(v, str), key, field, True)
             for key, field, v in (("weights", "weights_dtype", weights), ("kv_dtypes", "kv_dtype", kv_dtypes),
                                   ("compute_dtypes", "compute_dtype", compute_dtypes))}  # fmt: skip
    formats = [dict(zip(lists, combo, strict=True)) for combo in product(*lists.values())]
    check_grid(("models", model_list), ("gpus", gpu_list), ("formats", formats))
    results = []
    for m in model_specs:
        for g in gpu_specs:
            wl = _workload(per_gpu.get(g.name) if isinstance(workload, Mapping) else workload)
            for precision in formats:
                given = {k: v for k, v in precision.items() if v is not None}
                replaced = [k for k in given if k in wl.model_fields_set]  # the list would drop it silently
                if replaced:
                    raise UsageError(
                        f"workload.{replaced[0]}: the formats listed replace it; drop it from the workload"
                    )
                priced = Workload(**{**wl.model_dump(exclude={"gpus"}), **given}) if given else wl
                e = _estimate.estimate(m, g, priced, network_for(g, _path(network)), profile)
                results.append(EstimateResult(**{f.name: getattr(e, f.name) for f in fields(e)}))
    return ComparisonResult(tuple(results))


@dataclass(frozen=True, slots=True)
class SweepResult:
    """The points of a sweep, prompts outermost, with the specs they were priced on."""

    model: ModelSpec
    gpu: GpuSpec
    points: tuple[SweepPoint, ...]
    warnings: tuple[str, ...] = ()

    def __iter__(self) -> Iterator[SweepPoint]:
        return iter(self.points)

    def __len__(self) -> int:
        return len(self.points)

    def __getitem__(self, index: int) -> SweepPoint:
        return self.points[index]

    def to_dict(self) -> dict[str, Any]:
        """What `tokcost sweep --format json` prints."""
        return {"model": self.model.name, "gpu": self.gpu.name, "points": [p.as_dict() for p in self.points],
                "warnings": list(self.warnings)}  # fmt: skip

    def figure(self) -> Figure:
        """TPOT, tokens/s per GPU, memory per GPU and $/1M against batch and context."""
        from tokcost import plots

        return plots.sweep_figure(self.points, capacity_bytes_per_gpu=self.gpu.memory_bytes)

    def plot(self, path: Path | str, *, force: bool = False) -> Path:
        """Write the panels to a .png or .svg file, as `tokcost sweep --plot` does."""
        from tokcost import plots

        _check_plot_path(path, force=force)
        return plots.save(self.figure(), path, force=force)


@checked
def sweep(
    *, model: ModelLike, gpu: GpuLike, batches: int | Sequence[int], prompts: int | Sequence[int] | None = None,
    workload: WorkloadArg = None, network: NetworkLike = None, engine: EngineLike = None,
) -> SweepResult:  # fmt: skip
    """Decode figures at every (prompt, batch), at most 10,000; `workload` gives the rest (output,
    dtypes, layout, price; its prompt when `prompts` is not given)."""
    grid = _sweep_args(model, gpu, batches, prompts, workload, network, engine, limit=MAX_GRID_POINTS,
                       hint=" (iter_sweep, or tokcost sweep -f csv, streams up to 10,000,000)")  # fmt: skip
    model_spec, gpu_spec, base, batch_list, contexts, net, profile = grid
    points = _sweep.sweep(model_spec, gpu_spec, base, batches=batch_list, prompts=contexts, network=net,
                          engine=profile)  # fmt: skip
    warnings = _sweep.sweep_warnings(model_spec, gpu_spec, base, prompts=contexts, network=net, engine=profile,
                                     batches=batch_list)  # fmt: skip
    return SweepResult(model_spec, gpu_spec, tuple(points), tuple(warnings))


@checked
def iter_sweep(
    *, model: ModelLike, gpu: GpuLike, batches: int | Sequence[int], prompts: int | Sequence[int] | None = None,
    workload: WorkloadArg = None, network: NetworkLike = None, engine: EngineLike = None,
) -> Iterator[SweepPoint]:  # fmt: skip
    """`sweep`'s points one at a time, prompts outermost, in bounded memory: a grid of up to 10,000,000 (what
    `tokcost sweep -f csv` streams). The arguments are checked before the first point, as `sweep` checks them."""
    grid = _sweep_args(model, gpu, batches, prompts, workload, network, engine, limit=MAX_STREAMED_POINTS, hint="")
    model_spec, gpu_spec, base, batch_list, contexts, net, profile = grid
    _estimate.deployment(model_spec, gpu_spec, base, net, profile)  # the layout refused here, not at the first point
    return _sweep.iter_sweep(model_spec, gpu_spec, base, batches=batch_list, prompts=contexts, network=net,
                             engine=profile)  # fmt: skip


def _sweep_args(
    model: ModelLike, gpu: GpuLike, batches: int | Sequence[int], prompts: int | Sequence[int] | None,
    workload: Workload | None, network: NetworkLike, engine: EngineLike, *, limit: int, hint: str,
) -> tuple[ModelSpec, GpuSpec, Workload, list[int], list[int], Link | None, EngineProfile]:  # fmt: skip
    """A sweep's grid checked as the command checks it (one line naming the keyword), and its specs loaded."""
    base = _workload(workload)
    given = base.model_fields_set  # a workload's value that the grid replaces would be dropped silently: refused
    for key, axis in (("batch", "batches"), ("prompt_tokens", "prompts")):
        if key in given and (key == "batch" or prompts is not None):
            raise UsageError(f"workload.{key}: {axis} gives the sweep's {axis}; drop {key} from the workload")
    contexts = _several(prompts, int) if prompts is not None else [base.prompt_tokens]
    batch_list, contexts = sweep_grid(base, batches=_several(batches, int), prompts=contexts, names=SWEEP_NAMES,
                                      limit=limit, hint=hint)  # fmt: skip
    model_spec, gpu_spec = _model(model), _gpu(gpu)
    return (
        model_spec,
        gpu_spec,
        base,
        batch_list,
        contexts,
        network_for(gpu_spec, _path(network)),
        engine_for(_path(engine)),
    )


@dataclass(frozen=True, slots=True)
class PlanResult:
    """A plan: `.rows` ranked (each with `.expected` and `.ceiling` fleets), `.load`, `.warnings`; `.plan` whole."""

    plan: Plan

    @property
    def rows(self) -> list[Any]:
        """The configurations, those meeting every SLO first, cheapest $/hour first."""
        return self.plan.rows

    @property
    def warnings(self) -> list[str]:
        """What the reader should know (no price, an unfitted GPU family, a binding running cap, ...)."""
        return self.plan.warnings

    @property
    def load(self) -> list[dict[str, object]]:
        """GPUs the cheapest configuration needs at multiples of the load."""
        return self.plan.load

    def to_dict(self, *, explain: bool = False) -> dict[str, Any]:
        """What `tokcost plan --format json` prints (with `explain`, what `--explain` adds)."""
        from tokcost.serving.explain import explain_lines
        from tokcost.serving.report import plan_dict

        return plan_dict(self.plan, explain_lines(self.plan) if explain else None)

    def figure(self) -> Figure:
        """$/hour against p90 TPOT and TTFT, every configuration labelled, the SLOs dashed, the chosen one starred."""
        from tokcost import plots
        from tokcost.plots.plan import frontier_points, plan_slos

        return plots.plan_figure(frontier_points(self.plan), slos=plan_slos(self.plan))

    def plot(self, path: Path | str, *, force: bool = False) -> Path:
        """Write the chart to a .png or .svg file, as `tokcost plan --plot` does."""
        from tokcost import plots

        _check_plot_path(path, force=force)
        return plots.save(self.figure(), path, force=force)


@checked
def plan(
    *,
    model: ModelLike,
    gpus: GpuLike | Sequence[GpuLike],
    rate_rps: float | None = None,
    concurrency: int | None = None,
    think_time_s: float | None = None,
    prompt_tokens: int | None = None,
    output_tokens: int | None = None,
    prompt_dist: str | None = None,
    output_dist: str | None = None,
    trace: str | os.PathLike | None = None,
    cached_prefix_tokens: int = 0,
    slos: str | Sequence[str] = (),
    tp: int | Sequence[int] | None = None,
    pp: int | Sequence[int] | None = None,
    ep: int | Sequence[int] | None = None,
    dp: int | Sequence[int] | None = None,
    redundant_experts: int = 0,
    weights: str | Sequence[str] | None = None,
    kv_dtypes: str | Sequence[str] | None = None,
    compute_dtypes: str | Sequence[str] | None = None,
    chunks: int | Sequence[int] | str | None = None,
    max_running: int | None = None,
    prefill: str = "engine",
    mode: str = "aggregated",
    headroom: float = 0.2,
    max_gpus: int | None = None,
    prices: Mapping[str, float] | float | None = None,
    network: NetworkLike = None,
    engine: EngineLike = None,
    simulate: bool = False,
    requests: int | None = None,
    seed: int | None = None,
    flash_attention: bool = True,
    jobs: int | None = None,
) -> PlanResult:
    """The cheapest fleet for a traffic and SLOs, as `tokcost plan` finds it (`slos`: ["ttft_p90=500ms", ...];
    `chunks="search"` tries the chunk budgets `--chunk search` does; `prices`: USD per GPU-hour by GPU name, or one
    number for every GPU, as `--price` takes them; `mode`: aggregated, disaggregated or both;
    `jobs`: worker processes for the search, 1 for none; by default, on Linux and from a process of one thread, one
    per CPU where lengths vary)."""
    from tokcost.serving.inputs import plan_space, plan_traffic
    from tokcost.serving.run import run_plan
    from tokcost.serving.traffic import parse_slo
    from tokcost.traces import read_trace

    rows = read_trace(Path(trace), "trace") if trace is not None else None
    traffic = plan_traffic(
        rate=rate_rps, concurrency=concurrency, think_time_s=think_time_s, prompt_tokens=prompt_tokens,
        output_tokens=output_tokens, prompt_dist=prompt_dist, output_dist=output_dist,
        cached_prefix_tokens=cached_prefix_tokens,
        trace=(rows.prompts, rows.outputs, rows.arrivals_s) if rows else None,
        trace_name=str(rows.path) if rows else "", api=True,
    )  # fmt: skip
    gpu_specs = tuple(_gpu(g) for g in _gpus(gpus))
    named = {"tp": tp, "pp": pp, "ep": ep, "dp": dp, "weights": weights, "kv_dtypes": kv_dtypes,
             "compute_dtypes": compute_dtypes}  # fmt: skip
    lists = {key: None if value is None else _several(value, (int, str)) for key, value in named.items()}
    lists["chunks"] = chunks if chunks is None or isinstance(chunks, str) else _several(chunks, int)  # 'search' too
    space = plan_space(
        gpus=gpu_specs, engine=engine_for(_path(engine)), **lists, max_running=max_running, prefill=prefill,
        mode=mode, max_gpus=max_gpus, headroom=headroom, prices=prices, api=True, flash_attention=flash_attention,
        redundant_experts=redundant_experts,
        networks={g.name: net for g in gpu_specs if (net := network_for(g, _path(network))) is not None},
    )  # fmt: skip
    parsed = [parse_slo(s, "slos") for given in _several(slos, str) for s in given.split(",")]  # as --slo takes them
    result = run_plan(_model(model), traffic, parsed, space, simulate=simulate, requests=requests, seed=seed,
                      api=True, jobs=jobs)  # fmt: skip
    return PlanResult(result)
