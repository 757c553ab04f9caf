"""GPU nodes and their GPUs.

Nodes are registered by their agents (``cluster.register``) and kept fresh by
heartbeats. ``Gpu.allocated_to`` is maintained by the scheduling loop: it is
set, with a conditional update, when an attempt starts on the GPU and cleared
when the attempt has vacated it. A GPU is free exactly when it is NULL.
"""

from __future__ import annotations

from django.core.validators import MaxValueValidator, MinValueValidator, RegexValidator
from django.db import models
from django.db.models import Q
from django.utils import timezone

#: Longest agent version and GPU model name stored; registration cuts longer ones.
AGENT_VERSION_LENGTH = 64
GPU_MODEL_LENGTH = 100

NODE_NAME_VALIDATOR = RegexValidator(
    r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$",
    "Node names are 1-63 letters, digits, '.', '_' or '-', starting with a letter or digit.",
)


class NodeState(models.TextChoices):
    UP = "UP"  # schedulable
    DRAINING = "DRAINING"  # running jobs finish; nothing new starts
    DOWN = "DOWN"  # taken out by an admin or shut down cleanly
    NODE_LOST = "NODE_LOST"  # agent silent for too long


class Node(models.Model):
    """A machine with GPUs run by one node agent.

    ``gpus`` is the GPU count the agent declared; the GPUs themselves are
    ``node.devices``. ``address`` is the host name or IP the agent advertised
    (the node's name when it sent none).
    """

    name = models.CharField(max_length=63, unique=True, validators=[NODE_NAME_VALIDATOR])
    gpus = models.PositiveIntegerField(default=0)
    cpus = models.FloatField(default=0.0)
    mem_gb = models.FloatField(default=0.0)
    state = models.CharField(max_length=10, choices=NodeState.choices, default=NodeState.UP)
    last_heartbeat = models.DateTimeField(null=True, blank=True)
    agent_version = models.CharField(max_length=AGENT_VERSION_LENGTH, blank=True, default="")
    # Where the other nodes of a multi-node job reach this one (its agent's
    # --advertise-address); rank 0's becomes the job's master address.
    address = models.CharField(max_length=253, blank=True, default="")
    # The message protocol version its agent speaks (cluster/protocol.py); older than the
    # server's during a rolling upgrade, and shown as such.
    protocol_version = models.PositiveIntegerField(default=1)
    registered_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["name"]
        constraints = [models.CheckConstraint(condition=Q(state__in=NodeState.values), name="node_state_valid")]

    def __str__(self) -> str:
        return f"{self.name} ({self.state}, {self.gpus} GPUs)"


class Gpu(models.Model):
    """One GPU of a node, and the job holding it (NULL: free)."""

    node = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="devices")
    index = models.PositiveIntegerField(help_text="Index on the node, as in CUDA_VISIBLE_DEVICES.")
    model_name = models.CharField(max_length=GPU_MODEL_LENGTH, blank=True, default="")
    memory_mb = models.PositiveIntegerField(null=True, blank=True)
    allocated_to = models.ForeignKey(
        "scheduler.Job", null=True, blank=True, on_delete=models.SET_NULL, related_name="gpus"
    )
    # Health (cluster/gpu_health.py): an unhealthy GPU is offered to no job until an admin returns it.
    healthy = models.BooleanField(default=True)
    unhealthy_reason = models.CharField(max_length=200, blank=True, default="")
    unhealthy_since = models.DateTimeField(null=True, blank=True)
    launch_failures = models.PositiveIntegerField(default=0, help_text="Launch failures in a row on this GPU.")

    class Meta:
        ordering = ["node__name", "index"]
        constraints = [models.UniqueConstraint(fields=["node", "index"], name="gpu_node_index_unique")]

    def __str__(self) -> str:
        return f"{self.node.name}:{self.index}"


#: Xids that mean the GPU itself is failing (NVIDIA's Xid catalogue): 48 uncorrectable ECC (DBE),
#: 63/64 row remapping, 74 NVLink, 79 fallen off the bus, 92 high SBE rate, 94/95 contained/uncontained ECC.
DEFAULT_UNHEALTHY_XIDS = "48,63,64,74,79,92,94,95"


class GpuPolicy(models.Model):
    """Site settings of GPU health and idle reclaim: one row (pk 1), edited in the admin."""

    unhealthy_xids = models.CharField(
        max_length=200, default=DEFAULT_UNHEALTHY_XIDS, blank=True,
        validators=[RegexValidator(r"^\s*(\d{1,5}\s*(,\s*\d{1,5}\s*)*)?$", "Xids are whole numbers separated by commas.")],
        help_text="Comma-separated Xids that take a GPU out of service.")
    launch_failure_limit = models.PositiveIntegerField(
        default=3, help_text="Launch failures in a row that take a GPU out of service (0: never).")
    idle_util_threshold = models.FloatField(
        default=5.0, validators=[MinValueValidator(0.0), MaxValueValidator(100.0)], help_text="A TE job whose GPUs' mean utilisation (percent) stays below this is idle.")
    idle_after_s = models.PositiveIntegerField(
        default=0, help_text="Seconds idle, while other jobs wait, before the job is warned (0: no idle reclaim).")
    idle_grace_s = models.PositiveIntegerField(
        default=600, help_text="Seconds from the warning to the reclaim, unless the job becomes busy again.")

    class Meta:
        verbose_name = "GPU policy"
        verbose_name_plural = "GPU policy"

    def __str__(self) -> str:
        return "GPU health and idle reclaim"

    def xids(self) -> frozenset[int]:
        return frozenset(int(x) for x in self.unhealthy_xids.replace(" ", "").split(",") if x.isascii() and x.isdigit())


class ServerIdentity(models.Model):
    """The one row naming this server's database: a random id the server puts in every command to
    its agents and an agent puts in its reports (``cluster.server_identity``), so an agent whose
    work dir remembers jobs of another database (a new or reset database, an agent moved to
    another cluster) is never confused by job ids that repeat.

    Unmanaged, so that a test run's flush keeps it: the table and its row are made by migration
    0006, and a copy made with ``pg_dump`` keeps the id, as a restore must (the agents' reports
    then reconcile the gap)."""

    id = models.IntegerField(primary_key=True)
    uuid = models.CharField(max_length=36)

    class Meta:
        managed = False
        db_table = "cluster_server_identity"


class BrokerUser(models.Model):
    """A node whose agent has a Redis user of its own (``manage.py broker_acl --apply``; deleted by
    ``--revoke``). Redis forgets its users when it restarts without an ``aclfile``; the safety tick
    creates again those of the nodes listed here (``cluster.broker_users``), so the database, which is
    backed up, is where the broker's per-node users are kept."""

    node = models.CharField(max_length=63, unique=True, validators=[NODE_NAME_VALIDATOR])
    applied_at = models.DateTimeField(default=timezone.now)

    def __str__(self) -> str:
        return f"Redis user of node {self.node}"
