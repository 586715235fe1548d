"""How full the step that runs a prompt's last chunk is: the prompt's share of that step and the time it accounts for.

Continuous batching puts every prompt token waiting at a step's start into that step, up to the chunk budget C
(chunked prefill cuts the next prompt to fill what is left). A prompt whose last chunk has l tokens shares its
step with the k prompts that joined the queue before that step began, so the step carries fill = min(C, l + k
E[P']) prompt tokens and the prompt's share of it is e = E[l / fill]: 1 when it runs alone, l / C when the step
is full. The step's time T(fill) is the engine's (flat while reading the weights bounds it, then growing with the
FLOPs), and the part of it the prompt accounts for is s = E[T(fill) l / fill]: its lone last step when alone, alpha
l (alpha = Tc / C) when full. Per request: prefill steps (full chunks) + e, prefill time (full chunks) + s.

The joiners arrive in a window: the step in progress (or what is left of it), the prompt's wait W and its own full
chunks. With W = 0 they are Poisson(lambda c); with W a gamma of shape s and mean theta, Poisson(lambda c) plus a
negative binomial (a Poisson whose mean is gamma), counted here by one negative binomial with the same mean and
variance, exact at k = 0 (so a prompt that nothing can join, l + E[P'] > C, keeps the exact chance of running
alone). Counts with a mean above GAUSS_HERMITE_ABOVE use 3 Gauss-Hermite nodes instead of a sum: of the normal for a
Poisson count, of the log-normal with the same mean and variance after a wait (skewed, never below 0).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from tokcost.serving.queueing import count_terms, poisson_pmf

GAUSS_HERMITE_ABOVE = 60.0  # joiner counts with a larger mean: the normal, not a term-by-term sum
GAUSS_HERMITE_3 = ((1 / 6, -math.sqrt(3)), (4 / 6, 0.0), (1 / 6, math.sqrt(3)))  # (weight, z) of a standard normal
# a term-by-term sum stops here at most, its remaining mass at the step that many joiners fill: a gamma wait of tiny
# shape (a queue within rounding of its edge) spreads the count of 1-token prompts over thousands of terms, summed in
# every fixed-point pass (a closed loop's plan ran for minutes); past 2,000 joiners a prompt's share is under 1/2,000
PMF_TERMS_MAX = 2000
# counts whose chance is below this are left out of the sum (their mass goes to the full step): most of the tail the
# count_terms bound keeps is such terms, each a step-time read (20,000 users of 1-token answers: 26.6 million reads
# in a plan, 15.1 million without them)
NEGLIGIBLE = 1e-16


@dataclass(frozen=True, slots=True)
class Joiners:
    """Prompts that join a prompt's last step: Poisson(poisson_mean) plus, after a gamma wait, its Poisson mixture."""

    poisson_mean: float  # lambda x the window with no wait (step in progress, own full chunks)
    wait_mean: float = 0.0  # lambda x theta: joiners during the wait, on average
    wait_shape: float = 1.0  # the wait's gamma shape

    @property
    def mean(self) -> float:
        """Expected joiners."""
        return self.poisson_mean + self.wait_mean

    @property
    def variance(self) -> float:
        """Their variance: Poisson's plus the gamma mean's, (lambda theta)^2 / s."""
        return self.mean + self.wait_mean**2 / self.wait_shape

    def none(self) -> float:
        """P(k = 0), exact: exp(-lambda c) (1 + lambda theta / s)^-s."""
        return math.exp(-self.poisson_mean) * (1 + self.wait_mean / self.wait_shape) ** -self.wait_shape

    @property
    def poisson(self) -> bool:
        """No wait to mix it: the count is Poisson (variance = mean)."""
        return self.variance <= self.mean * (1 + 1e-9)

    def pmf(self, terms: int) -> list[float]:
        """P(k) for k < terms: a negative binomial with this mean and variance (Poisson when they agree)."""
        mean, var = self.mean, self.variance
        if self.poisson:
            return poisson_pmf(mean, terms)
        r, q = mean * mean / (var - mean), 1 - mean / var  # NB(r, q): P(k + 1) = P(k) q (r + k) / (k + 1)
        out = [(1 - q) ** r]
        for k in range(terms - 1):
            out.append(out[-1] * q * (r + k) / (k + 1))
        p0 = self.none()  # P(0) exact, the rest rescaled to keep the total
        rest = (1 - p0) / (1 - out[0]) if out[0] < 1 else 0.0
        return [p0] + [p * rest for p in out[1:]]


def step_share(
    last_tokens: float, chunk: int, joiner_tokens: float, joiners: Joiners,
    step_s: Callable[[list[float]], list[float]],
) -> tuple[float, float]:  # fmt: skip
    """(e, s): a prompt's expected share l / fill of the step that runs its last chunk, and the step time it
    accounts for, E[step_s(fill) l / fill], with fill = min(C, l + k x joiner_tokens) prompt tokens in it.
    `step_s` gives the step times of many fills at once, in ascending order (one walk along the step curve)."""
    room = chunk - last_tokens
    if room <= 0 or joiner_tokens <= 0:
        return 1.0, step_s([min(float(chunk), last_tokens)])[0]

    def at(k: float) -> float:  # tokens in the step with k joiners
        return min(float(chunk), last_tokens + max(k, 0.0) * joiner_tokens)

    full = math.ceil(room / joiner_tokens)  # joiners that fill the step
    if full == 1:  # nobody fits beside it but the next prompt's first chunk: alone, or full
        p0, packed = joiners.none(), last_tokens / chunk
        alone, full_step = step_s([last_tokens, chunk])
        return p0 + (1 - p0) * packed, p0 * alone + (1 - p0) * packed * full_step
    mean, var = joiners.mean, joiners.variance
    sd = math.sqrt(var)
    if mean > GAUSS_HERMITE_ABOVE and joiners.poisson:  # near normal, none below 0
        nodes = [(w, at(mean + z * sd)) for w, z in GAUSS_HERMITE_3]
    elif mean > GAUSS_HERMITE_ABOVE:  # after a wait: skewed, its mass never below 0 however wide (a normal's lower
        # node would clamp to 0 and leave a prompt alone in 1 step of 6 behind an endless backlog): the log-normal
        # of the same mean and variance, at its 3 Gauss-Hermite nodes
        s = math.sqrt(math.log1p(var / mean**2))
        nodes = [(w, at(mean * math.exp(z * s - s * s / 2))) for w, z in GAUSS_HERMITE_3]
    else:  # k joiners put l + k E[P'] tokens in the step (under C: `terms` stops short of the k that fill it)
        terms = min(full, count_terms(mean, sd), PMF_TERMS_MAX)
        nodes = [(p, last_tokens + k * joiner_tokens) for k, p in enumerate(joiners.pmf(terms)) if p > NEGLIGIBLE]
        nodes.append((max(1 - sum(p for p, _ in nodes), 0.0), at(terms)))  # steps the joiners fill, or nearly
    share = sum(p * last_tokens / x for p, x in nodes)  # (nodes ascend in x: counts, normal or log-normal nodes)
    times = step_s([x for _, x in nodes])
    return share, sum(p * t * last_tokens / x for (p, x), t in zip(nodes, times, strict=True))
