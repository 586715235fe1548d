"""Flags shared by every command that prices a deployment: the layout flags, and warnings on stderr.

One rule for a flag that would be ignored, in every command: a flag that asks for work or a behaviour that will
not happen is refused before any work, in one line that says what it needs (`--force` without a destination,
`--prompt` beside `--context`, `--mode graph` on the CPU, `--threads` on a GPU, plan's `--think-time` with
`--rate`); a flag that describes hardware the result does not use (`--network` for a layout inside one node) is
kept, with a warning on stderr, since the same command line is right for a larger layout.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Iterator
from contextlib import contextmanager

from tokcost.engine.layout import Layout
from tokcost.errors import UsageError
from tokcost.inputs import FLAG_OF_FIELD, keyword_message


def layout_flags(
    gpus: int | None, tp: int | None, pp: int, ep: int, dp: int, gpus_per_node: int | None, redundant: int = 0
) -> dict:
    """The workload keys of the layout flags (`--gpus` alone is the shorthand for `--tp`)."""
    return {"gpus": gpus, "tp": tp, "pp": pp, "ep": ep, "dp": dp, "gpus_per_node": gpus_per_node,
            "redundant_experts": redundant}  # fmt: skip


@contextmanager
def degree_named_as_given(gpus: object, tp: int | None, pp: int | None, dp: int | None) -> Iterator[None]:
    """`--gpus` without `--tp` sets the tensor-parallel degree (all of it alone, what `--pp`/`--dp` leave beside
    them): a refusal of that degree names the flag the user wrote."""
    try:
        yield
    except UsageError as exc:
        if not gpus or tp is not None:
            raise
        beside = (pp or 1) * (dp or 1) > 1
        label = "--gpus (the tensor-parallel degree it leaves beside --pp and --dp)" if beside else "--gpus"
        raise UsageError(keyword_message(str(exc), {**FLAG_OF_FIELD, "tp": label})) from None


def warn(lines: Iterable[str]) -> None:
    """Warnings go to stderr, one line each, never into the middle of a table or a JSON document."""
    from tokcost.cli.widths import cell_text

    for line in dict.fromkeys(lines):  # each once, in order; a newline in a model's name cannot split one
        sys.stderr.write(f"warning: {cell_text(line)}\n")


def unused_network(network: str | None, layouts: list[Layout]) -> list[str]:
    """The warning for a --network that no layout crosses (every replica inside one node), or none."""
    inside = [lay for lay in layouts if lay.nodes == 1]
    if network is None or not inside or len(inside) < len(layouts):
        return []
    lay = inside[0]
    return [f"--network {network}: the layout ({lay.gpus} GPU{'s' * (lay.gpus > 1)}) stays inside one node of "
            f"{lay.gpus_per_node}; the network is not used"]  # fmt: skip
