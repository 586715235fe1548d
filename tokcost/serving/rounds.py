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
from dataclasses import dataclass, replace

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
    """Whether this replica's closed loop runs in whole rounds: prefill apart, fixed lengths, no think time, one
    replica serving both phases, prompts and decodes, one decode step per scheduling decision (under multi-step
    scheduling a prompt that finishes mid-window waits for the window's end, which the round does not price)."""
    t = replica.traffic
    return (replica.prefill_apart and replica.loop.lockable and t.think_time_s == 0 and replica.role == "both"
            and bool(replica.prompts) and replica.decodes and replica.scheduler_steps == 1)  # fmt: skip


def held(replica: Replica) -> float:
    """The users one round can hold: the running cap and the sequences the KV cache holds whole."""
    cap = replica.running_cap()
    return math.floor(cap) if math.isfinite(cap) else math.inf


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
        return replace(high, users=users, rate_rps=high.rate_rps * share)
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
    start = p0 + prompt  # the first decode step's cached context: the prompt's KV (token 1 is computed in it)

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
    rate = users / (t.client_rtt_s + c + total + decode)
    return Round(float(users), rate, ttft, tpot, e2e, tuple(gaps), len(prefill), total, decode)


def queued(replica: Replica, most: int, users: float) -> Round:
    """More users than a round holds (`most`, K: the running cap or the KV cache's sequences): rounds of K run back to
    back, the users taking them in turn first come first served, so the rate is K / R (R = sum L + D, the round's
    length). Of N = q K + s users, a round's first s places go to users who waited q rounds since their last token
    and the rest to users who waited q - 1: place p in one round comes back s places later, past the round's end
    for the last s. A user's next request lands RTT + c after its round's end, into the round then running (or one
    q - 1 rounds later), whose steps started without it: its TTFT is (the rounds it waited) R + the prefill steps up
    to its own place - RTT, the mean wait Little's, N / rate - (RTT + E2E of a round alone). TPOT is the round's
    (the simulator gives the same figures). A round whose waiting prompts fill less than its first step is packed
    full here, where the engine runs that step with them alone."""
    one = whole_round(replica, most)
    length = one.prefill_s + one.decode_s
    rate = most / length
    offset = replica.traffic.client_rtt_s + replica.overhead_s  # a request lands this long after the last token
    q = math.floor(users / most + 1e-12)
    s = users - q * most
    # the wait of place p (0-based): q rounds for the first s places (a fractional s: its last place in part), q - 1
    # for the rest, less the time from the round's end to the request's landing
    waits = [(q - 1 + min(max(s - p, 0.0), 1.0)) * length - offset for p in range(most)]
    wait = sum(waits) / most

    def later(points: Points) -> Points:
        return tuple((w, x + extra) for (w, x), extra in zip(points, waits, strict=True))

    e2e = tuple((1 / most, one.e2e[0][1] + w) for w in waits)
    return replace(one, users=users, rate_rps=rate, ttft=later(one.ttft), e2e=e2e, wait_s=wait)


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
