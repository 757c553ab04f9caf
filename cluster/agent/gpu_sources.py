"""Where GPU telemetry comes from: NVML on a GPU node, a seeded simulation on virtual GPUs.

Both sources answer the same three questions for ``cluster/agent/telemetry.py``:
``read`` (one reading per GPU: utilisation, memory, temperature, power, ECC
totals), ``xid_events`` (Xid events since the last call) and
``job_memory`` (GPU memory of one attempt's processes on its GPUs). The agent picks the source by
its GPU mode (``--gpus auto``: NVML; ``--gpus N``: simulated), so a test on a
machine without a GPU runs the same sampling, report and server path as a GPU
node does.

The simulated source is steered by a JSON control file (default
``<workdir>/simulated-gpus.json``), re-read when it changes::

    {"gpus": {"3": {"util": 0, "ecc_dbe": 1, "xid": [79]}},   per GPU index
     "jobs": {"42": {"util": 0}}}                              per job id: that job's GPUs

``util`` pins the utilisation; ``ecc_dbe``/``ecc_sbe`` set the error totals;
``xid`` lists Xid events, each reported once. Without a pin a GPU held by a
job is busy (70-100 %) and a free one idle (0-2 %), with seeded noise.
"""

from __future__ import annotations

import json
import logging
import os
import random
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

log = logging.getLogger(__name__)

MIB = 1 << 20
SIMULATED_FB_TOTAL_MIB = 81_559  # an 80 GB H100's framebuffer as NVML reports it
CONTROL_FILE = "simulated-gpus.json"
MAX_CONTROL_BYTES = 1 << 20


class GpuSource(Protocol):
    def read(self, holders: Mapping[int, str]) -> list[dict[str, Any]]: ...
    def xid_events(self) -> list[tuple[int, int]]: ...
    def job_memory(self, indices: list[int], pgid: int) -> int: ...
    def close(self) -> None: ...


class NvmlSource:
    """Readings through NVML (``nvidia-ml-py``), the calls DCGM's exporter reads too.

    Utilisation is ``nvmlDeviceGetUtilizationRates().gpu``; memory
    ``nvmlDeviceGetMemoryInfo``; temperature the GPU sensor's; power
    ``nvmlDeviceGetPowerUsage`` (milliwatts); ECC the volatile totals of
    ``nvmlDeviceGetTotalEccErrors``; Xid events come from an event set
    registered for ``nvmlEventTypeXidCriticalError`` and polled without
    waiting. A reading NVML refuses (a GPU without ECC, power sensing off)
    is reported as 0.
    """

    def __init__(self) -> None:
        import pynvml

        self.nvml = pynvml
        pynvml.nvmlInit()
        self.handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]
        self.uuids = [_text(pynvml.nvmlDeviceGetUUID(h)) for h in self.handles]
        self.events = pynvml.nvmlEventSetCreate()
        for handle in self.handles:
            try:
                pynvml.nvmlDeviceRegisterEvents(handle, pynvml.nvmlEventTypeXidCriticalError, self.events)
            except pynvml.NVMLError as exc:  # not supported on this GPU: no Xid events from it
                log.info("no Xid events from GPU %s: %s", _text(pynvml.nvmlDeviceGetUUID(handle)), exc)

    def _try(self, call: Any, *args: Any) -> Any:
        try:
            return call(*args)
        except self.nvml.NVMLError:
            return None

    def read(self, holders: Mapping[int, str]) -> list[dict[str, Any]]:
        n = self.nvml
        out = []
        for i, h in enumerate(self.handles):
            util = self._try(n.nvmlDeviceGetUtilizationRates, h)
            mem = self._try(n.nvmlDeviceGetMemoryInfo, h)
            power = self._try(n.nvmlDeviceGetPowerUsage, h)
            out.append({
                "i": i, "uuid": self.uuids[i],
                "util": float(util.gpu) if util is not None else 0.0,
                "fb_used": int(mem.used // MIB) if mem is not None else 0,
                "fb_total": int(mem.total // MIB) if mem is not None else 0,
                "temp": float(self._try(n.nvmlDeviceGetTemperature, h, n.NVML_TEMPERATURE_GPU) or 0),
                "power": power / 1000.0 if power is not None else 0.0,
                "ecc_sbe": int(self._try(n.nvmlDeviceGetTotalEccErrors, h, n.NVML_MEMORY_ERROR_TYPE_CORRECTED,
                                         n.NVML_VOLATILE_ECC) or 0),
                "ecc_dbe": int(self._try(n.nvmlDeviceGetTotalEccErrors, h, n.NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
                                         n.NVML_VOLATILE_ECC) or 0),
            })
        return out

    def xid_events(self) -> list[tuple[int, int]]:
        n = self.nvml
        found = []
        while True:
            try:
                data = n.nvmlEventSetWait_v2(self.events, 0)
            except n.NVMLError:  # NVML_ERROR_TIMEOUT: none pending
                return found
            uuid = _text(n.nvmlDeviceGetUUID(data.device))
            if uuid in self.uuids:
                found.append((self.uuids.index(uuid), int(data.eventData)))

    def job_memory(self, indices: list[int], pgid: int) -> int:
        """MiB used on ``indices`` by compute processes of process group ``pgid`` (the attempt's)."""
        total = 0
        for index in indices:
            if index >= len(self.handles):
                continue
            for p in self._try(self.nvml.nvmlDeviceGetComputeRunningProcesses, self.handles[index]) or []:
                try:
                    mine = os.getpgid(p.pid) == pgid
                except OSError:  # ended since, or not visible from here
                    mine = False
                if mine:
                    total += int((p.usedGpuMemory or 0) // MIB)
        return total

    def close(self) -> None:
        self._try(self.nvml.nvmlEventSetFree, self.events)
        self._try(self.nvml.nvmlShutdown)


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class SimulatedSource:
    """Plausible, seeded series for virtual GPUs, steered by a control file (module docstring)."""

    def __init__(self, node: str, count: int, control: Path, seed: int = 0) -> None:
        self.node = node
        self.count = count
        self.control_path = control
        self.rng = [random.Random(f"{seed}:{node}:{i}") for i in range(count)]
        self.util = [0.0] * count
        self.fb_used = [0] * count
        self.control: dict[str, Any] = {}
        self._control_stamp: tuple[int, int] | None = None
        self._xids_seen: dict[int, int] = {}  # GPU index -> Xid entries of the control file already reported

    def _reload(self) -> None:
        try:
            st = self.control_path.stat()
        except OSError:
            self.control, self._control_stamp = {}, None
            return
        stamp = (st.st_mtime_ns, st.st_size)
        if stamp == self._control_stamp:
            return
        self._control_stamp = stamp
        try:
            if st.st_size > MAX_CONTROL_BYTES:
                raise ValueError(f"larger than {MAX_CONTROL_BYTES} bytes")
            loaded = json.loads(self.control_path.read_text())
            if not isinstance(loaded, dict):
                raise ValueError("not a JSON object")
            self.control = loaded
        except (OSError, ValueError) as exc:
            log.warning("simulated GPU control file %s ignored: %s", self.control_path, exc)
            self.control = {}

    def _pin(self, index: int, holders: Mapping[int, str]) -> dict[str, Any]:
        gpus, jobs = self.control.get("gpus"), self.control.get("jobs")
        pin: dict[str, Any] = {}
        if isinstance(jobs, dict) and index in holders and isinstance(jobs.get(str(holders[index])), dict):
            pin.update(jobs[str(holders[index])])
        if isinstance(gpus, dict) and isinstance(gpus.get(str(index)), dict):
            pin.update(gpus[str(index)])
        return pin

    def read(self, holders: Mapping[int, str]) -> list[dict[str, Any]]:
        self._reload()
        out = []
        for i in range(self.count):
            rng, pin = self.rng[i], self._pin(i, holders)
            busy = i in holders
            target = rng.uniform(70.0, 100.0) if busy else rng.uniform(0.0, 2.0)
            # A random walk towards the target: successive samples are correlated as real ones are.
            self.util[i] = min(100.0, max(0.0, 0.6 * self.util[i] + 0.4 * target))
            util = _bounded(pin.get("util"), 0.0, 100.0, self.util[i])
            fb_used = self.fb_used[i] = int(SIMULATED_FB_TOTAL_MIB * (0.55 + 0.3 * rng.random())) if busy else 0
            out.append({
                "i": i, "uuid": f"VGPU-{self.node}-{i}", "util": round(util, 1),
                "fb_used": fb_used, "fb_total": SIMULATED_FB_TOTAL_MIB,
                "temp": round(34.0 + 0.45 * util + rng.uniform(-1.0, 1.0), 1),
                "power": round(68.0 + 6.0 * util + rng.uniform(-5.0, 5.0), 1),
                "ecc_sbe": int(_bounded(pin.get("ecc_sbe"), 0, 1 << 40, 0)),
                "ecc_dbe": int(_bounded(pin.get("ecc_dbe"), 0, 1 << 40, 0)),
            })
        return out

    def xid_events(self) -> list[tuple[int, int]]:
        self._reload()
        gpus = self.control.get("gpus")
        found = []
        for key, pin in (gpus.items() if isinstance(gpus, dict) else ()):
            xids = pin.get("xid") if isinstance(pin, dict) else None
            if not (key.isascii() and key.isdigit() and int(key) < self.count and isinstance(xids, list)):
                continue
            index = int(key)
            seen = self._xids_seen.get(index, 0)
            found += [(index, x) for x in xids[seen:] if isinstance(x, int) and not isinstance(x, bool) and 0 <= x < 1 << 16]
            self._xids_seen[index] = max(seen, len(xids))
        return found

    def job_memory(self, indices: list[int], pgid: int) -> int:
        # A virtual GPU's memory is all its job's: nothing else runs on it.
        return sum(self.fb_used[i] for i in indices if i < self.count)

    def close(self) -> None:
        pass


def _bounded(value: Any, low: float, high: float, default: float) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not low <= value <= high:
        return default
    return float(value)


def open_source(gpu_source: str, node: str, count: int, control: Path, seed: int = 0) -> GpuSource | None:
    """The source for the agent's GPU mode ("nvml" or "virtual"); None when NVML cannot be opened."""
    if gpu_source == "virtual":
        return SimulatedSource(node, count, control, seed)
    try:
        return NvmlSource()
    except Exception as exc:  # ImportError or NVMLError: the node runs on without telemetry
        log.error("GPU telemetry off: NVML could not be opened (%s)", exc)
        return None
