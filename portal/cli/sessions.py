"""``gpusched notebook`` and ``gpusched shell``: start an interactive session, wait for it, open it.

The session is submitted through the API; the command then polls it until
its server answers, prints the portal URL that opens it and opens that URL
in the default browser (``webbrowser``) unless ``--no-open``. A session that
ends before it is ready (refused at start, its time limit) is an error.
"""

from __future__ import annotations

import argparse
import json
import time
import webbrowser
from collections.abc import Callable
from typing import Any, TextIO

from portal.cli.client import ApiClient, ApiError

POLL_S = 0.5


def add_parsers(sub: Any, common: argparse.ArgumentParser, duration: Callable[[str], float]) -> None:
    """The ``notebook`` and ``shell`` subcommands (``duration`` parses 90, 2m, 1h)."""
    for name, text in (("notebook", "start a JupyterLab notebook on GPUs and open it"),
                       ("shell", "start a terminal on GPUs and open it")):
        p = sub.add_parser(name, parents=[common], help=text)
        p.add_argument("--gpus", type=int, default=1, metavar="N", help="number of GPUs (default 1)")
        p.add_argument("--time-limit", type=duration, metavar="DUR",
                       help="how long the session may run (default: the portal's)")
        p.add_argument("--image", metavar="NAME", help="a registered image with the session's server in it")
        p.add_argument("--no-open", action="store_true", help="print the URL without opening a browser")
        p.add_argument("--wait", type=duration, default=600.0, metavar="DUR",
                       help="how long to wait for the session to be ready (default 10m)")


def cmd_session(client: ApiClient, args: argparse.Namespace, out: TextIO,
                open_url: Callable[[str], Any] = webbrowser.open, sleep: Callable[[float], None] = time.sleep) -> int:
    """Start the session, wait until it is ready, print and open its URL; 0, or 1 if it ended or the wait ran out."""
    payload: dict[str, Any] = {"kind": "jupyter" if args.cmd == "notebook" else "terminal", "num_gpus": args.gpus}
    if args.time_limit is not None:
        payload["time_limit"] = int(args.time_limit)
    if args.image:
        payload["image"] = args.image
    status = client.start_session(payload)
    job_id = status["job"]
    out.write(f"session {job_id} submitted: {client.settings.url}/jobs/{job_id}/\n")
    out.flush()
    deadline = time.monotonic() + args.wait
    while status["phase"] != "ready":
        if status["phase"] == "ended":
            raise ApiError(f"session {job_id} ended before it was ready: {status.get('ended_reason') or status['state']}")
        if time.monotonic() > deadline:
            raise ApiError(f"session {job_id} is not ready after {args.wait:g} s (phase {status['phase']}); "
                           f"see {client.settings.url}/jobs/{job_id}/")
        sleep(POLL_S)
        status = client.session_status(job_id)
    url = f"{client.settings.url}{status['url']}"
    out.write(json.dumps({**status, "url": url}) + "\n" if args.json else f"{url}\n")
    if not args.no_open:
        open_url(url)
    return 0
