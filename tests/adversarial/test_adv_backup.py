"""A PostgreSQL backup restored while jobs run (docs/operations.md, Backup and restore): the agents'
reports reconcile the gap between the backup and the restore.

Jobs the backup knows finish once (those that ended during the gap end as their nodes' heartbeats
repeat it, not run again, when the restore comes within the agents' repetition of exits, ten minutes); jobs submitted after the backup are gone from the restored database, and
their processes, still running on the nodes, are stopped as stale at the next heartbeats; job ids
issued after the restore are new to every agent: moved past them by ``manage.py advance_job_ids``, as
the restore's steps say, or, when that step is forgotten, by the workers at the first heartbeat that
names an id the restored database has not issued (``scheduler/job_ids.py``).
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import psycopg
import pytest
import requests

from cluster.auth import node_token
from tests.adversarial import stack as stack_module
from tests.adversarial.test_adv_faults import (FENCE_AFTER, HEARTBEAT, SECRET, SETTINGS, WAIT, _api_submit,
                                               private_postgres, ran_twice, tick_intervals, ticking_command)
from tests.support.livestack import wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.postgres, pytest.mark.redis]

__all__ = ["private_postgres"]  # the fixture, imported for this module's tests
FINAL = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT"}
ADVANCE_GAP = 1000


def _issue_key(stack: stack_module.Stack) -> str:
    return subprocess.run([stack_module.PY, "manage.py", "shell", "-c",
                           "from django.contrib.auth.models import User; from portal.models import ApiToken; "
                           "print(ApiToken.issue(User.objects.create_user('alice'), 'backup')[1])"],
                          cwd=stack_module.REPO, env=stack.env(), check=True, capture_output=True, text=True,
                          timeout=120).stdout.strip().splitlines()[-1]


def _restore(server: stack_module.PostgresServer, dbname: str, dump: Path, stack: stack_module.Stack,
             advance: bool = True) -> None:
    """What docs/operations.md says to do, with portals and workers stopped: recreate, restore, advance ids
    (unless ``advance`` is false: the step an operator may forget)."""
    with psycopg.connect(server.url("postgres"), autocommit=True) as conn:
        conn.execute(f'DROP DATABASE "{dbname}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{dbname}"')
    subprocess.run([str(server.bin / "pg_restore"), "--no-owner", f"--dbname={server.url(dbname)}", str(dump)],
                   check=True, capture_output=True, timeout=WAIT)
    if advance:
        subprocess.run([stack_module.PY, "manage.py", "advance_job_ids", "--gap", str(ADVANCE_GAP)],
                       cwd=stack_module.REPO, env=stack.env(), check=True, capture_output=True, timeout=120)


@pytest.mark.parametrize("advance", [True, False], ids=["advance_job_ids", "advance_job_ids-forgotten"])
def test_a_backup_restored_with_jobs_in_flight_is_reconciled_by_the_agents(advance, private_postgres, private_redis,
                                                                           tmp_path) -> None:
    url = private_postgres.create_database("backup")
    stack = stack_module.Stack(tmp_path, url, private_redis.url, settings=dict(SETTINGS))
    try:
        stack.migrate()
        key = _issue_key(stack)
        stack.portal()
        stack.worker()
        for name in ("a", "b"):
            stack.agent(name, 4, heartbeat=HEARTBEAT, token=node_token(SECRET, name),
                        extra_args=("--fence-after", str(FENCE_AFTER)))
        api = requests.Session()
        api.headers["Authorization"] = f"Token {key}"

        def jobs() -> dict[int, dict]:
            found, page = {}, f"{stack.base_url}/api/v1/jobs/?page_size=100"
            while page:
                body = api.get(page, timeout=10).json()
                found.update((j["id"], j) for j in body["results"])
                page = body["next"]
            return found

        def nodes_up(*names: str) -> bool:
            return sorted(n["name"] for n in api.get(f"{stack.base_url}/api/v1/nodes/", timeout=10).json()
                          if n["state"] == "UP") == list(names)

        wait_until(lambda: nodes_up("a", "b"), "both nodes to register")
        ticks = tmp_path / "ticks"
        known = [_api_submit(stack.base_url, key, f"known{i}", ticking_command(ticks, 100)) for i in range(4)]
        short = [_api_submit(stack.base_url, key, f"short{i}", ticking_command(ticks, 30)) for i in range(2)]
        known += short
        assert None not in known
        wait_until(lambda: sum(jobs()[j]["state"] == "RUNNING" for j in known) == 6, "the known jobs to run")
        dump = tmp_path / "backup.dump"
        subprocess.run([str(private_postgres.bin / "pg_dump"), "--format=custom", f"--file={dump}", url],
                       check=True, capture_output=True, timeout=WAIT)

        # A node that registers after the backup is unknown to the restored database.
        stack.agent("c", 1, heartbeat=HEARTBEAT, token=node_token(SECRET, "c"),
                    extra_args=("--fence-after", str(FENCE_AFTER)))
        wait_until(lambda: nodes_up("a", "b", "c"), "node c to register")
        forgotten = [_api_submit(stack.base_url, key, f"forgotten{i}", ticking_command(ticks, 300)) for i in range(2)]
        assert None not in forgotten
        wait_until(lambda: sum(jobs()[j]["state"] == "RUNNING" for j in forgotten) == 2, "the later jobs to run")
        wait_until(lambda: all(jobs()[j]["state"] == "COMPLETED" for j in short), "the short jobs to end")
        stack.procs["portal"].stop()
        stack.procs["worker"].stop()
        _restore(private_postgres, "backup", dump, stack, advance)
        restored_at = time.time()
        stack.portal()
        stack.worker()

        # Its heartbeats, from a node the restored database does not know, make the server ask it to
        # register again (the agent has not restarted nor lost the broker).
        wait_until(lambda: nodes_up("a", "b", "c"), "node c to register again", timeout=60)
        for job_id in forgotten:
            assert api.get(f"{stack.base_url}/api/v1/jobs/{job_id}/", timeout=10).status_code == 404

        def forgotten_stopped() -> bool:
            spans = tick_intervals(ticks)
            last = [last for (job, _), (_, last) in spans.items() if job in forgotten]
            return len(last) == 2 and max(last) < time.time() - 2.0

        wait_until(forgotten_stopped, "the forgotten jobs' processes to be stopped as stale", timeout=60)
        stopped_after = max(last for (job, _), (_, last) in tick_intervals(ticks).items() if job in forgotten)
        later = [_api_submit(stack.base_url, key, f"later{i}", ticking_command(ticks, 10)) for i in range(3)]
        assert None not in later
        assert min(later) > max(forgotten)  # no id handed out twice
        # Past the backup's ids by the command's gap or, when the command was not run, by the workers'
        # gap past the first forgotten id a heartbeat named (each node reports its own).
        from scheduler.job_ids import DEFAULT_GAP

        assert min(later) > max(known) + (ADVANCE_GAP if advance else DEFAULT_GAP)

        wait_until(lambda: all(jobs()[j]["state"] in FINAL for j in known + later), "every known job to finish",
                   timeout=WAIT)
        listing = jobs()
        assert sorted(listing) == sorted(known + later)
        requeued = 0
        for job_id in known + later:
            outcomes = [a["outcome"] for a in listing[job_id]["attempts"]]
            assert listing[job_id]["state"] == "COMPLETED", listing[job_id]
            assert outcomes.count("COMPLETED") == 1 and outcomes[-1] == "COMPLETED", outcomes
            requeued += len(outcomes) - 1
        assert ran_twice(ticks) == []
        # The short jobs ended after the backup: the restored database still runs them and their nodes no
        # longer list them, but the heartbeats repeat how they ended, so they end as they did, once.
        assert all(len(listing[j]["attempts"]) == 1 for j in short)
        print(f"backup/restore ({'with' if advance else 'without'} advance_job_ids): known {len(known)} (ids up "
              f"to {max(known)}), submitted after the backup {len(forgotten)} (ids {min(forgotten)}-{max(forgotten)}, "
              f"stopped {stopped_after - restored_at:.1f} s after the restore), after the restore {len(later)} (ids "
              f"from {min(later)}), requeued {requeued}, ran twice at once 0, lost of those the backup knew 0")
    except BaseException:
        import sys

        sys.stderr.write(stack.diagnostics())
        raise
    finally:
        stack.stop_all()
        stack.kill_jobs()
        assert not stack.job_groups()
