"""Where pictures are drawn and written: matplotlib imported only here, only when a picture is asked for.

No pyplot and no global backend: each picture is a `matplotlib.figure.Figure` that renders itself (Agg for
PNG, the SVG backend for SVG), so a notebook's own matplotlib settings are left alone. SVG keeps its text as
text (searchable, and what the tests read) and carries no date, so the same result writes the same file.
"""

from __future__ import annotations

import importlib.util
import io
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tokcost.errors import UsageError
from tokcost.files import check_destination, write_new

if TYPE_CHECKING:
    from matplotlib.figure import Figure

SUFFIXES = (".png", ".svg")
# the plot extra, as named in pyproject.toml; prefixed with what asked for a picture (--plot, or the API's plot())
MISSING = "matplotlib is not installed; pip install 'tokcost[plot]' (in a tokcost checkout: pip install -e '.[plot]')"
DPI = 110  # PNG pixels per inch: a 12 x 6.5 in figure is 1320 x 715 px, readable in a design doc
CEILING_ALPHA, EXPECTED_ALPHA = 1.0, 0.45  # ceiling drawn solid, expected lighter (or hollow)
USD = r"\$"  # a bare $ pair would switch matplotlib's text to math mode


def require(asker: str = "plot()") -> Any:
    """The matplotlib module, or the one-line error that names the extra to install (`asker`: what wanted it)."""
    if importlib.util.find_spec("matplotlib") is None:
        raise UsageError(f"{asker}: {MISSING}")
    try:
        import matplotlib
    except ImportError as exc:  # installed but broken (a missing compiled dependency)
        raise UsageError(f"{asker}: {MISSING} ({exc})") from None
    return matplotlib


def check_path(path: Path | None, *, force: bool = False) -> Path | None:
    """The --plot destination, checked before any work: a .png or .svg name in a writable folder, matplotlib
    present. An existing file is refused unless `force` (--force); a folder, a FIFO or a missing folder always."""
    return None if path is None else _destination(path, "--plot", force)


def _destination(path: Path, asker: str, force: bool = True) -> Path:
    """`path` as a picture's destination, or the one line naming `asker` (--plot, or the API's plot())."""
    if path.suffix.lower() not in SUFFIXES:
        raise UsageError(f"{asker}: {path.name!r} must end in .png or .svg (the suffix picks the format)")
    if importlib.util.find_spec("matplotlib") is None:
        raise UsageError(f"{asker}: {MISSING}")
    check_destination(path, force=force, force_hint="--force" if asker.startswith("--") else "force=True")
    return path


def new_figure(width_in: float, height_in: float) -> Figure:
    """An empty figure with constrained layout (labels never overlap the axes)."""
    require()
    from matplotlib.figure import Figure

    return Figure(figsize=(width_in, height_in), layout="constrained")


def render(fig: Figure, fmt: str) -> bytes:
    """The figure as PNG or SVG bytes; SVG text stays text and the file carries no date."""
    matplotlib = require()
    buffer = io.BytesIO()
    with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": "tokcost"}):
        metadata = {"Date": None} if fmt == "svg" else {"Software": "tokcost (matplotlib)"}
        fig.savefig(buffer, format=fmt, dpi=DPI, metadata=metadata)
    return buffer.getvalue()


def save(fig: Figure, path: Path | str, *, force: bool = False, asker: str = "plot()") -> Path:
    """Write the figure to `path` (.png or .svg, by its suffix) whole or not at all; returns the path. An existing
    file is replaced only with `force` (the CLI's --force, the API's plot(..., force=True): what the user wrote is
    never lost by default); `asker` names the caller in a refusal."""
    target = _destination(Path(path), asker, force)
    write_new(target, render(fig, target.suffix.lower().lstrip(".")), force=force)
    return target


def colors(names: list[str]) -> dict[str, Any]:
    """One stable colour per name, in order of first appearance: tab10's ten hues, then lighter and other ones."""
    matplotlib = require()
    maps = matplotlib.colormaps
    palette = list(maps["tab10"].colors) + list(maps["tab20"].colors[1::2]) + list(maps["tab20b"].colors)
    unique = list(dict.fromkeys(names))
    return {name: palette[i % len(palette)] for i, name in enumerate(unique)}
