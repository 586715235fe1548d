"""The probability pieces of the closed form (serving/queueing.py) against textbook values and sampling."""

from __future__ import annotations

import math
import random

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from tiers import examples

from tokcost.serving.queueing import (  # the bound and the sums it stands in for
    EXACT_COUNT,
    NO_BACKLOG_EXPONENT,
    Moments,
    ShiftedGamma,
    _chernoff_exponent,
    _walk_terms,
    capped_step_tokens,
    capped_sum_mean,
    exp_plus_uniform_tail,
    gamma_plus_uniform_tail,
    gamma_tail,
    poisson_above,
    pollaczek_khinchine_wait,
    quantile,
    step_backlog,
    wait_given_waiting,
)


def test_gamma_tail_matches_closed_forms():
    for x in (0.01, 0.5, 1, 3, 10, 40):
        assert gamma_tail(1, x) == pytest.approx(math.exp(-x), rel=1e-10)  # exponential
        assert gamma_tail(2, x) == pytest.approx((1 + x) * math.exp(-x), rel=1e-10)  # Erlang-2
        assert gamma_tail(3, x) == pytest.approx((1 + x + x * x / 2) * math.exp(-x), rel=1e-10)
        # shape 1/2: chi-square with 1 degree of freedom, P(Z^2 > 2x) = erfc(sqrt(x))
        assert gamma_tail(0.5, x) == pytest.approx(math.erfc(math.sqrt(x)), rel=1e-9)


@settings(max_examples=200, deadline=None)
@given(mean=st.floats(0.0, 900.0), count=st.integers(0, 5000))
def test_poisson_above_is_the_tail_of_the_count(mean, count):
    # by hand: one minus the terms to `count` (log-space, so nothing underflows), a sum no shortcut trims
    if mean == 0:
        assert poisson_above(mean, count) == 0.0
        return
    terms = [math.exp(k * math.log(mean) - mean - math.lgamma(k + 1)) for k in range(count + 1)]
    exact = max(1.0 - math.fsum(terms), 0.0)
    tolerance = 1e-3 if mean > 500 else 1e-12  # past 500 the gamma form, Wilson-Hilferty's where its shape is large
    assert poisson_above(mean, count) == pytest.approx(exact, abs=tolerance)


def test_poisson_above_does_not_underflow():
    # exp(-900) is 0 in a double: the term-by-term sum had said every count is exceeded (a chance of 1)
    assert poisson_above(900.0, 1000) < 1e-3
    assert poisson_above(900.0, 800) > 0.999
    assert poisson_above(2.5, 4095) < 1e-15 and poisson_above(0.5, 0) == pytest.approx(1 - math.exp(-0.5))


def test_pollaczek_khinchine_m_d_1_and_m_m_1():
    # M/D/1 with S = 0.1 s at lambda = 6/s: rho 0.6, W = rho S / (2 (1 - rho)) = 0.075 s
    assert pollaczek_khinchine_wait(6, Moments(0.1)) == pytest.approx(0.075)
    # M/M/1 with mean 0.1 s (E[S^2] = 0.02): W = rho / (mu - lambda) = 0.6 / 4 = 0.15 s
    assert pollaczek_khinchine_wait(6, Moments.exponential(0.1)) == pytest.approx(0.15)
    assert pollaczek_khinchine_wait(10, Moments(0.1)) == math.inf


def test_takacs_gives_exponential_for_m_m_1_and_lighter_for_m_d_1():
    mean, shape = wait_given_waiting(6, Moments.exponential(0.1))
    assert mean == pytest.approx(0.25)  # E[W | W > 0] = 1 / (mu - lambda)
    assert shape == pytest.approx(1.0)
    mean, shape = wait_given_waiting(6, Moments(0.1))
    assert mean == pytest.approx(0.075 / 0.6)
    assert shape > 1  # steadier service, lighter tail


def test_gamma_plus_uniform_tail_by_sampling():
    rng = random.Random(7)
    for mean, shape, width, s in [(1, 1, 0.5, 0.7), (2, 3, 1, 2.5), (1, 0.5, 2, 0.3), (1, 5, 0.1, 1.2)]:
        n = 100_000
        hits = sum(rng.gammavariate(shape, mean / shape) + rng.random() * width > s for _ in range(n))
        assert gamma_plus_uniform_tail(s, mean, shape, width) == pytest.approx(hits / n, abs=0.006)
    # shape 1 is the exponential case
    for s in (0.1, 0.4, 0.9, 3):
        assert gamma_plus_uniform_tail(s, 0.7, 1.0, 0.5) == pytest.approx(exp_plus_uniform_tail(s, 0.7, 0.5))


@settings(max_examples=examples(50), deadline=None)
@given(
    a=st.tuples(st.floats(0, 10), st.floats(0, 5), st.floats(-5, 5)),
    b=st.tuples(st.floats(0, 10), st.floats(0, 5), st.floats(-5, 5)),
    w=st.floats(0, 1),
)
def test_mixture_moments_match_direct_raw_moments(a, b, w):
    ma, mb = Moments(*a), Moments(*b)
    mix = Moments.mixture([(w, ma), (1 - w, mb)])

    def raw(m: Moments, k: int) -> float:
        return [m.mean, m.var + m.mean**2, m.mu3 + 3 * m.mean * m.var + m.mean**3][k - 1]

    for k in (1, 2, 3):
        assert raw(mix, k) == pytest.approx(w * raw(ma, k) + (1 - w) * raw(mb, k), rel=1e-9, abs=1e-9)


def test_shifted_gamma_keeps_three_moments():
    m = Moments(2.0, 0.25, 0.05)
    g = ShiftedGamma.from_moments(m)
    assert g.shape is not None
    assert g.shift + g.shape * g.scale == pytest.approx(2.0)
    assert g.shape * g.scale**2 == pytest.approx(0.25)
    assert 2 * g.shape * g.scale**3 == pytest.approx(0.05)
    # a point mass and a normal are the limits
    assert ShiftedGamma.from_moments(Moments(1.0)).tail(0.999) == 1.0
    assert ShiftedGamma.from_moments(Moments(1.0)).tail(1.001) == 0.0
    assert ShiftedGamma.from_moments(Moments(1.0, 0.04)).tail(1.0) == pytest.approx(0.5)


def test_quantile_inverts_a_tail():
    q90 = quantile(lambda t: math.exp(-t / 0.2), 0.9, 0.01, 0.02)  # exponential, mean 0.2
    assert q90 == pytest.approx(0.2 * math.log(10), rel=1e-6)


def test_tails_and_quantiles_of_waits_that_never_end():
    # past saturation a wait's mean is infinite: every finite time is exceeded, and no quantile is finite
    assert gamma_plus_uniform_tail(5.0, math.inf, 1.0, 0.1) == 1.0
    assert gamma_plus_uniform_tail(math.inf, 0.2, 2.0, 0.1) == 0.0
    assert gamma_tail(2.0, math.inf) == 0.0
    assert quantile(lambda t: 1.0, 0.9, math.inf, math.inf) == math.inf
    assert quantile(lambda t: 1.0, 0.9, 1.0, 2.0) == math.inf  # never brackets: the mass lies beyond any time
    with pytest.raises(ArithmeticError):  # a caller's 0/0 is a bug to see, never a probability of 1
        gamma_tail(1.0, math.nan)


def test_a_gamma_without_spread_plus_a_uniform_is_the_uniform_shifted():
    # shape -> inf: the gamma is its mean, so G + U is uniform on [mean, mean + width]
    assert gamma_plus_uniform_tail(0.25, 0.2, math.inf, 0.1) == pytest.approx(0.5)
    assert gamma_plus_uniform_tail(0.1, 0.2, math.inf, 0.1) == 1.0
    assert gamma_plus_uniform_tail(0.35, 0.2, math.inf, 0.1) == 0.0


def _flat_step(fills: list[float]) -> list[float]:
    return [0.010 for _ in fills]  # a step bound by reading the weights: 10 ms whatever it carries


@pytest.mark.parametrize("wait_mean, shape", [(1e3, 1.0), (1e5, 1.0), (1e5, 0.5), (1e5, 4.0)])
def test_a_prompt_behind_an_endless_backlog_runs_in_a_full_step(wait_mean, shape):
    from tokcost.serving.sharing import Joiners, step_share

    # 200-token prompts, 2,048-token budget: 10 joiners fill its step. After a wait with 1,000 or more joiners on
    # average, the chance that fewer than 10 came is under 1% for these shapes, so its share is l / C = 200 / 2048
    # and it accounts for that share of the step (a normal's lower node would clamp to no joiner: alone 1 time in 6)
    e, s = step_share(200, 2048, 200.0, Joiners(0.0, wait_mean, shape), _flat_step)
    assert e == pytest.approx(200 / 2048, rel=0.02) and s == pytest.approx(0.010 * 200 / 2048, rel=0.02)


def test_a_poisson_count_of_joiners_keeps_its_normal_nodes():
    from tokcost.serving.sharing import Joiners, step_share

    # 100 joiners of 1 token on average, no wait: the step holds 1 + k tokens, k ~ Poisson(100) ~ N(100, 10);
    # the share of a 1-token prompt is E[1 / (1 + k)] ~ 1 / 101 (1 + 100 / 101^2) by the delta method
    e, _ = step_share(1, 8192, 1.0, Joiners(100.0), _flat_step)
    assert e == pytest.approx(1 / 101 * (1 + 100 / 101**2), rel=0.01)


@settings(max_examples=examples(40), deadline=None)
@given(st.floats(0.01, 10.0), st.floats(0.0, 50.0))
def test_a_capped_exponential_keeps_what_lies_under_its_cap(mean, cap):
    # shape 1: E[min(X, c)] = mean (1 - e^-x), E[min(X, c)^2] = 2 mean^2 (1 - e^-x (1 + x)), x = c / mean: by parts
    x = cap / mean
    m = Moments.gamma_capped(mean, 1.0, cap)
    assert m.mean == pytest.approx(mean * -math.expm1(-x), rel=1e-9, abs=1e-12)
    assert m.raw2 == pytest.approx(2 * mean**2 * (1 - math.exp(-x) * (1 + x)), rel=1e-6, abs=1e-9)
    assert 0 <= m.mean <= min(mean, cap) + 1e-12 and m.var <= Moments.exponential(mean).var + 1e-12
    # no cap: the exponential itself
    whole, exponential = Moments.gamma_capped(mean, 1.0, math.inf), Moments.exponential(mean)
    assert (whole.mean, whole.var, whole.mu3) == pytest.approx((exponential.mean, exponential.var, exponential.mu3))


@pytest.mark.parametrize("shape", [0.05, 0.5, 1.0, 4.0])
def test_a_capped_gamma_by_sampling(shape):
    pick = random.Random(5)
    xs = [min(pick.gammavariate(shape, 2.0 / shape), 3.0) for _ in range(200_000)]
    mean = sum(xs) / len(xs)
    var = sum((x - mean) ** 2 for x in xs) / len(xs)
    mu3 = sum((x - mean) ** 3 for x in xs) / len(xs)
    m = Moments.gamma_capped(2.0, shape, 3.0)
    assert (m.mean, m.var, m.mu3) == pytest.approx((mean, var, mu3), rel=0.03, abs=0.01)


def _lindley(count: float, draw, budget: float, steps: int, seed: int) -> tuple[float, float, float]:
    """P(B > 0), E[B | B > 0] and E[B^2 | B > 0] of B' = max(B + A - budget, 0) by running it: A the work of a
    Poisson(count) number of prompts a step, each `draw(rng)` tokens."""
    rng, backlog, left = random.Random(seed), 0.0, []
    for _ in range(steps):
        n, t = 0, rng.expovariate(1.0)  # a Poisson count from unit-rate exponential gaps
        while t < count:
            n, t = n + 1, t + rng.expovariate(1.0)
        backlog = max(backlog + sum(draw(rng) for _ in range(n)) - budget, 0.0)
        left.append(backlog)
    some = [b for b in left[steps // 10 :] if b > 0]
    share = len(some) / (steps - steps // 10)
    return share, sum(some) / len(some), sum(b * b for b in some) / len(some)


@pytest.mark.parametrize(
    ("count", "size", "budget", "law"),
    [
        (0.43, 2000, 2048, "fixed"),
        (4.06, 1000, 8192, "exponential"),
        (0.6, 3000, 2048, "exponential"),
        (12, 600, 8192, "fixed"),
    ],  # (past EXACT_COUNT prompts a step: one shifted gamma of three cumulants)
)
def test_a_queue_of_steps_leaves_over_what_spitzer_says(count, size, budget, law):
    # Spitzer's identity (P(B = 0) = exp(-sum P(S_n > 0) / n), cumulants sum E[(S_n+)^j] / n) against the recursion
    # itself: fixed sizes keep their lattice (one 2,000-token prompt never overflows 2,048, two always do)
    m2, m3 = (size**2, size**3) if law == "fixed" else (2 * size**2, 6 * size**3)
    p, given, shape = step_backlog(count, size, m2, m3, budget)

    def draw(rng: random.Random) -> float:
        return size if law == "fixed" else rng.expovariate(1 / size)

    share, mean, raw2 = _lindley(count, draw, budget, 200_000, seed=5)
    assert p == pytest.approx(share, rel=0.05)
    assert given == pytest.approx(mean, rel=0.05)
    assert given**2 / shape + given**2 == pytest.approx(raw2, rel=0.12)  # the gamma keeps the second moment


def test_a_queue_of_steps_does_not_jump_where_its_arrivals_turn_into_one_gamma():
    # count by count up to EXACT_COUNT prompts a step, one shifted gamma past it: the two agree on three cumulants, so
    # the backlog moves by a few percent across the switch (an unshifted gamma, too skewed, had jumped 14%)
    below, above = (step_backlog(EXACT_COUNT + d, 600, 600**2, 600**3, 8192) for d in (-0.01, 0.01))
    assert above[0] == pytest.approx(below[0], rel=0.06) and above[1] == pytest.approx(below[1], rel=0.06)


def test_a_queue_of_steps_is_empty_without_work_and_endless_at_its_budget():
    assert step_backlog(0.0, 1000, 2e6, 6e9, 2048) == (0.0, 0.0, 1.0)
    assert step_backlog(2.1, 1000, 2e6, 6e9, 2048)[1] == math.inf  # more work a step than the budget: no end


@pytest.mark.parametrize("gap", [1e-3, 1e-6, 1e-9, 1e-12])
def test_a_queue_of_steps_within_rounding_of_its_budget_is_long_or_endless_never_negative(gap):
    # four fixed 2,048-token prompts a step in an 8,192-token chunk, a hair under the budget: the walk's sums cancel to
    # rounding, and a backlog of -3.7 million tokens had reached the step sharing (Llama-3.1-70B on 4 x H100, the
    # last steps' fixed point near saturation), where a joiner count's negative binomial turned complex
    p, given, shape = step_backlog(4 * (1 - gap), 2048, 2048**2, 2048**3, 8192)
    assert 0 < p <= 1 and shape > 0
    assert given == math.inf or given > 8192  # more than a step's worth waits: a queue that near its edge is long


def test_a_rare_backlog_far_below_the_budget_is_none_not_endless():
    # 983 req/s of fixed 200-token prompts over an 11.6 ms prefill step: 11.4 prompts a step, 2,278 tokens of an
    # 8,192-token chunk. Its tails come from Wilson-Hilferty's normal (shape 46), whose error in the 3.5e-11 tail
    # turned E[S+] = E[S 1{S > t}] - t P(S > t) negative, and the backlog read as endless: an infinite TTFT that
    # crashed `plan -m llama-3.2-1b -g h100-sxm --engine sglang --concurrency 300 --prompt 200 --output 200`
    assert step_backlog(11.392, 200, 200**2, 200**3, 8192) == (0.0, 0.0, 1.0)
    # a step overflows only when 41 or more prompts come where 11.4 are expected: P(Poisson(11.392) > 40) < 1e-10
    assert poisson_above(11.392, 40) < 1e-10


@settings(max_examples=examples(40), deadline=None)
@given(load=st.floats(0.05, 0.5), size=st.floats(50, 4000), budget=st.sampled_from([2048, 8192, 16384]),
       fixed=st.booleans())  # fmt: skip
def test_a_queue_of_steps_at_half_its_budget_or_less_has_a_finite_backlog(load, size, budget, fixed):
    m2, m3 = (size**2, size**3) if fixed else (2 * size**2, 6 * size**3)
    p, given, shape = step_backlog(load * budget / size, size, m2, m3, budget)
    assert 0 <= p < 1 and math.isfinite(given) and given >= 0 and shape > 0


def test_chernoffs_exponent_bounds_one_steps_overflow_by_hand():
    # fixed 20-token prompts, 5 a step, a 2,048-token chunk: overflow needs 103 prompts or more. Chernoff's bound
    # on the count at theta* = ln(2048 / 100) / 20 is e^-c, c = 2048 / 20 (ln(20.48) - 1) + 5 = 211.8; on the
    # shifted gamma that prices many steps (cumulants 2,000 and 40,000: shape 20, scale 10, shift -100, room 2,148)
    # c = (2148 - 200) / 10 - 20 ln(2148 / 200) = 147.3: the smaller holds for every n
    c = _chernoff_exponent(5.0, 20, 400, 8000, 2048)
    counted, shifted = 2048 / 20 * (math.log(2048 / 100) - 1) + 5, (2148 - 200) / 10 - 20 * math.log(2148 / 200)
    assert c == pytest.approx(min(counted, shifted), rel=1e-9) and shifted < counted
    assert poisson_above(5.0, 102) <= math.exp(-counted)
    # gamma sizes (shape 1: exponential, mean 1,000) at 1.5 a step in a 2,048 chunk: Chernoff's bound on a
    # compound Poisson of exponentials, checked against the walk's own first term
    c = _chernoff_exponent(1.5, 1000, 2e6, 6e9, 2048)
    root = (1.5 * 1000 / 2048) ** 0.5  # (1 - s theta*), k = 1
    assert c == pytest.approx(min(2048 * (1 - root) / 1000 - 1.5 * (1 / root - 1), c), rel=1e-12)
    assert _walk_terms(1, 1.5, (1000, 2e6, 6e9), 2048)[0] <= math.exp(-c) * (1 + 1e-9)


@settings(max_examples=examples(60), deadline=None)
@given(load=st.floats(0.01, 0.9), log_share=st.floats(math.log(1e-4), math.log(0.2)),
       budget=st.sampled_from([256, 2048, 8192, 16384]), spread=st.sampled_from([0.0, 0.1, 1.0, 2.0]))  # fmt: skip
def test_the_chernoff_shortcut_answers_what_the_sums_answer(load, log_share, budget, spread):
    # where the bound says no backlog, Spitzer's sums (run in full, the shortcut off) find none either: the same
    # (0, 0, 1), so a plan prices the same with it, in a fraction of the time where prompts are short (a prompt
    # 1e-4 to 0.2 of the chunk: the bound passes its threshold in about 40% of these, 6% of them just past it)
    size = budget * math.exp(log_share)
    m2, m3 = size**2 * (1 + spread), size**3 * (1 + 3 * spread + 2 * spread**2)  # gamma sizes of CV^2 = spread
    count = load * budget / size
    assume(_chernoff_exponent(count, size, m2, m3, budget) > NO_BACKLOG_EXPONENT)
    with pytest.MonkeyPatch.context() as m:
        m.setattr("tokcost.serving.queueing.NO_BACKLOG_EXPONENT", math.inf)
        full = step_backlog.__wrapped__(count, size, m2, m3, budget)
    assert full == (0.0, 0.0, 1.0) == step_backlog.__wrapped__(count, size, m2, m3, budget)


@given(count=st.floats(0.01, 20), size=st.floats(10, 5000), room=st.floats(1, 20000))
@settings(max_examples=examples(60), deadline=None)
def test_the_prompts_that_fit_in_a_step_never_outnumber_their_mean_or_the_room(count, size, room):
    # E[min(A, room)] <= min(E[A], room) (Jensen), and it reaches E[A] as the room grows past every sum
    capped = capped_sum_mean(count, size, 2 * size**2, 6 * size**3, room)
    assert 0 <= capped <= min(count * size, room) * (1 + 1e-9)
    assert capped_sum_mean(count, size, 2 * size**2, 6 * size**3, 1e9 * size) == pytest.approx(count * size, rel=1e-6)


def test_the_prompts_that_fit_in_a_step_by_hand_for_fixed_sizes():
    # fixed 2,000-token prompts, Poisson(0.5) of them, 3,000 tokens of room: min(2,000 j, 3,000) summed by hand
    pmf = [math.exp(-0.5) * 0.5**j / math.factorial(j) for j in range(40)]
    by_hand = sum(w * min(2000 * j, 3000) for j, w in enumerate(pmf))
    assert capped_sum_mean(0.5, 2000, 2000**2, 2000**3, 3000) == pytest.approx(by_hand, rel=1e-9)
    # a prefill step in progress carries one prompt at least: the same law given j >= 1, up to a 2,048 chunk
    some = 1 - pmf[0]
    mean = sum(w * min(2000 * j, 2048) for j, w in enumerate(pmf) if j) / some
    raw2 = sum(w * min(2000 * j, 2048) ** 2 for j, w in enumerate(pmf) if j) / some
    assert capped_step_tokens(0.5, 2000, 2000**2, 2000**3, 2048) == pytest.approx((mean, raw2 - mean**2), rel=1e-9)


def test_a_prompts_step_share_sums_at_most_its_cap_of_terms_and_keeps_its_value():
    # 1-token prompts after a gamma wait of tiny shape (a queue within rounding of its edge): the joiner count spreads
    # over the 8,191 that fill the step, and summing every term in each fixed-point pass left a closed loop's plan
    # running for minutes. Capped at PMF_TERMS_MAX terms, the mass past them at the step they fill, the share moves
    # by under 1/2,000 (past 2,000 joiners a prompt's share is under that; 1.2e-4 at the tiniest shape here)
    from tokcost.serving import queueing, sharing

    step_s = lambda fills: [0.02 + 1e-5 * tokens for tokens in fills]  # noqa: E731
    for shape in (0.01, 1e-3, 1e-6):
        joiners = sharing.Joiners(1.0, 20.0, shape)
        capped = sharing.step_share(1, 8192, 1.0, joiners, step_s)
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(sharing, "PMF_TERMS_MAX", 10**9)
            whole = sharing.step_share(1, 8192, 1.0, joiners, step_s)
        assert capped[0] == pytest.approx(whole[0], abs=1 / 2000) and capped[1] == pytest.approx(whole[1], rel=1e-3)
        assert math.ceil(joiners.mean + queueing.TAIL_SDS * math.sqrt(joiners.variance)) > sharing.PMF_TERMS_MAX


@settings(max_examples=examples(100), deadline=None)
@given(knots=st.lists(st.tuples(st.floats(1, 1e5), st.floats(0, 1)), min_size=1, max_size=12, unique_by=lambda k: k[0]),
       points=st.lists(st.floats(0, 2e5), min_size=1, max_size=60))  # fmt: skip
def test_a_walk_along_the_step_curve_reads_what_a_search_at_each_fill_reads(knots, points):
    # step_share reads a prompt's last step at up to 2,000 fills at once: one walk along the curve's knots gives the
    # same floats, bit for bit, as a search at each fill (the plan's numbers do not move; it runs 2-3x faster)
    from tokcost.serving.replica_steps import interpolate, interpolate_sorted

    knots.sort()
    xs, ys = tuple(k[0] for k in knots), tuple(k[1] for k in knots)
    points.sort()
    assert interpolate_sorted(xs, ys, points) == [interpolate(xs, ys, x) for x in points]


@settings(max_examples=examples(200), deadline=None)
@given(shape=st.floats(1e-3, 27.9), x=st.floats(1e-4, 400.0), scale=st.floats(0.1, 1e4), shift=st.floats(-1e4, 1e4))
def test_a_parts_tail_moments_take_the_next_tails_by_recurrence_as_the_series_gives_them(shape, x, scale, shift):
    # Q(a + 1, x) = Q(a, x) + x^a e^-x / Gamma(a + 1): two of _tail_moments' three incomplete gammas from the first
    # (3/4 of a long-tailed plan's time was these calls), equal to the series' own to 1e-12 of their size
    from tokcost.serving.queueing import _tail_moments

    t = shift + x * scale
    x = (t - shift) / scale  # as _tail_moments reads it back
    p, e1, e2 = _tail_moments(shape, scale, shift, t)
    q1, q2 = gamma_tail(shape + 1, x), gamma_tail(shape + 2, x)
    assert p == gamma_tail(shape, x)
    want1, want2 = shape * scale * q1, shape * (shape + 1) * scale**2 * q2  # E[G 1{G > x}], E[G^2 1{G > x}]
    assert e1 == pytest.approx(shift * p + want1, rel=1e-12, abs=1e-12 * (abs(shift) * p + want1))
    size = shift * shift * p + 2 * abs(shift) * want1 + want2
    assert e2 == pytest.approx(shift * shift * p + 2 * shift * want1 + want2, rel=1e-11, abs=1e-11 * size)
