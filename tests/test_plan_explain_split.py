"""plan --explain's busy-time split reproduces by hand: prefill's kappa rho over the busy share
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
