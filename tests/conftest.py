"""Fixtures shared by every app's tests. App-specific fixtures live in tests/<app>/conftest.py, plain helpers
(`wait_for`) in tests/helpers.py.

`admin_client` is pytest-django's own (a client logged in as the staff superuser "admin"): no test module
redefines it, so every admin test runs as the same kind of user.
"""

import pytest
from celery._state import _set_task_join_will_block
from rest_framework.test import APIClient

pytest_plugins = ["tests.isolation"]  # no test leaves a loop, thread, process or environment change behind


@pytest.fixture
def api_client() -> APIClient:
    return APIClient()


# --- LLM stub server and real Celery worker (engineer "c", issue 4) -------------------------------------
# Tests marked `celery_worker` run against a real `celery -A amuxweb worker` subprocess (when REDIS_URL is set
# and the database is PostgreSQL, which the worker process can share); every other test runs Celery tasks
# eagerly in-process even when REDIS_URL is set, so the suite behaves the same in both CI runs.
import os  # noqa: E402
import signal  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402
from urllib.parse import urlsplit, urlunsplit  # noqa: E402

from tests.stubs.llm_servers import llm_stub  # noqa: E402,F401  (the fixture, for every test)

CELERY_WORKER_READY_TIMEOUT_SECONDS = 60
# A SIGKILLed worker's unacknowledged task comes back after this long (kombu's Redis visibility timeout).
CELERY_WORKER_VISIBILITY_TIMEOUT_SECONDS = 3


@pytest.fixture(autouse=True)
def _fresh_process_cache():
    """Cached rows (a workspace's reply policy, a bot's gate config, an event's bot) never leak from one test into
    the next (SQLite hands a rolled-back row's pk out again)."""
    from django.core.cache import cache

    from agents.secrets import hub_secrets_forget
    from feishu.inbound import intake

    cache.clear()
    intake._bots.clear()
    hub_secrets_forget()
    yield
    cache.clear()
    intake._bots.clear()
    hub_secrets_forget()


@pytest.fixture(autouse=True)
def _celery_eager_unless_real_worker(request):
    """Run tasks in-process for every test not marked `celery_worker` (REDIS_URL or not)."""
    if request.node.get_closest_marker("celery_worker"):
        yield
        return
    from amuxweb.celery import app

    saved = (app.conf.task_always_eager, app.conf.task_eager_propagates)
    app.conf.task_always_eager, app.conf.task_eager_propagates = True, True
    try:
        yield
    finally:
        app.conf.task_always_eager, app.conf.task_eager_propagates = saved
        # Celery's eager apply_async sets a process-wide "inside a task" flag around each run and restores the value
        # it found: two threads running eager tasks at once (the conversation-order and steer tests) can leave it
        # set, and a later test's `.get()` would refuse to block.
        _set_task_join_will_block(False)


class CeleryWorkerProcess:
    """`celery -A amuxweb worker` in its own process group, on the pytest test database."""

    def __init__(self, *, database_url: str, redis_url: str, name: str = "pytest") -> None:
        self.name = name  # its hostname's prefix: two workers of one run must not share a node name
        self.env = {
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "amuxweb.settings.test",
            "DATABASE_URL": database_url,
            "REDIS_URL": redis_url,
            "CELERY_VISIBILITY_TIMEOUT": str(CELERY_WORKER_VISIBILITY_TIMEOUT_SECONDS),
        }
        self.log_path = Path(tempfile.mkstemp(prefix="celery-worker-", suffix=".log")[1])
        self.process: subprocess.Popen | None = None
        self._offset = 0
        self.pool_args = ["--pool=solo"]  # a test of the prefork pool's children sets the Procfile's own

    def start(self) -> None:
        self.launch()
        self.wait_ready()

    def launch(self) -> None:
        """Start the process without waiting for it (two workers started together import side by side)."""
        command = [sys.executable, "-m", "celery", "-A", "amuxweb", "worker", *self.pool_args, "--loglevel=INFO"]
        command += [
            "--without-gossip",
            "--without-mingle",
            "--without-heartbeat",
            f"--hostname={self.name}-{os.getpid()}@%h",
        ]
        self._offset = self.log_path.stat().st_size
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                command,
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                cwd=Path(__file__).parents[1],
            )

    def wait_ready(self) -> None:
        deadline = time.monotonic() + CELERY_WORKER_READY_TIMEOUT_SECONDS
        while time.monotonic() < deadline:
            if " ready." in self.log_path.read_text(errors="replace")[self._offset :]:
                return
            if self.process.poll() is not None:
                break
            time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"celery worker did not start; log:\n{self.log_tail()}")

    def is_running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def kill(self) -> None:
        """SIGKILL the whole worker (its process group): no shutdown handler runs, nothing is acknowledged."""
        if self.process is not None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=10)

    def stop(self) -> None:
        if self.is_running():
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.kill()

    def log_tail(self, lines: int = 60) -> str:
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])


@pytest.fixture(scope="session")
def celery_worker_process(django_db_setup, django_db_blocker):
    """A real worker for `@pytest.mark.celery_worker` tests; skips unless REDIS_URL is set and the DB is PostgreSQL."""
    from django.conf import settings

    redis_url, database_url = os.environ.get("REDIS_URL", ""), os.environ.get("DATABASE_URL", "")
    if not redis_url:
        pytest.skip("needs a real Celery worker: set REDIS_URL (CI's PostgreSQL + Redis run does)")
    if not database_url.startswith(("postgres://", "postgresql://")):
        pytest.skip("needs PostgreSQL (DATABASE_URL): the worker process must share the pytest test database")
    # pytest-django renamed the database to its test database (test_<name>): point the worker there.
    parts = urlsplit(database_url)
    test_database_url = urlunsplit(parts._replace(path="/" + settings.DATABASES["default"]["NAME"]))
    worker = CeleryWorkerProcess(database_url=test_database_url, redis_url=redis_url)
    from amuxweb.celery import app

    app.control.purge()  # tasks left in the broker by an earlier, interrupted run
    worker.start()
    try:
        yield worker
    finally:
        worker.stop()


@pytest.fixture
def celery_worker(celery_worker_process):
    """The session's worker, (re)started if a previous test killed it."""
    if not celery_worker_process.is_running():
        celery_worker_process.start()
    return celery_worker_process


@pytest.fixture(scope="module")
def celery_worker_env() -> dict[str, str]:
    """Environment the module's pair of workers gets on top of the session worker's (a module overrides this
    fixture, e.g. with a Feishu stub's domain as AMUX_TEST_FEISHU_DOMAIN)."""
    return {}


@pytest.fixture(scope="module")
def celery_worker_pair(celery_worker_process, celery_worker_env):
    """Two real workers on one database and broker for a module (O1 across processes, issue 22): the session's,
    and a second with a hostname of its own, stopped at the module's end; both get `celery_worker_env` (the
    session's is restarted for it when it differs; the running process keeps it after the module, its next start
    does not). Skips where `celery_worker_process` does (no REDIS_URL or no PostgreSQL)."""
    first = celery_worker_process
    saved = {key: first.env.get(key) for key in celery_worker_env}
    second = CeleryWorkerProcess(
        database_url=first.env["DATABASE_URL"], redis_url=first.env["REDIS_URL"], name="pytest-second"
    )
    second.env.update(celery_worker_env)
    restart_first = not first.is_running() or any(first.env.get(k) != v for k, v in celery_worker_env.items())
    if restart_first:
        first.stop()
        first.env.update(celery_worker_env)
        first.launch()
    second.launch()
    try:
        if restart_first:
            first.wait_ready()
        second.wait_ready()
        yield first, second
    finally:
        second.stop()
        for key, value in saved.items():  # the next restart of the session's worker is as it was
            if value is None:
                first.env.pop(key, None)
            else:
                first.env[key] = value


# --- end of engineer "c" section ---------------------------------------------------------------------------
