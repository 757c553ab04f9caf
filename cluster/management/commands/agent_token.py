"""Print the per-node agent token of a node (needs GPUSCHED_AGENT_SECRET)."""

from __future__ import annotations

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from cluster.auth import node_token
from cluster.models import NODE_NAME_VALIDATOR


class Command(BaseCommand):
    help = "Print NODE's agent token, to be set as GPUSCHED_AGENT_TOKEN for that node's agent only."

    def add_arguments(self, parser) -> None:  # noqa: ANN001
        parser.add_argument("node", help="node name, as the agent's --name")

    def handle(self, *args: object, node: str, **options: object) -> None:
        if not settings.AGENT_SECRET:
            raise CommandError("GPUSCHED_AGENT_SECRET is not set: per-node agent tokens are off")
        if not NODE_NAME_VALIDATOR.regex.match(node):
            raise CommandError(f"node: {NODE_NAME_VALIDATOR.message}")
        self.stdout.write(node_token(settings.AGENT_SECRET, node))
