"""The typer app: wiring only. Each command lives in its own module, imported only when it runs (the root lists
every command from tokcost.cli.commands); errors become one line, exit code 2."""

from __future__ import annotations

import importlib
import inspect
import os
import signal
import sys
from typing import Any

import typer
from typer.core import TyperCommand, TyperGroup

from tokcost import files
from tokcost.cli.commands import COMMANDS
from tokcost.cli.launch import fail as _fail
from tokcost.cli.launch import open_streams, print_version
from tokcost.errors import Interrupted, TokcostError

try:  # typer 0.2x vendors click as typer._click; older typer uses the click package
    from typer._click import exceptions as click_errors  # type: ignore[import-not-found]
except ImportError:  # pragma: no cover - depends on the installed typer
    from click import exceptions as click_errors  # type: ignore[no-redef]

INTERRUPTED = 130  # the exit code typer gives a KeyboardInterrupt (128 + SIGINT)

# Each command's --help ends with these, run as written (tests run the analytic ones).
EXAMPLES = {
    "tokcost": [
        "tokcost estimate -m llama-3.1-8b -g h100-sxm",
        "tokcost specs list",
        "tokcost --install-completion  # tab-complete commands and flags in bash, zsh, fish or PowerShell",
    ],
    "estimate": [
        "tokcost estimate -m llama-3.1-8b -g h100-sxm",
        "tokcost estimate -m llama-3.1-70b -g h100-sxm --gpus 4 -b 32 --explain",
        "tokcost estimate -m deepseek-v3 -g h100-sxm --ep 16 --dp 16 -b 256 --engine sglang",
        "tokcost estimate -m llama-3.1-8b -g h100-sxm --journey --plot roofline.png",
    ],
    "compare": [
        "tokcost compare -m llama-3.1-70b -g h100-sxm,h200 --gpus 4,2",
        "tokcost compare -m llama-3.1-8b,mixtral-8x7b -g h100-sxm,l40s -b 8 -f markdown --plot compare.svg",
    ],
    "sweep": [
        "tokcost sweep -m llama-3.1-8b -g h100-sxm -b 1,8,64,256",
        "tokcost sweep -m llama-3.1-8b -g h100-sxm -b 1,4,16,64,256 --context 1024,8192 --plot sweep.png",
    ],
    "measure": ["tokcost measure -m llama-3.2-1b --layers 2 --device cpu", "tokcost measure -m llama-3.1-8b"],
    "calibrate": ["tokcost calibrate --out my-gpu.yaml", "tokcost estimate -m llama-3.1-8b -g my-gpu.yaml"],
    "validate": ["tokcost validate", "tokcost validate --format markdown"],
    "plan": [
        "tokcost plan -m llama-3.1-70b --rate 20 --prompt 2048 --output 300 --slo ttft_p90=500ms --slo tpot_p90=40ms "
        "--gpu h100-sxm,h200,mi300x,l40s --tp 1,2,4,8 --weights bf16,fp8",
        "tokcost plan -m deepseek-v3 --rate 5 --gpu h200 --slo tpot_p90=80ms --simulate",
        "tokcost plan -m llama-3.1-8b --concurrency 64 --gpu l40s,l4 --format json",
    ],
    "specs": ["tokcost specs list --kind gpus", "tokcost specs show h100-sxm -f yaml > my-gpu.yaml"],
}


def examples(command: str) -> str:
    """The Examples section closing a command's --help."""
    return "Examples:\n" + "\n".join(f"  {line}" for line in EXAMPLES[command])


class _Listed(TyperCommand):
    """A command as the root's help and shell completion list it: its name and help line, nothing imported."""


class LazyGroup(TyperGroup):
    """The root group: every command of COMMANDS is listed; its module is imported when the command is resolved
    (to run it, show its --help or complete its flags), so each run pays for one command only."""

    def __init__(self, **attrs: Any) -> None:
        super().__init__(**attrs)
        listed = {name: _Listed(name=name, help=entry.summary) for name, entry in COMMANDS.items()}
        self.commands = {**self.commands, **listed}  # COMMANDS wins over a command registered on `app` by name

    def resolve_command(self, ctx: Any, args: list[str]) -> Any:
        if args and isinstance(self.commands.get(args[0]), _Listed):
            self.commands[args[0]] = load_command(args[0])
        return super().resolve_command(ctx, args)


app = typer.Typer(
    name="tokcost",
    cls=LazyGroup,
    help="What will this model cost on that GPU, and why: roofline estimates and measured decode loops.",
    epilog=examples("tokcost"),
    add_completion=True,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    rich_markup_mode="rich",
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _version(value: bool) -> None:
    if value:
        raise typer.Exit(print_version())


@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="Print the version."),
) -> None:
    """What will this model cost on that GPU, and why: roofline estimates and measured decode loops."""


def reflow(doc: str | None) -> str:
    """A docstring as help text: paragraphs kept, the line breaks inside each joined (rich help keeps them)."""
    paragraphs = inspect.cleandoc(doc or "").split("\n\n")
    return "\n\n".join(" ".join(p.split()) for p in paragraphs)


def _no_options() -> None:
    """The callback of the group a command is built in."""


def load_command(name: str) -> Any:
    """The click command of one entry of COMMANDS, built as the root would build it: help from the docstring,
    its examples as the epilog, plain usage lines."""
    entry = COMMANDS[name]
    target = getattr(importlib.import_module(entry.module), entry.attribute)
    holder = typer.Typer(rich_markup_mode="rich", pretty_exceptions_enable=False, add_completion=False)
    holder.callback()(_no_options)  # a group, like the root, so that the command is built as a subcommand
    if isinstance(target, typer.Typer):
        holder.add_typer(target, name=name, epilog=examples(name))
    else:
        holder.command(name, help=reflow(target.__doc__), epilog=examples(name))(target)
    return _plain_usage(typer.main.get_command(holder).commands[name])


def _plain_usage(command: Any) -> Any:
    """Arguments read as NAME, [NAME] or FILE... in usage lines (not typer's {name}), with no <type> shown
    beside them; flags show no <bool> (they take no value). Applied to the whole command tree."""
    for param in command.params:
        if param.param_type_name == "argument":
            text = (param.metavar or param.name or "ARG").upper()
            text = (text if param.required else f"[{text}]") + ("..." if param.nargs != 1 else "")
            param.get_usage_pieces = lambda ctx, text=text: [text]
            param.display_type_rich = lambda ctx: None
        elif getattr(param, "is_flag", False):
            param.display_type_rich = lambda ctx: None
    make_help = command.get_help_option

    def help_option(ctx: Any) -> Any:
        option = make_help(ctx)
        if option is not None:
            option.display_type_rich = lambda ctx: None
        return option

    command.get_help_option = help_option
    for sub in getattr(command, "commands", {}).values():
        _plain_usage(sub)
    return command


def cli_command(*, loaded: bool = False) -> Any:
    """The click command tree of the app, with plain usage lines; `loaded` imports every command (docs, tests)."""
    root = _plain_usage(typer.main.get_command(app))
    if loaded:
        root.commands.update({name: load_command(name) for name in COMMANDS})
    return root


_signal_received = [signal.SIGINT]  # what interrupted the run; typer turns any KeyboardInterrupt into exit 130


def _interrupt(signum: int, frame: object) -> None:
    """SIGTERM/SIGHUP take Ctrl-C's path: `finally` blocks run (no stray temporary files), one line is printed."""
    _signal_received[0] = signal.Signals(signum)
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    """Run the CLI: a TokcostError, a bad flag, an I/O or encoding failure print one line on stderr (exit 2)."""
    open_streams()
    if hasattr(sys.stdout, "reconfigure"):  # a character the terminal cannot encode prints as '?', not a crash
        sys.stdout.reconfigure(errors="replace")
    command = cli_command()
    _signal_received[0] = signal.SIGINT  # until a handler says otherwise (a process may run several commands)
    files.forget_reads()  # this command's inputs, not an earlier one's in the same process
    try:
        result = command.main(args=argv, prog_name="tokcost", standalone_mode=False)
    except Interrupted as exc:  # the command already said what it kept: its line, and the interrupt's code
        sys.stderr.write(f"{exc}\n")
        return 128 + _signal_received[0]  # 130 for Ctrl-C, 143 for SIGTERM, as the shell reports a signal
    except TokcostError as exc:
        return _fail(str(exc))
    except click_errors.NoArgsIsHelpError as exc:
        sys.stdout.write(exc.ctx.get_help() + "\n")
        return 0
    except click_errors.UsageError as exc:
        message = " ".join(exc.format_message().replace("Value error, ", "").split())
        low, high = (getattr(getattr(exc, "param", None), key, None) for key in ("min", "max"))
        if low is not None and high is not None and "allowed" not in message:  # the bound broken, and the other
            message += f"; allowed: {low:,} to {high:,}"
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
