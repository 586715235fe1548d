"""The closed form against the discrete-event simulation of the same scheduler, load by load (plan's 15%)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from tokcost.serving.capacity import capacity, state_at_rate, state_at_users
from tokcost.serving.latency import percentile
from tokcost.serving.replica import Replica
from tokcost.serving.simulate import simulate
from tokcost.serving.traffic import Traffic

TOLERANCE = 0.15


def misses(name: str, make: Callable[[Traffic], Replica], traffic: Traffic, chunk: int, loads: Sequence[float], *,
           metrics: Sequence[str], requests: int, **scheduler: bool) -> list[str]:  # fmt: skip
    """Each p50 and p90 of `metrics` off by more than TOLERANCE: a load is a share of saturation (open loop) or a
    user count (closed loop); `scheduler` goes to the simulation as the replica runs it (lookahead, prefill_apart)."""
    replica = make(traffic)
    saturation = capacity(replica, []).saturation_rps
    out = []
    for load in loads:
        if traffic.concurrency is None:
            rate = load * saturation
            point = state_at_rate(replica, rate)
            sim = simulate(replica.steps, traffic, chunk, requests=requests, seed=1, rate_rps=rate, **scheduler)
        else:
            users = Traffic(traffic.prompt, traffic.output, concurrency=int(load))
            replica = make(users)
            point = state_at_users(replica, load, 0.0)
            sim = simulate(replica.steps, users, chunk, requests=4000, seed=1, **scheduler)
        for metric in metrics:
            for q in (0.5, 0.9):
                error = percentile(replica, point, metric, q) / sim.percentile(metric, q) - 1
                if abs(error) > TOLERANCE:
                    out.append(f"{name} at {load}: {metric} p{q * 100:.0f} {error:+.1%}")
    return out
