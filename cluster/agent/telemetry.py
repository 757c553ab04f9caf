"""GPU telemetry sampling: one REPORT_TELEMETRY per interval from a GPU source.

``TelemetrySampler.collect`` reads every GPU of the node from its source
(``cluster/agent/gpu_sources.py``), adds what happened since the last
delivered report (new uncorrectable ECC errors, Xid events) and the attempts
running here with their GPUs and their processes' GPU memory. Until
``delivered`` is called those events are carried into every later report, so
a broker outage delays them and never loses them. The report is the
kwargs of ``cluster/telemetry_schema.py``.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

from cluster.agent.attempt import TrackedAttempt
from cluster.agent.gpu_sources import GpuSource

log = logging.getLogger(__name__)

DEFAULT_INTERVAL = 5.0
#: Xid events carried per GPU while no report gets through; older ones are dropped first.
MAX_PENDING_XIDS = 32


class TelemetrySampler:
    """Builds telemetry reports from ``source`` every ``interval`` seconds."""

    def __init__(self, source: GpuSource, interval: float = DEFAULT_INTERVAL) -> None:
        self.source = source
        self.interval = interval
        self.next_at = 0.0
        self._dbe_seen: dict[int, int] = {}  # GPU index -> uncorrectable total at the last reading
        self._dbe_pending: dict[int, int] = {}
        self._xid_pending: dict[int, list[int]] = {}

    def due(self, now: float) -> bool:
        return now >= self.next_at

    def collect(self, now: float, attempts: Iterable[TrackedAttempt]) -> dict[str, Any]:
        """The report for ``now``; the next one is due an interval later."""
        self.next_at = now + self.interval
        running = list(attempts)
        holders = {i: str(a.job_id) for a in running for i in a.gpu_indices}
        gpus = self.source.read(holders)
        for index, xid in self.source.xid_events():
            pending = self._xid_pending.setdefault(index, [])
            pending.append(xid)
            del pending[:-MAX_PENDING_XIDS]
        for g in gpus:
            i = g["i"]
            before = self._dbe_seen.get(i)
            # The first reading is the baseline: errors counted before this agent started are not new.
            if before is not None and g["ecc_dbe"] > before:
                self._dbe_pending[i] = self._dbe_pending.get(i, 0) + g["ecc_dbe"] - before
            self._dbe_seen[i] = g["ecc_dbe"]
            g["ecc_dbe_new"] = self._dbe_pending.get(i, 0)
            g["xid"] = list(self._xid_pending.get(i, ()))
        jobs = [{"job_id": a.job_id, "attempt": a.attempt, "gpus": list(a.gpu_indices),
                 "proc_mem": self.source.job_memory(list(a.gpu_indices), a.pgid)} for a in running]
        return {"sampled_at": now, "gpus": gpus, "jobs": jobs}

    def delivered(self) -> None:
        """The last collected report reached the broker: its events are not sent again."""
        self._dbe_pending.clear()
        self._xid_pending.clear()

    def close(self) -> None:
        self.source.close()
