"""Regenerate the README's tour blocks and pictures from the live CLI, so the README cannot drift.

Each block is fenced by `<!-- tour: tokcost ARGS -->` and `<!-- /tour -->`; the text between them becomes
the command and its output. A picture block, `<!-- plot: tokcost ARGS --plot docs/img/NAME.png -->` ...
`<!-- /plot -->`, becomes the command and the image; running the script (not --check) also redraws each
image by running its command. `--check` exits 1 when the README's text differs from what the CLI prints
now (pictures are not compared: their pixels depend on the matplotlib version).
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import shlex
import sys
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"
BLOCK = re.compile(r"(<!-- tour: tokcost (?P<args>.*?) -->\n)(?P<body>.*?)(<!-- /tour -->)", re.S)
PLOT = re.compile(r"(<!-- plot: tokcost (?P<args>.*?) -->\n)(?P<body>.*?)(<!-- /plot -->)", re.S)
ALT = {
    "estimate": "Roofline chart with every stage of prefill and of a decode step, and each stage's time",
    "compare": "Grouped bars of TTFT, TPOT, tokens/s and $/1M output tokens per model and GPU, ceiling and expected",
    "sweep": "TPOT, tokens/s per GPU, memory per GPU and $/1M output tokens against batch and context",
}


def run(args: list[str]) -> str:
    """What `tokcost args` prints, at a fixed width."""
    from tokcost.cli.app import main

    os.environ["COLUMNS"] = "120"
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(args)
    if code != 0:
        raise SystemExit(f"tokcost {shlex.join(args)} exited {code}")
    return out.getvalue()


def render(text: str) -> str:
    """The README with every tour block regenerated."""

    def block(m: re.Match) -> str:
        args = shlex.split(m.group("args"))
        output = run(args).rstrip()
        lang = "markdown" if "markdown" in args else "text"
        body = f"```console\n$ tokcost {shlex.join(args)}\n```\n\n```{lang}\n{output}\n```\n"
        if lang == "markdown":
            body = f"```console\n$ tokcost {shlex.join(args)}\n```\n\n{output}\n"
        return m.group(1) + body + m.group(4)

    def picture(m: re.Match) -> str:
        args = shlex.split(m.group("args"))
        image = args[args.index("--plot") + 1]
        body = f"```console\n$ tokcost {shlex.join(args)}\n```\n\n![{ALT[args[0]]}]({image})\n"
        return m.group(1) + body + m.group(4)

    return PLOT.sub(picture, BLOCK.sub(block, text))


def draw(text: str) -> list[str]:
    """Run every picture block's command (from the repository root, where its --plot path points)."""
    drawn = []
    for m in PLOT.finditer(text):
        args = shlex.split(m.group("args"))
        (README.parent / args[args.index("--plot") + 1]).parent.mkdir(parents=True, exist_ok=True)
        run([*args, "--force"])  # the README's own picture, redrawn in place (a user's --plot needs --force to)
        drawn.append(args[args.index("--plot") + 1])
    return drawn


def main() -> int:
    """Rewrite README.md, or with --check report drift."""
    text = README.read_text()
    fresh = render(text)
    if "--check" in sys.argv:
        return 0 if fresh == text else 1
    README.write_text(fresh)
    os.chdir(README.parent)
    for image in draw(fresh):
        print(f"drew {image}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
