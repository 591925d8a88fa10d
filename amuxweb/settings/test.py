"""Test settings: the base settings plus the few overrides a fast, hermetic test run needs."""

import os
import tempfile

os.environ.setdefault("SECRET_KEY", "test-secret-key-not-for-production-0123456789abcdefghijklmnopqrstuvwxyz")

from amuxweb.settings.base import *  # noqa: E402,F403
from amuxweb.settings.base import DATABASES, REDIS_URL  # noqa: E402

DEBUG = False
SECURE_SSL_REDIRECT = False
SESSION_COOKIE_SECURE = False
CSRF_COOKIE_SECURE = False
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
# Eager unless the run is against a real broker (CI's PostgreSQL + Redis run starts a real worker).
CELERY_TASK_ALWAYS_EAGER = not REDIS_URL
if not REDIS_URL:
    CELERY_BROKER_URL = "memory://"  # hermetic: eager tasks never touch the embedded broker's file
    # None (Celery's default: the URL's transport); base.py's value is a str. Drop the ignore once base.py
    # declares the setting `str | None`.
    CELERY_BROKER_TRANSPORT = None  # type: ignore[assignment]
CELERY_TASK_EAGER_PROPAGATES = True
# Nothing listens there: a test that forgets its stub server fails loudly. A real worker started by a test is
# pointed at that test's stub through AMUX_TEST_FEISHU_DOMAIN.
FEISHU_DOMAIN = os.environ.get("AMUX_TEST_FEISHU_DOMAIN", "http://127.0.0.1:9")
AMUX_DISCUSS_WAKE_TIMER = False  # tests fire discuss wakes explicitly (an injected clock), never from a thread
AMUX_LOCAL_RULES_STREAM_DELAY_MS = 0  # local_rules streams at once in tests

if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    DATABASES["default"]["OPTIONS"] = {"timeout": 20}

# Tests render pages without running collectstatic first: the plain storage, not the production manifest.
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
}
# No collectstatic in tests: whitenoise finds files through the finders, as in a DEBUG run.
STATIC_ROOT = None  # type: ignore[assignment]  # Django's default; base.py's is a Path (see the ignore above)
WHITENOISE_USE_FINDERS = True

# The per-process metric files of this test run (core.metrics), never the served hub's var/prometheus.
PROMETHEUS_MULTIPROC_DIR = os.path.join(tempfile.gettempdir(), f"amux-test-prometheus-{os.getpid()}")
