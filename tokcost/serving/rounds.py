"""A closed loop's lock-step round on an engine that runs prefill apart, priced step by step.

With fixed lengths and no think time, N benchmark users send together. An engine that runs prefill in steps of
its own and schedules waiting prompts before the running decodes (SGLang without --enable-mixed-chunk, vLLM before
V1 without chunked prefill: the scheduler's `prefill_apart`) runs every waiting prompt before any decode. So the N
prompts go through in k = ceil(N P' / C) prefill steps, packed end to end up to the chunk C, and nobody decodes
until the last of them is done. All N then decode side by side, finish in the same step and come back together
one round trip later: the round repeats whole. Nothing breaks it, as no decode runs between two users' prefills.
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

import math
from dataclasses import dataclass

from tokcost.engine.step import Segment
from tokcost.serving.queueing import Moments
from tokcost.serving.replica import Replica

Points = tuple[tuple[float, float], ...]  # (weight, seconds), weights summing to 1
EDGE = 1e-9  # a quantile within this of the edge between two values' shares lies between them
GAP_POINTS = 16  # the decode gaps of a round, n of them rising linearly with the context: this many equal points


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
        """The q-quantile as a harness reads it over many rounds (linear between order statistics, numpy's): the
        value whose share of the requests spans q, or halfway to the next value where q falls on the edge between
        two (16 users, half of them in each of two prefill steps: p50 is the mean of the two TTFTs)."""
        total = 0.0
        ordered = sorted(self.points(metric), key=lambda p: p[1])
        for i, (w, x) in enumerate(ordered):
            total += w
            if abs(total - q) <= EDGE and i + 1 < len(ordered):
                return (x + ordered[i + 1][1]) / 2
            if total > q:
                return x
        return ordered[-1][1]

    def moments(self, metric: str) -> Moments:
        return Moments.mixture([(w, Moments(x)) for w, x in self.points(metric)])

    def mean(self, metric: str) -> float:
        return sum(w * x for w, x in self.points(metric))


def locks_whole(replica: Replica) -> bool:
    """Whether this replica's closed loop runs in whole rounds: prefill apart, fixed lengths, no think time, one
    replica serving both phases, prompts and decodes."""
    t = replica.traffic
    return (replica.prefill_apart and replica.loop.lockable and t.think_time_s == 0 and replica.role == "both"
            and bool(replica.prompts) and replica.decodes)  # fmt: skip


def held(replica: Replica) -> float:
    """The users one round can hold: the running cap and the sequences the KV cache holds whole."""
    return math.floor(replica.running_cap()) if math.isfinite(replica.running_cap()) else math.inf


def round_at(replica: Replica, users: float) -> Round:
    """The round of `users` users; a fractional count (users spread over replicas) mixes the rounds of the whole
    counts around it, by the requests each serves; past what one round holds, rounds of that many in turn."""
    most = held(replica)
    if users > most:
        return queued(replica, int(most), users)
    low = math.floor(users + 1e-9)
    share = users - low
    if share <= 1e-9:
        return whole_round(replica, max(low, 1))
    high = whole_round(replica, low + 1)
    if low == 0:  # a part of one user: that user's round, at that part of its rate
        return _scaled(high, share, users)
    return _mixed(whole_round(replica, low), high, share, users)


def whole_round(replica: Replica, users: int) -> Round:
    """The round of N = `users` users (module docstring)."""
    steps, t = replica.steps, replica.traffic
    prompt, p0 = replica.prompts[0].tokens, t.cached_prefix_tokens
    n = round(replica.decode_steps_mean)
    prefill = _prefill_steps(replica, users, prompt)
    ends = [math.ceil(m * prompt / replica.chunk - 1e-9) for m in range(1, users + 1)]  # j_m, 1-based
    done = [0.0]
    for seconds in prefill:
        done.append(done[-1] + seconds)
    total = done[-1]
    first = steps.seconds([Segment(users, p0 + prompt, 1)])  # the first decode step: the prompt's KV and token 1
    last = steps.seconds([Segment(users, p0 + prompt + n - 1, 1)])
    decode = n * (first + last) / 2  # linear in the context: the mean step prices the sum
    c = replica.overhead_s
    w = 1 / users
    ttft = tuple((w, c + done[j]) for j in ends)
    after = [total - done[j] for j in ends]  # the prefill steps a request waits out after its first token
    tpot = tuple((w, (a + decode) / n) for a in after)
    e2e = ((1.0, c + total + decode),)
    gaps = [(w / n, a + first) for a in after]
    if n > 1:  # the other n - 1 gaps: decode steps from the second to the last, rising linearly
        points = min(GAP_POINTS, n - 1)
        rest = (n - 1) / n / points
        step = (last - first) / (n - 1)
        gaps += [(rest, first + step * (1 + (n - 2) * (i + 0.5) / points)) for i in range(points)]
    rate = users / (t.client_rtt_s + c + total + decode)
    return Round(float(users), rate, ttft, tpot, e2e, tuple(gaps), len(prefill), total, decode)


def queued(replica: Replica, most: int, users: float) -> Round:
    """More users than a round holds (`most`: the running cap or the KV cache's sequences): rounds of `most` users
    run back to back, as a full group waits whenever one ends, and the rest wait for a slot. The rate is most / (sum L
    + D), the TPOT the round's, and each request waits its turn: W = users / rate - (r + E2E of the round), the part
    of a user's cycle the round and the round trip do not take (Little), on TTFT and E2E alone."""
    one = whole_round(replica, most)
    rate = most / (one.prefill_s + one.decode_s)
    wait = max(users / rate - replica.traffic.client_rtt_s - one.mean("e2e"), 0.0)

    def later(points: Points) -> Points:
        return tuple((w, x + wait) for w, x in points)

    return Round(users, rate, later(one.ttft), one.tpot, later(one.e2e), one.itl, one.prefill_steps, one.prefill_s,
                 one.decode_s, wait)  # fmt: skip


def _prefill_steps(replica: Replica, users: int, prompt: int) -> list[float]:
    """Each prefill step's seconds: N prompts of P' tokens packed end to end, C tokens a step (the last one short),
    each piece priced at its offset in its prompt (the engine's pass over the step's segments; equal steps priced
    once)."""
    chunk, p0 = replica.chunk, replica.traffic.cached_prefix_tokens
    priced: dict[tuple[tuple[int, int], ...], float] = {}
    out, position, end = [], 0, users * prompt
    while position < end:
        stop = min(position + chunk, end)
        pieces, at = [], position
        while at < stop:
            offset = at % prompt
            take = min(prompt - offset, stop - at)
            pieces.append((offset, take))
            at += take
        key = tuple(pieces)
        if key not in priced:
            priced[key] = replica.steps.seconds([Segment(1, p0 + offset, take) for offset, take in pieces])
        out.append(priced[key])
        position = stop
    return out


def _scaled(one: Round, share: float, users: float) -> Round:
    """A part of one user's round: its latencies, a share of its rate."""
    return Round(users, one.rate_rps * share, one.ttft, one.tpot, one.e2e, one.itl, one.prefill_steps,
                 one.prefill_s, one.decode_s)  # fmt: skip


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
