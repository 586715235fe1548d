"""The last steps' fixed point (replica._Damped): it settles where the map is steep, and a plain plan no longer spends
minutes cycling through it."""

from __future__ import annotations

import hypothesis.strategies as st
from hypothesis import given, settings

from tokcost import plan
from tokcost.serving import replica as replica_module
from tokcost.serving.replica import TAIL_ITERATIONS, TAIL_TOLERANCE, _Damped


def _passes(slopes, fixed, start) -> tuple[int | None, tuple]:
    """Passes _Damped takes to settle the affine map x -> f + slope (x - f) (None: not within TAIL_ITERATIONS)."""

    def g(x):
        return tuple(
            (f[0] + k * (a[0] - f[0]), f[1] + k * (a[1] - f[1])) for a, f, k in zip(x, fixed, slopes, strict=True)
        )

    damped, x = _Damped(), start
    for i in range(TAIL_ITERATIONS):
        x, done = damped(x, g(x))
        if done:
            return i + 1, x
    return None, x


@settings(max_examples=300, deadline=None)
@given(
    slope=st.floats(-20.0, 0.3),
    spread=st.lists(st.floats(0.9, 1.1), min_size=1, max_size=30),
    data=st.data(),
)
def test_a_steep_falling_map_settles_within_the_passes(slope, spread, data):
    # a map whose slope is below -3 (a closed loop's prefill queue near its edge): half-and-half, the weight every
    # pass had, moves the iterate further each pass and never settles; the secant's weight does, from a start as
    # near as a nearby state's (the map keeps e and s positive there)
    n = len(spread)
    fixed = [(data.draw(st.floats(0.01, 1.0)), data.draw(st.floats(1e-4, 0.1))) for _ in range(n)]
    near = 0.9 / max(1.0, abs(slope) * 1.1)
    start = tuple((f[0] * data.draw(st.floats(1 - near, 1 + near)), f[1] * data.draw(st.floats(1 - near, 1 + near)))
                  for f in fixed)  # fmt: skip
    passes, x = _passes([slope * k for k in spread], fixed, start)
    assert passes is not None
    for (e, s), (fe, fs) in zip(x, fixed, strict=True):
        assert abs(e - fe) <= 3 * TAIL_TOLERANCE * (1 + abs(slope))
        assert abs(s - fs) <= 3 * TAIL_TOLERANCE * (1 + abs(slope)) * fs


def test_half_and_half_would_cycle_where_the_secant_settles():
    # the case the weight is for, by hand: slope -15, one point; half-and-half multiplies the residual by -7 a pass
    fixed, start = [(0.3, 0.01)], ((0.31, 0.0102),)
    passes, x = _passes([-15.0], fixed, start)
    assert passes is not None and passes <= 4
    assert abs(x[0][0] - 0.3) < 1e-6 and abs(x[0][1] - 0.01) < 1e-8
    residual = 0.01
    for _ in range(TAIL_ITERATIONS - 2):
        residual *= abs(1 - (1 + 15.0) / 2)
    assert residual > 1.0  # half-and-half from the third pass: it grows 7-fold a pass


def test_one_user_of_short_prompts_plans_in_few_passes(monkeypatch):
    # 1 user, exponential 50-token prompts, 10-token answers on an H100: 27,544 fixed-point passes (69 s) before the
    # secant's weight and the rate bracket's tolerance, 1,415 after; counted, not timed
    passes = 0
    sweep = replica_module.Replica._sweep

    def counted(self, *args, **kwargs):
        nonlocal passes
        passes += 1
        return sweep(self, *args, **kwargs)

    monkeypatch.setattr(replica_module.Replica, "_sweep", counted)
    result = plan(model="llama-3.1-8b", gpus=["h100-sxm"], tp=[1], concurrency=1, prompt_tokens=50,
                  output_tokens=10, prompt_dist="exponential", headroom=1.0)  # fmt: skip
    assert result.rows
    assert passes < 3000
