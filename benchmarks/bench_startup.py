"""Start-up of the CLI, as ratios against a bare `python -c pass` measured in the same run (never asserted in tests).

Each round runs every command once in a fresh interpreter, in turn, so that a change in the machine's load
touches all of them alike; the figure is each command's median over the rounds divided by bare Python's, for
wall time and for CPU time (user + system, which a loaded machine disturbs less).
A warm-up round first compiles and caches the bytecode (the figures are with bytecode cached).
Targets (issue 21): `tokcost estimate -m llama-3.1-8b -g h100-sxm` at most 8x bare, `tokcost --version` at most 4x.

Run: python benchmarks/bench_startup.py [--rounds 15] [--importtime] [--against CHECKOUT] [WORD ...]
(WORD picks commands, e.g. `version estimate`; --against runs them in another checkout too, e.g. main's)
--importtime also lists the slowest imports of estimate and the dataclasses and pydantic models it builds.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FRAMEWORK = "import typer, rich.console, rich.table\nfrom pydantic import BaseModel, TypeAdapter"
COMMANDS = {
    "python -c pass": ["-c", "pass"],
    "typer+rich+pydantic only": ["-c", FRAMEWORK],  # their imports alone
    "typer+rich+pydantic in use": ["benchmarks/floor_cli.py", "--batch", "2"],  # estimate's shape, nothing of ours
    "tokcost --version": ["-m", "tokcost", "--version"],
    "tokcost --help": ["-m", "tokcost", "--help"],
    "tokcost estimate (table)": ["-m", "tokcost", "estimate", "-m", "llama-3.1-8b", "-g", "h100-sxm"],
    "tokcost estimate (json)": ["-m", "tokcost", "estimate", "-m", "llama-3.1-8b", "-g", "h100-sxm", "-f", "json"],
    "tokcost specs list": ["-m", "tokcost", "specs", "list"],
    "tokcost validate": ["-m", "tokcost", "validate", "-f", "json"],
}
REFERENCES = ("python -c pass", "typer+rich+pydantic only", "typer+rich+pydantic in use")
TARGETS = {"tokcost --version": 4.0, "tokcost estimate (table)": 8.0}


def _env(tree: Path = ROOT) -> dict[str, str]:
    """`tree`'s tokcost first on the path, bytecode written and reused, a fixed terminal width."""
    env = {**os.environ, "PYTHONPATH": str(tree), "COLUMNS": "120"}
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # the figures are with bytecode cached, as an installed tokcost runs
    return env


def once(args: list[str], tree: Path = ROOT) -> tuple[float, float]:
    """(wall seconds, CPU seconds: user + system) of one fresh interpreter running `args` in `tree`."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run([sys.executable, *args], check=True, capture_output=True, env=_env(tree), cwd=tree)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def medians(rounds: int, runs: dict[str, tuple[list[str], Path]]) -> dict[str, tuple[float, float]]:
    """Median (wall, CPU) seconds of each run over `rounds` interleaved rounds, after a warm-up round."""
    times: dict[str, list[tuple[float, float]]] = {name: [] for name in runs}
    for i in range(rounds + 1):
        for name, (args, tree) in runs.items():
            seconds = once(args, tree)
            if i:  # round 0 warms the page cache and writes the bytecode
                times[name].append(seconds)
    return {name: (statistics.median(w for w, _ in v), statistics.median(c for _, c in v)) for name, v in times.items()}


def top_imports(args: list[str], count: int = 12) -> list[str]:
    """The modules with the largest cumulative import time (python -X importtime) for one command."""
    run = subprocess.run(
        [sys.executable, "-X", "importtime", *args], capture_output=True, text=True, env=_env(), cwd=ROOT
    )
    rows = []
    for line in run.stderr.splitlines():
        if line.startswith("import time:") and "cumulative" not in line:
            _, self_us, total_us, name = (part.strip() for part in line.replace("import time:", "|").split("|"))
            rows.append((int(total_us), int(self_us), name))
    return [f"{total / 1e3:7.1f} ms (self {own / 1e3:5.1f})  {name}" for total, own, name in sorted(rows)[-count:]]


COUNT = """
import collections, contextlib, dataclasses, io, json, sys
import pydantic._internal._model_construction as construction
built = {"dataclasses": collections.Counter(), "pydantic models": collections.Counter()}
process = dataclasses._process_class
def counted(cls, *args, **kwargs):
    built["dataclasses"][cls.__module__] += 1
    return process(cls, *args, **kwargs)
dataclasses._process_class = counted
new = construction.ModelMetaclass.__new__
def counted_model(mcs, *args, **kwargs):
    cls = new(mcs, *args, **kwargs)
    built["pydantic models"][cls.__module__] += 1
    return cls
construction.ModelMetaclass.__new__ = counted_model
from tokcost.cli.app import main
with contextlib.redirect_stdout(io.StringIO()):
    main(sys.argv[1:])
print(json.dumps({kind: dict(counter) for kind, counter in built.items()}))
"""


def built_at_start(args: list[str]) -> list[str]:
    """Dataclasses and pydantic models that one command builds, tokcost's by module (the rest summed)."""
    run = subprocess.run([sys.executable, "-c", COUNT, *args], capture_output=True, text=True, env=_env(), cwd=ROOT)
    lines = []
    for kind, by_module in json.loads(run.stdout).items():
        ours = {m: n for m, n in sorted(by_module.items()) if m.startswith("tokcost")}
        listed = ", ".join(f"{m.removeprefix('tokcost.')} {n}" for m, n in ours.items())
        lines.append(f"{kind}: {sum(ours.values())} of tokcost's ({listed}), {sum(by_module.values())} in all")
    return lines


def main() -> None:
    """Print each command's median and its ratio to bare Python, with the targets and the machine's load."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--importtime", action="store_true", help="also list the slowest imports of estimate")
    parser.add_argument("--against", type=Path, help="also run each command in this checkout (e.g. main's)")
    parser.add_argument("only", nargs="*", help="run only the commands whose label holds one of these words")
    args = parser.parse_args()
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    names = [n for n in COMMANDS if n in REFERENCES or not args.only or any(w in n for w in args.only)]
    runs = {name: (COMMANDS[name], ROOT) for name in names}
    if args.against:
        runs.update({f"{args.against.name}: {n}": (COMMANDS[n], args.against.resolve()) for n in names
                     if n not in REFERENCES})  # fmt: skip
    result = medians(args.rounds, runs)
    bare_wall, bare_cpu = result["python -c pass"]
    print(f"{platform.python_implementation()} {platform.python_version()}, {os.cpu_count()} CPUs, "
          f"load {load:.2f} at start, {args.rounds} rounds; medians, and ratios to bare Python's")  # fmt: skip
    for name, (wall, cpu) in result.items():
        target = f"   (target <= {TARGETS[name]:.0f}x)" if name in TARGETS else ""
        print(f"{name:32} wall {wall * 1e3:7.1f} ms {wall / bare_wall:5.1f}x   "
              f"CPU {cpu * 1e3:7.1f} ms {cpu / bare_cpu:5.1f}x{target}")  # fmt: skip
    if args.importtime:
        print("slowest imports of `tokcost estimate` (cumulative):")
        print("\n".join(top_imports(COMMANDS["tokcost estimate (table)"])))
        print("built by `tokcost estimate`:")
        print("\n".join(built_at_start(COMMANDS["tokcost estimate (table)"][2:])))


if __name__ == "__main__":
    main()
