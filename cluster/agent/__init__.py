"""Node agent: runs the scheduler's jobs on one GPU machine (no database access).

Start it with ``python -m cluster.agent --name NODE --gpus N|auto``; see
docs/agent.md. Modules: config (options), resources (GPUs, CPUs, memory),
messages (Celery message decoding), broker (queue consumer and report
publisher), supervisor (job attempts), procs and shim (process groups),
jobenv (job environment), logtail (log streaming), statefile (restart state),
agent (the main loop tying them together).
"""

__version__ = "0.1.0"
