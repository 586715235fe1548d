"""A fleet for the offered load: replicas from goodput, latencies at the load each replica gets, and its cost.

- replicas = ceil(rate x (1 + headroom) / goodput per replica) (closed loop: users x (1 + headroom) / users
  per replica at the goodput, or at a load limit the users it holds without queueing); GPUs = replicas x GPUs
  per replica; each replica then serves rate / replicas (or users / replicas), and the percentiles are read at
  that load. Utilization = that per-replica rate / its saturation rate.
- $/hour = GPUs x $/GPU-hour, the cost plans rank by; $/1M tokens blends it over every token served (input and
  output at the traffic's mix). $/1M input and output tokens split the fleet's cost by busy time: the prefill
  share of a replica's time is what its chunks add to the steps, kappa rho = rho (1 - T0 / Tp); decode gets
  the rest of the busy time; idle time is shared in the same proportion. Input tokens count the whole prompt
  (cached prefix included), output tokens every generated token.
- Disaggregated: a prefill pool sized for the TTFT SLOs and a decode pool sized for the TPOT SLOs, each
  with its own replicas; every request's KV (the computed prompt's) crosses the link between them before
  its first decode step, which adds transfer / n to its TPOT. Input tokens pay for the prefill pool, output
  tokens for the decode pool.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from tokcost.engine.estimate import SECONDS_PER_HOUR
from tokcost.engine.layout import kv_heads_per_rank
from tokcost.engine.workload import resolve_precision
from tokcost.hardware.spec import Link
from tokcost.models.spec import ModelSpec
from tokcost.serving.capacity import (
    Capacity,
    capacity,
    limit_label,
    state_at_rate,
    state_at_users,
    users_capacity,
)
from tokcost.serving.latency import broken_slos, e2e_tail, e2e_tail_at, percentile, ttft_moments
from tokcost.serving.queueing import Moments, quantile
from tokcost.serving.replica import LoadPoint, Replica
from tokcost.serving.traffic import QUANTILES, Slo, Traffic

REPORTED = ("p50", "p90", "p99")
PER_MILLION = 1e6


@dataclass(frozen=True, slots=True)
class Fleet:
    """One scenario's answer for one configuration at the offered load."""

    meets_slo: bool
    max_rate_rps: float  # goodput of one replica (disaggregated: of the fleet's scarcer pool, per instance)
    saturation_rps: float
    replicas: int | None
    prefill_replicas: int | None  # disaggregated only
    gpus: int | None
    utilization: float | None
    ttft_s: dict[str, float | None] | None
    tpot_s: dict[str, float | None] | None
    e2e_s: dict[str, float | None] | None
    usd_per_hour: float | None
    usd_per_million_input_tokens: float | None
    usd_per_million_output_tokens: float | None
    binding: str
    itl_s: dict[str, float | None] | None = None  # the gap between two tokens, pooled (steps with prefill too)
    usd_per_million_tokens: float | None = None  # $/hour over every token served, input and output at the mix
    point: LoadPoint | None = None  # the per-replica state at the offered load (aggregated; decode pool)
    capacity: Capacity | None = None
    # (load one instance carries at the goodput, GPUs per instance) per pool; load = rate, or users
    pools: tuple[tuple[float, int], ...] = ()
    # a closed loop with fixed lengths: TTFT were its users in lock-step groups (loop.py; the range's other end)
    ttft_lock_step_s: dict[str, float | None] | None = None
    over_max_gpus: bool = False  # it meets every SLO, with more GPUs than --max-gpus allows (the load table may fit it)

    def __post_init__(self) -> None:
        """One finiteness rule for every number plan prints: a value that is not a finite number is unknown (None)."""
        for name in PRINTED:
            value = getattr(self, name)
            if isinstance(value, dict):
                object.__setattr__(self, name, {k: _finite(v) for k, v in value.items()})
            elif isinstance(value, float):
                object.__setattr__(self, name, _finite(value))

    def gpus_at(self, load: float, headroom: float) -> int | None:
        """GPUs this configuration needs for `load` (rate or users), from the same goodput."""
        if not self.pools or any(cap <= 0 for cap, _ in self.pools):
            return None
        return sum(max(math.ceil(load * (1 + headroom) / cap - 1e-9), 1) * gpus for cap, gpus in self.pools)


PRINTED = ("max_rate_rps", "saturation_rps", "utilization", "ttft_s", "ttft_lock_step_s", "tpot_s", "e2e_s", "itl_s",
           "usd_per_hour", "usd_per_million_input_tokens", "usd_per_million_output_tokens",
           "usd_per_million_tokens")  # fmt: skip


def _finite(value: float | None) -> float | None:
    return value if value is None or math.isfinite(value) else None


def failed(binding: str, cap: Capacity | None = None) -> Fleet:
    """A configuration that cannot serve the load, and why."""
    sat = cap.saturation_rps if cap else 0.0
    return Fleet(False, 0.0, sat, None, None, None, None, None, None, None, None, None, None, binding, capacity=cap)


def percentiles(replica: Replica, pt: LoadPoint, metric: str) -> dict[str, float | None] | None:
    """{p50, p90, p99} of a metric in seconds, or None where it does not apply."""
    values = ordered({name: percentile(replica, pt, metric, QUANTILES[name]) for name in REPORTED})
    return None if all(v is None for v in values.values()) else values


def ordered(values: dict[str, float | None]) -> dict[str, float | None]:
    """Quantiles in REPORTED order, none below the one before: each is found to a tolerance, and at a distribution's
    atom (a lone request's TTFT, a lock-step group's wait) p90 came out a hair (1e-9 s) under p50."""
    out: dict[str, float | None] = {}
    floor = -math.inf
    for name in REPORTED:
        value = values[name]
        if value is not None:
            value = floor = max(value, floor)
        out[name] = value
    return out


def busy_share(pt: LoadPoint) -> float:
    """The replica's busy share of the time: prefill's rho, and decoding for the rest while any sequence runs
    (1 - e^-B of it, B the mean decode batch as a Poisson count)."""
    return pt.rho + (1 - pt.rho) * (1 - math.exp(-pt.batch))


def lone_split(replica: Replica, pt: LoadPoint) -> bool:
    """Whether the split is a lone request's own prefill against its decode (a vanishing load)."""
    busy = busy_share(pt)
    return busy <= 1e-9 or pt.decode_share * pt.rho > busy


def cost_shares(replica: Replica, pt: LoadPoint) -> tuple[float, float]:
    """(input, output) shares of a replica's busy time: prefill's marginal share kappa rho over the busy share
    (busy_share), decode the rest."""
    if replica.decode_steps_mean <= 0:  # one-token answers: no decode step, the prefill is the whole busy time
        return 1.0, 0.0
    if pt.round is not None:  # whole rounds: a round's prefill steps against its decode steps, the busy time exactly
        busy = pt.round.prefill_s + pt.round.decode_s
        return pt.round.prefill_s / busy, pt.round.decode_s / busy
    prefill, busy = pt.decode_share * pt.rho, busy_share(pt)
    if lone_split(replica, pt):  # vanishing load: one request's own prefill against its decode
        alone = sum(p.weight * a for p, a in zip(replica.prompts, pt.alone_s, strict=True))
        decode = replica.decode_steps_mean * pt.decode_step_s
        return (alone / (alone + decode), decode / (alone + decode)) if alone + decode > 0 else (0.5, 0.5)
    return prefill / busy, 1 - prefill / busy


def fleet_usd_per_hour(price: float | None, gpus: int) -> float | None:
    """The fleet's $/hour: GPUs x $/GPU-hour, to a millionth of a dollar (12 x 4.54 is 54.480000000000004 in floats)."""
    return None if price is None else round(price * gpus, 6)


def _per_million(usd_per_hour: float | None, share: float, tokens_per_s: float) -> float | None:
    if usd_per_hour is None or tokens_per_s <= 0:
        return None
    return usd_per_hour / SECONDS_PER_HOUR * share / tokens_per_s * PER_MILLION


def _blended(usd_per_hour: float | None, rate: float, traffic: Traffic) -> float | None:
    """$ per 1M tokens of either kind at the traffic's mix: the hour's cost over the hour's tokens."""
    return _per_million(usd_per_hour, 1.0, rate * (traffic.prompt_mean_tokens + traffic.output.mean))


def size_aggregated(
    replica: Replica, traffic: Traffic, slos: list[Slo], *, headroom: float, gpus_per_replica: int,
    price: float | None, max_gpus: int | None,
) -> Fleet:  # fmt: skip
    """Replicas, latencies and cost of serving `traffic` with copies of one replica."""
    cap = capacity(replica, slos)
    if cap.max_rate_rps <= 0:
        return failed(_zero_load_reason(cap), cap)
    per_replica: float = 0.0
    goodput = cap.max_rate_rps  # a closed loop's: the rate of the whole users a replica takes (below)
    if traffic.concurrency:
        per_replica = users_capacity(replica, cap, traffic.think_time_s, slos)
        if per_replica < 1:  # users are whole: a replica holds one user alone, or the configuration fails
            lone = state_at_users(replica, 1.0, traffic.think_time_s)
            broken = broken_slos(replica, lone, slos) if lone is not None else []
            if lone is None or broken:
                return failed(f"{broken[0].label} SLO missed by one user alone" if broken else "not one user fits",
                              cap)  # fmt: skip
            per_replica = 1
        replicas = max(math.ceil(traffic.concurrency * (1 + headroom) / per_replica - 1e-9), 1)
        whole = state_at_users(replica, per_replica, traffic.think_time_s)
        if whole is not None and whole.round is not None:  # whole rounds: what one more user's round breaks binds
            cap = _round_capacity(replica, cap, per_replica, whole, slos)
            replicas = _rounds_that_meet(replica, traffic, slos, replicas)
        # never past the saturation read at the load limit (capacity: the rate can dip by parts in ten thousand near
        # it, where a KV-limited batch's steps grow)
        goodput = min(whole.rate_rps, cap.saturation_rps) if whole is not None else goodput
        pt = state_at_users(replica, traffic.concurrency / replicas, traffic.think_time_s)
        rate = pt.rate_rps * replicas if pt else 0.0
    else:
        rate = traffic.rate_rps or 0.0
        replicas = max(math.ceil(rate * (1 + headroom) / cap.max_rate_rps - 1e-9), 1)
        pt = state_at_rate(replica, rate / replicas)
        if pt is None:  # a headroom of 0 can leave a replica exactly at its limit: no steady state, so one more
            replicas += 1
            pt = state_at_rate(replica, rate / replicas)
    gpus = replicas * gpus_per_replica
    if pt is None:
        return failed("saturated at the offered load", cap)
    usd = fleet_usd_per_hour(price, gpus)
    shares = cost_shares(replica, pt)
    fleet = Fleet(
        meets_slo=max_gpus is None or gpus <= max_gpus,
        max_rate_rps=goodput,
        saturation_rps=cap.saturation_rps,
        replicas=replicas,
        prefill_replicas=None,
        gpus=gpus,
        utilization=pt.rate_rps / cap.saturation_rps if cap.saturation_rps else None,
        ttft_s=percentiles(replica, pt, "ttft"),
        tpot_s=percentiles(replica, pt, "tpot"),
        e2e_s=percentiles(replica, pt, "e2e"),
        usd_per_hour=usd,
        usd_per_million_input_tokens=_per_million(usd, shares[0], rate * traffic.prompt_mean_tokens),
        usd_per_million_output_tokens=_per_million(usd, shares[1], rate * traffic.output.mean),
        binding=cap.binding if max_gpus is None or gpus <= max_gpus else f"needs {gpus} GPUs > --max-gpus {max_gpus}",
        itl_s=percentiles(replica, pt, "itl"),
        usd_per_million_tokens=_blended(usd, rate, traffic),
        point=pt,
        capacity=cap,
        pools=((per_replica if traffic.concurrency else cap.max_rate_rps, gpus_per_replica),),
        ttft_lock_step_s=_lock_step_ttft(replica, traffic, replicas),
        over_max_gpus=max_gpus is not None and gpus > max_gpus,
    )
    return fleet


def _round_capacity(replica: Replica, cap: Capacity, users: int, whole: LoadPoint, slos: list[Slo]) -> Capacity:
    """A loop in whole rounds (rounds.py): goodput is the round's rate at the users a replica takes, bound by the SLO
    that one user more breaks while a round still holds them all, else by what caps a round (the running cap, the KV
    cache) or, where nothing does, the closed form's limit. The round's rate is exact, so it sets saturation where it
    passes the closed form's."""
    more = state_at_users(replica, users + 1, replica.traffic.think_time_s)
    whole_round = more is not None and more.round is not None and more.round.wait_s <= 0
    broken = broken_slos(replica, more, slos) if whole_round and more is not None else []
    binding = f"{broken[0].label} SLO" if broken else limit_label(replica)
    saturation = max(cap.saturation_rps, whole.rate_rps)
    return replace(cap, max_rate_rps=whole.rate_rps, saturation_rps=saturation, load=whole.batch, binding=binding)


def _rounds_that_meet(replica: Replica, traffic: Traffic, slos: list[Slo], replicas: int) -> int:
    """The replicas whose users' rounds meet every SLO: a round's tail need not grow with every user (round_users),
    so the count each replica is given is checked, and a replica added until it meets them, at most until one user
    a replica (a configuration whose lone user breaks an SLO has failed before this)."""
    users = traffic.concurrency or 0
    while replicas < users:
        pt = state_at_users(replica, users / replicas, traffic.think_time_s)
        if pt is not None and not broken_slos(replica, pt, slos):
            break
        replicas += 1
    return replicas


def _lock_step_ttft(replica: Replica, traffic: Traffic, replicas: int) -> dict[str, float | None] | None:
    """TTFT percentiles with the replica's users in lock-step groups, where they can lock (loop.py)."""
    locked = replica.lock_step() if traffic.concurrency else None
    pt = state_at_users(locked, traffic.concurrency / replicas, traffic.think_time_s) if locked else None
    return percentiles(locked, pt, "ttft") if locked and pt else None


def _zero_load_reason(cap: Capacity) -> str:
    if cap.broken_at_zero_load:
        return f"{cap.broken_at_zero_load[0].label} SLO missed even at zero load"
    return "KV memory: not one request fits"


def kv_share(model: ModelSpec, tp: int) -> float:
    """Fraction of a token's KV one TP rank holds: its KV heads (replicated past kv_heads); an MLA latent whole."""
    return 1.0 if model.mla else kv_heads_per_rank(model, tp) / model.kv_heads


def transfer_seconds(model: ModelSpec, replica: Replica, link: Link, prefill_tp: int, decode_tp: int) -> float:
    """Time one request's computed-prompt KV takes from the prefill GPUs to the decode GPUs.

    Each GPU sends (receives) its own shard, all in parallel over its own link: bytes x max(shard on one
    prefill GPU, shard on one decode GPU) / link bandwidth + the link's latency; "expected" applies the
    link's efficiency.
    """
    deployment = replica.steps.deployment
    precision = resolve_precision(model, deployment.workload(), deployment.gpu)
    total = replica.traffic.prompt.mean * model.kv_bytes_per_token(precision.kv)
    shard = max(kv_share(model, prefill_tp), kv_share(model, decode_tp))
    efficiency = link.efficiency if replica.steps.scenario == "expected" else 1.0
    # point to point: a pair, one link of a mesh (an MI300X's 64 of its 448 GB/s)
    return total * shard / (link.group_bytes_per_s(2) * efficiency) + link.latency_at_s(2)


E2E_GROWTH = 4  # a disaggregated fleet grows for its E2E SLOs to this many times the GPUs its pools' SLOs size


def size_disaggregated(
    prefill: Replica, decode: Replica, traffic: Traffic, slos: list[Slo], *, headroom: float,
    prefill_gpus: int, decode_gpus: int, price: float | None, max_gpus: int | None,
) -> Fleet:  # fmt: skip
    """Two pools: prefill sized for the TTFT SLOs, decode for the TPOT and ITL SLOs (transfer included); then, while
    an E2E SLO is missed, one replica more in whichever pool brings the E2E tail down most per GPU (a lighter load
    on either shortens it), up to E2E_GROWTH times the pools' GPUs."""
    rate = traffic.rate_rps or 0.0
    cap_p = capacity(prefill, [s for s in slos if s.metric == "ttft"])
    cap_d = capacity(decode, [s for s in slos if s.metric in ("tpot", "itl")])
    for cap, pool in ((cap_p, "prefill"), (cap_d, "decode")):
        if cap.max_rate_rps <= 0:
            return failed(f"{pool} pool: {_zero_load_reason(cap)}", cap)
    x = max(math.ceil(rate * (1 + headroom) / cap_p.max_rate_rps - 1e-9), 1)
    y = max(math.ceil(rate * (1 + headroom) / cap_d.max_rate_rps - 1e-9), 1)
    e2e_slos = [s for s in slos if s.metric == "e2e"]

    def pools(x: int, y: int) -> tuple[float, LoadPoint, LoadPoint, Moments] | None:
        """(the worst E2E SLO's tail past its allowance, prefill state, decode state, TTFT) at x and y replicas."""
        pt_p, pt_d = state_at_rate(prefill, rate / x), state_at_rate(decode, rate / y)
        if pt_p is None or pt_d is None:
            return None
        ttft = ttft_moments(prefill, pt_p)
        miss = max((e2e_tail(decode, pt_d, s.seconds, ttft) - (1 - s.quantile) for s in e2e_slos), default=-1.0)
        return miss, pt_p, pt_d, ttft

    state = pools(x, y)
    if state is None:
        return failed("saturated at the offered load", cap_d)
    budget = E2E_GROWTH * (x * prefill_gpus + y * decode_gpus)
    while state[0] > 0 and x * prefill_gpus + y * decode_gpus < budget:
        more_p, more_d = pools(x + 1, y), pools(x, y + 1)
        gain_p = (state[0] - more_p[0]) / prefill_gpus if more_p else -1.0
        gain_d = (state[0] - more_d[0]) / decode_gpus if more_d else -1.0
        if max(gain_p, gain_d) <= 0:
            break  # neither pool's load moves the tail: more replicas will not meet it
        if gain_p >= gain_d and more_p is not None:
            x, state = x + 1, more_p
        elif more_d is not None:
            y, state = y + 1, more_d
    _, pt_p, pt_d, ttft = state
    gpus = x * prefill_gpus + y * decode_gpus
    e2e = ordered({
        name: quantile(e2e_tail_at(decode, pt_d, ttft), QUANTILES[name], ttft.mean, 2 * ttft.mean + 1)
        for name in REPORTED
    })  # fmt: skip
    broken = [s for s in e2e_slos if e2e_tail(decode, pt_d, s.seconds, ttft) > 1 - s.quantile]
    heavier = cap_p if x * prefill_gpus >= y * decode_gpus else cap_d
    binding = f"{broken[0].label} SLO" if broken else heavier.binding
    if max_gpus is not None and gpus > max_gpus:
        binding = f"needs {gpus} GPUs > --max-gpus {max_gpus}"
    usd_p, usd_d = fleet_usd_per_hour(price, x * prefill_gpus), fleet_usd_per_hour(price, y * decode_gpus)
    return Fleet(
        meets_slo=not broken and (max_gpus is None or gpus <= max_gpus),
        max_rate_rps=min(cap_p.max_rate_rps, cap_d.max_rate_rps),
        saturation_rps=min(cap_p.saturation_rps, cap_d.saturation_rps),
        replicas=y,
        prefill_replicas=x,
        gpus=gpus,
        utilization=max(rate / x / cap_p.saturation_rps, rate / y / cap_d.saturation_rps),
        ttft_s=percentiles(prefill, pt_p, "ttft"),
        tpot_s=percentiles(decode, pt_d, "tpot"),
        e2e_s=e2e,
        usd_per_hour=fleet_usd_per_hour(price, gpus),
        usd_per_million_input_tokens=_per_million(usd_p, 1.0, rate * traffic.prompt_mean_tokens),
        usd_per_million_output_tokens=_per_million(usd_d, 1.0, rate * traffic.output.mean),
        binding=binding,
        itl_s=percentiles(decode, pt_d, "itl"),
        usd_per_million_tokens=_blended(fleet_usd_per_hour(price, gpus), rate, traffic),
        point=pt_d,
        capacity=heavier,
        pools=((cap_p.max_rate_rps, prefill_gpus), (cap_d.max_rate_rps, decode_gpus)),
        over_max_gpus=not broken and max_gpus is not None and gpus > max_gpus,
    )
