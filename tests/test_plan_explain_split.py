"""plan --explain's figures reproduce by hand: a request's prefill work E[S], its steps m, Tp = E[S] / m,
kappa = 1 - T0 / Tp and the batch's feedback gain lambda E[n] dTPOT/db (printed without a derivation before); and the
busy-time split: prefill's kappa rho over the busy share
rho + (1 - rho)(1 - e^-B) (serving/fleet.cost_shares), the divisor printed beside it (the audit of 2026-12-03 found
"0.857 x 0.009, input share 2.3%" with no divisor: 0.77% by hand)."""

from __future__ import annotations

import math
import re

import pytest

SPLIT = re.compile(
    r"busy-time split: prefill kappa rho = ([\d.]+) x ([\d.]+) = ([\d.]+) over the busy share rho \+ "
    r"\(1 - rho\)\(1 - e\^-B\) = ([\d.]+) \+ ([\d.]+) x \(1 - e\^-([\d.]+)\) = ([\d.]+): input share ([\d.]+)%, "
    r"output share ([\d.]+)%"
)


@pytest.mark.parametrize(
    "args",
    [
        ("-m", "llama-3.1-8b", "--rate", "0.2", "--prompt", "2048", "--output", "300", "--gpu", "h100-sxm"),
        ("-m", "llama-3.1-70b", "--rate", "5", "--prompt", "2048", "--output", "300", "--gpu", "l40s", "--tp", "4"),
    ],
)
def test_the_busy_time_split_reproduces_from_its_printed_parts(cli, args):
    out = cli("plan", *args, "--explain")
    assert out.exit_code == 0, out.stderr
    found = SPLIT.search(out.stdout.replace("\n", " "))
    assert found, out.stdout
    kappa, rho, prefill, rho_again, idle, batch, busy, share_in, share_out = map(float, found.groups())
    assert prefill == pytest.approx(kappa * rho, abs=1e-3)
    assert rho_again == rho and idle == pytest.approx(1 - rho, abs=1e-3)
    assert busy == pytest.approx(rho + (1 - rho) * (1 - math.exp(-batch)), abs=2e-3)
    assert share_in / 100 == pytest.approx(prefill / busy, abs=2e-3)
    assert share_in + share_out == pytest.approx(100, abs=0.11)


GRID = re.compile(
    r"E\[S\] = ([\d.,]+) ms, m = E\[chunks - 1 \+ e\] = ([\d.]+) prefill steps per request, Tp = E\[S\] / m = "
    r"([\d.,]+) ms; kappa = 1 - T0 / Tp = 1 - ([\d.,]+) ms / ([\d.,]+) ms = ([\d.]+)"
)
RHO = re.compile(r"rho = lambda E\[S\] = ([\d.]+) x ([\d.,]+) ms = ([\d.]+)")
GAIN = re.compile(r"feedback gain = lambda E\[n\] dTPOT/db = ([\d.]+) x ([\d,]+) x ([\d.]+) us per sequence = ([\d.]+)")


def _num(text: str) -> float:
    return float(text.replace(",", ""))


@pytest.mark.parametrize(
    "args",
    [
        ("-m", "llama-3.1-70b", "--rate", "5", "--prompt", "2048", "--output", "300", "--gpu", "l40s", "--tp", "4"),
        ("-m", "llama-3.1-8b", "--rate", "20", "--prompt", "6000", "--output", "200", "--gpu", "h100-sxm"),
    ],
)
def test_the_prefill_work_its_steps_and_the_feedback_gain_reproduce_by_hand(cli, args):
    out = cli("plan", *args, "--explain")
    assert out.exit_code == 0, out.stderr
    text = out.stdout.replace("\n", " ")
    e_s, m, tp, t0, tp_again, kappa = map(_num, GRID.search(text).groups())
    assert tp == pytest.approx(e_s / m, rel=2e-3) and tp_again == tp
    assert kappa == pytest.approx(1 - t0 / tp, abs=2e-3)
    rate, e_s_again, rho = map(_num, RHO.search(text).groups())
    assert e_s_again == e_s and rho == pytest.approx(rate * e_s / 1e3, abs=2e-3)
    rate_again, n, slope_us, gain = map(_num, GAIN.search(text).groups())
    assert rate_again == rate and gain == pytest.approx(rate * n * slope_us * 1e-6, abs=0.01)
