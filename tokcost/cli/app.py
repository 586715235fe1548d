"""The typer app: wiring only. Each command lives in its own module; errors become one line, exit code 2."""

from __future__ import annotations

import os
import signal
import sys

import typer

import tokcost.cli.plan_cmd as plan_cmd
from tokcost import __version__
from tokcost.cli import calibrate_cmd, compare_cmd, estimate_cmd, measure_cmd, specs_cmd, sweep_cmd, validate_cmd
from tokcost.errors import TokcostError

try:  # typer 0.2x vendors click as typer._click; older typer uses the click package
    from typer._click import exceptions as click_errors  # type: ignore[import-not-found]
except ImportError:  # pragma: no cover - depends on the installed typer
    from click import exceptions as click_errors  # type: ignore[no-redef]

INTERRUPTED = 130  # the exit code typer gives a KeyboardInterrupt (128 + SIGINT)

app = typer.Typer(
    name="tokcost",
    help="What will this model cost on that GPU, and why: roofline estimates and measured decode loops.",
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _version(value: bool) -> None:
    if value:
        sys.stdout.write(f"tokcost {__version__}\n")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="Print the version."),
) -> None:
    """What will this model cost on that GPU, and why: roofline estimates and measured decode loops."""


app.add_typer(specs_cmd.app, name="specs")
app.command("estimate")(estimate_cmd.estimate)
app.command("compare")(compare_cmd.compare)
app.command("sweep")(sweep_cmd.sweep)
app.command("measure")(measure_cmd.measure)
app.command("calibrate")(calibrate_cmd.calibrate)
app.command("validate")(validate_cmd.validate)
app.command("plan")(plan_cmd.plan)


def _fail(message: str, code: int = 2) -> int:
    """One line on stderr: a newline or escape code in a user's name or path is shown escaped."""
    sys.stderr.write("error: " + "".join(c if c.isprintable() else repr(c)[1:-1] for c in message) + "\n")
    return code


_signal_received = [signal.SIGINT]  # what interrupted the run; typer turns any KeyboardInterrupt into exit 130


def _interrupt(signum: int, frame: object) -> None:
    """SIGTERM/SIGHUP take Ctrl-C's path: `finally` blocks run (no stray temporary files), one line is printed."""
    _signal_received[0] = signal.Signals(signum)
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    """Run the CLI: a TokcostError, a bad flag, an I/O or encoding failure print one line on stderr (exit 2)."""
    if hasattr(sys.stdout, "reconfigure"):  # a character the terminal cannot encode prints as '?', not a crash
        sys.stdout.reconfigure(errors="replace")
    command = typer.main.get_command(app)
    try:
        result = command.main(args=argv, prog_name="tokcost", standalone_mode=False)
    except TokcostError as exc:
        return _fail(str(exc))
    except click_errors.NoArgsIsHelpError as exc:
        sys.stdout.write(exc.ctx.get_help() + "\n")
        return 0
    except click_errors.UsageError as exc:
        message = " ".join(exc.format_message().replace("Value error, ", "").split())
        hint = f" (see '{exc.ctx.command_path} --help')" if exc.ctx else ""
        return _fail(message + hint)
    except click_errors.ClickException as exc:
        return _fail(exc.format_message())
    except OSError as exc:  # what files.py does not expect: most often stdout (a full disk, /dev/full)
        return _fail(f"{exc.filename or 'output'}: {exc.strerror or exc}")
    except UnicodeError as exc:
        return _fail(f"cannot convert text ({exc}); use UTF-8 names and files")
    except (typer.Abort, KeyboardInterrupt):  # older typer raises Abort; typer 0.2x returns exit code 130
        result = INTERRUPTED
    if result == INTERRUPTED:  # typer's own handling of KeyboardInterrupt, given its one line here
        signum = _signal_received[0]
        return _fail(f"interrupted ({signum.name})", 128 + signum)
    try:
        sys.stdout.flush()  # a full disk shows here, as one line, not as a traceback at exit
    except OSError as exc:
        return _fail(f"output: {exc.strerror or exc}")
    return result if isinstance(result, int) else 0


def run() -> None:
    """Console-script entry point."""
    for sig in (signal.SIGTERM, getattr(signal, "SIGHUP", None)):
        if sig is not None and signal.getsignal(sig) is signal.SIG_DFL:  # respect nohup's ignored SIGHUP
            signal.signal(sig, _interrupt)
    code = main()
    try:
        sys.stdout.flush()
    except OSError:  # already reported; what is left in the buffer goes nowhere instead of failing again at exit
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    sys.exit(code)
