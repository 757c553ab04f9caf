"""Every command over real HTTP against an in-process server that speaks the
REST contract (see conftest.py): output formats, error lines and exit codes.
"""

from __future__ import annotations

import json
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

import portal.cli.logs as logs_module
from tests.portal.cli.fake_portal import PAGE_SIZE, TOKEN, FakeApi


def test_submit_prints_the_new_job_and_posts_the_payload(run_cli, fake_api: FakeApi, api_env) -> None:
    code, out, err = run_cli("submit", "--class", "TE", "--gpus", "2", "--", "python", "train.py",
                             env=api_env)
    assert (code, err) == (0, "")
    assert out == "Submitted job 1 (train.py): PENDING\n"
    job = fake_api.jobs[1]
    assert (job["command"], job["job_class"], job["num_gpus"]) == ("python train.py", "TE", 2)


def test_submit_quiet_prints_only_the_id_and_json_prints_the_object(run_cli, fake_api, api_env) -> None:
    assert run_cli("submit", "-q", "--", "true", env=api_env) == (0, "1\n", "")
    code, out, _ = run_cli("submit", "--json", "--name", "n", "--", "true", env=api_env)
    assert code == 0
    assert json.loads(out) == fake_api.jobs[2]


def test_validation_errors_name_the_fields_and_exit_1(run_cli, fake_api, api_env) -> None:
    code, out, err = run_cli("submit", "--gpus", "0", "--command", " x", env=api_env)
    assert code == 1 and out == ""
    assert err == ("gpusched: error: HTTP 400 Bad Request: num_gpus: Ensure this value is "
                   "greater than or equal to 1.\n")
    assert fake_api.jobs == {}


def test_quota_refusal_names_the_limit_value_and_usage(run_cli, fake_api, api_env) -> None:
    fake_api.add_job(num_gpus=6)
    code, _, err = run_cli("submit", "--gpus", "4", "--", "x", env=api_env)
    assert code == 1
    assert err == ("gpusched: error: HTTP 403 Forbidden: Quota exceeded: concurrent GPUs. "
                   "(limit max_gpus = 8, current usage 6)\n")


def test_bad_token_is_an_api_error(run_cli, fake_api, api_env) -> None:
    code, _, err = run_cli("list", "--token", "wrong", env=api_env)
    assert code == 1
    assert err == "gpusched: error: HTTP 401 Unauthorized: Invalid token.\n"


def test_unreachable_portal_is_an_api_error(run_cli) -> None:
    with socket.socket() as sock:  # a port that nothing listens on once closed
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    code, _, err = run_cli("list", "--url", f"http://127.0.0.1:{port}", "--token", "t")
    assert code == 1
    assert err == f"gpusched: error: cannot connect to the portal at http://127.0.0.1:{port}\n"


def test_a_server_that_is_not_the_portal_is_reported(run_cli) -> None:
    class Html(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = b"<html>hello</html>"
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Html)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        code, _, err = run_cli("quota", "--url", url, "--token", "t")
    finally:
        server.shutdown()
        server.server_close()
    assert code == 1
    assert "non-JSON body; is " + url + " the portal?" in err


def test_list_table_shows_one_page_and_says_how_to_get_more(run_cli, fake_api, api_env) -> None:
    for i in range(PAGE_SIZE + 1):
        fake_api.add_job(name=f"exp-{i}", submitted_at=None)
    code, out, _ = run_cli("list", env=api_env)
    assert code == 0
    lines = out.splitlines()
    assert lines[0].split() == ["ID", "NAME", "OWNER", "CLASS", "GPUS", "PRIO", "STATE", "REASON", "POS",
                                "SUBMITTED"]
    assert [line.split()[1] for line in lines[1:3]] == ["exp-0", "exp-1"]
    assert lines[3] == "(page 1: 2 of 3 jobs; --page 2 or --all-pages for more)"


def test_list_all_pages_json_collects_every_page(run_cli, fake_api, api_env) -> None:
    for i in range(2 * PAGE_SIZE + 1):
        fake_api.add_job(job_class="TE" if i % 2 else "BE")
    code, out, _ = run_cli("list", "--all-pages", "--json", env=api_env)
    body = json.loads(out)
    assert code == 0
    assert body["count"] == 5 and [j["id"] for j in body["results"]] == [1, 2, 3, 4, 5]
    assert body["next"] is None
    pages = [q.get("page") for m, path, q in fake_api.requests if path == "/api/v1/jobs/"]
    assert pages == [None, "2", "3"]


def test_list_passes_filters(run_cli, fake_api, api_env) -> None:
    fake_api.add_job(job_class="TE", state="RUNNING")
    fake_api.add_job(job_class="BE", state="RUNNING")
    fake_api.add_job(job_class="TE", state="PENDING")
    code, out, _ = run_cli("list", "--class", "te", "--state", "running", "--json", env=api_env)
    assert code == 0 and [j["id"] for j in json.loads(out)["results"]] == [1]
    assert fake_api.requests[-1][2] == {"state": "RUNNING", "job_class": "TE"}


def test_show_and_missing_job(run_cli, fake_api, api_env) -> None:
    fake_api.add_job(name="detail", command="python a.py")
    code, out, _ = run_cli("show", "1", env=api_env)
    assert code == 0
    assert "\nName:          detail\n" in out and "\nCommand:       python a.py\n" in out
    code, out, err = run_cli("show", "99", env=api_env)
    assert (code, out) == (1, "")
    assert err == "gpusched: error: HTTP 404 Not Found: Not found.\n"


def test_cancel_then_cancel_again_conflicts(run_cli, fake_api, api_env) -> None:
    fake_api.add_job(state="PENDING")
    assert run_cli("cancel", "1", env=api_env) == (0, "Job 1: CANCELLED\n", "")
    code, _, err = run_cli("cancel", "1", env=api_env)
    assert code == 1
    assert err == "gpusched: error: HTTP 409 Conflict: Job 1 has already finished.\n"


def test_logs_prints_lines_of_the_requested_attempt(run_cli, fake_api, api_env) -> None:
    fake_api.add_job(attempt_count=2)
    fake_api.logs[(1, 1)] = ["first attempt"]
    fake_api.logs[(1, 2)] = ["step 1", "step 2"]
    assert run_cli("logs", "1", env=api_env) == (0, "step 1\nstep 2\n", "")
    assert run_cli("logs", "1", "--attempt", "1", env=api_env) == (0, "first attempt\n", "")
    code, out, _ = run_cli("logs", "1", "--json", env=api_env)
    assert json.loads(out) == {"attempt": 2, "offset": 0, "lines": ["step 1", "step 2"], "next_offset": 2,
                               "total_lines": 2, "more": False}


def test_a_log_of_several_pages_is_printed_whole_and_its_tail_on_request(run_cli, fake_api, api_env) -> None:
    fake_api.add_job(attempt_count=1)
    fake_api.logs[(1, 1)] = [f"line {n}" for n in range(8)]  # three pages of the fake's three lines
    assert run_cli("logs", "1", env=api_env) == (0, "".join(f"line {n}\n" for n in range(8)), "")
    assert run_cli("logs", "1", "--tail", "4", env=api_env) == (0, "line 4\nline 5\nline 6\nline 7\n", "")
    code, out, _ = run_cli("logs", "1", "--json", "--tail", "5", env=api_env)
    body = json.loads(out)
    assert (body["offset"], body["lines"], body["more"]) == (3, [f"line {n}" for n in range(3, 8)], False)


def test_logs_of_a_job_that_never_started_is_empty(run_cli, fake_api, api_env) -> None:
    fake_api.add_job(attempt_count=0)
    assert run_cli("logs", "1", env=api_env) == (0, "", "")


def follow(run_cli, fake_api: FakeApi, api_env, monkeypatch, worlds, *extra: str):
    """Run ``logs 1 --follow``; before the first poll and at each sleep the fake
    job moves to the next world: (state, attempt_count, {attempt: lines}).
    Returns the CLI's result and how many sleeps it took.
    """
    job = fake_api.add_job()
    pending = iter(worlds)
    sleeps = []

    def enter_next_world(interval: float = 0.25) -> None:
        assert interval == 0.25
        state, attempts, logs = next(pending)
        job.update(state=state, attempt_count=attempts)
        fake_api.logs.update({(1, n): list(lines) for n, lines in logs.items()})

    enter_next_world()
    monkeypatch.setattr(logs_module.time, "sleep", lambda s: (sleeps.append(s), enter_next_world(s)))
    result = run_cli("logs", "1", "--follow", "--interval", "0.25", *extra, env=api_env)
    return result, len(sleeps)


def test_logs_follow_prints_new_lines_across_attempts_until_the_job_ends(
    run_cli, fake_api, api_env, monkeypatch: pytest.MonkeyPatch
) -> None:
    worlds = [
        ("PENDING", 0, {}),
        ("RUNNING", 1, {1: ["a1"]}),
        ("RUNNING", 1, {1: ["a1", "a2"]}),
        ("PENDING", 2, {1: ["a1", "a2", "a3"]}),  # preempted; its last line came late
        ("RUNNING", 2, {2: ["b1"]}),
        ("COMPLETED", 2, {2: ["b1", "b2"]}),
        ("COMPLETED", 2, {2: ["b1", "b2", "never shown"]}),
    ]
    (code, out, err), sleeps = follow(run_cli, fake_api, api_env, monkeypatch, worlds)
    assert (code, err) == (0, "")
    assert out == "a1\na2\na3\n--- attempt 2 ---\nb1\nb2\n"
    assert sleeps == 5  # stopped at the first poll that saw COMPLETED
    offsets = [q.get("offset") for _, path, q in fake_api.requests if path.endswith("/logs/")]
    assert offsets == [None, None, "1", "2", None, None, "1"]  # only new lines are fetched


def test_logs_follow_json_prints_one_object_per_batch(
    run_cli, fake_api, api_env, monkeypatch: pytest.MonkeyPatch
) -> None:
    worlds = [("RUNNING", 1, {1: ["a1"]}), ("RUNNING", 1, {1: ["a1"]}), ("FAILED", 1, {1: ["a1", "a2"]})]
    (code, out, _), _ = follow(run_cli, fake_api, api_env, monkeypatch, worlds, "--json")
    assert code == 0
    assert [json.loads(line) for line in out.splitlines()] == [
        {"attempt": 1, "lines": ["a1"]}, {"attempt": 1, "lines": ["a2"]}]


def test_logs_follow_of_an_earlier_attempt_stops_when_a_later_one_exists(
    run_cli, fake_api, api_env, monkeypatch: pytest.MonkeyPatch
) -> None:
    worlds = [("RUNNING", 2, {1: ["old"], 2: ["new"]})]
    (code, out, _), sleeps = follow(run_cli, fake_api, api_env, monkeypatch, worlds, "--attempt", "1")
    assert (code, out, sleeps) == (0, "old\n", 0)


def test_quota_table(run_cli, fake_api, api_env) -> None:
    fake_api.add_job(num_gpus=3)
    code, out, _ = run_cli("quota", env=api_env)
    assert code == 0
    assert out.splitlines() == [
        "LIMIT        VALUE      USAGE",
        "max_gpus     8              3",
        "max_te_gpus  unlimited      0",
    ]


def test_nodes_table(run_cli, fake_api, api_env) -> None:
    gpus = [{"index": 0, "model_name": "virtual", "memory_mb": None, "allocated": False, "allocated_to": None},
            {"index": 1, "model_name": "virtual", "memory_mb": None, "allocated": True, "allocated_to": None}]
    fake_api.nodes = [
        {"name": "n1", "state": "UP", "gpus": gpus, "gpu_count": 2, "free_gpus": 1, "cpus": 32.0,
         "mem_gb": 256.0, "last_heartbeat": None, "agent_version": "1", "protocol_version": 1,
         "agent_outdated": True},
        {"name": "n2", "state": "DOWN", "gpus": gpus, "cpus": 8.0, "mem_gb": 64.0},  # counts from the list
        {"name": "n3", "state": "UP", "gpus": gpus, "cpus": 8.0, "mem_gb": 64.0, "protocol_version": 2,
         "agent_outdated": False},
    ]
    code, out, _ = run_cli("nodes", env=api_env)
    assert code == 0
    lines = out.splitlines()
    assert lines[0].split() == ["NAME", "STATE", "GPUS", "FREE", "CPUS", "MEM_GB", "LAST_HEARTBEAT", "PROTOCOL"]
    assert lines[1].split() == ["n1", "UP", "2", "1", "32", "256", "-", "1", "(old", "agent)"]
    assert lines[2].split() == ["n2", "DOWN", "2", "1", "8", "64", "-", "-"]
    assert lines[3].split() == ["n3", "UP", "2", "1", "8", "64", "-", "2"]
    code, out, _ = run_cli("nodes", "--json", env=api_env)
    assert json.loads(out) == fake_api.nodes


def test_token_is_sent_as_token_authorization(run_cli, fake_api) -> None:
    code, _, _ = run_cli("quota", "--url", fake_api.url + "/", "--token", TOKEN)
    assert code == 0  # the fake answers 401 unless the header is exactly "Token <key>"
