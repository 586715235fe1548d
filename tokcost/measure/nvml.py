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


def device_info(index: int = 0, notes: list[str] | None = None) -> NvmlInfo | None:
    """NVML's view of GPU `index`, or None (reason appended to notes) without NVML or that GPU."""
    nvml = _nvml(notes)
    if nvml is None:
        return None
    try:
        handle = nvml.nvmlDeviceGetHandleByIndex(index)
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


class PowerSampler:
    """Average board power between start() and stop(), sampled by a background thread.

    Prefers the total-energy counter (Volta and later: millijoules since driver load), whose
    difference over the wall time is the exact mean; otherwise the mean of power readings
    (NVML's own reading is itself averaged over about a second on recent GPUs).
    """

    def __init__(self, index: int = 0, interval_s: float = 0.05) -> None:
        self.index, self.interval_s = index, interval_s
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
        """Begin sampling; does nothing (and stop() returns None) without NVML."""
        self._nvml, self._samples_w = _nvml(self.notes), []
        if self._nvml is None:
            return
        try:
            self._handle = self._nvml.nvmlDeviceGetHandleByIndex(self.index)
        except self._nvml.NVMLError as exc:
            self.notes.append(f"NVML has no GPU {self.index}: {exc}")
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
        """Mean watts since start(), or None when nothing could be read."""
        if self._nvml is None or self._thread is None:
            return None
        self._stop.set()
        self._thread.join()
        self._thread = None
        elapsed_s = time.perf_counter() - self._t0
        energy_mj = _optional(self._nvml, "nvmlDeviceGetTotalEnergyConsumption", self._handle)
        self._shutdown()
        if self._energy_mj is not None and energy_mj is not None and elapsed_s > 0 and energy_mj > self._energy_mj:
            self.method = "energy"
            return (energy_mj - self._energy_mj) / 1e3 / elapsed_s
        if self._samples_w:
            self.method = "samples"
            return sum(self._samples_w) / len(self._samples_w)
        self.notes.append("NVML returned no power reading")
        return None

    def _shutdown(self) -> None:
        if self._nvml is not None:
            _optional(self._nvml, "nvmlShutdown")
            self._nvml = None
