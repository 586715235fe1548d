"""Latency distributions of one replica at a steady state: TTFT, TPOT and E2E tails, moments, percentiles.

- TTFT = request overhead + the residual of the decode step in progress at arrival (uniform over one
  decode step, when decodes run: probability 1 - exp(-b)) + either
  - the prompt's lone cost A(P') when it finds no prefill queued (probability 1 - rho), or
  - the M/G/1 wait (Pollaczek-Khinchine mean, Takacs second moment, a gamma; queueing.py) + alpha P' for its own tokens
    + the rest of its last step: tokens packed after its own, uniform up to what arrives before that step
    starts (at most `align` of a chunk on average when a backlog fills every step).
  M/G/1 on prefill work uses the variance of the prompt lengths (M/D/1 when they are fixed).
- TPOT of one request with n decode steps = T0 + kappa x (prefill time during its lifetime L) / n, kappa =
  1 - T0 / Tp. That prefill time is a compound Poisson sum of S over L (variance lambda L E[S^2], third
  moment lambda L E[S^3]) stretched by 1 / (1 - kappa rho) (a longer life gathers more prefill); the decode
  batch adds its own Poisson swing averaged over a lifetime (variance 2 b / 3 for an M/G/infinity count),
  at slope dT0/db; both are shared by every sequence decoding at the time, so the batch's feedback
  (replica.feedback) multiplies them by 1 / (1 - gain). Read as a shifted gamma with those three moments.
  A disaggregated decode instance adds its KV transfer time / n.
- E2E = TTFT + n TPOT with the moments added, per output grid point.
"""

from __future__ import annotations

import math

from tokcost.serving.queueing import Moments, ShiftedGamma, gamma_plus_uniform_tail, quantile
from tokcost.serving.replica import LoadPoint, PromptPoint, Replica
from tokcost.serving.traffic import Slo


def _residual(pt: LoadPoint) -> tuple[float, float]:
    """(chance decodes are running at an arrival, the decode step it then waits out)."""
    return 1 - math.exp(-pt.batch), pt.decode_step_s


def final_step_extra(r: Replica, pt: LoadPoint, prompt: PromptPoint) -> float:
    """Width of the uniform extra a waiting prompt pays in its last step for tokens packed after its own.

    Those are the tokens that arrive before that step starts, at most `align` of a chunk on average. The last
    step starts once the work ahead that does not fit beside the prompt's last chunk is done, and no sooner
    than the prefill step in progress ends: max(Tp / 2, theta - alpha (C - last chunk)) + alpha (full chunks).
    """
    alpha = pt.chunk_step_s / r.chunk
    own_last = prompt.last_chunk(r.chunk)
    starts = max(pt.prefill_step_s / 2, pt.wait_if_waiting_s - alpha * (r.chunk - own_last))
    behind = pt.rate_rps * r.prompt_moments[0] * (starts + alpha * (prompt.tokens - own_last))
    return 2 * alpha * min(r.align * r.chunk, behind)


def ttft_tail(r: Replica, pt: LoadPoint, t: float) -> float:
    """P(TTFT > t)."""
    if not r.prompts:
        return 0.0
    p_dec, step = _residual(pt)
    s = t - r.overhead_s
    theta, shape = pt.wait_if_waiting_s, pt.wait_shape
    alpha = pt.chunk_step_s / r.chunk
    total = 0.0
    for prompt, alone in zip(r.prompts, pt.alone_s, strict=True):
        idle = (1 - p_dec) * (alone > s) + (p_dec * min(max((alone + step - s) / step, 0.0), 1.0) if p_dec else 0.0)
        own, width = alpha * prompt.tokens, final_step_extra(r, pt, prompt)
        busy = (1 - p_dec) * gamma_plus_uniform_tail(s - own, theta, shape, width)
        if p_dec > 0:  # the two uniforms (last-step extra, residual decode step) as one of equal mean and variance
            both = math.hypot(width, step)
            busy += p_dec * gamma_plus_uniform_tail(s - own - (width + step - both) / 2, theta, shape, both)
        total += prompt.weight * ((1 - pt.rho) * idle + pt.rho * busy)
    return total


def ttft_moments(r: Replica, pt: LoadPoint) -> Moments:
    """Mean, variance and third central moment of TTFT."""
    if not r.prompts:
        return Moments(0.0)
    p_dec, step = _residual(pt)
    residual = Moments.mixture([(1 - p_dec, Moments(0.0)), (p_dec, Moments.uniform(step))])
    alpha = pt.chunk_step_s / r.chunk
    parts = []
    for prompt, alone in zip(r.prompts, pt.alone_s, strict=True):
        wait = Moments.uniform(final_step_extra(r, pt, prompt)) + Moments.gamma(pt.wait_if_waiting_s, pt.wait_shape)
        parts.append((prompt.weight * (1 - pt.rho), Moments(alone)))
        parts.append((prompt.weight * pt.rho, Moments(alpha * prompt.tokens) + wait))
    return Moments.mixture(parts) + residual + Moments(r.overhead_s)


def tpot_moments(r: Replica, pt: LoadPoint, n: int, gain: float) -> Moments:
    """TPOT of a request with n decode steps: mean, variance and skew (see the module docstring)."""
    life = n * pt.tpot_mean_s
    kappa, s = pt.decode_share, pt.service
    raw2 = s.var + s.mean**2
    raw3 = s.mu3 + 3 * s.mean * s.var + s.mean**3
    stretch = 1 / max(1 - kappa * pt.rho, 1e-6)
    prefill = Moments(0.0, pt.rate_rps * life * raw2, pt.rate_rps * life * raw3).scaled(kappa * stretch / n)
    swing = Moments(0.0, 2 / 3 * r.decode_step_moments(pt.batch)[1])
    return Moments(pt.tpot_mean_s + r.transfer_s / n) + (prefill + swing).scaled(1 / (1 - gain))


def tpot_tail(r: Replica, pt: LoadPoint, t: float) -> float:
    """P(TPOT > t) over requests with at least one decode step."""
    parts = [(n, w) for n, w in r.outputs if n >= 1]
    total = sum(w for _, w in parts)
    gain = r.feedback(pt)
    return sum(w * ShiftedGamma.from_moments(tpot_moments(r, pt, n, gain)).tail(t) for n, w in parts) / total


def e2e_tail(r: Replica, pt: LoadPoint, t: float, ttft: Moments | None = None) -> float:
    """P(E2E > t): TTFT plus n TPOTs, moments added, per output grid point (`ttft` from another pool)."""
    own_ttft = ttft is None
    ttft = ttft_moments(r, pt) if ttft is None else ttft
    gain = r.feedback(pt) if r.decodes else 0.0
    total = 0.0
    for n, w in r.outputs or [(0, 1.0)]:
        if n == 0:  # a one-token answer ends with its first token
            total += w * (ttft_tail(r, pt, t) if own_ttft else ShiftedGamma.from_moments(ttft).tail(t))
        else:
            total += w * ShiftedGamma.from_moments(ttft + tpot_moments(r, pt, n, gain).scaled(n)).tail(t)
    return total


def tail(r: Replica, pt: LoadPoint, metric: str, t: float) -> float:
    """P(metric > t) for metric in ttft, tpot, e2e."""
    if metric == "ttft":
        return ttft_tail(r, pt, t)
    if metric == "tpot":
        return tpot_tail(r, pt, t)
    return e2e_tail(r, pt, t)


def applies(r: Replica, metric: str) -> bool:
    """Whether a metric exists here: TTFT needs prefill, TPOT a decode step, E2E both."""
    if metric == "ttft":
        return bool(r.prompts)
    if metric == "tpot":
        return r.decodes
    return bool(r.prompts) and bool(r.outputs)


def percentile(r: Replica, pt: LoadPoint, metric: str, q: float) -> float | None:
    """The q-quantile of a metric in seconds; None where the metric does not apply."""
    if not applies(r, metric):
        return None
    if metric == "ttft":
        guess = pt.chunk_step_s + pt.wait_mean_s + r.overhead_s
    elif metric == "tpot":
        guess = pt.tpot_mean_s
    else:
        guess = ttft_moments(r, pt).mean + r.decode_steps_mean * pt.tpot_mean_s
    return quantile(lambda t: tail(r, pt, metric, t), q, 0.5 * guess, 2 * guess)


def broken_slos(r: Replica, pt: LoadPoint, slos: list[Slo]) -> list[Slo]:
    """The SLOs this state breaks (those that apply here), worst first by tail probability over the allowed."""
    broken = []
    for slo in slos:
        if applies(r, slo.metric):
            excess = tail(r, pt, slo.metric, slo.seconds) / (1 - slo.quantile)
            if excess > 1 + 1e-9:
                broken.append((excess, slo))
    return [slo for _, slo in sorted(broken, key=lambda item: -item[0])]
