"""A stand-in portal for the client's tests: a real HTTP server (stdlib, in a
thread) that answers with the REST contract's shapes from in-memory state, so
the client is exercised over real sockets without Django. The live-server tests
in ``test_commands.py`` cover the real portal.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

TOKEN = "test-token-123"
PAGE_SIZE = 2
JOB_FIELDS = {"name", "command", "job_class", "num_gpus", "num_cpus", "mem_gb",
              "grace_period", "time_limit", "priority"}


@dataclass
class FakeApi:
    """In-memory state of the fake portal, inspectable by tests."""

    url: str = ""
    jobs: dict[int, dict[str, Any]] = field(default_factory=dict)
    logs: dict[tuple[int, int], list[str]] = field(default_factory=dict)
    log_page_lines: int = 3  # lines per answer of the logs endpoint: small, so that paging is exercised
    requests: list[tuple[str, str, dict[str, str]]] = field(default_factory=list)
    max_gpus_quota: int = 8
    nodes: list[dict[str, Any]] = field(default_factory=list)
    log_requests: int = 0

    def add_job(self, **overrides: Any) -> dict[str, Any]:
        job_id = len(self.jobs) + 1
        job = {
            "id": job_id, "name": f"job{job_id}", "owner": "alice", "command": "true",
            "job_class": "BE", "num_gpus": 1, "num_cpus": None, "mem_gb": None,
            "grace_period": 30, "time_limit": None, "priority": 0, "state": "PENDING",
            "pending_reason": "Resources", "pending_message": "", "submitted_at":
            "2025-01-02T03:04:05Z", "started_at": None, "ended_at": None, "exit_code": None,
            "attempt_count": 0, "attempts": [], "events": [],
        }
        job.update(overrides)
        self.jobs[job_id] = job
        return job


class _Handler(BaseHTTPRequestHandler):
    api: FakeApi

    def log_message(self, *args: Any) -> None:  # keep test output clean
        pass

    def _send(self, status: int, body: Any) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _route(self, method: str) -> None:
        parts = urlsplit(self.path)
        query = {k: v[0] for k, v in parse_qs(parts.query).items()}
        self.api.requests.append((method, parts.path, query))
        if self.headers.get("Authorization") != f"Token {TOKEN}":
            return self._send(401, {"detail": "Invalid token."})
        segments = [s for s in parts.path.split("/") if s]
        if segments[:2] != ["api", "v1"]:
            return self._send(404, {"detail": "Not found."})
        segments = segments[2:]
        length = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(length)) if length else None
        if segments == ["jobs"] and method == "POST":
            return self._submit(body)
        if segments == ["jobs"]:
            return self._list(query)
        if segments == ["quota"]:
            used = sum(j["num_gpus"] for j in self.api.jobs.values())
            return self._send(200, {"limits": {"max_gpus": self.api.max_gpus_quota, "max_te_gpus": None},
                                    "usage": {"max_gpus": used, "max_te_gpus": 0}})
        if segments == ["nodes"]:
            return self._send(200, self.api.nodes)
        if len(segments) >= 2 and segments[0] == "jobs" and segments[1].isdigit():
            job = self.api.jobs.get(int(segments[1]))
            if job is None:
                return self._send(404, {"detail": "Not found."})
            if segments[2:] == [] and method == "GET":
                return self._send(200, job)
            if segments[2:] == ["cancel"] and method == "POST":
                if job["state"] in ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT"):
                    return self._send(409, {"detail": f"Job {job['id']} has already finished."})
                job["state"] = "CANCELLED" if job["state"] == "PENDING" else "CANCELLING"
                return self._send(202, job)
            if segments[2:] == ["logs"] and method == "GET":
                self.api.log_requests += 1
                attempt = int(query["attempt"]) if "attempt" in query else job["attempt_count"] or None
                lines = self.api.logs.get((job["id"], attempt), []) if attempt else []
                offset = max(0, len(lines) - int(query["tail"])) if "tail" in query else int(query.get("offset", 0))
                page = lines[offset:offset + self.api.log_page_lines]
                return self._send(200, {"attempt": attempt, "offset": offset, "lines": page,
                                        "next_offset": offset + len(page), "total_lines": len(lines),
                                        "more": offset + len(page) < len(lines)})
        return self._send(404, {"detail": "Not found."})

    def _submit(self, body: dict[str, Any]) -> None:
        errors: dict[str, list[str]] = {}
        for key in sorted(set(body) - JOB_FIELDS):
            errors[key] = ["Unknown field."]
        if not str(body.get("command", "")).strip():
            errors["command"] = ["This field may not be blank."]
        gpus = body.get("num_gpus", 1)
        if not isinstance(gpus, int) or gpus < 1:
            errors["num_gpus"] = ["Ensure this value is greater than or equal to 1."]
        if errors:
            return self._send(400, {"errors": errors})
        used = sum(j["num_gpus"] for j in self.api.jobs.values())
        if used + gpus > self.api.max_gpus_quota:
            return self._send(403, {"detail": "Quota exceeded: concurrent GPUs.", "limit": "max_gpus",
                                    "limit_value": self.api.max_gpus_quota, "current_usage": used})
        job = self.api.add_job(**body)
        self._send(201, job)

    def _list(self, query: dict[str, str]) -> None:
        jobs = [j for j in self.api.jobs.values()
                if query.get("state") in (None, j["state"])
                and query.get("job_class") in (None, j["job_class"])]
        page = int(query.get("page", 1))
        chunk = jobs[(page - 1) * PAGE_SIZE: page * PAGE_SIZE]
        if page > 1 and not chunk:
            return self._send(404, {"detail": "Invalid page."})
        more = page * PAGE_SIZE < len(jobs)
        self._send(200, {"count": len(jobs),
                         "next": f"{self.api.url}/api/v1/jobs/?page={page + 1}" if more else None,
                         "previous": None, "results": chunk})

    def do_GET(self) -> None:
        self._route("GET")

    def do_POST(self) -> None:
        self._route("POST")


@contextmanager
def serve_fake_api() -> Iterator[FakeApi]:
    """Run a :class:`FakeApi` on a free local port for the duration of the block."""
    api = FakeApi()
    handler = type("Handler", (_Handler,), {"api": api})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    api.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02},
                              daemon=True)
    thread.start()
    try:
        yield api
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
