"""What this node offers: GPUs (NVML or virtual), CPUs and memory."""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

VIRTUAL_GPU_MODEL = "virtual"


@dataclass(frozen=True)
class NodeResources:
    """Capacity declared in REPORT_REGISTER; ``gpu_models[i]`` names GPU index i."""

    gpus: int
    gpu_models: tuple[str, ...]
    cpus: float
    mem_gb: float
    gpu_source: str  # "nvml" or "virtual"


def nvml_gpu_models() -> list[str] | None:
    """Model names of the GPUs NVML sees, in NVML index order; None without NVML.

    NVML enumerates in PCI bus order; jobs get CUDA_DEVICE_ORDER=PCI_BUS_ID so
    CUDA's indices match these.
    """
    try:
        import pynvml
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        log.info("NVML unavailable: %s", exc)
        return None
    try:
        models = []
        for i in range(pynvml.nvmlDeviceGetCount()):
            name = pynvml.nvmlDeviceGetName(pynvml.nvmlDeviceGetHandleByIndex(i))
            models.append(name.decode() if isinstance(name, bytes) else str(name))
        return models
    finally:
        pynvml.nvmlShutdown()


def discover_gpus(spec: str) -> tuple[tuple[str, ...], str]:
    """(model per GPU index, source) for ``--gpus`` = "auto" or a count N.

    "auto" uses NVML and fails with a clear message when it finds no GPU; a
    count declares that many virtual GPUs (for CPU-only nodes and tests).
    """
    if spec == "auto":
        models = nvml_gpu_models()
        if not models:
            raise ValueError("--gpus auto: NVML found no GPU on this machine; pass --gpus N to declare N virtual GPUs")
        return tuple(models), "nvml"
    try:
        count = int(spec)
    except ValueError:
        raise ValueError(f"--gpus must be 'auto' or a whole number, got {spec!r}") from None
    if count < 0:
        raise ValueError(f"--gpus must not be negative, got {count}")
    return (VIRTUAL_GPU_MODEL,) * count, "virtual"


def detect_cpus() -> float:
    """CPUs this process may run on (affinity-aware)."""
    try:
        return float(len(os.sched_getaffinity(0)))
    except AttributeError:
        return float(os.cpu_count() or 1)


def detect_mem_gb(meminfo: Path = Path("/proc/meminfo")) -> float:
    """Total memory in GB (10^9 bytes) from /proc/meminfo; 0.0 if unknown."""
    try:
        for line in meminfo.read_text().splitlines():
            if line.startswith("MemTotal:"):
                return round(int(line.split()[1]) * 1024 / 1e9, 1)
    except (OSError, ValueError, IndexError):
        pass
    return 0.0


def discover(gpus: str, cpus: float | None, mem_gb: float | None) -> NodeResources:
    """Node capacity: GPUs per ``gpus``; CPUs and memory detected unless given."""
    models, source = discover_gpus(gpus)
    return NodeResources(
        gpus=len(models),
        gpu_models=models,
        cpus=detect_cpus() if cpus is None else cpus,
        mem_gb=detect_mem_gb() if mem_gb is None else mem_gb,
        gpu_source=source,
    )
