"""Settings for every environment, read from the environment (and `.env` when present).

This module is production-safe by itself (DEBUG off, SECRET_KEY required); `amuxweb.settings.production` is
its explicit name, and `amuxweb.settings.local` (manage.py's default) turns DEBUG on for a fresh clone.
The embedded default needs nothing set: SQLite under var/, a broker in a SQLite file beside it (no server).
Production sets DATABASE_URL, REDIS_URL, SECRET_KEY, FIELD_ENCRYPTION_KEY and ALLOWED_HOSTS.
"""

# Long because it is the one list of the hub's settings read from the environment (docs/configuration.md), a
# line or two each: splitting it would only scatter them.
from datetime import timedelta
from pathlib import Path

from amuxweb.env import BASE_DIR, env
from amuxweb.settings.beat import BEAT_SCHEDULE

DEBUG = env.bool("DEBUG", default=False)

# An insecure key is only acceptable for a DEBUG (local) run; production must set SECRET_KEY.
SECRET_KEY = env("SECRET_KEY", default="insecure-local-key-set-SECRET_KEY-in-production" if DEBUG else None)
if not SECRET_KEY:
    from django.core.exceptions import ImproperlyConfigured

    raise ImproperlyConfigured(
        "SECRET_KEY must be set when DEBUG is off. These are the production settings; for a local run use "
        "DJANGO_SETTINGS_MODULE=amuxweb.settings.local (manage.py's default) or set DEBUG=true."
    )

# Fernet keys (comma separated, newest first) that encrypt secrets at rest; derived from SECRET_KEY when unset.
FIELD_ENCRYPTION_KEY = env.list("FIELD_ENCRYPTION_KEY", default=[])

ALLOWED_HOSTS = env.list("ALLOWED_HOSTS", default=["127.0.0.1", "localhost"])
CSRF_TRUSTED_ORIGINS = env.list("CSRF_TRUSTED_ORIGINS", default=[])

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "rest_framework.authtoken",
    "drf_spectacular",
    "drf_spectacular_sidecar",  # Swagger UI and ReDoc served from our static files: no CDN (A4)
    "django_celery_beat",
    "axes",
    "agents",
    "threadcontext",
    "probe",
    "feishu",
    "console",
    "amuxweb",  # the project's wiring; an app only for its command (embedded_broker_prepare): no models, no URLs
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    # Static files straight from the WSGI app: gunicorn serves none, and no CDN or proxy is assumed (A4).
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    # After sessions, before common (Django's documented order): the console speaks en, zh-hans, ja (A3).
    "django.middleware.locale.LocaleMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "core.middleware.AdminQueryNulByteMiddleware",
    "axes.middleware.AxesMiddleware",  # last, as django-axes requires: turns a lockout into its 429 page
]

ROOT_URLCONF = "amuxweb.urls"
WSGI_APPLICATION = "amuxweb.wsgi.application"

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

DATABASES = {"default": env.db("DATABASE_URL", default=f"sqlite:///{BASE_DIR / 'var' / 'amuxweb.sqlite3'}")}
DATABASES["default"]["ATOMIC_REQUESTS"] = False
DATABASES["default"].setdefault("CONN_MAX_AGE", env.int("CONN_MAX_AGE", default=60))
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # WAL lets the web process, the worker and feishu_connect read while one writes. IMMEDIATE: a transaction
    # takes the write lock when it begins and waits (timeout) for it, instead of failing at once with "database
    # is locked" when its read must become a write while another process writes (the embedded default's worker).
    DATABASES["default"].setdefault("OPTIONS", {}).update(
        {"init_command": "PRAGMA journal_mode=WAL;", "timeout": 20, "transaction_mode": "IMMEDIATE"}
    )
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]

# --- Login throttling (django-axes): the admin's login; the API has no password endpoint (tokens come from the
# admin). A user name, and separately an address, is locked out after AXES_FAILURE_LIMIT wrong passwords for
# AXES_COOLOFF_TIME; every further failure restarts the cool-off. Unlock: `manage.py axes_reset_username <name>`
# or `axes_reset_ip <address>` (`axes_reset` unlocks everyone). Behind a proxy set AXES_IPWARE_PROXY_COUNT.
AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",  # first: it refuses a locked-out login before a password is checked
    "django.contrib.auth.backends.ModelBackend",
]
AXES_FAILURE_LIMIT = env.int("AXES_FAILURE_LIMIT", default=5)
AXES_COOLOFF_MINUTES = env.int("AXES_COOLOFF_MINUTES", default=15)
AXES_COOLOFF_TIME = timedelta(minutes=AXES_COOLOFF_MINUTES)
AXES_LOCKOUT_PARAMETERS = ["username", "ip_address"]
AXES_RESET_ON_SUCCESS = True
AXES_IPWARE_PROXY_COUNT = env.int("AXES_IPWARE_PROXY_COUNT", default=None)
AXES_COOLOFF_MESSAGE = (
    f"Too many failed logins for this user or from this address: login is locked for {AXES_COOLOFF_MINUTES} minutes. "
    "An administrator can unlock it with `manage.py axes_reset_username <name>`."
)

LANGUAGE_CODE = "en"
# The console and the bots' own chat replies (Bot.language) speak these; the names show in the switcher.
LANGUAGES = [("en", "English"), ("zh-hans", "简体中文"), ("ja", "日本語")]
LOCALE_PATHS = [BASE_DIR / "locale"]
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = BASE_DIR / "staticfiles"
STATICFILES_DIRS = [BASE_DIR / "static"]
# Production: `manage.py collectstatic` writes hashed, compressed copies that whitenoise serves with far-future
# cache headers. DEBUG runs (and tests) use the plain storage so no collectstatic is needed first.
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {
        "BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"
        if DEBUG
        else "whitenoise.storage.CompressedManifestStaticFilesStorage"
    },
}

# Requests bigger than this are refused before any view runs (Feishu events are a few KiB).
DATA_UPLOAD_MAX_MEMORY_SIZE = env.int("DATA_UPLOAD_MAX_MEMORY_SIZE", default=1024 * 1024)

# --- Security: secure by default, relaxed only for a DEBUG run --------------------------------------------
SECURE_SSL_REDIRECT = env.bool("SECURE_SSL_REDIRECT", default=not DEBUG)
SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
SESSION_COOKIE_SECURE = env.bool("SESSION_COOKIE_SECURE", default=not DEBUG)
CSRF_COOKIE_SECURE = env.bool("CSRF_COOKIE_SECURE", default=not DEBUG)
SECURE_HSTS_SECONDS = env.int("SECURE_HSTS_SECONDS", default=0 if DEBUG else 60 * 60 * 24 * 30)
SECURE_HSTS_INCLUDE_SUBDOMAINS = not DEBUG
SECURE_HSTS_PRELOAD = not DEBUG
SECURE_CONTENT_TYPE_NOSNIFF = True
X_FRAME_OPTIONS = "DENY"

# --- REST API --------------------------------------------------------------------------------------------
REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "rest_framework.authentication.TokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "EXCEPTION_HANDLER": "core.api.exception_handler",
    # JSON with a bounded depth (core.parsers), and the two form parsers the browsable API posts with.
    "DEFAULT_PARSER_CLASSES": [
        "core.parsers.BoundedJSONParser",
        "rest_framework.parsers.FormParser",
        "core.parsers.WordedMultiPartParser",
    ],
    "DEFAULT_RENDERER_CLASSES": [
        "rest_framework.renderers.JSONRenderer",
        "rest_framework.renderers.BrowsableAPIRenderer",
    ],
}
SPECTACULAR_SETTINGS = {
    "TITLE": "amuxweb API",
    "DESCRIPTION": "Threads, history, context and context decisions of amuxweb's agent bots.",
    "VERSION": "1.0.0",
    "SERVE_INCLUDE_SCHEMA": False,
    "POSTPROCESSING_HOOKS": [
        "drf_spectacular.hooks.postprocess_schema_enums",
        "core.api.schema_common_responses",
    ],
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
}

# --- Celery ----------------------------------------------------------------------------------------------
REDIS_URL = env("REDIS_URL", default="")
# Without Redis: kombu's SQLAlchemy transport on its own SQLite file (beside the SQLite database, or under var/),
# so the embedded default queues tasks to a real worker like production does and the webhook answers without
# waiting for a turn. Its own file: the broker's writes never wait for the hub database's single SQLite writer.
# Polled every AMUX_EMBEDDED_BROKER_POLL_SECONDS (the latency a task waits at most before a worker sees it).
_database_file = DATABASES["default"]["NAME"] if DATABASES["default"]["ENGINE"].endswith("sqlite3") else ""
EMBEDDED_BROKER_FILE = env(
    "AMUX_EMBEDDED_BROKER_FILE",
    default=str(
        (Path(_database_file).parent if _database_file and _database_file != ":memory:" else BASE_DIR / "var")
        / "celery-broker.sqlite3"
    ),
)
CELERY_BROKER_URL = REDIS_URL or f"sqlite:///{EMBEDDED_BROKER_FILE}"
if not REDIS_URL:
    CELERY_BROKER_TRANSPORT = "amuxweb.embedded_broker:Transport"
AMUX_EMBEDDED_BROKER_POLL_SECONDS = env.float("AMUX_EMBEDDED_BROKER_POLL_SECONDS", default=0.1)
CELERY_RESULT_BACKEND = None
# Tasks always go to a broker; only the test settings run them eagerly in-process.
CELERY_TASK_ALWAYS_EAGER = False
CELERY_TASK_EAGER_PROPAGATES = env.bool("CELERY_TASK_EAGER_PROPAGATES", default=False)
CELERY_TASK_TIME_LIMIT = 5 * 60
CELERY_TASK_SOFT_TIME_LIMIT = 4 * 60
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_ACKS_ON_FAILURE_OR_TIMEOUT = True
# With acks_late tasks, a killed worker's message comes back after this long (Redis transport).
# (The embedded SQLAlchemy transport takes none: kombu would hand them to SQLAlchemy's create_engine.)
# "priority": a worker takes from its queues in CELERY_TASK_QUEUES' order, not round robin (below).
# Issue 10: kombu looks for messages past their visibility timeout every `unacked_restore_interval` seconds, but
# by default scans Redis only on every 10th look (`unacked_restore_throttle`), so a killed worker's task came back
# up to ~100 s after its timeout; a streamed turn then showed a draft card that long. One scan (a ZRANGE on the
# unacked index) per interval costs nothing; the throttle is set to 1 so the interval alone decides.
CELERY_UNACKED_RESTORE_INTERVAL_SECONDS = env.int("CELERY_UNACKED_RESTORE_INTERVAL", default=10)
CELERY_BROKER_TRANSPORT_OPTIONS = (
    {
        "visibility_timeout": env.int("CELERY_VISIBILITY_TIMEOUT", default=600),
        "queue_order_strategy": "priority",
        "unacked_restore_interval": CELERY_UNACKED_RESTORE_INTERVAL_SECONDS,
        "unacked_restore_throttle": 1,
    }
    if REDIS_URL
    else {}
)
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
# Issue 11: one queue per stage, so a reply never waits behind intake that arrived after it. Every worker
# consumes all of them unless started with `-Q` (a worker without -Q consumes every queue in CELERY_TASK_QUEUES),
# and on Redis it takes from the first non-empty one in this order ("priority"): a stored reply's delivery first,
# then turns, then discuss judges, then new intake, then the sweepers. Dedicated workers: docs/deploying.md.
QUEUE_DELIVERIES, QUEUE_TURNS, QUEUE_PROBE, QUEUE_INTAKE, QUEUE_MAINTENANCE = (
    "deliveries",
    "turns",
    "probe",
    "intake",
    "maintenance",
)
CELERY_TASK_QUEUES = {
    name: {"exchange": name, "routing_key": name}
    for name in (QUEUE_DELIVERIES, QUEUE_TURNS, QUEUE_PROBE, QUEUE_INTAKE, QUEUE_MAINTENANCE)
}
CELERY_TASK_DEFAULT_QUEUE = QUEUE_MAINTENANCE  # beat's sweepers and prunes, and any task not routed below
CELERY_TASK_ROUTES = {
    "amuxweb.feishu.tasks.inbound_event_process": {"queue": QUEUE_INTAKE},
    "agents.tasks.turn_run_task": {"queue": QUEUE_TURNS},
    "agents.tasks.automation_run_task": {"queue": QUEUE_TURNS},
    "amuxweb.feishu.discuss.discuss_wake_fire_task": {"queue": QUEUE_PROBE},
    # K3: a conversation's summary after a turn: a small model call, beside the judges (never the turns' queue).
    "feishu.tasks.context_summary_task": {"queue": QUEUE_PROBE},
    # A delivery's retry goes to QUEUE_DELIVERIES (agents.tasks.turn_run_task picks the queue of its retry).
}
CELERY_BEAT_SCHEDULER = "django_celery_beat.schedulers:DatabaseScheduler"
CELERY_TIMEZONE = TIME_ZONE
# Every periodic task of the hub (amuxweb/settings/beat.py).
CELERY_BEAT_SCHEDULE = BEAT_SCHEDULE

# --- Seed constants (ARCHITECTURE §7) --------------------------------------------------------------------
AMUX_CONTEXT_RETENTION_DAYS = 30
AMUX_MAX_AGENT_OUTPUT_CHARS = 20000
AMUX_MAX_CONTEXT_CHARS = 24000
AMUX_QUOTED_REPLY_MAX_RUNES = 12000
AMUX_THREAD_CONTEXT_LIMIT = 20
# G2: a group's workspace is created with these defaults on the bot's first message there (or when it is added).
AMUX_WORKSPACE_DEFAULT_MODE = env("AMUX_WORKSPACE_DEFAULT_MODE", default="shared")
# G5: how long a process caches a workspace's reply policy (a save in the same process drops it at once).
AMUX_WORKSPACE_CACHE_SECONDS = env.int("AMUX_WORKSPACE_CACHE_SECONDS", default=60)
# G1: after a failed im.v1.chat.get, the chat's mode is read again after this long.
AMUX_FEISHU_CHAT_MODE_RETRY_SECONDS = env.int("AMUX_FEISHU_CHAT_MODE_RETRY_SECONDS", default=3600)
AMUX_FEISHU_TOPIC_ROOT_ENABLED = env.bool("AMUX_FEISHU_TOPIC_ROOT_ENABLED", default=True)
AMUX_FEISHU_SHARED_THREAD_ENABLED = env.bool("AMUX_FEISHU_SHARED_THREAD_ENABLED", default=False)
# Who besides staff may read /api/v1/context/decisions/: a dotted path to check(user, bot_profile) -> bool
# (threadcontext cannot import agents, so the composition root wires it). Default: a bot's owner reads its
# decisions, as with its threads (ARCHITECTURE §7); empty = staff only.
AMUX_CONTEXT_DECISION_ACCESS_CHECK = env(
    "AMUX_CONTEXT_DECISION_ACCESS_CHECK", default="agents.selectors.user_owns_bot_profile"
)

# --- Probe gate (P3, P10): debounce defaults of discuss wakes (a bot may override), config cache -----------
AMUX_PROBE_DEBOUNCE_INITIAL_MS = env.int("AMUX_PROBE_DEBOUNCE_INITIAL_MS", default=3000)
AMUX_PROBE_DEBOUNCE_MAX_MS = env.int("AMUX_PROBE_DEBOUNCE_MAX_MS", default=30000)
AMUX_PROBE_CONFIG_CACHE_SECONDS = env.int("AMUX_PROBE_CONFIG_CACHE_SECONDS", default=60)
# The offline local_rules provider streams its echo word by word with this pause, so a demo shows streaming.
AMUX_LOCAL_RULES_STREAM_DELAY_MS = env.int("AMUX_LOCAL_RULES_STREAM_DELAY_MS", default=40)
# A debounced discuss wake is a task with an eta. Only without a broker (Celery eager) would nothing run it later
# and an in-process timer thread be needed; every environment now has a broker (the embedded one at least).
AMUX_DISCUSS_WAKE_TIMER = CELERY_TASK_ALWAYS_EAGER

# --- Tools through MCP (M1, M2): the turn's tool loop bounds; a server may tighten them -------------------
AMUX_TOOL_MAX_STEPS = env.int("AMUX_TOOL_MAX_STEPS", default=8)
AMUX_TOOL_TIME_BUDGET_SECONDS = env.float("AMUX_TOOL_TIME_BUDGET_SECONDS", default=120.0)
AMUX_TOOL_CALL_TIMEOUT_SECONDS = env.float("AMUX_TOOL_CALL_TIMEOUT_SECONDS", default=30.0)
AMUX_TOOL_CONNECT_TIMEOUT_SECONDS = env.float("AMUX_TOOL_CONNECT_TIMEOUT_SECONDS", default=20.0)
# Tool output is capped before it reaches the model (and the record keeps what the model saw).
AMUX_TOOL_RESULT_MAX_CHARS = env.int("AMUX_TOOL_RESULT_MAX_CHARS", default=16000)

# --- Feishu ----------------------------------------------------------------------------------------------
FEISHU_DOMAIN = env("FEISHU_DOMAIN", default="https://open.feishu.cn")
# Events whose X-Lark-Request-Timestamp is older than this are refused (replay protection).
FEISHU_MAX_EVENT_AGE_SECONDS = 5 * 60
# Webhook bodies above this are refused (413) before lark-oapi sees them; real events are a few KiB.
FEISHU_MAX_BODY_BYTES = env.int("FEISHU_MAX_BODY_BYTES", default=256 * 1024)
# Long connection (G6): where the SDK asks for its websocket endpoint (Feishu: the same domain), and how often
# `feishu_connect` re-reads the bots (enabled, disabled, re-keyed in the admin take effect within this).
FEISHU_LONG_CONNECTION_DOMAIN = env("FEISHU_LONG_CONNECTION_DOMAIN", default="")
FEISHU_LONG_CONNECTION_RECONCILE_SECONDS = env.float("FEISHU_LONG_CONNECTION_RECONCILE_SECONDS", default=30.0)
# D1 (issue 23): a long connection that receives no frame (event or pong) for this long while connected is deaf:
# its child is replaced (feishu.inbound.watchdog; the child pings after a third of it, so a quiet app stays alive).
AMUX_LONGCONN_SILENCE_SECONDS = env.float("AMUX_LONGCONN_SILENCE_SECONDS", default=60.0)
# D2 (issue 23): the admin's "catch up" answers a missed addressed message at most this old; older ones are
# recorded as missed ("this request arrived while the hub was down and was not answered").
AMUX_BACKFILL_ANSWER_WINDOW_SECONDS = env.int("AMUX_BACKFILL_ANSWER_WINDOW_SECONDS", default=600)
# D2: a worker that starts when the hub's heartbeat (stamped by the inbound sweeper) is older than this catches up
# with what every Feishu bot missed (feishu.inbound.hub_start).
AMUX_BACKFILL_AFTER_SECONDS = env.int("AMUX_BACKFILL_AFTER_SECONDS", default=60)
# U4 (issue 35): /schedule limits (running schedules only). 10 per chat holds a team's routines with room to spare;
# 5 per person, across a bot's chats and DMs, keeps one person from filling a chat or multiplying runs through DMs;
# one run per 15 minutes at most caps a chat at 40 scheduled model runs an hour.
AMUX_SCHEDULES_PER_CHAT = env.int("AMUX_SCHEDULES_PER_CHAT", default=10)
AMUX_SCHEDULES_PER_PERSON = env.int("AMUX_SCHEDULES_PER_PERSON", default=5)
AMUX_SCHEDULE_MIN_INTERVAL_MINUTES = env.int("AMUX_SCHEDULE_MIN_INTERVAL_MINUTES", default=15)
# The sweeper re-enqueues inbound events still pending this long after they were stored (broker outage).
FEISHU_SWEEP_PENDING_AFTER_SECONDS = env.int("FEISHU_SWEEP_PENDING_AFTER_SECONDS", default=30)
# Outbound (R2-R4). Feishu's limits: 5 messages/s per chat (shared by every bot in it), 50/s per app; the send
# budget refills at FEISHU_SEND_BUDGET_RATIO of them so network jitter never lands a sixth inside a second.
FEISHU_CHAT_SENDS_PER_SECOND = 5
FEISHU_APP_SENDS_PER_SECOND = 50
FEISHU_SEND_BUDGET_RATIO = 0.9
# Streaming cards: an update at most every FEISHU_STREAM_UPDATE_INTERVAL_MS (Feishu allows 10/s per card), or
# sooner once FEISHU_STREAM_UPDATE_CHARS new characters wait; a new card before Feishu's 10-minute limit.
FEISHU_STREAM_UPDATE_INTERVAL_MS = env.int("FEISHU_STREAM_UPDATE_INTERVAL_MS", default=300)
FEISHU_STREAM_UPDATE_CHARS = 200
FEISHU_STREAM_CARD_SECONDS = 9 * 60
# Images and files of a message (G7), downloaded at turn time and never stored. An image goes to a vision model
# when it is at most FEISHU_ATTACHMENT_IMAGE_MAX_BYTES (Anthropic's limit per image is 5 MB) and of an allowed
# type (read from its first bytes), at most FEISHU_ATTACHMENT_MAX_IMAGES per message. A file whose extension is
# listed is read up to FEISHU_ATTACHMENT_TEXT_MAX_BYTES and inlined as untrusted text, at most
# FEISHU_ATTACHMENT_TEXT_MAX_CHARS per turn (and never more than a quarter of the model's window); any other
# file reaches the model as a label with its name and size. A forward inlines at most
# FEISHU_ATTACHMENT_FORWARD_MAX_MESSAGES of its messages.
# H2: Feishu document links in a request (docx, wiki pages that are docx) are read at turn time as the bot: at most
# FEISHU_DOC_LINKS_MAX_PER_TURN links per message, each cut at FEISHU_DOC_LINK_MAX_CHARS, inside the turn's
# attachment budget (FEISHU_ATTACHMENT_TEXT_MAX_CHARS).
FEISHU_DOC_LINKS_MAX_PER_TURN = env.int("FEISHU_DOC_LINKS_MAX_PER_TURN", default=3)
FEISHU_DOC_LINK_MAX_CHARS = env.int("FEISHU_DOC_LINK_MAX_CHARS", default=20000)
# H3: a voice message to a bot with a transcription model is downloaded (at most FEISHU_VOICE_MAX_BYTES; OpenAI's
# transcription endpoint takes 25 MB) and transcribed when it is at most FEISHU_VOICE_MAX_SECONDS long.
FEISHU_VOICE_MAX_BYTES = env.int("FEISHU_VOICE_MAX_BYTES", default=10 * 1024 * 1024)
FEISHU_VOICE_MAX_SECONDS = env.int("FEISHU_VOICE_MAX_SECONDS", default=600)
FEISHU_ATTACHMENT_IMAGE_MAX_BYTES = env.int("FEISHU_ATTACHMENT_IMAGE_MAX_BYTES", default=5 * 1024 * 1024)
FEISHU_ATTACHMENT_IMAGE_TYPES = env.list(
    "FEISHU_ATTACHMENT_IMAGE_TYPES", default=["image/png", "image/jpeg", "image/gif", "image/webp"]
)
FEISHU_ATTACHMENT_MAX_IMAGES = env.int("FEISHU_ATTACHMENT_MAX_IMAGES", default=4)
FEISHU_ATTACHMENT_TEXT_MAX_BYTES = env.int("FEISHU_ATTACHMENT_TEXT_MAX_BYTES", default=256 * 1024)
FEISHU_ATTACHMENT_TEXT_MAX_CHARS = env.int("FEISHU_ATTACHMENT_TEXT_MAX_CHARS", default=20000)
FEISHU_ATTACHMENT_TEXT_EXTENSIONS = env.list(
    "FEISHU_ATTACHMENT_TEXT_EXTENSIONS",
    default=(
        "txt md markdown csv tsv json jsonl yaml yml toml ini cfg conf log xml html css sql sh py js ts tsx jsx go "
        "rs java kt c h cc cpp hpp cs rb php swift scala lua r m diff patch"
    ).split(),
)
FEISHU_ATTACHMENT_FORWARD_MAX_MESSAGES = env.int("FEISHU_ATTACHMENT_FORWARD_MAX_MESSAGES", default=50)
# The Feishu calls a sandbox bot records for the playground (one row per send and card update) are kept this
# long (pruned daily with the inbound events: CELERY_BEAT_SCHEDULE "feishu-bridge-prune").
AMUX_SANDBOX_CALL_RETENTION_DAYS = env.int("AMUX_SANDBOX_CALL_RETENTION_DAYS", default=7)

# --- Logging: key=value lines for people in DEBUG, JSON lines otherwise -----------------------------------
LOG_LEVEL = env("LOG_LEVEL", default="INFO")
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {
        "keyvalue": {"()": "core.logging.KeyValueFormatter"},
        "json": {"()": "core.logging.JsonFormatter"},
    },
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "keyvalue" if DEBUG else "json"}},
    "root": {"handlers": ["console"], "level": LOG_LEVEL},
    "loggers": {"django.db.backends": {"level": "WARNING"}},
}

# A9: times to the second in every language of the console (amuxweb/formats/).
FORMAT_MODULE_PATH = ["amuxweb.formats"]

# /metrics (A10): a bearer token, else the allowed addresses; per-process counters live in PROMETHEUS_MULTIPROC_DIR
# (docs/deploying.md, Monitoring).
AMUX_METRICS_TOKEN = env("AMUX_METRICS_TOKEN", default="")
AMUX_METRICS_ALLOWED_IPS = env.list("AMUX_METRICS_ALLOWED_IPS", default=["127.0.0.1", "::1"])
PROMETHEUS_MULTIPROC_DIR = env("PROMETHEUS_MULTIPROC_DIR", default=str(BASE_DIR / "var" / "prometheus"))
# A8: the setup page builds each bot's event URL from the hub's public address (empty: from the request).
AMUX_PUBLIC_BASE_URL = env("AMUX_PUBLIC_BASE_URL", default="")
