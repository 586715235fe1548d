"""What a plan is asked, checked once for the CLI and the Python API: the traffic, the SLOs, and the work it asks for.

One path for both callers, so they refuse the same inputs with the same one line (named as a flag, `--rate`, on the
command line and as a keyword, `rate`, in Python):
- the traffic: exactly one of a rate and users (a trace with arrival times gives its own rate), each in range; a
  flag that would be ignored is refused, not dropped (a think time with a rate, lengths or their distributions
  with a trace, simulated requests without a simulation);
- the SLOs: one value per metric and percentile;
- the model's context: a prompt and answer longer than it are refused;
- the work, bounded before it starts: search points (GPU x precision x layout x chunk; an MoE's points price
  about MOE_POINT_WEIGHT times slower, their step times bend) at most MAX_SEARCH_POINTS, and simulated prefill
  steps (rows x requests x chunks per prompt) at most MAX_SIMULATED_STEPS, so the largest accepted plan finishes
  in well under 30 s on two cores.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from itertools import product

from tokcost.engine.workload import MAX_PRICE_USD, Workload
from tokcost.errors import UsageError
from tokcost.hardware.spec import GpuSpec, Link
from tokcost.inputs import check_distinct_names
from tokcost.models.spec import ModelSpec
from tokcost.profiles import EngineProfile
from tokcost.serving.layout import valid_tp_degrees
from tokcost.serving.search import DEFAULT_CHUNKS, Space, pipeline_fallback, scheduler_choice
from tokcost.serving.traffic import LengthDist, Slo, Traffic, parse_dist

MIN_RATE_RPS = 1e-6  # a request every 11.6 days: below it no fleet size means anything
MAX_RATE_RPS = 1e6
MAX_USERS = 10_000_000
MAX_THINK_S = 86_400.0
DEFAULT_PROMPT, DEFAULT_OUTPUT = 1024, 256
MAX_SEARCH_POINTS = 600
MOE_POINT_WEIGHT = 4
# prefill steps over the simulated rows, each priced by the compiled pass: 30-100 us a step with the run's other work
# (measured on a 2-core machine like CI's: Llama-3.1-8B 29 us, DeepSeek-V3 EP 8 52 us, Llama-4-Maverick TP 8
# PP 2 100 us); decode-only stretches cost one pass per event (an arrival, a finish), not one per step
MAX_SIMULATED_STEPS = 150_000
SIMULATED_ROWS = 3
# a request counts P / C + 1 prefill steps (check_simulation): the most requests fit every prompt up to a quarter of
# its chunk (3 rows x 40,000 x 1.25 = 150,000)
MIN_REQUESTS, MAX_REQUESTS = 100, 40_000


FLAGS = {"chunks": "--chunk", "kv_dtypes": "--kv-dtype", "compute_dtypes": "--compute-dtype", "prices": "--price",
         "gpus": "--gpu", "slos": "--slo", "rate_rps": "--rate"}  # fmt: skip


def name(key: str, api: bool) -> str:
    """How an input is named in a message: `--think-time` on the command line, `think_time_s` in Python."""
    if api:
        return {"rate": "rate_rps", "gpu": "gpus", "slo": "slos"}.get(key, key)
    return FLAGS.get(key) or "--" + key.removesuffix("_s").removesuffix("_tokens").replace("_", "-")


def _lengths(prompt: int, output: int, cached: int, api: bool) -> Workload:
    """The lengths checked as estimate checks them (the Workload's ranges and its prefix rule)."""
    keys = ("prompt_tokens", "output_tokens", "cached_prefix_tokens")
    values = {"prompt_tokens": prompt, "output_tokens": output, "cached_prefix_tokens": cached}
    return Workload.checked(values, {key: name(key, api) for key in keys})


def _dist(value: str | LengthDist | None, mean: float, key: str, api: bool) -> LengthDist:
    if isinstance(value, LengthDist):
        return LengthDist(value.kind, mean, value.cv, value.values)
    return parse_dist("fixed" if value is None else value, mean, name(key, api))  # an empty one is refused


def _load(
    rate: float | None, concurrency: int | None, think_time_s: float | None, api: bool
) -> tuple[float | None, int | None, float]:
    """The load, each value in range; a think time only for users."""
    if rate is not None and concurrency is not None:
        raise UsageError(f"{name('rate', api)} / {name('concurrency', api)}: give exactly one (requests/s, or users)")
    if rate is not None and not (math.isfinite(rate) and MIN_RATE_RPS <= rate <= MAX_RATE_RPS):
        raise UsageError(
            f"{name('rate', api)}: must be from {MIN_RATE_RPS:g} to {MAX_RATE_RPS:,.0f} requests/s (got {rate:g})"
        )
    if concurrency is not None and (isinstance(concurrency, bool) or not 1 <= concurrency <= MAX_USERS):
        raise UsageError(f"{name('concurrency', api)}: must be in 1..{MAX_USERS:,} users (got {concurrency})")
    if think_time_s is not None and concurrency is None:
        raise UsageError(f"{name('think_time_s', api)}: a think time paces closed-loop users; give it with "
                         f"{name('concurrency', api)}, or drop it")  # fmt: skip
    think = think_time_s or 0.0
    if not (math.isfinite(think) and 0 <= think <= MAX_THINK_S):
        raise UsageError(f"{name('think_time_s', api)}: must be from 0 to 1 day (got {think:g} s)")
    return rate, concurrency, think


def plan_traffic(
    *, rate: float | None = None, concurrency: int | None = None, think_time_s: float | None = None,
    prompt_tokens: int | None = None, output_tokens: int | None = None, prompt_dist: str | LengthDist | None = None,
    output_dist: str | LengthDist | None = None, trace: tuple[tuple[int, ...], tuple[int, ...], tuple[float, ...]]
    | None = None, cached_prefix_tokens: int = 0, trace_name: str = "", api: bool = False,
) -> Traffic:  # fmt: skip
    """The traffic a plan serves, every input checked (a trace: (prompts, outputs, arrival times), named
    `trace_name` in messages)."""
    if trace is not None:
        lengths = (("prompt_tokens", prompt_tokens), ("output_tokens", output_tokens), ("prompt_dist", prompt_dist),
                   ("output_dist", output_dist))  # fmt: skip
        given = [k for k, v in lengths if v is not None]
        if given:
            raise UsageError(f"{name(given[0], api)}: the trace {trace_name} gives every request's lengths; drop it")
        prompts, outputs, arrivals = trace
        load = next((k for k, v in (("rate", rate), ("concurrency", concurrency)) if v is not None), None)
        if arrivals and load is not None:  # the trace's own times set the load; a second one would be ignored
            raise UsageError(f"{name(load, api)}: the trace {trace_name} gives each request's arrival_s, which set the "
                             f"load; drop {name(load, api)}, or the trace's arrival_s to set it here")  # fmt: skip
        if rate is None and concurrency is None:
            if len(arrivals) < 2 or arrivals[-1] <= arrivals[0]:
                what = ("no arrival_s times to take a rate from" if not arrivals else
                        "one request's arrival_s: no span to take a rate from" if len(arrivals) < 2 else
                        f"every arrival_s is {arrivals[0]:g}: no span of time to take a rate from")  # fmt: skip
                raise UsageError(f"{name('trace', api)} {trace_name}: {what}; give {name('rate', api)} or "
                                 f"{name('concurrency', api)}")  # fmt: skip
            rate = (len(arrivals) - 1) / (arrivals[-1] - arrivals[0])
            if not MIN_RATE_RPS <= rate <= MAX_RATE_RPS:  # the trace set it: say so, not the flag nobody gave
                raise UsageError(f"{name('trace', api)} {trace_name}: arrival_s spans {arrivals[-1] - arrivals[0]:g} s "
                                 f"for {len(arrivals):,} requests, {rate:g} requests/s; a rate must be from "
                                 f"{MIN_RATE_RPS:g} to {MAX_RATE_RPS:,.0f} (arrival_s is in seconds)")  # fmt: skip
        if min(prompts) <= cached_prefix_tokens:
            raise UsageError(f"{name('cached_prefix_tokens', api)}: must be below the shortest prompt of "
                             f"{trace_name or 'the trace'} ({min(prompts)} tokens)")  # fmt: skip
        prompt_len, output_len = _trace_lengths(prompts), _trace_lengths(outputs)
        pairs = tuple(zip((p - cached_prefix_tokens for p in prompts), outputs, strict=True))
    else:
        prompt_tokens = DEFAULT_PROMPT if prompt_tokens is None else prompt_tokens  # 0 is checked, not defaulted
        output_tokens = DEFAULT_OUTPUT if output_tokens is None else output_tokens
        wl = _lengths(prompt_tokens, output_tokens, cached_prefix_tokens, api)
        prompt_len = _dist(prompt_dist, wl.prompt_tokens, "prompt_dist", api)
        output_len = _dist(output_dist, wl.output_tokens, "output_dist", api)
        arrivals, pairs = (), ()
    if rate is None and concurrency is None:
        raise UsageError(f"{name('rate', api)} / {name('concurrency', api)}: give exactly one (requests/s, or users)")
    rate, concurrency, think = _load(rate, concurrency, think_time_s, api)
    return Traffic(
        prompt=prompt_len.shifted(cached_prefix_tokens), output=output_len, rate_rps=rate, concurrency=concurrency,
        think_time_s=think, cached_prefix_tokens=cached_prefix_tokens, arrivals_s=arrivals, pairs=pairs,
    )  # fmt: skip


def check_slos(slos: list[Slo], api: bool = False) -> list[Slo]:
    """The SLOs, each metric and percentile once: two values for one would enforce one and report the other."""
    seen: dict[str, Slo] = {}
    for slo in slos:
        if slo.label in seen:
            raise UsageError(f"{name('slo', api)}: {slo.label} given twice ({seen[slo.label].seconds:g} s and "
                             f"{slo.seconds:g} s); give it once")  # fmt: skip
        seen[slo.label] = slo
    return list(slos)


def _trace_lengths(values: tuple[int, ...]) -> LengthDist:
    """A trace's lengths of one kind: fixed where every request has the same (the chunk's alignment and lock-step
    read fixed lengths), else the trace's own."""
    if min(values) == max(values):
        return LengthDist("fixed", values[0])
    return LengthDist("empirical", sum(values) / len(values), values=values)


def check_context(model: ModelSpec, traffic: Traffic, api: bool = False) -> list[str]:
    """Refuse a mean prompt and answer past the model's context; warn when a distribution's long tail passes it."""
    total = traffic.prompt_mean_tokens + traffic.output.mean
    if total > model.max_context:
        flags = f"{name('prompt_tokens', api)} / {name('output_tokens', api)}"  # either may be the long one
        if traffic.pairs:  # the lengths are the trace's, not the flags'
            flags = f"{name('trace', api)} (its mean lengths)"
        raise UsageError(f"{flags}: a {traffic.prompt_mean_tokens:,.0f}-token prompt and "
                         f"{traffic.output.mean:,.0f}-token answer exceed {model.name}'s context of "
                         f"{model.max_context:,} tokens")  # fmt: skip
    p99 = traffic.cached_prefix_tokens + traffic.prompt.quantile(0.99) + traffic.output.quantile(0.99)
    if p99 > model.max_context:
        return [f"{model.name}: the longest requests (p99 prompt and answer, {p99:,.0f} tokens) pass its context of "
                f"{model.max_context:,}; an engine would refuse or cut them, plan prices them whole"]  # fmt: skip
    return []


def search_points(model: ModelSpec, space: Space) -> int:
    """Points the search prices: GPU x precision x layout x chunk (an MoE's weighted), both modes counted."""
    points = 0
    for gpu in space.gpus:
        layouts = _layout_count(model, gpu, space)
        chunks = len(scheduler_choice(space, gpu).chunks)
        points += layouts * chunks * len(space.weights) * len(space.kv_dtypes) * len(space.compute_dtypes)
    modes = 2 if space.mode == "both" else 1
    return points * modes * (MOE_POINT_WEIGHT if model.moe else 1)


def _layout_count(model: ModelSpec, gpu: GpuSpec, space: Space) -> int:
    tps = space.tps or tuple(valid_tp_degrees(model, gpu.gpus_per_node)) or (1,)
    pps = space.pps or (1,)
    eps = space.eps or ((1, 2) if model.moe else (1,))
    combos = len(list(product(tps, pps, eps, space.dps)))
    return max(combos, len(pipeline_fallback(model, gpu)) if space.pps is None else 0)


def check_mode(traffic: Traffic, space: Space, api: bool = False) -> None:
    """A disaggregated plan sizes its prefill pool by the arrival rate (it needs one) and its decode pool by the
    decode steps (it needs answers past their first token)."""
    if space.mode != "aggregated" and traffic.rate_rps is None:
        raise UsageError(f"{name('mode', api)}: disaggregated plans need {name('rate', api)} (or a trace with "
                         "arrival_s)")  # fmt: skip
    if space.mode != "aggregated" and traffic.output.mean <= 1:  # every answer one token: no decode step at all
        raise UsageError(f"{name('mode', api)}: a disaggregated plan needs answers of 2 tokens or more (one "
                         "output token is the prefill's own: nothing is left for a decode pool); plan it "
                         "aggregated")  # fmt: skip


def _chunk_budgets(chunks: Sequence[int] | str | None, api: bool) -> tuple[int, ...] | None:
    """The prefill budgets to try: a list, or `search` (DEFAULT_CHUNKS), each in range."""
    if isinstance(chunks, str):
        if chunks.strip().lower() != "search":
            raise UsageError(f"{name('chunks', api)}: {chunks!r:.40} is not a list of budgets nor 'search'")
        return DEFAULT_CHUNKS
    return _ints(chunks, "chunks", 16, 1_000_000, api)


def check_search(model: ModelSpec, space: Space, api: bool = False) -> None:
    """Refuse, before any work, a search of more than MAX_SEARCH_POINTS points."""
    points = search_points(model, space)
    if points > MAX_SEARCH_POINTS:
        what = f" (an MoE's count {MOE_POINT_WEIGHT}x)" if model.moe else ""
        raise UsageError(f"{name('gpu', api)}: {points:,} search points{what} (GPU x precision x layout x chunk); at "
                         f"most {MAX_SEARCH_POINTS:,}: give fewer GPUs, --tp/--chunk values or formats")  # fmt: skip


def check_simulation(
    traffic: Traffic, space: Space, *, simulate: bool, requests: int | None, seed: int | None = None, api: bool = False
) -> int | None:
    """The simulated requests per row (None: no simulation), bounded with the prefill steps they take; a length or a
    seed without the simulation is refused (it would change nothing)."""
    if not simulate:
        if seed is not None:
            raise UsageError(
                f"{name('seed', api)}: seeds the simulation; give it with {name('simulate', api)}, or drop it"
            )
        if requests is not None:
            raise UsageError(f"{name('requests', api)}: sets the simulation's length; give it with "
                             f"{name('simulate', api)}, or drop it")  # fmt: skip
        return None
    if space.mode == "disaggregated":  # simulate_rows runs aggregated replicas: a disaggregated plan has none
        raise UsageError(f"{name('simulate', api)}: simulates aggregated replicas, and a disaggregated plan has "
                         f"none; give {name('mode', api)} both or aggregated, or drop "
                         f"{name('simulate', api)}")  # fmt: skip
    n = 4000 if requests is None else requests
    if isinstance(n, bool) or not MIN_REQUESTS <= n <= MAX_REQUESTS:
        raise UsageError(f"{name('requests', api)}: must be in {MIN_REQUESTS}..{MAX_REQUESTS:,} (got {n})")
    smallest = min(min(scheduler_choice(space, gpu).chunks) for gpu in space.gpus)
    # steps are packed: all but the last of a step's prompts run whole, so every step is full (a chunk of tokens) or
    # finishes a prompt, and n prompts of mean P take at most n P / C + n steps
    per_request = traffic.prompt.mean / smallest + 1
    steps = math.ceil(SIMULATED_ROWS * n * per_request)
    if steps > MAX_SIMULATED_STEPS:
        most = math.floor(MAX_SIMULATED_STEPS / (SIMULATED_ROWS * per_request))
        each = f"{per_request:,.1f}".removesuffix(".0")
        work = (f"{n:,} requests of up to {each} prefill steps each ({traffic.prompt.mean:,.0f}-token prompts "
                f"in {smallest:,}-token chunks), on up to {SIMULATED_ROWS} of the top rows, simulate {steps:,} steps; "
                f"at most {MAX_SIMULATED_STEPS:,}")  # fmt: skip
        if most >= MIN_REQUESTS and requests is None:  # the default, not the user's count: the most that fits
            return most
        if most >= MIN_REQUESTS:
            raise UsageError(f"{name('requests', api)}: {work}: give at most {most:,}")
        flag = name("simulate" if requests is None else "requests", api)  # no request count fits: say what does
        raise UsageError(f"{flag}: {work}, even at the fewest requests ({MIN_REQUESTS}); give larger chunks "
                         f"({name('chunks', api)}) or shorter prompts, or drop {name('simulate', api)}")  # fmt: skip
    return n


MAX_JOBS = 1024  # worker processes a plan's search may start


def check_jobs(jobs: int | None, api: bool = False) -> int | None:
    """The worker processes asked for (None: the default), a whole number in 1..MAX_JOBS."""
    if jobs is not None and (isinstance(jobs, bool) or not isinstance(jobs, int) or not 1 <= jobs <= MAX_JOBS):
        raise UsageError(f"{name('jobs', api)}: must be a whole number in 1..{MAX_JOBS:,} (got {jobs!r})")
    return jobs


def _ints(values: Sequence[int] | None, key: str, low: int, high: int, api: bool) -> tuple[int, ...] | None:
    """A list of whole numbers, each in [low, high] (a bool is not one), duplicates merged."""
    if values is None:
        return None
    _not_empty(values, key, api)
    for v in values:
        if isinstance(v, bool) or not isinstance(v, int) or not low <= v <= high:
            allowed = f"each value must be an integer from {low:,} to {high:,}"
            raise UsageError(f"{name(key, api)}: {allowed} (got {v!r:.20})")
    return tuple(dict.fromkeys(values))


def _not_empty(values: Sequence[object], key: str, api: bool) -> None:
    """An empty list is refused, not searched as no configuration at all."""
    if not values:
        raise UsageError(f"{name(key, api)}: an empty list; give at least one value")


def format_values(values: Sequence[str] | None, key: str, field: str, api: bool) -> tuple[str | None, ...]:
    """Storage formats or compute dtypes, each resolved as the Workload resolves it (aliases become their
    canonical names, in any case)."""
    if values is None:
        return (None,)
    _not_empty(values, key, api)
    out = [getattr(Workload.checked({field: v}, {field: name(key, api)}), field) for v in values]
    return tuple(dict.fromkeys(out))


def _prices(prices: Mapping[str, float] | float | None, gpus: tuple[GpuSpec, ...], api: bool) -> dict[str, float]:
    """{gpu name: USD per GPU-hour}: a mapping by name (in any case), or one number for every GPU (as `--price 2`)."""
    names = {g.name.lower(): g.name for g in gpus}
    if isinstance(prices, (int, float)) and not isinstance(prices, bool):
        _check_price(prices, name("prices", api))
        return dict.fromkeys(names.values(), float(prices))
    out = {}
    for gpu, usd in (prices or {}).items():
        key = names.get(gpu.strip().lower())
        if key is None:
            raise UsageError(f"{name('prices', api)}: {gpu!r} is not among {name('gpus', api)} "
                             f"({', '.join(names.values())})")  # fmt: skip
        _check_price(usd, f"{name('prices', api)}: {gpu}")
        out[key] = float(usd)
    return out


def _check_price(usd: object, where: str) -> None:
    if (
        isinstance(usd, bool)
        or not isinstance(usd, (int, float))
        or not (math.isfinite(usd) and 0 <= usd <= MAX_PRICE_USD)
    ):
        raise UsageError(f"{where}: USD per GPU-hour must be a number from 0 to {MAX_PRICE_USD:,} (got {usd!r:.40})")


PREFILL: dict[str, bool | None] = {"engine": None, "apart": True, "mixed": False}  # None: the engine's own


def plan_space(
    *, gpus: tuple[GpuSpec, ...], engine: EngineProfile, tp: Sequence[int] | None = None,
    pp: Sequence[int] | None = None, ep: Sequence[int] | None = None, dp: Sequence[int] | None = None,
    weights: Sequence[str] | None = None, kv_dtypes: Sequence[str] | None = None,
    compute_dtypes: Sequence[str] | None = None, chunks: Sequence[int] | str | None = None,
    max_running: int | None = None,
    prefill: str = "engine", mode: str = "aggregated", max_gpus: int | None = None, headroom: float = 0.2,
    prices: Mapping[str, float] | float | None = None, networks: Mapping[str, Link] | None = None, api: bool = False,
    flash_attention: bool = True, redundant_experts: int = 0,
) -> Space:  # fmt: skip
    """The search space, every list and knob in range (as the flags are on the command line)."""
    if not gpus:
        raise UsageError(f"{name('gpu', api)}: no GPU given")
    check_distinct_names(gpus, name("gpu", api))  # its rows would read as one GPU, and a per-GPU price reach one
    if mode not in ("aggregated", "disaggregated", "both"):
        raise UsageError(f"{name('mode', api)}: {mode!r} is not one of aggregated, disaggregated, both")
    if prefill not in PREFILL:
        raise UsageError(f"{name('prefill', api)}: {prefill!r:.40} is not one of {', '.join(PREFILL)}")
    if not (isinstance(headroom, (int, float)) and not isinstance(headroom, bool) and math.isfinite(headroom)
            and 0 <= headroom <= 10):  # fmt: skip
        raise UsageError(
            f"{name('headroom', api)}: must be a fraction from 0 to 10 (got {headroom!r:.20}); 0.2 keeps 20% free"
        )
    if not isinstance(flash_attention, bool):
        raise UsageError(f"{name('flash_attention', api)}: must be true or false (got {flash_attention!r:.20})")
    cap = _ints([max_running] if max_running is not None else None, "max_running", 1, 10_000_000, api)
    most = _ints([max_gpus] if max_gpus is not None else None, "max_gpus", 1, 1_000_000, api)
    spare = redundant_experts
    if isinstance(spare, bool) or not isinstance(spare, int) or not 0 <= spare <= 4096:
        raise UsageError(f"{name('redundant_experts', api)}: must be an integer from 0 to 4,096 (got {spare!r:.20})")
    return Space(
        gpus=gpus, tps=_ints(tp, "tp", 1, 4096, api), pps=_ints(pp, "pp", 1, 1024, api),
        eps=_ints(ep, "ep", 1, 4096, api),
        dps=_ints(dp, "dp", 1, 4096, api) or (1,), engine=engine,
        weights=format_values(weights, "weights", "weights_dtype", api),
        kv_dtypes=format_values(kv_dtypes, "kv_dtypes", "kv_dtype", api),
        compute_dtypes=format_values(compute_dtypes, "compute_dtypes", "compute_dtype", api),
        chunks=_chunk_budgets(chunks, api), max_running=cap[0] if cap else None,
        prefill_apart=PREFILL[prefill], mode=mode,  # type: ignore[arg-type]
        max_gpus=most[0] if most else None, headroom=float(headroom), prices=_prices(prices, gpus, api),
        networks=dict(networks or {}), flash_attention=flash_attention, redundant_experts=spare,
    )  # fmt: skip
