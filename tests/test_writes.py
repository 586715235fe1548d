"""Writes never lose what the user had: create-only is atomic, modes follow the umask or the replaced file,
only regular files are replaced, and nothing is left behind by an error, a full disk or a signal.

Race and signal checks run real processes (`python -m tokcost`), as a user's shell would.
"""

from __future__ import annotations

import errno
import os
import signal
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tokcost.errors import FileExistsRefusal, TokcostError
from tokcost.files import check_destination, write_new

ROOT = Path(__file__).parents[1]
CONFIG = ROOT / "tests" / "assets" / "hf" / "llama.json"
posix_only = pytest.mark.skipif(os.name != "posix", reason="POSIX modes, FIFOs and signals")


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "200"}


def _tokcost(*args: str, cwd: Path, **kwargs) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "tokcost", *args], cwd=cwd, env=_env(), text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, **kwargs)  # fmt: skip


def _leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.endswith(".tmp"))


@pytest.fixture
def umask():
    """Set the process umask for one test, then restore it."""
    old = os.umask(0o022)
    yield lambda mask: os.umask(mask)
    os.umask(old)


@pytest.mark.slow  # twenty processes
@posix_only
def test_twenty_racing_writers_without_force_leave_exactly_one_winner(tmp_path):
    # issue 14: an exists() check before os.replace let up to 8 of 20 processes "win" and overwrite each other
    procs = [_tokcost("specs", "import", str(CONFIG), "--name", f"writer-{i}", "-o", "same.yaml", cwd=tmp_path)
             for i in range(20)]  # fmt: skip
    results = [(p.wait(timeout=900), *p.communicate()) for p in procs]  # a hang guard: 20 imports share 2 cores
    winners = [i for i, (code, out, _) in enumerate(results) if code == 0]
    assert len(winners) == 1, results
    losers = [err for code, _, err in results if code != 0]
    assert all(err.count("\n") == 1 and "same.yaml: already exists; pass --force" in err for err in losers), losers
    assert {code for code, _, _ in results} == {0, 2}
    written = yaml.safe_load((tmp_path / "same.yaml").read_text())
    assert written["name"] == f"writer-{winners[0]}"  # the winner's file, whole
    assert _leftovers(tmp_path) == []


@posix_only
@pytest.mark.parametrize(("mask", "mode"), [(0o022, 0o644), (0o077, 0o600), (0o002, 0o664)])
def test_a_new_file_honours_the_umask(tmp_path, umask, mask, mode):
    umask(mask)
    write_new(tmp_path / "m.yaml", "a: 1\n")
    assert stat.S_IMODE((tmp_path / "m.yaml").stat().st_mode) == mode  # 0666 & ~umask, as any new file


@posix_only
def test_force_keeps_the_replaced_files_mode(tmp_path, umask):
    umask(0o077)
    target = tmp_path / "m.yaml"
    target.write_text("old\n")
    target.chmod(0o664)
    write_new(target, "new\n", force=True)
    assert target.read_text() == "new\n" and stat.S_IMODE(target.stat().st_mode) == 0o664


@posix_only
def test_force_through_a_symlink_rewrites_its_file_and_keeps_the_link(tmp_path):
    real = tmp_path / "real.yaml"
    real.write_text("old\n")
    link = tmp_path / "link.yaml"
    link.symlink_to(real)
    with pytest.raises(FileExistsRefusal, match="already exists"):
        write_new(link, "new\n")
    write_new(link, "new\n", force=True)
    assert link.is_symlink() and real.read_text() == "new\n"


@posix_only
@pytest.mark.parametrize("force", [False, True])
def test_non_regular_targets_are_refused_even_with_force(tmp_path, force):
    fifo = tmp_path / "pipe.yaml"
    os.mkfifo(fifo)
    dangling = tmp_path / "dangling.yaml"
    dangling.symlink_to(tmp_path / "missing.yaml")
    for target, why in [(fifo, "not a regular file"), (Path("/dev/null"), "not a regular file"),
                        (tmp_path, "is a directory"), (dangling, "symlink to a missing file")]:  # fmt: skip
        with pytest.raises(FileExistsRefusal, match=why):
            write_new(target, "x\n", force=force)
    assert stat.S_ISFIFO(fifo.stat().st_mode) and dangling.is_symlink() and not (tmp_path / "missing.yaml").exists()


def test_destination_checked_before_any_work(tmp_path):
    # measure --save and calibrate --out call this first, not after minutes of measuring
    (tmp_path / "taken.json").write_text("{}")
    assert check_destination(tmp_path / "new.json") is None
    assert check_destination(tmp_path / "taken.json", force=True).st_size == 2
    for path, why in [(tmp_path / "taken.json", "already exists"), (tmp_path / "no" / "x.json", "does not exist")]:
        with pytest.raises(FileExistsRefusal, match=why):
            check_destination(path)


@pytest.mark.parametrize("error", [OSError(errno.ENOSPC, "No space left on device"), KeyboardInterrupt()])
def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path, monkeypatch, error):
    target = tmp_path / "m.yaml"
    target.write_text("precious\n")

    def fail(fd: int) -> None:
        raise error

    monkeypatch.setattr(os, "fsync", fail)  # the disk fills (or Ctrl-C arrives) after the data is written
    with pytest.raises(TokcostError if isinstance(error, OSError) else KeyboardInterrupt) as err:
        write_new(target, "new\n", force=True)
    if isinstance(error, OSError):
        assert str(err.value) == f"{target}: cannot write: No space left on device"
    assert target.read_text() == "precious\n" and _leftovers(tmp_path) == []


def test_a_full_disk_is_one_line_from_the_cli(cli, tmp_path, monkeypatch):
    monkeypatch.setattr(os, "fsync", lambda fd: (_ for _ in ()).throw(OSError(errno.ENOSPC, "No space left")))
    r = cli("specs", "import", str(CONFIG), "-o", str(tmp_path / "m.yaml"))
    assert r.exit_code == 2 and r.stderr == f"error: {tmp_path / 'm.yaml'}: cannot write: No space left\n"
    assert list(tmp_path.iterdir()) == []


@posix_only
@pytest.mark.slow  # three child processes that import the CLI and are killed mid-write
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP])
def test_a_signal_during_the_write_leaves_no_temporary_file(tmp_path, sig):
    # the child blocks in fsync (the data is in the temp file), says so, and is signalled there
    code = (
        "import os, sys, time\n"
        "os.fsync = lambda fd: (print('writing', flush=True), time.sleep(60))\n"
        "from tokcost.cli.app import run\n"
        f"sys.argv = ['tokcost', 'specs', 'import', {str(CONFIG)!r}, '-o', 'm.yaml']\n"
        "run()\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", code], cwd=tmp_path, env=_env(), text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip
    assert proc.stdout.readline() == "writing\n"
    assert len(_leftovers(tmp_path)) == 1  # the temporary file exists while it is written
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + sig, err
    assert err == f"error: interrupted ({sig.name})\n"
    assert list(tmp_path.iterdir()) == []  # no .tmp, no half-written m.yaml


def _signalled_sweep(tmp_path: Path, points: str, flags: list[str], sig: signal.Signals) -> tuple[int, str]:
    """(exit code, stderr) of a sweep whose iter_sweep is `points` (code that prints 'sweeping' and sleeps), sent
    `sig` once it says so."""
    code = (
        "import sys, time\n"
        "import tokcost.cli.sweep_cmd as sweep\n"
        "real = sweep.iter_sweep\n"
        f"{points}"
        "from tokcost.cli.app import run\n"
        f"sys.argv = ['tokcost', 'sweep', '-m', 'llama-3.1-8b', '-g', 'h100-sxm', '-b', '1,2', *{flags!r}]\n"
        "run()\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", code], cwd=tmp_path, env=_env(), text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip
    assert proc.stdout.readline() == "sweeping\n"
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=60)
    return proc.returncode, err


@posix_only
def test_an_interrupted_command_says_so_in_one_line(tmp_path):
    points = "sweep.iter_sweep = lambda *a, **k: (print('sweeping', flush=True), time.sleep(60))\n"
    assert _signalled_sweep(tmp_path, points, [], signal.SIGINT) == (130, "error: interrupted (SIGINT)\n")


@posix_only
def test_a_command_that_answers_sigterm_exits_as_the_signal_says(tmp_path):
    # sweep --out answers an interrupt with what it kept; under SIGTERM it exited 130, Ctrl-C's code
    points = (
        "def points(*a, **k):\n"
        "    yield next(real(*a, **k))\n"
        "    print('sweeping', flush=True)\n"
        "    time.sleep(60)\n"
        "sweep.iter_sweep = points\n"
    )
    got = _signalled_sweep(tmp_path, points, ["-f", "csv", "--out", "s.csv"], signal.SIGTERM)
    assert got == (143, "interrupted: nothing was written to s.csv\n")
    assert _leftovers(tmp_path) == [] and not (tmp_path / "s.csv").exists()


def test_a_read_only_folder_is_refused_before_and_during_the_write(cli, tmp_path, monkeypatch):
    # (root ignores folder modes, so the OS's answer is simulated: first the early check, then the write itself)
    out = tmp_path / "m.yaml"
    real_open = os.open

    def read_only(path, flags, mode=0o777):
        if flags & os.O_CREAT:
            raise PermissionError(errno.EACCES, "Permission denied", str(path))
        return real_open(path, flags, mode)

    monkeypatch.setattr(os, "open", read_only)
    r = cli("specs", "import", str(CONFIG), "-o", str(out))
    assert (r.exit_code, r.stderr) == (2, f"error: {out}: cannot write in folder {tmp_path}: Permission denied\n")

    def read_only_after_the_check(path, flags, mode=0o777):
        if flags & os.O_CREAT and str(path).endswith(".tmp"):  # the early probes succeed; the write itself is refused
            raise PermissionError(errno.EACCES, "Permission denied", str(path))
        return real_open(path, flags, mode)

    monkeypatch.setattr(os, "open", read_only_after_the_check)
    r = cli("specs", "import", str(CONFIG), "-o", str(out))
    assert (r.exit_code, r.stderr) == (2, f"error: {out}: cannot write: Permission denied\n")
    assert list(tmp_path.iterdir()) == []


def test_an_output_never_replaces_an_input_even_with_force(cli, tmp_path):
    spec = tmp_path / "model.yaml"
    assert cli("specs", "import", str(CONFIG), "-o", str(spec)).exit_code == 0
    before = spec.read_bytes()
    sweep = ("sweep", "-m", str(spec), "-g", "h100-sxm", "-b", "1,8", "-f", "csv", "--force", "--out")
    r = cli(*sweep, str(spec))
    assert r.exit_code == 2
    assert r.stderr == f"error: {spec}: is a file this command reads; write the output under another name\n"
    assert spec.read_bytes() == before and _leftovers(tmp_path) == []
    assert cli(*sweep, str(tmp_path / "sweep.csv")).exit_code == 0  # another name is written
    assert (tmp_path / "sweep.csv").read_text().startswith("model,")


def test_calibrate_refuses_an_output_that_names_its_model_before_any_probe(cli, tmp_path, monkeypatch):
    from tokcost.cli import calibrate_cmd

    spec = tmp_path / "model.yaml"
    assert cli("specs", "import", str(CONFIG), "-o", str(spec)).exit_code == 0
    before = spec.read_bytes()

    def no_probe(*args, **kwargs):  # it ran every probe (a minute on a CPU) and then refused
        raise AssertionError("probed before refusing the output")

    monkeypatch.setattr(calibrate_cmd, "_calibrate", no_probe)
    r = cli("calibrate", "--device", "cpu", "-m", str(spec), "-o", str(spec), "--force")
    assert r.exit_code == 2
    assert r.stderr == f"error: --out: {spec}: is a file this command reads; write the output under another name\n"
    assert spec.read_bytes() == before


def test_out_dash_is_stdout_and_writes_no_file(cli, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # it wrote a file named '-' in the working folder
    r = cli("sweep", "-m", "llama-3.1-8b", "-g", "h100-sxm", "-b", "1,8", "-f", "csv", "--out", "-")
    assert r.exit_code == 0 and r.stdout.startswith("model,gpu,") and len(r.stdout.splitlines()) == 3
    r = cli("specs", "import", str(CONFIG), "-o", "-")
    assert r.exit_code == 0 and "\nname: " in r.stdout
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(("command", "flag"), [("measure", "--save"), ("calibrate", "--out")])
def test_a_folder_or_taken_file_given_to_a_flag_is_refused_naming_the_flag(cli, tmp_path, command, flag):
    # an audit: "--save DIR" said "error: DIR: is a directory" without naming the flag it came from
    name = "taken.json" if command == "measure" else "taken.yaml"
    (tmp_path / name).write_text("{}\n")
    for target, why in [(tmp_path, "is a directory"), (tmp_path / name, "already exists; pass --force")]:
        r = cli(command, "-m", "llama-3.2-1b", "--device", "cpu", flag, str(target))
        assert r.exit_code == 2 and r.stderr.startswith(f"error: {flag}: {target}: "), r.stderr
        assert why in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert (tmp_path / name).read_text() == "{}\n"
