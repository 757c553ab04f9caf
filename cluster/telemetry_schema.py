"""The GPU telemetry report (``protocol.REPORT_TELEMETRY``): its fields and the check both sides run.

An agent sends one report per sampling interval (``--telemetry-interval``,
5 s by default) with every GPU of its node and every attempt it runs::

    sampled_at: float                       Unix seconds of the sample
    gpus: [{"i": 0,                         GPU index on the node (CUDA_VISIBLE_DEVICES order)
            "uuid": "GPU-...",              NVML UUID ("VGPU-<node>-<i>" for a virtual GPU)
            "util": 93.0,                   utilisation, percent of the last sample period
            "fb_used": 61440, "fb_total": 81920,   framebuffer memory, MiB
            "temp": 61.0, "power": 412.5,   degrees C, watts
            "ecc_sbe": 0, "ecc_dbe": 0,     volatile corrected / uncorrected ECC error totals
            "ecc_dbe_new": 0,               uncorrected errors since the previous report delivered
            "xid": [79]}, ...]              Xid events since the previous report delivered
    jobs: [{"job_id": 12, "attempt": 1, "gpus": [0, 1], "proc_mem": 60000}, ...]
                                            proc_mem: GPU memory of the attempt's processes, MiB

It is a current-state message, like a heartbeat: sent when the broker is
reachable and never queued in the outbox; what must not be lost (new ECC
errors, Xid events) is carried into the next report until one is delivered.
It was added to protocol version 2 as a new message, which a receiver that
does not know it drops, so it needs no version of its own.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from cluster.protocol import ProtocolError, check_attempt, check_job_id

MAX_GPUS = 64
MAX_JOBS = 64
MAX_XIDS = 32
MAX_UUID = 96
#: Upper bounds that no real GPU reaches; a value past them is a broken report.
MAX_MIB = 1 << 24  # 16 TiB
MAX_TEMP_C = 200.0
MAX_POWER_W = 10_000.0


@dataclass(frozen=True, slots=True)
class GpuSample:
    index: int
    uuid: str
    util: float
    fb_used: int
    fb_total: int
    temp: float
    power: float
    ecc_sbe: int
    ecc_dbe: int
    ecc_dbe_new: int
    xids: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class JobSample:
    job_id: int | str
    attempt: int
    gpus: tuple[int, ...]
    proc_mem: int


@dataclass(frozen=True, slots=True)
class TelemetryReport:
    sampled_at: float
    gpus: tuple[GpuSample, ...]
    jobs: tuple[JobSample, ...]


def _number(value: Any, field: str, high: float) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
            or not 0 <= value <= high:
        raise ProtocolError(field, f"must be a number from 0 to {high:g}, got {value!r}")
    return float(value)


def _count(value: Any, field: str, high: int = 1 << 62) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= high:
        raise ProtocolError(field, f"must be a whole number from 0 to {high}, got {value!r}")
    return value


def _list(value: Any, field: str, limit: int) -> list:
    if not isinstance(value, (list, tuple)):
        raise ProtocolError(field, f"must be a list, got {type(value).__name__}")
    if len(value) > limit:
        raise ProtocolError(field, f"has {len(value)} items, at most {limit} are accepted")
    return list(value)


def check_gpu(item: Any, where: str) -> GpuSample:
    """One entry of ``gpus``, checked; ProtocolError names the field at fault."""
    if not isinstance(item, dict):
        raise ProtocolError(where, f"must be an object, got {type(item).__name__}")
    uuid = item.get("uuid", "")
    if not isinstance(uuid, str) or len(uuid) > MAX_UUID or not uuid.isprintable():
        raise ProtocolError(f"{where}.uuid", f"must be a printable string of at most {MAX_UUID} characters")
    fb_total = _count(item.get("fb_total", 0), f"{where}.fb_total", MAX_MIB)
    return GpuSample(
        index=_count(item.get("i"), f"{where}.i", MAX_GPUS - 1),
        uuid=uuid,
        util=_number(item.get("util", 0), f"{where}.util", 100.0),
        fb_used=_count(item.get("fb_used", 0), f"{where}.fb_used", MAX_MIB),
        fb_total=fb_total,
        temp=_number(item.get("temp", 0), f"{where}.temp", MAX_TEMP_C),
        power=_number(item.get("power", 0), f"{where}.power", MAX_POWER_W),
        ecc_sbe=_count(item.get("ecc_sbe", 0), f"{where}.ecc_sbe"),
        ecc_dbe=_count(item.get("ecc_dbe", 0), f"{where}.ecc_dbe"),
        ecc_dbe_new=_count(item.get("ecc_dbe_new", 0), f"{where}.ecc_dbe_new"),
        xids=tuple(_count(x, f"{where}.xid", 1 << 16) for x in _list(item.get("xid", ()), f"{where}.xid", MAX_XIDS)),
    )


def check_job(item: Any, where: str) -> JobSample:
    """One entry of ``jobs``, checked."""
    if not isinstance(item, dict):
        raise ProtocolError(where, f"must be an object, got {type(item).__name__}")
    return JobSample(
        job_id=check_job_id(item.get("job_id"), f"{where}.job_id"),
        attempt=check_attempt(item.get("attempt"), f"{where}.attempt"),
        gpus=tuple(_count(i, f"{where}.gpus", MAX_GPUS - 1) for i in _list(item.get("gpus", ()), f"{where}.gpus", MAX_GPUS)),
        proc_mem=_count(item.get("proc_mem", 0), f"{where}.proc_mem", MAX_MIB * MAX_GPUS),
    )


def check_report(sampled_at: Any, gpus: Any, jobs: Any) -> TelemetryReport:
    """The whole report, checked: every field typed and bounded, GPU indices unique."""
    checked = tuple(check_gpu(g, f"gpus[{n}]") for n, g in enumerate(_list(gpus, "gpus", MAX_GPUS)))
    if len({g.index for g in checked}) != len(checked):
        raise ProtocolError("gpus", "names a GPU index twice")
    return TelemetryReport(
        sampled_at=_number(sampled_at, "sampled_at", 1e11),
        gpus=checked,
        jobs=tuple(check_job(j, f"jobs[{n}]") for n, j in enumerate(_list(jobs, "jobs", MAX_JOBS))),
    )
