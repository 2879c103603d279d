"""Podium's one settings module.

Every setting comes from an environment variable and falls back to the embedded
default (SQLite, the filesystem broker, files under ./var), so ``make run`` needs no
database or broker server. Secrets may also be read from ``NAME_FILE``.
"""

from __future__ import annotations

import os
import platform
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import django_stubs_ext
import environ

from portal.core import task_names as _task_names
from portal.core.checks import DEVELOPMENT_SECRET_KEY
from portal.notifications.mailconfig import email_url_settings

# Django's generic classes (ModelAdmin[Model], QuerySet[Model], ...) take their type
# parameters at run time too, as the type checker reads them.
django_stubs_ext.monkeypatch()

BASE_DIR = Path(__file__).resolve().parent.parent

env = environ.Env()


def env_secret(name: str, default: str) -> str:
    """Read a secret from NAME, or from the file named by NAME_FILE."""
    path = os.environ.get(f"{name}_FILE")
    if path:
        return Path(path).read_text().strip()
    return str(env.str(name, default=default))


# Where sources, logs, cohorts, staged runs and (by default) the database live.
PODIUM_DATA_DIR = Path(env.str("PODIUM_DATA_DIR", default=str(BASE_DIR / "var"))).resolve()

# Production is any process not marked local. `make run` marks itself with PODIUM_LOCAL=1;
# pytest marks every test run, and the workers its tests start, with its own PYTEST_VERSION.
# In production (DEBUG off, not local) the web server refuses to start on the public
# development key or on ALLOWED_HOSTS=* (portal/core/checks.py).
PODIUM_LOCAL = env.bool("PODIUM_LOCAL", default=False) or "PYTEST_VERSION" in os.environ
SECRET_KEY = env_secret("SECRET_KEY", DEVELOPMENT_SECRET_KEY)
DEBUG = env.bool("DEBUG", default=False)
ALLOWED_HOSTS = env.list("ALLOWED_HOSTS", default=["localhost", "127.0.0.1", "[::1]", "testserver"])
CSRF_TRUSTED_ORIGINS = env.list("CSRF_TRUSTED_ORIGINS", default=[])

# PODIUM_HTTPS=1 (compose.yaml): behind a TLS-terminating proxy that sets X-Forwarded-Proto
# and overwrites any a client sent. Plain HTTP is redirected, browsers are told to use only
# HTTPS for a year, and the session and CSRF cookies never travel over plain HTTP. Off by
# default: `make run` serves plain HTTP on localhost.
PODIUM_HTTPS = env.bool("PODIUM_HTTPS", default=False)
if PODIUM_HTTPS:
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    SECURE_SSL_REDIRECT = True
    SECURE_HSTS_SECONDS = 365 * 24 * 3600
    SECURE_HSTS_INCLUDE_SUBDOMAINS = True
    SESSION_COOKIE_SECURE = True
    CSRF_COOKIE_SECURE = True
# W021 asks for HSTS preloading, which only the owner of a whole registered domain can
# request (hstspreload.org takes apex domains only, and binds every subdomain for months);
# a contest portal usually runs on a subdomain of someone else's domain, so it is not
# Podium's to send.
SILENCED_SYSTEM_CHECKS = ["security.W021"]

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "whitenoise.runserver_nostatic",
    "django.contrib.staticfiles",
    "allauth",
    "allauth.account",
    "rest_framework",
    "drf_spectacular",
    "portal.contests",
    "portal.environments",
    "portal.teams",
    "portal.submissions",
    "portal.audit",
    "portal.hosts",
    "portal.notifications",
    "portal.campaigns",
    "portal.standings",
    "portal.estimation",
    "portal.accounts",
    "portal.web",
    "portal.api",
    "scoring",
]

MIDDLEWARE = [
    # First: stops the web server from starting on development-only settings in production.
    "portal.core.checks.refuse_insecure_production",
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "allauth.account.middleware.AccountMiddleware",
    # Sets the device cookie that a successful sign-in issued (portal/core/login_limits.py).
    "portal.core.login_limits.DeviceCookieMiddleware",
]

ROOT_URLCONF = "portal.urls"
WSGI_APPLICATION = "portal.wsgi.application"

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
            ],
        },
    },
]

_default_db = f"sqlite:///{PODIUM_DATA_DIR / 'podium.sqlite3'}"
DATABASES = {"default": env.db("DATABASE_URL", default=_default_db)}
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # IMMEDIATE transactions take the write lock up front, so concurrent charges
    # serialize instead of failing on a lock upgrade.
    DATABASES["default"].setdefault("OPTIONS", {}).update(
        {"transaction_mode": "IMMEDIATE", "timeout": 30, "init_command": "PRAGMA journal_mode=WAL;"}
    )
    DATABASES["default"]["TEST"] = {"NAME": str(PODIUM_DATA_DIR / "test.sqlite3")}
else:
    # Each web thread and worker keeps its connection between requests (checked before
    # reuse): opening one costs a PostgreSQL sign-in, several times a page's own queries.
    DATABASES["default"]["CONN_MAX_AGE"] = env.int("PODIUM_DB_CONN_MAX_AGE", default=300)
    DATABASES["default"]["CONN_HEALTH_CHECKS"] = True
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTHENTICATION_BACKENDS = [
    "django.contrib.auth.backends.ModelBackend",
    "allauth.account.auth_backends.AuthenticationBackend",
]
ACCOUNT_LOGIN_METHODS = {"username", "email"}
ACCOUNT_SIGNUP_FIELDS = ["username*", "email*", "password1*", "password2*"]
# One person, one account's attempts: an address must be verified before the first
# upload (environment or submission; the services refuse with ``email_not_verified``).
# Staff signing in to the admin (Django's own login) are not held up by it.
ACCOUNT_EMAIL_VERIFICATION = "mandatory"
ACCOUNT_LOGIN_ON_EMAIL_CONFIRMATION = True
LOGIN_REDIRECT_URL = "/"
ACCOUNT_LOGOUT_REDIRECT_URL = "/"
# Failed sign-ins, counted in one place for the browser form, the admin's login and
# POST /api/v1/tokens/ (portal/core/login_limits.py, through allauth's adapter): at most 20 a
# minute from one client address, and 5 in 5 minutes at one account (its username and email
# addresses count together), counted apart for each known device of the account (one that
# presents the device cookie or string a sign-in issued) and for all its other clients
# together. Past either, even the right password is refused until the oldest counted
# failure leaves its window; a right password takes its own attempt back. The counts live
# in the default cache (CACHES below). In allauth's syntax, comma-separated limits of
# "<count>/<window>/<ip|key>"; PODIUM_LOGIN_FAILURE_LIMITS overrides them.
ACCOUNT_ADAPTER = "portal.core.login_limits.PodiumAccountAdapter"
ACCOUNT_RATE_LIMITS = {
    "login_failed": env.str("PODIUM_LOGIN_FAILURE_LIMITS", default="20/m/ip,5/5m/key"),
}
# How many reverse proxies of the deployment's own stand before the web server, each
# appending to X-Forwarded-For. 0 (no proxy): the client address is REMOTE_ADDR and the
# header, which anyone can send, is ignored; n: the n-th address from the right. The failed
# sign-in limits (allauth) and the API throttles (DRF) read the address the same way.
PODIUM_TRUSTED_PROXIES = env.int("PODIUM_TRUSTED_PROXIES", default=0)
ALLAUTH_TRUSTED_PROXY_COUNT = PODIUM_TRUSTED_PROXIES
# Mail (verification links, password resets): printed on the console unless an SMTP
# server is configured (EMAIL_BACKEND=django.core.mail.backends.smtp.EmailBackend and
# EMAIL_HOST...), so `make run` shows the verification link in its output.
EMAIL_BACKEND = env.str("EMAIL_BACKEND", default="django.core.mail.backends.console.EmailBackend")
EMAIL_HOST = env.str("EMAIL_HOST", default="localhost")
EMAIL_PORT = env.int("EMAIL_PORT", default=25)
EMAIL_HOST_USER = env.str("EMAIL_HOST_USER", default="")
EMAIL_HOST_PASSWORD = env_secret("EMAIL_HOST_PASSWORD", "")
EMAIL_USE_TLS = env.bool("EMAIL_USE_TLS", default=False)
# Seconds an SMTP connection may hang: verdict mail is sent by the scoring worker.
EMAIL_TIMEOUT = env.float("EMAIL_TIMEOUT", default=10.0)
# EMAIL_URL (or EMAIL_URL_FILE), e.g. smtp://user:password@host:587/?tls=True, sets all of
# the above at once and overrides them (portal/notifications/mailconfig.py). Not kept as a
# setting of its own: it holds the password.
if email_url := env_secret("EMAIL_URL", ""):
    globals().update(email_url_settings(email_url))
# Where staff mail links point (scheme and host, no path); empty: links are site-relative.
PODIUM_SITE_URL = env.str("PODIUM_SITE_URL", default="")
DEFAULT_FROM_EMAIL = env.str("DEFAULT_FROM_EMAIL", default="Podium <podium@localhost>")

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "/static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = PODIUM_DATA_DIR / "staticfiles"
STATIC_ROOT.mkdir(parents=True, exist_ok=True)
WHITENOISE_USE_FINDERS = True

# Uploads always stream to disk, never into memory.
FILE_UPLOAD_MAX_MEMORY_SIZE = 0
DATA_UPLOAD_MAX_MEMORY_SIZE = 10 * 1024 * 1024
FILE_UPLOAD_TEMP_DIR = str(PODIUM_DATA_DIR / "uploads")
Path(FILE_UPLOAD_TEMP_DIR).mkdir(parents=True, exist_ok=True)
# Every multipart body passes portal.contests.uploads.BoundedUploadHandler first: each upload
# route's size bounds hold before a byte is stored, and other routes store no file part at all.
FILE_UPLOAD_HANDLERS = [
    "portal.contests.uploads.BoundedUploadHandler",
    "django.core.files.uploadhandler.MemoryFileUploadHandler",
    "django.core.files.uploadhandler.TemporaryFileUploadHandler",
]

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "portal.api.auth.ApiTokenAuthentication",
        "portal.api.auth.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "EXCEPTION_HANDLER": "portal.api.errors.exception_handler",
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "DEFAULT_PAGINATION_CLASS": "portal.api.common.PagePagination",
    "PAGE_SIZE": 50,
    # Per client address for token requests, per user for uploads (environments, submissions).
    "NUM_PROXIES": PODIUM_TRUSTED_PROXIES,
    "DEFAULT_THROTTLE_RATES": {
        "tokens": env.str("PODIUM_THROTTLE_TOKENS", default="20/min"),
        "uploads": env.str("PODIUM_THROTTLE_UPLOADS", default="30/hour"),
        "checks": env.str("PODIUM_THROTTLE_CHECKS", default="120/hour"),
    },
}
SPECTACULAR_SETTINGS = {
    "TITLE": "Podium API",
    "VERSION": "1.0.0",
    # Choice sets whose fields share a name (metered estimation's with the others'), named.
    "ENUM_NAME_OVERRIDES": {
        "EstimationEntryStatusEnum": "portal.estimation.models.Entry.STATUSES",
        "EstimationSuiteStatusEnum": "portal.estimation.models.Suite.STATUSES",
        "EstimationSuiteRoleEnum": "portal.estimation.models.Suite.ROLES",
        "RoleEnum": "portal.campaigns.models.RoundEntry.ROLES",
    },
}

# Celery: the embedded filesystem broker unless CELERY_BROKER_URL names Redis.
CELERY_BROKER_URL = env.str("CELERY_BROKER_URL", default="filesystem://")
CELERY_BROKER_TRANSPORT_OPTIONS: dict[str, object] = {}
if CELERY_BROKER_URL.startswith("filesystem://"):
    _broker_dir = Path(env.str("PODIUM_BROKER_DIR", default=str(PODIUM_DATA_DIR / "broker")))
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        "data_folder_in": str(_broker_dir / "out"),
        "data_folder_out": str(_broker_dir / "out"),
        "processed_folder": str(_broker_dir / "processed"),
        "control_folder": str(_broker_dir / "control"),
        "store_processed": False,
    }
    for _folder in ("out", "processed", "control"):
        (_broker_dir / _folder).mkdir(parents=True, exist_ok=True)
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_ROUTES = _task_names.ROUTES  # score_next and run_round: to their class's queue
CELERY_BEAT_SCHEDULE = _task_names.BEAT
CELERY_TASK_ALWAYS_EAGER = False

# The default cache holds what every process must count together: the failed sign-in
# limits (allauth keeps them in "default") and the API throttles; pages cache fragments in
# it too. With Redis it is Redis: PODIUM_CACHE_URL, by default the broker's server at the
# next database number, never the broker's own (clearing a Django cache flushes its whole
# database). Without Redis the broker is the filesystem one, so every process already shares
# the data folder: the cache is files under it (portal/core/file_cache.py, atomic add for the
# counters' locks), needing no table and costing pages no queries.
PODIUM_CACHE_URL = env.str("PODIUM_CACHE_URL", default="")
if not PODIUM_CACHE_URL and CELERY_BROKER_URL.startswith(("redis://", "rediss://")):
    _broker = urlsplit(CELERY_BROKER_URL)
    _cache_db = (int(_broker.path.strip("/") or 0) + 1) % 16
    PODIUM_CACHE_URL = urlunsplit(_broker._replace(path=f"/{_cache_db}"))
if PODIUM_CACHE_URL:
    CACHES = {
        "default": {
            "BACKEND": "portal.core.redis_cache.RedisCache",
            "LOCATION": PODIUM_CACHE_URL,
        }
    }
else:
    CACHES = {
        "default": {
            "BACKEND": "portal.core.file_cache.SharedFileCache",
            "LOCATION": str(PODIUM_DATA_DIR / "cache"),
            "OPTIONS": {"MAX_ENTRIES": 20_000},
        }
    }

# Sessions are read from the cache and written through to the database, so a signed-in
# page costs no session query while the cache holds it (and loses nothing when it does not).
SESSION_ENGINE = "django.contrib.sessions.backends.cached_db"

# The worker side.
PODIUM_DOCKER_PLATFORM = env.str("PODIUM_DOCKER_PLATFORM", default="")
# A container registry (CNCF Distribution) as "host:port" ("http://host:port" for one
# without TLS off loopback; loopback is plain HTTP): the build host pushes each submission
# image there, and a scoring host pulls it by digest, refuses any other content and
# removes it after the run (scoring/images/registry.py). "" (the default): one engine builds and
# scores, and images never leave it.
PODIUM_REGISTRY = env.str("PODIUM_REGISTRY", default="")
PODIUM_RUN_UID = env.int("PODIUM_RUN_UID", default=65534)
# The supervisor's own uid in the scored container: never the entrant's, never root, so
# the kernel refuses every renice, ionice, prlimit or sched_set* aimed at it.
PODIUM_SUPERVISOR_UID = env.int("PODIUM_SUPERVISOR_UID", default=65533)
PODIUM_SUPERVISOR = Path(
    env.str("PODIUM_SUPERVISOR", default=str(BASE_DIR / "scoring" / "supervisor" / "supervise"))
)
PODIUM_LOG_CAP_BYTES = env.int("PODIUM_LOG_CAP_BYTES", default=4 * 1024 * 1024)
# -1000 on engines that may set it (rootful): the OOM killer then never picks the supervisor.
PODIUM_RUN_OOM_SCORE_ADJ = env.int("PODIUM_RUN_OOM_SCORE_ADJ", default=None)
# The warm start's byte budget (docs/rules.md, "The warm start"); unset: the runner's
# default (scoring/run/prewarm.py), 0 turns it off. Never more than half a run's memory.
PODIUM_PREWARM_BYTES = env.int("PODIUM_PREWARM_BYTES", default=None)
PODIUM_STARTER_BASE_IMAGE = env.str(
    "PODIUM_STARTER_BASE_IMAGE", default="localhost/podium/python:bookworm"
)

# The build sandbox (scoring/build/buildnet.py, scoring/build/buildbox.py). Every build container
# (Dockerfile RUN steps, build.sh) joins only this bridge network; host firewall rules
# scoped to its bridge keep builds off the host, private, link-local, CGNAT, multicast
# and reserved ranges. `manage.py build_network --apply` installs them; a build waits
# (uncharged) while `--check` finds any rule missing.
PODIUM_BUILD_NETWORK = env.str("PODIUM_BUILD_NETWORK", default="podium-build")
PODIUM_BUILD_BRIDGE = env.str("PODIUM_BUILD_BRIDGE", default="podium-build0")
PODIUM_BUILD_SUBNET = env.str("PODIUM_BUILD_SUBNET", default="172.29.254.0/24")
# 0: the MTU of the host's default-route interface.
PODIUM_BUILD_MTU = env.int("PODIUM_BUILD_MTU", default=0)
# What builds may reach even inside a blocked range: comma-separated CIDRs ("203.0.113.0/28")
# or address:port pairs ("203.0.113.80:443", "[2001:db8::1]:3128"), TCP for the pairs.
PODIUM_BUILD_EGRESS_ALLOW = env.str("PODIUM_BUILD_EGRESS_ALLOW", default="")
# Resolvers builds may send DNS to; "" reads the host's resolv.conf, as the engine does.
PODIUM_BUILD_DNS = env.str("PODIUM_BUILD_DNS", default="")
# A build that finds the rules missing waits this long before it looks again.
PODIUM_BUILD_NETWORK_WAIT_S = env.int("PODIUM_BUILD_NETWORK_WAIT_S", default=60)
# The benchmark page calls the policy unverified when no build host checked it this recently.
PODIUM_BUILD_NETWORK_STALE_S = env.int("PODIUM_BUILD_NETWORK_STALE_S", default=3600)
# Bounds of every build container. Writes to a container's own layer are capped at the
# benchmark's image cap (max_image_bytes); the PID and CPU bounds are set on a cgroup
# made for each build under PODIUM_BUILD_CGROUP_PARENT (cgroupfs driver, v1 or v2).
PODIUM_BUILD_MEMORY_BYTES = env.int("PODIUM_BUILD_MEMORY_BYTES", default=8 << 30)
PODIUM_BUILD_PIDS_LIMIT = env.int("PODIUM_BUILD_PIDS_LIMIT", default=1024)
PODIUM_BUILD_CPUS = env.float("PODIUM_BUILD_CPUS", default=max(1.0, (os.cpu_count() or 2) / 2))
PODIUM_BUILD_CGROUP_PARENT = env.str("PODIUM_BUILD_CGROUP_PARENT", default="podium-build")
# CPUs of their own for scored runs (portal/core/cpus.py): a CPU list ("1", "2-3"), "auto" (the
# last half of the CPUs on a machine of 4 or more, else none) or "shared". Every other
# Podium process (web, workers, beat, build containers) pins itself to the rest at start.
PODIUM_SCORING_CPUS = env.str("PODIUM_SCORING_CPUS", default="auto")

# The scoring fleet (portal/hosts, scoring/host/hosts.py). A worker that consumes a scoring queue
# registers its host under PODIUM_HOST_NAME, for benchmarks of PODIUM_HARDWARE_CLASS (a
# benchmark's hardware_class), with its machine's facts, then heartbeats every
# PODIUM_HOST_HEARTBEAT_S; a host whose last heartbeat is older than PODIUM_HOST_STALE_S
# is offline. "" names the host after its Docker Engine, which every worker talking to
# that engine sees alike (the machine lock is the engine's own in any case, see
# scoring/host/machine.py). A scoring worker takes no work until its host has registered and
# finished its first calibration, for at most PODIUM_HOST_READY_WAIT_S (then it takes
# work anyway, and a run waits for the machine as for any other holder).
PODIUM_HOST_NAME = env.str("PODIUM_HOST_NAME", default="")
PODIUM_HARDWARE_CLASS = env.str("PODIUM_HARDWARE_CLASS", default=f"cpu-{platform.machine()}")
PODIUM_HOST_HEARTBEAT_S = env.int("PODIUM_HOST_HEARTBEAT_S", default=30)
PODIUM_HOST_STALE_S = env.int("PODIUM_HOST_STALE_S", default=90)
PODIUM_HOST_READY_WAIT_S = env.float("PODIUM_HOST_READY_WAIT_S", default=900.0)
# Calibration (scoring/run/calibration.py): each host runs a fixed workload, timed as a scored
# run, when its worker starts and again before claiming a run once PODIUM_CALIBRATE_EVERY_RUNS
# runs or PODIUM_CALIBRATE_EVERY_S seconds passed (0: that rule off). A median more than
# PODIUM_CALIBRATION_DRIFT_PCT off its class's reference drains the host. The noise band
# published per class comes from its latest PODIUM_NOISE_BAND_CALIBRATIONS good ones.
PODIUM_CALIBRATION = env.bool("PODIUM_CALIBRATION", default=True)
PODIUM_CALIBRATION_WORKLOAD = Path(
    env.str(
        "PODIUM_CALIBRATION_WORKLOAD",
        default=str(BASE_DIR / "scoring" / "calibrate" / "calibrate"),
    )
)
PODIUM_CALIBRATION_IMAGE = env.str("PODIUM_CALIBRATION_IMAGE", default="localhost/podium/busybox:1")
PODIUM_CALIBRATION_REPETITIONS = env.int("PODIUM_CALIBRATION_REPETITIONS", default=7)
PODIUM_CALIBRATE_EVERY_RUNS = env.int("PODIUM_CALIBRATE_EVERY_RUNS", default=50)
PODIUM_CALIBRATE_EVERY_S = env.int("PODIUM_CALIBRATE_EVERY_S", default=6 * 3600)
PODIUM_CALIBRATION_DRIFT_PCT = env.float("PODIUM_CALIBRATION_DRIFT_PCT", default=3.0)
# A calibration whose own runs spread wider than this (± % of their median) judges nothing.
PODIUM_CALIBRATION_MAX_NOISE_PCT = env.float("PODIUM_CALIBRATION_MAX_NOISE_PCT", default=3.0)
PODIUM_NOISE_BAND_CALIBRATIONS = env.int("PODIUM_NOISE_BAND_CALIBRATIONS", default=20)
# Verification before ranking (portal/contests/rules.py verification_decision): a
# verification may be slower than its official run by the benchmark's verify_tolerance_pct
# or the reference kit's measured spread on the class and cohort size (where none was
# measured yet: PODIUM_VERIFY_NOISE_FACTOR times the class's noise band), whichever is
# larger, and is
# judged on the fastest of up to PODIUM_VERIFY_MAX_RUNS verification runs (a timing miss
# is re-measured on a fresh permutation; a correctness failure rejects at once). Whatever
# the percentage, it may be PODIUM_VERIFY_SLACK_MS slower: a fresh sandboxed process
# tree's start jitters by tens of milliseconds whatever the run's length (measured: an
# honest 0.42 s starter-kit run verified at 0.47 s three times in a row on a 2-core host).
PODIUM_VERIFY_SLACK_MS = env.int("PODIUM_VERIFY_SLACK_MS", default=100)
PODIUM_VERIFY_NOISE_FACTOR = env.float("PODIUM_VERIFY_NOISE_FACTOR", default=3.0)
PODIUM_VERIFY_MAX_RUNS = env.int("PODIUM_VERIFY_MAX_RUNS", default=3)
# The reference kit's spread (scoring/run/reference.py): PODIUM_REFERENCE_RUNS counted runs
# of a benchmark's reference kit on its official cohort (after one warm-up run), measured
# again by a scoring host of the class, before a claim, once the latest measurement of
# that class and cohort size is PODIUM_REFERENCE_EVERY_S old (0: only when asked for).
PODIUM_REFERENCE_RUNS = env.int("PODIUM_REFERENCE_RUNS", default=10)
PODIUM_REFERENCE_EVERY_S = env.int("PODIUM_REFERENCE_EVERY_S", default=24 * 3600)
# Tests only (never from the environment): a CPU quota (and the lowest CPU weight) for the
# calibration's container, to slow the real workload on purpose. None: as a scored run.
PODIUM_CALIBRATION_CPUS: float | None = None

# The machine lock and the health gates (scoring/host/machine.py, scoring/host/gates.py): one lock
# per scoring host (PODIUM_HOST_NAME above).
# A wake-up taken by a draining or retired host goes back to its queue after this long.
PODIUM_DRAIN_REQUEUE_S = env.float("PODIUM_DRAIN_REQUEUE_S", default=10.0)
# A score pauses every other container on its host; these (comma-separated container
# names: the deployment's own PostgreSQL, Redis, web and workers) it never pauses.
PODIUM_FREEZE_EXEMPT = env.list("PODIUM_FREEZE_EXEMPT", default=[])
# A dead scoring worker's lock and run are taken back this long after its last heartbeat.
PODIUM_LEASE_S = env.int("PODIUM_LEASE_S", default=60)
# How long a score waits for another score's lock before rescheduling itself.
PODIUM_LOCK_WAIT_S = env.int("PODIUM_LOCK_WAIT_S", default=1200)
# A failing gate retries after 5 minutes, doubling up to an hour.
PODIUM_GATE_RETRY_S = env.int("PODIUM_GATE_RETRY_S", default=300)
PODIUM_GATE_RETRY_MAX_S = env.int("PODIUM_GATE_RETRY_MAX_S", default=3600)
# Pinned software: "" records the version without requiring one.
PODIUM_PIN_ENGINE_VERSION = env.str("PODIUM_PIN_ENGINE_VERSION", default="")
PODIUM_PIN_KERNEL = env.str("PODIUM_PIN_KERNEL", default="")
PODIUM_PIN_SUPERVISOR_SHA256 = env.str("PODIUM_PIN_SUPERVISOR_SHA256", default="")
PODIUM_PIN_GPU_DRIVER = env.str("PODIUM_PIN_GPU_DRIVER", default="")
PODIUM_PIN_CUDA = env.str("PODIUM_PIN_CUDA", default="")
PODIUM_GATE_MIN_MEMORY_BYTES = env.int("PODIUM_GATE_MIN_MEMORY_BYTES", default=2 << 30)
PODIUM_GATE_MIN_DISK_BYTES = env.int("PODIUM_GATE_MIN_DISK_BYTES", default=5 << 30)
# CPUs' worth of busy time allowed over a short sample, taken after builds are frozen.
PODIUM_GATE_CPU_BUSY_MAX = env.float("PODIUM_GATE_CPU_BUSY_MAX", default=1.5)
PODIUM_GATE_CPU_SAMPLE_S = env.float("PODIUM_GATE_CPU_SAMPLE_S", default=0.5)
# The host's own speed, probed off the clock before and after each scored run
# (scoring/host/speed.py); a run during which it changed beyond its class's noise band is
# marked and its submission rescored free (portal/hosts/speed.py). Off: not probed.
PODIUM_HOST_SPEED_PROBE = env.bool("PODIUM_HOST_SPEED_PROBE", default=True)
# GPUs (scoring/host/gpus.py): a host of a hardware class with GPUs (portal/hosts HardwareClass)
# gives a scored container exactly PODIUM_GPU_DEVICES (indices or UUIDs, as nvidia-smi -L
# shows them) and gates every run on them through NVML: no compute process, idle over
# PODIUM_GPU_UTIL_SAMPLES samples, memory, temperature, persistence, ECC, XID, and the
# class's pinned driver and CUDA versions (else PODIUM_PIN_GPU_DRIVER / PODIUM_PIN_CUDA).
# PODIUM_GPU_GATES turns the gates on for a class without GPUs. PODIUM_GPU_CDI names
# the devices by CDI (Docker Engine 25 and later) instead of NVIDIA device requests.
PODIUM_GPU_DEVICES = env.list("PODIUM_GPU_DEVICES", default=[])
PODIUM_GPU_GATES = env.bool("PODIUM_GPU_GATES", default=False)
PODIUM_GPU_CDI = env.bool("PODIUM_GPU_CDI", default=False)
PODIUM_GPU_UTIL_SAMPLES = env.int("PODIUM_GPU_UTIL_SAMPLES", default=5)
PODIUM_GPU_UTIL_INTERVAL_S = env.float("PODIUM_GPU_UTIL_INTERVAL_S", default=0.1)
PODIUM_GPU_QUERY_COMMAND = env.str("PODIUM_GPU_QUERY_COMMAND", default="nvidia-smi")
PODIUM_GPU_MAX_UTIL_PERCENT = env.int("PODIUM_GPU_MAX_UTIL_PERCENT", default=5)
PODIUM_GPU_MAX_MEMORY_MIB = env.int("PODIUM_GPU_MAX_MEMORY_MIB", default=1024)
PODIUM_GPU_MAX_TEMP_C = env.int("PODIUM_GPU_MAX_TEMP_C", default=60)
# The GPU meter (scoring/run/gpumeter.py): on a host whose scored container gets GPUs, the
# worker samples each of them through NVML (utilization, memory, power, energy counter)
# every PODIUM_GPU_SAMPLE_MS milliseconds (at least 10) from just before the container
# starts until it exited; the run's energy per image and mean GPU utilization are
# published with it. 100 ms resolves a run's phases and costs the run nothing measurable.
PODIUM_GPU_SAMPLE_MS = env.int("PODIUM_GPU_SAMPLE_MS", default=100)
if CELERY_BROKER_URL.startswith(("redis://", "rediss://")):
    # Redis redelivers a message not acknowledged within this time; a gate retry waits
    # up to PODIUM_GATE_RETRY_MAX_S, so this must be longer or the retry is duplicated.
    CELERY_BROKER_TRANSPORT_OPTIONS.setdefault(
        "visibility_timeout", env.int("PODIUM_BROKER_VISIBILITY_S", default=3 * 3600)
    )
    # Message priorities (portal.core.jobs): a scoring worker takes official scores first,
    # then verifications, then practice. Redis keeps one list per step, 0 first.
    CELERY_BROKER_TRANSPORT_OPTIONS.update(
        {"priority_steps": list(range(3)), "sep": ":", "queue_order_strategy": "priority"}
    )

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "root": {"handlers": ["console"], "level": env.str("LOG_LEVEL", default="INFO")},
}

# Prepared verification cohorts (portal.submissions.pool, scoring.cohort.verifysets): each
# official cohort that verification may need keeps this many sets ready, made on the
# builds side; a set preparing for longer than PODIUM_VERIFY_PREPARE_STALE_S is dropped
# (its worker died) and made again.
PODIUM_VERIFY_POOL = env.int("PODIUM_VERIFY_POOL", default=2)
PODIUM_VERIFY_PREPARE_STALE_S = env.int("PODIUM_VERIFY_PREPARE_STALE_S", default=3600)

# The most bytes of an entrant's write-up (a PDF tied to one graded submission).
PODIUM_WRITEUP_MAX_BYTES = env.int("PODIUM_WRITEUP_MAX_BYTES", default=10 * 1024 * 1024)
