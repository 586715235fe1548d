"""Latency distributions of one replica at a steady state: TTFT, TPOT and E2E tails, moments, percentiles.

- TTFT = request overhead + the residual of the decode step in progress at arrival (uniform over one
  decode step, when decodes run: probability 1 - exp(-b)) + either
  - the prompt's lone cost A(P') when it finds no prefill queued (probability 1 - rho), or
  - the M/G/1 wait (Pollaczek-Khinchine mean, Takacs second moment, a gamma; queueing.py) + alpha P' for its own tokens
    + the rest of its last step: tokens packed after its own, uniform up to what arrives before that step
    starts (at most `align` of a chunk on average when a backlog fills every step).
  M/G/1 on prefill work uses the variance of the prompt lengths (M/D/1 when they are fixed).
- TPOT of one request with n decode steps = T0 + kappa x (prefill time during its lifetime L) / n, kappa =
  1 - T0 / Tp (1 when prefill runs in steps of its own: the decodes wait the whole step). That prefill time is a
  compound Poisson sum of S over L (variance lambda L E[S^2], third
  moment lambda L E[S^3]) stretched by 1 / (1 - kappa rho) (a longer life gathers more prefill); the decode
  batch adds its own Poisson swing averaged over a lifetime (variance 2 b / 3 for an M/G/infinity count),
  at slope dT0/db; both are shared by every sequence decoding at the time, so the batch's feedback
  (replica.feedback) multiplies them by 1 / (1 - gain). Read as a shifted gamma with those three moments.
  A disaggregated decode instance adds its KV transfer time / n.
- E2E = TTFT + n TPOT with the moments added, per output grid point.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable

from tokcost.serving.loop import decoding_spread
from tokcost.serving.queueing import Moments, ShiftedGamma, poisson_pmf, quantile
from tokcost.serving.replica import LoadPoint, Replica
from tokcost.serving.traffic import Slo
from tokcost.serving.ttft import lock_round, locked_step, others_share, ttft_moments, ttft_tail_at


def e2e_mean(r: Replica, pt: LoadPoint) -> float:
    """E2E's mean over requests: TTFT's mean + E[n] x the mean TPOT (means add)."""
    return ttft_moments(r, pt).mean + r.decode_steps_mean * pt.tpot_mean_s


def tpot_moments(r: Replica, pt: LoadPoint, n: int, gain: float) -> Moments:
    """TPOT of a request with n decode steps: mean, variance and skew (see the module docstring).

    A closed loop counts its prefill per step, not per second, so a slow life gathers no more of it (no stretch):
    the users who return within a life L left a step that ended in it, so with a think time Z the share L / (L + Z)
    of its arrivals (loop.step_share over the life, not over one step: a think time shorter than the life delays
    the slowdown's echo, it does not undo it) is counted per step, and the rest stretches; and a closed loop's batch
    is a binomial share of its users, whose swing and feedback shrink by 1 - b / N.
    """
    # a request that starts decoding behind a prefill backlog (replica.held_backlog) adds its own share of it; the
    # mean over requests is in Little's TPOT, so a priced backlog leaves TPOT without it as the base
    priced = pt.backlog_busy_s > 0
    held = pt.held_backlog(n).scaled(1 / n) if priced else Moments(0.0)
    steady = pt.tpot_steady_s if priced else pt.tpot_mean_s
    base = steady + held.mean
    life = n * steady  # the prompts that arrive while it decodes the backlog are the backlog's
    kappa, s = pt.decode_share, pt.service
    w = r.loop.step_share(life)
    raw2, raw3 = s.raw2, s.raw3
    stretch = w + (1 - w) / max(1 - kappa * pt.rho, 1e-6)
    users = r.users_estimate(pt)
    # the prompts that interrupt a decoding request are the others' (a closed loop's N - 1 users: one alone sees none)
    others = pt.rate_rps * others_share(r, pt)
    prefill = Moments(0.0, others * life * raw2, others * life * raw3).scaled(kappa * stretch / n)
    q = decoding_spread(pt.batch, users)  # a closed loop's batch swings binomially, and less
    swing = Moments(0.0, q * 2 / 3 * r.decode_step_moments(pt.batch)[1])
    spread = (prefill + swing).scaled(1 / (1 - gain * q)) + Moments(0.0, held.var, held.mu3)
    return Moments(base + r.transfer_s / n) + spread


def tpot_tail(r: Replica, pt: LoadPoint, t: float) -> float:
    """P(TPOT > t) over requests with at least one decode step (lock-step groups: every request at the mean)."""
    parts = [(n, w) for n, w in r.outputs if n >= 1]
    total = sum(w for _, w in parts)
    gain = r.feedback(pt)
    lock = r.loop.locked_share(pt.tpot_mean_s)
    tail = 0.0
    floor = r.fastest_step_s()
    for n, w in parts:
        m = tpot_moments(r, pt, n, gain)
        fixed = 1.0 if t < m.mean else 0.0
        spread = ShiftedGamma.from_moments(m, floor).tail(t) if lock < 1 else fixed
        tail += w * (lock * fixed + (1 - lock) * spread)
    return tail / total


def e2e_tail(r: Replica, pt: LoadPoint, t: float, ttft: Moments | None = None) -> float:
    """P(E2E > t): TTFT plus n TPOTs, moments added, per output grid point (`ttft` from another pool)."""
    return e2e_tail_at(r, pt, ttft)(t)


def e2e_tail_at(r: Replica, pt: LoadPoint, ttft: Moments | None = None) -> Callable[[float], float]:
    """P(E2E > t) as a function of t (e2e_tail), each output grid point's law built once."""
    own_ttft = ttft is None
    ttft = ttft_moments(r, pt) if ttft is None else ttft
    gain = r.feedback(pt) if r.decodes else 0.0
    keep = 1 - r.loop.locked_share(pt.tpot_mean_s)  # lock-step groups decode at the mean
    fastest = r.fastest_step_s() if r.decodes else 0.0
    laws: list[tuple[float, Callable[[float], float]]] = []
    for n, w in r.outputs or [(0, 1.0)]:
        if n == 0:  # a one-token answer ends with its first token
            laws.append((w, ttft_tail_at(r, pt) if own_ttft else ShiftedGamma.from_moments(ttft, 0.0).tail))
        else:
            m = tpot_moments(r, pt, n, gain).scaled(n)
            both = ttft + Moments(m.mean, m.var * keep, m.mu3 * keep)
            laws.append((w, ShiftedGamma.from_moments(both, n * fastest).tail))

    def tail(t: float) -> float:
        total = 0.0
        for w, law in laws:
            total += w * law(t)
        return total

    return tail


def itl_steps(r: Replica, pt: LoadPoint) -> list[tuple[float, float]]:
    """(share of steps, seconds) of the steps a decoding sequence waits between two tokens.

    A share f = lambda m T of them (by count) carries prefill: each request's full chunks (Tc) and the step of its
    last chunk, shared with whoever joined it: e of a step per request, lasting s / e (sharing.py); lock-step
    groups run their own step. The rest are decode-only steps, T0 with the batch's swing (a 3-point normal).
    """
    tc = pt.chunk_step_s
    if r.prefill_apart and r.prompts:
        share, runs = _apart_runs(r, pt)
        return _itl_apart(r, pt, share, runs) + _decode_gaps(r, pt, 1 - share)
    f = prefill_gap_share(r, pt)
    lock = r.loop.locked_share(pt.tpot_mean_s)
    parts: list[tuple[float, float]] = []
    for prompt, (share, seconds) in zip(r.prompts, pt.last_steps, strict=True):
        parts += [(prompt.weight * (prompt.chunks - 1), tc)]
        parts += [(prompt.weight * (1 - lock) * share * p, x) for p, x in _last_step_lengths(r, pt, seconds / share)]
        if lock > 0:  # a round's steps per request: its full groups' and its last, part-filled one (ttft.lock_round)
            full = locked_step(r, pt, prompt)
            group, users, rest = lock_round(r, pt, prompt, full)
            if rest < group:  # k - 1 full groups and one of `rest` a round of `users` requests
                parts.append((prompt.weight * lock * (users - rest) / group / users, full))
                parts.append((prompt.weight * lock / users, locked_step(r, pt, prompt, size=rest)))
            else:
                parts.append((prompt.weight * lock / group, full))
    total = sum(w for w, _ in parts) or 1.0
    out = [(f * w / total, x) for w, x in parts if w > 0]
    return out + _decode_gaps(r, pt, 1 - f)


def _last_step_lengths(r: Replica, pt: LoadPoint, mean_s: float) -> list[tuple[float, float]]:
    """(chance, seconds) of the step that runs a prompt's last chunk, of mean `mean_s`: full (Tc) when the k =
    C / E[P'] - 1 other prompts that fill it beside its own are waiting, which a queue of utilization u holds with
    chance u^(k + 1) (M/M/1's tail of the waiting count); otherwise shorter, so the mean stays the sharing model's.
    A point at the mean had priced the p99 gap a third short where short prompts pack into full steps under load
    (Llama-3.1-70B on 4 x H100, 1,000-token prompts at 40 req/s: 92 ms against a simulated 135)."""
    tc, floor = pt.chunk_step_s, pt.decode_step_s
    if not floor < mean_s < tc or pt.queue_rho <= 0:
        return [(1.0, mean_s)]
    k = max(r.chunk / r.prompt_moments[0] - 1, 0.0)  # other prompts that fill the step beside its own
    full = min(pt.queue_rho ** (k + 1), (mean_s - floor) / (tc - floor))  # the rest never below a decode step
    return [(full, tc), (1 - full, (mean_s - full * tc) / (1 - full))]


def prefill_gap_share(r: Replica, pt: LoadPoint) -> float:
    """Share of a decoder's gaps between tokens that hold prefill: lambda m TPOT of its steps carry a chunk (beside
    the decodes), or the gaps after a decode step that saw an arrival when prefill runs apart (_apart_runs)."""
    if not r.prompts:
        return 0.0
    if r.prefill_apart:
        return _apart_runs(r, pt)[0]
    return min(max(pt.rate_rps * pt.steps_per_request * pt.tpot_mean_s, 0.0), 1.0)


def _decode_gaps(r: Replica, pt: LoadPoint, share: float) -> list[tuple[float, float]]:
    """`share` of the gaps at a decode-only step: T0 with the batch's swing (a 3-point normal)."""
    t0 = pt.decode_step_s
    spread = math.sqrt(3 * decoding_spread(pt.batch, r.users_estimate(pt)) * r.decode_step_moments(pt.batch)[1])
    return [(share / 6, t0 - spread), (share * 4 / 6, t0), (share / 6, t0 + spread)]


def _apart_share(pt: LoadPoint) -> float:
    """Share of a decoder's gaps that hold prefill run apart: prefill steps run back to back while prompts wait,
    so a gap holds prefill when a prompt came during the decode step before it: 1 - exp(-lambda T0)."""
    return min(max(-math.expm1(-pt.rate_rps * pt.decode_step_s), 0.0), 1.0)


def _apart_runs(r: Replica, pt: LoadPoint) -> tuple[float, list[tuple[float, float]]]:
    """(share of a decoder's gaps that hold prefill run apart, the law of the prompts such a gap holds).

    Deciding each step at its start: a run serves its first prompt and every prompt that arrives meanwhile, back to
    back (an M/D/1 busy period): n prompts with the Borel law, taken with the mean lambda TPOT / f (so that the
    gaps hold the prefill time the mean TPOT does: rho of a decoder's time). Under overlap scheduling the run is
    _lookahead_runs'."""
    if r.lookahead:
        mean_alone = sum(p.weight * a for p, a in zip(r.prompts, pt.alone_s, strict=True))
        return _lookahead_runs(pt.rate_rps, pt.decode_step_s, mean_alone)
    f = _apart_share(pt)
    stretch = max(pt.rate_rps * pt.tpot_mean_s / f, 1.0) if f > 0 else 1.0
    return f, borel(1 - 1 / stretch)


LOOKAHEAD_MOST = 6  # prompts one step holds in the chain below (the rest of the Poisson tail lumped there)
LOOKAHEAD_STEPS = 40  # power iterations of its 49 states at most: the chain mixes in a few steps at any load it runs
LOOKAHEAD_FLOOR = 1e-8  # converged below this change; a run's path less likely is dropped (the law renormalized)


@functools.lru_cache(maxsize=4096)  # one state's percentiles ask for it many times
def _lookahead_runs(rate: float, t0: float, alone: float) -> tuple[float, list[tuple[float, float]]]:
    """Overlap scheduling with prefill apart (SGLang without mixed chunks): step k + 1 is chosen as step k starts,
    so it holds the prompts that arrived during step k - 1: n(k + 1) ~ Poisson(lambda d(k - 1)), d = T0 for a
    decode step, n x A for a step of n prompts (A a prompt's prefill alone). A prompt that comes during a prefill
    step runs two steps later, after a decode step has given the decoders a token, so a gap seldom holds more than
    one prefill step (deciding at each step's start chains them: _apart_runs' Borel run). The chain on the pair
    (n(k - 1), n(k)) gives, over the gaps a decode step ends, the share that hold prefill and the law of the
    prompts they hold (a run of prefill steps before the decode step)."""
    most = LOOKAHEAD_MOST

    def arrivals(d: float) -> list[float]:  # P(n prompts in a step of d seconds), the tail lumped at `most`
        p = poisson_pmf(rate * d, most)
        return [*p, max(1.0 - sum(p), 0.0)]

    size = most + 1
    laws = [arrivals(alone * n if n else t0) for n in range(size)]
    pi = [[float(a == b == 0) for b in range(size)] for a in range(size)]  # P(n(k - 1) = a, n(k) = b)
    for _ in range(LOOKAHEAD_STEPS):
        nxt = [[0.0] * size for _ in range(size)]
        for a in range(size):
            law = laws[a]
            for b in range(size):
                w, row = pi[a][b], nxt[b]
                if w > 0:
                    for c in range(size):
                        row[c] += w * law[c]
        moved = max(abs(x - y) for new_row, old_row in zip(nxt, pi, strict=True)
                    for x, y in zip(new_row, old_row, strict=True))  # fmt: skip
        pi = nxt
        if moved < LOOKAHEAD_FLOOR:
            break
    total = sum(pi[a][0] for a in range(size))  # decode steps, each ending one gap of every decoder
    if total <= 0:  # prefill without end: no decode step comes (past saturation)
        return 1.0, [(2.0 * most, 1.0)]
    runs: dict[float, float] = {}
    for a in range(size):  # the steps after a decode step up to the next one: the next gap's prefill
        if pi[a][0] / total <= LOOKAHEAD_FLOOR:
            continue
        frontier = {(a, 0, 0): pi[a][0] / total}  # (n two steps back, last n, prompts so far)
        while frontier:
            more: dict[tuple[int, int, int], float] = {}
            for (x, y, m), p in frontier.items():
                for c, q in enumerate(laws[x]):
                    if c == 0:
                        runs[float(m)] = runs.get(float(m), 0.0) + p * q
                    elif m + c <= 2 * most and p * q > LOOKAHEAD_FLOOR:
                        key = (y, c, m + c)
                        more[key] = more.get(key, 0.0) + p * q
            frontier = more
    held, kept = 1.0 - runs.pop(0.0, 0.0), sum(runs.values())
    return held, [(m, p / kept) for m, p in sorted(runs.items())] if kept > 0 else [(1.0, 1.0)]


def _itl_apart(r: Replica, pt: LoadPoint, share: float, runs: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """Gaps that hold prefill apart (`share` of them): the prefill run a prompt of each grid length starts, n
    prompts of it with the law `runs` (_apart_runs), then the decode step that gives the token."""
    return [(share * prompt.weight * p, alone * n + pt.decode_step_s)
            for prompt, alone in zip(r.prompts, pt.alone_s, strict=True) if prompt.weight > 0
            for n, p in runs]  # fmt: skip


BOREL_MASS = 1 - 1e-5  # the law's terms are summed until this much of it is held
BOREL_TERMS = 400  # then the rest of it is one term at its own mean, so the law keeps its mean 1 / (1 - q)


def borel(q: float) -> list[tuple[float, float]]:
    """(n, P(n)) of the Borel law with parameter q in [0, 1): prompts one M/D/1 busy period serves, its load q."""
    if q <= 0:
        return [(1.0, 1.0)]
    out: list[tuple[float, float]] = []
    held = mean = 0.0
    for n in range(1, BOREL_TERMS + 1):
        p = math.exp(-q * n + (n - 1) * math.log(q * n) - math.lgamma(n + 1))
        out.append((float(n), p))
        held, mean = held + p, mean + n * p
        if held >= BOREL_MASS:
            break
    rest = 1.0 - held
    if rest > 0:  # the tail past the last term, at the mean it must have for the whole law's mean to hold
        out.append((max((1 / (1 - q) - mean) / rest, out[-1][0]), rest))
    return out


def itl_tail(r: Replica, pt: LoadPoint, t: float) -> float:
    """P(a gap between two tokens > t), pooled over every decoding sequence's gaps (vLLM's ITL)."""
    return sum(w for w, x in itl_steps(r, pt) if x > t)


def tail(r: Replica, pt: LoadPoint, metric: str, t: float) -> float:
    """P(metric > t) for metric in ttft, tpot, e2e, itl."""
    return tail_at(r, pt, metric)(t)


def tail_at(r: Replica, pt: LoadPoint, metric: str) -> Callable[[float], float]:
    """P(metric > t) as a function of t: TTFT's branches and E2E's laws built once for every t asked (a loop in whole
    rounds: its round's points, rounds.py)."""
    if pt.round is not None:
        return functools.partial(pt.round.tail, metric)
    if metric == "ttft":
        return ttft_tail_at(r, pt)
    if metric == "tpot":
        return functools.partial(tpot_tail, r, pt)
    if metric == "itl":
        return functools.partial(itl_tail, r, pt)
    return e2e_tail_at(r, pt)


def applies(r: Replica, metric: str) -> bool:
    """Whether a metric exists here: TTFT needs prefill, TPOT and ITL a decode step, E2E both."""
    if metric == "ttft":
        return bool(r.prompts)
    if metric in ("tpot", "itl"):
        return r.decodes
    return bool(r.prompts) and bool(r.outputs)


def percentile(r: Replica, pt: LoadPoint, metric: str, q: float) -> float | None:
    """The q-quantile of a metric in seconds; None where the metric does not apply."""
    if not applies(r, metric):
        return None
    if pt.round is not None:
        return pt.round.quantile(metric, q)
    if metric == "ttft":
        guess = pt.chunk_step_s + pt.wait_mean_s + r.overhead_s + pt.admission_wait_s
    elif metric in ("tpot", "itl"):
        guess = pt.tpot_mean_s
    else:
        guess = e2e_mean(r, pt)
    return quantile(tail_at(r, pt, metric), q, 0.5 * guess, 2 * guess)


def broken_slos(r: Replica, pt: LoadPoint, slos: list[Slo]) -> list[Slo]:
    """The SLOs this state breaks (those that apply here), worst first by tail probability over the allowed."""
    broken = []
    for slo in slos:
        if applies(r, slo.metric):
            excess = tail(r, pt, slo.metric, slo.seconds) / (1 - slo.quantile)
            if excess > 1 + 1e-9:
                broken.append((excess, slo))
    return [slo for _, slo in sorted(broken, key=lambda item: -item[0])]
