"""--explain derives the activation workspace and the reserve it adds to the memory (the audit of 2026-12-03 found
"92.79 MB workspace" and "reserve: 0.1 x ..." with neither formula nor source): the printed parts give the total."""

from __future__ import annotations

import re

import pytest

WORKSPACE = re.compile(
    r"workspace: min\(([\d,]+) x ([\d,]+), ([\d,]+) chunk\) tokens x ([\d,]+) B of live activations a token "
    r"\(4 x hidden \+ 2 x MLP width / tp at (\w+)\) \+ ([\d,]+) x ([\d,]+) / (\d+) x (\d) B of fp32 logits = "
    r"([\d.]+) (k|M|G)B"
)
SCALE = {"k": 1e3, "M": 1e6, "G": 1e9}


def _n(text: str) -> int:
    return int(text.replace(",", ""))


@pytest.mark.parametrize(
    ("args", "hidden", "mlp"),
    [
        (("-m", "llama-3.1-70b", "-g", "h100-sxm", "--tp", "4", "-b", "64"), 8192, 28672),
        (("-m", "llama-3.1-8b", "-g", "l40s", "-b", "2", "-p", "512"), 4096, 14336),
    ],
)
def test_the_workspace_line_adds_up(cli, args, hidden, mlp):
    out = cli("estimate", *args, "--explain")
    assert out.exit_code == 0, out.stderr
    found = WORKSPACE.search(out.stdout.replace("\n", " "))
    assert found, out.stdout
    seqs, prompt, chunk, per_token, dtype, seqs2, vocab, tp, logit, value, unit = found.groups()
    assert dtype == "bf16" and _n(chunk) == 8192 and _n(logit) == 4 and seqs == seqs2
    # live activations a token: residual, normed input, q/k/v/out (4 x hidden) and gate + up (2 x width / tp), 2 B
    assert _n(per_token) == (4 * hidden + 2 * mlp // int(tp)) * 2
    total = min(_n(seqs) * _n(prompt), _n(chunk)) * _n(per_token) + _n(seqs) * _n(vocab) / int(tp) * 4
    assert float(value) * SCALE[unit] == pytest.approx(total, rel=2e-3)
