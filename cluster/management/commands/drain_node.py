"""Drain a node (no new starts, running jobs finish), or return it to service."""

from __future__ import annotations

import time

from django.core.management.base import BaseCommand, CommandError

from cluster import drain


class Command(BaseCommand):
    help = ("Drain NODE: nothing new starts there and running jobs finish. --wait SECONDS waits until "
            "no GPU there is held (exit status 1 if it is still busy then); --undo returns it to service.")

    def add_arguments(self, parser) -> None:  # noqa: ANN001
        parser.add_argument("node")
        parser.add_argument("--undo", action="store_true", help="DRAINING -> UP")
        parser.add_argument("--wait", type=float, default=0.0, metavar="SECONDS",
                            help="wait up to SECONDS for the node to be drained")

    def handle(self, *args: object, node: str, undo: bool, wait: float, **options: object) -> None:
        try:
            state = drain.undrain(node) if undo else drain.drain(node)
        except drain.DrainError as exc:
            raise CommandError(str(exc)) from None
        deadline = time.monotonic() + wait
        while not undo and not state.drained and time.monotonic() < deadline:
            time.sleep(1.0)
            state = drain.status(node)
        self.stdout.write(f"{state.node}: {state.state}, {state.busy_gpus} GPU(s) busy"
                          + (f" (jobs {', '.join(map(str, state.jobs))})" if state.jobs else ""))
        if not undo and wait > 0 and not state.drained:
            raise CommandError(f"{node} still runs jobs {list(state.jobs)} after {wait:g} s")
