"""How a plan's rows rank, which are on the Pareto frontier, and what the load table says (search.plan uses them).

Ranking: configurations that meet every SLO under "expected" first, cheapest $/hour first (no price: after those
with one, fewest GPUs first), ties by p90 TPOT, p90 TTFT, then fewest GPUs. A configuration is on the Pareto
frontier when no other that meets the SLOs costs at most as much per hour and is at least as fast at p90 TPOT (or
at p90 TTFT), better in one: the first row is always on it. The load table sizes the cheapest configuration at
multiples of the load from the same goodputs (of equal cost the better-ranked, so that at 1x it is the first row),
--max-gpus checked at each load.
"""

from __future__ import annotations

import math

from tokcost.serving.fleet import Fleet, fleet_usd_per_hour
from tokcost.serving.rows import Row, Space, row_label
from tokcost.serving.traffic import Traffic

LOAD_MULTIPLES = (0.25, 0.5, 1.0, 2.0, 4.0)


def _p90(values: dict[str, float | None] | None) -> float:
    return (values or {}).get("p90") or math.inf


def _cost(row: Row) -> tuple[bool, float]:
    """What a fleet costs as plans weigh it: a price before none, then $/hour, or GPUs where it has no price."""
    x = row.expected
    if x.usd_per_hour is not None:
        return False, x.usd_per_hour
    return True, x.gpus if x.gpus is not None else math.inf


def rank(row: Row) -> tuple:
    x = row.expected
    return (
        not x.meets_slo,
        *_cost(row),
        _p90(x.tpot_s),  # then the faster, so that of fleets that cost the same the first is on the frontier
        _p90(x.ttft_s),
        x.gpus if x.gpus is not None else math.inf,
    )


def primary_cost(fleet: Fleet) -> float | None:
    """What plans rank and the frontier weighs: the fleet's $/hour (the same load is served by every row)."""
    return fleet.usd_per_hour


def mark_pareto(rows: list[Row]) -> None:
    """Pareto frontier of $/hour against p90 TPOT and against p90 TTFT (rows meeting the SLOs; a GPU without a
    price weighs by its GPUs, after every priced fleet, as it ranks)."""
    points = []
    for row in rows:
        x = row.expected
        if x.meets_slo:  # weighed as ranked
            points.append((row, _cost(row), (x.tpot_s or {}).get("p90"), (x.ttft_s or {}).get("p90")))
    for row, usd, tpot, ttft in points:
        row.pareto = any(
            latency is not None
            and not any(
                o_usd <= usd and o_lat is not None and o_lat <= latency and (o_usd < usd or o_lat < latency)
                for other, o_usd, *o_lats in points
                for o_lat in [o_lats[i]]
                if other is not row
            )
            for i, latency in enumerate((tpot, ttft))
        )


def load_table(rows: list[Row], traffic: Traffic, space: Space) -> list[dict[str, object]]:
    """For each multiple of the offered load, the cheapest configuration's GPUs (by the same goodputs)."""
    base = traffic.rate_rps if traffic.rate_rps is not None else float(traffic.concurrency or 0)
    table = []
    for multiple in LOAD_MULTIPLES:
        # users come whole: a quarter of 50 is 13 users (the table had sized 12.5), a quarter of one user is one
        load = base * multiple if traffic.rate_rps is not None else max(math.ceil(base * multiple - 1e-9), 1)
        best: tuple[tuple, Row, int] | None = None
        for row in rows:  # in rank order: of equal cost the better-ranked stays (at 1x, the plan's first row)
            if not (row.expected.meets_slo or row.expected.over_max_gpus):  # --max-gpus is checked at this load
                continue
            gpus = row.expected.gpus_at(load, space.headroom)
            if gpus is None or (space.max_gpus is not None and gpus > space.max_gpus):
                continue
            usd = fleet_usd_per_hour(row.price, gpus)
            key = (usd is None, usd if usd is not None else gpus)
            if best is None or key < best[0]:
                best = (key, row, gpus)
        entry: dict[str, object] = {"multiple": multiple, "load": load, "config": None, "gpus": None,
                                    "usd_per_hour": None}  # fmt: skip
        if best is not None:
            _, row, gpus = best
            entry.update(config=row_label(row), gpus=gpus, usd_per_hour=fleet_usd_per_hour(row.price, gpus))
        table.append(entry)
    return table
