"""``python -m cluster.agent --name NODE --gpus N|auto [...]``: run a node agent."""

from __future__ import annotations

import logging
import sys

from cluster.agent.agent import Agent
from cluster.agent.config import parse_args
from cluster.agent.confinement import ConfinementUnavailable
from cluster.agent.resources import discover
from cluster.agent.statefile import WorkdirBusy


def main(argv: list[str] | None = None) -> int:
    config = parse_args(argv)
    logging.basicConfig(
        level=config.log_level,
        format=f"%(asctime)s %(levelname)s agent[{config.name}] %(name)s: %(message)s",
    )
    try:
        resources = discover(config.gpus, config.cpus, config.mem_gb)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    logging.getLogger("cluster.agent").info(
        "node %s: %d %s GPU(s) %s, %g CPUs, %g GB; broker %s; work dir %s",
        config.name, resources.gpus, resources.gpu_source, list(resources.gpu_models),
        resources.cpus, resources.mem_gb, _redact(config.broker), config.workdir,
    )
    try:
        return Agent(config, resources).run()
    except (WorkdirBusy, ConfinementUnavailable) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


def _redact(url: str) -> str:
    """The broker URL without its password, for logs."""
    if "@" not in url or "://" not in url:
        return url
    scheme, rest = url.split("://", 1)
    creds, host = rest.rsplit("@", 1)
    user = creds.split(":", 1)[0]
    return f"{scheme}://{user}:***@{host}" if ":" in creds else url


if __name__ == "__main__":
    sys.exit(main())
