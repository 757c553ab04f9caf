"""Whether a job's CPUs and memory can ever be had with its GPUs on the registered nodes.

The scheduler places a job's CPUs and memory with its GPUs, in proportion (``per_unit``: so many CPUs
and GB per GPU), and a TE job on one node. A job asking for more CPUs or memory per GPU than the nodes
have would wait forever with the reason "more than the whole cluster can hold"; Slurm refuses such a
job at submission ("Requested node configuration is not available"), and so does the portal, naming
the field, as it refuses more GPUs than the cluster has. Nodes that report no CPU or memory figure (0)
do not limit it, as in the policy core (``capacity_units``).
"""

from __future__ import annotations

from collections.abc import Iterable

from scheduler.core.model import NodeCapacity
from scheduler.core.reservation import capacity_units

#: One kind of registered node and how many there are: (GPUs, CPUs, GB of memory, count).
NodeShape = tuple[int, float, float, int]


def units(shapes: Iterable[NodeShape], cpus_per_gpu: float, mem_per_gpu: float) -> tuple[int, int]:
    """(most on one node, in all) GPUs of a job with these CPUs and GB per GPU the registered nodes hold."""
    largest = total = 0
    for gpus, cpus, mem_gb, count in shapes:
        n = capacity_units(NodeCapacity(name="", gpus=gpus, cpus=cpus, mem_gb=mem_gb), cpus_per_gpu, mem_per_gpu)
        largest = max(largest, n)
        total += n * count
    return largest, total


def shape_errors(num_gpus: int, num_cpus: float, mem_gb: float, one_node: bool,
                 shapes: tuple[NodeShape, ...]) -> dict[str, list[str]]:
    """The fields (``num_cpus``, ``mem_gb``) that keep a job of ``num_gpus`` GPUs from ever running on
    ``shapes`` (``one_node``: a TE job, on a single node); empty when it fits, when it asks for neither
    or when no node is registered. Each field is judged with the other unconstrained; when each fits
    alone but not both together, both are named."""
    if not shapes or num_gpus < 1 or not (num_cpus > 0 or mem_gb > 0):
        return {}
    if one_node and not any(gpus >= num_gpus for gpus, _, _, _ in shapes):
        return {}  # too many GPUs for any node: the GPU count's own error says so

    def fits(cpg: float, mpg: float) -> bool:
        largest, total = units(shapes, cpg, mpg)
        return (largest if one_node else total) >= num_gpus

    cpg, mpg = num_cpus / num_gpus, mem_gb / num_gpus
    if fits(cpg, mpg):
        return {}
    errors: dict[str, list[str]] = {}
    for name, amount, alone, unit, column in (("num_cpus", num_cpus, (cpg, 0.0), "CPUs", 1),
                                              ("mem_gb", mem_gb, (0.0, mpg), "GB of memory", 2)):
        if amount > 0 and not fits(*alone):
            if one_node:
                most = max(shape[column] for shape in shapes if shape[0] >= num_gpus)
                message = (f"No node has {_gpus(num_gpus)} and {amount:g} {unit} (a TE job runs on one node): "
                           f"the most on a node with {_gpus(num_gpus)} is {most:g}.")
            else:
                message = (f"{amount:g} {unit} for {_gpus(num_gpus)} is {amount / num_gpus:g} per GPU, spread with "
                           f"the GPUs: the nodes can give that to {_gpus(units(shapes, *alone)[1])} in all.")
            errors[name] = [message]
    if not errors:
        both = f"{num_cpus:g} CPUs and {mem_gb:g} GB of memory with {_gpus(num_gpus)}"
        where = "on one node (a TE job runs on one)" if one_node else "in all"
        errors = {name: [f"No nodes have {both} {where}: each alone, but not both."] for name in ("num_cpus", "mem_gb")}
    return errors

def _gpus(n: int) -> str:
    return f"{n} GPU{'' if n == 1 else 's'}"
