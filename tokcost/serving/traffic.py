"""What a fleet is asked to serve: request lengths (fixed, exponential, lognormal, a trace), load, and SLOs.

A length distribution is given by its mean and shape; the closed form needs its raw moments E[X^k] (k = 1..3,
exact for every kind) and a small grid of equal-weight mid-quantile points for terms that are not polynomial
in the length (chunk counts, a lone prompt's step times). The simulation draws integer token counts from it,
max(1, round(X)), and the moments are that law's, so short prompts count the tokens the steps run.
Lognormal with mean m and coefficient of variation c: sigma^2 = ln(1 + c^2), mu = ln m - sigma^2 / 2,
E[X^k] = exp(k mu + k^2 sigma^2 / 2). Exponential with mean m: E[X^k] = k! m^k.
"""

from __future__ import annotations

import functools
import math
import random
from dataclasses import dataclass, replace
from statistics import NormalDist
from typing import Literal

from tokcost.errors import UsageError

DistKind = Literal["fixed", "exponential", "lognormal", "empirical"]
PROMPT_GRID_POINTS = 32  # mid-quantile points of a prompt distribution (a quarter of them priced by curves)
OUTPUT_GRID_POINTS = 32  # of an output distribution (arithmetic only; E2E follows its quantiles closely)
ROUNDED_UP_TO = 1024  # token counts summed one by one for a law's moments; past them rounding moves nothing
QUANTILES = {"p50": 0.50, "p90": 0.90, "p95": 0.95, "p99": 0.99}
METRICS = ("ttft", "tpot", "e2e", "itl")  # itl: the gap between two tokens, pooled over every gap
# A closed-loop client sends its next request this long after its last token reaches it: a round trip on the
# same network plus the client's own turnaround (its HTTP and tokenization are the engine's per-request cost)
CLIENT_RTT_S = 1e-3


@dataclass(frozen=True, slots=True)
class LengthDist:
    """Token counts of one kind of length: its mean, shape (CV for lognormal) and, for a trace, the values."""

    kind: DistKind
    mean: float
    cv: float = 0.0
    values: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if any(a > b for a, b in zip(self.values, self.values[1:], strict=False)):  # quantiles read a sorted trace
            object.__setattr__(self, "values", tuple(sorted(self.values)))

    def moment(self, k: int) -> float:
        """Raw moment E[K^k] of the token counts served, K = max(1, round(X)) (what `sample` draws and the grid
        prices): the counts up to ROUNDED_UP_TO one by one, the continuous law's partial moment past them (rounding
        them would add about P(tail) / (12 m) to the mean: under 1e-6 of it). A prompt of mean 1 is 1.35 tokens on
        average when exponential, not 1: the queue and the steps must count the same tokens."""
        if self.kind == "fixed":
            return max(1, round(self.mean)) ** k
        if self.kind == "empirical":
            return sum(v**k for v in self.values) / len(self.values)
        return _rounded_moment(self.kind, self.mean, self.cv, k)

    def quantile(self, u: float) -> float:
        """The u-quantile (0 < u < 1)."""
        if self.kind == "fixed":
            return self.mean
        if self.kind == "exponential":
            return -self.mean * math.log1p(-u)
        if self.kind == "lognormal":
            s = math.sqrt(math.log1p(self.cv**2))
            return math.exp(math.log(self.mean) - s * s / 2 + s * NormalDist().inv_cdf(u))
        ordered = self.values  # kept sorted (__post_init__)
        return float(ordered[min(int(u * len(ordered)), len(ordered) - 1)])

    def grid(self, n: int) -> list[tuple[float, float]]:
        """(value, weight) points whose weights sum to 1: one point when fixed, else n mid-quantiles, equal
        values merged (a trace of one length is one point, not n copies of it)."""
        if self.kind == "fixed":
            return [(self.mean, 1.0)]
        merged: dict[float, float] = {}
        for i in range(n):
            value = self.quantile((i + 0.5) / n)
            merged[value] = merged.get(value, 0.0) + 1 / n
        return list(merged.items())

    def sample(self, rng: random.Random) -> int:
        """One integer token count, at least 1."""
        if self.kind == "fixed":
            return max(1, round(self.mean))
        if self.kind == "empirical":
            return rng.choice(self.values)
        return max(1, round(self.quantile(rng.random() or 0.5)))

    def shifted(self, tokens: int) -> LengthDist:
        """The same distribution less `tokens` per request (the cached prefix); the mean stays at least 1."""
        if self.kind == "empirical":
            return LengthDist("empirical", self.mean - tokens, values=tuple(v - tokens for v in self.values))
        return LengthDist(self.kind, max(self.mean - tokens, 1.0), self.cv)

    @property
    def label(self) -> str:
        """How the distribution reads in outputs: 'fixed', 'exponential', 'lognormal:0.5', 'trace'."""
        return {"lognormal": f"lognormal:{self.cv:g}", "empirical": "trace"}.get(self.kind, self.kind)


@functools.lru_cache(maxsize=256)
def _rounded_moment(kind: DistKind, mean: float, cv: float, k: int) -> float:
    """E[max(1, round(X))^k] for an exponential or lognormal X: each count to ROUNDED_UP_TO weighted by the mass
    that rounds to it (1 takes everything below 1.5), the continuous law's partial moment past it."""
    below, total = 0.0, 0.0
    for t in range(1, ROUNDED_UP_TO + 1):
        upper = _cdf(kind, mean, cv, t + 0.5)
        total += t**k * (upper - below)
        below = upper
    return total + _tail_moment(kind, mean, cv, k, ROUNDED_UP_TO + 0.5)


def _cdf(kind: DistKind, mean: float, cv: float, x: float) -> float:
    """P(X <= x), x > 0: exponential 1 - e^(-x/m); lognormal Phi((ln x - mu) / sigma)."""
    if kind == "exponential":
        return -math.expm1(-x / mean)
    s = math.sqrt(math.log1p(cv**2))
    return NormalDist().cdf((math.log(x) - math.log(mean) + s * s / 2) / s)


def _tail_moment(kind: DistKind, mean: float, cv: float, k: int, x: float) -> float:
    """E[X^k; X > x]: exponential, the incomplete gamma e^(-x/m) sum_i k! / i! x^i m^(k-i); lognormal,
    E[X^k] Phi((mu + k sigma^2 - ln x) / sigma)."""
    if kind == "exponential":
        return math.exp(-x / mean) * sum(math.factorial(k) / math.factorial(i) * x**i * mean ** (k - i)
                                         for i in range(k + 1))  # fmt: skip
    s2 = math.log1p(cv**2)
    mu = math.log(mean) - s2 / 2
    return math.exp(k * mu + k * k * s2 / 2) * NormalDist().cdf((mu + k * s2 - math.log(x)) / math.sqrt(s2))


@dataclass(frozen=True, slots=True)
class Traffic:
    """Open loop (Poisson arrivals at `rate_rps`) or closed loop (`concurrency` users), with request lengths.

    `prompt` is the distribution of the prompt beyond the cached prefix (what prefill computes); the full
    prompt is `cached_prefix_tokens` + that. `arrivals_s` holds a trace's arrival times for the simulation.
    `pairs` holds a trace's requests as (prompt beyond the prefix, output), in arrival order where it gives times:
    the joint law of the two lengths (a long prompt with a short answer is not a long prompt with a long one), which
    the decode context weighs and the simulation draws from; empty for lengths given as two separate laws.
    """

    prompt: LengthDist
    output: LengthDist
    rate_rps: float | None = None
    concurrency: int | None = None
    think_time_s: float = 0.0
    cached_prefix_tokens: int = 0
    arrivals_s: tuple[float, ...] = ()
    client_rtt_s: float = CLIENT_RTT_S  # closed loop: last token to the next request's send
    pairs: tuple[tuple[int, int], ...] = ()

    @property
    def prompt_mean_tokens(self) -> float:
        """Mean full prompt (cached prefix included): what input tokens are counted and priced as."""
        return self.prompt.mean + self.cached_prefix_tokens

    def scaled(self, factor: float) -> Traffic:
        """The same traffic at `factor` times the load (rate or users)."""
        if self.rate_rps is not None:
            return replace(self, rate_rps=self.rate_rps * factor)
        return replace(self, concurrency=max(1, round((self.concurrency or 1) * factor)))


@dataclass(frozen=True, slots=True)
class Slo:
    """A latency objective: the `quantile` of `metric` at most `seconds` (e.g. p90 TTFT <= 0.5 s)."""

    metric: Literal["ttft", "tpot", "e2e", "itl"]
    percentile: str  # p50, p90, p95, p99
    seconds: float

    @property
    def quantile(self) -> float:
        """0.5, 0.9, 0.95 or 0.99."""
        return QUANTILES[self.percentile]

    @property
    def label(self) -> str:
        """ttft_p90, as on the command line."""
        return f"{self.metric}_{self.percentile}"


def parse_duration(text: str, flag: str, *, allow_zero: bool = False) -> float:
    """'500ms', '2s', '250us' -> seconds; a bare number is refused (a unit is required), but for 0 where
    `allow_zero` (a think time: 0 needs no unit)."""
    value = text.strip().lower()
    if allow_zero and value == "0":
        return 0.0
    low = "0 or above" if allow_zero else "above 0"
    for suffix, scale in (("ms", 1e-3), ("us", 1e-6), ("s", 1.0)):
        if value.endswith(suffix):
            try:
                seconds = float(value.removesuffix(suffix)) * scale
            except ValueError:
                break
            if not (math.isfinite(seconds) and (seconds >= 0 if allow_zero else seconds > 0) and seconds <= 86_400):
                raise UsageError(f"{flag}: {text!r} must be {low} and at most 1 day")
            return seconds
    raise UsageError(f"{flag}: {text!r} is not a duration; give a number with a unit: 500ms, 2s, 250us")


def parse_slo(text: str, flag: str = "--slo") -> Slo:
    """'ttft_p90=500ms' -> Slo('ttft', 'p90', 0.5); `flag` names the input in a refusal (the API's `slos`)."""
    key, sep, value = text.partition("=")
    metric, _, pct = key.strip().lower().partition("_")
    if not sep or metric not in METRICS or pct not in QUANTILES:
        raise UsageError(
            f"{flag}: {text!r} is not METRIC_PCT=VALUE with METRIC in {', '.join(METRICS)} and PCT in "
            f"{', '.join(QUANTILES)} (e.g. ttft_p90=500ms, tpot_p99=50ms, itl_p99=200ms, e2e_p50=10s)"
        )
    return Slo(metric, pct, parse_duration(value, flag))  # type: ignore[arg-type]


def parse_dist(text: str, mean: float, flag: str) -> LengthDist:
    """'fixed' | 'exponential' | 'lognormal:CV' around `mean` tokens."""
    kind, _, arg = text.strip().lower().partition(":")
    if kind == "fixed" and not arg:
        return LengthDist("fixed", mean)
    if kind == "exponential" and not arg:
        return LengthDist("exponential", mean)
    if kind == "lognormal":
        try:
            cv = float(arg)
        except ValueError:
            cv = -1.0
        if not 0 < cv <= 10:
            raise UsageError(f"{flag}: lognormal needs a CV above 0 and at most 10, e.g. lognormal:0.5 (got {text!r})")
        return LengthDist("lognormal", mean, cv)
    raise UsageError(f"{flag}: {text!r} is not one of fixed, exponential, lognormal:CV")
