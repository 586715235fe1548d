"""The console script: `tokcost --version` answered before typer, rich or pydantic is imported; the rest goes to
the app (tokcost.cli.app), which imports only the command that runs."""

from __future__ import annotations

import os
import sys

from tokcost import __version__


def fail(message: str, code: int = 2) -> int:
    """One line on stderr: a newline or escape code in a user's name or path is shown escaped."""
    sys.stderr.write("error: " + "".join(c if c.isprintable() else repr(c)[1:-1] for c in message) + "\n")
    return code


def print_version() -> int:
    """`tokcost X.Y.Z` on stdout; a full disk or closed pipe is one line on stderr (exit 2)."""
    try:
        sys.stdout.write(f"tokcost {__version__}\n")
        sys.stdout.flush()
    except OSError as exc:  # what is left in the buffer goes nowhere instead of failing again at exit
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return fail(f"output: {exc.strerror or exc}")
    return 0


def run() -> None:
    """Console-script entry point: the version at once, everything else through the typer app."""
    if sys.argv[1:] == ["--version"]:
        sys.exit(print_version())
    # pydantic scans every installed package's metadata for plugins when it builds the first model (~20 ms of each
    # start with torch installed); the CLI runs none, as typer's own parsing runs none. A user's setting is kept.
    os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")
    from tokcost.cli.app import run as run_app

    run_app()
