"""How requests meet the scheduler: an open loop (Poisson in time) or a closed loop of users who send on a token.

Open loop: arrivals are Poisson in time, so one lands at a uniform moment of the step in progress (a residual
of half a step on average) and the prefill queue is M/G/1 at the rate lambda.

Closed loop (N users, think time Z, client round trip r; Schweitzer-Bard mean-value analysis on the cycle):
- the load: N = X (E[TTFT] + E[n] TPOT + r + c + Z), X the throughput, c the engine's per-request cost
  (capacity.users_in_system); past the load limit (the engine's cap on running sequences, the KV cache, or
  prefill saturation) the extra users wait for admission, (N - N_limit) / X each, on TTFT only;
- with no think time, a user's next request follows its last token, which ends a step: it lands r + c after
  a step boundary and waits out the step then running, a full step less r + c, never half a step. Users finish
  per step, not per second, so the prefill queue sees arrivals spread over steps: while prompts are queued,
  steps carry prefill and last Tp, so the queue's arrival rate is lambda T / Tp (T the mean step a decoding
  sequence sees), and its utilization is the share of steps (by count) that carry prefill, lambda m T;
- a think time Z spreads each next request over a span of Z: the share T / (T + Z) of arrivals lands as
  above and the rest at a uniform moment; the queue still feels the slowdown of its busy periods, to the
  share B / (B + Z) of them (B the mean busy period), and is the open loop's when Z outlasts them;
- fixed lengths and no think time: benchmark clients start together, the first prompts are packed g =
  floor(C / P') to a step, and since every request then lives exactly as many steps as the others, each group
  comes back together, one step after the group before it, and stays in lock-step (the phase locking that
  Poisson arrivals never show). Each group's prompts run in one step, arriving during the previous group's last
  step: TTFT = (that step - r - c) + its own step. A prompt longer than the chunk (one a group) comes back while
  the one ahead still fills whole chunks, so it lands in a full chunk step and is packed behind that prompt's
  tail: TTFT = (Tc - r - c) + ceil(P' / C) Tc, the full steps its tokens straddle. The same for every request of
  a burst but the first, whose predecessor step is decode-only (it runs its own chunks alone). Tokens
  come as deterministically: TPOT has the mean of the step mix and no spread.
  The simulator (simulate.py) locks so. Whether a spread on the clients' round trips breaks its groups depends
  on the spread against the steps: users who return during a long prefill step wait for it and join the next
  one together (a convoy), which re-forms groups. Published closed-loop runs with fixed lengths measure TTFT
  between the unlocked end (each user's next request lands r + c into the step then running, with whoever else
  lands there: the closed form varying lengths use) and the lock-step one: real engines and clients lock only
  partly (PARTIAL_LOCK). The primary figure prices that share of the users in lock-step groups and the rest
  unlocked, a mixture; all of them locked is the range's other end (`Loop.lockable`, `Replica.lock_step`),
  printed beside it. An engine that runs prefill apart, every waiting prompt before any decode, never unlocks: all
  its users form one group, priced as whole rounds (rounds.py), not as this mixture.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from tokcost.serving.traffic import Traffic

# The share of a closed loop's users (fixed lengths) priced in lock-step groups: a stated value, not fitted. The
# published runs (validation/serving.yaml) sit between the ends: NIM's AIPerf sweeps at 0.43-1.25 of the way from
# unlocked to locked (5-50 users; 500-token prompts, 5 users: 127 ms measured, 67 unlocked, 204 locked), vLLM PR
# 23151's 10 clients past the locked end. NIM's 4 points err least at a half (median |error| 12% against 45%
# unlocked and 16% locked); vLLM's 3 rows are 55% short at a half, 79% unlocked.
PARTIAL_LOCK = 0.5


@dataclass(frozen=True, slots=True)
class Loop:
    """How arrivals relate to steps: open (Poisson in time) or closed (N users re-sending after their last token)."""

    closed: bool
    think_time_s: float = 0.0
    offset_s: float = 0.0  # closed: from the last token (a step boundary) to the next request at the scheduler
    lockable: bool = False  # closed with fixed lengths: users can fall into lock-step groups
    locked: float = 0.0  # ... and this share of them is priced in lock-step groups (1: the range's locked end)

    @staticmethod
    def of(traffic: Traffic, request_overhead_s: float) -> Loop:
        """The loop a traffic makes (a trace or a rate: open); a closed loop with fixed lengths partly locked (the
        primary figure)."""
        if traffic.concurrency is None:
            return Loop(False)
        fixed = traffic.prompt.kind == "fixed" and traffic.output.kind == "fixed"
        offset = traffic.client_rtt_s + request_overhead_s
        return Loop(True, traffic.think_time_s, offset, lockable=fixed, locked=PARTIAL_LOCK if fixed else 0.0)

    def step_share(self, step_s: float) -> float:
        """w: the share of arrivals that land a fixed offset after a step boundary (T / (T + Z); 0 in an open loop)."""
        if not self.closed or step_s <= 0:
            return 0.0
        return step_s / (step_s + self.think_time_s)

    def queue_rate(self, rate: float, *, step_s: float, prefill_step_s: float, busy_s: float) -> float:
        """The arrival rate the prefill queue sees while busy: lambda (v T / Tp + 1 - v), v = B / (B + Z).

        A busy period of mean length B = E[S] / (1 - rho) slows every step to Tp, so fewer users finish, and
        those who do come back a think time later: the slowdown reaches the queue within the busy period when
        B outlasts Z (all of it when Z = 0).

        Measured, v is too large with a think time: the simulation's arrival rate while prefill is busy is 0.93 of
        the mean, not 0.62 (16,384-token prompts, 64-token answers, 19 users, Z = 2 s on an H100; 0.63 both with
        Z = 0), as a think time filters the finishes over the busy/idle alternation's correlation time, about E[S].
        Its mean wait still comes out 4-15% under the simulation's (2,000- and 4,000-token prompts at 0.8-0.95 of the
        knee) because the think pool drains while prompts queue (a finite population), which a Poisson queue at the
        measured rate misses: TTFT up to 74% over.
        Long prompts with short answers keep the error (README, known misses).
        """
        if not self.closed or not math.isfinite(rate) or prefill_step_s <= 0:
            return rate
        v = busy_s / (busy_s + self.think_time_s) if busy_s > 0 else self.step_share(step_s)
        return rate * (v * step_s / prefill_step_s + 1 - v)

    def locked_share(self, step_s: float) -> float:
        """The share of requests that come back in lock-step groups: the locked share of the step-locked ones
        (fixed lengths; Z = 0 gives all of `locked`)."""
        return self.step_share(step_s) * self.locked

    def residual(self, step_s: float) -> float:
        """A step-locked arrival's wait for the step in progress: that step less the offset, never below 0."""
        return max(step_s - self.offset_s, 0.0)


def others_decoding(batch: float, users: float) -> float:
    """Chance an arrival finds other sequences decoding: 1 - exp(-b) in an open loop (a Poisson count); in a
    closed loop each of the other N - 1 users decodes with chance b / N (a binomial count; N = 1: nobody)."""
    if not math.isfinite(users):
        return 1 - math.exp(-batch)
    share = min(max(batch / users, 0.0), 1.0)
    return 1 - (1 - share) ** max(users - 1, 0.0)


def decoding_spread(batch: float, users: float) -> float:
    """The variance of the others a decoding sequence shares its steps with, over a Poisson count's (b): 1 in an
    open loop; for N users, each decoding with chance p = b / N, the others are Binomial(N - 1, p), variance
    (N - 1) p (1 - p) = b (1 - b / N)(1 - 1 / N): none for one user alone."""
    if not math.isfinite(users):
        return 1.0
    return min(max((1 - batch / users) * (1 - 1 / max(users, 1.0)), 0.0), 1.0)


def group_size(prompt_tokens: float, chunk: int, batch: float) -> int:
    """Prompts packed into one lock-step group: as many as a chunk holds, at most the users there are."""
    if prompt_tokens > chunk:
        return 1
    return max(1, min(int(chunk // max(prompt_tokens, 1.0)), math.ceil(batch + 1e-9)))
