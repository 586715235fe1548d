"""GpuSpec: datasheet ceilings of one accelerator (decimal units, dense peaks only), what it sustains, its price."""

from __future__ import annotations

import math
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator

from tokcost.hardware.sustained import ANCHOR_COPY, ANCHOR_GEMM, Sustained, anchored
from tokcost.names import SpecName
from tokcost.units import COMPUTE_DTYPES, GB, MIB, TFLOPS, US

_FROZEN = ConfigDict(frozen=True, extra="forbid", strict=True, str_strip_whitespace=True)  # strict: no bool as a number
# Floors keep every time finite and admit any rate a real device measures, however loaded (a starved 2-core CPU
# streams 0.5 GB/s): `tokcost calibrate` writes measurements into these fields. Typos are the upper bounds' job
# (bytes written for GB: 3.35e12) and strict types'. Under the floors a measurement is refused, not clamped.
MIN_BANDWIDTH_GB_S = 0.001  # 1 MB/s
MIN_TFLOPS = 0.000001  # 1 MFLOP/s
# memory_runtime_mib over memory_gb, in bytes: real parts report 1.006 (GDDR with ECC, "24 GB" -> 23,028 MiB) to
# 1.074 (HBM marketed in GiB, "80 GB" -> 81,920 MiB; the H100's 81,559 MiB is 1.069); the CUDA-visible total is a
# few hundred MiB lower. Outside this range the figure is another unit or another part.
RUNTIME_MEMORY_RATIO = (0.90, 1.12)


class Achievable(BaseModel):
    """What `tokcost measure`'s own decode loop reached (calibrate records it). Not read by "expected" since issue
    19: expected = the `sustained` shares x the engine profile; an old file's fitted fractions load and are ignored."""

    model_config = _FROZEN

    # fractions under 1% are typos, not tuned loops; the lower bounds also keep every time finite
    bandwidth: float = Field(default=1.0, ge=0.01, le=1)
    compute: float = Field(default=1.0, ge=1e-4, le=1)  # a few rows' GEMM: under 1% of a matrix engine's peak
    step_overhead_us: float = Field(default=0.0, ge=0, le=1_000_000)  # per forward pass: launches, sampling
    request_overhead_us: float = Field(default=0.0, ge=0, le=10_000_000)  # once per request, added to TTFT
    allreduce_latency_us: float | None = Field(default=None, ge=0, le=1_000_000)  # None: interconnect_latency_us
    weight_only_quant_bandwidth: float | None = Field(default=None, ge=0.01, le=1)
    # how these fractions were found: fitted on published rows of this GPU's family, pooled over every family
    # (too few rows of its own), a guess, or measured by `tokcost calibrate`
    basis: Literal["fitted", "pooled", "guess", "measured"] = "guess"
    rows: int = Field(default=0, ge=0, le=1_000_000)  # published rows the fit used
    source: str = Field(default="", max_length=2000)


class Link(BaseModel):
    """A GPU-to-GPU path: NVLink/xGMI or PCIe inside a node, InfiniBand/RoCE between nodes (per GPU)."""

    model_config = _FROZEN

    name: SpecName = Field(default="", max_length=200)
    # the link's class sets how collectives run on it (collectives.link_class): an NVLink/xGMI fabric, PCIe, or a
    # network; a kind outside these (a capital letter, a typo) would silently run as NVLink, so it is refused
    kind: str = Field(max_length=100, pattern=r"^(nvlink\d*|nvlink-bridge|xgmi|pcie\d+|infiniband|roce|ethernet)$")
    gb_s: float = Field(ge=MIN_BANDWIDTH_GB_S, le=1_000_000)  # per direction, per GPU, decimal GB/s
    # the fixed cost of one collective step on this link (the small-message floor of nccl-tests / rccl-tests)
    latency_us: float = Field(ge=0, le=1_000_000)
    # the group size latency_us is stated at, and the latency one ring step adds per GPU pair (NCCL's and RCCL's
    # cost model: base + 2 (n - 1) hops): a smaller group takes 2 (R - n) fewer hops. None: latency_us at any size
    latency_ranks: int | None = Field(default=None, ge=2, le=1_000_000)
    latency_hop_us: float | None = Field(default=None, ge=0, le=1_000_000)
    # fraction of gb_s a large collective reaches (nccl-tests bus bandwidth / gb_s); "expected" only
    efficiency: float = Field(default=1.0, ge=0.01, le=1)
    # the most GPUs this link joins at its full rate (an NVLink bridge: 2); None: every GPU of the node
    domain_gpus: int | None = Field(default=None, ge=2, le=1_000_000)
    # point-to-point links per GPU of a fully connected node (AMD's xGMI: one to each of 7 peers), gb_s their sum; a
    # group of n GPUs drives only its n - 1 peers' links. None: a switch (NVSwitch) or a bus gives any group gb_s
    peer_links: int | None = Field(default=None, ge=1, le=1_000_000)
    source: str = Field(min_length=1, max_length=4000)
    notes: str = Field(default="", max_length=10_000)

    @property
    def bytes_per_s(self) -> float:
        """Bandwidth per direction in B/s."""
        return self.gb_s * GB

    def group_bytes_per_s(self, ranks: int) -> float:
        """Bandwidth per direction one GPU of a group of `ranks` reaches: gb_s through a switch; on a fully connected
        mesh the links to its n - 1 peers in the group (a pair: one link), the rest idle."""
        if self.peer_links is None:
            return self.bytes_per_s
        return self.bytes_per_s * min(max(ranks, 2) - 1, self.peer_links) / self.peer_links

    @property
    def latency_s(self) -> float:
        """Fixed cost of one collective step, in seconds."""
        return self.latency_us * US

    def latency_at_s(self, ranks: int) -> float:
        """The small-message latency of a group of `ranks` GPUs (for a network link, `ranks` nodes): latency_us at
        latency_ranks, less (or more) two hops for each GPU fewer (or more); one rank prices as a pair (the spec's
        check keeps a pair's latency at 0 or more)."""
        if self.latency_ranks is None or self.latency_hop_us is None:
            return self.latency_s
        n = max(ranks, 2)
        return (self.latency_us + 2 * (n - self.latency_ranks) * self.latency_hop_us) * US

    @model_validator(mode="after")
    def _latency_scaling_whole(self) -> Link:
        if (self.latency_ranks is None) != (self.latency_hop_us is None):
            raise ValueError("latency_ranks and latency_hop_us go together: the group latency_us is stated at, "
                             "and one hop's latency")  # fmt: skip
        if self.latency_ranks is not None and self.latency_hop_us is not None:  # a pair's latency: never below 0
            most = self.latency_us / (2 * (self.latency_ranks - 2)) if self.latency_ranks > 2 else math.inf
            if self.latency_hop_us > most:
                raise ValueError(f"latency_hop_us must be at most latency_us / (2 x (latency_ranks - 2)) = "
                                 f"{most:.4g}, so that a pair of GPUs has a latency of 0 or more (got "
                                 f"{self.latency_hop_us:g})")  # fmt: skip
        return self


Platform = Literal["cuda", "rocm"]  # the software stack an engine's kernels are built for (an engine's era may differ)


class GpuSpec(BaseModel):
    """One GPU's ceilings as published: memory, bandwidth, dense peak TFLOP/s per dtype, power, links, price."""

    model_config = _FROZEN

    name: SpecName = Field(min_length=1, max_length=200)
    source: str = Field(min_length=1, max_length=4000)
    # CUDA (NVIDIA) or ROCm (AMD): engines ship different kernels per platform (hipBLASLt, RCCL, triton attention),
    # and an engine profile states its gap on a platform apart from the hardware's own sustained shares
    platform: Platform = "cuda"
    memory_gb: float = Field(ge=0.1, le=100_000)  # as marketed ("80 GB" HBM parts hold ~80 GiB)
    # total memory the driver reports (nvidia-smi "Total", torch.cuda.mem_get_info()[1], rocm-smi), in MiB;
    # every memory figure uses it. None: unknown, memory_gb x 1e9 is used and the output says so.
    memory_runtime_mib: float | None = Field(default=None, ge=100, le=100_000_000)
    memory_bandwidth_gb_s: float = Field(ge=MIN_BANDWIDTH_GB_S, le=1_000_000)
    peak_tflops: dict[str, float]
    tdp_w: float | None = Field(default=None, ge=1, le=100_000)  # None: unknown (e.g. a calibrated CPU)
    link: Link | None = None  # GPU-to-GPU inside one node; None: the GPU cannot talk to a peer
    host_link: Link | None = None  # PCIe to the host and to peers outside link.domain_gpus (bridged pairs)
    network: str | None = Field(default=None, min_length=1, max_length=200)  # built-in network between nodes
    gpus_per_node: int = Field(default=8, ge=1, le=1024)  # GPUs one node (one NVLink/xGMI domain) holds
    price_per_hour_usd: float | None = Field(default=None, ge=0, le=100_000)  # on-demand, per GPU; --price overrides
    # the lowest and highest on-demand list prices the sources give (provenance.price_per_hour_usd names them)
    price_range_usd: list[Annotated[float, Field(ge=0, le=100_000)]] | None = Field(
        default=None, min_length=2, max_length=2
    )
    achievable: Achievable = Achievable()
    sustained: Sustained | None = None  # what the hardware itself sustains; None: not stated (a user's spec)
    device_names: list[str] = Field(default_factory=list)
    # runtime names of other parts that contain one of device_names and must never resolve to this spec (the H200
    # NVL is not the H200 SXM, the 141 GB "H20-3e" not the 96 GB H20): match_device_name skips the spec for them
    sibling_device_names: list[str] = Field(default_factory=list)
    provenance: dict[str, str] = Field(default_factory=dict)
    notes: str = Field(default="", max_length=10_000)

    @model_validator(mode="before")
    @classmethod
    def _renamed_keys(cls, data: Any) -> Any:
        if isinstance(data, dict):
            old = [k for k in ("interconnect_gb_s", "interconnect_latency_us") if k in data]
            if old:
                raise ValueError(
                    f"{old[0]} was replaced by link: {{kind, gb_s, latency_us, efficiency, source}} "
                    "(GB/s per direction; latency of one collective step)"
                )
        return data

    @field_validator("source")
    @classmethod
    def _source_not_blank(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("every GPU figure needs a source; give a datasheet URL or 'measured by ...'")
        return value

    @field_validator("peak_tflops")
    @classmethod
    def _known_dense_peaks(cls, value: dict[str, float]) -> dict[str, float]:
        if not value:
            raise ValueError(f"give at least one dense peak, keys among: {', '.join(COMPUTE_DTYPES)}")
        for key, tflops in value.items():
            if key not in COMPUTE_DTYPES:
                raise ValueError(f"unknown dtype {key!r}; allowed: {', '.join(COMPUTE_DTYPES)}")
            if not isinstance(tflops, (int, float)) or not math.isfinite(tflops) or not MIN_TFLOPS <= tflops <= 1e6:
                allowed = f"a number of TFLOP/s from {MIN_TFLOPS:f} to 1,000,000"
                raise ValueError(f"{key}: must be {allowed} (got {tflops!r})")
        return value

    @field_validator("memory_runtime_mib")
    @classmethod
    def _runtime_memory_near_marketed(cls, value: float | None, info: ValidationInfo) -> float | None:
        marketed = info.data.get("memory_gb")
        if value is None or marketed is None:
            return value
        low, high = RUNTIME_MEMORY_RATIO
        ratio = value * MIB / (marketed * GB)  # bytes the runtime reports over bytes as marketed
        if not low <= ratio <= high:
            span = f"{low * marketed * GB / MIB:,.0f} to {high * marketed * GB / MIB:,.0f} MiB"
            raise ValueError(
                f"{value:,.0f} MiB is {ratio:.3g}x the marketed memory_gb ({marketed:g} GB); the runtime total must be "
                f"{low} to {high} x memory_gb, i.e. {span} (real parts report 1.006 to 1.074: an '80 GB' H100 shows "
                "81,559 MiB)"
            )
        return value

    @field_validator("price_range_usd")
    @classmethod
    def _range_holds_the_price(cls, value: list[float] | None, info: ValidationInfo) -> list[float] | None:
        if value is None:
            return value
        price = info.data.get("price_per_hour_usd")
        if price is None and "price_per_hour_usd" not in info.data:
            return value  # the price itself is wrong: its own error says so
        if price is None:
            raise ValueError("a range needs price_per_hour_usd, the price every command uses, inside it")
        low, high = value
        if not low <= price <= high:
            raise ValueError(f"[low, high] must hold price_per_hour_usd ({price:g}) with low <= high (got {value})")
        return value

    @field_validator("network")
    @classmethod
    def _built_in_network(cls, value: str | None) -> str | None:
        from tokcost.catalog import builtin_names, suggest  # lazy: spec modules import nothing of the loaders

        if value is None:
            return value
        names = builtin_names("networks")
        if value not in names:
            hint, _ = suggest(names, value)
            raise ValueError(f"unknown network {value!r}; {hint}known networks: {', '.join(names)}")
        return value

    @model_validator(mode="after")
    def _gemm_share_per_peak(self) -> GpuSpec:
        if self.sustained is None:
            return self
        unknown = [d for d in self.sustained.gemm if d not in self.peak_tflops]
        missing = self.sustained.missing_gemm(list(self.peak_tflops))
        if unknown or missing:
            what = f"no peak_tflops entry for {', '.join(unknown)}" if unknown else f"no entry for {', '.join(missing)}"
            raise ValueError(
                f"sustained.gemm: {what}; give one entry per dtype peak_tflops lists ({', '.join(self.peak_tflops)}),"
                " where bf16 and fp16 may share one"
            )
        return self

    @property
    def memory_bytes(self) -> float:
        """Capacity in bytes: what the runtime reports (MiB x 2^20), else the marketed GB x 1e9."""
        if self.memory_runtime_mib is not None:
            return self.memory_runtime_mib * MIB
        return self.memory_gb * GB

    @property
    def memory_basis(self) -> str:
        """Where memory_bytes comes from, for outputs."""
        if self.memory_runtime_mib is not None:
            return f"runtime {self.memory_runtime_mib:,.0f} MiB"
        return f"marketed {self.memory_gb:g} GB (no memory_runtime_mib in the spec)"

    @property
    def bandwidth_bytes_per_s(self) -> float:
        """Peak memory bandwidth in B/s."""
        return self.memory_bandwidth_gb_s * GB

    @property
    def hardware(self) -> Sustained:
        """What the hardware sustains: the spec's `sustained` block, else the stated anchors (sustained.anchored)."""
        return self.sustained if self.sustained is not None else anchored(tuple(self.peak_tflops))

    @property
    def expected_provenance(self) -> str:
        """Where expected's hardware half comes from at 16-bit compute (expected_provenance_at)."""
        return self.expected_provenance_at(None)

    def expected_provenance_at(self, compute: str | None) -> str:
        """Where expected's hardware half comes from, naming the GEMM share of the `compute` dtype the matmuls run in
        (None: the 16-bit one): 'measured: ...', 'anchor: ...' (an assumption), or a mix."""
        if self.sustained is None:
            ignored = "; its achievable: block is ignored" if "achievable" in self.model_fields_set else ""
            return (f"anchor: no sustained block, so copy {ANCHOR_COPY:g} and GEMM {ANCHOR_GEMM:g} of the datasheet "
                    f"are assumed{ignored}")  # fmt: skip
        h = self.sustained
        if compute is not None and h.gemm_for(compute) is not None:  # the share the matmuls are priced at
            key, gemm = compute, h.gemm_for(compute)
        else:
            key = next((k for k in ("bf16", "fp16") if k in h.gemm), next(iter(h.gemm)))  # named: fp16's may differ
            gemm = h.gemm[key]
        bases = {h.copy_bandwidth.basis, gemm.basis}
        basis = bases.pop() if len(bases) == 1 else "measured and anchor"
        loop = ("; its achievable: block (a measure loop's stream share and step overhead) prices tokcost measure's "
                "calibrated prediction, not this" if "achievable" in self.model_fields_set else "")  # fmt: skip
        return (
            f"{basis}: copy {h.copy_bandwidth.fraction:g} ({h.copy_bandwidth.basis}), {key} GEMM "
            f"{gemm.fraction:g} ({gemm.basis}) of the datasheet (the sustained block's sources){loop}"
        )

    @property
    def sustained_provenance(self) -> dict[str, str]:
        """Where each sustained share comes from ('copy_bandwidth', 'gemm.bf16', ...): 'measured: ...' or
        'anchor: ...'; empty when the spec states none."""
        return self.sustained.provenance if self.sustained is not None else {}

    def peak_flops_per_s(self, dtype: str) -> float | None:
        """Dense peak FLOP/s for matmuls in `dtype`; fp16 and bf16 stand in for each other."""
        for key in (dtype, {"bf16": "fp16", "fp16": "bf16"}.get(dtype, dtype)):
            if key in self.peak_tflops:
                return self.peak_tflops[key] * TFLOPS
        return None
