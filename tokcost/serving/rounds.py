"""A closed loop's lock-step round on an engine that runs prefill apart, priced step by step.

With fixed answers and no think time, N benchmark users send together. An engine that runs prefill in steps of
its own and schedules waiting prompts before the running decodes (SGLang without --enable-mixed-chunk, vLLM before
V1 without chunked prefill: the scheduler's `prefill_apart`) runs every waiting prompt before any decode. So the N
prompts go through in k = ceil(N P' / C) prefill steps, packed end to end up to the chunk C, and nobody decodes
until the last of them is done. All N then decode side by side, finish in the same step and come back together
one round trip later: the round repeats whole. Nothing breaks it, as no decode runs between two users' prefills,
and prompts that vary do not either (only the answers set when the users come back): such a round is priced over
rounds of prompts drawn from their law, each as below with its own prompts, and mixed.
Where prefill chunks ride beside the decodes (vLLM V1, TensorRT-LLM), requests that started in different steps end
in different steps, and smaller groups form instead (loop.py).

One round, from the users' arrival at the scheduler (the loop's offset, r + c, after the last token):
- prefill steps L_1 .. L_k, each priced by the engine with the prompt pieces it carries (Segment(1, done, take)),
  as the simulator packs them (simulate.py);
- request m (m = 1 .. N, in send order) has its first token at the end of step j_m = ceil(m P' / C):
  TTFT_m = c + L_1 + ... + L_{j_m} (c: the engine's per-request cost on a client's clock);
- then n = O - 1 decode steps at batch N, D = n T0(N, p0 + P' + (n - 1) / 2): the pass is linear in the contexts,
  so the mean context prices their sum;
- request m's first gap holds the prefill steps after its own, L_{j_m + 1} + ... + L_k, then a decode step; its
  TPOT = (L_{j_m + 1} + ... + L_k + D) / n; every request's E2E is c + sum L + D;
- the cycle is the client's round trip r + E2E, so the rate is X = N / (r + c + sum L + D).

SGLang 0.5.1 serving Qwen3-32B on 4 x H100 (AI Configurator's silicon sample, 4,096 / 128 tokens, 16-128 users)
measured TTFT 1.38-9.20 s and TPOT 18.7-93.9 ms, where this round's lock is what its simulation reproduces (within
3% and 5%) and the partly locked closed form priced 0.36-0.55 s and 28-166 ms (validation/serving.md).
"""

from __future__ import annotations

import bisect
import itertools
import math
import random
import statistics
from dataclasses import dataclass, replace

from tokcost.engine.step import Segment
from tokcost.serving.queueing import Moments
from tokcost.serving.replica import Replica
from tokcost.serving.simulate import simulate_replica

Points = tuple[tuple[float, float], ...]  # (weight, seconds), weights summing to 1
EDGE = 1e-9  # a quantile within this of the edge between two values' shares lies between them
GAP_POINTS = 16  # the decode gaps of a round, n of them rising linearly with the context: this many equal points
QUEUED_ROUNDS = 40  # past what a round holds, the requests a user sends in the simulated steady state
# prompts that vary: rounds of drawn prompts priced and mixed until they hold this many prompts (a round of few
# users varies as a whole: its prefill is a sum of N draws; one of many users barely does)
ROUND_PROMPTS = 256


@dataclass(frozen=True, slots=True)
class Round:
    """One lock-step round of `users` users (or a mix of two whole counts' rounds): each latency as weighted
    points over requests (ITL over gaps), the rate, and the terms --explain prints."""

    users: float
    rate_rps: float
    ttft: Points
    tpot: Points
    e2e: Points
    itl: Points
    prefill_steps: int  # k: the steps that run the round's prompts
    prefill_s: float  # sum L: their seconds
    decode_s: float  # D: the n decode steps at batch N
    wait_s: float = 0.0  # past what one round holds: each request's wait for a slot (queued)

    def points(self, metric: str) -> Points:
        return {"ttft": self.ttft, "tpot": self.tpot, "e2e": self.e2e, "itl": self.itl}[metric]

    def tail(self, metric: str, t: float) -> float:
        """P(metric > t) over requests (ITL: over gaps)."""
        return sum(w for w, x in self.points(metric) if x > t)

    def quantile(self, metric: str, q: float) -> float:
        """The q-quantile as the harnesses read it over many rounds: the value whose share of the requests spans q;
        where q falls on the edge between two values, numpy's linear rule between order statistics gives the lower
        plus (1 - q) of the step up (16 users, half of them in each of two prefill steps: p50 is the mean of the two
        TTFTs). ITL pools gaps and takes the lower value there, as the simulator's pooled gaps do."""
        total = 0.0
        ordered = sorted(self.points(metric), key=lambda p: p[1])
        for i, (w, x) in enumerate(ordered):
            total += w
            if abs(total - q) <= EDGE and i + 1 < len(ordered):
                return x if metric == "itl" else x + (1 - q) * (ordered[i + 1][1] - x)
            if total > q:
                return x
        return ordered[-1][1]

    def moments(self, metric: str) -> Moments:
        return Moments.mixture([(w, Moments(x)) for w, x in self.points(metric)])

    def mean(self, metric: str) -> float:
        return sum(w * x for w, x in self.points(metric))


def locks_whole(replica: Replica) -> bool:
    """Whether this replica's closed loop runs in whole rounds: prefill apart, fixed answers, no think time, one
    replica serving both phases, prompts and decodes, one decode step per scheduling decision (under multi-step
    scheduling a prompt that finishes mid-window waits for the window's end, which the round does not price).
    Prompts may vary: every prompt of a round is prefilled before any decode, so the answers, all as long, start
    and end in one step whatever the prompts were (whole_round prices rounds of drawn prompts)."""
    t = replica.traffic
    return (replica.prefill_apart and replica.loop.closed and t.output.kind == "fixed" and t.think_time_s == 0
            and replica.role == "both" and bool(replica.prompts) and replica.decodes
            and replica.scheduler_steps == 1)  # fmt: skip


def round_prompt(replica: Replica) -> int:
    """A round's prompt P' (computed tokens): the fixed one, or the mean of prompts that vary (their sum over the
    round's N sets its prefill steps; how they pack sets which step each request's first token ends)."""
    return max(round(sum(p.weight * p.tokens for p in replica.prompts)), 1)


def held(replica: Replica) -> float:
    """The users one round can hold: the running cap and the sequences the KV cache holds whole."""
    cap = replica.running_cap()
    return math.floor(cap) if math.isfinite(cap) else math.inf


def round_at(replica: Replica, users: float) -> Round:
    """The round of `users` users; a fractional count (users spread over replicas) mixes the rounds of the whole
    counts around it, by the requests each serves; past what one round holds, the simulator's steady state (queued)."""
    most = held(replica)
    if users > most:
        return queued(replica, int(most), users)
    low = math.floor(users + 1e-9)
    share = users - low
    if share <= 1e-9:
        return whole_round(replica, max(low, 1))
    high = whole_round(replica, low + 1)
    if low == 0:  # a part of one user: that user's round, at that part of its rate
        return replace(high, users=users, rate_rps=high.rate_rps * share)
    return _mixed(whole_round(replica, low), high, share, users)


def whole_round(replica: Replica, users: int) -> Round:
    """The round of N = `users` users (module docstring): one round of fixed prompts; prompts that vary, the rounds
    of drawn prompts pooled (each request of each round one point, each round's cycle one term of the mean)."""
    rounds = [_one_round(replica, lengths) for lengths in _round_prompts(replica, users)]
    if len(rounds) == 1:
        return rounds[0]
    share = 1 / len(rounds)

    def pooled(metric: str) -> Points:
        return tuple((share * w, x) for one in rounds for w, x in one.points(metric))

    prefill_s = statistics.fmean(one.prefill_s for one in rounds)
    decode_s = statistics.fmean(one.decode_s for one in rounds)
    rate = users / (replica.loop.offset_s + prefill_s + decode_s)  # users over the mean cycle (renewal reward)
    steps_k = round(statistics.fmean(one.prefill_steps for one in rounds))
    return Round(float(users), rate, pooled("ttft"), pooled("tpot"), pooled("e2e"), pooled("itl"), steps_k,
                 prefill_s, decode_s)  # fmt: skip


def _round_prompts(replica: Replica, users: int) -> list[list[int]]:
    """The prompts (computed tokens) of each round priced: N of P' when fixed; prompts that vary drawn from the
    replica's prompt grid (seeded: a plan is reproducible) in enough rounds to hold ROUND_PROMPTS of them, so that
    both the spread within a round (where each request's first token ends) and between rounds (the round's whole
    prefill) are priced."""
    grid = replica.prompts
    if len(grid) == 1:
        return [[grid[0].tokens] * users]
    rounds = math.ceil(ROUND_PROMPTS / users)
    # stratified: the grid's quantiles at evenly spaced shares, so the rounds together hold the law's own mean (two
    # rounds of 48 exponential prompts drawn at random held 110K and 121K tokens against 48 x 1,978), then dealt
    # into rounds in a seeded shuffle
    edges = list(itertools.accumulate(p.weight for p in grid))
    count = rounds * users
    drawn = [grid[min(bisect.bisect_left(edges, (i + 0.5) / count * edges[-1]), len(grid) - 1)].tokens
             for i in range(count)]  # fmt: skip
    random.Random(0).shuffle(drawn)
    return [drawn[i * users : (i + 1) * users] for i in range(rounds)]


def _one_round(replica: Replica, lengths: list[int]) -> Round:
    """One round of these prompts (computed tokens, in send order), step by step (module docstring)."""
    steps, users = replica.steps, len(lengths)
    p0, n = replica.traffic.cached_prefix_tokens, round(replica.decode_steps_mean)
    prefill = _prefill_steps(replica, lengths)
    ends = [math.ceil(s / replica.chunk - 1e-9) for s in itertools.accumulate(lengths)]  # j_m: its last token's step
    done = [0.0, *itertools.accumulate(prefill)]
    total = done[-1]
    # the first decode step's cached context: the prompts' KV (token 1 is computed in it), their mean (the pass is
    # linear in the contexts' sum)
    start = p0 + round(statistics.fmean(lengths))

    def step_at(i: float) -> float:  # the i-th decode step (1 .. n), its context start + i - 1
        return steps.seconds([Segment(users, start + i - 1, 1)])

    first = step_at(1)
    decode = n * steps.decode_mean(users, start, start + n - 1)  # every step's context, exactly
    c = replica.overhead_s
    w = 1 / users
    ttft = tuple((w, c + done[j]) for j in ends)
    after = [total - done[j] for j in ends]  # the prefill steps a request waits out after its first token
    tpot = tuple((w, (a + decode) / n) for a in after)
    e2e = ((1.0, c + total + decode),)
    gaps = [(w / n, a + first) for a in after]
    if n > 1:  # the other n - 1 gaps: decode steps 2 .. n, at evenly spaced contexts
        points = min(GAP_POINTS, n - 1)
        rest = (n - 1) / n / points
        gaps += [(rest, step_at(2 + (n - 2) * (i + 0.5) / points)) for i in range(points)]
    rate = users / (replica.loop.offset_s + total + decode)  # the cycle: RTT + the request's cost + the round
    return Round(float(users), rate, ttft, tpot, e2e, tuple(gaps), len(prefill), total, decode)


def queued(replica: Replica, most: int, users: float) -> Round:
    """More users than a round holds (`most`, K: the running cap or the KV cache's sequences), priced by the
    simulator's steady state (simulate.py), not a closed form. Rounds of K back to back, each user waiting its turn
    whole rounds, is what the simulator runs once the leftover users fill a round's prefill; with a few left over
    they get a prefill step of their own as a round ends, and with overlap scheduling they stagger into groups that
    join and leave a step apart. A review found the back-to-back form off by over 5% in 37 of 99 such cases (50 of 99
    with overlap), TTFT p50 916 ms against 112 at 33 users on 32 slots, and below zero with a long round trip. The
    simulation runs a benchmark's length, QUEUED_ROUNDS requests a user: in it, the stagger that overlap scheduling
    forms from one extra user takes hundreds of rounds to settle (p90 TTFT 497, 241 and 63 ms after 40, 80 and
    160 a user), which no benchmark runs and a real engine's jitter would not wait for. A fractional count mixes
    the whole counts around it; the round of K supplies the step terms --explain prints."""
    low = math.floor(users + 1e-9)
    share = users - low
    whole = _simulated(replica, most, low) if low > most else whole_round(replica, low)
    if share <= 1e-9:
        return whole
    return _mixed(whole, _simulated(replica, most, low + 1), share, users)


def _simulated(replica: Replica, most: int, users: int) -> Round:
    """The steady state of `users` users on a round of `most` slots, as the simulator runs it (QUEUED_ROUNDS rounds
    a user, the first left out as its warm-up): its requests' latencies and its gaps as weighted points."""
    one = whole_round(replica, most)
    loop = replace(replica.traffic, concurrency=users)
    sim = simulate_replica(replica, loop, requests=QUEUED_ROUNDS * users, seed=0, max_running=most)  # no draw: fixed
    gaps: list[tuple[float, float]] = []
    for run in sim.itl_runs:  # a run of equal-slope steps: at most GAP_POINTS points, each its share of the gaps
        points = min(run.steps, GAP_POINTS)
        weight = run.steps * run.sequences / points
        gaps += [(weight, run.seconds + run.slope_s * (run.steps - 1) * (i + 0.5) / points) for i in range(points)]
    total = sum(w for w, _ in gaps) or 1.0

    def spread(values: tuple[float, ...]) -> Points:
        return tuple((1 / len(values), x) for x in values)

    wait = max(statistics.fmean(sim.ttft_s) - one.mean("ttft"), 0.0)  # its turn, over a lone round's first token
    return replace(one, users=float(users), rate_rps=sim.rate_rps, ttft=spread(sim.ttft_s), tpot=spread(sim.tpot_s),
                   e2e=spread(sim.e2e_s), itl=tuple((w / total, x) for w, x in gaps), wait_s=wait)  # fmt: skip


def _prefill_steps(replica: Replica, lengths: list[int]) -> list[float]:
    """Each prefill step's seconds: the round's prompts packed end to end, C tokens a step (the last one short), each
    piece priced at its offset in its prompt (the engine's pass over the step's segments; equal steps priced
    once)."""
    chunk, p0 = replica.chunk, replica.traffic.cached_prefix_tokens
    starts = [0, *itertools.accumulate(lengths)]
    priced: dict[tuple[tuple[int, int], ...], float] = {}
    out, position, end, i = [], 0, starts[-1], 0
    while position < end:
        stop = min(position + chunk, end)
        pieces, at = [], position
        while at < stop:
            while at >= starts[i + 1]:  # the prompt this token is in
                i += 1
            offset = at - starts[i]
            take = min(lengths[i] - offset, stop - at)
            pieces.append((offset, take))
            at += take
        key = tuple(pieces)
        if key not in priced:
            priced[key] = replica.steps.seconds([Segment(1, p0 + offset, take) for offset, take in pieces])
        out.append(priced[key])
        position = stop
    return out


def _mixed(low: Round, high: Round, share: float, users: float) -> Round:
    """Replicas holding the whole counts around `users`, in the shares that average it: latencies weighted by the
    requests (ITL: the gaps, n per request) each serves."""
    rate = (1 - share) * low.rate_rps + share * high.rate_rps
    a = (1 - share) * low.rate_rps / rate

    def mix(x: Points, y: Points) -> Points:
        return tuple((a * w, v) for w, v in x) + tuple(((1 - a) * w, v) for w, v in y)

    return Round(users, rate, mix(low.ttft, high.ttft), mix(low.tpot, high.tpot), mix(low.e2e, high.e2e),
                 mix(low.itl, high.itl), high.prefill_steps, (1 - a) * high.prefill_s + a * low.prefill_s,
                 (1 - a) * high.decode_s + a * low.decode_s)  # fmt: skip
