"""Cluster shapes for the simulator: ``NODESxGPUS`` (e.g. ``16x8``)."""

from __future__ import annotations

import re

from scheduler.core.model import NodeCapacity

_SHAPE = re.compile(r"^\s*(\d+)\s*[xX]\s*(\d+)\s*$", re.ASCII)
#: Bounds far above any cluster simulated here (the live benchmarks stop at 5,000 nodes), so that a
#: typing slip gets an error instead of minutes spent building millions of nodes.
MAX_NODES = 100_000
MAX_GPUS_PER_NODE = 1024


def parse_cluster(text: str) -> tuple[int, int]:
    """``"16x8"`` -> ``(16, 8)``; raises ``ValueError`` on anything else."""
    m = _SHAPE.match(text)
    if not m:
        raise ValueError(f"cluster must look like NODESxGPUS (e.g. 16x8), got {text!r}")
    nodes, gpus = int(m.group(1)), int(m.group(2))
    if nodes < 1 or gpus < 1:
        raise ValueError(f"cluster needs at least 1 node with 1 GPU, got {text!r}")
    if nodes > MAX_NODES or gpus > MAX_GPUS_PER_NODE:
        raise ValueError(f"cluster may have at most {MAX_NODES:,} nodes of at most {MAX_GPUS_PER_NODE:,} GPUs, "
                         f"got {text!r}")
    return nodes, gpus


def make_nodes(nodes: int, gpus_per_node: int, cpus: float = 0.0, mem_gb: float = 0.0) -> list[NodeCapacity]:
    """Identical nodes ``n00``, ``n01``, ... (names sort in node order).

    ``cpus``/``mem_gb`` of 0 declare no CPU/memory capacity: such a node does
    not limit jobs by CPU or memory.
    """
    width = max(2, len(str(nodes - 1)))
    return [NodeCapacity(name=f"n{i:0{width}d}", gpus=gpus_per_node, cpus=cpus, mem_gb=mem_gb) for i in range(nodes)]
