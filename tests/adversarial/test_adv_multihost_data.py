"""The data host (PostgreSQL and Redis, the broker) cut off from every other host while jobs run and
are submitted: the loop pauses, the agents fence their jobs once the broker has been gone longer than
the fence timeout, and after the heal every stored job completes, none ran twice at once, none is lost
(tests/adversarial/test_adv_multihost.py has the harness and the counts)."""

from __future__ import annotations

import threading
import time

import pytest
import requests

from tests.adversarial.test_adv_multihost import WAIT, job_states, report, submit, wait
from tests.support.job_records import recording_job, spans, tally
from tests.support.netns_cluster import netns_cluster  # noqa: F401 - fixture

pytestmark = [pytest.mark.e2e, pytest.mark.multihost]


@pytest.mark.parametrize(("cut_seconds", "fence_after"), [(3.0, 12.0), (12.0, 6.0)],
                         ids=["shorter-than-the-fence", "longer-than-node-lost"])
def test_the_data_host_cut_off_pauses_the_system_and_after_the_heal_nothing_is_lost_or_run_twice(
        netns_cluster, cut_seconds: float, fence_after: float) -> None:  # noqa: F811
    """Heartbeat 1 s. Cut for 3 s with a fence of 12 s: the jobs keep running, nothing is requeued.
    Cut for 12 s with a fence of 6 s (node lost after 8 s): every agent fences its jobs (SIGTERM, they
    save), the server declares the nodes lost when it sees the database again, and the jobs are
    requeued and complete. Submissions while the database is away get an error or no answer; any the
    portal stored anyway complete too.

    The fence counts from the last heartbeat that got through, and reconnecting after the heal takes
    the broker client a second or two, so a cut is felt for longer than it lasts: the short case's
    fence leaves room for that (with a 6 s fence and 1 s of grace, a 3 s cut was enough to fence)."""
    cluster = netns_cluster(agents=2, gpus=2, fence_after=fence_after)
    # Fenced (the long cut): a grace of 3 s, so the shims send the notice at max(fence - grace, fence / 2)
    # = 3 s after the last heartbeat and SIGKILL at 6 s. With 1 s, both jobs of an agent whose heartbeat
    # publish had hung on the cut past the fence were once SIGKILLed on a loaded machine before their
    # shells had written the notice down, which is what this test reads.
    jobs = [submit(cluster, f"d{i}", steps=80, grace=3 if cut_seconds > fence_after else 1) for i in range(4)]
    wait(lambda: list(job_states(cluster, jobs).values()).count("RUNNING") == 4, "four jobs to run")
    wait(lambda: all(spans(cluster.checkpoints, j) for j in jobs), "every job to record its first step")

    refused, unanswered = [0], [0]

    def submit_while_cut() -> None:
        for i in range(3):
            try:
                response = requests.post(f"{cluster.base_url}/api/v1/jobs/", json={
                    "name": f"during{i}", "command": recording_job(10), "grace_period": 1},
                    headers={"Authorization": f"Token {cluster.api_token}"}, timeout=cut_seconds / 3)
            except requests.RequestException:
                unanswered[0] += 1
                continue
            if response.status_code == 201:
                jobs.append(response.json()["id"])
            else:
                refused[0] += 1

    cut_at = time.time()
    cluster.net.cut("db")
    during = threading.Thread(target=submit_while_cut, daemon=True)
    during.start()
    time.sleep(max(0.0, cut_seconds - (time.time() - cut_at)))
    cluster.net.heal("db")
    during.join(timeout=60)
    restarted = [name for name in ("portal", "worker", "beat") if not cluster.procs[name].alive()]
    for name in restarted:  # what a restart policy (compose, systemd) does; reported below
        getattr(cluster, f"start_{name}")()
    stored = sorted(row[0] for row in cluster.sql("SELECT id FROM scheduler_job"))
    assert set(jobs) <= set(stored) and len(stored) - len(jobs) <= unanswered[0]
    stored += [submit(cluster, f"after{i}", steps=10) for i in range(2)]
    wait(lambda: set(job_states(cluster, stored).values()) == {"COMPLETED"}, "every stored job to complete",
         timeout=WAIT)

    counts = tally(cluster.sql, cluster.checkpoints, stored)
    assert counts["ran_twice_at_once"] == 0 and counts["lost"] == 0 and counts["finished"] == len(stored)
    first_four = jobs[:4]
    if cut_seconds < fence_after:
        assert counts["requeued"] == 0
        assert all(len(spans(cluster.checkpoints, j)) == 1 for j in first_four)
    else:
        fenced = [j for j in first_four if spans(cluster.checkpoints, j)[0].termed]
        assert fenced == first_four  # each saved at SIGTERM before its fence, then resumed
        assert all(len(spans(cluster.checkpoints, j)) == 2 for j in first_four)
    report(f"data host cut {cut_seconds:g} s", {**counts, "refused_while_cut": refused[0],
                                                "unanswered_while_cut": unanswered[0]},
           restarted_after_heal=restarted)


def test_the_app_host_cut_off_has_its_database_sessions_ended_and_after_the_heal_new_jobs_complete(
        netns_cluster) -> None:  # noqa: F811
    """The host of the portal, the worker and beat cut off, silently (its link down): PostgreSQL
    probes their sessions after ``DATABASE_KEEPALIVE_S`` (1 s here) and ends them, where it would
    otherwise keep them, each holding a connection slot, for the system's two hours. After the heal
    the processes connect again and new jobs complete."""
    cluster = netns_cluster(agents=1, gpus=1, settings={"DATABASE_KEEPALIVE_S": "1"})
    app = cluster.net.address("app")

    def sessions() -> int:
        return cluster.sql("SELECT count(*) FROM pg_stat_activity WHERE client_addr = %s::inet", (app,))[0][0]

    before = wait(sessions, "sessions from the app host")
    cut_at = time.monotonic()
    cluster.net.cut("app")
    try:
        wait(lambda: sessions() == 0, "PostgreSQL to end the cut-off host's sessions", timeout=60)
        ended_after = time.monotonic() - cut_at
    finally:
        cluster.net.heal("app")
    restarted = [name for name in ("portal", "worker", "beat") if not cluster.procs[name].alive()]
    for name in restarted:  # what a restart policy (compose, systemd) does; reported below
        getattr(cluster, f"start_{name}")()
    jobs = [submit(cluster, f"after{i}", steps=10) for i in range(2)]
    wait(lambda: set(job_states(cluster, jobs).values()) == {"COMPLETED"}, "the new jobs to complete", timeout=WAIT)

    counts = tally(cluster.sql, cluster.checkpoints, jobs)
    assert counts["ran_twice_at_once"] == 0 and counts["lost"] == 0 and counts["finished"] == len(jobs)
    report("app host cut", counts, sessions_before_cut=before, sessions_ended_after_s=round(ended_after, 1),
           restarted_after_heal=restarted)
