"""The one domain exception family; the CLI turns these into one line and exit code 2."""


class TokcostError(Exception):
    """Base of every error tokcost raises on purpose."""


class SpecError(TokcostError):
    """A spec file or spec name is wrong: `file: field: message`."""

    def __init__(self, where: str, message: str, field: str | None = None) -> None:
        self.where = where
        self.field = field
        self.message = message
        # a message that already opens with its key (`rows: give a non-empty list`) does not say it twice
        said = field is None or message.startswith(f"{field}: ")
        super().__init__(f"{where}: " + ("" if said else f"{field}: ") + message)


class UsageError(TokcostError):
    """A command-line flag is out of range: `--flag: message`."""


class FileExistsRefusal(TokcostError):
    """A write would replace a file the user has: refused without --force."""


class MeasureError(TokcostError):
    """The measure loop cannot run here (no torch, no CUDA, out of memory)."""


class Interrupted(TokcostError):
    """Ctrl-C (or SIGTERM) that a command has answered for: its message is the one line, the exit code 130."""

    exit_code = 130


class Unprintable(TokcostError, ValueError):
    """A number that cannot be right (inf, NaN, a negative time, rate, cost or size) reached the output: it is
    never printed. Inputs that would make one are refused before the work; reaching this is a tokcost bug."""
