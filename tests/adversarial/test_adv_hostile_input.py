"""Hostile input: odd, oversized, deeply nested and malicious values through the API, the forms and
the trace upload; every refusal is a clear 4xx, everything accepted is stored exactly, and every
page shows it escaped."""

from __future__ import annotations

import json

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile

from portal.dashboard.models import SimulationRun
from scheduler.models import Job, JobEvent

pytestmark = pytest.mark.django_db

URL = "/api/v1/jobs/"
SCRIPT = "<script>alert('x')</script>"
IMG = '"><img src=x onerror=alert(1)>'
SQL = "'; DROP TABLE scheduler_job; --"
# Text that must come back exactly as sent: scripts, SQL, quotes, right-to-left and combining marks,
# emoji, tabs and newlines in commands, and a string of the maximum length.
STORED_AS_IS = [
    ("name", SCRIPT),
    ("name", IMG),
    ("name", SQL),
    ("name", "Robert'); DELETE FROM auth_user WHERE ('1'='1"),
    ("name", "ｊｏｂ \u202eevil\u202c ﷽ 🧪🔥 e\u0301"),
    ("name", "x" * 200),
    ("command", f"echo {SCRIPT} && echo \"{SQL}\"\n\tpython -c 'print(1)'  # ${{HOME}} `id` $(id)"),
    ("command", "printf '%s' \"\u0000\"".replace("\u0000", "\\0")),
]


@pytest.mark.parametrize("field, value", STORED_AS_IS, ids=[f"{f}-{i}" for i, (f, _) in enumerate(STORED_AS_IS)])
def test_odd_text_is_stored_exactly_and_shown_escaped_everywhere(roles, api_as, browser_as, make_node, field,
                                                                 value) -> None:
    make_node("n1", 2)
    body = {"name": "j", "command": "echo", field: value}
    response = api_as(roles.owner).post(URL, body, format="json")
    assert response.status_code == 201, response.content
    job = Job.objects.get(pk=response.json()["id"])
    stored = getattr(job, field)
    assert stored == (value.strip() if field == "name" else value)
    assert Job.objects.count() == 1  # and the table is still there
    assert api_as(roles.owner).get(f"{URL}{job.pk}/").json()[field] == stored

    staff = browser_as(roles.staff)
    pages = [f"/jobs/{job.pk}/", "/jobs/", "/cluster/", f"/admin/scheduler/job/{job.pk}/change/",
             "/admin/scheduler/job/"]
    for page in [*pages, f"/jobs/?name={SCRIPT}"]:
        html = staff.get(page).content.decode()
        for raw in (SCRIPT, IMG, "<img src=x", "<script>alert"):
            assert raw not in html, f"{page} shows {raw!r} unescaped"
    detail = browser_as(roles.owner).get(f"/jobs/{job.pk}/").content.decode()
    if "<" in value and field == "name":
        assert "&lt;" in detail  # shown, escaped


def test_the_cluster_pages_initial_state_cannot_close_its_script_tag(roles, api_as, browser_as, make_node) -> None:
    make_node("n1", 2)
    api_as(roles.owner).post(URL, {"name": "</script><script>alert(1)</script>", "command": "echo"}, format="json")
    html = browser_as(roles.owner).get("/cluster/").content.decode()
    state = html.split('<script id="initial-state" type="application/json">', 1)[1].split("</script>", 1)[0]
    assert "\\u003C/script\\u003E" in state
    assert json.loads(state)["queue"]["BE"]["jobs"][0]["name"] == "</script><script>alert(1)</script>"


REFUSED = [
    ("name", "   ", "name"),
    ("name", "x" * 201, "name"),
    ("name", "nul\u0000byte", "name"),
    ("command", "echo \u0000", "command"),
    ("command", "x" * (16 * 1024 + 1), "command"),
    ("num_gpus", 10**100, "num_gpus"),
    ("num_gpus", -1, "num_gpus"),
    ("num_gpus", "1; DROP TABLE", "num_gpus"),
    ("num_gpus", [1], "num_gpus"),
    ("num_cpus", "1e309", "num_cpus"),  # sent as a bare number literal, which decodes to infinity
    ("grace_period", {"$gt": 0}, "grace_period"),
    ("priority", 2**64, "priority"),
    ("job_class", "<b>TE</b>", "job_class"),
    ("name", {"nested": "object"}, "name"),
]


@pytest.mark.parametrize("field, value, named", REFUSED, ids=[f"{f}-{i}" for i, (f, _, _) in enumerate(REFUSED)])
def test_bad_values_are_a_400_naming_the_field_and_write_nothing(roles, api_as, field, value, named) -> None:
    body = json.dumps({"name": "j", "command": "echo", field: value})
    if value == "1e309":
        body = body.replace('"1e309"', "1e309")
    response = api_as(roles.owner).post(URL, body, content_type="application/json")
    assert response.status_code == 400, response.content[:300]
    assert named in response.json()["errors"]
    assert all(isinstance(m, str) and m for m in response.json()["errors"][named])
    assert not Job.objects.exists() and not JobEvent.objects.exists()


@pytest.mark.parametrize("depth", [200, 5000, 50000])
def test_deeply_nested_json_is_a_400(roles, api_as, depth) -> None:
    for body in ("[" * depth + "]" * depth, '{"a":' * depth + "1" + "}" * depth,
                 json.dumps({"name": "j", "command": "echo"})[:-1] + ', "extra": ' + "[" * depth + "]" * depth + "}"):
        if len(body) > 64 * 1024:
            continue
        response = api_as(roles.owner).post(URL, body, content_type="application/json")
        assert response.status_code in (400, 413), (depth, response.status_code, response.content[:200])
        assert response["Content-Type"].startswith("application/json")
    assert not Job.objects.exists()


def test_oversized_bodies_are_refused_on_every_api_write(roles, api_as, make_job) -> None:
    job = make_job(roles.owner)
    big = "x" * (64 * 1024 + 1)
    for url in (URL, f"{URL}{job.pk}/cancel/"):
        response = api_as(roles.owner).post(url, big, content_type="application/json")
        assert response.status_code == 413 and "limit" in response.json()["detail"]
    assert api_as(roles.owner).post(URL, "{}", content_type="application/json", CONTENT_LENGTH="ten").status_code == 400
    assert Job.objects.get(pk=job.pk).state == "PENDING"


def test_binary_and_wrongly_typed_bodies(roles, api_as) -> None:
    client = api_as(roles.owner)
    assert client.post(URL, b"\x89PNG\r\n\x1a\n\x00\x00", content_type="application/json").status_code == 400
    assert client.post(URL, b"\xff\xfe{", content_type="application/json").status_code == 400
    assert client.post(URL, b"name=j", content_type="application/x-www-form-urlencoded").status_code == 415
    assert client.post(URL, "null", content_type="application/json").status_code == 400
    assert client.post(URL, '"a string"', content_type="application/json").status_code == 400
    assert not Job.objects.exists()


def test_form_fields_get_the_same_rules(roles, browser_as) -> None:
    client = browser_as(roles.owner)
    base = {"name": "j", "command": "echo", "job_class": "BE", "num_gpus": 1, "grace_period": 30, "priority": 0}
    for change in ({"name": "a\u0000b"}, {"command": "x" * (16 * 1024 + 1)}, {"num_gpus": "1e999"}, {"name": " "}):
        response = client.post("/jobs/new/", {**base, **change})
        assert response.status_code == 400
    response = client.post("/jobs/new/", {**base, "name": SCRIPT})
    assert response.status_code == 302
    assert Job.objects.get().name == SCRIPT
    assert SCRIPT not in client.get(response.url).content.decode()


# --- Trace upload ---------------------------------------------------------------------------------

TRACE_HEADER = "job_id,submit_time,duration,num_gpus,job_class,grace_period\n"


def _upload(client, content: bytes, name: str = "t.csv"):  # noqa: ANN001, ANN202
    data = {"workload": "trace", "policies": ["fifo"], "nodes": 2, "gpus_per_node": 8, "resume_overhead": 30,
            "trace": SimpleUploadedFile(name, content, content_type="text/csv")}
    return client.post("/simulations/", data)


def test_a_huge_trace_is_refused_with_the_limit(roles, browser_as, settings) -> None:
    settings.SIMULATION_MAX_UPLOAD_BYTES = 64 * 1024
    rows = "".join(f"j{i},{i},60,1,BE,30\n" for i in range(5000))
    response = _upload(browser_as(roles.owner), (TRACE_HEADER + rows).encode())
    assert response.status_code == 400
    html = response.content.decode()
    assert "64.0 KiB" in html or "65536" in html or "64 KiB" in html, html[html.find("error"):][:500]
    assert not SimulationRun.objects.exists()


def test_a_trace_with_more_jobs_than_allowed_is_refused(roles, browser_as, settings) -> None:
    settings.SIMULATION_MAX_JOBS = 10
    rows = "".join(f"j{i},{i},60,1,BE,30\n" for i in range(11))
    response = _upload(browser_as(roles.owner), (TRACE_HEADER + rows).encode())
    assert response.status_code == 400 and "10" in response.content.decode()
    assert not SimulationRun.objects.exists()


@pytest.mark.parametrize("content", [
    b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00",
    b"\x00" * 1000,
    b"PK\x03\x04\x14\x00\x00\x00\x08\x00",
    (TRACE_HEADER + "a,0,60,1,BE,30\nb,1,60\x00,1,BE,30\n").encode(),
    (TRACE_HEADER + "a,0,60,1,BE,30\n" + "b," * 10000 + "\n").encode(),
    (TRACE_HEADER + f"{SCRIPT},0,60,1,BE,30\n").encode(),
    (TRACE_HEADER + "a,0,1e999,1,BE,30\n").encode(),
    (TRACE_HEADER + "a,0,nan,1,BE,30\n").encode(),
], ids=["png", "nul", "zip", "nul-in-row", "wide-row", "script-id", "inf", "nan"])
def test_binary_or_malformed_traces_are_refused_with_the_reason(roles, browser_as, content) -> None:
    response = _upload(browser_as(roles.owner), content)
    html = response.content.decode()
    if response.status_code == 302:  # accepted: only a well-formed trace may be
        run = SimulationRun.objects.get()
        assert SCRIPT not in browser_as(roles.owner).get(response.url).content.decode()
        assert content.decode().count("\n") >= 2 and run.trace_text
        return
    assert response.status_code == 400
    assert 'class="errors"' in html or "errorlist" in html
    assert SCRIPT not in html
    assert not SimulationRun.objects.exists()


# --- bodies without Content-Length, through the real server ----------------------------------------------


def _chunked(body: bytes, piece: int = 4096):  # noqa: ANN202 - a generator: requests then sends it chunked
    for start in range(0, len(body), piece):
        yield body[start:start + piece]


@pytest.fixture
def served_api(live_stack):  # noqa: ANN001, ANN201
    """daphne serving the portal on the test database (one process as scripts/serve.sh web runs each), and a token."""
    from django.contrib.auth.models import User

    from portal.models import ApiToken

    live_stack.portal()
    key = ApiToken.issue(User.objects.create_user("alice"), "chunked")[1]
    return live_stack.base_url, {"Authorization": f"Token {key}", "Content-Type": "application/json"}


@pytest.mark.django_db(transaction=True)  # the server sees the test's rows
@pytest.mark.postgres
@pytest.mark.redis
def test_a_chunked_body_without_content_length_is_held_to_the_same_limit(served_api) -> None:
    """Transfer-Encoding: chunked carries no Content-Length; the limit applies to the bytes received,
    and a body within it is parsed like any other."""
    import requests

    base, headers = served_api
    limit = 64 * 1024
    padded = json.dumps({"name": "big", "command": ""})
    for size in (limit + 1, 4 * limit, 2 * 1024 * 1024):
        body = padded[:-2].encode() + b"x" * (size - len(padded)) + b'"}'
        assert len(body) == size
        response = requests.post(base + URL, data=_chunked(body), headers=headers, timeout=60)
        assert response.request.headers.get("Transfer-Encoding") == "chunked"
        assert "Content-Length" not in response.request.headers
        assert response.status_code == 413, (size, response.status_code, response.text[:300])
        assert response.json()["detail"] == f"Request body is over the limit of {limit} bytes."
    assert not Job.objects.exists()

    ok = json.dumps({"name": "chunked", "command": "echo hi"}).encode()
    response = requests.post(base + URL, data=_chunked(ok, 7), headers=headers, timeout=60)
    assert response.status_code == 201, response.text[:300]
    assert Job.objects.get().name == "chunked"
