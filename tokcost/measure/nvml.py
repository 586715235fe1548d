"""What NVML says about an NVIDIA GPU (name, memory, theoretical bandwidth, power limit) and its power draw.

pynvml (the nvidia-ml-py package) is optional: without it, or without an NVIDIA driver, every
function returns None and says why in `notes`, so a measurement never fails for lack of NVML.
No torch here. NVML reference: https://docs.nvidia.com/deploy/nvml-api/
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from types import ModuleType
from typing import Any


@dataclass(frozen=True)
class NvmlInfo:
    """One GPU as NVML reports it; a field is None where the driver does not report it."""

    index: int
    name: str
    driver_version: str
    memory_total_bytes: int
    memory_bus_width_bits: int | None
    max_memory_clock_hz: float | None
    theoretical_bandwidth_bytes_per_s: float | None  # 2 x max memory clock x bus width / 8
    power_limit_w: float | None  # enforced limit


def _nvml(notes: list[str] | None) -> ModuleType | None:
    """pynvml, initialised; None (with the reason added to notes) when it is missing or fails."""
    try:
        import pynvml
    except ImportError:
        _note(notes, "NVML unavailable: pynvml is not installed (pip install nvidia-ml-py)")
        return None
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:  # NVMLError_LibraryNotFound, NVMLError_DriverNotLoaded, ...
        _note(notes, f"NVML unavailable: {exc}")
        return None
    return pynvml


def _note(notes: list[str] | None, message: str) -> None:
    if notes is not None:
        notes.append(message)


def _text(value: str | bytes) -> str:
    """Older pynvml returns bytes, newer returns str."""
    return value.decode() if isinstance(value, bytes) else value


def _optional(nvml: ModuleType, function: str, *args: Any) -> Any:
    """An NVML query's value, or None where this GPU, driver or pynvml version does not support it."""
    call = getattr(nvml, function, None)
    if call is None:
        return None
    try:
        return call(*args)
    except nvml.NVMLError:  # NVMLError_NotSupported, NVMLError_NoPermission, ...
        return None


def theoretical_bandwidth_bytes_per_s(max_memory_clock_hz: float, bus_width_bits: int) -> float:
    """Peak DRAM bandwidth: two transfers per memory clock (double data rate) x bus width in bytes.

    NVML's memory clock is the one this formula expects for both HBM and GDDR: H100 SXM reports
    2619 MHz on a 5120-bit bus, 2 x 2619e6 x 5120 / 8 = 3.35e12 B/s, the datasheet's 3.35 TB/s.
    """
    return 2 * max_memory_clock_hz * bus_width_bits / 8


def _uuid_key(uuid: str) -> str:
    """A UUID as NVML ("GPU-1a2b...") or torch ("1a2b...") writes it, reduced to its hex digits."""
    text = uuid.strip().lower()
    for prefix in ("gpu-", "mig-"):
        text = text.removeprefix(prefix)
    return text.replace("-", "")


def find_handle(nvml: ModuleType, uuid: str | None, index: int, notes: list[str] | None) -> tuple[Any, int]:
    """The NVML handle of the GPU torch uses, found by UUID (CUDA_VISIBLE_DEVICES and CUDA's own ordering
    make torch's index differ from NVML's); by index, with a note, when no UUID is known or none matches."""
    if uuid:
        for i in range(nvml.nvmlDeviceGetCount()):
            handle = nvml.nvmlDeviceGetHandleByIndex(i)
            if _uuid_key(_text(nvml.nvmlDeviceGetUUID(handle))) == _uuid_key(uuid):
                return handle, i
        _note(notes, f"NVML lists no GPU with UUID {uuid}; using NVML index {index}")
    else:
        _note(notes, f"no device UUID from torch; using NVML index {index}")
    return nvml.nvmlDeviceGetHandleByIndex(index), index


def device_info(index: int = 0, notes: list[str] | None = None, uuid: str | None = None) -> NvmlInfo | None:
    """NVML's view of the GPU with `uuid` (else NVML index `index`), or None (reason in notes)."""
    nvml = _nvml(notes)
    if nvml is None:
        return None
    try:
        handle, index = find_handle(nvml, uuid, index, notes)
        name = _text(nvml.nvmlDeviceGetName(handle))
        memory_total = int(nvml.nvmlDeviceGetMemoryInfo(handle).total)
        driver = _text(nvml.nvmlSystemGetDriverVersion())
    except nvml.NVMLError as exc:
        _note(notes, f"NVML has no GPU {index}: {exc}")
        nvml.nvmlShutdown()
        return None
    clock_mhz = _optional(nvml, "nvmlDeviceGetMaxClockInfo", handle, nvml.NVML_CLOCK_MEM)
    bus_bits = _optional(nvml, "nvmlDeviceGetMemoryBusWidth", handle)  # pynvml 11.5 and later
    limit_mw = _optional(nvml, "nvmlDeviceGetEnforcedPowerLimit", handle)
    nvml.nvmlShutdown()
    clock_hz = clock_mhz * 1e6 if clock_mhz else None
    bandwidth = theoretical_bandwidth_bytes_per_s(clock_hz, bus_bits) if clock_hz and bus_bits else None
    if bandwidth is None:
        _note(notes, "NVML does not report the memory clock and bus width: no theoretical bandwidth")
    return NvmlInfo(
        index=index,
        name=name,
        driver_version=driver,
        memory_total_bytes=memory_total,
        memory_bus_width_bits=bus_bits,
        max_memory_clock_hz=clock_hz,
        theoretical_bandwidth_bytes_per_s=bandwidth,
        power_limit_w=limit_mw / 1e3 if limit_mw else None,  # NVML reports milliwatts
    )


class EnergyMeter:
    """Energy one GPU used between start() and stop(), for the decode phase only.

    The total-energy counter (Volta and later: millijoules since driver load) read at both ends gives
    the exact energy; where it is missing, power readings sampled by a thread during the phase, times
    its wall time (NVML's reading is itself averaged over about a second on recent GPUs). The GPU is
    found by UUID, the one torch uses.
    """

    def __init__(self, uuid: str | None = None, index: int = 0, interval_s: float = 0.05) -> None:
        self.uuid, self.index, self.interval_s = uuid, index, interval_s
        self.notes: list[str] = []
        self.method: str | None = None  # "energy" or "samples" once stop() returned a value
        self._nvml: ModuleType | None = None
        self._handle: Any = None
        self._samples_w: list[float] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._energy_mj: float | None = None
        self._t0 = 0.0

    def start(self) -> None:
        """Begin a phase; does nothing (and stop() returns None) without NVML."""
        self._nvml, self._samples_w = _nvml(self.notes), []
        if self._nvml is None:
            return
        try:
            self._handle, _ = find_handle(self._nvml, self.uuid, self.index, self.notes)
        except self._nvml.NVMLError as exc:
            self.notes.append(f"NVML has no GPU {self.uuid or self.index}: {exc}")
            self._shutdown()
            return
        self._energy_mj = _optional(self._nvml, "nvmlDeviceGetTotalEnergyConsumption", self._handle)
        self._t0 = time.perf_counter()
        self._stop.clear()
        self._thread = threading.Thread(target=self._sample, name="tokcost-power", daemon=True)
        self._thread.start()

    def _sample(self) -> None:
        while True:
            milliwatts = _optional(self._nvml, "nvmlDeviceGetPowerUsage", self._handle) if self._nvml else None
            if milliwatts is not None:
                self._samples_w.append(milliwatts / 1e3)
            if self._stop.wait(self.interval_s):
                return

    def stop(self) -> float | None:
        """Joules used since start(), or None when nothing could be read."""
        if self._nvml is None or self._thread is None:
            return None
        energy_mj = _optional(self._nvml, "nvmlDeviceGetTotalEnergyConsumption", self._handle)
        elapsed_s = time.perf_counter() - self._t0
        self._stop.set()
        self._thread.join()
        self._thread = None
        self._shutdown()
        if self._energy_mj is not None and energy_mj is not None and energy_mj > self._energy_mj:
            self.method = "energy"
            return (energy_mj - self._energy_mj) / 1e3
        if self._samples_w:
            self.method = "samples"
            return sum(self._samples_w) / len(self._samples_w) * elapsed_s
        self.notes.append("NVML returned no power reading")
        return None

    def _shutdown(self) -> None:
        if self._nvml is not None:
            _optional(self._nvml, "nvmlShutdown")
            self._nvml = None
