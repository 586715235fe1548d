"""A discrete-event simulation of the same scheduler the closed form describes, step by step.

Arrivals (Poisson at the rate, a trace's times, or N closed-loop users with exponential think times) join
a FCFS prefill queue. At each step boundary the server runs every decoding sequence's next token plus up to
`chunk` prompt tokens from the head of the queue (packing several prompts into one step when they fit),
priced by the engine's compiled pass with the real segments: Segment(b, mean decode context, 1) for the decode
batch (exact, the pass is linear in the contexts' sum) and Segment(1, tokens already done, chunk part) per
prompt. A prompt's first token comes out at the end of the step that ran its last chunk; it then decodes
one token per step. With no decode and an empty queue the server idles until the next arrival. The first
and last WARMUP_FRACTION of requests (by arrival) are left out of the statistics: they see an emptier
server. Seeded, so a run is reproducible.
"""

from __future__ import annotations

import heapq
import math
import random
from collections import deque
from dataclasses import dataclass

from tokcost.engine.step import Segment
from tokcost.serving.steps import Steps
from tokcost.serving.traffic import Traffic

WARMUP_FRACTION = 0.1


@dataclass
class _Request:
    index: int
    arrival: float
    prompt: int  # computed prompt tokens
    output: int
    done: int = 0
    first_token: float = 0.0
    end: float = 0.0


@dataclass(frozen=True, slots=True)
class SimResult:
    """Per-request latencies (seconds) of the measured requests, and what the server did."""

    ttft_s: tuple[float, ...]
    tpot_s: tuple[float, ...]
    e2e_s: tuple[float, ...]
    duration_s: float
    mean_batch: float  # time-average decode batch while stepping or idle
    prefill_time_share: float  # share of time in steps that carried prefill
    requests: int

    def percentile(self, metric: str, q: float) -> float | None:
        """The q-quantile of ttft, tpot or e2e (linear between order statistics); None if empty."""
        values = sorted(getattr(self, f"{metric}_s"))
        if not values:
            return None
        pos = q * (len(values) - 1)
        lo = math.floor(pos)
        hi = min(lo + 1, len(values) - 1)
        return values[lo] + (values[hi] - values[lo]) * (pos - lo)

    @property
    def rate_rps(self) -> float:
        """Completed requests per second over the run."""
        return self.requests / self.duration_s if self.duration_s else 0.0


def simulate(
    steps: Steps, traffic: Traffic, chunk: int, *, requests: int = 4000, seed: int = 0, rate_rps: float | None = None
) -> SimResult:
    """Run `requests` requests of `traffic` (at `rate_rps` if given) through one replica."""
    rng = random.Random(seed)
    p0 = traffic.cached_prefix_tokens
    overhead = steps.request_overhead_s
    rate = rate_rps if rate_rps is not None else traffic.rate_rps
    arrivals: list[tuple[float, int]] = []  # (time, request index) heap
    made = 0

    def new_request(time: float) -> None:
        nonlocal made
        if made < requests:
            heapq.heappush(arrivals, (time, made))
            made += 1

    if traffic.concurrency:
        for _ in range(traffic.concurrency):
            new_request(rng.random() * (traffic.think_time_s or 0.01))
    elif traffic.arrivals_s:
        for time in traffic.arrivals_s[:requests]:
            new_request(time)
    else:
        if not rate or rate <= 0:
            raise ValueError("simulate needs a positive rate for open-loop traffic")
        new_request(rng.expovariate(rate))
    reqs: dict[int, _Request] = {}
    queue: deque[_Request] = deque()
    decoding: list[tuple[int, int]] = []  # (last step index, request index)
    context_base = 0.0  # sum over decoders of (prompt + 1 - first step index)
    t, step, batch_time, prefill_time = 0.0, 0, 0.0, 0.0
    line: tuple[int, int, float, float, int] | None = None  # (batch, first step, seconds, per step, last step)
    finished: list[_Request] = []

    def finish(r: _Request, time: float) -> None:
        r.end = time
        finished.append(r)
        if traffic.concurrency:
            think = rng.expovariate(1 / traffic.think_time_s) if traffic.think_time_s > 0 else 0.0
            new_request(time + think)

    while arrivals or queue or decoding:
        while arrivals and arrivals[0][0] <= t:
            time, i = heapq.heappop(arrivals)
            r = _Request(i, time, traffic.prompt.sample(rng), traffic.output.sample(rng))
            reqs[i] = r
            queue.append(r)
            if not traffic.concurrency and not traffic.arrivals_s:
                new_request(time + rng.expovariate(rate))  # type: ignore[arg-type]
        if not queue and not decoding:
            t = arrivals[0][0]
            continue
        b = len(decoding)
        segments = [Segment(b, (context_base + b * step) / b, 1)] if b else []
        budget, completed = chunk, []
        for r in queue:
            if budget == 0:
                break
            take = min(r.prompt - r.done, budget)
            segments.append(Segment(1, p0 + r.done, take))
            r.done += take
            budget -= take
            if r.done == r.prompt:
                completed.append(r)
        if len(segments) > (1 if b else 0):
            seconds = steps.seconds(segments)
        else:  # decode only: one line per stretch of constant batch (linear in the context while no term flips)
            if line is None or line[0] != b or step > line[4]:
                line = _decode_line(steps, b, segments[0].cached_tokens, step, decoding[0][0])
            # run every decode-only step up to the next event at once: a finish, an arrival, the line's end
            first = line[2] + line[3] * (step - line[1])
            jump = min(decoding[0][0], line[4]) - step + 1
            if arrivals:
                jump = min(jump, _steps_until(arrivals[0][0] - t, first, line[3]))
            seconds = jump * first + line[3] * jump * (jump - 1) / 2
            step += jump - 1
        t += seconds
        batch_time += b * seconds
        prefill_time += seconds if budget < chunk else 0.0
        while decoding and decoding[0][0] == step:
            _, i = heapq.heappop(decoding)
            r = reqs[i]
            context_base -= p0 + r.prompt + 1 - (step - r.output + 2)
            finish(r, t)
        for r in completed:
            queue.popleft()
            r.first_token = t
            if r.output > 1:  # decodes on steps step+1 .. step+output-1
                heapq.heappush(decoding, (step + r.output - 1, r.index))
                context_base += p0 + r.prompt + 1 - (step + 1)
            else:
                finish(r, t)
        step += 1
    cut = int(WARMUP_FRACTION * len(finished))
    kept = sorted(finished, key=lambda r: r.index)[cut : len(finished) - cut]
    return SimResult(
        ttft_s=tuple(r.first_token - r.arrival + overhead for r in kept),
        tpot_s=tuple((r.end - r.first_token) / (r.output - 1) for r in kept if r.output > 1),
        e2e_s=tuple(r.end - r.arrival + overhead for r in kept),
        duration_s=t,
        mean_batch=batch_time / t if t else 0.0,
        prefill_time_share=prefill_time / t if t else 0.0,
        requests=len(finished),
    )


def _decode_line(steps: Steps, batch: int, context: float, step: int, last: int) -> tuple[int, int, float, float, int]:
    """Decode-only step time from `step` on as a line in the step index (contexts grow by 1 a step), up to `last`
    or the last step before a kernel changes bound, a window fills or another pipeline stage becomes the slowest
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
