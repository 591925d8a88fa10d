"""Settings modules (issue 12 item 3): manage.py works on a fresh clone, production is chosen explicitly, and the
embedded default queues tasks to a broker that needs no server (eager mode is for the test suite only)."""

import json
import os
import sqlite3
import subprocess
import sys
from contextlib import closing
from pathlib import Path

from django.conf import settings
from kombu import Connection

BASE_DIR = Path(__file__).resolve().parent.parent
PRINT_SETTINGS = (
    "import json; from django.conf import settings as s; print(json.dumps({"
    "'debug': s.DEBUG, 'broker': s.CELERY_BROKER_URL, 'transport': getattr(s, 'CELERY_BROKER_TRANSPORT', None),"
    "'eager': s.CELERY_TASK_ALWAYS_EAGER, 'timer': s.AMUX_DISCUSS_WAKE_TIMER, 'module': s.SETTINGS_MODULE}))"
)


def _manage(*args: str, **env_overrides: str) -> subprocess.CompletedProcess:
    # A fresh clone's shell: none of the variables a developer might have set, no .env (the repo has none).
    dropped = {"DEBUG", "SECRET_KEY", "DJANGO_SETTINGS_MODULE", "PYTEST_CURRENT_TEST", "REDIS_URL", "DATABASE_URL"}
    env = {key: value for key, value in os.environ.items() if key not in dropped}
    env.update(env_overrides)
    return subprocess.run(
        [sys.executable, "manage.py", *args], cwd=BASE_DIR, env=env, capture_output=True, text=True, timeout=600
    )


def test_a_fresh_clone_runs_manage_py_without_setting_anything(tmp_path):
    # when: nothing set at all
    result = _manage("check", DATABASE_URL=f"sqlite:///{tmp_path / 'hub.sqlite3'}")
    # then
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "System check identified no issues (0 silenced)."


def test_production_chosen_explicitly_without_a_secret_key_says_what_to_set_in_one_line():
    # when
    result = _manage("check", DJANGO_SETTINGS_MODULE="amuxweb.settings.production")
    # then: one line, no traceback
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert result.stderr == (
        "Configuration error (amuxweb.settings.production): SECRET_KEY must be set when DEBUG is off. These are "
        "the production settings; for a local run use DJANGO_SETTINGS_MODULE=amuxweb.settings.local (manage.py's "
        "default) or set DEBUG=true.\n"
    )


def test_the_embedded_default_queues_to_a_sqlite_broker_beside_the_database_not_eagerly(tmp_path):
    # given: no REDIS_URL, the database in a directory of its own
    database = tmp_path / "data" / "hub.sqlite3"
    database.parent.mkdir()
    # when
    result = _manage("shell", "-c", PRINT_SETTINGS, DATABASE_URL=f"sqlite:///{database}")
    # then
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout.strip().splitlines()[-1]) == {
        "debug": True,
        "broker": f"sqlite:///{database.parent / 'celery-broker.sqlite3'}",
        "transport": "amuxweb.embedded_broker:Transport",
        "eager": False,
        "timer": False,  # a broker runs discuss wakes' eta tasks: no in-process timer thread
        "module": "amuxweb.settings.local",
    }


def test_with_redis_the_broker_is_redis_and_still_not_eager(tmp_path):
    result = _manage(
        "shell",
        "-c",
        PRINT_SETTINGS,
        DATABASE_URL=f"sqlite:///{tmp_path / 'hub.sqlite3'}",
        REDIS_URL="redis://127.0.0.1:6379/9",
    )
    assert result.returncode == 0, result.stderr
    values = json.loads(result.stdout.strip().splitlines()[-1])
    assert (values["broker"], values["transport"], values["eager"]) == ("redis://127.0.0.1:6379/9", None, False)


def test_eager_mode_is_the_test_settings_only():
    assert settings.SETTINGS_MODULE == "amuxweb.settings.test"
    assert settings.CELERY_TASK_ALWAYS_EAGER is not bool(os.environ.get("REDIS_URL"))


def test_the_embedded_broker_carries_a_message_through_its_sqlite_file(tmp_path, settings):
    # given: the transport the embedded default uses, on a fresh file
    settings.AMUX_EMBEDDED_BROKER_POLL_SECONDS = 0.05
    broker = tmp_path / "celery-broker.sqlite3"
    with Connection(f"sqlite:///{broker}", transport="amuxweb.embedded_broker:Transport") as connection:
        queue = connection.SimpleQueue("intake-check")
        # when
        queue.put({"event": 1})
        message = queue.get(timeout=5)
        # then
        assert message.payload == {"event": 1}
        message.ack()
        assert connection.transport.polling_interval == 0.05
        queue.close()
    assert broker.exists()
    # in WAL mode: an idle poll (a write transaction) and a publish never wait for a journal file's syncs
    with closing(sqlite3.connect(broker)) as database:
        assert database.execute("PRAGMA journal_mode").fetchone() == ("wal",)
