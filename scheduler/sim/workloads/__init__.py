"""Workload sources for the simulator: synthetic generator, canonical CSV
trace and the Philly adapter.

Importing this package pulls in neither Django nor plotting libraries, so the
portal can use :func:`load_canonical` to validate an uploaded trace.
"""

from scheduler.sim.workloads.canonical import TraceError, load_canonical, parse_canonical
from scheduler.sim.workloads.philly import PhillyRule, load_philly
from scheduler.sim.workloads.synthetic import SyntheticConfig, generate
from scheduler.sim.workloads.types import SimJob, Workload

__all__ = [
    "PhillyRule",
    "SimJob",
    "SyntheticConfig",
    "TraceError",
    "Workload",
    "generate",
    "load_canonical",
    "load_philly",
    "parse_canonical",
]
