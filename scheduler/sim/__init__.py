"""Trace-driven discrete-event simulator running the real scheduling policies.

No Django, no Celery. Entry points: :func:`scheduler.sim.engine.simulate` for
one run, :func:`scheduler.sim.runner.run_all` for policies side by side, and
``python -m scheduler.sim`` on the command line.
"""

from scheduler.sim.engine import simulate
from scheduler.sim.records import SimConfig, SimResult, SimulationError

__all__ = ["SimConfig", "SimResult", "SimulationError", "simulate"]
