"""The typer app: wiring only. Each command lives in its own module; errors become one line, exit code 2."""

from __future__ import annotations

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
    sys.stderr.write(f"error: {message}\n")
    return code


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; TokcostError and bad flags print one line on stderr and return exit code 2."""
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
    except (typer.Abort, KeyboardInterrupt):
        return _fail("interrupted", 130)
    except typer.Exit as exc:
        return exc.exit_code
    return result if isinstance(result, int) else 0


def run() -> None:
    """Console-script entry point."""
    sys.exit(main())
