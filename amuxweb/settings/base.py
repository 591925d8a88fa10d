"""Settings for every environment, read from the environment (and `.env` when present).

The embedded default needs nothing set: SQLite under var/, Celery eager, DEBUG on only when asked.
Production sets DATABASE_URL, REDIS_URL, SECRET_KEY, FIELD_ENCRYPTION_KEY and ALLOWED_HOSTS.
"""

from amuxweb.env import BASE_DIR, env

DEBUG = env.bool("DEBUG", default=False)

# An insecure key is only acceptable for a DEBUG (local) run; production must set SECRET_KEY.
SECRET_KEY = env("SECRET_KEY", default="insecure-local-key-set-SECRET_KEY-in-production" if DEBUG else None)
if not SECRET_KEY:
    from django.core.exceptions import ImproperlyConfigured

    raise ImproperlyConfigured("SECRET_KEY must be set when DEBUG is off.")

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
    "django_celery_beat",
    "agents",
    "threadcontext",
    "probe",
    "amuxweb.feishu",
    "amuxweb.dashboard",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "amuxweb.middleware.AdminQueryNulByteMiddleware",
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
    # WAL lets the web process and an eager worker read while one writes.
    DATABASES["default"].setdefault("OPTIONS", {}).update({"init_command": "PRAGMA journal_mode=WAL;", "timeout": 20})
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

STATIC_URL = "static/"
STATIC_ROOT = BASE_DIR / "staticfiles"

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
    "EXCEPTION_HANDLER": "amuxweb.api.exception_handler",
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
}

# --- Celery ----------------------------------------------------------------------------------------------
REDIS_URL = env("REDIS_URL", default="")
CELERY_BROKER_URL = REDIS_URL or "memory://"
CELERY_RESULT_BACKEND = None
# Without Redis the hub runs every task in-process, right away: the embedded default needs no broker.
CELERY_TASK_ALWAYS_EAGER = not REDIS_URL
CELERY_TASK_EAGER_PROPAGATES = env.bool("CELERY_TASK_EAGER_PROPAGATES", default=False)
CELERY_TASK_TIME_LIMIT = 5 * 60
CELERY_TASK_SOFT_TIME_LIMIT = 4 * 60
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_ACKS_ON_FAILURE_OR_TIMEOUT = True
# With acks_late tasks, a killed worker's message comes back after this long (Redis transport).
CELERY_BROKER_TRANSPORT_OPTIONS = {"visibility_timeout": env.int("CELERY_VISIBILITY_TIMEOUT", default=600)}
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_BEAT_SCHEDULER = "django_celery_beat.schedulers:DatabaseScheduler"
CELERY_TIMEZONE = TIME_ZONE
CELERY_BEAT_SCHEDULE: dict = {}

# --- Seed constants (ARCHITECTURE §7) --------------------------------------------------------------------
AMUX_CONTEXT_RETENTION_DAYS = 30
AMUX_MAX_AGENT_OUTPUT_CHARS = 20000
AMUX_MAX_CONTEXT_CHARS = 24000
AMUX_QUOTED_REPLY_MAX_RUNES = 12000
AMUX_THREAD_CONTEXT_LIMIT = 20
AMUX_FEISHU_TOPIC_ROOT_ENABLED = env.bool("AMUX_FEISHU_TOPIC_ROOT_ENABLED", default=True)
AMUX_FEISHU_SHARED_THREAD_ENABLED = env.bool("AMUX_FEISHU_SHARED_THREAD_ENABLED", default=False)
# C13: the daily retention sweep for quiet hubs (writes also prune, at most once a minute per process).
CELERY_BEAT_SCHEDULE["thread-context-prune"] = {
    "task": "threadcontext.tasks.thread_context_prune",
    "schedule": 24 * 3600.0,
}
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
CELERY_BEAT_SCHEDULE["probe-judgements-prune"] = {"task": "probe.tasks.judgements_prune_task", "schedule": 24 * 3600.0}
# T2: REST turns whose enqueue was lost while the broker was down are re-enqueued (agents.services.turns).
CELERY_BEAT_SCHEDULE["agents-turns-sweep"] = {"task": "agents.tasks.turns_sweep_task", "schedule": 60.0}
CELERY_BEAT_SCHEDULE["feishu-discuss-wakes-sweep"] = {
    "task": "amuxweb.feishu.discuss.discuss_wakes_sweep",
    "schedule": 5.0,
}
# The discuss wake's tasks live in the bridge's discuss module, which autodiscovery (tasks.py) does not import.
CELERY_IMPORTS = ("amuxweb.feishu.discuss",)
# Without a broker (Celery eager, the embedded default) nothing runs a task later: a debounced discuss wake is
# then fired by an in-process timer thread instead of a task with an eta.
AMUX_DISCUSS_WAKE_TIMER = True

# --- Feishu ----------------------------------------------------------------------------------------------
FEISHU_DOMAIN = env("FEISHU_DOMAIN", default="https://open.feishu.cn")
# Events whose X-Lark-Request-Timestamp is older than this are refused (replay protection).
FEISHU_MAX_EVENT_AGE_SECONDS = 5 * 60
# Webhook bodies above this are refused (413) before lark-oapi sees them; real events are a few KiB.
FEISHU_MAX_BODY_BYTES = env.int("FEISHU_MAX_BODY_BYTES", default=256 * 1024)
# The sweeper re-enqueues inbound events still pending this long after they were stored (broker outage).
FEISHU_SWEEP_PENDING_AFTER_SECONDS = env.int("FEISHU_SWEEP_PENDING_AFTER_SECONDS", default=30)
CELERY_BEAT_SCHEDULE["feishu-inbound-sweep"] = {"task": "amuxweb.feishu.tasks.inbound_events_sweep", "schedule": 30.0}
# F2 needs inbound events past Feishu's 7.1 h retry window; they are kept 30 days, then pruned daily.
CELERY_BEAT_SCHEDULE["feishu-bridge-prune"] = {
    "task": "amuxweb.feishu.tasks.bridge_records_prune",
    "schedule": 24 * 3600.0,
}

# --- Logging: key=value lines for people in DEBUG, JSON lines otherwise -----------------------------------
LOG_LEVEL = env("LOG_LEVEL", default="INFO")
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {
        "keyvalue": {"()": "amuxweb.logging.KeyValueFormatter"},
        "json": {"()": "amuxweb.logging.JsonFormatter"},
    },
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "keyvalue" if DEBUG else "json"}},
    "root": {"handlers": ["console"], "level": LOG_LEVEL},
    "loggers": {"django.db.backends": {"level": "WARNING"}},
}
