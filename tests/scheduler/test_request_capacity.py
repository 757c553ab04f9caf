"""A job's CPUs and memory must be had with its GPUs on the registered nodes, or it is refused naming the field."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.core.model import NodeCapacity
from scheduler.core.reservation import capacity_units
from scheduler.request_capacity import shape_errors, units

TWO_SMALL = ((4, 2.0, 25.0, 2),)  # two nodes of 4 GPUs, 2 CPUs and 25 GB

def test_a_te_job_asking_more_cpus_than_any_node_has_is_refused_on_num_cpus():
    errors = shape_errors(1, 64, 0, True, TWO_SMALL)
    assert list(errors) == ["num_cpus"]
    assert errors["num_cpus"] == ["No node has 1 GPU and 64 CPUs (a TE job runs on one node): the most on a node "
                                  "with 1 GPU is 2."]

def test_memory_is_judged_like_cpus():
    assert list(shape_errors(2, 0, 1024, False, TWO_SMALL)) == ["mem_gb"]
    assert shape_errors(2, 0, 50, False, TWO_SMALL) == {}  # 25 GB per GPU: one GPU per node, two in all

def test_a_be_job_may_spread_its_cpus_over_nodes_but_not_beyond_them():
    assert shape_errors(4, 4, 0, False, TWO_SMALL) == {}  # one CPU per GPU: two per node, four in all
    assert shape_errors(4, 4, 0, True, TWO_SMALL) != {}  # a TE job gets one node: two such GPUs
    assert shape_errors(6, 6, 0, False, TWO_SMALL)["num_cpus"] == [
        "6 CPUs for 6 GPUs is 1 per GPU, spread with the GPUs: the nodes can give that to 4 GPUs in all."]

def test_when_each_fits_alone_but_not_both_together_both_fields_are_named():
    shapes = ((4, 8.0, 10.0, 1), (4, 2.0, 100.0, 1))
    assert shape_errors(4, 8, 0, True, shapes) == {} and shape_errors(4, 0, 40, True, shapes) == {}
    errors = shape_errors(4, 8, 40, True, shapes)
    assert set(errors) == {"num_cpus", "mem_gb"} and "each alone, but not both" in errors["num_cpus"][0]

def test_nodes_without_cpu_or_memory_figures_and_requests_without_them_are_not_limited():
    assert shape_errors(1, 1000, 5000, True, ((8, 0.0, 0.0, 3),)) == {}
    assert shape_errors(8, 0, 0, True, TWO_SMALL) == {}  # GPUs alone are judged elsewhere
    assert shape_errors(1, 64, 0, True, ()) == {}  # no node registered yet: nothing to judge against
    assert shape_errors(8, 64, 0, True, TWO_SMALL) == {}  # no node has 8 GPUs: the GPU count's error says it

@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 8), st.sampled_from([0.0, 1.0, 2.5, 16.0, 64.0]),
                          st.sampled_from([0.0, 8.0, 25.3, 256.0]), st.integers(1, 5)), min_size=1, max_size=4),
       st.sampled_from([0.0, 0.5, 1.0, 3.0, 20.0]), st.sampled_from([0.0, 4.0, 12.5, 100.0]))
def test_units_are_what_the_policy_core_counts_node_by_node(shapes, cpg, mpg):
    """Grouped shapes count as the policy core counts each node (``capacity_units``), so a job refused at
    submission is one the scheduler could never place."""
    each = [capacity_units(NodeCapacity(name=f"n{i}-{k}", gpus=g, cpus=c, mem_gb=m), cpg, mpg)
            for i, (g, c, m, count) in enumerate(shapes) for k in range(count)]
    assert units(shapes, cpg, mpg) == (max(each), sum(each))

