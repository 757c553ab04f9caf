"""The message contract between the scheduler service and the node agents.

Both sides import this module; it imports neither Django nor Celery. Messages
travel as Celery tasks over the broker (Redis):

* commands to an agent go to the queue ``node.<name>`` under the task names
  ``AGENT_*`` below and are consumed by that node's agent only;
* reports from agents go to the default queue under the task names
  ``REPORT_*`` and are handled by the portal's Celery workers.

Every command about a job names ``(job_id, attempt)``: an agent ignores a
command for an attempt it has already finished, and the server ignores a report
for an attempt that is not the job's current one, so a late or repeated message
is harmless.
"""

from __future__ import annotations

NODE_QUEUE_PREFIX = "node."

# Commands, server -> agent.
AGENT_LAUNCH = "agent.launch"  # kwargs: LaunchCommand fields
AGENT_PREEMPT = "agent.preempt"  # kwargs: job_id, attempt, grace_period
AGENT_KILL = "agent.kill"  # kwargs: job_id, attempt, grace_period, reason (cancel, timeout, stale)
AGENT_RECONCILE = "agent.reconcile"  # kwargs: keep=[[job_id, attempt], ...]; kill everything else

# Reports, agent -> server.
REPORT_REGISTER = "cluster.register"  # kwargs: node, gpus, cpus, mem_gb, gpu_models, token
REPORT_HEARTBEAT = "cluster.heartbeat"  # kwargs: node, running=[[job_id, attempt], ...], sent_at, token
REPORT_STARTED = "cluster.started"  # kwargs: node, job_id, attempt, pid, started_at, token
REPORT_EXITED = "cluster.exited"  # kwargs: node, job_id, attempt, exit_code, signal, ended_at, notice_at, checkpointed, token
REPORT_LOG = "cluster.log"  # kwargs: node, job_id, attempt, lines=[str, ...], token

# Environment given to every job process.
ENV_JOB_ID = "GPUSCHED_JOB_ID"
ENV_ATTEMPT = "GPUSCHED_ATTEMPT"
ENV_CHECKPOINT_DIR = "CHECKPOINT_DIR"
ENV_RESUME = "RESUME"
ENV_GRACE_PERIOD = "GRACE_PERIOD"
ENV_VISIBLE_DEVICES = "CUDA_VISIBLE_DEVICES"
# A job may create this file in CHECKPOINT_DIR to say "my checkpoint is complete".
CHECKPOINT_MARKER = ".checkpoint-complete"


def node_queue(node_name: str) -> str:
    """The broker queue that carries commands to ``node_name``'s agent."""
    return f"{NODE_QUEUE_PREFIX}{node_name}"
