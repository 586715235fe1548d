"""What one replica sustains: its saturation rate, its goodput under SLOs, and its state at a given load.

Every quantity of the steady state grows with the mean decode batch b (replica.py), so the search runs
over b, where each state is a closed form, instead of over the rate, where each would need a fixed point
(a prefill-only instance has no decode batch and runs over the rate itself):
- saturation: the rate at the largest admissible load (every step full of prefill, or the KV limit);
- goodput (max rate at SLO): the largest load whose state meets every SLO, found by scanning GOODPUT_SCAN
  loads up from zero and bisecting between the last that meets them and the first that does not; the
  first-failure rule makes goodput monotone in the SLOs (a looser SLO never lowers it), and it can never
  exceed saturation;
- the state at an offered rate, or at N closed-loop users with think time Z (N = lambda (E2E + Z), Little),
  by bisection on the load.
The binding constraint is what breaks just past the goodput: an SLO, the KV cache, or (when no SLO binds)
saturation, named by the bound of the steps that saturate: compute, memory bandwidth, interconnect or host launches.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from tokcost.serving.latency import broken_slos, e2e_mean
from tokcost.serving.queueing import regula_falsi
from tokcost.serving.replica import LoadPoint, Replica
from tokcost.serving.rounds import held, locks_whole, round_at
from tokcost.serving.traffic import Slo

GOODPUT_SCAN = 8  # loads tried from zero to the limit before bisecting
ROUND_SCAN = 16  # user counts tried from one to the most a round holds before bisecting (round_users)
RELATIVE_TOLERANCE = 1e-3
ZERO_LOAD = 1e-6  # "vanishing load": a millionth of a sequence (or of a request per second)
BOUND_LABEL = {"compute": "compute", "memory": "memory bandwidth", "interconnect": "interconnect",
               "host": "host launches"}  # fmt: skip


@dataclass(frozen=True, slots=True)
class Capacity:
    """Per-replica limits: goodput (max rate meeting every SLO), saturation, and what binds."""

    max_rate_rps: float
    saturation_rps: float
    load: float  # the load (mean decode batch, or rate for a prefill instance) at the goodput
    binding: str  # "ttft_p90 SLO", "KV memory", "compute", "memory bandwidth", "interconnect", "host launches"
    broken_at_zero_load: tuple[Slo, ...] = ()  # SLOs missed even at vanishing load (goodput 0)


def saturation_bound(replica: Replica) -> str:
    """What the saturating steps are bound by: the packed prefill chunk's, or decode's without prefill."""
    limit = replica.load_limit()
    batch = 0.0 if replica.rate_driven else limit
    if replica.prompts:
        return BOUND_LABEL[replica.steps.pass_cost(batch, replica.packed).bound]
    return BOUND_LABEL[replica.steps.pass_cost(batch + 1, ()).bound]


def limit_label(replica: Replica) -> str:
    """What caps the load when no SLO does."""
    kind = replica.limit_kind()
    if kind == "cap":
        return f"running cap ({replica.max_running:,})"
    return kind if kind == "KV memory" else saturation_bound(replica)


def capacity(replica: Replica, slos: list[Slo]) -> Capacity:
    """Goodput and saturation of one replica under `slos` (none: goodput = saturation)."""
    limit = replica.load_limit()
    if limit <= ZERO_LOAD:
        zero = replica.state(0.0)
        return Capacity(0.0, 0.0, 0.0, "KV memory", tuple(broken_slos(replica, zero, slos)))
    saturation = replica.state(limit).rate_rps
    broken = broken_slos(replica, replica.state(ZERO_LOAD), slos)
    if broken:
        return Capacity(0.0, saturation, 0.0, f"{broken[0].label} SLO", tuple(broken))
    if not slos:
        return Capacity(saturation, saturation, limit, limit_label(replica))
    lo, hi = ZERO_LOAD, None
    for i in range(1, GOODPUT_SCAN + 1):
        x = limit * i / GOODPUT_SCAN
        if broken_slos(replica, replica.state(x), slos):
            hi = x
            break
        lo = x
    if hi is None:
        return Capacity(saturation, saturation, limit, limit_label(replica))
    while hi - lo > RELATIVE_TOLERANCE * hi:
        mid = (lo + hi) / 2
        lo, hi = (lo, mid) if broken_slos(replica, replica.state(mid), slos) else (mid, hi)
    first_broken = broken_slos(replica, replica.state(hi), slos)
    binding = f"{first_broken[0].label} SLO" if first_broken else limit_label(replica)
    # near the limit the rate can dip by a few parts in ten thousand (a KV-limited batch's longer steps): the
    # rate a replica sustains is never more than its saturation, read at the limit
    return Capacity(min(replica.state(lo).rate_rps, saturation), saturation, lo, binding)


def _bisect_load(replica: Replica, measure, target: float) -> LoadPoint | None:  # noqa: ANN001
    """The state whose increasing `measure(state)` equals target, or None at or past the load limit: the load
    bracketed to 1e-9 of itself, or one meeting the target to 1e-10 (queueing.regula_falsi: a handful of
    steady-state solves where bisection took ~30)."""
    limit = replica.load_limit()
    high = measure(replica.state(limit)) - target if limit > 0 else 0.0
    if limit <= 0 or high <= 0:
        return None

    def excess(load: float) -> float:
        return measure(replica.state(load)) - target

    lo, hi = regula_falsi(excess, 0.0, limit, excess(0.0), high, 1e-9, g_tolerance=1e-10 * abs(target))
    return replica.state((lo + hi) / 2)


def state_at_rate(replica: Replica, rate: float) -> LoadPoint | None:
    """The steady state at `rate` requests/s, or None at or past saturation."""
    if rate <= 0:
        return replica.state(0.0)
    if replica.rate_driven:
        pt = replica.state(rate) if rate < replica.load_limit() else None
    else:
        pt = _bisect_load(replica, lambda pt: pt.rate_rps, rate)
    # within rounding of the limit the queue's wait is already infinite: no steady state there either
    return pt if pt is not None and math.isfinite(pt.wait_mean_s) else None


def users_in_system(replica: Replica, pt: LoadPoint, think_time_s: float) -> float:
    """Closed-loop users this state holds: rate x (mean E2E + the client's round trip + think time) (Little on
    a user's cycle; the mean-value analysis of the loop), and the per-request cost where the E2E timed leaves it out
    (timed at the engine: the client still pays it each cycle)."""
    untimed = replica.request_cost_s - replica.overhead_s
    return pt.rate_rps * (e2e_mean(replica, pt) + replica.traffic.client_rtt_s + untimed + think_time_s)


def state_at_users(replica: Replica, users: float, think_time_s: float) -> LoadPoint | None:
    """Closed loop: the steady state holding `users` users. Past the load limit (the running cap, the KV slots
    or prefill saturation) the extra users wait for admission, (users - users at the limit) / rate each, on TTFT
    alone; None only when not one request fits. A loop that runs in whole lock-step rounds (rounds.py: prefill
    apart, fixed answers, no think time, every user running at once) takes its latencies and rate from its round."""
    if think_time_s == 0 and locks_whole(replica) and held(replica) >= 1:
        return round_state(replica, users)
    found = _bisect_load(replica, lambda pt: users_in_system(replica, pt, think_time_s), users)
    limit = replica.load_limit()
    if found is not None or limit <= 0:
        return found
    edge = replica.state(limit)
    extra = users - users_in_system(replica, edge, think_time_s)
    return replace(edge, admission_wait_s=max(extra, 0.0) / edge.rate_rps) if edge.rate_rps > 0 else None


def users_capacity(replica: Replica, cap: Capacity, think_time_s: float, slos: list[Slo] | None = None) -> int:
    """Closed-loop users one replica takes at its goodput, whole (a replica with 1.25 users' capacity holds one: a
    second misses the SLO): those the goodput state holds when an SLO binds; at a load limit, those it holds
    without waiting for prefill (the knee: more users only queue). A loop in whole rounds (rounds.py): the most
    users a round holds (the running cap, the KV cache; more only wait for a slot), or where nothing caps it the
    closed form's knee, up to the first count whose round breaks an SLO."""
    if think_time_s == 0 and locks_whole(replica):
        top = held(replica)
        if not math.isfinite(top):  # nothing caps a round: the closed form's knee
            knee = replace(replica.state(replica.load_limit()), wait_mean_s=0.0, queue_rho=0.0)
            top = users_in_system(replica, knee, 0.0) + 1e-9
        if math.isfinite(top):
            return round_users(replica, slos or [], max(math.floor(top), 0))
    pt = replica.state(cap.load)
    if not cap.binding.endswith(" SLO"):
        pt = replace(pt, wait_mean_s=0.0, queue_rho=0.0)
    return math.floor(users_in_system(replica, pt, think_time_s) + 1e-9)


def round_state(replica: Replica, users: float) -> LoadPoint:
    """The state of a loop in whole rounds: the closed form's state at the round's mean decode batch (lambda n TPOT,
    Little), with the round's rate, mean TPOT, share of time in prefill steps (sum L / the cycle) and latencies
    (rounds.py) in place of the closed form's."""
    found = round_at(replica, users)
    tpot = found.mean("tpot")
    batch = found.rate_rps * replica.decode_steps_mean * tpot
    pt = replica.state(min(batch, replica.load_limit()))
    # the share of time in prefill steps: a round's sum L over its cycle (users / rate; past a round, K's steps at
    # the simulated rate)
    rho = found.prefill_s * found.rate_rps / min(found.users, held(replica))
    return replace(pt, batch=batch, rate_rps=found.rate_rps, tpot_mean_s=tpot, rho=rho,
                   admission_wait_s=max(found.wait_s, 0.0), round=found)  # fmt: skip


def round_users(replica: Replica, slos: list[Slo], top: int) -> int:
    """The most users, at most `top`, whose whole round meets every SLO (0: not even one user's), by the first-failure
    rule: counts scanned up from one, then bisected between the last that meets them and the first that does not. A
    tail need not grow with every user (ITL's p99 falls when one more prompt fills a step: 55.9 ms at 8 users, 20.7
    at 9, 105.2 at 16, Llama-3.1-8B at 500 / 50 tokens and a 2,048-token chunk), so the first failure, not the
    last success, bounds the count; the fleet then checks the count it deploys (fleet.size_aggregated)."""
    if top < 1 or broken_slos(replica, round_state(replica, 1.0), slos):
        return 0
    lo, hi = 1, None
    for i in range(1, ROUND_SCAN + 1):
        n = max(math.ceil(top * i / ROUND_SCAN), lo + 1) if i < ROUND_SCAN else top
        if n > top:
            break
        if broken_slos(replica, round_state(replica, float(n)), slos):
            hi = n
            break
        lo = n
    if hi is None:
        return lo
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if broken_slos(replica, round_state(replica, float(mid)), slos) else (mid, hi)
    return lo
