"""The console script: `tokcost --version` answered before typer, rich or pydantic is imported; the rest goes to
the app (tokcost.cli.app), which imports only the command that runs."""

from __future__ import annotations

import errno
import io
import os
import sys

from tokcost import __version__


def fail(message: str, code: int = 2) -> int:
    """One line on stderr: a newline or escape code in a user's name or path is shown escaped."""
    sys.stderr.write("error: " + "".join(c if c.isprintable() else repr(c)[1:-1] for c in message) + "\n")
    return code


class _ClosedStream(io.TextIOBase):
    """What Python leaves as None for a descriptor closed at start (`>&-`): writing to it fails as the descriptor
    would, so a closed stdout is one line and exit 2, as a full disk is, not an AttributeError's traceback."""

    def __init__(self, name: str) -> None:
        self._name = name

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        raise OSError(errno.EBADF, f"{self._name} is closed")


def open_streams() -> None:
    """A closed stdout fails on its first write; a closed stderr drops the messages, the exit code still says."""
    if sys.stdout is None:
        sys.stdout = _ClosedStream("stdout")
    if sys.stderr is None:
        sys.stderr = open(os.devnull, "w", encoding="utf-8")  # noqa: SIM115 -- for the process's life, as stderr


def print_version() -> int:
    """`tokcost X.Y.Z` on stdout; a full disk or closed pipe is one line on stderr (exit 2)."""
    open_streams()
    try:
        sys.stdout.write(f"tokcost {__version__}\n")
        sys.stdout.flush()
    except OSError as exc:  # what is left in the buffer goes nowhere instead of failing again at exit
        if not isinstance(sys.stdout, _ClosedStream):  # a closed descriptor has nothing left to drain
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
    skip_plugin_loader()
    from tokcost.cli.app import run as run_app

    run_app()


def skip_plugin_loader() -> None:
    """With every pydantic plugin disabled, answer pydantic's plugin lookup without its loader module.

    pydantic imports `pydantic.plugin._loader` when it builds its first validator, and that module imports
    importlib.metadata (email, zipfile, csv, socket: ~15 ms of each start) before it reads the variable that says
    no plugin runs. Its `get_plugins()` then returns an empty tuple; this stand-in gives that answer directly. It
    is installed only when the variable disables all plugins and the real loader is not loaded yet, so a user who
    enables a plugin, or code that loaded pydantic's loader first, gets the real one.
    """
    if os.environ.get("PYDANTIC_DISABLE_PLUGINS") not in ("__all__", "1", "true"):
        return
    name = "pydantic.plugin._loader"
    if name in sys.modules:
        return
    import types

    stand_in = types.ModuleType(name, "pydantic's plugin loader when every plugin is disabled (tokcost's CLI)")
    stand_in.get_plugins = tuple  # type: ignore[attr-defined]  # get_plugins() -> (): no plugin
    sys.modules[name] = stand_in
