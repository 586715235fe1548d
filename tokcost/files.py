"""Reading spec files as a reader sees them, and writing results without ever losing what the user had.

Reads: a regular file (checked on the open descriptor, opened without blocking, so a FIFO is refused
unread), bounded size, UTF-8. YAML goes through tokcost.yaml_read (PyYAML's safe loader with YAML 1.2
core-schema scalars and limits), imported only when a YAML file is parsed: a built-in spec comes from its
packaged bundle (tokcost.bundle) while its bytes are unchanged. JSON goes through the json module with
duplicate keys and overlong numbers refused. Types and ranges are pydantic's (strict); what is here is what
neither library offers: json has a parse_int hook but no length bound, and neither opens a path without
blocking on a FIFO or bounds the bytes it reads.
Writes (whole, or streamed through open_new): a temporary file in the same folder, then an atomic link
(create-only) or rename (--force); new files honour the umask, a replaced file keeps its mode, and only
regular files are ever replaced (the standard library has no atomic "create with this content": link()
after writing is the idiom).
"""

from __future__ import annotations

import errno
import json
import os
import secrets
import stat
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

from tokcost.errors import FileExistsRefusal, SpecError, TokcostError

MAX_SPEC_BYTES = 1_000_000  # a spec is a few KB; a HF config.json at most tens of KB
MAX_NESTING = 32  # specs nest three levels; PyYAML's composer is recursive
MAX_NODES = 20_000  # values in one file: published.yaml holds 2,544; parsing 20,000 takes ~0.4 s
MAX_NUMBER_CHARS = 100  # int() is quadratic in digits (CPython stops at 4,300); no spec figure needs 100
PACKAGE = Path(__file__).resolve().parent
BUILTIN_FOLDERS = (PACKAGE / "specs", PACKAGE / "validation")


# the files this process has read (device, inode): no output replaces one, --force or not (forget_reads: per command)
_READ: set[tuple[int, int]] = set()


def forget_reads() -> None:
    """Start a command afresh: the files read before it are no longer its inputs."""
    _READ.clear()


def is_builtin(path: Path) -> bool:
    """Whether `path` is one of tokcost's own data files (package data), which BuiltinLoader reads."""
    real = path.resolve()
    return any(real.is_relative_to(folder) for folder in BUILTIN_FOLDERS)


def read_text(
    path: Path, *, max_bytes: int = MAX_SPEC_BYTES, kind: str = "spec", expect: str = ".yaml or config.json file"
) -> str:
    """The text of a bounded UTF-8 regular file (a spec, or `kind`), or a SpecError naming what is wrong with it."""
    where = str(path)
    try:  # O_NONBLOCK: opening a FIFO must not wait for a writer; the type is checked on the descriptor
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
        info = os.fstat(fd)
        mode = info.st_mode
        if not stat.S_ISREG(mode):
            os.close(fd)
            what = "a directory" if stat.S_ISDIR(mode) else "not a regular file (a device, pipe or socket)"
            raise SpecError(where, f"is {what}; give a {expect}")
        with os.fdopen(fd, "rb") as handle:
            raw = handle.read(max_bytes + 1)  # never more: the file may grow while we read
        _READ.add((info.st_dev, info.st_ino))
    except FileNotFoundError:
        raise SpecError(where, "no such file") from None
    except OSError as exc:
        raise SpecError(where, f"cannot be read: {exc.strerror or exc}") from None
    if len(raw) > max_bytes:
        raise SpecError(where, f"file is over {max_bytes:,} bytes; a {kind} must be at most {max_bytes:,}")
    if b"\x00" in raw:
        raise SpecError(where, "is a binary file (or UTF-16); save it as UTF-8 text")
    try:
        return raw.decode("utf-8-sig")  # a byte-order mark some editors write is dropped
    except UnicodeDecodeError as exc:
        raise SpecError(where, f"is not UTF-8 text (byte {exc.start}); save it as UTF-8") from None


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    if len(mapping := dict(pairs)) < len(pairs):
        twice = next(key for key, count in Counter(key for key, _ in pairs).items() if count > 1)
        raise ValueError(f"key {twice!r:.40} appears twice")
    return mapping


def _json_int(text: str) -> int:
    if len(text) > MAX_NUMBER_CHARS:
        raise ValueError(f"a number of {len(text):,} digits; at most {MAX_NUMBER_CHARS} are allowed")
    return int(text)


def _load_json(text: str, where: str) -> Any:
    try:
        return json.loads(text, object_pairs_hook=_unique_keys, parse_int=_json_int)
    except json.JSONDecodeError as exc:
        raise SpecError(where, f"line {exc.lineno}, column {exc.colno}: invalid JSON: {exc.msg}") from None
    except ValueError as exc:  # a duplicate key, or a number too long
        raise SpecError(where, f"invalid JSON: {exc}") from None


def _load_yaml(text: str, where: str, builtin: bool) -> Any:
    """YAML through the strict loader; tokcost's own files through libyaml with the same scalars and checks."""
    from tokcost.yaml_read import BuiltinLoader, SpecLoader, load_yaml  # PyYAML only when YAML is parsed

    return load_yaml(text, where, BuiltinLoader if builtin else SpecLoader)


def load_mapping(path: Path, example: str = "name: ...") -> dict[str, Any]:
    """A YAML or JSON file (by suffix, any case) whose top level is a mapping (`example`: its first key, as the
    errors show it: a spec's name, a data file's rows)."""
    where = str(path)
    text = read_text(path)
    if not text.strip():
        raise SpecError(where, f"file is empty; it must hold a mapping of keys such as {example}")
    builtin = is_builtin(path)
    if builtin:  # tokcost's own file: its parsed copy while the text is unchanged (a test holds it to the loader)
        from tokcost import bundle  # it reads through this module

        if (data := bundle.parsed(path.resolve().relative_to(PACKAGE).as_posix(), text)) is not None:
            return data
    try:  # JSON is YAML, but the json module is faster and its errors read better
        data = _load_json(text, where) if path.suffix.lower() == ".json" else _load_yaml(text, where, builtin)
    except RecursionError:  # JSON nesting deep enough to exhaust the parser's recursion
        raise SpecError(where, f"nested more than {MAX_NESTING} levels deep; a spec nests three") from None
    if data is None:
        raise SpecError(where, f"holds no data (only comments?); it must hold a mapping of keys such as {example}")
    if not isinstance(data, dict):
        kind = "list" if isinstance(data, list) else "single value"
        raise SpecError(where, f"top level is a {kind}; it must be a mapping of keys such as {example}")
    return data


def _probe_folder(path: Path, folder: Path) -> None:
    """Create and remove a file in `folder`: the only test a read-only mount, /proc or a root user answers truly."""
    probe = folder / f".tokcost-{secrets.token_hex(4)}.check"
    try:
        os.close(os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
        os.unlink(probe)
    except OSError as exc:
        raise TokcostError(f"{path}: cannot write in folder {folder}: {exc.strerror or exc}") from None


def check_destination(path: Path, force: bool = False, force_hint: str = "--force") -> os.stat_result | None:
    """Refuse, before any work, a destination tokcost must not write; the stat of a file --force replaces
    (`force_hint`: how the caller asks for it, --force or the API's force=True)."""
    try:
        target = path.stat()  # follows a symlink to its file
    except FileNotFoundError:
        folder = path.parent
        problem = ("is a symlink to a missing file; remove it or give another name" if path.is_symlink() else
                   f"folder {folder} does not exist" if not folder.is_dir() else None)  # fmt: skip
        if problem:
            raise FileExistsRefusal(f"{path}: {problem}") from None
        _probe_folder(path, folder)
        return None
    except OSError as exc:  # a name too long, a file used as a folder, no permission
        raise TokcostError(f"{path}: cannot write: {exc.strerror or exc}") from None
    if stat.S_ISDIR(target.st_mode):
        raise FileExistsRefusal(f"{path}: is a directory; give a file name")
    if not stat.S_ISREG(target.st_mode):
        raise FileExistsRefusal(f"{path}: is not a regular file (a FIFO, device or socket); tokcost writes only files")
    if (target.st_dev, target.st_ino) in _READ:  # what the user wrote is never lost, even with --force
        raise FileExistsRefusal(f"{path}: is a file this command reads; write the output under another name")
    if not force:
        raise FileExistsRefusal(f"{path}: already exists; pass {force_hint} to replace it, or choose another name")
    return target


def _create(tmp: Path, final: Path) -> None:
    """Give the finished `tmp` the name `final` only if nothing has it: one of many racing writers wins."""
    try:
        os.link(tmp, final)  # atomic, and `final` never exists half-written
    except FileExistsError:
        raise
    except OSError as exc:  # a filesystem without hard links (FAT, some network mounts): claim, then rename
        if exc.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EMLINK):
            raise
        os.close(os.open(final, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
        os.replace(tmp, final)


@contextmanager
def open_new(path: Path, *, force: bool = False, binary: bool = False) -> Iterator[IO[Any]]:
    """A file to write `path` through: what the block writes appears under `path` whole when it ends, or not at
    all (an error, a signal); created only if absent, a regular file replaced only with `force`."""
    replaced = check_destination(path, force)
    final = path.resolve() if replaced else path  # --force on a symlink rewrites the file it points to
    tmp = final.with_name(f".{final.name[:100]}.{secrets.token_hex(4)}.tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o666)  # umask applies
        with os.fdopen(fd, "wb" if binary else "w", encoding=None if binary else "utf-8") as handle:
            if replaced:
                os.fchmod(fd, stat.S_IMODE(replaced.st_mode))  # a replaced file keeps its mode
            yield handle
            handle.flush()
            os.fsync(fd)
        if replaced:
            os.replace(tmp, final)
        else:
            _create(tmp, final)
    except FileExistsError:
        raise FileExistsRefusal(f"{path}: already exists; pass --force to replace it, or choose another name") from None
    except OSError as exc:
        raise TokcostError(f"{path}: cannot write: {exc.strerror or exc}") from None
    finally:  # on success, on errors and on signals (the CLI turns SIGTERM/SIGHUP into an exception)
        tmp.unlink(missing_ok=True)


def write_new(path: Path, text: str | bytes, *, force: bool = False) -> None:
    """Write text or bytes whole or not at all: create only if absent, replace a regular file only with `force`."""
    with open_new(path, force=force, binary=isinstance(text, bytes)) as handle:  # a picture (--plot) is bytes
        handle.write(text)
