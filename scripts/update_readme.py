"""Regenerate the README's tour blocks from the live CLI, so the README cannot drift.

Each block is fenced by `<!-- tour: tokcost ARGS -->` and `<!-- /tour -->`; the text between them becomes
the command and its output. `--check` exits 1 when the README differs from what the CLI prints now.
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

    return BLOCK.sub(block, text)


def main() -> int:
    """Rewrite README.md, or with --check report drift."""
    text = README.read_text()
    fresh = render(text)
    if "--check" in sys.argv:
        return 0 if fresh == text else 1
    README.write_text(fresh)
    return 0


if __name__ == "__main__":
    sys.exit(main())
