"""The probability pieces of the closed form: Pollaczek-Khinchine, exponential and gamma tails, quantiles.

- M/G/1 (Poisson arrivals, any service time S, one server, FCFS): P(wait > 0) = rho = lambda E[S], and
  E[W] = lambda E[S^2] / (2 (1 - rho)) (Pollaczek-Khinchine; with fixed S it is M/D/1's rho S / (2 (1 - rho)),
  the formula DistServe uses for its prefill queue), E[W^2] = 2 E[W]^2 + lambda E[S^3] / (3 (1 - rho))
  (Takacs). The wait of a request that does wait is read as a gamma with those two moments: exponential
  for M/M/1 (exact there, and Kingman's heavy-traffic limit for any M/G/1), lighter-tailed for steady
  service such as fixed prompt lengths, where an exponential with the same mean overstates p99.
- A sum with a known mean, variance and third central moment (a request's TPOT over its decode steps, its
  E2E) is read as a shifted gamma with those three moments: skewed like the sums of rare, long prefill
  steps it comes from, and normal when the skew vanishes.
- Erlang C (M/M/c): the chance an arrival finds all c servers busy, from Erlang B written with the Poisson
  distribution, B = P(Poisson(a) = c) / P(Poisson(a) <= c), so it costs one incomplete gamma, not c steps;
  C = B / (1 - (a / c) (1 - B)). The engine's cap on running sequences is c slots, each held for a request's life.
- Quantiles of mixtures by bisection on the tail probability.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass

EPS = 1e-12
NORMAL_SHAPE = 1e4  # gamma shapes above this are read as normal
QUANTILE_TOLERANCE = 1e-7  # relative width of the bracket at which a percentile's search stops
EXACT_COUNT = 10.0  # prompts a step's arrivals are summed count by count up to (then one shifted gamma)
FIXED_SIZE_VAR = 1e-9  # a size variance under this share of m1^2 is a rounding's: fixed sizes
SPITZER_EXACT_TERMS = 48  # steps of Spitzer's sums taken one by one; the rest integrated over ln n
SPITZER_LOG_STEP = 0.02  # ... in steps of 2% in n
SPITZER_LOG_POINTS = 2_000  # ... at most (to n = 48 e^40: every walk short of a full budget has faded by then)
TAIL_SDS = 12.0  # a term-by-term sum of a count's chances stops this many standard deviations past the mean
POISSON_SUM_MEAN = 500.0  # a Poisson count's terms are summed to this mean (exp(-745) underflows), its gamma past it
# a backlog's chance under which a mean lost to rounding is dropped: Wilson-Hilferty's tails (error < 1e-3 of the
# chance, not of its far tail) cancel to the wrong sign there (Llama-3.2-1B, 200-token prompts at 983 req/s in
# 8,192-token chunks: 3.5e-11, priced as a backlog without end, an infinite TTFT at 0.28 of the budget)
RARE_BACKLOG = 1e-6
# a walk whose Chernoff exponent passes this has a backlog's chance under e^-35 = 6e-16, below the 1e-12 the sums
# drop anyway: step_backlog answers none without them (most of a plan's time where prompts are short against the chunk)
NO_BACKLOG_EXPONENT = 35.0
WILSON_HILFERTY_SHAPE = 30.0  # above it the gamma tail comes from Wilson-Hilferty's cube-root normal (error < 1e-3)


@dataclass(frozen=True, slots=True)
class Moments:
    """Mean, variance and third central moment of a random time; independent sums add them."""

    mean: float
    var: float = 0.0
    mu3: float = 0.0

    def __add__(self, other: Moments) -> Moments:
        return Moments(self.mean + other.mean, self.var + other.var, self.mu3 + other.mu3)

    @property
    def raw2(self) -> float:
        """E[X^2] = var + mean^2."""
        return self.var + self.mean**2

    @property
    def raw3(self) -> float:
        """E[X^3] = mu3 + 3 mean var + mean^3."""
        return self.mu3 + 3 * self.mean * self.var + self.mean**3

    @property
    def mean_residual(self) -> float:
        """E[X^2] / (2 E[X]): what is left, on average, of a service in progress at a time-random moment (M/G/1's);
        0 for a variable that is always 0."""
        return self.raw2 / (2 * self.mean) if self.mean > 0 else 0.0

    def scaled(self, factor: float) -> Moments:
        """factor x the variable."""
        return Moments(self.mean * factor, self.var * factor**2, self.mu3 * factor**3)

    @staticmethod
    def from_raw(mean: float, raw2: float, raw3: float) -> Moments:
        """From E[X], E[X^2], E[X^3] (the variance kept at 0 or above against rounding)."""
        return Moments(mean, max(raw2 - mean**2, 0.0), raw3 - 3 * mean * raw2 + 2 * mean**3)

    @staticmethod
    def uniform(width: float) -> Moments:
        """Uniform on [0, width]."""
        return Moments(width / 2, width**2 / 12, 0.0)

    @staticmethod
    def exponential(mean: float) -> Moments:
        """Exponential with this mean."""
        return Moments(mean, mean**2, 2 * mean**3)

    @staticmethod
    def gamma(mean: float, shape: float) -> Moments:
        """Gamma with this mean and shape."""
        return Moments(mean, mean**2 / shape, 2 * mean**3 / shape**2)

    @staticmethod
    def gamma_capped(mean: float, shape: float, cap: float) -> Moments:
        """min(X, cap) for X gamma with this mean and shape (scale t = mean / shape, x = cap / t): E[min(X, cap)^j] =
        k (k + 1) ... (k + j - 1) t^j P(Gamma(k + j) < x) + cap^j P(Gamma(k) > x), the gamma's j-th moment below the
        cap and the cap itself past it (the whole gamma when the cap is infinite)."""
        if mean <= 0:
            return Moments(0.0)
        if math.isinf(cap):
            return Moments.gamma(mean, shape)
        scale = mean / shape
        x, past = cap / scale, gamma_tail(shape, cap / scale)

        def raw(j: int) -> float:
            rising = math.prod(shape + i for i in range(j))
            return rising * scale**j * (1 - gamma_tail(shape + j, x)) + cap**j * past

        return Moments.from_raw(raw(1), raw(2), raw(3))

    @staticmethod
    def mixture(parts: list[tuple[float, Moments]]) -> Moments:
        """The variable that is parts[i][1] with probability parts[i][0] (weights summing to 1)."""
        raw = [0.0, 0.0, 0.0]
        for w, m in parts:
            raw[0] += w * m.mean
            raw[1] += w * m.raw2
            raw[2] += w * m.raw3
        return Moments.from_raw(*raw)


def poisson_pmf(mean: float, terms: int) -> list[float]:
    """P(k) of a Poisson count for k < terms, by the recurrence P(k + 1) = P(k) mean / (k + 1)."""
    out = [math.exp(-mean)]
    for k in range(terms - 1):
        out.append(out[-1] * mean / (k + 1))
    return out


def count_terms(mean: float, sd: float) -> int:
    """Terms of a count's chances a term-by-term sum takes: to TAIL_SDS standard deviations past its mean, and 20."""
    return math.ceil(mean + TAIL_SDS * sd + 20)


def poisson_above(mean: float, count: int) -> float:
    """P(K > count) of a Poisson(mean) count: one minus its terms to `count`, summed no further than TAIL_SDS standard
    deviations past the mean (a 2-token prompt's room in an 8,192-token step is 4,095 prompts: 88,000 such sums of
    4,096 terms took 80 s of one plan); past POISSON_SUM_MEAN, where exp(-mean) underflows and the sum said 1 at any
    count, the same chance as a gamma's: P(K > n) = P(Gamma(n + 1) <= mean)."""
    if mean > POISSON_SUM_MEAN:
        return 1.0 - gamma_tail(count + 1, mean)
    terms = min(count + 1, count_terms(mean, math.sqrt(mean)))
    return max(1.0 - sum(poisson_pmf(mean, terms)), 0.0)


def pollaczek_khinchine_wait(rate: float, service: Moments, utilization: float | None = None) -> float:
    """Mean wait in M/G/1: lambda E[S^2] / (2 (1 - u)); infinite at or past saturation (u >= 1).

    u is the server's utilization, lambda E[S] unless given: a batching server whose queued requests cost less than
    the one in service (prompts packed into a step the decodes run anyway) drains its queue at its own rate.
    """
    u = rate * service.mean if utilization is None else utilization
    if u >= 1:
        return math.inf
    return rate * service.raw2 / (2 * (1 - u))


def wait_given_waiting(rate: float, service: Moments, utilization: float | None = None) -> tuple[float, float]:
    """(mean, gamma shape) of the M/G/1 wait of a request that waits, from its first two moments.

    E[W] is Pollaczek-Khinchine's; E[W^2] = 2 E[W]^2 + lambda E[S^3] / (3 (1 - u)) (Takacs). Given W > 0
    (probability rho = lambda E[S], at most 1) the mean is E[W] / rho and the second moment E[W^2] / rho; a gamma
    with those two moments is exponential (shape 1) for M/M/1 and lighter-tailed for steadier service (M/D/1:
    shape > 1).
    """
    rho = min(rate * service.mean, 1.0)
    u = rho if utilization is None else utilization
    wait = pollaczek_khinchine_wait(rate, service, u)
    if rho <= 0 or not math.isfinite(wait):
        return (0.0 if rho <= 0 else math.inf), 1.0
    raw3 = service.raw3
    second = 2 * wait**2 + rate * raw3 / (3 * (1 - u))
    mean = wait / rho
    var = second / rho - mean**2
    return mean, (mean**2 / var if var > 0 else NORMAL_SHAPE)


Part = tuple[float, float, float, float]  # (weight, gamma shape (inf: a point), scale, shift)


def _count_sum(count: float, m1: float, m2: float, m3: float, exact: bool) -> list[Part]:
    """The work of a Poisson(count) number of prompts (raw size moments m1, m2, m3) as (weight, gamma shape, scale,
    shift) parts: one per count j where the count is small (fixed sizes: a point at j m1; else a gamma of j times one
    prompt's shape), one shifted gamma of the whole compound Poisson where it is large, matching its three cumulants
    count m1, count m2, count m3 (the lattice of fixed sizes fades; an unshifted gamma had overstated its skew, and the
    backlog jumped 14% where one switched to the other)."""
    var1 = m2 - m1 * m1
    fixed = var1 <= FIXED_SIZE_VAR * m1 * m1  # (a rounding's worth of variance is no spread)
    if not exact:
        k2, k3 = count * m2, count * (m1**3 if fixed else m3)
        shape = 4 * k2**3 / k3**2
        scale = k3 / (2 * k2)
        return [(1.0, shape, scale, count * m1 - shape * scale)]
    parts = []
    for j, weight in enumerate(poisson_pmf(count, int(count + 8 * math.sqrt(count) + 8))):
        if j and weight > 1e-15:
            parts.append((weight, math.inf, j * m1, 0.0) if fixed else (weight, j * m1 * m1 / var1, var1 / m1, 0.0))
    return parts


def _tail_moments(shape: float, scale: float, shift: float, t: float) -> tuple[float, float, float]:
    """(P(G > t), E[G 1{G > t}], E[G^2 1{G > t}]) for G = shift + Gamma(shape, scale), or the point `scale` (shape
    inf)."""
    if math.isinf(shape):
        return (1.0, scale, scale * scale) if scale > t else (0.0, 0.0, 0.0)
    x = (t - shift) / scale
    p = gamma_tail(shape, x)
    if 0 < x < math.inf and shape + 2 < WILSON_HILFERTY_SHAPE:
        # Q(a + 1, x) = Q(a, x) + x^a e^-x / Gamma(a + 1): the next two tails from the first, one series, not three
        # (a plan with long-tailed prompts spent 3/4 of its time in these three calls: 20 -> 34 s when TTFT took
        # the queue of steps, Spitzer's sums of them)
        log_x = math.log(x)
        q1 = min(1.0, p + math.exp(shape * log_x - x - math.lgamma(shape + 1)))
        q2 = min(1.0, q1 + math.exp((shape + 1) * log_x - x - math.lgamma(shape + 2)))
    else:  # (Wilson-Hilferty's tails past shape 30 are each their own approximation: no recurrence between them)
        q1, q2 = gamma_tail(shape + 1, x), gamma_tail(shape + 2, x)
    e1 = shape * scale * q1
    e2 = shape * (shape + 1) * scale**2 * q2
    return p, shift * p + e1, shift * shift * p + 2 * shift * e1 + e2


def _part_moments(shape: float, scale: float, shift: float) -> tuple[float, float]:
    """(E[G], E[G^2]) for G = shift + Gamma(shape, scale), or the point `scale` (shape inf): one _count_sum part."""
    if math.isinf(shape):
        return scale, scale * scale
    mean = shift + shape * scale
    return mean, mean * mean + shape * scale * scale


def _chernoff_exponent(count: float, m1: float, m2: float, m3: float, budget: float) -> float:
    """c with P(S_n > 0) <= e^(-n c) for every n, S_n as _walk_terms prices it: Chernoff's bound inf over theta of
    E[e^(theta S_n)] = e^(n g(theta)), one exponent per step since n steps' work is n times one step's in either of
    _count_sum's laws (a compound Poisson of fixed or gamma sizes; a shifted gamma whose shape and shift grow with n):
    the smaller of their two, each at its closed-form optimum."""
    var1 = m2 - m1 * m1
    load = count * m1 / budget  # < 1 (step_backlog's caller checks it)
    if var1 <= FIXED_SIZE_VAR * m1 * m1:  # g = count (e^(theta m1) - 1) - theta budget
        exact = budget / m1 * (math.log(1 / load) - 1) + count
        k3 = count * m1**3
    else:  # g = count ((1 - s theta)^-k - 1) - theta budget, sizes gamma(k = m1^2 / var, s = var / m1)
        k, s = m1 * m1 / var1, var1 / m1
        root = load ** (1 / (k + 1))  # (1 - s theta*) at g' = 0
        exact = budget * (1 - root) / s - count * (root**-k - 1)
        k3 = count * m3
    k2 = count * m2  # the shifted gamma of one step's work: shape a, scale b, shift d (its 3 cumulants)
    a, b = 4 * k2**3 / k3**2, k3 / (2 * k2)
    d = count * m1 - a * b
    room = budget - d  # > a b, the mean's excess over the shift
    gamma = (room - a * b) / b - a * math.log(room / (a * b))  # -g at 1 - b theta* = a b / room
    return min(exact, gamma)


def _walk_terms(
    n: float, count: float, moments: tuple[float, float, float], budget: float
) -> tuple[float, float, float]:
    """(P(S_n > 0), E[S_n+], E[(S_n+)^2]) for S_n = the work of Poisson(n count) prompts - n budget (_count_sum)."""
    t = n * budget
    q0 = q1 = q2 = 0.0
    for weight, shape, scale, shift in _count_sum(n * count, *moments, n * count <= EXACT_COUNT):
        p, e1, e2 = _tail_moments(shape, scale, shift, t)
        q0, q1, q2 = q0 + weight * p, q1 + weight * e1, q2 + weight * e2
    return q0, q1 - t * q0, q2 - 2 * t * q1 + t * t * q0


@functools.lru_cache(maxsize=4096)  # a percentile's search asks for the same state's backlog at every probe
def step_backlog(count: float, m1: float, m2: float, m3: float, budget: float) -> tuple[float, float, float]:
    """(P(a backlog), its mean given one, gamma shape) of the work left over at a step boundary in a server that takes
    up to `budget` a step: B' = max(B + A - budget, 0), A the work of a Poisson(count) number of prompts that arrive
    in a step (raw size moments m1, m2, m3).

    Spitzer's identity for the reflected random walk: P(B = 0) = exp(-sum_n P(S_n > 0) / n), and the j-th cumulant
    of B is sum_n E[(S_n+)^j] / n, S_n = A_1 + ... + A_n - n budget: n steps' arrivals, Poisson(n count) prompts
    (_count_sum: count by count while few, so fixed sizes keep their lattice: two 2,000-token prompts overflow a
    2,048-token step, one never does). Chunked prefill is such a server: a step takes every queued prompt token up
    to the chunk, so prompts that come back together share one step, and only what overflows it waits a step more
    (unlike M/G/1's one at a time).
    """
    if count <= 0 or m1 <= 0:
        return 0.0, 0.0, 1.0
    if count * m1 >= budget or not math.isfinite(count):
        return 1.0, math.inf, 1.0
    if _chernoff_exponent(count, m1, m2, m3, budget) > NO_BACKLOG_EXPONENT:
        return 0.0, 0.0, 1.0  # sum_n P(S_n > 0) / n <= -ln(1 - e^-c): a backlog rarer than any the sums below keep
    moments = (m1, m2, m3)
    log_p0 = c1 = c2 = 0.0
    for n in range(1, SPITZER_EXACT_TERMS + 1):  # the first steps one by one (the lattice of few prompts lives here)
        q0, e1, e2 = _walk_terms(n, count, moments, budget)
        log_p0, c1, c2 = log_p0 - q0 / n, c1 + e1 / n, c2 + e2 / n
    # the rest as an integral over u = ln n (sum_n g(n) ~ integral g(x) dx = integral x g(x) du), whose terms are
    # smooth there: near a full budget they fade only over thousands of steps, a few hundred points in u
    u, h = math.log(SPITZER_EXACT_TERMS + 0.5), SPITZER_LOG_STEP
    for _ in range(SPITZER_LOG_POINTS):
        q0, e1, e2 = _walk_terms(math.exp(u + h / 2), count, moments, budget)
        log_p0, c1, c2 = log_p0 - h * q0, c1 + h * e1, c2 + h * e2
        if q0 < 1e-12:
            break
        u += h
    p = -math.expm1(log_p0)
    if p <= 1e-12:
        return 0.0, 0.0, 1.0
    given = c1 / p  # E[B | B > 0]: B's mean c1, its variance c2 (the first two cumulants)
    if not given > 0:  # the sums cancel to rounding: E[S_n+] = E[S 1{S > t}] - t P(S > t) of far tails
        if p < RARE_BACKLOG:  # a rare backlog whose excess is below the tails' precision: none worth pricing
            return 0.0, 0.0, 1.0
        return 1.0, math.inf, 1.0  # a walk within rounding of a full budget: the backlog without end it nears
    var_given = (c2 + c1**2) / p - given**2
    # (near a full budget the second term cancels to rounding: a heavy-traffic backlog is about exponential)
    return p, given, given**2 / var_given if var_given > 0 else 1.0


def found_backlog(
    rate: float, share: float, prefill_step_s: float, chunk_step_s: float, work: tuple[float, float, float], chunk: int
) -> tuple[float, float, float]:
    """(chance, mean drain given one, gamma shape) of a backlog of prompt tokens, as an
    arrival at a uniform moment finds it, in a queue of steps (step_backlog): each step takes every queued token up
    to the chunk, so only what a step leaves over waits, not M/G/1's one prompt at a time. `share`: the time in steps
    carrying prefill, `work`: the raw moments of a prompt's packed work in tokens.
    - Of the steps that carry prefill, q = p / (1 - (1 - p) e^-mu) leave some over (mu: the prompts that come during
      a mean prefill step; the recursion's steps with nothing queued are decode steps); those are full chunks, Tc
      long, so they hold share q Tc / Tp of the time.
    - Once a backlog runs, every step is a full chunk: its arrivals come over Tc, not the mean prefill step, and that
      sets how much is left over (the drain, at Tc / C a token)."""
    if rate <= 0 or share <= 0 or prefill_step_s <= 0:
        return 0.0, 0.0, 1.0
    mu = rate * prefill_step_s
    p, tokens, shape = step_backlog(mu, *work, float(chunk))
    q = min(p / (1 - (1 - p) * math.exp(-mu)), 1.0) if p > 0 else 0.0
    _, running, running_shape = step_backlog(rate * chunk_step_s, *work, float(chunk))
    if math.isfinite(running) and running > 0:
        tokens, shape = running, running_shape
    return min(share * q * chunk_step_s / prefill_step_s, share), tokens * chunk_step_s / chunk, shape


def capped_sum_mean(count: float, m1: float, m2: float, m3: float, room: float) -> float:
    """E[min(A, room)]: A the work of a Poisson(count) number of prompts, as much of it as fits in `room` (the tokens
    that join a prompt's step up to the chunk: min(E[A], room) overstates it where one prompt fills it); a step with
    no prompt adds none, so it is capped_step_tokens' mean times the chance of one at least."""
    if room <= 0:
        return 0.0
    return -math.expm1(-count) * capped_step_tokens(count, m1, m2, m3, room)[0] if count > 0 else 0.0


@functools.lru_cache(maxsize=65536)  # every TTFT tail probe asks again for each prompt grid point's joiners
def capped_step_tokens(count: float, m1: float, m2: float, m3: float, budget: float) -> tuple[float, float]:
    """(mean, variance) of a step's prompt tokens, min(A, budget), given it carries a prompt at least: A the work of
    a Poisson(count) number of prompts (_count_sum), as a step-locked arrival finds the prefill step in progress."""
    some = -math.expm1(-count)
    if some <= 0 or m1 <= 0:
        return 0.0, 0.0
    if not math.isfinite(count):
        return budget, 0.0
    e1 = e2 = 0.0
    for weight, shape, scale, shift in _count_sum(count, m1, m2, m3, count <= EXACT_COUNT):
        p, over1, over2 = _tail_moments(shape, scale, shift, budget)
        mean, raw2 = _part_moments(shape, scale, shift)
        e1 += weight * (mean - over1 + budget * p)  # E[min(G, budget)]
        e2 += weight * (raw2 - over2 + budget * budget * p)
    e1, e2 = e1 / some, e2 / some  # (past EXACT_COUNT a step with no prompt has a chance under 1e-13)
    return e1, max(e2 - e1 * e1, 0.0)


@functools.lru_cache(maxsize=4096)  # every TTFT tail probe asks again for the state's prefill steps
def step_token_points(count: float, m1: float, m2: float, m3: float) -> tuple[tuple[float, float], ...]:
    """(chance, tokens) of a step's prompt tokens given one prompt at least, A the work of a Poisson(count) number of
    prompts: one point per count while few (each count's mean; fixed sizes keep their lattice), one past EXACT_COUNT."""
    some = -math.expm1(-count) if count > 0 else 0.0
    if some <= 0 or m1 <= 0 or not math.isfinite(count):
        return ()
    parts = _count_sum(count, m1, m2, m3, count <= EXACT_COUNT)
    total = sum(weight for weight, *_ in parts)
    return tuple((weight / total, _part_moments(shape, scale, shift)[0]) for weight, shape, scale, shift in parts)


def erlang_c(servers: float, offered: float) -> float:
    """P(wait) in M/M/c with c = `servers` and offered load a = `offered` (lambda x mean holding time); 1 at a >= c."""
    c, a = servers, offered
    if a <= 0:
        return 0.0
    if a >= c:
        return 1.0
    log_pmf = c * math.log(a) - a - math.lgamma(c + 1)  # P(Poisson(a) = c)
    cdf = gamma_tail(c + 1, a)  # P(Poisson(a) <= c) = Q(c + 1, a)
    if log_pmf < -700 or cdf <= 0:
        return 0.0
    b = min(math.exp(log_pmf) / cdf, 1.0)
    return b / (1 - (a / c) * (1 - b))


def gamma_plus_uniform_tail(s: float, mean: float, shape: float, width: float) -> float:
    """P(G + U > s) for G gamma with `mean` and `shape`, U uniform on [0, width], independent.

    (1/w) integral over [s - w, s] of P(G > x) dx, with the antiderivative of Q(k, y): y Q(k, y) - k Q(k+1, y).
    """
    if s == math.inf:
        return 0.0
    if s <= 0 or math.isinf(mean):  # a wait past saturation never ends: every finite s is exceeded
        return 1.0
    if mean <= EPS:
        return min(max((width - s) / width, 0.0), 1.0) if width > EPS else 0.0
    if math.isinf(shape):  # no spread: G is its mean, and G + U is uniform on [mean, mean + width]
        return min(max((mean + width - s) / width, 0.0), 1.0) if width > EPS else float(s < mean)
    scale = mean / shape
    if width <= EPS:
        return gamma_tail(shape, s / scale)

    def integral(x: float) -> float:  # integral_0^x P(G > u) du, x >= 0
        y = x / scale
        return scale * (y * gamma_tail(shape, y) - shape * gamma_tail(shape + 1, y) + shape)

    lo = s - width  # P(G > x) = 1 for x <= 0
    area = integral(s) - integral(max(lo, 0.0)) + max(-lo, 0.0)
    return min(max(area / width, 0.0), 1.0)


def exp_plus_uniform_tail(s: float, mean: float, width: float) -> float:
    """P(E + U > s) for E exponential with `mean` and U uniform on [0, width], independent."""
    if s <= 0:
        return 1.0
    if mean <= EPS:
        return min(max((width - s) / width, 0.0), 1.0) if width > EPS else 0.0
    if width <= EPS:
        return math.exp(-s / mean)
    if s >= width:  # (1/w) integral_0^w exp(-(s-u)/mean) du
        return mean / width * (math.exp(-(s - width) / mean) - math.exp(-s / mean))
    return ((width - s) + mean * (1 - math.exp(-s / mean))) / width


def normal_tail(z: float) -> float:
    """P(Z > z) for a standard normal."""
    return 0.5 * math.erfc(z / math.sqrt(2))


def gamma_tail(shape: float, x: float) -> float:
    """Regularized upper incomplete gamma Q(shape, x) = P(Gamma(shape, 1) > x)."""
    if math.isnan(x) or math.isnan(shape):  # neither series converges on NaN: a caller's 0/0, never a probability
        raise ArithmeticError(f"gamma_tail({shape}, {x}): NaN argument")
    if x <= 0:
        return 1.0
    if math.isinf(x):
        return 0.0
    if shape >= WILSON_HILFERTY_SHAPE:  # (X / k)^(1/3) is nearly normal: mean 1 - 1/(9k), variance 1/(9k)
        v = 1 / (9 * shape)
        return normal_tail(((x / shape) ** (1 / 3) - 1 + v) / math.sqrt(v))
    log_front = -x + shape * math.log(x) - math.lgamma(shape)
    if x < shape + 1:  # series for the lower part P: x^a e^-x / Gamma(a+1) * sum x^n / ((a+1)...(a+n))
        term = total = 1 / shape
        n = 0
        while abs(term) > total * 1e-14 and n < 10_000:
            n += 1
            term *= x / (shape + n)
            total += term
        return max(0.0, 1 - total * math.exp(log_front))
    # continued fraction for Q (modified Lentz), converging fast for x > a + 1
    tiny = 1e-300
    b = x + 1 - shape
    c, d = 1 / tiny, 1 / b
    h = d
    for i in range(1, 10_000):
        an = -i * (i - shape)
        b += 2
        d = an * d + b
        d = tiny if abs(d) < tiny else d
        c = b + an / c
        c = tiny if abs(c) < tiny else c
        d = 1 / d
        step = d * c
        h *= step
        if abs(step - 1) < 1e-14:
            break
    return min(1.0, math.exp(log_front) * h)


@dataclass(frozen=True, slots=True)
class ShiftedGamma:
    """shift + Gamma(shape, scale) matched to a mean, variance and third central moment (normal if unskewed)."""

    mean: float
    sd: float
    shape: float | None  # None: normal (or a point mass when sd == 0)
    scale: float
    shift: float

    @staticmethod
    def from_moments(m: Moments, floor: float = -math.inf) -> ShiftedGamma:
        """Match three moments: shape 4 / skew^2, scale sd x skew / 2, shift mean - shape x scale.

        A time has a physical least value (`floor`: a step with nothing else in it). When the three-moment fit
        (or a normal) would put mass below it, the gamma is refitted on two moments above the floor: shift =
        floor, shape (mean - floor)^2 / var, so a percentile never falls under what physics allows.
        """
        sd = math.sqrt(max(m.var, 0.0))
        if sd <= 1e-9 * max(abs(m.mean), EPS) or m.mean <= floor:
            return ShiftedGamma(max(m.mean, floor), 0.0, None, 0.0, max(m.mean, floor))
        skew = m.mu3 / sd**3
        shape = 4 / skew**2 if skew > 0 else math.inf
        if shape > NORMAL_SHAPE:
            shape, scale, shift = math.inf, 0.0, m.mean
        else:
            scale = sd * skew / 2
            shift = m.mean - shape * scale
        if shift - (3 * sd if shape == math.inf else 0.0) < floor:  # mass below the floor: above it instead
            excess = m.mean - floor
            return ShiftedGamma(m.mean, sd, excess**2 / m.var, m.var / excess, floor)
        return ShiftedGamma(m.mean, sd, None if shape == math.inf else shape, scale, shift)

    def tail(self, t: float) -> float:
        """P(X > t)."""
        if self.sd == 0.0:
            return 1.0 if t < self.mean else 0.0
        if self.shape is None:
            return normal_tail((t - self.mean) / self.sd)
        return gamma_tail(self.shape, (t - self.shift) / self.scale)


def quantile(tail: Callable[[float], float], q: float, lo: float, hi: float) -> float:
    """The smallest t with tail(t) <= 1 - q, for a decreasing tail; [lo, hi] is widened until it brackets."""
    target = 1 - q
    if not (math.isfinite(lo) and math.isfinite(hi)):  # a wait that never ends (past saturation): no finite quantile
        return math.inf
    while tail(lo) <= target and lo > 0:
        lo /= 2
    if tail(lo) <= target:
        return lo
    hi = max(hi, lo * 2, EPS)
    for _ in range(200):
        if tail(hi) <= target:
            break
        hi *= 2
    else:  # still above the target 2^200 times past the guess: the mass beyond it never arrives
        return math.inf

    def below(t: float) -> float:  # increasing in t: negative while the tail is still above the target
        return target - tail(t)

    return regula_falsi(below, lo, hi, below(lo), below(hi), QUANTILE_TOLERANCE)[1]


def regula_falsi(
    g: Callable[[float], float],
    lo: float,
    hi: float,
    g_lo: float,
    g_hi: float,
    rel_width: float,
    g_tolerance: float = 0.0,
) -> tuple[float, float]:
    """The bracket [lo, hi] of an increasing g's sign change (g(lo) < 0 <= g(hi)) closed to rel_width of hi, or
    (x, x) at the first x with |g(x)| <= g_tolerance: regula falsi with the Illinois step (an end that stays has its
    g halved, so both ends close in; a step that rounds onto an end takes the midpoint). The same bracket bisection
    closes, in about a third of its evaluations of g."""
    side = 0
    for _ in range(100):
        if hi - lo <= rel_width * hi:
            break
        x = lo + (hi - lo) * g_lo / (g_lo - g_hi) if g_lo != g_hi else (lo + hi) / 2
        if not lo < x < hi:
            x = (lo + hi) / 2
        value = g(x)
        if abs(value) <= g_tolerance:
            return x, x
        if value < 0:
            lo, g_lo = x, value
            g_hi, side = (g_hi / 2 if side == -1 else g_hi), -1  # the high end stayed: halve its g
        else:
            hi, g_hi = x, value
            g_lo, side = (g_lo / 2 if side == 1 else g_lo), 1
    return lo, hi
