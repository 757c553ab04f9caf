"""Django settings, read from the environment.

Variables (all optional unless noted):

* ``DEBUG``: 1/0/true/false; default false. Any other value is an error.
* ``SECRET_KEY``: required unless DEBUG is true; the same on every portal, worker and beat,
  whose tasks it seals (cluster/task_seal.py). ``SECRET_KEY_FALLBACKS``: earlier keys, still
  accepted. ``GPUSCHED_RUN_UNSEALED_TASKS`` (false): run tasks without a seal, only while
  upgrading from a release before seals (docs/operations.md).
* ``ALLOWED_HOSTS``: comma-separated; default ``localhost,127.0.0.1,[::1]``.
* ``CSRF_TRUSTED_ORIGINS``: comma-separated origins (scheme://host[:port]).
* ``DATABASE_URL``: any URL dj-database-url understands; default SQLite at
  ``var/db.sqlite3``. ``DATABASE_POOL``, ``DATABASE_POOL_MAX_SIZE`` and
  ``DATABASE_IDLE_IN_TRANSACTION_S`` (60; PostgreSQL ends a session of ours idle
  that long inside a transaction), ``DATABASE_KEEPALIVE_S`` (30; both ends probe
  a silent peer), ``DATABASE_LOCK_WAIT_S`` (0; ``scripts/serve.sh web`` sets 5: a
  request waits that long for a row another transaction holds, then gets 503,
  portal/held_rows.py): portal/database.py.
* ``REDIS_URL``: default ``redis://127.0.0.1:6379/0``; used by Celery (broker)
  and the Channels layer unless ``CELERY_BROKER_URL`` / ``CHANNEL_LAYER_URL``
  say otherwise. ``REDIS_PASSWORD_FILE``: a file holding the Redis password,
  put into ``REDIS_URL`` when the URL carries none (docs/security.md).
* ``GPUSCHED_AGENT_DEV_MODE`` (false): accept agent reports without per-node
  tokens (the shared ``GPUSCHED_AGENT_TOKEN``, or none); development only.
* ``SCHEDULER_POLICY``: the scheduling policy's registered name; default
  ``fitgpp`` (checked against the registry by ``manage.py check``).
* ``SCHEDULER_AUTORUN``: whether a submission or cancellation enqueues a
  scheduling cycle; default true.
* ``SCHEDULER_FAIR_SHARE`` (false), ``SCHEDULER_FAIR_SHARE_HALF_LIFE`` (3600), ``SCHEDULER_RECLAIM_MIN_RUNTIME``
  (1800): fair share (docs/policies.md); ``FAIR_STANDING_CACHE_SECONDS`` (10): ``gpusched share``.
* ``SCHEDULER_ROW_LOCK_WAIT`` (1): seconds a scheduling cycle waits for a row
  another transaction holds before passing over it (that job waits for a later
  cycle, the others go on; scheduler/row_locks.py); 0: wait as long as it takes.
* ``SCHEDULER_TICK_SECONDS`` (5), ``SCHEDULER_LOCK_TIMEOUT`` (60),
  ``SCHEDULER_RESUME_OVERHEAD`` (30), ``AGENT_HEARTBEAT_SECONDS`` (5),
  ``NODE_LOST_HEARTBEATS`` (3), ``GPUSCHED_AGENT_TOKEN`` (empty),
  ``GPUSCHED_AGENT_SECRET`` (empty: per-node agent tokens off): the live
  cluster; see docs/live_cluster.md and docs/operations.md.
* ``BROKER_VISIBILITY_TIMEOUT`` (10): seconds after which a message a Celery
  worker took but never acknowledged (it died) is delivered again.
* ``WORKER_STALL_SECONDS`` (30): a Celery worker that held no task while a
  message waited in its queues for this long has a stalled consumer and exits,
  to be restarted by its supervisor (cluster/worker_watchdog.py); 0: never.
* ``GPUSCHED_TRACES_DIR``: the traces folder the performance model of
  reconfigurable jobs is fitted from (default ``../shared/traces``).
* ``LOGIN_MAX_FAILURES`` (5), ``LOGIN_MAX_FAILURES_PER_IP`` (50),
  ``LOGIN_LOCKOUT_SECONDS`` (900): the login rate limit (counted in Redis).
* ``LDAP_SERVER_URI`` and the other ``LDAP_*`` variables: optional login and
  group sync through LDAP (portal/ldap_config.py, docs/security.md).
* ``API_MAX_BODY_BYTES``: largest accepted API request body; default 65536.
* ``METRICS_TOKEN``, ``METRICS_ALLOWED_IPS``: who may read ``/metrics`` (a
  bearer token; comma-separated IPs or networks); neither set: nobody.
* ``SIMULATION_MAX_UPLOAD_BYTES`` (5 MiB), ``SIMULATION_MAX_JOBS`` (20000),
  ``SIMULATION_MAX_ACTIVE_RUNS`` (2 per user), ``SIMULATION_QUEUE`` (Celery
  queue of simulation runs; default ``celery``).
* ``GPUSCHED_SINGLE_USER`` (false): single-user mode. Every job runs as the
  agents' own user and launches name nobody (``run_as`` empty); submissions
  need no POSIX identity. For a laptop without root (``scripts/up.sh``); every
  page shows a banner and the log says so at start. See docs/security.md.

A bad value raises ``ImproperlyConfigured`` naming the variable.
"""

from __future__ import annotations

import ipaddress
import re
from pathlib import Path

from django.core.exceptions import ImproperlyConfigured

from portal.database import default_database
from portal.env import (
    env_bool,
    env_float,
    env_int,
    env_list,
    env_str,
    env_url,
    read_secret_file,
    redis_url_with_password,
)
from portal.ldap_config import ldap_settings

BASE_DIR = Path(__file__).resolve().parent.parent

DEBUG = env_bool("DEBUG", default=False)

SECRET_KEY = env_str("SECRET_KEY")
if not SECRET_KEY:
    if not DEBUG:
        raise ImproperlyConfigured("SECRET_KEY is required when DEBUG is false")
    # A fixed key is acceptable only for a local debug run.
    SECRET_KEY = "insecure-debug-only-key-do-not-use-in-production"
SECRET_KEY_FALLBACKS = env_list("SECRET_KEY_FALLBACKS", [])
GPUSCHED_RUN_UNSEALED_TASKS = env_bool("GPUSCHED_RUN_UNSEALED_TASKS", default=False)

ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", ["localhost", "127.0.0.1", "[::1]"])
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS", [])
for _origin in CSRF_TRUSTED_ORIGINS:
    if not re.match(r"^https?://[^/\s]+$", _origin):
        raise ImproperlyConfigured(
            f"CSRF_TRUSTED_ORIGINS item {_origin!r} must look like https://host[:port]"
        )

INSTALLED_APPS = [
    "daphne",
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "whitenoise.runserver_nostatic",
    "django.contrib.staticfiles",
    "rest_framework",
    "django_filters",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "channels",
    "portal",
    "portal.dashboard",
    "scheduler",
    "cluster",
    "audit",
    "jobprogress",
    "gputelemetry",
    "notifications",
    "interactive",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "portal.middleware.NullInQueryMiddleware",
    "portal.middleware.ApiBodyLimitMiddleware",
    "portal.held_rows.HeldRowMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "portal.urls"
WSGI_APPLICATION = "portal.wsgi.application"
ASGI_APPLICATION = "portal.asgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "portal.context_processors.security_mode",
            ],
        },
    },
]

# --- Database -------------------------------------------------------------
# DATABASE_URL (SQLite at var/db.sqlite3 when unset); the web server's pool: portal/database.py.
DATABASES = {"default": default_database(BASE_DIR / "var" / "db.sqlite3")}

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "job-list"
LOGOUT_REDIRECT_URL = "login"
# Login rate limit (portal/login_throttle.py): failures per address and username,
# failures per address, and how long a lockout lasts.
LOGIN_MAX_FAILURES = env_int("LOGIN_MAX_FAILURES", 5, minimum=1)
LOGIN_MAX_FAILURES_PER_IP = env_int("LOGIN_MAX_FAILURES_PER_IP", 50, minimum=1)
LOGIN_LOCKOUT_SECONDS = env_int("LOGIN_LOCKOUT_SECONDS", 900, minimum=1)
# Optional LDAP login (portal/ldap_config.py): nothing changes unless LDAP_SERVER_URI is set;
# then the directory is asked after the local accounts, and the rate limit above still applies.
LDAP_PROJECT_GROUPS = False
globals().update(ldap_settings())

# --- Static files (served by WhiteNoise; nothing from a CDN) --------------
STATIC_URL = "static/"
STATIC_ROOT = BASE_DIR / "staticfiles"
STATICFILES_DIRS = [BASE_DIR / "static"]
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedStaticFilesStorage"},
}
# Serve from the app/static directories directly when collectstatic has not run.
WHITENOISE_USE_FINDERS = True
try:  # WhiteNoise warns about a missing root on every start until collectstatic runs
    STATIC_ROOT.mkdir(exist_ok=True)
except OSError:
    pass

# --- Redis, Celery, Channels ---------------------------------------------
REDIS_URL = env_url("REDIS_URL", "redis://127.0.0.1:6379/0", ("redis", "rediss", "unix"))
# The Redis password from a file (a compose secret, or scripts/up.sh's var/redis.password) when the URL
# carries none; every URL below derives from REDIS_URL unless set on its own.
REDIS_PASSWORD_FILE = env_str("REDIS_PASSWORD_FILE", "") or ""
REDIS_URL = redis_url_with_password(REDIS_URL, read_secret_file("REDIS_PASSWORD_FILE", REDIS_PASSWORD_FILE))

CELERY_BROKER_URL = env_url("CELERY_BROKER_URL", REDIS_URL, ("redis", "rediss", "unix", "memory"))
CELERY_RESULT_BACKEND = None
CELERY_TASK_DEFAULT_QUEUE = "celery"
CELERY_TASK_IGNORE_RESULT = True
CELERY_TASK_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_TIMEZONE = TIME_ZONE
# Agent reports are acknowledged only once handled (cluster/tasks.py): a message a worker took and never
# acknowledged (the worker died) goes back to the queue after this many seconds. A message that merely waited
# longer inside a busy worker is delivered twice, which every task tolerates. Kept well under twice the
# node-lost delay, so that an exit report whose worker died is handled again before the server ends that
# attempt as lost; kombu looks every tenth of it (its own default, every 100 s, would be far too slow).
BROKER_VISIBILITY_TIMEOUT = env_float("BROKER_VISIBILITY_TIMEOUT", 10.0, positive=True)
CELERY_BROKER_TRANSPORT_OPTIONS = {
    "visibility_timeout": BROKER_VISIBILITY_TIMEOUT,
    "unacked_restore_interval": max(1, round(BROKER_VISIBILITY_TIMEOUT / 10)),
    "unacked_restore_throttle": 1,
}
# A worker idle this long while its queues hold the same oldest message exits (its consumer stalled, as
# after some Redis restarts) so that its supervisor restarts it; 0 turns the watchdog off.
WORKER_STALL_SECONDS = env_float("WORKER_STALL_SECONDS", 30.0, minimum=0)

# The login rate limit's counters are shared by every web process through Redis.
CACHES = {
    "default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"},
    "login-throttle": {"BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": REDIS_URL},
}

CHANNEL_LAYER_URL = env_url("CHANNEL_LAYER_URL", REDIS_URL, ("redis", "rediss", "unix"))
# A receive waits up to 5 s in BRPOP (channels_redis), so its socket must wait longer: redis-py 8's default of
# 5 s ended every quiet live websocket after 5 s. The stuck-connection timeout stays finite.
CHANNEL_LAYER_HOST = {"address": CHANNEL_LAYER_URL, "socket_timeout": 15, "socket_connect_timeout": 5}
CHANNEL_LAYERS = {"default": {"BACKEND": "channels_redis.core.RedisChannelLayer", "CONFIG": {"hosts": [CHANNEL_LAYER_HOST]}}}

# --- Scheduler ------------------------------------------------------------
SCHEDULER_POLICY = env_str("SCHEDULER_POLICY", "fitgpp") or "fitgpp"
if not re.fullmatch(r"[a-z][a-z0-9_\-]*", SCHEDULER_POLICY):
    raise ImproperlyConfigured(f"SCHEDULER_POLICY={SCHEDULER_POLICY!r} is not a policy name")
SCHEDULER_AUTORUN = env_bool("SCHEDULER_AUTORUN", default=True)
# Fair share among projects (scheduler/fair_usage.py, docs/policies.md): off by default; the usage half-life (s);
# how long one standing (fair_standing.py) serves every viewer; a BE attempt's run (s) before its GPUs may go back.
SCHEDULER_FAIR_SHARE = env_bool("SCHEDULER_FAIR_SHARE", default=False)
SCHEDULER_FAIR_SHARE_HALF_LIFE = env_float("SCHEDULER_FAIR_SHARE_HALF_LIFE", 3600.0, positive=True)
FAIR_STANDING_CACHE_SECONDS = env_int("FAIR_STANDING_CACHE_SECONDS", 10, minimum=0)
SCHEDULER_RECLAIM_MIN_RUNTIME = env_float("SCHEDULER_RECLAIM_MIN_RUNTIME", 1800.0, minimum=0)
# Traces folder holding morphling/ (the performance model of reconfigurable jobs,
# scheduler/elastic.py); empty: ../shared/traces next to the repository.
GPUSCHED_TRACES_DIR = env_str("GPUSCHED_TRACES_DIR", "") or ""

# --- Live cluster: the scheduling loop and the node agents (docs/live_cluster.md)
# Seconds between Celery beat's safety ticks (node-lost detection, overdue
# commands re-sent, one scheduling cycle).
SCHEDULER_TICK_SECONDS = env_float("SCHEDULER_TICK_SECONDS", 5.0, positive=True)
# A cycle holding the loop's Redis lock longer than this loses it.
SCHEDULER_LOCK_TIMEOUT = env_float("SCHEDULER_LOCK_TIMEOUT", 60.0, positive=True)
# Seconds a cycle waits for a row lock held by another transaction before passing over that row.
SCHEDULER_ROW_LOCK_WAIT = env_float("SCHEDULER_ROW_LOCK_WAIT", 1.0, minimum=0)
# Seconds a resumed attempt spends restoring its checkpoint: not counted as progress.
SCHEDULER_RESUME_OVERHEAD = env_float("SCHEDULER_RESUME_OVERHEAD", 30.0, minimum=0)
# The agents' --heartbeat; a node silent for NODE_LOST_HEARTBEATS of them is NODE_LOST.
AGENT_HEARTBEAT_SECONDS = env_float("AGENT_HEARTBEAT_SECONDS", 5.0, positive=True)
NODE_LOST_HEARTBEATS = env_int("NODE_LOST_HEARTBEATS", 3, minimum=1)
# Shared secret every agent report must carry (the agents' GPUSCHED_AGENT_TOKEN); empty: not checked.
AGENT_TOKEN = env_str("GPUSCHED_AGENT_TOKEN", "") or ""
# Key of per-node agent tokens (cluster/auth.py: node N's reports must be signed with N's token, manage.py
# agent_token N; AGENT_TOKEN is not accepted); keys being rotated out stay accepted as fallbacks meanwhile.
AGENT_SECRET = env_str("GPUSCHED_AGENT_SECRET", "") or ""
AGENT_SECRET_FALLBACKS = env_list("GPUSCHED_AGENT_SECRET_FALLBACKS", [])
# Without AGENT_SECRET every report is refused, unless in this development mode (shared AGENT_TOKEN, or none).
GPUSCHED_AGENT_DEV_MODE = env_bool("GPUSCHED_AGENT_DEV_MODE", default=False)
# Single-user mode (docs/security.md): jobs run as the agents' own user; for a laptop without root.
GPUSCHED_SINGLE_USER = env_bool("GPUSCHED_SINGLE_USER", default=False)

# --- Interactive sessions (docs/sessions.md)
# Staff may open other users' sessions through the proxy (each opening is audited).
GPUSCHED_SESSION_STAFF_ACCESS = env_bool("GPUSCHED_SESSION_STAFF_ACCESS", default=False)
# Seconds a session runs when its request names no time limit.
GPUSCHED_SESSION_TIME_LIMIT = env_int("GPUSCHED_SESSION_TIME_LIMIT", 4 * 3600, minimum=60)
# The proxy's patience: connecting (and a websocket handshake), and silence within an answer.
GPUSCHED_SESSION_CONNECT_TIMEOUT = env_float("GPUSCHED_SESSION_CONNECT_TIMEOUT", 5.0, positive=True)
GPUSCHED_SESSION_READ_TIMEOUT = env_float("GPUSCHED_SESSION_READ_TIMEOUT", 60.0, positive=True)
GPUSCHED_SESSION_MAX_BODY = env_int("GPUSCHED_SESSION_MAX_BODY", 64 * 2**20, minimum=1)
# How often the telemetry agents append to their stream is read and stored (gputelemetry.drain), and on
# which Celery queue (a site with thousands of nodes may give the drains a worker of their own).
GPUSCHED_TELEMETRY_DRAIN_SECONDS = env_float("GPUSCHED_TELEMETRY_DRAIN_SECONDS", 1.0, positive=True)
TELEMETRY_QUEUE = env_str("TELEMETRY_QUEUE", "celery") or "celery"
CELERY_BEAT_SCHEDULE = {
    "scheduler-tick": {
        "task": "scheduler.tick",
        "schedule": SCHEDULER_TICK_SECONDS,
        # A tick nobody ran in time is superseded by the next one.
        "options": {"expires": SCHEDULER_TICK_SECONDS},
    },
    "telemetry-drain": {
        "task": "gputelemetry.drain",
        "schedule": GPUSCHED_TELEMETRY_DRAIN_SECONDS,
        "options": {"expires": GPUSCHED_TELEMETRY_DRAIN_SECONDS, "queue": TELEMETRY_QUEUE},
    },
}

# --- REST API -------------------------------------------------------------
API_MAX_BODY_BYTES = env_int("API_MAX_BODY_BYTES", 64 * 1024, minimum=1024)
# Forms are small too; a larger body is refused before it is parsed.
DATA_UPLOAD_MAX_MEMORY_SIZE = max(API_MAX_BODY_BYTES, 256 * 1024)

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "portal.api.authentication.ApiTokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_PARSER_CLASSES": ["portal.api.parsers.JSONParser"],
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    "DEFAULT_PAGINATION_CLASS": "portal.api.pagination.JobPagination",
    "EXCEPTION_HANDLER": "portal.api.errors.exception_handler",
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "UNAUTHENTICATED_USER": "django.contrib.auth.models.AnonymousUser",
}

SPECTACULAR_SETTINGS = {
    "TITLE": "GPU scheduler portal API",
    "DESCRIPTION": ("Submit, inspect, hold, reprioritise and cancel GPU jobs and arrays; read logs and progress; "
                    "start sessions; read quotas, usage, fair share, images, nodes; set notifications and webhooks."),
    "VERSION": "1",
    "SERVE_INCLUDE_SCHEMA": False,
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    "COMPONENT_SPLIT_REQUEST": True,
}

# --- Dashboard: live pages, /metrics, the simulation page (docs/dashboard.md)
STATICFILES_FINDERS = [
    "django.contrib.staticfiles.finders.FileSystemFinder",
    "django.contrib.staticfiles.finders.AppDirectoriesFinder",
    # plotly.js from the installed plotly package, as dashboard/vendor/plotly.min.js
    "portal.dashboard.staticfinders.PlotlyFinder",
]
# /metrics answers a request with "Authorization: Bearer <METRICS_TOKEN>" or from an
# address in METRICS_ALLOWED_IPS (comma-separated IPs or CIDR networks); with neither set, nobody.
METRICS_TOKEN = env_str("METRICS_TOKEN")
METRICS_ALLOWED_IPS = env_list("METRICS_ALLOWED_IPS", [])
for _item in METRICS_ALLOWED_IPS:
    try:
        ipaddress.ip_network(_item, strict=False)
    except ValueError:
        raise ImproperlyConfigured(f"METRICS_ALLOWED_IPS item {_item!r} is not an IP address or network") from None
# --- Notifications (notifications/): email through Django's backend, webhooks from Celery ---------
EMAIL_BACKEND = env_str("EMAIL_BACKEND", "django.core.mail.backends.smtp.EmailBackend")
EMAIL_HOST = env_str("EMAIL_HOST", "localhost")
EMAIL_PORT = env_int("EMAIL_PORT", 25, minimum=1)
EMAIL_HOST_USER = env_str("EMAIL_HOST_USER", "") or ""
EMAIL_HOST_PASSWORD = env_str("EMAIL_HOST_PASSWORD", "") or ""
EMAIL_USE_TLS = env_bool("EMAIL_USE_TLS", False)
EMAIL_TIMEOUT = 10
DEFAULT_FROM_EMAIL = env_str("DEFAULT_FROM_EMAIL", "gpusched@localhost")
# Celery queue of the notification tasks: a deployment gives them a worker of their own (celery -A portal
# worker -Q notifications) so a slow mail server or webhook never holds a worker the loop and reports need.
NOTIFICATIONS_QUEUE = env_str("NOTIFICATIONS_QUEUE", "celery") or "celery"

SIMULATION_MAX_UPLOAD_BYTES = env_int("SIMULATION_MAX_UPLOAD_BYTES", 5 * 1024 * 1024, minimum=1024)
SIMULATION_MAX_JOBS = env_int("SIMULATION_MAX_JOBS", 20000, minimum=1)
SIMULATION_MAX_ACTIVE_RUNS = env_int("SIMULATION_MAX_ACTIVE_RUNS", 2, minimum=1)
# Celery queue of simulation runs: their own worker (-Q simulations) so no long run delays a cycle.
SIMULATION_QUEUE = env_str("SIMULATION_QUEUE", "celery") or "celery"

LOG_LEVEL = (env_str("LOG_LEVEL", "INFO") or "INFO").upper()
if LOG_LEVEL not in {"DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"}:
    raise ImproperlyConfigured(f"LOG_LEVEL={LOG_LEVEL!r} is not a logging level")
LOG_ROUTINE_TASKS = env_bool("LOG_ROUTINE_TASKS", False)  # a line per heartbeat, drain, tick: cluster/task_log.py
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "root": {"handlers": ["console"], "level": LOG_LEVEL},
}

if not DEBUG:
    SESSION_COOKIE_HTTPONLY = True
    CSRF_COOKIE_HTTPONLY = False  # the API docs page reads it for session-authenticated calls
    SECURE_CONTENT_TYPE_NOSNIFF = True
