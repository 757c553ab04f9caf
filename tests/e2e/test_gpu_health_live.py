"""GPU health with real processes: an Xid on a simulated GPU under a live stack takes it out of service
and requeues its job, which restarts on a healthy GPU; telemetry reaches the node page's store on the way."""

from __future__ import annotations

import json
import time

import pytest

from cluster.models import Gpu
from scheduler.models import Attempt, JobEvent, JobState
from tests.e2e.conftest import PY, wait_until
from tests.support.live_helpers import make_user, submit

pytestmark = [pytest.mark.e2e, pytest.mark.postgres, pytest.mark.redis]


def test_an_xid_takes_a_gpu_out_of_service_and_its_job_is_requeued_elsewhere(live) -> None:
    agent = live.start_agent("h", 2, extra=("--telemetry-interval", "0.5"))
    live.wait_nodes_up(agent)
    job = submit(make_user("alice"), "victim", command=f"{PY} -c 'import time; time.sleep(120)'", num_gpus=1,
                 job_class="BE", grace_period=1)
    wait_until(lambda: Attempt.objects.filter(job=job, number=1, state="RUNNING").exists(), "the job to run")
    (index,) = Attempt.objects.get(job=job, number=1).gpu_allocation[agent.name]

    from gputelemetry import selectors

    wait_until(lambda: selectors.node_telemetry(agent.name, time.time(), 900)["gpus"][index]["latest"],
               "telemetry of the node to be stored")
    (agent.workdir / "simulated-gpus.json").write_text(json.dumps({"gpus": {str(index): {"xid": [79]}}}))

    wait_until(lambda: not Gpu.objects.get(node__name=agent.name, index=index).healthy, "the GPU to be unhealthy")
    assert Gpu.objects.get(node__name=agent.name, index=index).unhealthy_reason == "Xid 79"
    wait_until(lambda: Attempt.objects.filter(job=job, number=2, state="RUNNING").exists(), "the job to run again")
    assert Attempt.objects.get(job=job, number=2).gpu_allocation == {agent.name: [1 - index]}
    path = list(JobEvent.objects.filter(job=job).order_by("at", "id").values_list("to_state", "reason"))
    assert (JobState.PREEMPTING, "GpuUnhealthy") in path
    assert JobState.FAILED not in [state for state, _ in path]
