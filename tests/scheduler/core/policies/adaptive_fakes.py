"""A small adaptive job model and snapshots of adaptive jobs, for the tests of
the policies that allocate them (Optimus, Pollux)."""

from __future__ import annotations

import math

import numpy as np

from scheduler.core.adaptive import spread_shape
from scheduler.core.model import JobClass, JobSpec, NodeCapacity, PendingJob, Placement, RunningJob, Snapshot


class FakeModel:
    """Goodput ``g ** 0.8`` on one node, 10 % less per extra node; one epoch."""

    restart_seconds = 30.0
    fixed_batch = 64

    def __init__(self, target: float = 1000.0, max_gpus: int = 8) -> None:
        self.target = target
        self.max_gpus = max_gpus

    def epoch(self, progress: float) -> int:
        return 0

    def goodput_table(self, epoch: int) -> np.ndarray:
        table = np.zeros((17, self.max_gpus + 1))
        for n in range(1, 17):
            for g in range(1, self.max_gpus + 1):
                if spread_shape(n, g) is not None:
                    table[n, g] = g ** 0.8 * 0.9 ** (n - 1)
        return table

    def iteration_time(self, gpus: int) -> float:
        return 1.0 / gpus + 0.05 * gpus if 1 <= gpus <= self.max_gpus else math.inf

    def remaining_iterations(self, progress: float) -> float:
        return max(self.target - progress, 0.0)


def adaptive_spec(job_id: str, submit: float = 0.0, model: FakeModel | None = None) -> JobSpec:
    model = model or FakeModel()
    return JobSpec(job_id, JobClass.BE, 1, submit, min_gpus=1, max_gpus=model.max_gpus, adaptive=model)


def snapshot(nodes: int, running: dict[str, dict[str, int]], pending: list[str],
             models: dict[str, FakeModel] | None = None) -> Snapshot:
    """``nodes`` 4-GPU nodes ``n0``.., running jobs on the given GPUs per node, pending jobs."""
    models = models or {}
    caps = [NodeCapacity(f"n{i}", 4) for i in range(nodes)]
    free = {c.name: [c.gpus, 0.0, 0.0] for c in caps}
    run = []
    for i, (jid, parts) in enumerate(running.items()):
        spec = adaptive_spec(jid, float(i), models.get(jid))
        run.append(RunningJob(spec, Placement.of(parts), 0.0, 0.0, progress=10.0 * i))
        for n, g in parts.items():
            free[n][0] -= g
    pend = [PendingJob(adaptive_spec(jid, 100.0 + i, models.get(jid))) for i, jid in enumerate(pending)]
    return Snapshot(nodes=caps, running=run, pending=pend, free={n: tuple(v) for n, v in free.items()})
