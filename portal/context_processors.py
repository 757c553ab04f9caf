"""Template context shared by every page."""

from __future__ import annotations

from django.http import HttpRequest

from scheduler.identity import single_user_mode


def security_mode(request: HttpRequest) -> dict[str, bool]:
    """``single_user_mode``: base.html shows a banner on every page while it is on."""
    return {"single_user_mode": single_user_mode()}
