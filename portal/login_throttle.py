"""Login rate limiting: failed password logins are counted per address and username.

Two counters live in the ``login-throttle`` cache (Redis in production, so
every web process shares them):

* per client address and username: ``LOGIN_MAX_FAILURES`` failures lock that
  username out *from that address* for ``LOGIN_LOCKOUT_SECONDS``;
* per client address: ``LOGIN_MAX_FAILURES_PER_IP`` failures (any usernames)
  lock the address out, against password spraying.

A counter's window starts at its first failure and is not extended by later
ones, so a lockout ends ``LOGIN_LOCKOUT_SECONDS`` after the first counted
failure. A successful login clears the address-and-username counter. While
locked out, a login is refused before the password is checked, so a correct
guess during the lockout does not get in either.

If the cache cannot be reached the login proceeds (logged): an outage of
Redis must not lock every user out.

The client address is ``REMOTE_ADDR``; behind a reverse proxy, configure it to
pass the real address (see docs/operations.md).

Kept rather than django-axes: axes applies one failure limit to every lockout
parameter set, while this throttle needs two (per address and username, and a
higher one per address against spraying), and its cache handler raises when
Redis is down where this one lets the login proceed.
"""

from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass

from django.conf import settings
from django.contrib.auth.signals import user_logged_in, user_login_failed
from django.core.cache import caches
from django.dispatch import receiver
from django.http import HttpRequest

log = logging.getLogger(__name__)

CACHE_ALIAS = "login-throttle"
KEY_PREFIX = "gpusched:login-failures:"


@dataclass(frozen=True, slots=True)
class Lockout:
    """Why a login is refused now, and for how long at most."""

    scope: str  # "user" (this username from this address) or "address"
    retry_after: int  # seconds

    @property
    def message(self) -> str:
        minutes = max(1, (self.retry_after + 59) // 60)
        what = "for this account from your address" if self.scope == "user" else "from your address"
        return f"Too many failed login attempts {what}. Try again in {minutes} minute{'s' if minutes > 1 else ''}."


def client_address(request: HttpRequest | None) -> str:
    return (request.META.get("REMOTE_ADDR") or "unknown") if request is not None else "unknown"


def _keys(address: str, username: str) -> tuple[str, str]:
    # Usernames are user input: hash them so any text makes a valid, bounded cache key.
    digest = hashlib.sha256(f"{address}\0{username.casefold()}".encode()).hexdigest()
    return f"{KEY_PREFIX}user:{digest}", f"{KEY_PREFIX}addr:{hashlib.sha256(address.encode()).hexdigest()}"


def lockout(request: HttpRequest | None, username: str) -> Lockout | None:
    """The lockout in force for ``username`` from the request's address, or None."""
    user_key, addr_key = _keys(client_address(request), username or "")
    window = settings.LOGIN_LOCKOUT_SECONDS
    try:
        cache = caches[CACHE_ALIAS]
        counts = cache.get_many([user_key, addr_key])
        if counts.get(addr_key, 0) >= settings.LOGIN_MAX_FAILURES_PER_IP:
            return Lockout("address", _ttl(cache, addr_key, window))
        if counts.get(user_key, 0) >= settings.LOGIN_MAX_FAILURES:
            return Lockout("user", _ttl(cache, user_key, window))
    except Exception:  # the cache is down: let the login proceed
        log.warning("login throttle unavailable; login not rate-limited", exc_info=True)
    return None


def _ttl(cache, key: str, default: int) -> int:  # noqa: ANN001 - a Django cache
    """Seconds left on ``key`` when the backend can tell (Redis), else the whole window."""
    client = getattr(cache, "_cache", None)
    get_client = getattr(client, "get_client", None)
    if get_client is None:
        return default
    ttl = get_client(key).ttl(cache.make_and_validate_key(key))
    return int(ttl) if ttl and ttl > 0 else default


def record_failure(request: HttpRequest | None, username: str) -> None:
    """Count one failed login for ``username`` from the request's address."""
    window = settings.LOGIN_LOCKOUT_SECONDS
    try:
        cache = caches[CACHE_ALIAS]
        for key in _keys(client_address(request), username or ""):
            cache.add(key, 0, timeout=window)  # starts the window; a no-op if it is running
            try:
                cache.incr(key)
            except ValueError:  # expired between add and incr
                cache.set(key, 1, timeout=window)
    except Exception:
        log.warning("login throttle unavailable; failure not counted", exc_info=True)


def clear(request: HttpRequest | None, username: str) -> None:
    """Forget the failures of ``username`` from the request's address (after a successful login)."""
    try:
        caches[CACHE_ALIAS].delete(_keys(client_address(request), username or "")[0])
    except Exception:
        log.warning("login throttle unavailable; counter not cleared", exc_info=True)


@receiver(user_login_failed, dispatch_uid="gpusched-login-failed")
def _on_failure(sender, credentials: dict, request: HttpRequest | None = None, **kwargs: object) -> None:  # noqa: ANN001
    record_failure(request, str(credentials.get("username", "")))


@receiver(user_logged_in, dispatch_uid="gpusched-logged-in")
def _on_login(sender, request: HttpRequest | None, user, **kwargs: object) -> None:  # noqa: ANN001
    clear(request, user.get_username())
