"""The agent's main loop: broker in, supervisor, reports out, state saved.

One thread does everything in a loop of short steps: wait up to LOOP_WAIT for
commands, let the supervisor enforce deadlines and reap exits, stream logs,
heartbeat, publish queued reports, save state. A broker outage only pauses the
broker steps; jobs keep being supervised (grace-period SIGKILLs still fire).

Reports go through an outbox that is saved with the state, so a report is
lost neither while the broker is away nor across an agent restart (delivery is
at least once: a crash between publishing and saving repeats a report).
Heartbeats are the exception: they are current-state messages, sent only when
the broker is reachable and never queued.
"""

from __future__ import annotations

import logging
import os
import signal
import time
from pathlib import Path
from typing import Any

from cluster import protocol, protocol_versions
from cluster.agent import __version__, cluster_switch, confinement, procs, statefile
from cluster.agent.broker import BrokerDown, BrokerLink
from cluster.agent.config import AgentConfig, default_advertise_address
from cluster.agent.gpu_sources import CONTROL_FILE, open_source
from cluster.agent.jobenv import DEFAULT_PATH, PRIVATE_VARS
from cluster.agent.messages import check_signed, decode_task, is_expired
from cluster.agent.recent_exits import RecentExits
from cluster.agent.resources import NodeResources
from cluster.agent.shim import ENV_FENCE_AFTER, ENV_LEASE
from cluster.agent.supervisor import Supervisor
from cluster.agent.telemetry import TelemetrySampler

log = logging.getLogger(__name__)

LOOP_WAIT = 0.1  # seconds; bounds how late a deadline or an exit is noticed
STOPPING_WAIT = 0.01  # while an attempt is stopped: its exit frees GPUs a waiting (TE) job needs, so looked for sooner
RECONNECT_EVERY = 1.0
SHUTDOWN_EXTRA_WAIT = 5.0  # beyond the longest grace period, when stopping jobs on exit
STATE_FILE = "agent-state.json"
LEASE_FILE = "agent.lease"  # renewed (mtime) while the agent runs; a job's shim kills the job once it is stale


class Agent:
    """One node's agent; ``run()`` returns when SIGTERM/SIGINT is received."""

    def __init__(self, config: AgentConfig, resources: NodeResources) -> None:
        self.config = config
        self.resources = resources
        self.state_path = config.workdir / STATE_FILE
        self.outbox: list[list[Any]] = []  # [[task, kwargs], ...] in send order
        self.recent_exits = RecentExits()  # repeated in heartbeats (recent_exits.py)
        self.cluster = cluster_switch.ClusterMemory()  # whose jobs the memory holds (cluster_switch.py)
        self.address = config.advertise_address or default_advertise_address(config.name)
        confine = confinement.build(config.name, config.workdir, single_user=config.single_user, min_uid=config.min_uid,
                                    pids_max=config.pids_max, image_cache=config.image_cache)
        self.supervisor = Supervisor(
            node=config.name,
            address=self.address,
            workdir=config.workdir,
            checkpoint_root=config.checkpoint_root,
            gpu_count=resources.gpus,
            emit=self.report,
            # Built from scratch: nothing of the agent's own environment reaches a job but what --pass-env names.
            base_env={"PATH": os.environ.get("PATH", DEFAULT_PATH) if config.single_user else DEFAULT_PATH,
                      **{k: os.environ[k] for k in config.pass_env if k in os.environ and k not in PRIVATE_VARS}},
            confinement=confine,
            log_limits=config.log_limits,
        )
        self.broker = BrokerLink(config.broker, config.name, self._on_message, config.report_queue, config.token)
        self.telemetry: TelemetrySampler | None = None
        self._stopping = False
        self._next_connect = 0.0
        self._ever_connected = False
        self._next_heartbeat = 0.0
        self._next_logs = 0.0
        self._lock_fd: int | None = None
        self._outbox_dirty = False
        self.lease_path = config.workdir / LEASE_FILE
        self._next_lease = 0.0
        # When a heartbeat last reached the broker (the server's view of this node's liveness).
        self._last_heartbeat_ok = time.time()
        if config.fence_after > 0:
            self.supervisor.base_env.update({ENV_LEASE: str(self.lease_path), ENV_FENCE_AFTER: f"{config.fence_after:g}"})
        # The protocol version of every message this agent sends, and relative to which it accepts commands.
        self.protocol_version = protocol_versions.spoken_version(os.environ)
        self.handlers = {
            protocol.AGENT_LAUNCH: self._launch,
            protocol.AGENT_PREEMPT: self.supervisor.preempt,
            protocol.AGENT_KILL: self.supervisor.kill,
            protocol.AGENT_RECONCILE: self.supervisor.reconcile,
            protocol.AGENT_REGISTER_AGAIN: lambda _kwargs: self._queue_register(),
        }

    # ----- lifecycle ---------------------------------------------------------

    def run(self) -> int:
        # Everything the agent writes (state, outbox, lease, logs, exit files) is its user's alone.
        os.umask(0o077)
        self.config.workdir.mkdir(parents=True, exist_ok=True)
        self._lock_fd = statefile.lock_workdir(self.config.workdir)
        try:
            self._last_heartbeat_ok = self._lease_age_reference()
            # Before adopting: the jobs' shims are watching it. Until the broker is reached it keeps
            # the previous agent's last sign of life, so a restart does not extend the jobs' time.
            self._renew_lease(time.time())
            self._restore()
            self._queue_register()
            self._open_telemetry()
            for sig in (signal.SIGTERM, signal.SIGINT):
                signal.signal(sig, self._request_stop)
            while not self._stopping:
                self.step()
            self._shutdown()
        finally:
            if self.telemetry is not None:
                self.telemetry.close()
            self.broker.close()
            os.close(self._lock_fd)
        return 0

    def step(self) -> None:
        """One loop iteration: commands, supervision, logs, reports, heartbeat, state."""
        self._service_broker()
        self.supervisor.tick()
        now = time.time()
        self._renew_lease(now)
        if now >= self._next_logs and not self.outbox:
            # Logs wait while reports are queued: the log file is the buffer.
            self.supervisor.stream_logs()
            self._next_logs = now + self.config.log_interval
        self._flush_outbox()
        if now >= self._next_heartbeat and self.broker.connected and not self.outbox:
            self._heartbeat(now)
        if self.telemetry is not None and self.broker.connected and self.telemetry.due(now):
            self._send_telemetry(now)
        self._save_if_dirty()

    def _open_telemetry(self) -> None:
        """GPU telemetry from NVML (``--gpus auto``) or simulated (virtual GPUs); none if the interval is 0."""
        if self.config.telemetry_interval <= 0 or self.resources.gpus == 0:
            return
        control = self.config.simulated_gpus or self.config.workdir / CONTROL_FILE
        source = open_source(self.resources.gpu_source, self.config.name, self.resources.gpus, control)
        if source is not None:
            self.telemetry = TelemetrySampler(source, self.config.telemetry_interval)

    def _send_telemetry(self, now: float) -> None:
        # A current-state message like a heartbeat: never queued; the sampler carries its events over.
        try:
            report = self.telemetry.collect(now, list(self.supervisor.attempts.values()))
        except Exception:  # a failing GPU reading must not stop the agent
            log.exception("GPU telemetry not sampled")
            return
        kwargs = {"node": self.config.name, **report, protocol_versions.PROTOCOL_FIELD: self.protocol_version}
        try:
            self.broker.publish_telemetry(kwargs)
        except BrokerDown as exc:
            log.warning("telemetry not sent: %s", exc)
            self._broker_lost()
            return
        self.telemetry.delivered()

    def _renew_lease(self, now: float, due: bool = False) -> None:
        """Keep the lease (its mtime) at the node's last sign of life, a few times per fence period
        (and whenever ``due``: a launch, which just came through the broker).

        While the broker is reachable that is now. While it is not, it is the
        last heartbeat that reached the broker, the moment from which the server
        counts towards declaring this node lost: the jobs' shims then fence
        them (SIGTERM, grace, SIGKILL) counting from there, on their own timers,
        however long this loop is held up by broker time-outs. So a node cut
        off from the broker stops its jobs before the server restarts them
        elsewhere, as a node whose agent died does (docs/agent.md#fencing).
        """
        if self.config.fence_after <= 0 or (now < self._next_lease and not due):
            return
        self._stamp_lease(now if self.broker.connected else self._last_heartbeat_ok)
        self._next_lease = now + min(1.0, self.config.fence_after / 4)

    def _stamp_lease(self, stamp: float) -> None:
        try:
            self.lease_path.touch()
            os.utime(self.lease_path, (stamp, stamp))
        except OSError as exc:
            log.warning("lease file %s not renewed: %s", self.lease_path, exc)

    def _lease_age_reference(self) -> float:
        """At start: the previous agent's last sign of life (the lease's mtime), else now.

        Until a heartbeat gets through, fencing counts from there, so a restart
        that cannot reach the broker does not extend the jobs' time."""
        try:
            return min(self.lease_path.stat().st_mtime, time.time())
        except OSError:
            return time.time()

    def _request_stop(self, signum: int, _frame: Any) -> None:
        log.info("received %s; stopping", signal.Signals(signum).name)
        self._stopping = True

    def _restore(self) -> None:
        state = statefile.load(self.state_path)
        if state and state.get("node") not in (None, self.config.name):
            raise statefile.WorkdirBusy(f"work dir {self.config.workdir} belongs to node {state['node']!r}, not {self.config.name!r}")
        self.outbox = [list(item) for item in state.get("outbox", [])]
        self.recent_exits = RecentExits(state.get("recent_exits"))
        self.cluster = cluster_switch.ClusterMemory.from_state(state)
        adopted = self.supervisor.restore(state)
        if adopted:
            log.info("re-adopting %d attempt(s) left by the previous agent: %s", len(adopted), adopted)
        self.supervisor.stop_orphans(procs.find_shims(self.config.workdir / "jobs"))
        self.supervisor.kill_unknown_cgroups()

    def _shutdown(self) -> None:
        if self.config.kill_jobs_on_exit:
            self._stop_jobs()
        self.supervisor.tick()
        self._flush_outbox()
        self._save_if_dirty(force=True)
        if self.supervisor.attempts:
            log.info("leaving %d job attempt(s) running for the next agent on %s", len(self.supervisor.attempts), self.config.workdir)
        if self.outbox:
            log.warning("%d report(s) not yet delivered; kept in %s", len(self.outbox), self.state_path)

    def _stop_jobs(self) -> None:
        """Stop every attempt (SIGTERM, its grace period, SIGKILL) and run the loop until they have ended.

        The loop goes on as usual meanwhile: heartbeats list the attempts being
        stopped and the lease is renewed, so the server does not declare the
        node lost and the jobs' fences do not cut their grace periods short;
        their last log lines are streamed; and commands are still read, so a
        cancel still applies and a launch is declined and reported (see
        ``_launch``) rather than left in the queue for the next agent. One
        last step answers a launch that arrived as the last attempt ended.
        """
        self.supervisor.stop_all(protocol.EXIT_AGENT_STOP)
        longest = max((a.grace_period for a in self.supervisor.attempts.values()), default=0.0)
        give_up = time.time() + longest + SHUTDOWN_EXTRA_WAIT
        while self.supervisor.attempts and time.time() < give_up:
            self.step()
        self.step()

    # ----- reports -----------------------------------------------------------

    def report(self, task: str, kwargs: dict[str, Any], *, first: bool = False) -> None:
        """Queue a report (at the head if ``first``); node and cluster are added here, the signature when sent."""
        if self.cluster.mutes(task, kwargs):
            return
        item = [task, self.cluster.tag({"node": self.config.name, **kwargs,
                                        protocol_versions.PROTOCOL_FIELD: self.protocol_version})]
        self.outbox.insert(0, item) if first else self.outbox.append(item)
        if task == protocol.REPORT_EXITED:
            self.recent_exits.add(kwargs, time.time())
        self._outbox_dirty = True

    def _queue_register(self) -> None:
        # Ahead of anything queued: the server hears who we are before what happened.
        r = self.resources
        self.report(
            protocol.REPORT_REGISTER,
            {"gpus": r.gpus, "cpus": r.cpus, "mem_gb": r.mem_gb, "gpu_models": list(r.gpu_models), "agent_version": __version__,
             "address": self.address},
            first=True,
        )

    def _heartbeat(self, now: float) -> None:
        kwargs = self.cluster.tag({"node": self.config.name, "running": self.supervisor.running(), "sent_at": now,
                                   protocol_versions.PROTOCOL_FIELD: self.protocol_version})
        exited = self.recent_exits.current(now)
        if exited:
            kwargs["exited"] = exited
        try:
            self.broker.publish(protocol.REPORT_HEARTBEAT, kwargs)
        except BrokerDown as exc:
            log.warning("heartbeat not sent: %s", exc)
            self._broker_lost()
            return
        self._next_heartbeat = now + self.config.heartbeat
        self._last_heartbeat_ok = now

    def _flush_outbox(self) -> None:
        while self.outbox and self.broker.connected:
            task, kwargs = self.outbox[0]
            try:
                self.broker.publish(task, kwargs)
            except BrokerDown as exc:
                log.warning("report %s kept for later: %s", task, exc)
                self._broker_lost()
                return
            self.outbox.pop(0)
            self._outbox_dirty = True

    def _save_if_dirty(self, force: bool = False) -> None:
        if force or self.supervisor.dirty or self._outbox_dirty:
            try:
                statefile.save(
                    self.state_path,
                    {"node": self.config.name, **self.supervisor.to_state(), "outbox": self.outbox,
                     "recent_exits": self.recent_exits.to_state(), **self.cluster.to_state()},
                )
            except OSError as exc:
                # Keep supervising: a full disk must not orphan running jobs. The
                # state is retried on the next change.
                log.error("cannot save %s: %s", self.state_path, exc)
                return
            self.supervisor.dirty = self._outbox_dirty = False

    # ----- commands ----------------------------------------------------------

    def _service_broker(self) -> None:
        if not self.broker.connected:
            if time.time() >= self._next_connect:
                try:
                    self.broker.connect()
                    if self._ever_connected:
                        # The server may have declared us lost meanwhile: say who we are again.
                        self._queue_register()
                    self._ever_connected = True
                except BrokerDown as exc:
                    log.warning("%s; retrying in %gs", exc, RECONNECT_EVERY)
                    self._next_connect = time.time() + RECONNECT_EVERY
            if not self.broker.connected:
                time.sleep(LOOP_WAIT)
                return
        try:
            self.broker.poll(STOPPING_WAIT if self.supervisor.expecting_exit() else LOOP_WAIT)
        except BrokerDown as exc:
            log.warning("%s", exc)
            self._broker_lost()

    def _broker_lost(self) -> None:
        if self.config.fence_after > 0 and self.supervisor.attempts:
            log.warning("broker unreachable: unless a heartbeat gets through first, the jobs here are stopped "
                        "(SIGTERM, their grace, SIGKILL) by %gs after the last one that did, %.1fs ago",
                        self.config.fence_after, time.time() - self._last_heartbeat_ok)
        if self.config.fence_after > 0:
            self._stamp_lease(self._last_heartbeat_ok)  # before closing, which may wait on the dead connection
        self.broker.close()
        self._next_connect = time.time() + RECONNECT_EVERY

    def _on_message(self, headers: dict[str, Any] | None, body: Any, message: Any) -> None:
        """Run one command; the message is acked after the state it causes is saved."""
        try:
            self.handle_command(headers, body)
        finally:
            self._save_if_dirty()
            message.ack()

    def _launch(self, kwargs: dict[str, Any]) -> str:
        """AGENT_LAUNCH: start the attempt, unless this agent is stopping and stops its jobs.

        Such an agent would have to kill the job at once, or, if the launch
        stayed in the queue, the next agent would start an attempt the server
        has long given up on. It declines instead, reporting the attempt ended
        with reason ``agent-stop``, which the server treats as a lost attempt:
        the job is requeued (or cancelled, if it was being cancelled).
        """
        if self._stopping and self.config.kill_jobs_on_exit:
            return self.supervisor.decline(kwargs, protocol.EXIT_AGENT_STOP,
                                           f"launch refused: the agent of node {self.config.name} is stopping")
        # Renewed before the new job's shim first reads it: after a stall longer than the fence period the
        # loop would renew it only after this command, and the shim would SIGKILL the job (docs/agent.md).
        self._renew_lease(time.time(), due=True)
        return self.supervisor.launch(kwargs)

    def handle_command(self, headers: dict[str, Any] | None, body: Any) -> None:
        """Decode and run one command; bad ones are logged (naming the field) and dropped."""
        try:
            task, kwargs = decode_task(headers, body)
            check_signed(self.config.token, task, kwargs)
            if is_expired(headers, body):
                log.warning("dropping expired %s %s", task, kwargs)
                return
            if task == protocol_versions.AGENT_REFUSED:
                log.error("the server refused this agent's messages: %s", kwargs.get("reason"))
                return
            protocol_versions.check_version(protocol_versions.message_version(kwargs), self.protocol_version, "the server")
            cluster_switch.on_command(self, kwargs)
            handler = self.handlers.get(task)
            if handler is None:
                log.error("dropping unknown command %r on %s", task, protocol.node_queue(self.config.name))
                return
            handler(kwargs)
        except protocol.ProtocolError as exc:
            log.error("rejected a malformed command: %s", exc)
        except protocol_versions.UnsupportedVersion as exc:
            log.error("refused a command: %s", exc)
        except Exception:
            # One bad command must not take the node's other jobs down with the agent.
            log.exception("command failed")


def state_path(workdir: Path) -> Path:
    """Where an agent on ``workdir`` keeps its state (for tools and test fixtures)."""
    return workdir / STATE_FILE
