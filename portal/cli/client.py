"""A thin HTTP client for the portal's REST API (``/api/v1/``).

One method per endpoint; each returns the decoded JSON body or raises
:class:`ApiError`, whose ``message`` is a single line fit for a terminal:
validation errors name their fields, quota refusals name the limit, its value
and the current usage.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import requests

from portal.cli.config import Settings

API_PREFIX = "/api/v1"
USER_AGENT = "gpusched-cli"


class ApiError(Exception):
    """The request failed: HTTP error status, unreachable server or a bad body.

    ``status`` is the HTTP status, or ``None`` when no response arrived.
    """

    def __init__(self, message: str, *, status: int | None = None, body: Any = None) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.body = body


class ApiClient:
    """Calls the API at ``settings.url`` with ``Authorization: Token <key>``."""

    def __init__(self, settings: Settings, session: requests.Session | None = None) -> None:
        self.settings = settings
        self.session = session or requests.Session()
        self.session.headers.update(
            {
                "Authorization": f"Token {settings.token}",
                "Accept": "application/json",
                "User-Agent": USER_AGENT,
            }
        )

    # -- endpoints -----------------------------------------------------------

    def submit_job(self, payload: Mapping[str, Any]) -> dict[str, Any]:
        """POST /jobs/; ``payload`` uses the API's field names."""
        return self._request("POST", "/jobs/", json=dict(payload))

    def submit_array(self, payloads: list[Mapping[str, Any]], array: str | None = None) -> list[dict[str, Any]]:
        """POST /jobs/array/: all the jobs or none (with ``array``, a spec such as ``0-9:2``, ``payloads``
        is the one template); returns the jobs in the order given."""
        body: dict[str, Any] = {"jobs": [dict(p) for p in payloads]}
        if array is not None:
            body["array"] = array
        return self._request("POST", "/jobs/array/", json=body)["jobs"]

    def list_jobs(self, *, page: int = 1, **filters: str | None) -> dict[str, Any]:
        """GET /jobs/ one page: ``{count, next, previous, results}``."""
        params = {k: v for k, v in filters.items() if v is not None}
        if page != 1:
            params["page"] = str(page)
        return self._request("GET", "/jobs/", params=params)

    def iter_jobs(self, *, start_page: int = 1, **filters: str | None) -> Iterator[dict[str, Any]]:
        """Yield page bodies from ``start_page`` until the API reports no ``next``.

        Pages are requested by number rather than by following ``next``, whose
        host may be wrong behind a proxy.
        """
        page = start_page
        while True:
            body = self.list_jobs(page=page, **filters)
            yield body
            if not body.get("next"):
                return
            page += 1

    def get_job(self, job_id: int) -> dict[str, Any]:
        return self._request("GET", f"/jobs/{job_id}/")

    def job_progress(self, job_id: int) -> dict[str, Any] | None:
        """GET /jobs/{id}/progress/: what the job reported (gpusched.job); None before its first report,
        or from a server that does not have the endpoint yet (404 for a job that exists)."""
        try:
            return self._request("GET", f"/jobs/{job_id}/progress/").get("progress")
        except ApiError as exc:
            if exc.status == 404:
                return None
            raise

    def cancel_job(self, job_id: int) -> dict[str, Any]:
        return self._request("POST", f"/jobs/{job_id}/cancel/")

    def update_job(self, job_id: int | str, priority: int) -> dict[str, Any]:
        """PATCH /jobs/{id}/ with the new priority: the job as it stands after."""
        return self._request("PATCH", f"/jobs/{job_id}/", json={"priority": priority})

    def hold_job(self, job_id: int | str, release: bool = False) -> dict[str, Any]:
        """POST /jobs/{id}/hold/ (``release``: /release/): the job as it stands after."""
        return self._request("POST", f"/jobs/{job_id}/{'release' if release else 'hold'}/")

    def job_logs(self, job_id: int, attempt: int | None = None, offset: int = 0,
                 tail: int | None = None) -> dict[str, Any]:
        """GET /jobs/{id}/logs/: ``{"attempt": N, "offset": K, "lines": [...], "next_offset": K2, "more": bool, ...}``.

        ``attempt`` None means the latest (``"attempt": null`` before the first
        start); ``offset`` skips that many lines from the start of the log;
        ``tail`` asks for its last lines instead. One answer is one page:
        ``more`` says whether lines follow from ``next_offset``.
        """
        params = {"attempt": str(attempt)} if attempt is not None else {}
        if tail is not None:
            params["tail"] = str(tail)
        elif offset:
            params["offset"] = str(offset)
        return self._request("GET", f"/jobs/{job_id}/logs/", params=params)

    def quota(self) -> dict[str, Any]:
        return self._request("GET", "/quota/")

    def start_session(self, payload: Mapping[str, Any]) -> dict[str, Any]:
        """POST /sessions/: an interactive session (kind, num_gpus, time_limit, image); its status."""
        return self._request("POST", "/sessions/", json=dict(payload))

    def session_status(self, job_id: int) -> dict[str, Any]:
        """GET /sessions/<id>/: the session's phase, and its URL once ready."""
        return self._request("GET", f"/sessions/{job_id}/")

    def fair_share(self) -> dict[str, Any]:
        """GET /fairshare/: each visible project's fair-share standing."""
        return self._request("GET", "/fairshare/")

    def usage(self, params: Mapping[str, str]) -> dict[str, Any]:
        """GET /usage/ with ``from``, ``to`` and ``by``."""
        return self._request("GET", "/usage/", params=dict(params))

    def nodes(self) -> Any:
        """GET /nodes/: a list, or a page body if the API paginates it."""
        return self._request("GET", "/nodes/")

    # -- plumbing ------------------------------------------------------------

    def _request(self, method: str, path: str, **kwargs: Any) -> Any:
        url = f"{self.settings.url}{API_PREFIX}{path}"
        try:
            response = self.session.request(method, url, timeout=self.settings.timeout, **kwargs)
        except requests.Timeout:
            raise ApiError(f"{self.settings.url} did not answer within {self.settings.timeout:g} s") from None
        except requests.ConnectionError:
            raise ApiError(f"cannot connect to the portal at {self.settings.url}") from None
        except requests.RequestException as exc:
            raise ApiError(f"request to {url} failed: {exc}") from None
        body = _decode(response)
        if response.status_code >= 400:
            raise ApiError(error_message(response.status_code, response.reason, body),
                           status=response.status_code, body=body)
        if body is None and response.content:
            raise ApiError(f"{method} {url}: the server answered {response.status_code} with a "
                           f"non-JSON body; is {self.settings.url} the portal?",
                           status=response.status_code)
        return body


def _decode(response: requests.Response) -> Any:
    """The JSON body, or ``None`` when there is none or it is not JSON."""
    if not response.content:
        return None
    try:
        return response.json()
    except ValueError:
        return None


def error_message(status: int, reason: str | None, body: Any) -> str:
    """One line describing an HTTP error response, built from the API's JSON.

    * ``{"errors": {field: [msg, ...]}}`` -> ``"num_gpus: msg; command: msg"``
    * quota refusals -> the detail plus
      ``(limit NAME = VALUE, current usage USAGE[, requested N])``
    * ``{"detail": "..."}`` -> the detail
    * anything else -> the status line
    """
    head = f"HTTP {status}" + (f" {reason}" if reason else "")
    if not isinstance(body, dict):
        return head
    if isinstance(body.get("errors"), dict):
        return f"{head}: {format_field_errors(body['errors'])}"
    if "detail" in body:
        text = f"{head}: {body['detail']}"
        if "limit" in body:
            text += (f" (limit {body['limit']} = {_plain(body.get('limit_value'))}, "
                     f"current usage {_plain(body.get('current_usage'))}"
                     + (f", requested {body['requested']}" if body.get("requested") is not None else "")
                     + ")")
        return text
    if body:  # DRF's default validation shape: {field: [msg, ...]}
        return f"{head}: {format_field_errors(body)}"
    return head


def format_field_errors(errors: Mapping[str, Any]) -> str:
    """``{"num_gpus": ["too big"], "x": "bad"}`` -> ``"num_gpus: too big; x: bad"``."""
    parts = []
    for field, messages in errors.items():
        if isinstance(messages, list | tuple):
            text = " ".join(_plain(m) for m in messages)
        elif isinstance(messages, dict):
            text = format_field_errors(messages)
        else:
            text = _plain(messages)
        parts.append(text if field in ("non_field_errors", "__all__") else f"{field}: {text}")
    return "; ".join(parts)


def _plain(value: Any) -> str:
    if isinstance(value, dict):
        return format_field_errors(value)
    return "-" if value is None else str(value)
