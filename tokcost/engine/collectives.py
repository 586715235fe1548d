"""Collectives between GPUs, priced on the link their group spans (alpha-beta model: steps x latency + bytes / bw).

All-reduce of S bytes over n ranks, link bandwidth B per direction per GPU, one step's latency a (the link's
small-message floor, as nccl-tests / rccl-tests print it):
- one-shot: every rank reads the n - 1 other buffers at once:        a + (n - 1) S / B
- two-shot: reduce-scatter then all-gather, (n - 1)/n S each:        2 a + 2 (n - 1)/n S / B
- ring (NCCL's large-message default):                              2 (n - 1) a + 2 (n - 1)/n S / B
The engines pick the cheapest for the message size (TensorRT-LLM's and vLLM's custom all-reduce switch from
one-shot to two-shot as messages grow, NCCL goes to ring), so the engine takes the minimum.
A group that spans N nodes of g GPUs all-reduces hierarchically (NCCL's tree / NVLS-tree): reduce-scatter inside
each node over NVLink, then each GPU all-reduces its S/g share across nodes over its own NIC, then all-gathers:
2 (g - 1)/g S / B_node + 2 (N - 1)/N (S/g) / B_net + 2 a_node + 2 (N - 1) a_net.
All-to-all (expert dispatch and combine): a + V / B for the busiest rank's V bytes; a group that spans
nodes sends the share (nodes - 1)/nodes of V over the network while the rest crosses NVLink.
Point-to-point (pipeline stages): a + S / B.
All-gather of S bytes in all (the LM head's logits, split by vocabulary over n ranks), which vLLM's and
TensorRT-LLM's gathers run on NCCL: a + (n - 1)/n S / B, each rank receiving every other rank's share; `a` is the
group's small-message floor, as for a one-shot all-reduce (the link's latency at the group's size already counts
its hops: NCCL's cost model, base + hops).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from tokcost.engine.layout import Layout
from tokcost.errors import UsageError
from tokcost.hardware.spec import GpuSpec, Link

Op = Literal["all-reduce", "all-to-all", "all-gather", "send/recv"]
LinkClass = Literal["nvlink", "pcie", "network"]  # what an engine's per-collective cost depends on


def link_class(kind: str) -> LinkClass:
    """NVLink / xGMI fabrics (custom all-reduce kernels), PCIe (NCCL, RCCL), or a network between nodes."""
    if kind.startswith("pcie"):
        return "pcie"
    return "network" if kind in ("infiniband", "roce", "ethernet") else "nvlink"


@dataclass(frozen=True, slots=True)
class Path:
    """The link a group of ranks talks over, at the rates of one scenario."""

    name: str  # e.g. "nvlink4", "ib-ndr-400"
    bytes_per_s: float
    latency_s: float
    nodes: int = 1  # nodes the group spans (all-to-all splits its volume by them)
    intra_bytes_per_s: float = 0.0  # NVLink inside each node, for a group that spans nodes
    intra_latency_s: float = 0.0
    link_class: LinkClass = "nvlink"  # the class of the link it crosses (a group across nodes: the network)


@dataclass(frozen=True, slots=True)
class CollectiveCost:
    """One collective: what it moves, over which path, with which algorithm, and its time."""

    op: Op
    payload_bytes: float  # the buffer (all-reduce, send/recv) or the busiest rank's volume (all-to-all)
    ranks: int
    path: Path
    algorithm: str
    seconds: float
    link_bytes: float  # bytes one rank puts on the link


@dataclass(frozen=True, slots=True)
class Line:
    """One algorithm's cost, a line in the payload S: latency_s + S x seconds_per_byte; S x link_bytes_per_byte on
    the link (each rank's)."""

    algorithm: str
    latency_s: float
    seconds_per_byte: float
    link_bytes_per_byte: float

    def seconds(self, payload_bytes: float) -> float:
        """Time of one collective moving `payload_bytes`."""
        return self.latency_s + payload_bytes * self.seconds_per_byte


def allreduce_lines(ranks: int, path: Path) -> tuple[Line, ...]:
    """Every algorithm this group may use for an all-reduce (see the module docstring)."""
    n, bw, a = ranks, path.bytes_per_s, path.latency_s
    if path.nodes > 1:  # hierarchical: inside each node over NVLink, the share S/g across nodes over each NIC
        nodes, g = path.nodes, -(-n // path.nodes)
        inside = 2 * (g - 1) / g / path.intra_bytes_per_s
        across = 2 * (nodes - 1) / nodes / g
        intra_a = path.intra_latency_s if g > 1 else 0.0  # one GPU a node: no step inside the node
        # on the links: each GPU's NVLink legs (reduce-scatter and all-gather) and its NIC's share
        moved = 2 * (g - 1) / g + across
        return (Line("hierarchical", 2 * intra_a + 2 * (nodes - 1) * a, inside + across / bw, moved),)
    return (
        Line("one-shot", a, (n - 1) / bw, n - 1),
        Line("two-shot", 2 * a, 2 * (n - 1) / n / bw, 2 * (n - 1) / n),
        Line("ring", 2 * (n - 1) * a, 2 * (n - 1) / n / bw, 2 * (n - 1) / n),
    )


def alltoall_line(path: Path) -> Line:
    """Dispatch or combine of routed tokens: the busiest rank's volume, split across nodes when the group spans them."""
    if path.nodes > 1:  # the off-node share rides the network, the rest NVLink, at the same time
        off = (path.nodes - 1) / path.nodes
        return Line("pairwise", path.latency_s, max(off / path.bytes_per_s, (1 - off) / path.intra_bytes_per_s), 1.0)
    return Line("pairwise", path.latency_s, 1 / path.bytes_per_s, 1.0)


def allgather_line(ranks: int, path: Path) -> Line:
    """Every rank receives the n - 1 other shares of S: the group's latency floor, then (n - 1)/n S at the link."""
    n = ranks
    return Line("all-gather", path.latency_s, (n - 1) / n / path.bytes_per_s, (n - 1) / n)


def sendrecv_line(path: Path) -> Line:
    """Activations handed from one pipeline stage to the next: a + S / B."""
    return Line("p2p", path.latency_s, 1 / path.bytes_per_s, 1.0)


def collective_lines(op: Op, ranks: int, path: Path) -> tuple[Line, ...]:
    """The algorithms a collective may use; the cheapest for its payload runs."""
    if op == "all-reduce":
        return allreduce_lines(ranks, path)
    if op == "all-gather":
        return (allgather_line(ranks, path),)
    return (alltoall_line(path),) if op == "all-to-all" else (sendrecv_line(path),)


def cheapest(lines: tuple[Line, ...], payload_bytes: float) -> tuple[Line, float]:
    """The algorithm that moves `payload_bytes` soonest (the first of equals), and its time."""
    best, best_s = lines[0], lines[0].seconds(payload_bytes)
    for line in lines[1:]:
        seconds = line.seconds(payload_bytes)
        if seconds < best_s:
            best, best_s = line, seconds
    return best, best_s


def collective_cost(op: Op, payload_bytes: float, ranks: int, path: Path) -> CollectiveCost:
    """One collective on its cheapest algorithm."""
    line, seconds = cheapest(collective_lines(op, ranks, path), payload_bytes)
    return CollectiveCost(op, payload_bytes, ranks, path, line.algorithm, seconds,
                          payload_bytes * line.link_bytes_per_byte)  # fmt: skip


def allreduce_options(payload_bytes: float, ranks: int, path: Path) -> dict[str, tuple[float, float]]:
    """{algorithm: (seconds, bytes one rank puts on the link)} for every algorithm this group may use."""
    return {x.algorithm: (x.seconds(payload_bytes), payload_bytes * x.link_bytes_per_byte)
            for x in allreduce_lines(ranks, path)}  # fmt: skip


def allreduce(payload_bytes: float, ranks: int, path: Path) -> CollectiveCost:
    """The cheapest algorithm for this message size and group."""
    return collective_cost("all-reduce", payload_bytes, ranks, path)


def alltoall(volume_bytes: float, ranks: int, path: Path) -> CollectiveCost:
    """Dispatch or combine of the busiest rank's `volume_bytes`."""
    return collective_cost("all-to-all", volume_bytes, ranks, path)


def sendrecv(payload_bytes: float, path: Path) -> CollectiveCost:
    """Activations handed from one pipeline stage to the next."""
    return collective_cost("send/recv", payload_bytes, 2, path)


def _path(link: Link, efficiency: bool, ranks: int, nodes: int = 1, inside: Link | None = None) -> Path:
    """The path of a group of `ranks` GPUs over `link` (across `nodes`, with `inside` in each): each link's latency at
    the GPUs it joins (Link.latency_at_s: fewer ring hops in a smaller group)."""

    def rate(x: Link, group: int) -> float:  # a mesh's GPU reaches only its peers' links in the group
        return x.group_bytes_per_s(group) * (x.efficiency if efficiency else 1.0)

    per_node = -(-ranks // nodes)
    group = nodes if nodes > 1 else ranks  # the network joins one GPU of each node
    node = inside or link
    kind = "network" if nodes > 1 else link_class(link.kind)
    return Path(link.name or link.kind, rate(link, group), link.latency_at_s(group), nodes, rate(node, per_node),
                node.latency_at_s(per_node), kind)  # fmt: skip


@dataclass(frozen=True, slots=True)
class Links:
    """The links one deployment uses: inside a node (NVLink/xGMI/PCIe), PCIe beyond a bridge, between nodes."""

    intra: Link | None
    host: Link | None
    network: Link | None

    def path(
        self,
        ranks: int,
        layout: Layout,
        *,
        expected: bool,
        crosses_nodes: bool = False,
    ) -> Path:
        """The path a group of `ranks` consecutive GPUs spans (rates of the scenario: expected applies efficiencies);
        `crosses_nodes`: a pair of pipeline stages on two nodes."""
        nodes = max(-(-ranks // layout.gpus_per_node), 2 if crosses_nodes else 1)
        if nodes > 1:
            if self.network is None:
                group = "a pipeline stage's send to the next" if crosses_nodes else f"a group of {ranks} GPUs"
                raise UsageError(
                    f"--gpus-per-node: {group} spans {nodes} nodes of {layout.gpus_per_node}, and "
                    "no network is known; pass --network (e.g. ib-ndr-400)"
                )
            return _path(self.network, expected, ranks, nodes, self.within(layout.gpus_per_node))
        link = self.within(ranks)
        if link is None:
            raise UsageError(
                f"--gpus: this GPU spec has no link (GPU-to-GPU GB/s per direction), so the traffic between the "
                f"layout's {layout.gpus} GPUs (--tp, --pp, --ep, --dp) can't be priced; use one GPU, or add link: "
                "{kind, gb_s, latency_us, source} to a copy of the spec"
            )
        return _path(link, expected, ranks)

    def within(self, ranks: int) -> Link | None:
        """The link a group of `ranks` GPUs inside one node talks over: the intra link within its domain (an NVLink
        bridge's pair, a PCIe card's CPU socket), else the host link."""
        link = self.intra
        if link is not None and link.domain_gpus is not None and ranks > link.domain_gpus:
            return self.host  # a bridged pair talks NVLink, larger groups fall back to PCIe
        return link


def links_of(gpu: GpuSpec, network: Link | None) -> Links:
    """The GPU's own links and the deployment's network."""
    return Links(
        intra=gpu.link,
        host=gpu.host_link or (gpu.link if gpu.link and gpu.link.kind.startswith("pcie") else None),
        network=network,
    )
