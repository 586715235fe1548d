"""A discrete-event simulation of the same scheduler the closed form describes, step by step.

Arrivals (Poisson at the rate, a trace's times, or N closed-loop users) wait for a running slot (the engine's
cap on running sequences, vLLM's max_num_seqs) and then join a FCFS prefill queue. At each step boundary the
server runs every decoding sequence's next token plus up to `chunk` prompt tokens from the head of the queue
(packing several prompts into one step when they fit; a request starts its prefill only while a slot is
free), priced by the engine's compiled pass with the real segments: Segment(b, mean decode context, 1) for the
decode batch (exact, the pass is linear in the contexts' sum) and Segment(1, tokens already done, chunk part)
per prompt. A prompt's first token comes out at the end of the step that ran its last chunk; it then decodes
one token per step and frees its slot with its last token. With no decode and an empty queue the server idles
until the next arrival. Under multi-step scheduling (k > 1) new prompts start only at the first step of a
window of k steps while sequences decode. Under overlap scheduling (`lookahead`) each step takes the requests that
had arrived when the step before it started (the scheduler chose it then, while that step ran); an idle server
takes an arrival at once. With prefill apart (`prefill_apart`: vLLM before V1, SGLang without mixed chunks) a step
that runs prompt tokens runs nothing else: the decoding sequences get no token from it and wait it out, so the gap
between two of their tokens holds that step and the decode step after it.

Closed-loop users behave as benchmark clients do: with no think time all N send at t = 0, and each sends its
next request one client round trip (traffic.client_rtt_s, plus the engine's per-request cost) after its last
token arrives, so it lands inside the step then running and waits for that step to end; with a think time Z,
each next request comes after an exponential pause of mean Z. A finite benchmark's run (`warmup` False) sends
each first request after such a pause too, as its harness does; a run for the steady state starts each user at a
uniform moment of one cycle (cycle_estimate), the phase a user has at a steady state: started within a pause of
one another, users who return on fixed answers keep the start's convoy for about (cycle / Z)^2 rounds (the prefill
queue re-spaces each round back to back), far past the rounds a warm-up leaves out (Qwen3-30B-A3B on one H100, 64
users, 300-token answers, Z = 0.2 s: p90 TTFT 222 ms over 4,000 requests, 131 over 40,000 and 129 from spread
starts over 4,000). Fixed answers with a short think time also keep convoys at the steady state (README). `rtt_spread_s`
adds an exponential spread to each round trip (a real client's jitter; whether it breaks lock-step groups depends
on the spread against the steps: loop.py). TTFT counts
from the request's send (admission wait, prefill queue, own chunks) plus the per-request cost. The first and
last WARMUP_FRACTION of requests (by arrival; in a closed loop at least each user's first two) are left out of
the statistics: they see an emptier server, or the start's burst; a finite benchmark's run (`warmup` False) counts
every request, as its harness does.
Seeded, so a run is reproducible.
"""

from __future__ import annotations

import heapq
import math
import random
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, NamedTuple

from tokcost.engine.step import Segment
from tokcost.serving.steps import Steps
from tokcost.serving.traffic import Traffic

if TYPE_CHECKING:
    from tokcost.serving.replica import Replica

WARMUP_FRACTION = 0.1
# A run has settled when the requests in the system over the last quarter of its measured stretch are within
# SETTLE_DRIFT of those over its first quarter. Started empty, an open loop fills towards its steady state over about
# a request's life / (1 - the loop's gain): near saturation the batch sets its own step time (a larger batch, a longer
# step, a longer life), so Llama-3.1-70B on 8 x H200 at 200 / 800 tokens and 0.9 of saturation still fills after
# 4,000 requests (drift +72%, its TPOT 15-17% under the steady state's) and settles within a few % by 30,000 (+8%).
# Runs still filling measured +32% to +72%; settled runs near saturation swing by up to about 20% (a queue's slow
# swings), which a longer run averages out
SETTLE_DRIFT = 0.25
# passes of the step loop per run at most (a prefill step, or a stretch of decode-only steps up to the next event):
# a run that would take longer stops with what it has
SIMULATED_PASS_BOUND = 20_000_000


@dataclass
class _Request:
    index: int
    arrival: float
    prompt: int  # computed prompt tokens
    output: int
    done: int = 0
    first_token: float = 0.0
    end: float = 0.0


class GapRun(NamedTuple):
    """Gaps between tokens from a stretch of steps: `steps` values seconds, seconds + slope_s, ... (a decode-only
    stretch grows by one context token a step: the engine's decode line), each seen by `sequences` decoders."""

    seconds: float
    slope_s: float
    steps: int
    sequences: int

    @property
    def last_s(self) -> float:
        return self.seconds + self.slope_s * (self.steps - 1)

    def at_most(self, value: float) -> int:
        """How many of the run's steps are at most `value` (slope_s >= 0)."""
        if value < self.seconds:
            return 0
        if self.slope_s <= 0 or value >= self.last_s:
            return self.steps
        return min(self.steps, math.floor((value - self.seconds) / self.slope_s) + 1)


@dataclass(frozen=True, slots=True)
class SimResult:
    """Per-request latencies (seconds) of the measured requests, and what the server did."""

    ttft_s: tuple[float, ...]
    tpot_s: tuple[float, ...]
    e2e_s: tuple[float, ...]
    # the gaps between tokens over the measured stretch, a run per stretch of steps (slopes >= 0): a decode-only
    # stretch of a million steps at batch 1 is one run, not a million pairs
    itl_runs: tuple[GapRun, ...]
    duration_s: float
    mean_batch: float  # time-average decode batch while stepping or idle
    prefill_time_share: float  # share of time in steps that carried prefill
    requests: int
    # requests in the system over the measured stretch's last quarter / over its first - 1 (0 where nothing was
    # measured): a run still filling, or draining, is not the steady state its statistics stand for
    drift: float = 0.0

    @property
    def settled(self) -> bool:
        """Whether the measured stretch held a steady load (SETTLE_DRIFT): a run that has not settled needs more
        requests before its percentiles say what the steady state does."""
        return abs(self.drift) <= SETTLE_DRIFT

    def percentile(self, metric: str, q: float) -> float | None:
        """The q-quantile of ttft, tpot, e2e (linear between order statistics) or itl (gaps between tokens,
        pooled over every decoding sequence: a step of b decodes is b gaps); None if empty."""
        if metric == "itl":
            return _run_quantile(self.itl_runs, q)
        values = sorted(getattr(self, f"{metric}_s"))
        if not values:
            return None
        pos = q * (len(values) - 1)
        lo = math.floor(pos)
        hi = min(lo + 1, len(values) - 1)
        return values[lo] + (values[hi] - values[lo]) * (pos - lo)

    @property
    def itl_mean_s(self) -> float | None:
        """The mean gap between tokens over every decoding sequence's gaps (None: no decode)."""
        gaps = sum(r.steps * r.sequences for r in self.itl_runs)
        seconds = sum(r.sequences * r.steps * (r.seconds + r.slope_s * (r.steps - 1) / 2) for r in self.itl_runs)
        return seconds / gaps if gaps else None

    @property
    def rate_rps(self) -> float:
        """Completed requests per second over the run."""
        return self.requests / self.duration_s if self.duration_s else 0.0


@dataclass
class _Server:
    """The scheduler's state between steps."""

    queue: deque[_Request] = field(default_factory=deque)  # admitted or waiting, FCFS; started ones first
    decoding: list[tuple[int, int]] = field(default_factory=list)  # (last step index, request index)
    context_base: float = 0.0  # sum over decoders of (prompt + 1 - first step index)
    started: int = 0  # requests in the queue whose prefill has begun (they hold a slot)
    step: int = 0


def simulate(
    steps: Steps, traffic: Traffic, chunk: int, *, requests: int = 4000, seed: int = 0, rate_rps: float | None = None,
    max_running: float | None = None, scheduler_steps: int = 1, rtt_spread_s: float = 0.0, lookahead: bool = False,
    prefill_apart: bool = False, warmup: bool = True, client_side: bool = True,
) -> SimResult:  # fmt: skip
    """Run `requests` requests of `traffic` (at `rate_rps` if given) through one replica; `rtt_spread_s`: the mean
    of an exponential added to each closed-loop client's round trip (0: the benchmark's fixed round trip);
    `lookahead`: the scheduler decides each step while the one before it runs (overlap scheduling);
    `prefill_apart`: prompt tokens run in steps of their own, which the decoding sequences wait out; `warmup`
    False: every request counts (a finite benchmark's statistics), else the first and last share are left out;
    `client_side`: TTFT and E2E as a client times them, with the engine's per-request cost (a closed-loop client's
    cycle holds it either way)."""
    if max_running is not None and max_running < 1:  # nothing could ever start: no steady state to run
        raise ValueError(f"simulate needs a running slot: the running cap is {max_running:g} (the KV cache holds none)")
    run = _Run(steps, traffic, chunk, requests, random.Random(seed), rate_rps, max_running, scheduler_steps,
               rtt_spread_s=rtt_spread_s, lookahead=lookahead, prefill_apart=prefill_apart,
               client_side=client_side)  # fmt: skip
    return run.run(warmup)


def simulate_replica(
    replica: Replica, traffic: Traffic, *, requests: int, seed: int, rate_rps: float | None = None,
    max_running: float | None = None, warmup: bool = True,
) -> SimResult:  # fmt: skip
    """simulate() with the replica's own steps, chunk and scheduler (multi-step window, lookahead, prefill apart);
    `max_running` defaults to its running cap."""
    cap = replica.running_cap() if max_running is None else max_running
    return simulate(replica.steps, traffic, replica.chunk, requests=requests, seed=seed, rate_rps=rate_rps,
                    max_running=cap, scheduler_steps=replica.scheduler_steps, lookahead=replica.lookahead,
                    prefill_apart=replica.prefill_apart, warmup=warmup, client_side=replica.client_side)  # fmt: skip


def cycle_estimate(steps: Steps, traffic: Traffic, chunk: int, cap: float, overhead_s: float) -> float:
    """A closed-loop user's cycle, roughly, from the steps alone: its think time, round trip and per-request cost,
    its mean prompt's chunks run alone, and its mean answer's decode steps beside all the users who can run (the
    users, at most the running cap and the steps' batch range). Only the start's spread reads it: a user's phase
    at a steady state is uniform over its cycle, and a spread a few tens of % off still leaves no convoy."""
    users = float(traffic.concurrency or 1)
    batch = max(int(min(users, cap, steps.batch_limit)), 1)
    decode_s = steps.decode_line(batch, steps.decode_context)[0]
    prompt = max(traffic.prompt.mean, 1.0)
    prefill_s = math.ceil(prompt / chunk) * steps.seconds([Segment(1, 0, int(min(prompt, chunk)))])
    return traffic.think_time_s + traffic.client_rtt_s + overhead_s + prefill_s + traffic.output.mean * decode_s


class _Run:
    """One simulation: arrivals, the step loop, and the finished requests."""

    def __init__(self, steps: Steps, traffic: Traffic, chunk: int, requests: int, rng: random.Random,
                 rate_rps: float | None, max_running: float | None, scheduler_steps: int, *,
                 rtt_spread_s: float = 0.0, lookahead: bool = False, prefill_apart: bool = False,
                 client_side: bool = True) -> None:  # fmt: skip
        self.steps, self.traffic, self.chunk, self.requests, self.rng = steps, traffic, chunk, requests, rng
        self.rtt_spread, self.lookahead, self.apart = rtt_spread_s, lookahead, prefill_apart
        # prefill steps apart since the decoders' last token: (seconds, decoders)
        self.stalls: list[tuple[float, int]] = []
        self.cap = max_running if max_running is not None and math.isfinite(max_running) else math.inf
        self.window = max(scheduler_steps, 1)
        self.overhead = steps.request_overhead_s  # in every closed-loop client's cycle
        self.timed_overhead = self.overhead if client_side else 0.0  # on the TTFT and E2E reported
        self.rate = rate_rps if rate_rps is not None else traffic.rate_rps
        self.arrivals: list[tuple[float, int]] = []  # (time, request index) heap
        self.made = 0
        self.reqs: dict[int, _Request] = {}
        self.finished: list[_Request] = []
        # gaps as runs: (end of the run's first step, its first gap, slope, steps, sequences decoding in them)
        self.itl: list[tuple[float, float, float, int, int]] = []
        self.line: tuple[int, int, float, float, int] | None = None  # (batch, first step, seconds, per step, last)

    def new_request(self, time: float) -> None:
        if self.made < self.requests:
            heapq.heappush(self.arrivals, (time, self.made))
            self.made += 1

    def start(self, steady: bool) -> None:
        t = self.traffic
        if t.concurrency and t.think_time_s > 0 and steady:  # each user at a uniform phase of its cycle
            cycle = cycle_estimate(self.steps, t, self.chunk, self.cap, self.overhead)
            for _ in range(t.concurrency):
                self.new_request(self.rng.uniform(0.0, cycle))
        elif t.concurrency:  # benchmark clients: all at once with no think time, else after a first pause
            for _ in range(t.concurrency):
                self.new_request(self.rng.expovariate(1 / t.think_time_s) if t.think_time_s > 0 else 0.0)
        elif t.arrivals_s:
            for time in t.arrivals_s[: self.requests]:
                self.new_request(time)
        else:
            if not self.rate or self.rate <= 0:
                raise ValueError("simulate needs a positive rate for open-loop traffic")
            self.new_request(self.rng.expovariate(self.rate))

    def finish(self, r: _Request, time: float) -> None:
        r.end = time
        self.finished.append(r)
        t = self.traffic
        if t.concurrency:  # the client reads its last token, then sends the next request one round trip later
            think = self.rng.expovariate(1 / t.think_time_s) if t.think_time_s > 0 else 0.0
            spread = self.rng.expovariate(1 / self.rtt_spread) if self.rtt_spread > 0 else 0.0
            self.new_request(time + t.client_rtt_s + spread + self.overhead + think)

    def run(self, warmup: bool = True) -> SimResult:
        self.start(steady=warmup)
        s = _Server()
        t, batch_time, prefill_time = 0.0, 0.0, 0.0
        decided = 0.0  # when the step about to start was scheduled: its start, or the last step's under lookahead
        passes = 0
        while (self.arrivals or s.queue or s.decoding) and passes < SIMULATED_PASS_BOUND:
            passes += 1
            self.admit(s, decided if self.lookahead else t)
            if not s.queue and not s.decoding:  # idle: the next arrival (or one that came during the last step) at once
                t = decided = max(t, self.arrivals[0][0])
                continue
            seconds, prefilled, completed, last_s = self.one_step(s, t)
            t += seconds
            decided = t - last_s  # overlap scheduling picks the next step's requests as the last one starts
            batch_time += len(s.decoding) * seconds
            prefill_time += seconds if prefilled else 0.0
            self.end_step(s, t, completed, decoded=not (prefilled and self.apart))
        return self.result(t, batch_time, prefill_time, warmup)

    def admit(self, s: _Server, t: float) -> None:
        """Requests that have arrived by the step boundary `t` join the queue."""
        while self.arrivals and self.arrivals[0][0] <= t:
            time, i = heapq.heappop(self.arrivals)
            r = _Request(i, time, *self.lengths(i))
            self.reqs[i] = r
            s.queue.append(r)
            if not self.traffic.concurrency and not self.traffic.arrivals_s:
                self.new_request(time + self.rng.expovariate(self.rate))  # type: ignore[arg-type]

    def lengths(self, i: int) -> tuple[int, int]:
        """Request i's (computed prompt, output): a trace's own pair (the i-th in arrival order where it gives
        times, else one drawn whole), or one draw from each length's law."""
        t = self.traffic
        if t.pairs:
            return t.pairs[i % len(t.pairs)] if t.arrivals_s else self.rng.choice(t.pairs)
        return t.prompt.sample(self.rng), t.output.sample(self.rng)

    def one_step(self, s: _Server, t: float) -> tuple[float, bool, list[_Request], float]:
        """The next step, or a stretch of decode-only steps: (seconds, whether it carried prefill, prompts done,
        the last step's seconds)."""
        b = len(s.decoding)
        p0 = self.traffic.cached_prefix_tokens
        segments = [Segment(b, (s.context_base + b * s.step) / b, 1)] if b else []
        budget, completed = self.chunk, []
        may_start = not b or s.step % self.window == 0  # multi-step: new prompts only at a window's first step
        for r in s.queue:
            if budget == 0:
                break
            if r.done == 0:
                if not may_start or b + s.started >= self.cap:
                    break  # FCFS: nobody behind a request that cannot start overtakes it
                s.started += 1
            take = min(r.prompt - r.done, budget)
            segments.append(Segment(1, p0 + r.done, take))
            r.done += take
            budget -= take
            if r.done == r.prompt:
                completed.append(r)
        if budget < self.chunk:
            if self.apart:  # the prompts' step runs alone: the decoders get no token from it and wait it out
                seconds = self.steps.seconds(segments[1:] if b else segments)
                if b:
                    self.stalls.append((seconds, b))
                return seconds, True, completed, seconds
            seconds = self.steps.seconds(segments)
            if b:
                self.gap(t + seconds, seconds, b)
            return seconds, True, completed, seconds
        stretch, last_s = self.decode_stretch(s, t, b, segments[0].cached_tokens)
        return stretch, False, completed, last_s

    def decode_stretch(self, s: _Server, t: float, b: int, context: float) -> tuple[float, float]:
        """Every decode-only step up to the next event (a finish, an arrival, the line's end), priced at once:
        (their seconds, the last one's)."""
        if self.line is None or self.line[0] != b or s.step > self.line[4]:
            self.line = _decode_line(self.steps, b, context, s.step, s.decoding[0][0])
        line = self.line
        first, slope = line[2] + line[3] * (s.step - line[1]), line[3]
        jump = min(s.decoding[0][0], line[4]) - s.step + 1
        if self.arrivals:
            jump = min(jump, _steps_until(self.arrivals[0][0] - t, first, slope))
        if self.window > 1:  # a waiting prompt may start at the next window's first step
            jump = min(jump, self.window - s.step % self.window) if s.queue else jump
        # every decoding sequence sees each of these steps as a gap between its tokens: the first may also hold a
        # prefill step apart that it waited out, the rest are one run
        self.gap(t + first, first, b)
        if jump > 1:
            self.itl.append((t + 2 * first + slope, first + slope, slope, jump - 1, b))
        s.step += jump - 1
        return jump * first + slope * jump * (jump - 1) / 2, first + slope * (jump - 1)

    def gap(self, end: float, seconds: float, b: int) -> None:
        """A token for each of the b decoders at `end`: a decoder's gap holds the prefill steps apart that ran since
        its last token, so one whose first token came out of one of those steps waits out only the steps after it
        (the decoders only grow while prefill runs apart: each step's count says who had joined by then)."""
        joined, rest = 0, sum(s for s, _ in self.stalls)
        for step_s, present in self.stalls:
            if present > joined:
                self.itl.append((end, seconds + rest, 0.0, 1, min(present, b) - joined))
                joined = min(present, b)
            rest -= step_s
        if b > joined:
            self.itl.append((end, seconds, 0.0, 1, b - joined))
        self.stalls = []

    def end_step(self, s: _Server, t: float, completed: list[_Request], *, decoded: bool = True) -> None:
        """Tokens out at time t: decoders that finish leave, prompts done emit their first token. A prefill step
        apart (`decoded` False) gives the decoders nothing: step indices count decode steps, and a prompt done in
        it decodes from the next one, this index."""
        p0 = self.traffic.cached_prefix_tokens
        if not decoded:
            for r in completed:
                s.queue.popleft()
                s.started -= 1
                r.first_token = t
                if r.output > 1:  # decodes on steps step .. step+output-2
                    heapq.heappush(s.decoding, (s.step + r.output - 2, r.index))
                    s.context_base += p0 + r.prompt + 1 - s.step
                else:
                    self.finish(r, t)
            return
        while s.decoding and s.decoding[0][0] == s.step:
            _, i = heapq.heappop(s.decoding)
            r = self.reqs[i]
            s.context_base -= p0 + r.prompt + 1 - (s.step - r.output + 2)
            self.finish(r, t)
        for r in completed:
            s.queue.popleft()
            s.started -= 1
            r.first_token = t
            if r.output > 1:  # decodes on steps step+1 .. step+output-1
                heapq.heappush(s.decoding, (s.step + r.output - 1, r.index))
                s.context_base += p0 + r.prompt + 1 - (s.step + 1)
            else:
                self.finish(r, t)
        s.step += 1

    def result(self, t: float, batch_time: float, prefill_time: float, warmup: bool) -> SimResult:
        n = len(self.finished)
        rounds = 2 * (self.traffic.concurrency or 0)  # closed loop: the start's burst settles within two rounds
        cut = min(max(int(WARMUP_FRACTION * n), rounds), n // 3) if warmup else 0
        kept = sorted(self.finished, key=lambda r: r.index)[cut : len(self.finished) - cut]
        overhead = self.timed_overhead
        start, end = (min(r.arrival for r in kept), max(r.end for r in kept)) if kept else (0.0, 0.0)
        return SimResult(
            ttft_s=tuple(r.first_token - r.arrival + overhead for r in kept),
            tpot_s=tuple((r.end - r.first_token) / (r.output - 1) for r in kept if r.output > 1),
            e2e_s=tuple(r.end - r.arrival + overhead for r in kept),
            itl_runs=tuple(_kept(self.itl, start, end)),
            duration_s=t,
            mean_batch=batch_time / t if t else 0.0,
            prefill_time_share=prefill_time / t if t else 0.0,
            requests=len(self.finished),
            drift=_drift(self.finished, start, max(r.arrival for r in kept)) if kept else 0.0,
        )


def _in_system(requests: list[_Request], start: float, end: float) -> float:
    """Time-average number of requests between arrival and last token over [start, end] (Little's L)."""
    return sum(max(min(r.end, end) - max(r.arrival, start), 0.0) for r in requests) / (end - start)


def _drift(requests: list[_Request], start: float, end: float) -> float:
    """Requests in the system over the last quarter of [start, end] / over its first - 1."""
    quarter = (end - start) / 4
    if quarter <= 0:
        return 0.0
    first = _in_system(requests, start, start + quarter)
    return _in_system(requests, end - quarter, end) / first - 1 if first > 0 else 0.0


def _ended_by(time: float, first_end: float, seconds: float, slope: float, steps: int) -> int:
    """How many steps of a run (the first ending at first_end, then steps of seconds + slope, + 2 slope, ...) have
    ended by `time` (a relative 1e-12 of rounding counts as ended: the run's ends and the requests' times are summed
    in different orders)."""
    gap = time - first_end + 1e-12 * abs(time)
    if gap < 0:
        return 0
    if abs(slope) < 1e-15 * seconds:
        return min(steps, math.floor(gap / seconds) + 1)
    # slope/2 k^2 + (seconds + slope/2) k <= gap: step k ends first_end + k seconds + slope k (k + 1) / 2
    a, b = slope / 2, seconds + slope / 2
    discriminant = b * b + 4 * a * gap  # under 0 only for a falling run whose steps all ended by `time`
    return steps if discriminant < 0 else min(steps, math.floor((-b + math.sqrt(discriminant)) / (2 * a)) + 1)


def _kept(runs: list[tuple[float, float, float, int, int]], start: float, end: float) -> Iterator[GapRun]:
    """The runs' steps that end in (start, end], with slopes >= 0 (a falling run is the same gaps read backwards)."""
    for first_end, seconds, slope, steps, sequences in runs:
        lo, hi = _ended_by(start, first_end, seconds, slope, steps), _ended_by(end, first_end, seconds, slope, steps)
        if hi > lo:
            run = GapRun(seconds + slope * lo, slope, hi - lo, sequences)
            yield run if slope >= 0 else GapRun(run.last_s, -slope, run.steps, sequences)


EXPANDED_GAPS = 4096  # steps between the bounds at which _run_quantile reads the values one by one


def _run_quantile(runs: tuple[GapRun, ...], q: float) -> float | None:
    """The q-quantile of the runs' gaps, each weighted by its sequences: the smallest gap at or under which a share
    q of the weight lies (None if empty). Bisects on the gap, keeping only the runs that straddle the bounds, until
    few steps lie between them, then reads those one by one."""
    total = sum(r.steps * r.sequences for r in runs)
    if not total:
        return None
    target = q * total
    lo, hi = min(r.seconds for r in runs), max(r.last_s for r in runs)
    if target <= sum(r.sequences * r.at_most(lo) for r in runs):
        return lo
    below, live = 0, list(runs)  # weight at or under lo from runs wholly there; runs that reach into (lo, hi]
    while sum(r.at_most(hi) - r.at_most(lo) for r in live) > EXPANDED_GAPS and hi - lo > 1e-12 * hi:
        mid = (lo + hi) / 2
        if below + sum(r.sequences * r.at_most(mid) for r in live) >= target:
            hi = mid
        else:
            lo = mid
        below += sum(r.steps * r.sequences for r in live if r.last_s <= lo)
        live = [r for r in live if r.last_s > lo and r.seconds <= hi]
    seen = below + sum(r.sequences * r.at_most(lo) for r in live)
    between = [(r.seconds, r.steps * r.sequences) for r in live if r.slope_s <= 0 and lo < r.seconds <= hi]
    between += [(r.seconds + r.slope_s * k, r.sequences) for r in live if r.slope_s > 0
                for k in range(r.at_most(lo), r.at_most(hi))]  # fmt: skip
    for value, sequences in sorted(between):
        seen += sequences
        if seen >= target:
            return value
    return hi


def _decode_line(steps: Steps, batch: int, context: float, step: int, last: int) -> tuple[int, int, float, float, int]:
    """Decode-only step time from `step` on as a line in the step index (contexts grow by 1 a step), up to `last`
    or the last step before a kernel changes bound, a window fills or the pipeline's pass changes its leading stage
    (the engine's decode lines: exact in between)."""
    seconds, slope, until = steps.decode_line(batch, context)
    ahead = last - step if until - context > last - step else max(math.ceil(until - context) - 1, 0)
    return (batch, step, seconds, slope, step + ahead)


def _steps_until(gap: float, first: float, slope: float) -> int:
    """Fewest steps (at least 1) of durations first, first + slope, ... that together last at least `gap`."""
    if gap <= first:
        return 1
    if abs(slope) < 1e-15 * first:
        return math.ceil(gap / first)
    # slope/2 j^2 + (first - slope/2) j - gap = 0
    a, b = slope / 2, first - slope / 2
    return max(1, math.ceil((-b + math.sqrt(b * b + 4 * a * gap)) / (2 * a) - 1e-9))
