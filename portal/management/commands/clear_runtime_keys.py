"""Remove the Redis keys of a stopped stack (see portal.runtime_keys); scripts/up.sh runs it on stop."""

from __future__ import annotations

import redis
from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from portal import runtime_keys


class Command(BaseCommand):
    help = "Delete the scheduling loop's, /metrics' and the Channels layer's keys from Redis (run when the stack has stopped)."

    def handle(self, *args: object, **options: object) -> None:
        layer = settings.CHANNEL_LAYERS["default"]
        channel_host = layer.get("CONFIG", {}).get("hosts", [settings.REDIS_URL])[0]
        channel_url = channel_host.get("address") if isinstance(channel_host, dict) else channel_host
        prefix = layer.get("CONFIG", {}).get("prefix", "asgi")
        try:
            deleted = runtime_keys.clear(redis.Redis.from_url(settings.REDIS_URL), runtime_keys.RUNTIME_PATTERNS)
            if isinstance(channel_url, str) and layer["BACKEND"].startswith("channels_redis"):
                deleted += runtime_keys.clear(redis.Redis.from_url(channel_url), (f"{prefix}:*",))
        except redis.RedisError as exc:
            raise CommandError(f"Redis: {exc}") from exc
        self.stdout.write(f"{deleted} runtime key(s) removed from Redis")
