"""GPU health from the command line: list unhealthy GPUs, return one to service, or take one out."""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError
from django.utils import timezone

from audit import services as audit
from audit.models import Action
from cluster import gpu_health
from cluster.models import Gpu


def _gpu(text: str) -> tuple[str, int]:
    node, sep, index = text.rpartition(":")
    if not sep or not node or not (index.isascii() and index.isdigit()):
        raise CommandError(f"GPU {text!r}: write it NODE:INDEX, e.g. gpu-07:3")
    return node, int(index)


class Command(BaseCommand):
    help = ("GPU health: 'list' the unhealthy GPUs; 'return NODE:INDEX' returns one to service (audited); "
            "'mark NODE:INDEX --reason TEXT' takes one out of service and requeues its job.")

    def add_arguments(self, parser) -> None:  # noqa: ANN001
        parser.add_argument("action", choices=["list", "return", "mark"])
        parser.add_argument("gpu", nargs="?", help="NODE:INDEX (return, mark)")
        parser.add_argument("--reason", default="marked by an administrator", help="why (mark)")

    def handle(self, *args: object, action: str, gpu: str | None, reason: str, **options: object) -> None:
        if action == "list":
            rows = Gpu.objects.filter(healthy=False).select_related("node").order_by("node__name", "index")
            for g in rows:
                self.stdout.write(f"{g.node.name}:{g.index}\tsince {g.unhealthy_since:%Y-%m-%d %H:%M:%S}\t{g.unhealthy_reason}")
            if not rows:
                self.stdout.write("every GPU is healthy")
            return
        if gpu is None:
            raise CommandError(f"{action} needs a GPU: NODE:INDEX")
        node, index = _gpu(gpu)
        if not Gpu.objects.filter(node__name=node, index=index).exists():
            raise CommandError(f"no GPU {node}:{index}")
        if action == "return":
            if not gpu_health.return_to_service(node, index):
                raise CommandError(f"GPU {node}:{index} is not unhealthy")
            audit.record(Action.GPU_RETURNED, target=f"GPU {node}:{index}", actor_name="manage.py gpu_health")
            self.stdout.write(f"GPU {node}:{index} is back in service")
        elif not gpu_health.mark_unhealthy(node, index, reason, timezone.now()):
            raise CommandError(f"GPU {node}:{index} is already unhealthy")
        else:
            self.stdout.write(f"GPU {node}:{index} is out of service: {reason}")
