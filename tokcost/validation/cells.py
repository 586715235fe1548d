"""Which engine profile cell a published run belongs to: (engine, era, platform), read from the run's conditions.

One function, `cell_of`, for every published row (published.yaml) and every serving setup (serving.yaml), from
what the source states: the framework, its version as printed, CUDA/HIP graphs or eager, and the GPU's platform
(the harness, `measured_at`, decides only whether the per-request cost applies). The rules, engine by engine:
- vLLM: eager for a build before 0.2.6, when CUDA graphs became the default (PR 1926); enforce-eager for a later
  build run without graphs (`--enforce-eager`); else V0 from 0.2.6, V1 from 0.8 (the default engine from 0.8.0); an
  unstated version is V0, or enforce-eager without graphs (every such row in the data is a 2024 run, the notes say);
- TensorRT-LLM: static batching through 0.9, in-flight from 0.10; NIM's TensorRT-LLM profiles are in-flight;
- llama.cpp: eager on ROCm (its HIP builds launch every kernel), or without CUDA graphs (graphs: false, or a build
  before b2800); graphs otherwise (an unstated CUDA build of 2024-05 on has them);
- LMDeploy: its PyTorch engine when the version text names it, else TurboMind;
- SGLang, TGI, MLC LLM, torch.compile'd loops (gpt-fast, torchao): one era each; anything else: generic.
The engine is the run's own `engine`, one of the profiles its framework may be priced with (FRAMEWORK_PROFILES:
NIM runs TensorRT-LLM or vLLM, and its version is NIM's own, so its vLLM backend's era is the unstated one); the
data files refuse any other.
A version is the last dotted number in the text ("NIM llama-3.3-70b-instruct 1.8.0" -> 1.8.0, "0.6.3.post2" ->
0.6.3); llama.cpp's build number is the one in parentheses or after "b".
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from tokcost.eras import version_key

DOTTED = re.compile(r"\d+(?:\.\d+)+")
BUILD = re.compile(r"(?:\((\d{3,5})\)|\bb(\d{3,5})\b)")
LLAMACPP_GRAPHS_BUILD = 2800  # CUDA graphs by default in llama.cpp's CUDA backend (PR 6766, merged 2024-05)
# Serving-engine profiles (tokcost/profiles): what the engine adds on top of the hardware.
Engine = Literal["vllm", "sglang", "tensorrt-llm", "llama.cpp", "torch-compile", "lmdeploy", "tgi", "mlc", "generic"]
# The profiles a framework (the software as the source names it) may be priced with: its own; NIM by its backend,
# TensorRT-LLM or vLLM (the row's `engine` says which); gpt-fast and torchao loops by torch.compile's; a framework
# without a profile (ExLlama, DeepSpeed-MII, other) by the generic one.
FRAMEWORK_PROFILES: dict[str, tuple[Engine, ...]] = {
    "vllm": ("vllm",), "tensorrt-llm": ("tensorrt-llm",), "nim": ("tensorrt-llm", "vllm"), "sglang": ("sglang",),
    "llama.cpp": ("llama.cpp",), "mlc-llm": ("mlc",), "lmdeploy": ("lmdeploy",), "tgi": ("tgi",),
    "gpt-fast": ("torch-compile",), "torchao": ("torch-compile",),
}  # fmt: skip


def profiles_for(framework: str) -> tuple[Engine, ...]:
    """The engine profiles a framework's runs may be priced with (the first unless the run says otherwise)."""
    return FRAMEWORK_PROFILES.get(framework, ("generic",))


def engine_problem(framework: str, engine: str) -> str | None:
    """Why a run's `engine` cannot price its `framework` (None when it can): a vLLM run is not TensorRT-LLM's."""
    profiles = profiles_for(framework)
    if engine in profiles:
        return None
    return f"framework {framework} is priced with engine {' or '.join(profiles)}, not {engine}"


@dataclass(frozen=True, slots=True)
class Cell:
    """One engine era on one platform: what a profile's numbers are fitted per."""

    engine: str
    era: str
    platform: str

    @property
    def label(self) -> str:
        """'vllm@v1 on rocm'."""
        return f"{self.engine}@{self.era} on {self.platform}"


def version_of(text: str | None) -> tuple[int, ...] | None:
    """The last dotted number of a version as printed, as a tuple; None when it has none (a commit hash)."""
    if not text:
        return None
    found = DOTTED.findall(text)
    return version_key(found[-1]) if found else None


def engine_version_of(framework: str, text: str | None) -> tuple[int, ...] | None:
    """The engine's own version: None for NIM, whose printed version is the container's, not its backend's."""
    return None if framework == "nim" else version_of(text)


def _build_of(text: str | None) -> int | None:
    found = BUILD.search(text or "")
    return int(found.group(1) or found.group(2)) if found else None


VLLM_GRAPHS = (0, 2, 6)  # CUDA graphs by default from vLLM 0.2.6 (PR 1926, merged 2023-12-17)


def _vllm(version: tuple[int, ...] | None, graphs: bool | None) -> str:
    if version is not None and version < VLLM_GRAPHS:
        return "eager"  # a 2023 build: no graphs to turn on, the model run from Python throughout
    if graphs is False:
        return "enforce-eager"  # a build with graphs, run without them (an unstated build: the data's are 2024)
    return "v1" if version is not None and version >= (0, 8) else "v0"


def _llamacpp(text: str | None, graphs: bool | None, platform: str) -> str:
    if platform == "rocm" or graphs is False:
        return "eager"
    if graphs:
        return "graphs"
    build = _build_of(text)
    return "eager" if build is not None and build < LLAMACPP_GRAPHS_BUILD else "graphs"


def cell_of(*, framework: str, engine: str, version: str | None, graphs: bool | None, platform: str) -> Cell:
    """The cell of a run: its engine (one its framework is priced with: engine_problem), era, platform."""
    problem = engine_problem(framework, engine)
    if problem:
        raise ValueError(problem)
    name = engine
    v = engine_version_of(framework, version)
    if name == "vllm":
        era = _vllm(v, graphs)
    elif name == "tensorrt-llm":
        era = "inflight" if framework == "nim" or v is None or v >= (0, 10) else "static"
    elif name == "llama.cpp":
        era = _llamacpp(version, graphs, platform)
    elif name == "lmdeploy":
        era = "pytorch" if "pytorch" in (version or "").lower() else "turbomind"
    elif name in ("sglang", "tgi", "mlc", "torch-compile"):
        era = "main"
    else:
        era = "identity"
    return Cell(name, era, platform)
